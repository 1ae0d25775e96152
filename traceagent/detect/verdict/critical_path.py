"""The critical path: the chain of dependent work that sets the rank's length, found by walking back
from the device work that ends last, each time to the dependency that was ready last.

Dependencies (as HTA's critical-path graph has them, on one rank):
- a device op waits for the op before it on its stream, and for its launch call to return;
- a host call waits for the host call before it on its thread (the host time between them is host
  work: Python, ops, the framework);
- a call that blocks for the GPU (vocabulary.BLOCKING_CALLS) waits for the device op that ended last
  before it returned, on any stream.
The path's time is then device work, host calls, host work between calls, and waits (a device op
ready before it started: the GPU or stream was held by something the trace does not link, such as
another stream's event). Only work on the path makes the rank longer: a kernel off it (overlapped
by the path) saves nothing when made faster, and one on it saves at most its time on the path.

The walk visits each path event once (a loop over the path, not over the trace); every predecessor
is found beforehand with array operations.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...format import duration, shorten
from ...trace.model import Trace, among, matches, rows_where
from ...trace.normalize import innermost_by_thread, thread_keys
from ..core.view import index_type, pct, us
from ..core.vocabulary import BLOCKING_NAME
from ..detectors.base import Detector
from ..detectors.kernels import short_name

TOP = 10


@dataclass(frozen=True)
class PathKernel:
    name: str
    short_name: str
    on_path_us: float  # its time on the critical path
    on_path_count: int
    total_us: float  # all its instances, on the path or not
    saving_2x_us: float  # what making it twice as fast saves at most: half its time on the path


@dataclass(frozen=True)
class PathHostOp:
    """An op (aten::empty, cudnn_batch_norm…) whose host time, its calls' and between them, is on the path."""

    name: str
    on_path_us: float
    share_of_host_pct: float  # of the path's host calls and host work


@dataclass(frozen=True)
class CriticalPathResult:
    """The rank's critical path, from its first dependency to the end of its last device work."""

    length_us: float  # start of the path's first event to the end of its last
    device_us: float  # kernels, copies and memsets on the path
    host_call_us: float  # runtime calls on the path (launches, syncs while the GPU was busy)
    host_work_us: float  # host time between calls on the path: Python, ops, the framework
    wait_us: float  # device ops ready before they started (held by dependencies the trace does not link)
    device_pct: float  # each of the four, of the path's length
    host_call_pct: float
    host_work_pct: float
    wait_pct: float
    events: int  # events on the path
    kernels: list[PathKernel]  # the kernels with the most time on the path
    off_path: list[str]  # hot kernels (by total time, short names, each once) with no instance on the path
    host_ops: list[PathHostOp] = field(default_factory=list)  # the host ops the path's host time was spent in


DEVICE, HOST_CALL, HOST_WORK, WAIT = "device", "host_call", "host_work", "wait"
KINDS = (DEVICE, HOST_CALL, HOST_WORK, WAIT)  # Path.kind's codes


@dataclass(frozen=True)
class Path:
    """The path as time segments (ns), as arrays: events, then the gaps before them."""

    kind: np.ndarray  # codes into KINDS: device, host_call, host_work (host time between calls), wait (a device op held)
    start: np.ndarray
    end: np.ndarray
    event: np.ndarray  # the event: a row of the device ops (device), of the host calls (host_call); -1 for gaps
    device_names: pd.Categorical  # the device ops' names, by row
    call_names: pd.Categorical
    gap_before: np.ndarray  # for each gap (the segments after the events), the segment of the event it precedes
    call_thread: np.ndarray  # each host call's thread (pid << 32 | tid), by the rows `event` indexes for calls
    device_ops: pd.DataFrame  # the rows `event` indexes for device segments (trace.gpu less syncs)

    def threads(self, segments: np.ndarray) -> np.ndarray:
        """The thread of each of these segments: a host call's, or for host work the call it
        precedes; -1 on the device (kept per call, not per segment: most of a path is device work)."""
        events = len(self.kind) - len(self.gap_before)
        at = np.array(segments, dtype=np.int64)
        gaps = at >= events
        at[gaps] = self.gap_before[at[gaps] - events]
        thread = np.full(len(at), -1, dtype=np.int64)
        calls = np.flatnonzero(self.kind[at] == 1)
        thread[calls] = self.call_thread[self.event[at[calls]]]
        return thread

    def names(self) -> list[str]:
        """Each segment's name ("" for gaps): for the path's events only."""
        device, call = self.device_names, self.call_names
        return [str(device[e]) if k == 0 else str(call[e]) if k == 1 else "" for k, e in
                zip(self.kind.tolist(), self.event.tolist())]


