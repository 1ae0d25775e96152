"""Collectives matched across ranks: who enters last, who waits, and what the late rank was doing.

A collective ends at about the same moment on every rank (it cannot finish before the last rank
joins), so its time on one rank splits into **waiting** (before the last rank entered) and
communication proper. The **straggler** is the rank that enters last most often; its cost is the
others' waiting, and its cause is what its own GPU was doing just before it entered.

Matching: the k-th collective of each name on every rank (launch order), up to the count the
rank with fewest has; traces do not carry process groups, so each name is taken as one group.
Clocks: ranks on different hosts have different clocks, so each rank's clock is aligned to the
first rank's by the median difference of matched collective end times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..core import intervals as iv
from ..core.bounds import Cover, Micros, Percent
from ..core.view import device_views, pct, us
from ..core.vocabulary import GAP_ROOT
from .base import Detector
from .breakdown import Breakdown
from .collectives import moved_bytes


@dataclass(frozen=True)
class StragglerParams:
    late_tolerance_us: Micros = 5.0  # a rank counts as last when it enters this much after the next latest
    # share of all ranks' waiting a rank must cause to be the straggler (_caused_waiting: a rank late
    # once per step, by a lot, counts however rarely it is last); with 8 ranks a fair share is 12.5%
    straggler_waiting_pct: Percent = 30.0
    cause_cover: Cover = 0.5  # share of its lateness idle gaps must explain to name an idle cause


_IDLE_BEFORE = "idle_before:"  # + a root cause: lead-up idle columns of a rank's collectives


@dataclass(frozen=True)
class RankTimeline:
    """What the cross-rank comparison reads from one rank, computed where the rank is analysed so
    the comparison needs no events: each collective with what its GPU did since the previous one
    (the lead-up), and compute time inside the collectives' windows (waiting is a prefix of them).
    Times in ns on the rank's own clock."""

    rank: int | None
    # name, nth, device, start, end, moved (bus bytes), payload, busy_before, and idle_before:<root cause>
    collectives: pd.DataFrame
    compute: dict[int, iv.Intervals]  # per GPU: compute kernels, clipped to that GPU's collectives
    breakdown: Breakdown
    # per idle root cause: the user's own Python line (else the range) over the most of its idle,
    # so a straggler's extra host work is named as gap evidence names it
    frames: dict[str, str] = field(default_factory=dict)


def rank_timeline(trace: Trace, gaps: pd.DataFrame, breakdown: Breakdown) -> RankTimeline:
    """One rank's collectives, their lead-up and the compute that overlaps them."""
    table = _collectives(trace)
    idle, busy = _lead_up(trace, gaps, table)
    table["busy_before"] = busy
    for cause, values in idle.items():
        table[_IDLE_BEFORE + cause] = values
    compute = {}
    for view in device_views(trace):
        mine = (table["device"] == view.device).to_numpy()
        if mine.any():
            windows = iv.union(table["start"].to_numpy(np.int64)[mine], table["end"].to_numpy(np.int64)[mine])
            compute[view.device] = iv.intersect(view.compute, windows)
    return RankTimeline(trace.meta.rank, table, compute, breakdown, _frames_by_root(trace, gaps))


