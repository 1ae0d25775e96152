"""Data movement: copies by kind, bytes, time, achieved bandwidth, pageable copies, and how much
copy time no compute overlaps."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...format import percent
from ...trace.model import Trace
from ..core import intervals as iv
from ..core.view import device_time_ns, gbps, on_device, pct, us, views_of
from .base import Detector, Key


@dataclass(frozen=True)
class CopyKind:
    count: int
    bytes: int
    us: float  # summed copy durations
    gbps: float  # achieved: bytes / summed duration
    pageable_count: int
    pageable_bytes: int
    exposed_us: float  # copy time that no compute kernel overlaps


@dataclass(frozen=True)
class MemcpyResult:
    """Copies on one rank, over all its devices. Percentages are over device time (the devices'
    spans added up; one device's span when there is one): share_pct is the time any copy ran."""

    count: int
    bytes: int
    us: float
    share_pct: float
    exposed_us: float  # copy time with no compute kernel running on the same device
    exposed_pct: float  # exposed_us over device time
    pageable_count: int
    pageable_bytes: int
    by_kind: dict[str, CopyKind]
    memset_count: int
    memset_us: float
    side_stream_bytes: int = 0  # copied on streams where no compute kernel runs


def detect_memcpy(trace: Trace, device: int | None = None) -> MemcpyResult:
    """Copies on every device of the rank, or on one."""
    views = views_of(trace, device)
    span = device_time_ns(views)
    union_ns = exposed_ns = side_bytes = 0
    frames = []
    for view in views:
        union_ns += iv.length(view.memcpy)
        exposed_ns += iv.length(iv.subtract(view.memcpy, view.compute))
        copies = view.work[(view.work["kind"] == "memcpy").to_numpy()]
        if len(copies):
            # unique streams, not set(): no Python pass over every kernel of a launch-bound trace
            compute_streams = view.work.loc[(view.work["kind"] == "kernel").to_numpy()
                                            & ~view.work["is_comm"].to_numpy(), "stream"].unique()
            side_bytes += int(copies.loc[~copies["stream"].isin(compute_streams), "bytes"].sum())
            cover = iv.covered(view.compute, copies["start"].to_numpy(), copies["end"].to_numpy())
            frames.append(copies.assign(dur=copies["end"] - copies["start"],
                                        exposed=(copies["end"] - copies["start"]).to_numpy() - cover))
    columns = ["copy_kind", "bytes", "dur", "exposed", "src_kind", "dst_kind"]
    copies = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    # a pageable end on either side makes the copy staged and synchronous for the host
    pageable = copies["src_kind"].astype(object).eq("pageable") | copies["dst_kind"].astype(object).eq("pageable")
    by_kind = {}
    for kind, rows in copies.groupby(copies["copy_kind"].astype(str)):
        dur = int(rows["dur"].sum())
        page = pageable.loc[rows.index]
        by_kind[kind] = CopyKind(
            count=len(rows), bytes=int(rows["bytes"].sum()), us=us(dur),
            gbps=gbps(rows["bytes"].sum(), dur),
            pageable_count=int(page.sum()), pageable_bytes=int(rows.loc[page, "bytes"].sum()),
            exposed_us=us(rows["exposed"].sum()),
        )
    memsets = on_device(trace.gpu, device)
    memsets = memsets[memsets["kind"] == "memset"]
    return MemcpyResult(
        count=len(copies), bytes=int(copies["bytes"].sum()), us=us(copies["dur"].sum()),
        share_pct=pct(union_ns, span), exposed_us=us(exposed_ns), exposed_pct=pct(exposed_ns, span),
        pageable_count=int(pageable.sum()), pageable_bytes=int(copies.loc[pageable, "bytes"].sum()),
        by_kind=by_kind, memset_count=len(memsets), memset_us=us((memsets["end"] - memsets["start"]).sum()),
        side_stream_bytes=side_bytes,
    )


def memcpy_findings(result: MemcpyResult, on: str) -> list[tuple[str, str]]:
    return [(f"copies {percent(result.share_pct)}, {result.pageable_count} pageable",
             f"How much time goes to memcpy{on}?")] if result.count else []


DETECTOR = Detector("memcpy", "Copies", "Copies by kind, pageable or pinned, their bandwidth and the part no compute hides.",
                    None, MemcpyResult, lambda i, p: detect_memcpy(i.trace), keys=(Key("memcpy", MemcpyResult),),
                    place=12, tool=False, findings=memcpy_findings)