def critical_path(trace: Trace, window: tuple[int, int] | None = None) -> Path | None:
    """The rank's critical path, or None without device work: what `annotate` draws and the result
    sums. Every event's binding dependency is chosen with array operations; the walk only follows them.
    `window` (ns on the trace clock: a step's or a range's start and the end of its device work):
    the path of that stretch alone, from the device work that ends last in it back to its start."""
    gpu = rows_where(trace.gpu, (trace.gpu["kind"] != "sync").to_numpy())
    if gpu.empty:
        return None
    cpu = trace.cpu
    # the calls as positions in the host table: each column read for them alone, as it is needed
    c_rows = np.flatnonzero(among(cpu["kind"], ["runtime", "driver"]))
    n_dev = len(gpu)
    d_start, d_end = gpu["start"].to_numpy(np.int64), gpu["end"].to_numpy(np.int64)
    c_start, c_end = cpu["start"].to_numpy(np.int64)[c_rows], cpu["end"].to_numpy(np.int64)[c_rows]
    # a trace of device activity alone has no calls: the ops' own columns, not copies of them
    start, end = (np.concatenate([d_start, c_start]), np.concatenate([d_end, c_end])) if len(c_rows) else (d_start, d_end)
    device = gpu["device"].to_numpy()
    # positions of ops and calls (calls after the ops) in the narrowest exact type: a rank of ten million
    # ops holds several arrays of them at once
    position = index_type(n_dev + len(c_rows))

    # device candidates: the op before on the stream, the op that ended last on the device before it
    # started (another stream's event, or the SMs it held), and its launch call (host nodes follow devices)
    prev_on_stream = _previous(device.astype(np.int64) * (1 << 31) + gpu["stream"].to_numpy(np.int64), d_start, position)
    devices = pd.unique(device)  # hashed: sorting ten million device numbers cost a twentieth of the path
    if len(devices) == 1:  # the usual rank: every op is the device's, no positions to map back
        before = ended_last_before(d_start, d_end).astype(position)
    else:
        before = np.full(n_dev, -1, dtype=position)
        for d in devices:
            mine = np.flatnonzero(device == d)
            ended = ended_last_before(d_start[mine], d_end[mine])
            before[mine] = np.where(ended >= 0, mine[np.maximum(ended, 0)], -1)
    launch = launch_positions(gpu["correlation"].to_numpy(), cpu["correlation"].to_numpy()[c_rows], position)
    launch[launch >= 0] += n_dev
    # the candidate ready last, the first of them on a tie: one candidate at a time, so memory holds
    # two rows of every op, not three of candidates and three of their times
    pred = np.full(n_dev, -1, dtype=position)
    latest = np.full(n_dev, np.iinfo(np.int64).min, dtype=np.int64)
    for candidate in (prev_on_stream, before, launch):
        ready = end.take(np.maximum(candidate, 0))  # filled in place: one temporary of the ops' length at a time
        ready[candidate < 0] = np.iinfo(np.int64).min
        later = (ready > latest) & (ready <= d_end)  # a dependency ends before its dependant does
        np.copyto(latest, ready, where=later)
        np.copyto(pred, candidate, where=later)
        del ready, later
    del prev_on_stream, before, latest

    # host calls: the call before on the thread; a blocking call that returned when the GPU finished,
    # the device op that ended last before it returned
    c_pid = cpu["pid"].to_numpy(np.int64)[c_rows]
    call_thread = thread_keys(c_pid, cpu["tid"].to_numpy()[c_rows])
    prev_call = _previous(call_thread, c_start, position)
    prev_call[prev_call >= 0] += n_dev
    launched_by = np.where(launch >= 0, c_pid[np.clip(launch - n_dev, 0, max(len(c_pid) - 1, 0))] if len(c_pid) else -1, -1)
    del launch
    call_names = cpu["name"].array.take(c_rows)
    waited, _ = blocking_waits(c_pid, c_end, matches(pd.Series(call_names), BLOCKING_NAME), device, d_end, launched_by)
    del launched_by, c_pid, c_rows
    gpu_set = (waited >= 0) & (d_end[np.maximum(waited, 0)] > c_start)
    pred = np.concatenate([pred, np.where(gpu_set, waited, prev_call).astype(position)])
    del waited, gpu_set, prev_call

    # from the first to the last device work that lasted, as the devices' spans run (an op of no
    # duration at either end is not busy time: the path would outrun the span)
    lasting = d_end > d_start
    lasted = np.flatnonzero(lasting) if lasting.any() else np.arange(n_dev)
    first_device = int(d_start[lasted].min())
    last = int(lasted[np.argmax(d_end[lasted])])
    del lasting, lasted
    if window is not None:
        inside = np.flatnonzero((d_end <= window[1]) & (d_end > window[0]))
        if not len(inside):
            return None
        last = int(inside[np.argmax(d_end[inside])])
        first_device = max(first_device, window[0])
    nodes = _walk(pred, end, last, first_device)
    # the path's segments, its events then the gaps before them, each array filled in place: a path of
    # ten million events holds its five columns and little more, not a temporary of each before they are joined
    node_start = start[nodes]
    follows = pred[nodes]
    del pred
    at = end.take(np.maximum(follows, 0))  # when each event's dependency was ready (its start where it has none)
    np.copyto(at, node_start, where=follows < 0)
    del follows, start
    np.maximum(at, first_device, out=at)
    gap = np.flatnonzero(at < node_start).astype(position)  # the time between: a wait on the device, or host work
    m, size = len(nodes), len(nodes) + len(gap)
    on_host = (nodes >= n_dev).view(np.int8)  # the kinds as codes: 0 device, 1 host call; 3 wait, 2 host work
    kind = np.empty(size, dtype=np.int8)
    kind[:m], kind[m:] = on_host, 3 - on_host[gap]
    seg_start = np.empty(size, dtype=np.int64)
    np.maximum(node_start, at, out=seg_start[:m])
    np.take(at, gap, out=seg_start[m:], mode="clip")  # valid positions: clip, which writes out unbuffered
    del at
    seg_end = np.empty(size, dtype=np.int64)
    np.take(end, nodes, out=seg_end[:m], mode="clip")
    np.take(node_start, gap, out=seg_end[m:], mode="clip")
    del node_start, end
    calls = np.flatnonzero(on_host)
    event = np.full(size, -1, dtype=position)
    event[:m] = nodes
    event[calls] -= n_dev
    return Path(kind=kind, start=seg_start, end=seg_end, event=event, device_names=gpu["name"].array,
                call_names=call_names, gap_before=gap, call_thread=call_thread, device_ops=gpu)


