"""What the host was doing: synchronization calls, the op and Python line above a call, and the
host events inside a time window."""

from __future__ import annotations

import re
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


def calls_by_correlation(trace: Trace) -> pd.DataFrame:
    """Runtime and driver calls indexed by correlation id: the host side of each device activity."""
    cpu = trace.cpu
    calls = cpu[cpu["kind"].isin(["runtime", "driver"]).to_numpy() & (cpu["correlation"] >= 0).to_numpy()]
    return calls.drop_duplicates("correlation").set_index("correlation")


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
    overlap_us: float
    depth: int

    def to_dict(self) -> dict:
        return asdict(self)


def host_events_in(trace: Trace, lo: int, hi: int, top: int = 5) -> list[HostEvent]:
    """The host events that spent the most time inside [lo, hi): what the host was doing then.
    Step markers are left out; they cover everything and explain nothing."""
    cpu = trace.cpu
    inside = cpu[(cpu["start"] < hi) & (cpu["end"] > lo)]
    inside = inside[~matches(inside["name"], _STEP)]
    if inside.empty:
        return []
    overlap = np.minimum(inside["end"], hi) - np.maximum(inside["start"], lo)
    table = pd.DataFrame({"name": inside["name"].astype(str), "kind": inside["kind"].astype(str),
                          "overlap": overlap.to_numpy(), "depth": inside["depth"].to_numpy()})
    grouped = table.groupby(["name", "kind"], observed=True).agg(overlap=("overlap", "sum"), depth=("depth", "min"))
    grouped = grouped.sort_values(["overlap", "depth"], ascending=[False, True]).head(top)
    return [HostEvent(name, kind, us(row.overlap), int(row.depth)) for (name, kind), row in grouped.iterrows()]