def _frames_by_root(trace: Trace, gaps: pd.DataFrame) -> dict[str, str]:
    """Per idle root cause, the user's innermost line (else the innermost range) on the launching
    thread at the middle of its gaps, the one over the most idle time. Vectorized over gaps."""
    from ..core.host import launch_calls, python_line_above, range_above

    host = gaps[gaps["cause"] != "launch_latency"]
    if host.empty:
        return {}
    rows = []
    for view in device_views(trace):
        mine = host[host["device"] == view.device]
        launch = launch_calls(trace, view.work["correlation"].to_numpy()[mine["next_op"].to_numpy()], ("pid", "tid"))
        known = launch["pid"].notna().to_numpy()
        rows.append(pd.DataFrame({"pid": launch["pid"].to_numpy(np.int64, na_value=-1)[known],
                                  "tid": launch["tid"].to_numpy(np.int64, na_value=-1)[known],
                                  "start": ((mine["start"] + mine["end"]) // 2).to_numpy()[known],
                                  "cause": mine["cause"].to_numpy()[known], "dur": mine["dur"].to_numpy()[known]}))
    at = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if at.empty:
        return {}
    line = python_line_above(trace, at)
    where = np.where(pd.isna(line), range_above(trace, at), line)
    at = at.assign(root=at["cause"].map(GAP_ROOT), where=where).dropna(subset=["where"])
    if at.empty:
        return {}
    held = at.groupby(["root", "where"])["dur"].sum().reset_index().sort_values("dur", ascending=False, kind="stable")
    return {str(r): str(w) for r, w in held.drop_duplicates("root")[["root", "where"]].itertuples(index=False)}


@dataclass(frozen=True)
class RankCollectives:
    """One rank in matched collectives. Times are sums over its matched collectives."""

    rank: int
    comm_us: float  # time inside matched collectives
    waiting_us: float  # before the last rank entered: the straggler's cost, not communication
    exposed_waiting_us: float  # waiting that no compute kernel on this rank overlaps
    communication_us: float  # communication proper: comm_us − waiting_us
    last_count: int  # collectives this rank entered last (by more than late_tolerance_us)
    late_by_us: float  # summed margin by which it was last
    caused_waiting_us: float  # the others' waiting it caused: its margin × the ranks that waited, summed
    compute_us: float
    device_time_us: float
    exposed_waiting_pct: float = 0.0  # the share people quote: its exposed waiting over its own device time


@dataclass(frozen=True)
class RankComparison:
    """Ranks side by side over their matched collectives, and the straggler if there is one."""

    matched: int  # collectives matched on every rank
    ranks: list[RankCollectives]
    straggler: int | None  # the rank that causes at least straggler_waiting_pct of all waiting
    straggler_last_pct: float  # share of matched collectives it (or, with none, the rank most often last) entered last
    straggler_cause: str | None  # a vocabulary.ROOT_CAUSES name: what delayed it (hot_kernel: busy computing)
    straggler_cause_us: dict[str, float] = field(default_factory=dict)  # what it did beyond the others, by cause
    others_waiting_us: float = 0.0  # waiting on every other rank: the straggler's cost
    others_exposed_waiting_pct: float = 0.0  # of the other ranks' device time, not hidden by compute
    caused_waiting_pct: float = 0.0  # of all ranks' waiting, the share the straggler (or the rank causing most) caused
    # matched collectives with a recorded payload, every rank: bus bandwidth (nccl-tests', see
    # collectives.py) over their kernel time, and over communication proper (after the last rank entered)
    payload_matched: int = 0
    busbw_gbps: float | None = None
    busbw_without_waiting_gbps: float | None = None


def _collectives(trace: Trace) -> pd.DataFrame:
    kernels = trace.gpu[(trace.gpu["kind"] == "kernel").to_numpy() & trace.gpu["is_comm"].to_numpy()]
    kernels = kernels.sort_values("start", kind="stable")
    names = kernels["name"].astype(str)
    return pd.DataFrame({"name": names.to_numpy(), "nth": names.groupby(names).cumcount().to_numpy(),
                         "device": kernels["device"].to_numpy(), "start": kernels["start"].to_numpy(np.int64),
                         "end": kernels["end"].to_numpy(np.int64), "moved": moved_bytes(kernels["collective"]),
                         "payload": kernels["collective"].to_numpy()})  # what scaling's model reads: kind, group


def compare_ranks(ranks: list[RankTimeline], params: StragglerParams = StragglerParams()) -> RankComparison | None:
    """Match collectives across ranks and split their time into waiting and communication; None
    for fewer than two ranks."""
    if len(ranks) < 2:
        return None
    tables = [r.collectives.set_index(["name", "nth"]) for r in ranks]
    keys = tables[0].index
    for table in tables[1:]:
        keys = keys.intersection(table.index)
    if len(keys) == 0:
        return RankComparison(0, [_row(r, 0, 0, 0, 0, 0.0) for r in ranks], None, 0.0, None)
    keys = keys.sort_values()
    matched = [t.loc[keys] for t in tables]
    start = np.stack([t["start"].to_numpy(np.int64) for t in matched])  # ranks × collectives
    end = np.stack([t["end"].to_numpy(np.int64) for t in matched])
    offset = np.median(end - end[0], axis=1).astype(np.int64)  # each rank's clock against rank 0's
    entry = start - offset[:, None]
    last_entry = entry.max(axis=0)
    waiting = np.clip(last_entry - entry, 0, end - start)
    order = np.sort(entry, axis=0)
    margin = order[-1] - order[-2]
    late = margin > params.late_tolerance_us * 1000
    last = np.where(late, entry.argmax(axis=0), -1)

    moved = np.stack([t["moved"].to_numpy(np.float64) if "moved" in t else np.full(len(t), np.nan) for t in matched])
    payload = np.isfinite(moved).all(axis=0)  # a collective every rank recorded the payload of
    busbw, without_waiting = _bus_bandwidth(moved[:, payload], (end - start)[:, payload],
                                            (end - start - waiting)[:, payload])
    n_payload = int(payload.sum())
    caused = _caused_waiting(entry, waiting)
    rows = []
    for i, r in enumerate(ranks):
        exposed = _exposed_waiting(r, matched[i], waiting[i])
        rows.append(_row(r, int((end[i] - start[i]).sum()), int(waiting[i].sum()), exposed,
                         int((last == i).sum()), float(margin[last == i].sum()), float(caused[i])))
    counts = np.bincount(last[last >= 0], minlength=len(ranks))
    total_waiting = float(waiting.sum())  # what _caused_waiting shares out
    s = int(caused.argmax()) if caused.any() else int(counts.argmax())
    last_pct, caused_pct = pct(counts[s], len(keys)), pct(caused[s], total_waiting)
    if not caused.any() or caused_pct < params.straggler_waiting_pct:
        return RankComparison(len(keys), rows, None, last_pct, None, payload_matched=n_payload, busbw_gbps=busbw,
                              busbw_without_waiting_gbps=without_waiting, caused_waiting_pct=caused_pct)
    cause, by_cause = _straggler_cause(matched, last == s, s, params)
    others = [row for row in rows if row.rank != ranks[s].rank]
    return RankComparison(
        matched=len(keys), ranks=rows, straggler=ranks[s].rank, straggler_last_pct=last_pct, straggler_cause=cause,
        straggler_cause_us=by_cause, others_waiting_us=round(sum(o.waiting_us for o in others), 3),
        others_exposed_waiting_pct=pct(sum(o.exposed_waiting_us for o in others),
                                       sum(o.device_time_us for o in others)),
        caused_waiting_pct=caused_pct, payload_matched=n_payload, busbw_gbps=busbw, busbw_without_waiting_gbps=without_waiting,
    )


def _caused_waiting(entry: np.ndarray, waiting: np.ndarray) -> np.ndarray:
    """The waiting each rank causes the others, summed over collectives (ns; ranks × collectives of
    entry times in, and of each rank's waiting). In each collective, between the k-th and the (k+1)-th
    entry the k ranks already in wait, and the ranks not yet in share the blame equally; so a rank late
    once per step, by a lot, is blamed for that whole stretch, however rarely it is last. A rank's
    waiting is cut at its kernel's length (entries on clocks aligned by a median offset can be further
    apart than any rank waited): each collective's shares are scaled to the waiting its ranks report,
    so the parts add up to all the ranks' waiting, as `waiting_us` counts it."""
    n = entry.shape[0]
    order = np.argsort(entry, axis=0, kind="stable")
    ordered = np.take_along_axis(entry, order, axis=0)
    k = np.arange(1, n, dtype=np.float64)[:, None]
    # differences of int64 ns first: epoch times (1.6e18 ns) are past a float's exact range
    share = k * np.diff(ordered, axis=0).astype(np.float64) / (n - k)  # the stretch before the (k+1)-th entry
    by_position = np.vstack([np.zeros((1, entry.shape[1])), np.cumsum(share, axis=0)])
    apart = (ordered[-1] - entry).sum(axis=0).astype(np.float64)  # each collective's waiting, uncut
    by_position *= np.divide(waiting.sum(axis=0), apart, out=np.zeros_like(apart), where=apart > 0)
    caused = np.zeros(n)
    np.add.at(caused, order.ravel(), by_position.ravel())
    return caused


def _bus_bandwidth(moved: np.ndarray, kernel_ns: np.ndarray, proper_ns: np.ndarray) -> tuple[float | None, float | None]:
    """Bus bandwidth (GB/s) over every rank's matched collectives (ranks × collectives): over their
    kernel time, and over the time after the last rank entered, which the link alone accounts for."""
    if not moved.size:
        return None, None
    total, kernel, proper = float(moved.sum()), float(kernel_ns.sum()), float(np.maximum(proper_ns, 1).sum())
    return (round(total / kernel, 3) if kernel else None), round(total / proper, 3)


def _row(r: RankTimeline, comm: int, waiting: int, exposed: int, last: int, late_by: float,
         caused: float = 0.0) -> RankCollectives:
    # a trace that names no rank is rank 0 (DESIGN: never "no rank"), as assign_ranks numbers it
    return RankCollectives(rank=r.rank if r.rank is not None else 0, comm_us=us(comm), waiting_us=us(waiting),
                           exposed_waiting_us=us(exposed), communication_us=us(comm - waiting), last_count=last,
                           late_by_us=us(late_by), caused_waiting_us=us(caused), compute_us=r.breakdown.compute_us,
                           device_time_us=r.breakdown.device_time_us,
                           exposed_waiting_pct=pct(us(exposed), r.breakdown.device_time_us))


def _exposed_waiting(r: RankTimeline, collectives: pd.DataFrame, waiting: np.ndarray) -> int:
    """Waiting time on this rank that no compute kernel on the same device overlaps (ns)."""
    total = 0
    devices = collectives["device"].to_numpy()
    for device, compute in r.compute.items():
        mine = devices == device
        lo = collectives["start"].to_numpy(np.int64)[mine]
        total += iv.length(iv.subtract(iv.union(lo, lo + waiting[mine]), compute))
    return total


def _lead_up(trace: Trace, gaps: pd.DataFrame, collectives: pd.DataFrame) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """For each collective on one rank, what its GPU did since the previous collective ended (or
    since its first activity): idle ns by root cause, and busy ns."""
    idle: dict[str, np.ndarray] = {}
    busy = np.zeros(len(collectives), dtype=np.int64)
    entry = collectives["start"].to_numpy(np.int64)
    devices = collectives["device"].to_numpy()
    for view in device_views(trace):
        mine = devices == view.device
        if not mine.any():
            continue
        ends = np.sort(collectives["end"].to_numpy(np.int64)[mine])
        before = np.searchsorted(ends, entry[mine], side="right") - 1
        lo = np.where(before >= 0, ends[np.maximum(before, 0)], view.span[0])
        hi = entry[mine]
        busy[mine] = iv.covered(view.busy, lo, hi)
        on_device = gaps[gaps["device"] == view.device]
        for cause, rows in on_device.groupby("cause", observed=True):
            root = GAP_ROOT.get(str(cause), "host_other")
            union = iv.union(rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64))
            idle.setdefault(root, np.zeros(len(collectives), dtype=np.int64))[mine] += iv.covered(union, lo, hi)
    return idle, busy