def step_window(trace: Trace, step: int) -> tuple[int, int]:
    """A step's window: from its host start to the end of its device work (or of its host range
    when it launched none); KeyError naming the steps there are."""
    rows = trace.steps[trace.steps["step"] == step]
    if rows.empty:
        raise KeyError(f"no step {step}; the steps are {', '.join(str(s) for s in trace.steps['step'].tolist()) or 'none'}")
    row = rows.iloc[0]
    end = int(row["gpu_end"]) if not pd.isna(row["gpu_end"]) else int(row["end"])
    return int(row["start"]), max(end, int(row["end"]))


def range_window(trace: Trace, name: str, instance: int = 1) -> tuple[int, int]:
    """The window of a host range (`record_function`, NVTX) by name and instance (1 = the first):
    its start to its end, or to the end of the device work launched inside it; KeyError when there
    is no such range."""
    cpu = trace.cpu
    rows = cpu[among(cpu["name"], [name])].sort_values("start")  # by its categories: no string per event
    if len(rows) < instance or instance < 1:
        raise KeyError(f"no instance {instance} of a range named {name!r} ({len(rows)} in the trace)")
    row = rows.iloc[instance - 1]
    start, end = int(row["start"]), int(row["end"])
    gpu = trace.gpu
    launched = gpu["correlation"].isin(cpu.loc[(cpu["start"] >= start).to_numpy() & (cpu["end"] <= end).to_numpy()
                                               & among(cpu["kind"], ["runtime", "driver"]), "correlation"])
    device_end = int(gpu.loc[launched.to_numpy(), "end"].max()) if launched.any() else end
    return start, max(end, device_end)


