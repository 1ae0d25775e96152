"""Idle gaps on the device and their causes: what the host was doing while the GPU waited.

A gap shorter than `launch_gap_us` is launch latency. A longer one gets the first cause that
holds, in this order:

0. `device_stall`: the op after the gap had been launched (its launch call had returned) for at
   least `host_cover` of the gap and `stall_min_us`, the host recorded no event meanwhile (one a
   cudaStreamWaitEvent may have held the op for), and the device ran nothing: whatever the host
   did, the GPU had work and did not start it. Something outside the trace held it
   (another process on the GPU, the driver, a wait on another device); the evidence names the op
   and how long it was queued.
1. `dataloader`: DataLoader/DataPipe `__next__` covers at least `loader_cover` of the gap. Put
   before `sync` (DESIGN.md lists sync first) because a sync that precedes a loader-bound gap
   is not what to fix: without it the host would still be loading the batch the next kernels need.
2. `sync`: a call that waits for the GPU (vocabulary.BLOCKING_CALLS: synchronizes, synchronous
   copies such as `.item()`'s, the allocator's cudaFree and pinned allocations, on CUDA and HIP)
   was already waiting when the gap began and returned inside it or up to `sync_slack_us` before
   it (one made once the GPU was idle waited for nothing); the evidence names the op and the
   user's Python line above it (`aten::item` at `train.py(42)`), the verdict the fix for its kind.
   Also every gap after a blocking call until the host has queued work again: the call drained
   the device, and while each device op after it was launched only once the one before it had
   ended (the host behind, the queue empty), the gaps between them are the wait's, whatever small
   launches (a per-class `.item()` loop's kernels) or host work (bookkeeping after a `.cpu()`)
   came between; the evidence names the wait's line and the host work's.
3. `launch_overhead`: the host issued the next kernel only during the gap, with a launch call,
   that kernel ran shorter than its launch call, and the gap is at most `launch_bound_max_us`:
   the host cannot launch fast enough. (Longer waits are host work, not launch cost.)
4. `host_other`: host events cover at least half of the gap (the evidence names them).
5. `no_host_activity`: nothing traced on the host (untraced Python, I/O, another process).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...format import percent
from ...trace.model import Trace, matches
from ..core import intervals as iv
from ..core.bounds import Count, Cover, Micros
from ..core.encode import to_data
from ..core.host import (
    LAUNCH_CALLS,
    GapEvidence,
    GapHost,
    calls_by_correlation,
    event_records,
    gap_host,
    host_union,
    launch_calls,
    launch_rows,
    op_above,
    python_line_above,
    range_above,
    sync_calls,
)
from ..core.view import DeviceView, device_time_ns, device_views, index_type, pct, us, wall_span_ns
from ..core.vocabulary import GAP_CAUSES
from .base import Detector, Key


@dataclass(frozen=True)
class IdleParams:
    launch_gap_us: Micros = 10.0  # shorter gaps between device ops are launch latency
    sync_slack_us: Micros = 20.0  # a sync ending this long before a gap still explains it
    # a sync followed by at most this many device ops its own thread launched after it still
    # explains the first gap after them (nonzero, masked_select, unique: sync, then a few kernels)
    loader_cover: Cover = 0.5  # share of a gap the DataLoader must cover to be its cause
    host_cover: Cover = 0.5  # share of a gap host events must cover for `host_other`
    launch_bound_max_us: Micros = 1000.0  # longer gaps are not put down to launch cost
    # queued at least this long before a gap's end (and over host_cover of it) with the device idle is a stall:
    # shorter waits are launch latency and the host and device clocks' alignment
    stall_min_us: Micros = 100.0
    top: Count = 10  # how many gaps to report with evidence


@dataclass(frozen=True)
class Gap:
    device: int
    start_us: float  # from the trace's first event
    dur_us: float
    cause: str
    evidence: GapEvidence = field(default_factory=lambda: GapEvidence())
    ts_us: float = 0.0  # the start on the trace's own clock (µs, as Kineto writes ts): to find it in a viewer


@dataclass(frozen=True)
class IdleLine:
    """A line of the user's code and the idle it leaves the GPU: the gaps (launch latency aside) the
    launching thread spent there, a sync's gaps at the line that waited."""

    python: str
    idle_us: float
    gaps: int
    cause: str  # the cause with the most of its idle


