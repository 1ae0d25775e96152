"""What the host was doing: synchronization calls, the op and Python line above a call, and the
host events inside a time window."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...trace.model import Trace, among, matches, per_trace, rows_where
from ...trace.normalize import STEP_NAME, innermost_enclosing, nesting_depth, thread_time
from . import intervals as iv
from .view import index_type, us
from .vocabulary import BLOCKING_NAME, EVENT_RECORD_NAME

#: Kernel-launch calls (runtime and driver, CUDA and HIP, graphs).
LAUNCH_CALLS = re.compile(r"^(cuda|hip|cu)(Ext)?(Module)?(Launch|GraphLaunch)|^cudaLaunch|^hipLaunch")
#: Packages whose frames are libraries, not the user's code. PyTorch's profiler writes a frame's
#: file relative to the sys.path entry it came from, so `transformers/…` is a site-packages file
#: whose prefix was cut: its first directory is all that says it is a library.
LIBRARY_PACKAGES = (
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "functorch", "triton", "transformers",
    "tokenizers", "datasets", "accelerate", "peft", "trl", "diffusers", "huggingface_hub", "safetensors",
    "deepspeed", "megatron", "apex", "fairscale", "lightning", "pytorch_lightning", "lightning_fabric",
    "torchmetrics", "timm", "einops", "xformers", "flash_attn", "bitsandbytes", "vllm", "sglang", "numpy",
    "pandas", "scipy", "sklearn", "PIL", "cv2", "albumentations", "tqdm", "wandb", "tensorboard", "mlflow",
    "hydra", "omegaconf", "google", "grpc", "requests", "urllib3", "fsspec", "pyarrow", "msgspec", "packaging",
    "importlib", "multiprocessing", "concurrent", "asyncio", "json", "logging", "collections", "dataclasses",
)
#: Python frames from libraries or the standard library rather than the user's code, and code that
#: torch.compile generated (Inductor's cache `/tmp/torchinductor_<user>/…`, FX's `<eval_with_key>`).
LIBRARY_FRAME = re.compile(
    r"^(<built-in|<frozen|<eval_with_key>|.*/torchinductor_[^/]*/|nn\.Module:|threading\.py|contextlib\.py"
    r"|typing\.py|functools\.py"
    r"|enum\.py|abc\.py|copy\.py|weakref\.py|<string>|.*site-packages/|.*/lib/python\d|.*dist-packages/"
    r"|Optimizer\.|(?:" + "|".join(LIBRARY_PACKAGES) + r")/)")


def reach_of_earlier(rows: pd.DataFrame) -> np.ndarray:
    """For each host event (rows with name, pid, tid, start, end), the latest end among the events
    of its name on its thread that started before it (int64's least where none did): an op or range
    called inside one of its name (aten::div dispatching to aten::div, a module's range nested in
    itself) ends by then, and what it did is already the outer one's."""
    start, end = rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64)
    if not len(start):
        return start.copy()
    name, pid, tid = rows["name"].cat.codes.to_numpy(), rows["pid"].to_numpy(np.int64), rows["tid"].to_numpy(np.int64)
    order = np.lexsort((-end, start, tid, pid, name))  # at one start, the longer first: it holds the other
    name, pid, tid = name[order], pid[order], tid[order]
    group = np.cumsum(np.r_[True, (name[1:] != name[:-1]) | (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])])
    reach = pd.Series(end[order]).groupby(group).cummax().groupby(group).shift(1)
    out = np.empty_like(start)
    out[order] = reach.fillna(np.iinfo(np.int64).min).to_numpy(np.int64)
    return out


def nested_in_its_name(rows: pd.DataFrame) -> np.ndarray:
    """Whether each host event lies inside an earlier one of its name on its thread (reach_of_earlier)."""
    reach = reach_of_earlier(rows)
    return (reach >= rows["end"].to_numpy(np.int64)) & (reach > rows["start"].to_numpy(np.int64))


def sync_calls(trace: Trace) -> pd.DataFrame:
    """Host calls that wait for the GPU (vocabulary.BLOCKING_CALLS), sorted by end."""
    cpu = trace.cpu
    rows = cpu[among(cpu["kind"], ["runtime", "driver"]) & matches(cpu["name"], BLOCKING_NAME)]
    return rows.sort_values("end", kind="stable")


@per_trace
def event_records(trace: Trace) -> np.ndarray:
    """When the host recorded events (vocabulary.EVENT_RECORD_NAME calls' starts), sorted: work
    queued behind a cudaStreamWaitEvent may start only once its event is recorded."""
    cpu = trace.cpu
    rows = among(cpu["kind"], ["runtime", "driver"]) & matches(cpu["name"], EVENT_RECORD_NAME)
    return np.sort(cpu.loc[rows, "start"].to_numpy(np.int64))