def thread_key(rows: pd.DataFrame) -> np.ndarray:
    """Each host row's thread as one number (normalize.thread_keys)."""
    return thread_keys(rows["pid"].to_numpy(), rows["tid"].to_numpy())


def blocking_waits(c_pid: np.ndarray, c_end: np.ndarray, blocking: np.ndarray, d_device: np.ndarray,
                   d_end: np.ndarray, launched_by: np.ndarray) -> tuple[np.ndarray, int]:
    """For each blocking call, the device op it waited for: the one that ended last before the call
    returned, among the ops on the devices its process launched work on (a process waits for its own
    GPUs, never another process's); -1 for other calls. Also how many blocking calls are in a process
    that launched nothing here (they wait for nothing)."""
    waited = np.full(len(c_end), -1, dtype=np.int64)
    lost = 0
    linked = launched_by >= 0
    # which devices each process launched on: hashed, not sorted (np.unique along an axis sorts every op)
    pairs = pd.DataFrame({"pid": launched_by[linked], "device": d_device[linked]}).drop_duplicates().to_numpy().T
    for pid in np.unique(c_pid[blocking]):
        asking = np.flatnonzero(blocking & (c_pid == pid))
        devices = pairs[1][pairs[0] == pid]
        if not len(devices):
            lost += len(asking)
            continue
        mine = np.flatnonzero(np.isin(d_device, devices))
        by_end = mine[np.argsort(d_end[mine], kind="stable")]
        at = np.searchsorted(d_end[by_end], c_end[asking], side="right") - 1
        waited[asking] = np.where(at >= 0, by_end[np.maximum(at, 0)], -1)
    return waited, lost


def ended_last_before(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each event (in start order), the one that ended last by the time it started, among the
    events before it in that order; -1 where none did. An event of no duration ends as it starts: it
    never counts as ended before itself, nor before an event that starts with it later in the order,
    which would make each the other's dependency and end the walk there."""
    n = len(start)
    by_end = np.argsort(end, kind="stable")  # equal ends in start order
    ends = end[by_end]
    at = np.searchsorted(ends, start, side="left") - 1  # ended strictly before it started
    tied = np.flatnonzero(ends[np.minimum(at + 1, n - 1)] == start) if n else at
    if len(tied):  # others ended just as it started: those before it in the order count too
        rank = np.concatenate([[0], np.cumsum(ends[1:] != ends[:-1])])  # equal ends, one rank
        keys = rank * n + by_end  # ascending: by end, then by order
        at[tied] = np.searchsorted(keys, rank[at[tied] + 1] * n + tied, side="left") - 1
    return np.where(at >= 0, by_end[np.maximum(at, 0)], -1)


#: a run of events each following the one just before it (pred[i] == i - 1) this long or longer is
#: walked as one slice: back-to-back kernels on a stream, a thread's launch calls one after another
RUN_WALKED_WHOLE = 32


def _walk(pred: np.ndarray, end: np.ndarray, node: int, floor: int, whole_from: int = RUN_WALKED_WHOLE) -> np.ndarray:
    """Follow each event's binding dependency back from `node` while it ends after `floor`. Where
    the path follows a long run of events each bound by the one just before it, the run is taken
    as one slice; elsewhere one event at a time (memoryviews of the int64 arrays: each read a
    Python int, as fast as a list's, without a list of every event's ints)."""
    n = len(pred)
    position = index_type(n)  # the path's events in the narrowest exact type: a path may hold every event
    index = np.arange(n, dtype=position)
    # each event's run's first event: the last one at or before it that does not follow the one before
    opens = np.ones(n, dtype=bool)
    opens[1:] = pred[1:] != index[:-1]
    first_of_run = np.maximum.accumulate(np.where(opens, index, 0))
    del index, opens
    pred_at, end_at, first_at = pred.data, end.data, first_of_run.data
    seen = np.zeros(n, dtype=bool)
    seen_at = seen.data.cast("B")
    pieces: list[np.ndarray] = []
    path = array("q")  # 8 bytes an event, not a list's int objects
    while node >= 0 and not seen_at[node] and end_at[node] > floor:  # a damaged trace's cycle stops the walk
        first = first_at[node]
        if node - first < whole_from:
            seen_at[node] = 1
            path.append(node)
            node = pred_at[node]
            continue
        # the run from `node` down to `first`, up to where it reaches the floor or a seen event
        stops = np.flatnonzero((end[first:node + 1] <= floor) | seen[first:node + 1])
        low = first + int(stops[-1]) + 1 if len(stops) else first
        if path:
            pieces.append(np.frombuffer(path, dtype=np.int64).astype(position))
            path = array("q")
        pieces.append(np.arange(node, low - 1, -1, dtype=position))
        seen[low:node + 1] = True
        node = pred_at[low]  # below the run, or the event that stopped it: the loop tests it
    if path:
        pieces.append(np.frombuffer(path, dtype=np.int64).astype(position))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=position)


