"""What the host was doing: synchronization calls, the op and Python line above a call, and the
host events inside a time window."""

from __future__ import annotations

import re
import weakref
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from ..trace.model import Trace, matches
from ..trace.normalize import innermost_enclosing, nesting_depth
from . import intervals as iv
from .view import us

#: Host calls that block until device work finishes.
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cudaStreamQuery_blocking",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
})
#: Kernel-launch calls (runtime and driver, CUDA and HIP, graphs).
LAUNCH_CALLS = re.compile(r"^(cuda|hip|cu)(Ext)?(Module)?(Launch|GraphLaunch)|^cudaLaunch|^hipLaunch")
#: Python frames from libraries rather than the user's script.
LIBRARY_FRAME = re.compile(
    r"^(torch/|<built-in|<frozen|nn\.Module:|threading\.py|contextlib\.py|typing\.py|functools\.py"
    r"|enum\.py|abc\.py|<string>|.*site-packages/|.*/lib/python\d|.*dist-packages/|Optimizer\.)")
_STEP = re.compile(r"^ProfilerStep#\d+$")


def sync_calls(trace: Trace) -> pd.DataFrame:
    """Host synchronization calls, sorted by end."""
    cpu = trace.cpu
    rows = cpu[cpu["kind"].isin(["runtime", "driver"]) & cpu["name"].isin(SYNC_CALLS)]
    return rows.sort_values("end", kind="stable")


_CALLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def calls_by_correlation(trace: Trace) -> pd.DataFrame:
    """Runtime and driver calls indexed by correlation id: the host side of each device activity.
    Built once per trace (every detector and each gap's evidence asks); callers must not modify it."""
    if (found := _CALLS.get(trace)) is not None:
        return found
    cpu = trace.cpu
    calls = cpu[cpu["kind"].isin(["runtime", "driver"]).to_numpy() & (cpu["correlation"] >= 0).to_numpy()]
    found = calls.drop_duplicates("correlation").set_index("correlation")
    _CALLS[trace] = found
    return found


def _ops(trace: Trace) -> pd.DataFrame:
    cpu = trace.cpu
    return cpu[(cpu["kind"] == "op").to_numpy() & ~matches(cpu["name"], _STEP)]


def op_above(trace: Trace, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For each host call: the innermost op around it, and the outermost aten op (what the user
    called, e.g. aten::item above aten::_local_scalar_dense). None where there is none."""
    ops = _ops(trace).reset_index(drop=True)
    pid, tid, t = (calls[c].to_numpy(np.int64) for c in ("pid", "tid", "start"))
    inner = innermost_enclosing(ops, pid, tid, t)
    aten = ops[matches(ops["name"], r"^aten::")].reset_index(drop=True)
    top_level = aten[nesting_depth(*(aten[c].to_numpy(np.int64) for c in ("pid", "tid", "start", "end"))) == 0]
    top_level = top_level.reset_index(drop=True)
    outer = innermost_enclosing(top_level, pid, tid, t)
    return (_names(ops, inner), _names(top_level, outer))


def python_line_above(trace: Trace, calls: pd.DataFrame) -> np.ndarray:
    """For each host call: the innermost frame of the user's own code around it ("train.py(42):
    <module>"), from python_function events, or else from the op's "Call stack" (old traces)."""
    cpu = trace.cpu
    frames = cpu[cpu["kind"] == "python"]
    frames = frames[~matches(frames["name"], LIBRARY_FRAME)].reset_index(drop=True)
    pid, tid, t = (calls[c].to_numpy(np.int64) for c in ("pid", "tid", "start"))
    found = _names(frames, innermost_enclosing(frames, pid, tid, t))
    missing = np.flatnonzero(found == None)  # noqa: E711 (object array)
    if len(missing):
        with_stack = cpu[cpu["stack"].notna()].reset_index(drop=True)
        if len(with_stack):
            sub = calls.iloc[missing]
            pos = innermost_enclosing(with_stack, *(sub[c].to_numpy(np.int64) for c in ("pid", "tid", "start")))
            stacks = _names(with_stack, pos, column="stack")
            found[missing] = [_first_user_frame(s) for s in stacks]
    return found


def kernel_python_lines(trace: Trace, names: list[str]) -> dict[str, str]:
    """The user's Python line that launched each of these kernels most often (kernels without
    one are left out)."""
    kernels = trace.gpu[(trace.gpu["kind"] == "kernel").to_numpy() & trace.gpu["name"].isin(names).to_numpy()]
    launch = kernels[["name", "correlation"]].join(calls_by_correlation(trace)[["pid", "tid", "start"]],
                                                   on="correlation", how="inner")
    found = pd.DataFrame({"kernel": launch["name"].astype(str).to_numpy(),
                          "python": python_line_above(trace, launch)}).dropna()
    return {k: g["python"].mode().iloc[0] for k, g in found.groupby("kernel")}


def _first_user_frame(stack: str | None) -> str | None:
    if not stack:
        return None
    for frame in str(stack).split(";"):
        frame = frame.strip()
        if frame and not LIBRARY_FRAME.match(frame):
            return frame
    return None


def _names(frame: pd.DataFrame, pos: np.ndarray, column: str = "name") -> np.ndarray:
    out = np.full(len(pos), None, dtype=object)
    hit = pos >= 0
    if hit.any():
        out[hit] = frame[column].astype(object).to_numpy()[pos[hit]]
    return out


def host_union(trace: Trace, kinds: tuple[str, ...]) -> iv.Intervals:
    """When the host was inside events of these kinds (any thread)."""
    rows = trace.cpu[trace.cpu["kind"].isin(kinds)]
    return iv.union(rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64))