@dataclass(frozen=True)
class SyncSite:
    """Where synchronizations stalled the device: the call, the op and the Python line."""

    call: str
    op: str | None
    python: str | None
    count: int
    idle_us: float
    # the user's line the launching thread was in during those gaps, once the wait had returned (the
    # host work the wait exposed: a per-class loop, bookkeeping after a `.cpu()`), where it is another
    after: str | None = None


class LaunchBound(TypedDict):
    """An op (and its launch API) whose kernels ended launch-bound gaps, with the range holding most of them."""

    op: str
    launch_call: str
    gaps: int
    idle_us: float
    range: str | None


@dataclass(frozen=True)
class DeviceIdle:
    """Idle time on one device, over its own span."""

    span_us: float
    idle_us: float
    idle_pct: float  # of the device's span
    by_cause_us: dict[str, float]


@dataclass(frozen=True)
class IdleResult:
    """Idle time on one rank. With one device span_us and device_time_us are its span; with
    several, span_us is the rank's wall span and idle and its percentages are over device time
    (the devices' spans added up). `devices` has each device over its own span."""

    idle_us: float
    span_us: float
    device_time_us: float
    idle_pct: float  # of device time
    gaps: int  # gaps of any length
    by_cause_us: dict[str, float]
    by_cause_pct: dict[str, float]  # each cause's idle time as a share of device time
    by_cause_count: dict[str, int]
    top_gaps: list[Gap]
    sync_sites: list[SyncSite]
    has_python_frames: bool
    devices: dict[int, DeviceIdle] = field(default_factory=dict)
    launch_bound: list[LaunchBound] = field(default_factory=list)  # who launched too slowly
    # 2.14: the user's lines the GPU idles over most ("which line of my code makes the GPU wait?"); empty
    # without Python frames
    by_line: list[IdleLine] = field(default_factory=list)

    def cause_pct(self, cause: str) -> float:
        """A cause's idle time as a share of device time."""
        return self.by_cause_pct.get(cause, 0.0)


#: a gap table's cause column: a byte a gap, compared and grouped by code (an object column of millions
#: of strs was a tenth of the analysis). Sorted, so grouping orders causes by name, as strings would.
CAUSE_DTYPE = pd.CategoricalDtype(sorted(GAP_CAUSES))


def classify_gaps(trace: Trace, view: DeviceView, params: IdleParams = IdleParams()) -> pd.DataFrame:
    """Every gap on one device with its cause: columns start, end, dur, cause, sync (row label
    in trace.cpu of the sync call, or -1), next_op (position in view.work of the op after it).
    trace_gaps builds the rank's one gap table from these; detectors read that table."""
    return _classify_gaps(trace, view, params)


def _classify_gaps(trace: Trace, view: DeviceView, params: IdleParams) -> pd.DataFrame:
    g_start, g_end = iv.gaps(view.busy)
    dur = g_end - g_start
    n = len(dur)
    cause = np.full(n, CAUSE_DTYPE.categories.get_loc("launch_latency"), dtype=np.int8)  # codes of CAUSE_DTYPE
    # the device op right after each gap (kept in the table for every gap)
    work_start = view.work["start"].to_numpy(np.int64)
    next_op = np.minimum(np.searchsorted(work_start, g_end, side="left"), len(work_start) - 1)
    sync_label = np.full(n, -1, dtype=np.int64)
    # a short gap is launch latency whatever the host did: only the long ones are looked into
    # (millions of tiny kernels leave millions of gaps, few of them long)
    at = np.flatnonzero(dur >= params.launch_gap_us * 1000)
    if len(at):
        reasons, sync_label[at] = _long_gap_causes(trace, view, g_start[at], g_end[at], next_op[at], params)
        cause[at] = CAUSE_DTYPE.categories.get_indexer(reasons)
    # row labels and positions in int32 where they fit (times stay int64 ns): a gap table has a row per gap
    index = index_type(max(len(trace.cpu), len(view.work)))
    return pd.DataFrame({"start": g_start, "end": g_end, "dur": dur,
                         "cause": pd.Categorical.from_codes(cause, dtype=CAUSE_DTYPE), "sync": sync_label.astype(index),
                         "next_op": next_op.astype(index)}, copy=False)