def launch_positions(op_correlation: np.ndarray, call_correlation: np.ndarray,
                  position: type[np.signedinteger]) -> np.ndarray:
    """For each op, the position among `call_correlation`'s calls (those the caller's graph holds, in
    its order) of the call that shares its correlation id (the first, where several do), or -1. Not
    core.host.launch_rows, whose rows are of every runtime call, by id."""
    if not len(call_correlation):  # a trace of the device's activity alone: no op was launched here
        return np.full(len(op_correlation), -1, dtype=position)
    known = call_correlation >= 0
    by_corr = pd.Series(np.flatnonzero(known), index=call_correlation[known])
    by_corr = by_corr[~by_corr.index.duplicated()]
    return pd.Series(op_correlation).map(by_corr).fillna(-1).to_numpy(position)


def _previous(group: np.ndarray, t: np.ndarray, position: type[np.signedinteger] = np.int64) -> np.ndarray:
    """For each event, the one before it (by start) in its group (a stream, a thread), or -1. The
    groups are numbered by hashing, and the events ordered by one stable sort of a single key (each
    group's together, in time order, ties in position order): several times faster than
    np.lexsort((t, group)) on millions of events."""
    out: np.ndarray = np.full(len(t), -1, dtype=position)
    if len(t) < 2:
        return out
    number, groups = pd.factorize(group)
    if bool((t[1:] >= t[:-1]).all()):
        # already in time order (a device's ops as loaded): a stable sort of the group numbers alone keeps
        # it, and numpy sorts 16-bit numbers by radix, in linear time and little memory
        number = number.astype(np.int16 if len(groups) < 2**15 else np.int32)
        order = np.argsort(number, kind="stable")
    else:
        low = int(t.min())
        span = int(t.max()) - low + 1
        if span * len(groups) >= 2**62:  # the key would leave int64: two keys
            order = np.lexsort((t, number))
        else:
            order = np.argsort(number.astype(np.int64) * span + (t - low), kind="stable")
    ranked = number[order]
    same = np.flatnonzero(ranked[1:] == ranked[:-1])  # the event at same + 1 follows the one at same in its group
    del ranked, number
    out[order[same + 1]] = order[same]
    return out