@dataclass(frozen=True)
class HostEvent:
    name: str
    kind: str
    overlap_us: float  # of this thread's time in the window: never more than the window
    depth: int

    def to_dict(self) -> dict:
        return asdict(self)


def host_events_in(trace: Trace, lo: int, hi: int, top: int = 5) -> list[HostEvent]:
    """The host events that spent the most time inside [lo, hi), each name's time measured on one
    thread at a time (so it never exceeds the window). Step markers are left out; they cover
    everything and explain nothing."""
    inside = _events_in(trace, lo, hi)
    if inside.empty:
        return []
    table = _overlaps(inside, lo, hi)
    grouped = table.groupby(["name", "kind"], observed=True).agg(overlap=("overlap", "max"), depth=("depth", "min"))
    grouped = grouped.sort_values(["overlap", "depth"], ascending=[False, True]).head(top)
    return [HostEvent(name, kind, us(row.overlap), int(row.depth)) for (name, kind), row in grouped.iterrows()]


def _events_in(trace: Trace, lo: int, hi: int) -> pd.DataFrame:
    """Host events that overlap [lo, hi), without step markers (they cover everything)."""
    cpu = trace.cpu
    inside = cpu[(cpu["start"] < hi).to_numpy() & (cpu["end"] > lo).to_numpy()]
    return inside[~matches(inside["name"], _STEP)]