def _long_gap_causes(trace: Trace, view: DeviceView, start: np.ndarray, end: np.ndarray, op: np.ndarray,
                     params: IdleParams) -> tuple[np.ndarray, np.ndarray]:
    """Each long gap's cause and the label (in trace.cpu) of the blocking call it waited for, or -1:
    a device that did not start work already queued, data loading over most of it, a sync, a launch
    that came late, other host work, or nothing on the host."""
    length = end - start
    reason = np.empty(len(start), dtype=object)
    reason[:] = "launch_latency"
    label = np.full(len(start), -1, dtype=np.int64)
    undecided = np.ones(len(start), dtype=bool)

    # the host call that launched the op after each gap
    launch = launch_calls(trace, view.work["correlation"].to_numpy()[op], ("name", "start", "end"))
    launched = launch["start"].notna().to_numpy()
    launch_start = launch["start"].to_numpy(np.int64, na_value=-1)  # exact: epoch ns as floats are not
    queued_from = np.maximum(launch["end"].to_numpy(np.int64, na_value=0), start)
    queued = np.where(launched, end - queued_from, 0)
    # an event the host recorded meanwhile may be what the op waited for (a cudaStreamWaitEvent before it)
    records = event_records(trace)
    released = np.searchsorted(records, end) > np.searchsorted(records, queued_from)
    is_stall = launched & ~released & (queued >= params.host_cover * length) & (queued >= params.stall_min_us * 1000)
    reason[is_stall] = "device_stall"
    undecided &= ~is_stall

    loader = host_union(trace, ("dataloader",))
    is_loader = undecided & (iv.covered(loader, start, end) / np.maximum(length, 1) >= params.loader_cover)
    reason[is_loader] = "dataloader"
    undecided &= ~is_loader
    launch_dur = (launch["end"] - launch["start"]).to_numpy(dtype=float)  # NaN: no call
    is_launch_call = matches(launch["name"], LAUNCH_CALLS)  # no call: no name, not a launch
    del launch

    syncs = sync_calls(trace)
    if len(syncs):
        ends, starts = syncs["end"].to_numpy(np.int64), syncs["start"].to_numpy(np.int64)
        slack = int(params.sync_slack_us * 1000)
        first = np.searchsorted(ends, start - slack, side="left")
        ok = first < len(ends)
        # it returned inside the gap (or just before it), and it was already waiting when the GPU
        # ran dry: a blocking call made once the GPU was idle (a pinned allocation while the host
        # initialises cuDNN) waited for nothing, and did not cause the gap
        ok[ok] = (ends[first[ok]] <= end[ok]) & (starts[first[ok]] < start[ok])
        is_sync = undecided & ok
        label[is_sync] = syncs.index.to_numpy()[first[is_sync]]
        reason[is_sync] = "sync"
        undecided &= ~is_sync
        drained = _drained_by_sync(trace, view, syncs, start, op, undecided, params)
        label[drained >= 0] = drained[drained >= 0]
        reason[drained >= 0] = "sync"
        undecided &= drained < 0

    op_dur = view.work["end"].to_numpy(np.int64)[op] - view.work["start"].to_numpy(np.int64)[op]
    late_launch = launched & (launch_start >= start)
    is_launch = (undecided & late_launch & is_launch_call & (op_dur < launch_dur)
                 & (length <= params.launch_bound_max_us * 1000))
    reason[is_launch] = "launch_overhead"
    undecided &= ~is_launch

    host = host_union(trace, ("op", "python", "runtime", "driver", "annotation"))
    host_share = iv.covered(host, start, end) / np.maximum(length, 1)
    reason[undecided & (host_share >= params.host_cover)] = "host_other"
    reason[undecided & (host_share < params.host_cover)] = "no_host_activity"
    return reason, label


