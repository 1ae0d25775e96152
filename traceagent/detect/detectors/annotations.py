"""User annotations (record_function, NVTX ranges): how much GPU work each named range launched."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...format import duration, percent, shorten
from ...trace.model import Trace, among, matches
from ..core import intervals as iv
from ..core.host import kernel_launches, reach_of_earlier
from ..core.view import on_device, pct, us
from .base import Detector


def launched_gpu_ns(trace: Trace, ranges: pd.DataFrame, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each host range (rows with tid, start, end): the device ns and the number of the
    kernels whose launch call lies inside it on its thread (on every GPU, or one)."""
    gpu_ns = np.zeros(len(ranges))
    count = np.zeros(len(ranges))
    if ranges.empty:
        return gpu_ns, count
    launched = on_device(kernel_launches(trace), device)
    for tid, group in launched.groupby("tid"):  # one pass per launching thread, not per range
        order = np.argsort(group["start_call"].to_numpy())
        at = group["start_call"].to_numpy()[order]
        cum = np.concatenate([[0], np.cumsum((group["end"] - group["start"]).to_numpy()[order])])
        mine = (ranges["tid"] == tid).to_numpy()
        lo = np.searchsorted(at, ranges["start"].to_numpy()[mine], side="left")
        hi = np.searchsorted(at, ranges["end"].to_numpy()[mine], side="right")
        gpu_ns[mine] += cum[hi] - cum[lo]
        count[mine] += hi - lo
    return gpu_ns, count


#: host events that are ranges of the user's code, which a name asked can mean: a record_function or NVTX range, an
#: op (older traces record record_function as one: `Optimizer.zero_grad#SGD.zero_grad`), a Python function, a batch
HOST_RANGES = ("annotation", "op", "python", "dataloader")


def host_ranges_named(trace: Trace, word: str) -> np.ndarray:
    """Which host events are ranges (HOST_RANGES) whose name holds `word`, in any case."""
    cpu = trace.cpu
    return among(cpu["kind"], HOST_RANGES) & matches(cpu["name"], re.compile(re.escape(word), re.I))


def range_instances(trace: Trace, device: int | None = None, gaps: pd.DataFrame | None = None,
                    name_filter: str | None = None) -> pd.DataFrame:
    """Every annotation range (with `name_filter`: every host range whose name holds it, whatever its kind):
    name, start, host ns, the device ns and count of the kernels launched inside it on its thread (on every
    GPU, or one), and the device idle ns while it ran (from `gaps`). Each counts only the time no earlier
    instance of its name on its thread already covers: a range nested in another of its name (a module called
    inside itself) adds nothing twice, so a name's sums stay within its thread's time."""
    cpu = trace.cpu
    if name_filter is None:
        ranges = cpu[cpu["kind"] == "annotation"]
    else:
        ranges = cpu[host_ranges_named(trace, name_filter)]
    start, end = ranges["start"].to_numpy(np.int64), ranges["end"].to_numpy(np.int64)
    own_start = np.minimum(np.maximum(start, reach_of_earlier(ranges)), end)  # [own_start, end): its own time
    own = ranges.assign(start=own_start)
    gpu_ns, count = launched_gpu_ns(trace, own, device)
    empty = own_start >= end  # wholly inside an earlier instance: its launches are that one's
    gpu_ns[empty], count[empty] = 0, 0
    idle_ns = np.zeros(len(ranges))
    if gaps is not None and len(gaps) and len(ranges):
        chosen = gaps if device is None else gaps[gaps["device"] == device]
        idle = iv.union(chosen["start"].to_numpy(np.int64), chosen["end"].to_numpy(np.int64))
        idle_ns = iv.covered(idle, own_start, end)
    return pd.DataFrame({"name": ranges["name"].astype(str).to_numpy(), "start": start,
                         "host_ns": end - own_start, "gpu_ns": gpu_ns, "kernels": count, "idle_ns": idle_ns})


def annotation_table(instances: pd.DataFrame) -> pd.DataFrame:
    """Per annotation name: instances, host ns, GPU µs, kernels and idle µs (see range_instances)."""
    columns = ["name", "count", "host_ns", "gpu_us", "kernels", "idle_us"]
    if instances.empty:
        return pd.DataFrame(columns=columns)
    by = instances.groupby("name")  # sums and size apart: pandas' named aggregation costs twice as much
    grouped = by[["host_ns", "gpu_ns", "kernels", "idle_ns"]].sum().assign(count=by.size()).reset_index()
    return grouped.assign(gpu_us=grouped["gpu_ns"] / 1000.0, idle_us=grouped["idle_ns"] / 1000.0)[columns]


@dataclass(frozen=True)
class AnnotatedRange:
    name: str
    count: int
    host_us: float
    gpu_us: float  # device time of the kernels launched inside it
    kernels: int
    share_of_busy_pct: float  # that device time over the rank's busy time
    idle_pct: float  # device idle time while it ran, over its host time
    idle_us: float = 0.0  # device idle time while it ran
    share_of_idle_pct: float = 0.0  # that idle time over the rank's idle time


class RangeGpu(TypedDict):
    name: str
    gpu_us: float