def detect_critical_path(trace: Trace, hot: list[str], window: tuple[int, int] | None = None) -> CriticalPathResult | None:
    """The rank's critical path (or one window's: critical_path), and which of the `hot` kernels (by
    total time) are off it."""
    path = critical_path(trace, window)
    if path is None or not len(path.start):  # e.g. only zero-length device work: no chain to walk
        return None
    length = int(path.end.max() - path.start.min())
    # the path is this function's own and its ends are not read again: its durations take their place (a
    # path of ten million events holds one column the fewer)
    dur = np.subtract(path.end, path.start, out=path.end)
    # sums by masked reductions, not float copies of the path's columns (ten million segments and more)
    part = np.array([dur.sum(where=path.kind == k) for k in range(len(KINDS))], dtype=np.int64)
    # per kernel name (codes of the device ops' names): time on the path, instances on it, time in all
    names = path.device_names
    categories = [str(c) for c in names.categories]

    def device_segments(rows: slice, dur: np.ndarray = dur) -> tuple[np.ndarray, np.ndarray]:
        segment = np.flatnonzero(path.kind[rows] == 0) + rows.start
        return names.codes[path.event[segment]], dur[segment]

    on_path, count = _summed_by_code(len(categories), len(path.kind), device_segments)
    del device_segments
    host_ops = _host_ops(trace, path, dur)
    del dur  # the path's durations are summed: not held while the kernels' are
    gpu = path.device_ops  # the rows path.event indexes, filtered once by critical_path
    start, end, is_kernel = gpu["start"].to_numpy(np.int64), gpu["end"].to_numpy(np.int64), (gpu["kind"] == "kernel").to_numpy()

    def kernels(rows: slice) -> tuple[np.ndarray, np.ndarray]:  # a kernel's time in all; in a window, if it ends there
        counted = is_kernel[rows] if window is None else is_kernel[rows] & (end[rows] > window[0]) & (end[rows] <= window[1])
        kernel = np.flatnonzero(counted) + rows.start
        return names.codes[kernel], end[kernel] - start[kernel]

    totals, _ = _summed_by_code(len(categories), len(gpu), kernels)
    kernel_on_path = (on_path > 0) & (totals > 0)
    index = {n: i for i, n in enumerate(categories)}
    longest = np.argsort(-np.where(kernel_on_path, on_path, -1), kind="stable")[:TOP]
    wanted = {int(i) for i in longest if kernel_on_path[i]}
    wanted |= {index[n] for n in hot if n in index and kernel_on_path[index[n]]}  # the savings read the hot ones
    rows = sorted((PathKernel(categories[i], short_name(categories[i]), us(on_path[i]), int(count[i]), us(totals[i]),
                              us(on_path[i] / 2)) for i in wanted), key=lambda k: -k.on_path_us)
    return CriticalPathResult(
        length_us=us(length), device_us=us(part[0]), host_call_us=us(part[1]), host_work_us=us(part[2]),
        wait_us=us(part[3]), device_pct=pct(part[0], length), host_call_pct=pct(part[1], length),
        host_work_pct=pct(part[2], length), wait_pct=pct(part[3], length), events=int((path.event >= 0).sum()),
        kernels=rows,
        off_path=list(dict.fromkeys(short_name(n) for n in hot if n not in index or not kernel_on_path[index[n]])),
        host_ops=host_ops)


#: rows _summed_by_code gathers at once
SUM_CHUNK = 1 << 20