def _drained_by_sync(trace: Trace, view: DeviceView, syncs: pd.DataFrame, g_start: np.ndarray, next_op: np.ndarray,
                     candidates: np.ndarray, params: IdleParams) -> np.ndarray:
    """For each candidate gap, the label (in trace.cpu) of the blocking call whose wait it still
    belongs to, or -1: the last call of the launching process that returned before the gap, after
    which the device had drained, and every device op from then up to the one ending the gap was
    launched only once the device had run out of work (the host never got ahead again). Until the
    host queues work again, the gaps are the wait's, whatever it launched or did in between."""
    found = np.full(len(g_start), -1, dtype=np.int64)
    ends = syncs["end"].to_numpy(np.int64)
    work = view.work
    if not candidates.any() or not len(ends) or not len(work):
        return found
    slack = int(params.sync_slack_us * 1000)
    launch = launch_calls(trace, work["correlation"].to_numpy(), ("start", "pid"))
    known = launch["start"].notna().to_numpy()
    launched_at = launch["start"].fillna(-1).to_numpy(np.int64)
    pid = launch["pid"].fillna(-1).to_numpy().astype(np.int64)
    work_start, work_end = work["start"].to_numpy(np.int64), work["end"].to_numpy(np.int64)
    busy_until = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(work_end)[:-1]])  # before each op
    # an op launched while the device still had work before it: the host was ahead, work was queued
    queued = ~known | (launched_at < busy_until)
    queued_before = np.concatenate([[0], np.cumsum(queued)])
    gap = np.flatnonzero(candidates)
    last = np.searchsorted(ends, g_start[gap], side="right") - 1  # the last call that returned before the gap
    ok = last >= 0
    gap, last = gap[ok], last[ok]
    returned = ends[last]
    lo = np.searchsorted(work_start, returned, side="left")  # the ops that started after it returned
    hi = next_op[gap] + 1  # ... up to and including the one that ends the gap
    drained_then = busy_until[np.clip(lo, 0, len(work) - 1)] <= returned + slack  # it waited for all the work
    same_process = pid[np.clip(hi - 1, 0, None)] == syncs["pid"].to_numpy(np.int64)[last]
    never_ahead = (queued_before[np.clip(hi, 0, len(work))] - queued_before[np.clip(lo, 0, len(work))]) == 0
    ok = (lo < hi) & drained_then & same_process & never_ahead
    found[gap[ok]] = syncs.index.to_numpy()[last[ok]]
    return found


def gap_launcher(trace: Trace, device: int, next_op: int) -> tuple[int, int] | None:
    """The (pid, tid) that launched the device op ending a gap: the thread whose work the GPU
    waited for. None when that op has no launch call in the trace."""
    view = next((v for v in device_views(trace) if v.device == device), None)
    if view is None or not 0 <= next_op < len(view.work):
        return None
    row = int(launch_rows(trace, view.work["correlation"].to_numpy()[next_op:next_op + 1])[0])
    if row < 0:
        return None
    calls = calls_by_correlation(trace)
    return int(calls["pid"].iloc[row]), int(calls["tid"].iloc[row])


def gap_host_activity(trace: Trace, gap) -> GapHost:
    """What the thread that launched the work after a gap (a row of trace_gaps) was doing during
    it: the evidence the largest gaps carry, in the analysis, the tools and annotate alike."""
    return gap_host(trace, int(gap.start), int(gap.end), gap_launcher(trace, int(gap.device), int(gap.next_op)))


def trace_gaps(trace: Trace, params: IdleParams = IdleParams()) -> pd.DataFrame:
    """The rank's one gap table: the classified gaps of every device, with a `device` column, the
    `step_row` (row in trace.steps, -1 for none) each belongs to by gap_step_rows' rule, and that
    step's number (`step`, -1 for none). The analysis builds it once and hands it to every
    detector that reads gaps (never recomputed behind a memo)."""
    frames = [classify_gaps(trace, view, params).assign(device=np.int32(view.device)) for view in device_views(trace)]
    gaps = pd.concat(frames, ignore_index=True) if frames else _no_gaps()
    rows = gap_step_rows(trace, gaps["start"].to_numpy(np.int64)).astype(np.int32)  # steps: far fewer than 2**31
    numbers = np.append(trace.steps["step"].to_numpy(np.int64), -1)  # row -1: no step
    if len(numbers) and np.abs(numbers).max() < 2**31:  # a row per gap: in int32 where the numbers fit
        numbers = numbers.astype(np.int32)
    return gaps.assign(step_row=rows, step=numbers[rows])