@per_trace
def calls_by_correlation(trace: Trace) -> pd.DataFrame:
    """Runtime and driver calls indexed by correlation id, in id order: the host side of each device
    activity. Built once per trace (every detector and each gap's evidence asks); callers must not
    modify it, and find ids with launch_rows or launch_calls, never through the index (pandas would
    build a hash table of every call: 400 MB for ten million)."""
    cpu = trace.cpu
    rows = among(cpu["kind"], ["runtime", "driver"]) & (cpu["correlation"] >= 0).to_numpy()
    calls = cpu.loc[rows, ["name", "pid", "tid", "start", "end", "correlation"]]  # what callers read: not every column
    calls = calls.drop_duplicates("correlation")  # the first call of an id is its launch
    return calls.take(np.argsort(calls["correlation"].to_numpy(), kind="stable")).set_index("correlation")


def launch_rows(trace: Trace, correlation: np.ndarray) -> np.ndarray:
    """The row in calls_by_correlation of each correlation id's call, -1 where none."""
    correlation = np.asarray(correlation, dtype=np.int64)
    low, table = _rows_by_id(trace)
    if table is not None:  # ids close together (as profilers number them): one lookup each
        at = correlation - low
        inside = (at >= 0) & (at < len(table))
        return np.where(inside, table[np.where(inside, at, 0)], -1).astype(np.int64)
    ids = calls_by_correlation(trace).index.to_numpy()
    if not len(ids):
        return np.full(len(correlation), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, correlation), len(ids) - 1)  # sparse ids: a binary search
    return np.where(ids[at] == correlation, at, -1)