def _summed_by_code(codes: int, rows: int,
                    pick: Callable[[slice], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Weights summed and counted by code (a name's, -1: none) over `rows` rows, SUM_CHUNK at a time:
    `pick` gives the codes and weights of the rows of a slice it counts. Ten million durations are
    never gathered, nor made floats, at once."""
    total, count = np.zeros(codes), np.zeros(codes, dtype=np.int64)
    for lo in range(0, rows, SUM_CHUNK):
        code, weight = pick(slice(lo, lo + SUM_CHUNK))
        named = code >= 0
        total += np.bincount(code[named], weights=weight[named], minlength=codes)
        count += np.bincount(code[named], minlength=codes)
    return total, count


#: points at which each host segment of the path is read: its time is split among the ops there
_SAMPLES = 8


def _host_ops(trace: Trace, path: Path, dur: np.ndarray, top: int = TOP) -> list[PathHostOp]:
    """The innermost op on its thread at evenly spaced points of each host segment of the path (a
    call, or the host work before one), its time split among them and summed by op name: HTA's
    named host nodes (`aten::empty`, `cudnn_batch_norm`) where the path says host work."""
    host = np.flatnonzero((path.kind == 1) | (path.kind == 2))
    cpu = trace.cpu
    # the ops of the threads the path's host time is on (one or two, of however many the trace has),
    # as the arrays asked of them: no copy of their rows
    rows = np.flatnonzero(among(cpu["kind"], ["op"]))
    op_thread = thread_keys(cpu["pid"].to_numpy()[rows], cpu["tid"].to_numpy()[rows])
    seg_thread = path.threads(host)
    on_path = np.isin(op_thread, seg_thread)
    rows, op_thread = rows[on_path], op_thread[on_path]
    if not len(host) or not len(rows):
        return []
    op_start, op_end = cpu["start"].to_numpy(np.int64)[rows], cpu["end"].to_numpy(np.int64)[rows]
    fraction = (np.arange(_SAMPLES) + 0.5) / _SAMPLES
    start, length = path.start[host], dur[host]
    # where no op on the segment's thread starts or ends between its first and last point, every point
    # has the first one's op: that one is asked for, with the whole segment's time (a launch call, mostly).
    # Only the points asked are built: no table of every segment's eight
    uniform = ~_op_boundary_between(op_start, op_end, op_thread, seg_thread,
                                    (start + length * fraction[0]).astype(np.int64),
                                    (start + length * fraction[-1]).astype(np.int64))
    points = np.where(uniform, 1, _SAMPLES)
    segment = np.repeat(np.arange(len(host)), points)
    nth = np.arange(len(segment)) - np.repeat(np.cumsum(points) - points, points)
    del points
    at_time = (start[segment] + length[segment] * fraction[nth]).astype(np.int64)
    share = np.where(uniform, length, length / _SAMPLES)[segment]
    thread = seg_thread[segment]
    del segment, nth, uniform
    at = innermost_by_thread(op_thread, op_start, op_end, thread, at_time)
    del at_time, thread, op_start, op_end
    named = at >= 0
    if not named.any():
        return []
    names = cpu["name"].array
    codes = names.codes[rows[at[named]]]
    share = share[named]
    time = np.bincount(codes, weights=share, minlength=len(names.categories))
    whole = float(dur[host].sum())
    best = np.argsort(-time, kind="stable")[:top]
    return [PathHostOp(str(names.categories[i]), us(time[i]), pct(time[i], whole)) for i in best if time[i] > 0]


def _op_boundary_between(start: np.ndarray, end: np.ndarray, op_thread: np.ndarray, thread: np.ndarray,
                         first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Whether an op (its start, end and thread as thread_keys) of the thread starts or ends in
    [first, last], for each query: a thread at a time (the path's host time is on few)."""
    inside = np.zeros(len(first), dtype=bool)
    for t in np.unique(thread):
        mine, asked = op_thread == t, np.flatnonzero(thread == t)
        bounds = np.sort(np.concatenate([start[mine], end[mine]]))
        inside[asked] = np.searchsorted(bounds, last[asked], side="right") > np.searchsorted(bounds, first[asked])
    return inside


def critical_path_sentence(result: CriticalPathResult) -> str | None:
    text = (f"The critical path ({result.events} events over {duration(result.length_us)}) is "
            f"{result.device_pct:.1f}% device work, {result.host_call_pct:.1f}% host calls, "
            f"{result.host_work_pct:.1f}% host work between them and {result.wait_pct:.1f}% waits")
    if result.kernels:
        k = result.kernels[0]
        # a sentence names kernels to 80 characters (a Tensile GEMM's name runs to 600); tables and tools keep them whole
        text += (f"; {shorten(k.short_name, 80)} is on it for {duration(k.on_path_us)} of its {duration(k.total_us)}, "
                 f"so making it twice as fast saves at most {duration(k.saving_2x_us)}")
    if result.off_path:
        # short names are not unique (cutlass::Kernel2<…> of two tile shapes): one on the path makes an off one "another"
        on = {k.short_name for k in result.kernels}
        off = [f"another {shorten(name, 80)}" if name in on else shorten(name, 80) for name in result.off_path[:3]]
        text += f"; not on it: {', '.join(off)} (other work hides them: faster, they save nothing)"
    if result.host_ops:
        text += "; its host time is in " + ", ".join(f"{h.name} {duration(h.on_path_us)}" for h in result.host_ops[:3])
    return text + "."


#: its walk frees about as much as the trace holds: the pages go back before the replay needs room
DETECTOR = Detector("critical_path", "Critical path", "The chain of work and waits that sets the trace's length.", None,
                    CriticalPathResult, lambda i, p: detect_critical_path(i.trace, [k.name for k in i["kernels"].top]),
                    reads=("kernels",), place=19, tool=False, frees=True,
                    sentence=lambda r, p: critical_path_sentence(r))