def idle_by(gaps: pd.DataFrame, keys: list[str], causes: bool = False) -> pd.Series:
    """Idle ns of the gap table grouped by its columns `keys` (step, device, cause, or a column a
    caller assigned: a phase, a window, a range), and by cause too with `causes`. The one answer to
    "how much idle in each step, phase, window or range": each gap counts once, whole, where its
    row says (for steps: gap_step_rows' rule), so the parts add up to the idle they split."""
    by = [*keys, "cause"] if causes else keys
    return gaps.groupby(by, sort=True, observed=True)["dur"].sum() if len(gaps) else pd.Series(dtype="int64")


def gap_step_rows(trace: Trace, starts: np.ndarray) -> np.ndarray:
    """The row in trace.steps of the step each gap (by its start) belongs to, -1 for none. A gap
    inside a step's device range is that step's; one before a step's first device work is the
    step that comes next (the stall between two steps is the next step's: it waited for its data),
    so every idle nanosecond of a step's range belongs to it. Steps, the tools, reports and
    annotations all read this rule, through trace_gaps' `step` column or here."""
    steps = trace.steps
    # exact ns (epoch times as floats are off by up to 128 ns); steps without device work sort last
    last = np.iinfo(np.int64).max
    lo = steps["gpu_start"].to_numpy(np.int64, na_value=last)
    hi = steps["gpu_end"].to_numpy(np.int64, na_value=last)
    order = np.argsort(lo, kind="stable")
    ranged = int(steps["gpu_start"].notna().sum())  # steps with device work, first in `order`
    if not ranged or not len(starts):
        return np.full(len(starts), -1, dtype=np.int64)
    start = starts.astype(np.int64)
    slot = np.searchsorted(lo[order][:ranged], start, side="right") - 1
    inside = (slot >= 0) & (start < hi[order[np.clip(slot, 0, None)]])
    owner = np.where(inside, slot, slot + 1)  # not inside one: the step that comes next owns it
    valid = (owner >= 0) & (owner < ranged)
    return np.where(valid, order[np.clip(owner, 0, ranged - 1)], -1).astype(np.int64)


def detect_idle(trace: Trace, params: IdleParams = IdleParams(), gaps: pd.DataFrame | None = None) -> IdleResult:
    """Idle time on every device, split by cause, with the largest gaps and their evidence.
    `gaps`: the rank's gap table (trace_gaps), computed once by the analysis."""
    origin = trace.origin_ns()
    views = device_views(trace)
    span = device_time_ns(views)
    gaps = trace_gaps(trace, params) if gaps is None else gaps
    idle = int(gaps["dur"].sum())
    by_cause = gaps.groupby("cause", observed=True)["dur"].agg(["sum", "size"])
    by_cause_us = {c: us(by_cause.loc[c, "sum"]) for c in GAP_CAUSES if c in by_cause.index}
    by_cause_count = {c: int(by_cause.loc[c, "size"]) for c in GAP_CAUSES if c in by_cause.index}

    details = _sync_details(trace, gaps[gaps["sync"] >= 0])
    top = gaps.nlargest(params.top, "dur")
    top_gaps = [_evidence(trace, row, origin, details) for row in top.itertuples()]
    devices = {}
    for view in views:
        mine = gaps[gaps["device"] == view.device]
        device_idle = int(mine["dur"].sum())
        causes = mine.groupby("cause", observed=True)["dur"].sum()
        devices[view.device] = DeviceIdle(us(view.span_ns), us(device_idle), pct(device_idle, view.span_ns),
                                          {c: us(causes[c]) for c in GAP_CAUSES if c in causes.index})
    return IdleResult(
        idle_us=us(idle), span_us=us(wall_span_ns(views)), device_time_us=us(span), idle_pct=pct(idle, span),
        gaps=len(gaps), devices=devices, launch_bound=_launch_bound(trace, gaps),
        by_cause_us=by_cause_us, by_cause_pct={c: pct(by_cause.loc[c, "sum"], span) for c in by_cause_us},
        by_cause_count=by_cause_count, top_gaps=top_gaps,
        sync_sites=_sync_sites(details), has_python_frames=trace.meta.has_python_frames,
        by_line=_idle_by_line(trace, gaps, details, params.top) if trace.meta.has_python_frames else [],
    )