def launch_points(trace: Trace, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where each device op (by correlation id) was launched: (found, a mask over the ids; then the
    pid, tid and start of the launch call of each found one, in the ids' order)."""
    calls = calls_by_correlation(trace)
    rows = launch_rows(trace, correlation)
    found = rows >= 0
    at = rows[found]
    pid, tid, start = (calls[c].to_numpy(np.int64)[at] for c in ("pid", "tid", "start"))
    return found, pid, tid, start


#: ids spread over at most this many times as many numbers as there are calls get a lookup table
_TABLE_SPREAD = 4


@per_trace
def _rows_by_id(trace: Trace) -> tuple[int, np.ndarray | None]:
    """(the smallest id, each id's row from it on, -1 for none): 4 bytes a number between the
    smallest and largest id, where they are close together; else no table."""
    ids = calls_by_correlation(trace).index.to_numpy()
    if not len(ids) or int(ids[-1]) - int(ids[0]) + 1 > _TABLE_SPREAD * len(ids) + 1024:
        return 0, None
    low = int(ids[0])
    table = np.full(int(ids[-1]) - low + 1, -1, dtype=index_type(len(ids)))
    table[ids - low] = np.arange(len(ids))
    return low, table


def launch_calls(trace: Trace, correlation: np.ndarray, columns: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Each correlation id's call (its `columns`, default all), as
    `calls_by_correlation(trace).reindex(correlation)` gives it, rows <NA> where an id has none:
    integer columns then nullable integers (epoch nanoseconds as floats would be off by up to
    128 ns), others floats. Found by launch_rows."""
    calls = calls_by_correlation(trace)
    rows = launch_rows(trace, correlation)
    found = rows >= 0
    every = bool(found.all())
    at = np.maximum(rows, 0)
    out: dict[str, object] = {}
    for name in columns or tuple(calls.columns):
        values = calls[name].array
        if isinstance(values, pd.Categorical):
            codes = values.codes[at] if len(values) else np.full(len(at), -1, dtype=values.codes.dtype)
            out[name] = pd.Categorical.from_codes(codes if every else np.where(found, codes, -1), dtype=values.dtype)
        elif every:
            out[name] = np.asarray(values)[at]
        elif np.asarray(values).dtype.kind in "iu":
            out[name] = pd.arrays.IntegerArray(np.asarray(values)[at] if len(values) else np.zeros(len(at), np.int64),
                                               ~found)
        else:
            column = np.asarray(values, dtype=np.float64)[at] if len(values) else np.zeros(len(at))
            out[name] = np.where(found, column, np.nan)
    # the columns as gathered, not consolidated into a copy (a million-row lookup is a gap table's every gap)
    return pd.DataFrame(out, index=pd.Index(np.asarray(correlation), name="correlation"), copy=False)


def kernel_launches(trace: Trace) -> pd.DataFrame:
    """Kernels with the host call that launched each (those without one left out), in trace
    order: the kernel's name, device and times, and the call's as name_call, start_call, end_call
    and tid. A graph launch is one call for many kernels: each of them is here. Built for each
    reader, not kept: a row per kernel (500 MB at ten million) would be held for the trace's life."""
    gpu = trace.gpu
    kernel = (gpu["kind"] == "kernel").to_numpy()
    at = launch_rows(trace, gpu["correlation"].to_numpy()[kernel])
    calls = calls_by_correlation(trace)
    # the columns its readers use (launch, annotations), rows copied only where some are dropped
    kernels = rows_where(gpu[["name", "device", "start", "end"]], kernel)
    kernels, at = rows_where(kernels, at >= 0).reset_index(drop=True), at[at >= 0]
    return kernels.assign(name_call=calls["name"].array.take(at), start_call=calls["start"].to_numpy()[at],
                          end_call=calls["end"].to_numpy()[at], tid=calls["tid"].to_numpy()[at])


def ranges_named(trace: Trace, name: re.Pattern[str]) -> pd.DataFrame:
    """Host ranges whose name matches: ops, record_function ranges, Python frames (pid, tid, start, end)."""
    cpu = trace.cpu
    return cpu.loc[among(cpu["kind"], ["op", "annotation", "python"]) & matches(cpu["name"], name),
                   ["pid", "tid", "start", "end"]]


def host_time_ns(ranges: pd.DataFrame) -> int:
    """The host time some ranges cover: on each thread, the union of them (an op inside another of the
    same name, or two that cross, counted once), added up over the threads."""
    if ranges.empty:
        return 0
    start, end = ranges["start"].to_numpy(np.int64), ranges["end"].to_numpy(np.int64)
    t_min, width = int(start.min()), int(end.max() - start.min()) + 1
    on_axis = thread_time(ranges["pid"].to_numpy(), ranges["tid"].to_numpy(), start, t_min, width)
    return iv.length(iv.union(on_axis, on_axis + (end - start)))


def launched_inside(trace: Trace, correlation: np.ndarray, name: re.Pattern[str]) -> np.ndarray:
    """Which device ops (by correlation id) were launched inside a host range whose name matches `name`
    (an op, a record_function range, a Python frame such as `nn.Module: Attention`), at any depth:
    aten::convolution around aten::_convolution around aten::cudnn_convolution, the kernel's own op."""
    named = ranges_named(trace, name)
    inside = np.zeros(len(correlation), dtype=bool)
    if named.empty:
        return inside
    found, pid, tid, start = launch_points(trace, correlation)
    inside[found] = innermost_enclosing(named, pid, tid, start) >= 0
    return inside


def _ops(trace: Trace) -> pd.DataFrame:
    """Ops (not ProfilerStep ranges): the columns op_above reads. An Nsight export has ops only as
    NVTX ranges (torch.autograd.profiler.emit_nvtx: `aten::nonzero, seq = 12`, the suffix cut at
    load): a range named like an aten op is that op."""
    cpu = trace.cpu
    kind = cpu["kind"]
    op = (kind == "op").to_numpy() | ((kind == "annotation").to_numpy() & matches(cpu["name"], ATEN_OP))
    return cpu.loc[op & ~matches(cpu["name"], STEP_NAME), ["name", "pid", "tid", "start", "end"]]


ATEN_OP = re.compile(r"^aten::")


def op_above(trace: Trace, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For each host call: the innermost op around it, and the outermost aten op (what the user
    called, e.g. aten::item above aten::_local_scalar_dense). None where there is none."""
    ops = _ops(trace)
    pid, tid, t = (calls[c].to_numpy(np.int64) for c in ("pid", "tid", "start"))
    # only ops around some call's start can be above one; the ops above those are around it too, so
    # nesting among the few kept is nesting among all (a handful of syncs: not the trace's every op)
    times = np.sort(t)
    starts, ends = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    around = np.searchsorted(times, starts, side="left") < np.searchsorted(times, ends, side="right")
    ops = ops[around].reset_index(drop=True)
    inner = innermost_enclosing(ops, pid, tid, t)
    aten = ops[matches(ops["name"], ATEN_OP)].reset_index(drop=True)
    top_level = aten[nesting_depth(*(aten[c].to_numpy(np.int64) for c in ("pid", "tid", "start", "end"))) == 0]
    top_level = top_level.reset_index(drop=True)
    outer = innermost_enclosing(top_level, pid, tid, t)
    return (_names(ops, inner), _names(top_level, outer))


def range_above(trace: Trace, calls: pd.DataFrame) -> np.ndarray:
    """For each host call (pid, tid, start): the innermost record_function / NVTX range around it
    (not a step), or None."""
    cpu = trace.cpu
    ranges = cpu.loc[(cpu["kind"] == "annotation").to_numpy() & ~matches(cpu["name"], STEP_NAME),
                     ["name", "pid", "tid", "start", "end"]].reset_index(drop=True)
    pid, tid, t = (calls[c].to_numpy(np.int64) for c in ("pid", "tid", "start"))
    return _names(ranges, innermost_enclosing(ranges, pid, tid, t))


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
    rows = launch_rows(trace, kernels["correlation"].to_numpy())
    calls = calls_by_correlation(trace)
    launched = rows >= 0
    launch = pd.DataFrame({"name": kernels["name"].to_numpy()[launched],
                           **{c: calls[c].to_numpy()[rows[launched]] for c in ("pid", "tid", "start")}})
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
    rows = among(trace.cpu["kind"], kinds)
    return iv.union(trace.cpu["start"].to_numpy(np.int64)[rows], trace.cpu["end"].to_numpy(np.int64)[rows])


class HostEventJSON(TypedDict):
    name: str
    kind: str
    overlap_us: float
    depth: int


class ThreadId(TypedDict):
    pid: int
    tid: int


class OtherThreadEvent(TypedDict):
    """Context from a thread that did not launch the work: its busiest event over the gap."""

    name: str
    kind: str
    overlap_us: float
    pid: int
    tid: int


class GapEvidence(TypedDict, total=False):
    """What a gap's evidence says: the blocking call, its op and line (a sync), or what the
    launching thread was in (a GapHost, encoded)."""

    sync_call: str | None
    op: str | None
    inner_op: str | None
    python: str | None
    after: str | None  # a sync gap: the user's line the host was in once the wait returned
    thread: ThreadId | None
    host: list[HostEventJSON]
    other_threads: list[OtherThreadEvent]
    queued_op: str | None  # a device stall: the op the device held back
    queued_us: float | None  # ...how long it sat queued on the idle device (from its launch call's return or the gap's start)


@dataclass(frozen=True)
class HostEvent:
    name: str
    kind: str
    overlap_us: float  # of this thread's time in the window: never more than the window
    depth: int


def host_events_in(trace: Trace, lo: int, hi: int, top: int = 5) -> list[HostEvent]:
    """The host events that spent the most time inside [lo, hi), each name's time measured on one
    thread at a time (so it never exceeds the window). Step markers are left out; they cover
    everything and explain nothing."""
    host = _host_columns(trace)
    inside = host.window(lo, hi)
    if not len(inside):
        return []
    table = pd.DataFrame(host.overlaps(inside, lo, hi).__dict__)
    by = table.groupby(["name", "kind"], observed=True)  # apart: pandas' named aggregation costs twice as much
    grouped = pd.DataFrame({"overlap": by["overlap"].max(), "depth": by["depth"].min()})
    grouped = grouped.sort_values(["overlap", "depth"], ascending=[False, True]).head(top)
    return [HostEvent(name, kind, us(row.overlap), int(row.depth)) for (name, kind), row in grouped.iterrows()]


@dataclass(frozen=True)
class _Overlaps:
    """Per (name, kind, thread) inside a window: its time there and its deepest nesting. Rows in
    name, kind, thread order."""

    name: np.ndarray
    kind: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    overlap: np.ndarray
    depth: np.ndarray


@dataclass(frozen=True)
class _HostColumns:
    """The host events' columns a window needs, as arrays: each gap shown asks for one window, on
    a handful to thousands of events, where pandas' fixed cost per operation was most of the
    analysis of a rank."""

    start: np.ndarray
    end: np.ndarray
    not_step: np.ndarray
    name_code: np.ndarray
    kind_code: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    depth: np.ndarray
    names: np.ndarray  # by code, code -1 (no name) last
    kinds: np.ndarray

    def window(self, lo: int, hi: int) -> np.ndarray:
        """Positions of the events that overlap [lo, hi), step markers left out (they cover everything)."""
        return np.flatnonzero((self.start < hi) & (self.end > lo) & self.not_step)

    def overlaps(self, at: np.ndarray, lo: int, hi: int) -> _Overlaps:
        """The events at these positions grouped by name, kind and thread: one name's events on one
        thread merged (a thread does one thing at a time at each depth)."""
        overlap = iv.inside(self.start[at], self.end[at], lo, hi)
        keys = np.stack([self.name_code[at], self.kind_code[at], self.pid[at], self.tid[at]], axis=1)  # the window's only
        groups, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        total = np.zeros(len(groups), dtype=np.int64)
        np.add.at(total, inverse, overlap)
        depth = np.full(len(groups), np.iinfo(np.int32).min, dtype=np.int64)
        np.maximum.at(depth, inverse, self.depth[at])
        names, kinds = self.names[groups[:, 0]], self.kinds[groups[:, 1]]
        order = sorted(range(len(groups)), key=lambda i: (str(names[i]), str(kinds[i]), groups[i, 2], groups[i, 3]))
        return _Overlaps(names[order], kinds[order], groups[order, 2], groups[order, 3],
                         np.minimum(total, hi - lo)[order], depth[order])  # nested same-name frames: recursion


@per_trace
def _host_columns(trace: Trace) -> _HostColumns:
    cpu = trace.cpu
    name, kind = cpu["name"].array, cpu["kind"].array
    return _HostColumns(cpu["start"].to_numpy(np.int64), cpu["end"].to_numpy(np.int64), ~matches(cpu["name"], STEP_NAME),
                        name.codes, kind.codes, cpu["pid"].to_numpy(np.int64), cpu["tid"].to_numpy(np.int64),
                        cpu["depth"].to_numpy(np.int64), _with_none(name.categories), _with_none(kind.categories))


def _with_none(categories) -> np.ndarray:
    """A categorical's values by code, with code -1 (missing) as None at the end."""
    return np.append(np.asarray(categories, dtype=object), np.asarray([None], dtype=object))


@per_trace
def launching_threads(trace: Trace) -> pd.DataFrame:
    """Threads that launch device work, busiest first: pid, tid, launches."""
    cpu = trace.cpu
    calls = cpu[among(cpu["kind"], ["runtime", "driver"]) & matches(cpu["name"], LAUNCH_CALLS)]
    return (calls.groupby(["pid", "tid"]).size().rename("launches").reset_index()
            .sort_values("launches", ascending=False, kind="stable").reset_index(drop=True))


@dataclass(frozen=True)
class GapHost:
    """What the host was doing over one idle gap, read on the thread that launches device work."""

    thread: ThreadId | None  # of the launching thread (None: the trace has no launches)
    host: list[HostEvent]  # on that thread: what spans the gap, innermost first, then its parents
    python: str | None  # the innermost frame of the user's own code spanning the gap ("train.py(42): main")
    other_threads: list[OtherThreadEvent]  # context only, never the headline: other threads' busiest events


def gap_host(trace: Trace, lo: int, hi: int, thread: tuple[int, int] | None = None, top: int = 3,
             span_share: float = 0.5) -> GapHost:
    """The host over [lo, hi) on `thread` (the one that launched the work after the gap; default:
    the busiest launching thread). Events that span at least `span_share` of the gap come first,
    innermost first; without any, the longest overlaps."""
    if thread is None:
        launchers = launching_threads(trace)
        thread = (int(launchers["pid"].iloc[0]), int(launchers["tid"].iloc[0])) if len(launchers) else None
    columns = _host_columns(trace)
    inside = columns.window(lo, hi)
    if thread is None or not len(inside):
        return GapHost(None if thread is None else ThreadId(pid=thread[0], tid=thread[1]), [], None, [])
    on_thread = (columns.pid[inside] == thread[0]) & (columns.tid[inside] == thread[1])
    mine = columns.overlaps(inside[on_thread], lo, hi)
    spanning = np.flatnonzero(mine.overlap >= span_share * (hi - lo))
    # sorts are stable: among equals, name order
    chosen = (spanning[np.lexsort((-mine.overlap[spanning], -mine.depth[spanning]))] if len(spanning)
              else np.lexsort((-mine.depth, -mine.overlap)))[:top]
    host = [HostEvent(mine.name[i], mine.kind[i], us(mine.overlap[i]), int(mine.depth[i])) for i in chosen]
    user = [i for i in spanning if mine.kind[i] == "python" and not LIBRARY_FRAME.match(str(mine.name[i]))]
    deepest = max(reversed(user), key=lambda i: mine.depth[i], default=None)  # of equals, the last in name order
    python = None if deepest is None else str(mine.name[deepest])
    others = columns.overlaps(inside[~on_thread], lo, hi)
    context = [OtherThreadEvent(name=str(others.name[i]), kind=str(others.kind[i]), overlap_us=us(others.overlap[i]),
                                pid=int(others.pid[i]), tid=int(others.tid[i]))
               for i in np.lexsort((-others.depth, -others.overlap))[:2]]  # of equal times, the innermost
    return GapHost(ThreadId(pid=thread[0], tid=thread[1]), host, python, context)
