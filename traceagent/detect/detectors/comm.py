"""Communication on one rank: collective kernels' time and how much of it compute does not hide
(across ranks, who waits for whom: stragglers.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...format import percent
from ...trace.model import Trace, per_category
from ..core import intervals as iv
from ..core.view import DeviceView, device_time_ns, on_device, pct, us, views_of
from .base import Detector, Key
from .collectives import KIND_NAMES, collective_kind
from .streams import SharedStream, shared_streams


class Collective(TypedDict):
    name: str
    count: int
    total_us: float


@dataclass(frozen=True)
class CollectiveKind:
    """One kind of collective on the rank: its kernels' time and the part of it no compute overlaps."""

    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, gather_scatter, other
    kernels: int
    time_us: float  # the union of its kernels' intervals, on every device
    exposed_us: float  # of that, while no compute kernel ran
    exposed_pct: float  # of time_us


@dataclass(frozen=True)
class CommResult:
    """Collectives on one rank (all its devices). exposed: not overlapped by any compute kernel.
    Percentages without a qualifier are over device time (the devices' spans added up)."""

    kernels: int
    comm_us: float
    share_pct: float  # comm over device time
    exposed_us: float
    exposed_pct: float  # exposed over device time: what hiding it would save at most
    exposed_of_comm_pct: float  # exposed over comm time: how much of communication is not hidden
    top: list[Collective]  # the collectives taking the most time
    # 2.10: by kind (the launching op's word first: NCCL runs an all-to-all as SendRecv kernels), most time first
    kinds: list[CollectiveKind] = field(default_factory=list)
    # streams where collectives take turns with compute kernels: no overlap is possible there
    shared_streams: list[SharedStream] = field(default_factory=list)
    # 2.13: compute kernels' time in the same scope (each device's union, summed as comm_us is), and
    # communication over it: "what is the communication to computation ratio?" (None without compute)
    compute_us: float = 0.0
    comm_to_compute_x: float | None = None


def detect_comm(trace: Trace, top: int = 5, device: int | None = None) -> CommResult:
    """Collectives on every device of the rank, or on one."""
    views = views_of(trace, device)
    span = device_time_ns(views)
    comm = exposed = compute = 0
    for view in views:
        comm += iv.length(view.comm)
        exposed += iv.length(view.exposed_comm)
        compute += iv.length(view.compute)
    kernels = on_device(trace.gpu, device)
    kernels = kernels[kernels["is_comm"]]
    by_name = (kernels.assign(dur=kernels["end"] - kernels["start"]).groupby("name", observed=True)["dur"]
               .agg(["size", "sum"]).sort_values("sum", ascending=False).head(top))
    return CommResult(
        kernels=len(kernels), comm_us=us(comm), share_pct=pct(comm, span), exposed_us=us(exposed),
        exposed_pct=pct(exposed, span), exposed_of_comm_pct=pct(exposed, comm),
        top=[Collective(name=str(n), count=int(r["size"]), total_us=us(r["sum"])) for n, r in by_name.iterrows()],
        shared_streams=[s for s in shared_streams(trace) if device is None or s.device == device],
        kinds=_by_kind(kernels, views), compute_us=us(compute),
        comm_to_compute_x=round(comm / compute, 3) if compute else None,
    )


def _by_kind(kernels: pd.DataFrame, views: list[DeviceView]) -> list[CollectiveKind]:
    """Each kind's time and exposed part, per device (a kind's own union against that device's exposed
    collective time; kinds running at once each count it)."""
    if kernels.empty:
        return []
    # a kernel's kind: its launching op's word where it says one, else its name's, else other
    kinds = (*KIND_NAMES, "other")
    by_op, by_name = _kind_numbers(kernels["op"], kinds), _kind_numbers(kernels["name"], kinds)
    kind = np.where(by_op >= 0, by_op, np.where(by_name >= 0, by_name, len(kinds) - 1))
    device = kernels["device"].to_numpy()
    start, end = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    rows = []
    for number in np.unique(kind):  # a few kinds
        name, mine = kinds[number], kind == number
        time = exposed = 0
        for view in views:
            here = mine & (device == view.device)
            union = iv.union(start[here], end[here])
            time += iv.length(union)
            exposed += iv.length(iv.intersect(union, view.exposed_comm))
        rows.append(CollectiveKind(name, int(mine.sum()), us(time), us(exposed), pct(exposed, time)))
    return sorted(rows, key=lambda r: -r.time_us)


def _kind_numbers(column: pd.Series, kinds: tuple[str, ...]) -> np.ndarray:
    """Each row's kind of collective as its place in `kinds`, -1 where its string says none: each
    distinct string read once, then a lookup by code (-1, no string, takes the last entry: none)."""
    return per_category(column, lambda v: kinds.index(k) if (k := collective_kind(v)) else -1, -1, np.int64)


def comm_findings(result: CommResult, on: str) -> list[tuple[str, str]]:
    return [(f"communication exposed {percent(result.exposed_of_comm_pct)}",
             f"Is communication overlapped{on}?")] if result.kernels else []


DETECTOR = Detector("comm", "Communication", "Collective kernels, their time and the part no compute overlaps.", None,
                    CommResult, lambda i, p: detect_comm(i.trace), keys=(Key("comm", CommResult),), place=13, tool=False,
                    findings=comm_findings)