def _launch_bound(trace: Trace, gaps: pd.DataFrame, top: int = 3) -> list[LaunchBound]:
    """The ops (and launch APIs) whose kernels ended launch-bound gaps, by idle time, each with the
    record_function / NVTX range that holds most of its idle (`Optimizer.step#AdamW.step`: the
    op alone, `aten::add_`, does not say it is the optimizer)."""
    bound = gaps[gaps["cause"] == "launch_overhead"]
    if bound.empty:
        return []
    rows = []
    for view in device_views(trace):
        mine = bound[bound["device"] == view.device]
        work = view.work.iloc[mine["next_op"].to_numpy()]
        launch = launch_calls(trace, work["correlation"].to_numpy(), ("name", "pid", "tid", "start"))
        known = launch["start"].notna().to_numpy()
        names = np.full(len(launch), None, dtype=object)
        names[known] = range_above(trace, launch[known])
        rows.append(pd.DataFrame({"op": work["op"].astype(object).fillna("(no op)").to_numpy(),
                                  "launch_call": launch["name"].astype(object).fillna("-").to_numpy(),
                                  "range": pd.Series(names, dtype=object).fillna("").to_numpy(),
                                  "dur": mine["dur"].to_numpy()}))
    every = pd.concat(rows)
    table = every.groupby(["op", "launch_call"])["dur"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    by_range = every.groupby(["op", "launch_call", "range"])["dur"].sum()
    out = []
    for (op, call), r in table.head(top).iterrows():
        held = by_range.loc[(op, call)]
        name = held.idxmax()
        out.append(LaunchBound(op=str(op), launch_call=str(call), gaps=int(r["size"]), idle_us=us(r["sum"]),
                               range=name or None))
    return out


def _no_gaps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("start", "end", "dur", "sync", "next_op", "device")}
                        | {"cause": pd.Series(dtype=CAUSE_DTYPE)})


def _sync_details(trace: Trace, sync_gaps: pd.DataFrame) -> pd.DataFrame:
    """Per sync gap (same index): the call, the op the user called, the innermost op, the line,
    and the user's line the launching thread was in at the gap's middle (`after`: the host work
    the wait exposed), vectorized over gaps."""
    columns = ["call", "op", "inner_op", "python", "after", "dur"]
    if sync_gaps.empty:
        return pd.DataFrame(columns=columns)
    calls = trace.cpu.loc[sync_gaps["sync"].to_numpy()]
    inner, outer = op_above(trace, calls)
    python = python_line_above(trace, calls)
    return pd.DataFrame({"call": calls["name"].astype(str).to_numpy(),
                         "op": [o or i for o, i in zip(outer, inner)], "inner_op": inner,
                         "python": python, "after": _line_during(trace, sync_gaps),
                         "dur": sync_gaps["dur"].to_numpy()}, index=sync_gaps.index)