def _overlaps(events: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """Per event: its name, kind, thread, depth and its time inside [lo, hi); one name's events on
    one thread merged (a thread does one thing at a time at each depth). Rows in name, kind,
    thread order. Grouped in numpy on the names' codes: called for every gap shown, on windows of
    a handful to thousands of events, where a pandas groupby's fixed cost dominated the analysis."""
    start, end = events["start"].to_numpy(np.int64), events["end"].to_numpy(np.int64)
    overlap = np.minimum(end, hi) - np.maximum(start, lo)
    name, kind = events["name"].array, events["kind"].array
    keys = np.stack([name.codes.astype(np.int64), kind.codes.astype(np.int64),
                     events["pid"].to_numpy(np.int64), events["tid"].to_numpy(np.int64)], axis=1)
    groups, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    total = np.zeros(len(groups), dtype=np.int64)
    np.add.at(total, inverse, overlap)
    depth = np.full(len(groups), np.iinfo(np.int32).min, dtype=np.int64)
    np.maximum.at(depth, inverse, events["depth"].to_numpy(np.int64))
    names = np.append(np.asarray(name.categories, dtype=object), None)[groups[:, 0]]
    kinds = np.append(np.asarray(kind.categories, dtype=object), None)[groups[:, 1]]
    table = pd.DataFrame({"name": names, "kind": kinds, "pid": groups[:, 2], "tid": groups[:, 3],
                          "overlap": np.minimum(total, hi - lo),  # nested same-name frames: recursion
                          "depth": depth.astype(events["depth"].dtype)})
    order = sorted(range(len(table)), key=lambda i: (str(names[i]), str(kinds[i]), groups[i, 2], groups[i, 3]))
    return table.iloc[order].reset_index(drop=True)


_LAUNCHERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def launching_threads(trace: Trace) -> pd.DataFrame:
    """Threads that launch device work, busiest first: pid, tid, launches."""
    if (found := _LAUNCHERS.get(trace)) is not None:
        return found
    cpu = trace.cpu
    calls = cpu[cpu["kind"].isin(["runtime", "driver"]).to_numpy() & matches(cpu["name"], LAUNCH_CALLS)]
    found = (calls.groupby(["pid", "tid"]).size().rename("launches").reset_index()
             .sort_values("launches", ascending=False, kind="stable").reset_index(drop=True))
    _LAUNCHERS[trace] = found
    return found


@dataclass(frozen=True)
class GapHost:
    """What the host was doing over one idle gap, read on the thread that launches device work."""

    thread: dict | None  # {"pid", "tid"} of the launching thread (None: the trace has no launches)
    host: list[HostEvent]  # on that thread: what spans the gap, innermost first, then its parents
    python: str | None  # the innermost frame of the user's own code spanning the gap ("train.py(42): main")
    other_threads: list[dict]  # context only, never the headline: other threads' busiest events

    def to_dict(self) -> dict:
        return {"thread": self.thread, "host": [h.to_dict() for h in self.host], "python": self.python,
                "other_threads": self.other_threads}


def gap_host(trace: Trace, lo: int, hi: int, thread: tuple[int, int] | None = None, top: int = 3,
             span_share: float = 0.5) -> GapHost:
    """The host over [lo, hi) on `thread` (the one that launched the work after the gap; default:
    the busiest launching thread). Events that span at least `span_share` of the gap come first,
    innermost first; without any, the longest overlaps."""
    if thread is None:
        launchers = launching_threads(trace)
        thread = (int(launchers["pid"].iloc[0]), int(launchers["tid"].iloc[0])) if len(launchers) else None
    inside = _events_in(trace, lo, hi)
    if thread is None or inside.empty:
        return GapHost(None if thread is None else {"pid": thread[0], "tid": thread[1]}, [], None, [])
    on_thread = (inside["pid"].to_numpy() == thread[0]) & (inside["tid"].to_numpy() == thread[1])
    mine = _overlaps(inside[on_thread], lo, hi) if on_thread.any() else _overlaps(inside.iloc[:0], lo, hi)
    spanning = mine[mine["overlap"] >= span_share * (hi - lo)]
    chosen = (spanning.sort_values(["depth", "overlap"], ascending=[False, False]) if len(spanning)
              else mine.sort_values(["overlap", "depth"], ascending=[False, False])).head(top)
    host = [HostEvent(r.name, r.kind, us(r.overlap), int(r.depth)) for r in chosen.itertuples()]
    library = spanning["name"].map(lambda n: bool(LIBRARY_FRAME.match(n))).to_numpy(dtype=bool)  # a few rows
    user = spanning[(spanning["kind"] == "python").to_numpy() & ~library]
    python = str(user.sort_values("depth").iloc[-1]["name"]) if len(user) else None
    others = _overlaps(inside[~on_thread], lo, hi) if (~on_thread).any() else None
    context = [] if others is None else [
        {"name": r.name, "kind": r.kind, "overlap_us": us(r.overlap), "pid": int(r.pid), "tid": int(r.tid)}
        for r in others.sort_values("overlap", ascending=False).head(2).itertuples()]
    return GapHost({"pid": thread[0], "tid": thread[1]}, host, python, context)