def _straggler_cause(tables: list[pd.DataFrame], late: np.ndarray, s: int,
                     params: StragglerParams) -> tuple[str, dict[str, float]]:
    """What held the straggler back: over the collectives it entered last, what its GPU did since
    its previous collective beyond what the other ranks' GPUs did (their median): extra idle by
    cause, or extra busy time, which means slower work on its GPU (`hot_kernel`)."""
    lead = [({c.removeprefix(_IDLE_BEFORE): t[c].to_numpy(np.int64) for c in t.columns if c.startswith(_IDLE_BEFORE)},
             t["busy_before"].to_numpy(np.int64)) for t in tables]
    others = [i for i in range(len(tables)) if i != s]
    extra: dict[str, int] = {}
    causes = {c for idle, _ in lead for c in idle}
    for cause in causes:
        mine = lead[s][0].get(cause, np.zeros(len(late), dtype=np.int64))[late]
        theirs = np.median(np.stack([lead[i][0].get(cause, np.zeros(len(late), dtype=np.int64))[late]
                                     for i in others]), axis=0)
        if (more := int(np.clip(mine - theirs, 0, None).sum())) > 0:
            extra[cause] = more
    busy = int(np.clip(lead[s][1][late] - np.median(np.stack([lead[i][1][late] for i in others]), axis=0),
                       0, None).sum())
    if busy > 0:
        extra["hot_kernel"] = busy
    by_cause = {k: us(v) for k, v in sorted(extra.items(), key=lambda kv: -kv[1])}
    idle_total = sum(v for k, v in extra.items() if k != "hot_kernel")
    if idle_total and idle_total >= params.cause_cover * sum(extra.values()):
        return max((k for k in extra if k != "hot_kernel"), key=extra.__getitem__), by_cause
    return "hot_kernel", by_cause


#: what the cross-rank comparison reads of each rank (not a key of its own in analyze --json)
DETECTOR = Detector("rank_timeline", "Rank timeline", "Each collective's entry and the lead-up to it on this rank.", None,
                    RankTimeline, lambda i, p: rank_timeline(i.trace, i["gaps"], i["breakdown"].total),
                    reads=("gaps", "breakdown"), keys=(), place=90, tool=False)