def _line_during(trace: Trace, gaps: pd.DataFrame) -> np.ndarray:
    """The user's innermost line on the thread that launched the work ending each gap, at the
    gap's middle (None where the trace has no frames or no launch)."""
    found = np.full(len(gaps), None, dtype=object)
    for view in device_views(trace):
        mine = np.flatnonzero(gaps["device"].to_numpy() == view.device)
        if not len(mine):
            continue
        launch = launch_calls(trace, view.work["correlation"].to_numpy()[gaps["next_op"].to_numpy()[mine]], ("pid", "tid"))
        known = launch["pid"].notna().to_numpy()
        if not known.any():
            continue
        middle = ((gaps["start"].to_numpy(np.int64) + gaps["end"].to_numpy(np.int64)) // 2)[mine]
        at = pd.DataFrame({"pid": launch["pid"].to_numpy(np.int64, na_value=-1)[known],
                           "tid": launch["tid"].to_numpy(np.int64, na_value=-1)[known], "start": middle[known]})
        found[mine[known]] = python_line_above(trace, at)
    return found


def _idle_by_line(trace: Trace, gaps: pd.DataFrame, details: pd.DataFrame, top: int) -> list[IdleLine]:
    """The user's lines with the most idle: each gap (launch latency aside: millions of short gaps, no line
    to blame) at the line the launching thread was in at its middle, a sync's at the line that waited."""
    long = gaps[gaps["cause"] != "launch_latency"]
    if long.empty:
        return []
    line = pd.Series(_line_during(trace, long), index=long.index, dtype=object)
    waited = details["python"].reindex(long.index)
    line = waited.where(waited.notna(), line)
    table = pd.DataFrame({"line": line, "cause": long["cause"].astype(str), "dur": long["dur"]}).dropna(subset=["line"])
    if table.empty:
        return []
    by_cause = table.groupby(["line", "cause"])["dur"].sum()
    totals = table.groupby("line")["dur"].agg(["sum", "size"]).sort_values("sum", ascending=False, kind="stable")
    return [IdleLine(str(name), us(r["sum"]), int(r["size"]), str(by_cause.loc[name].idxmax()))
            for name, r in totals.head(top).iterrows()]


def _sync_sites(details: pd.DataFrame, top: int = 10) -> list[SyncSite]:
    """Sync gaps grouped by (call, op, line), largest idle first; each with the other line the
    host was in during most of its idle, if any."""
    if details.empty:
        return []
    filled = details.fillna({"op": "", "python": "", "after": ""})
    grouped = filled.groupby(["call", "op", "python"])["dur"].agg(["size", "sum"])
    grouped = grouped.sort_values("sum", ascending=False).head(top)
    elsewhere = filled[(filled["after"] != "") & (filled["after"] != filled["python"])]
    after = (elsewhere.groupby(["call", "op", "python", "after"])["dur"].sum().reset_index()
             .sort_values("dur", ascending=False, kind="stable").drop_duplicates(["call", "op", "python"])
             .set_index(["call", "op", "python"])["after"])
    return [SyncSite(call, op or None, py or None, int(r["size"]), us(r["sum"]), after.get((call, op, py)))
            for (call, op, py), r in grouped.iterrows()]


def _text(value: object) -> str | None:
    """A string column's value, None where it is missing (NaN)."""
    return value if isinstance(value, str) else None


def _evidence(trace: Trace, gap, origin: int, details: pd.DataFrame) -> Gap:
    evidence = GapEvidence()
    if gap.cause == "sync" and gap.Index in details.index:
        d = details.loc[gap.Index]
        evidence = GapEvidence(sync_call=_text(d["call"]), op=_text(d["op"]), inner_op=_text(d["inner_op"]),
                               python=_text(d["python"]))
        if (after := _text(d["after"])) and after != evidence.get("python"):
            evidence["after"] = after  # the host work the wait exposed
    elif gap.cause != "launch_latency":  # a host-side cause: what the launching thread was doing
        evidence = GapEvidence(**to_data(gap_host_activity(trace, gap)))
        if gap.cause == "device_stall":  # and the op the device held back
            evidence |= _queued(trace, gap)
    return Gap(device=int(gap.device), start_us=us(gap.start - origin), dur_us=us(gap.dur), cause=gap.cause,
               ts_us=us(gap.start),
               evidence=evidence)


def _queued(trace: Trace, gap) -> GapEvidence:
    """A stalled gap's op (the one after it) and how long it sat queued on the idle device: from its
    launch call's return, or the gap's start if later, to its start (the classifier's `queued`)."""
    view = next(v for v in device_views(trace) if v.device == gap.device)
    work = view.work.iloc[int(gap.next_op)]
    returned = launch_calls(trace, np.array([work["correlation"]]), ("end",))["end"].to_numpy(np.int64, na_value=0)[0]
    return GapEvidence(queued_op=_text(work["name"]), queued_us=us(int(work["start"]) - max(int(returned), gap.start)))


#: the one gap table of a rank (trace_gaps): every detector that reads gaps reads this one
GAPS = Detector("gaps", "Gaps", "Every idle interval of every device, with its cause and the step, phase and range that "
                "own it.", None, pd.DataFrame, lambda i, p: trace_gaps(i.trace, p), settings="idle", keys=(), place=0,
                tool=False)


def idle_findings(result: IdleResult, on: str) -> list[tuple[str, str]]:
    """The three largest causes of idle time, each asked about."""
    return [(f"idle {percent(p)}: {cause}", f"Tell me about the idle time from {cause}{on}.")
            for cause, p in sorted(result.by_cause_pct.items(), key=lambda kv: -kv[1])[:3]]


DETECTOR = Detector("idle", "Idle", "Idle device time by cause, the largest gaps and what the host was doing over them.",
                    IdleParams(), IdleResult, lambda i, p: detect_idle(i.trace, p, i["gaps"]), reads=("gaps",),
                    settings="idle", keys=(Key("idle", IdleResult),), place=11, tool=False, findings=idle_findings)