class StepRanges(TypedDict):
    """One step's ranges with the most device time launched inside them."""

    step: int
    ranges: list[RangeGpu]


@dataclass(frozen=True)
class AnnotationsResult:
    distinct: int  # names
    ranges: list[AnnotatedRange]  # the top by GPU time, and every range over min_share_pct of busy time
    per_step: list[StepRanges] = field(default_factory=list)  # each step's top ranges by GPU time
    # by the device idle time under them: a range with no GPU work while the GPU waits (post-processing,
    # logging, a checkpoint) is a finding too; the top by idle, and every range over min_share_pct of idle
    idle_ranges: list[AnnotatedRange] = field(default_factory=list)


def detect_annotations(trace: Trace, gaps: pd.DataFrame, busy_us: float, top: int = 10,
                       device: int | None = None, name_filter: str | None = None,
                       min_share_pct: float = 5.0) -> AnnotationsResult:
    """record_function / NVTX ranges by name: the top by GPU time launched inside them, and the
    top by device idle time while they ran; either way, every range over `min_share_pct` of the
    rank's busy (or idle) time is kept."""
    instances = range_instances(trace, device, gaps, name_filter)
    table = annotation_table(instances)
    per_step = _per_step(trace.steps, instances, top=3) if not name_filter else []
    chosen = (gaps if device is None else gaps[gaps["device"] == device]) if len(gaps) else gaps
    idle_total_us = float(chosen["dur"].sum()) / 1000.0 if len(chosen) else 0.0

    def ranked(column: str, whole_us: float) -> list[AnnotatedRange]:
        if not len(table):
            return []
        share = 100.0 * table[column] / whole_us if whole_us else table[column] * 0.0
        # a name asked keeps its ranges that launched nothing too (their host time is the answer)
        rows = table[((table[column] > 0) | bool(name_filter))
                     & ((table[column].rank(ascending=False, method="first") <= top)
                        | (share >= min_share_pct))].sort_values(column, ascending=False)
        return [AnnotatedRange(str(t.name), int(t.count), us(t.host_ns), round(float(t.gpu_us), 3), int(t.kernels),
                               pct(float(t.gpu_us), busy_us), pct(float(t.idle_us), t.host_ns / 1000.0),
                               round(float(t.idle_us), 3), pct(float(t.idle_us), idle_total_us))
                for t in rows.itertuples()]

    return AnnotationsResult(len(table), ranked("gpu_us", busy_us), per_step, ranked("idle_us", idle_total_us))


def _per_step(steps: pd.DataFrame, instances: pd.DataFrame, top: int, steps_shown: int = 25) -> list[StepRanges]:
    """For each step (host range), the annotated ranges that started in it with the most GPU time."""
    steps = steps.sort_values("start")
    ranges = instances[~instances["name"].isin(set(steps["name"].astype(str)))]  # not the steps themselves
    if steps.empty or ranges.empty:
        return []
    starts = ranges["start"].to_numpy(np.int64)
    slot = np.searchsorted(steps["start"].to_numpy(np.int64), starts, side="right") - 1
    inside = (slot >= 0) & (starts < steps["end"].to_numpy(np.int64)[np.clip(slot, 0, None)])
    frame = pd.DataFrame({"step": steps["step"].to_numpy()[np.clip(slot, 0, None)][inside],
                          "name": ranges["name"].to_numpy()[inside], "gpu_ns": ranges["gpu_ns"].to_numpy()[inside]})
    out = []
    for step, group in frame.groupby("step", sort=True):
        sums = group.groupby("name")["gpu_ns"].sum().nlargest(top)
        out.append(StepRanges(step=int(step), ranges=[RangeGpu(name=str(n), gpu_us=us(v)) for n, v in sums.items()]))
    return out[:steps_shown]


def annotations_sentence(annotations: AnnotationsResult | None, top: int = 3) -> str | None:
    """The annotated ranges (record_function / NVTX) that launched the most GPU time, and those the
    GPU sat idle under without work of their own."""
    waiting = [r for r in annotations.idle_ranges if not r.gpu_us][:top] if annotations else []
    if not annotations or not (annotations.ranges or annotations.idle_ranges):
        return None
    parts = []
    if annotations.ranges:
        parts.append("Annotated ranges by GPU time launched inside them: " + "; ".join(
            f"{shorten(r.name, 40)} {duration(r.gpu_us)} ({percent(r.share_of_busy_pct)} of busy)"
            for r in annotations.ranges[:top]) + ".")
    if waiting:
        parts.append("The GPU sat idle under ranges that launched nothing: " + "; ".join(
            f"{shorten(r.name, 40)} {duration(r.idle_us)} ({percent(r.share_of_idle_pct)} of idle)"
            for r in waiting) + ".")
    return " ".join(parts)


DETECTOR = Detector("annotations", "Annotations", "record_function and NVTX ranges by GPU time and by the idle under them.",
                    None, AnnotationsResult,
                    lambda i, p: detect_annotations(i.trace, i["gaps"], i["breakdown"].total.busy_us),
                    reads=("gaps", "breakdown"), place=20, tool=False,
                    sentence=lambda r, p: annotations_sentence(r))
