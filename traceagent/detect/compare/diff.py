"""Before and after: did the change help, did the old root cause go away, did anything new appear.

Traces cover different lengths of time, so losses are compared as shares of the span and time as
the mean step (when both traces have steps; the span otherwise).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...format import counted, duration, percent, rate, size
from ..analysis import SCHEMA_VERSION, Analysis
from ..core.view import pct
from ..core.vocabulary import GAP_CAUSES, ROOT_CAUSES, gap_causes_of
from ..detectors.collectives import CollectivesParams, CollectivesResult, classify
from ..detectors.kernels import distinct_labels, op_kernels, short_name
from ..detectors.time_by_class import memory_kernels_us

# a root cause below this share of the span (or of copied bytes) counts as gone
GONE_BELOW_PCT = 2.0
# a loss that grows by this many points of the span is a new problem
NEW_PROBLEM_POINTS = 5.0


def _signed_change(change: float | None, change_pct: float | None, said: Callable[[float], str]) -> str:
    """A change in words with its sign, and its share of before where there is one ("-13.26 ms (-8.7%)")."""
    if change is None:
        return "-"
    share = f" ({change_pct:+.1f}%)" if change_pct is not None else ""  # none of a zero before
    return f"{'+' if change >= 0 else '-'}{said(abs(change))}{share}"


@dataclass(frozen=True)
class TimeMetric:
    """A time before and after (µs), its change and that change as a share of before: units in the keys."""

    name: str
    before_us: float | None
    after_us: float | None
    change_us: float | None = field(init=False, default=None)
    change_pct: float | None = field(init=False, default=None)
    unit: ClassVar[str] = "us"

    def __post_init__(self) -> None:
        if self.before_us is not None and self.after_us is not None:
            object.__setattr__(self, "change_us", round(self.after_us - self.before_us, 3))
            if self.before_us:
                object.__setattr__(self, "change_pct", pct(self.after_us - self.before_us, self.before_us))

    @property
    def before(self) -> float | None:
        return self.before_us

    @property
    def after(self) -> float | None:
        return self.after_us

    @property
    def change(self) -> float | None:
        return self.change_us

    def shown(self, value: float | None) -> str:
        """A value of this metric in words ("-" where a trace lacks it)."""
        return duration(value)

    def change_shown(self) -> str:
        return _signed_change(self.change_us, self.change_pct, duration)


@dataclass(frozen=True)
class BytesMetric:
    """An amount of memory before and after (bytes), its change and that change as a share of before."""

    name: str
    before_bytes: int | None
    after_bytes: int | None
    change_bytes: int | None = field(init=False, default=None)
    change_pct: float | None = field(init=False, default=None)
    unit: ClassVar[str] = "bytes"

    def __post_init__(self) -> None:
        if self.before_bytes is not None and self.after_bytes is not None:
            object.__setattr__(self, "change_bytes", self.after_bytes - self.before_bytes)
            if self.before_bytes:
                object.__setattr__(self, "change_pct", pct(self.after_bytes - self.before_bytes, self.before_bytes))

    @property
    def before(self) -> float | None:
        return self.before_bytes

    @property
    def after(self) -> float | None:
        return self.after_bytes

    @property
    def change(self) -> float | None:
        return self.change_bytes

    def shown(self, value: float | None) -> str:
        return size(value) if value is not None else "-"

    def change_shown(self) -> str:
        return _signed_change(self.change_bytes, self.change_pct, size)


@dataclass(frozen=True)
class ShareMetric:
    """A share before and after (%), and its change in points."""

    name: str
    before_pct: float | None
    after_pct: float | None
    change_points: float | None = field(init=False, default=None)
    unit: ClassVar[str] = "pct"

    def __post_init__(self) -> None:
        if self.before_pct is not None and self.after_pct is not None:
            object.__setattr__(self, "change_points", round(self.after_pct - self.before_pct, 3))

    @property
    def before(self) -> float | None:
        return self.before_pct

    @property
    def after(self) -> float | None:
        return self.after_pct

    @property
    def change(self) -> float | None:
        return self.change_points

    def shown(self, value: float | None) -> str:
        return percent(value)

    def change_shown(self) -> str:
        return f"{self.change_points:+.1f} points" if self.change_points is not None else "-"


Metric = TimeMetric | ShareMetric | BytesMetric


class TraceSide(TypedDict):
    path: str
    limiter: str | None
    root_cause: str | None
    headline: str


class RootCauseChange(TypedDict):
    """The before verdict's root cause: its share before and after, and whether it is gone."""

    cause: str | None
    what: str
    before_pct: float
    after_pct: float
    gone: bool


class Prediction(TypedDict):
    """The before verdict's saving estimate against the measured change."""

    cause: str
    predicted_up_to_pct: float  # the bound
    simulated_pct: float | None  # the what-if replay's prediction, where the finding had a change to replay
    change: str | None  # that change (`traceagent whatif --change`)
    replayed_as: str | None  # that change as people read it (a kernel's by name, not its escaped regex): Saving.replayed_as
    measured_pct: float
    basis: str
    within_estimate: bool  # the measured gain is within the bound
    sentence: str


class ClassChange(TypedDict):
    """One class of work (time_by_class) in both traces: device time per step (or per trace), and
    its share of its own trace's device time."""

    name: str
    label: str
    before_us: float | None
    after_us: float | None
    before_share_pct: float | None
    after_share_pct: float | None


class KernelChange(TypedDict):
    """One kernel in both traces: time per step (or per trace), calls, share of its trace's kernel time."""

    name: str
    short_name: str
    label: str  # its name to show: told apart from others listed with its short name (kernels.distinct_labels)
    before_us: float | None
    before_count: int | None
    before_share_pct: float | None
    after_us: float | None
    after_count: int | None
    after_share_pct: float | None


class OpChange(TypedDict):
    """One op's kernels, launched by it or inside it (kernels.launched_by), in both traces: device time per
    step (or per trace, the after's scaled to the before's work as the diff's figures are)."""

    op: str
    before_us: float
    after_us: float
    change_pct: float | None  # + slower; None where the before trace has none


class RangeChange(TypedDict):
    """One record_function / NVTX range in both traces: host time and the device time of the kernels
    launched inside it, per step (or per trace), and the change of its host time."""

    name: str
    before_host_us: float | None
    after_host_us: float | None
    before_gpu_us: float | None
    after_gpu_us: float | None
    change_pct: float | None  # of its host time: + slower


class WorkChange(TypedDict):
    """Two captures without steps that hold different work: how much the after trace holds against
    the before's, by the calls of the kernels both ran most."""

    ratio: float  # the after trace's work over the before's (the median of the five kernels' call ratios)
    kernel: str  # the before's kernel with the most time, which both ran
    before_calls: int
    after_calls: int
    after_span_us: float  # the after trace's own span, before it was scaled to the before's work


class CollectivesSide(TypedDict):
    """One trace's collectives with a recorded payload, every rank added up."""

    calls: int
    calls_per_step: float | None  # per rank
    mean_bytes: int  # per call
    busbw_gbps: float  # time-weighted
    peak_pct: float  # of the assumed links' peak (each rank's own `links`)
    small_time_pct: float
    exposed_of_comm_pct: float
    bound: str  # bandwidth, latency, below_peak (collectives.classify)


class CollectivesChange(TypedDict):
    """Collectives before and after: fewer and larger, faster, overlapped?"""

    before: CollectivesSide
    after: CollectivesSide
    sentence: str


NOISE_PCT = 2.0  # a step-time (or span) change smaller than this is run-to-run noise, not an effect


@dataclass(frozen=True)
class DiffResult:
    schema_version: str  # analysis.SCHEMA_VERSION: the contract this JSON follows
    before: TraceSide
    after: TraceSide
    time_basis: str  # "step" or "span"
    slower_pct: float  # + slower, − faster: mean step time (or span) change
    metrics: list[Metric]
    root_cause: RootCauseChange
    new_problems: list[str]
    kernels: list[KernelChange]  # top kernels side by side, per step (or per trace)
    headline: str
    notes: list[str] = field(default_factory=list)
    prediction: Prediction | None = None
    collectives: CollectivesChange | None = None  # when both traces record collective payloads
    helped: bool = False  # faster by at least noise_pct, or the root cause gone without getting slower
    noise_pct: float = NOISE_PCT  # a smaller change in step time (or span) is run-to-run noise
    grew: str | None = None  # when the after trace is slower: what grew most, in words
    ranges: list[RangeChange] = field(default_factory=list)  # in both traces, the most grown first
    classes: list[ClassChange] = field(default_factory=list)  # device time by class of work, the largest first
    # without steps, where the traces hold different amounts of work (the calls of the kernels both
    # ran): the after trace's span and totals are then scaled to the before's work
    work: WorkChange | None = None


def op_change(before: Analysis, after: Analysis, op: str, d: DiffResult) -> OpChange:
    """`op`'s kernels in both traces on the diff's basis (_divisors: per step, or per trace with the after's
    scaled by the diff's work ratio)."""
    def kernel_us(a: Analysis) -> float:
        return sum(int((r.trace.gpu["end"].to_numpy(np.int64) - r.trace.gpu["start"].to_numpy(np.int64))
                       [op_kernels(r.trace, op)].sum()) for r in a.ranks) / 1000

    per_b, per_a = _divisors(before, after, d.time_basis, d.work)
    b, a = round(kernel_us(before) / per_b, 3), round(kernel_us(after) / per_a, 3)
    return OpChange(op=op, before_us=b, after_us=a, change_pct=pct(a - b, b) if b else None)


def _steps(a: Analysis) -> int:
    """Every rank's profiler steps, added up."""
    return sum(r.findings.steps.count for r in a.ranks if r.findings.steps)


def _divisors(before: Analysis, after: Analysis, basis: str, work: WorkChange | None) -> tuple[float, float]:
    """What each trace's totals are divided by: its steps, or (without steps) 1 and the after's work over the
    before's, so the after's totals are scaled to the before's work."""
    if basis == "step":
        return float(max(_steps(before), 1)), float(max(_steps(after), 1))
    return 1.0, work["ratio"] if work else 1.0


def _summary(a: Analysis) -> dict[str, Any]:
    """Job-level figures: percentages over the device time of every GPU of every rank, step means
    averaged over ranks, the job's span from first to last activity on any rank."""
    ranks = a.ranks
    span = sum(r.findings.idle.device_time_us for r in ranks)  # device time: the denominator
    causes: dict[str, float] = {}
    for r in ranks:
        for cause, us in r.findings.idle.by_cause_us.items():
            causes[cause] = causes.get(cause, 0.0) + us
    steps = [r.findings.steps.step_time_us for r in ranks if r.findings.steps]
    # how much the host step time varies, where every rank has two steps or more
    spread = [r.findings.steps.std_us for r in ranks if r.findings.steps and r.findings.steps.count > 1]
    busy = sum(r.breakdown.total.busy_us for r in ranks)
    copies_bytes = sum(r.findings.memcpy.bytes for r in ranks)
    math = [p for r in ranks if (p := r.results.get("precision")) is not None]
    math_us = sum(p.math_us for p in math)
    return {
        # of the math kernels' time on every rank that ran some (precision.py): None where none did
        "tensor_core_pct": pct(sum(p.math_us * p.tensor_core_pct for p in math) / 100, math_us) if math_us else None,
        "span_us": span,
        "wall_span_us": max((r.breakdown.total.span_us for r in ranks), default=0.0),
        "straggler_pct": a.comparison.others_exposed_waiting_pct if a.comparison else 0.0,
        "busy_pct": pct(busy, span),
        "idle_pct": pct(span - busy, span),
        "cause_pct": {c: pct(v, span) for c, v in causes.items()},
        "step_us": sum(steps) / len(steps) if len(steps) == len(ranks) and steps else None,
        "step_std_us": sum(spread) / len(spread) if len(spread) == len(ranks) and spread else None,
        "compute_us": sum(r.breakdown.total.compute_us for r in ranks),
        "memcpy_exposed_pct": pct(sum(r.findings.memcpy.exposed_us for r in ranks), span),
        "pageable_pct": pct(sum(r.findings.memcpy.pageable_bytes for r in ranks), copies_bytes),
        "comm_exposed_pct": pct(sum(r.findings.comm.exposed_us for r in ranks), span),
    }


def job_share(a: Analysis, name: str) -> float:
    """A limiter's, root cause's or gap cause's share of the job's device time, as `diff`
    measures it (pageable copies: their share of copied bytes; a hot kernel: the verdict's, else
    the top one)."""
    s = _summary(a)
    if name == "idle":
        return s["idle_pct"]
    if name == "compute":
        return s["busy_pct"]
    if name == "data_movement":
        return s["memcpy_exposed_pct"]
    if name in GAP_CAUSES:
        return s["cause_pct"].get(name, 0.0)
    top = a.focus.findings.kernels.top
    return _cause_share(s, a, name, a.verdict.hot_kernel() or (top[0].name if top else None))


def _cause_share(s: dict[str, Any], a: Analysis, root: str | None, kernel: str | None = None) -> float:
    """How big a root cause is in trace `a` (summarized in `s`), in its own unit (share of span,
    or for pageable copies the share of copied bytes); a hot kernel is named by `kernel`."""
    if gaps := gap_causes_of(root or ""):
        return round(sum(s["cause_pct"].get(c, 0.0) for c in gaps), 2)
    if root == "pageable_memcpy":
        return s["pageable_pct"]
    if root == "memcpy":
        return s["memcpy_exposed_pct"]
    if root == "communication":
        return s["comm_exposed_pct"]
    if root == "straggler":  # the others' waiting for it, over their device time
        return s["straggler_pct"]
    if root == "memory_bound_kernels":  # their time in this trace, over this trace's span
        return pct(sum(memory_kernels_us(c) for r in a.ranks if (c := r.results.get("time_by_class"))), s["span_us"])
    if root == "hot_kernel":  # that kernel's time in this trace, over this trace's span
        total = sum(k.total_us for r in a.ranks for k in r.findings.kernels.top if k.name == kernel)
        return pct(total, s["span_us"])
    return 0.0


def peak_allocated_bytes(a: Analysis) -> int | None:
    """The most memory the caching allocator gave out at once on any GPU of the job (its tensors' memory), or
    None where no GPU records it (a trace profiled without profile_memory=True)."""
    peaks = [d.peak_allocated_bytes for r in a.ranks if (m := r.findings.memory) is not None for d in m.devices
             if d.peak_allocated_bytes is not None]
    return max(peaks) if peaks else None


def diff(before: Analysis, after: Analysis, top: int = 10) -> DiffResult:
    b, a = _summary(before), _summary(after)
    basis = "step" if b["step_us"] and a["step_us"] else "span"
    key = "step_us" if basis == "step" else "wall_span_us"
    # without steps, spans of captures that held different amounts of work are compared per that work
    work = _work_ratio(before, after, a[key]) if basis == "span" else None
    scale = work["ratio"] if work else 1.0
    after_time = round(a[key] / scale, 3)
    slower = pct(after_time - b[key], b[key])
    per_b, per_a = _divisors(before, after, basis, work)
    # several ranks: step figures are means over ranks, shares are over every GPU's device time
    over = f" (mean over {len(before.ranks)} ranks)" if len(before.ranks) > 1 else ""
    of = " (of device time)" if len(before.ranks) > 1 or b["span_us"] != b["wall_span_us"] else ""

    metrics: list[Metric] = [
        TimeMetric(f"step time{over or ' (mean)'}" if basis == "step" else
                   "span (for the before's work)" if work else "span", b[key], after_time),
        ShareMetric(f"busy{of}", b["busy_pct"], a["busy_pct"]),
        ShareMetric(f"idle{of}", b["idle_pct"], a["idle_pct"]),
        TimeMetric(f"compute per step{over}" if basis == "step" else "compute",
               round(b["compute_us"] / per_b, 3), round(a["compute_us"] / per_a, 3)),
        ShareMetric("exposed copies", b["memcpy_exposed_pct"], a["memcpy_exposed_pct"]),
        ShareMetric("exposed communication", b["comm_exposed_pct"], a["comm_exposed_pct"]),
    ]
    if b["tensor_core_pct"] is not None and a["tensor_core_pct"] is not None:  # did autocast or TF32 take?
        metrics.append(ShareMetric("math on tensor cores", b["tensor_core_pct"], a["tensor_core_pct"]))
    for cause in sorted(set(b["cause_pct"]) | set(a["cause_pct"])):
        metrics.append(ShareMetric(f"idle: {cause}", b["cause_pct"].get(cause, 0.0), a["cause_pct"].get(cause, 0.0)))
    if basis == "step" and b["step_std_us"] is not None and a["step_std_us"] is not None:  # "is it steadier?"
        metrics.append(TimeMetric(f"step time spread (standard deviation across steps{over and ', mean over ranks'})",
                                  round(b["step_std_us"], 3), round(a["step_std_us"], 3)))
    if (peak_b := peak_allocated_bytes(before)) is not None and (peak_a := peak_allocated_bytes(after)) is not None:
        metrics.append(BytesMetric("peak memory allocated (the most of any GPU)", peak_b, peak_a))

    root = before.verdict.root_cause
    kernel = before.verdict.hot_kernel()
    share_before, share_after = _cause_share(b, before, root, kernel), _cause_share(a, after, root, kernel)
    gone = root is not None and share_after < GONE_BELOW_PCT
    words = ROOT_CAUSES[root].measure if root in ROOT_CAUSES else (root or "")
    root_cause = RootCauseChange(cause=root, what=words, before_pct=share_before, after_pct=share_after, gone=gone)

    new = []
    v_after = after.verdict
    if v_after.root_cause and v_after.root_cause != root:
        kernel_after = v_after.hot_kernel()
        grown = (_cause_share(a, after, v_after.root_cause, kernel_after)
                 - _cause_share(b, before, v_after.root_cause, kernel_after))
        if grown >= NEW_PROBLEM_POINTS or not gone:
            new.append(f"the after trace's limiter is now {v_after.limiter}/{v_after.root_cause}: {v_after.headline}")
    for cause in a["cause_pct"]:
        grown = a["cause_pct"][cause] - b["cause_pct"].get(cause, 0.0)
        if grown >= NEW_PROBLEM_POINTS:
            new.append(f"idle from {cause} grew by {grown:.1f} points of the span")

    kernels = _kernels(before, after, per_b, per_a, top)
    ranges = _ranges(before, after, per_b, per_a, top)
    time_word = "step time" if basis == "step" else "span"
    cause_words = f"{words}: {percent(share_before)} → {percent(share_after)}{' (gone)' if gone else ''}; " if root else ""
    headline = (f"{cause_words}{time_word} {duration(b[key])} → {duration(after_time)}"
                + (" for the same work" if work else "") + f" ({slower:+.1f}%)")
    notes = [] if basis == "step" else [("One of the traces has" if b["step_us"] or a["step_us"] else "The traces have")
                                        + " no steps: time is compared over the whole span."]
    if work:
        notes.append(work_note(work))
    prediction = _prediction(before, basis, -slower)
    grew = _grew_most(metrics) if slower >= NOISE_PCT else None
    if slower >= NOISE_PCT:  # worse: said first, never as "-N% faster"
        headline += f"; slower by {slower:.1f}%: the change did not help" + (f" ({grew} grew most)" if grew else "")
    if prediction:
        headline += f"; {prediction['sentence']}"
    collectives = _collectives(before, after)
    if collectives:
        notes.append(collectives["sentence"])
    return DiffResult(
        schema_version=SCHEMA_VERSION,
        before=TraceSide(path=before.path, limiter=before.verdict.limiter, root_cause=root,
                         headline=before.verdict.headline),
        after=TraceSide(path=after.path, limiter=v_after.limiter, root_cause=v_after.root_cause,
                        headline=v_after.headline),
        time_basis=basis, slower_pct=slower, metrics=metrics, root_cause=root_cause, new_problems=new,
        kernels=kernels, headline=headline, notes=notes, prediction=prediction, collectives=collectives,
        helped=-slower >= NOISE_PCT or (root_cause["gone"] and slower < NOISE_PCT), grew=grew, ranges=ranges,
        classes=_classes(before, after, per_b, per_a), work=work,
    )


#: spans are compared as they are unless the after trace holds this much more or less work (a
#: capture of a fixed time holds as many iterations as fitted in it)
WORK_DIFFERS = 0.05


def work_note(work: WorkChange) -> str:
    """What diff notes, and answers quote, where two captures hold different work."""
    return (f"The traces hold different amounts of work: `{short_name(work['kernel'])}`, the kernel with the most time "
            f"before, ran {counted(work['after_calls'], 'time')} after against {work['before_calls']} before (the "
            f"kernels both ran most: {work['ratio']:g}× as often). The after trace's span "
            f"({duration(work['after_span_us'])}) and its totals are scaled to the before's work.")


def _work_ratio(before: Analysis, after: Analysis, after_span_us: float) -> WorkChange | None:
    """Where the traces have no steps: how much work the after trace holds against the before's,
    by the calls of the kernels both ran (the median of their ratios, over the before's five with
    the most time); None where it is the same within WORK_DIFFERS, or no kernel is in both."""
    def calls(a: Analysis) -> dict[str, tuple[int, float]]:
        out: dict[str, tuple[int, float]] = {}
        for r in a.ranks:
            for k in r.findings.kernels.top:
                count, total = out.get(k.name, (0, 0.0))
                out[k.name] = (count + k.count, total + k.total_us)
        return out

    cb, ca = calls(before), calls(after)
    common = [n for n in sorted(cb, key=lambda n: -cb[n][1]) if n in ca and cb[n][0]][:5]
    if not common:
        return None
    ratio = statistics.median(ca[n][0] / cb[n][0] for n in common)
    if abs(ratio - 1) < WORK_DIFFERS:
        return None
    return WorkChange(ratio=round(ratio, 4), kernel=common[0], before_calls=cb[common[0]][0],
                      after_calls=ca[common[0]][0], after_span_us=after_span_us)


def _classes(before: Analysis, after: Analysis, per_b: float, per_a: float) -> list[ClassChange]:
    """Device time by class of work in both traces (every rank added up), per step (or per trace),
    the classes either trace has, the largest first."""
    def totals(a: Analysis, per: float) -> tuple[dict[str, tuple[str, float]], float]:
        out: dict[str, tuple[str, float]] = {}
        whole = 0.0
        for r in a.ranks:
            if (result := r.results.get("time_by_class")) is None:
                continue
            whole += result.device_time_us
            for c in result.classes:
                out[c.name] = (c.label, out.get(c.name, (c.label, 0.0))[1] + c.time_us)
        return {n: (label, us_ / per) for n, (label, us_) in out.items()}, whole

    (tb, all_b), (ta, all_a) = totals(before, per_b), totals(after, per_a)
    names = sorted(set(tb) | set(ta), key=lambda n: -max(tb.get(n, ("", 0.0))[1], ta.get(n, ("", 0.0))[1]))
    return [ClassChange(name=n, label=(tb.get(n) or ta[n])[0],
                        before_us=round(tb[n][1], 3) if n in tb else None, after_us=round(ta[n][1], 3) if n in ta else None,
                        before_share_pct=pct(tb[n][1] * per_b, all_b) if n in tb else None,
                        after_share_pct=pct(ta[n][1] * per_a, all_a) if n in ta else None) for n in names]


def _ranges(before: Analysis, after: Analysis, per_b: float, per_a: float, top: int) -> list[RangeChange]:
    """The annotated ranges either analysis kept (by device time or by the idle under them), side by
    side per step (or per trace), those whose host time grew most first."""
    def totals(a: Analysis, per: float) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for r in a.ranks:
            kept = r.findings.annotations
            for rng in {x.name: x for x in [*(kept.ranges if kept else []), *(kept.idle_ranges if kept else [])]}.values():
                host, gpu = out.get(rng.name, (0.0, 0.0))
                out[rng.name] = (host + rng.host_us / per, gpu + rng.gpu_us / per)
        return out

    tb, ta = totals(before, per_b), totals(after, per_a)
    rows = []
    for name in set(tb) | set(ta):
        b, a = tb.get(name), ta.get(name)
        change = pct(a[0] - b[0], b[0]) if a and b and b[0] else None
        rows.append(RangeChange(name=name, before_host_us=round(b[0], 3) if b else None,
                                after_host_us=round(a[0], 3) if a else None, before_gpu_us=round(b[1], 3) if b else None,
                                after_gpu_us=round(a[1], 3) if a else None, change_pct=change))
    grown = lambda r: (r["after_host_us"] or 0.0) - (r["before_host_us"] or 0.0)  # noqa: E731
    return sorted(rows, key=lambda r: (-grown(r), r["name"]))[:top]


def ranges_over(result: DiffResult, gates: list[tuple[re.Pattern[str], float]]) -> list[str]:
    """For `diff --gate REGEX:PCT`: a line for each range matching a gate whose host time per step
    grew by more than its percentage."""
    crossed = []
    for pattern, limit in gates:
        for r in result.ranges:
            if pattern.search(r["name"]) and r["change_pct"] is not None and r["change_pct"] > limit:
                crossed.append(f"range {r['name']!r} is {r['change_pct']:.1f}% slower (limit {limit:g}% for "
                               f"{pattern.pattern!r})")
    return crossed


def _grew_most(metrics: list[Metric]) -> str | None:
    """The loss that grew most from before to after, in words: a cause of idle, exposed copies or
    communication (points of the time), or compute per step (its share of the before time)."""
    grown: list[tuple[float, str]] = []
    for m in metrics:
        if m.before is None or m.after is None or m.after <= m.before:
            continue
        if m.name.startswith(("idle: ", "exposed")):
            grown.append((m.after - m.before, f"{m.name} (+{m.after - m.before:.1f} points)"))
        elif m.name.startswith("compute") and m.before:
            grown.append((100 * (m.after - m.before) / m.before, f"{m.name} (+{100 * (m.after - m.before) / m.before:.1f}%)"))
    return max(grown)[1] if grown else None


def _prediction(before: Analysis, basis: str, measured_pct: float) -> Prediction | None:
    """'predicted 26.8% (simulated; at most 27.2%), measured 20.1%': the before verdict's saving (the
    replay's prediction where it has one, and the upper bound; of step time or of the span) next to
    how much faster the after trace is on the same basis."""
    saving = before.verdict.saving
    if not saving:
        return None
    predicted = saving.step_pct if basis == "step" and saving.step_pct is not None else saving.pct
    what = "step time" if basis == "step" else "the span"
    # an upper bound holds when the gain does not exceed it; a slower after trace is no gain at all
    within = -NOISE_PCT < measured_pct <= predicted + 0.05
    measured_pct = round(measured_pct, 2) + 0.0  # + 0.0: no "-0.0%" for a trace compared with itself
    measured = (f"measured {round(measured_pct, 1) + 0.0:.1f}% faster" if measured_pct >= 0
                else f"measured {-measured_pct:.1f}% slower")
    # the replay's prediction is of the mean step where the trace has steps, else of the span: the same basis
    simulated = saving.simulated_pct if (basis == "step") == (saving.step_pct is not None) else None
    said = (f"predicted {max(simulated, 0.0):.1f}% of {what} (simulated with {saving.replayed_as}; at most "
            f"{predicted:.1f}%), {measured}" if simulated is not None else f"predicted up to {predicted:.1f}% of {what}, "
            f"{measured}")
    return Prediction(cause=saving.root_cause, predicted_up_to_pct=predicted, simulated_pct=simulated,
                      change=saving.change if simulated is not None else None,
                      replayed_as=saving.replayed_as if simulated is not None else None, measured_pct=measured_pct,
                      basis=basis, within_estimate=within, sentence=said)


def _collectives_side(a: Analysis) -> CollectivesSide | None:
    found: list[CollectivesResult] = [r.results["collectives"] for r in a.ranks
                                      if r.results.get("collectives") is not None]
    if not found:
        return None
    time = sum(c.time_us for c in found) or 1.0
    per_step = [c.calls_per_step for c in found if c.calls_per_step is not None]

    def weighted(field: str) -> float:
        return round(sum(getattr(c, field) * c.time_us for c in found) / time, 2)

    peak, small = weighted("peak_pct"), weighted("small_time_pct")
    calls = sum(c.calls for c in found)
    return CollectivesSide(
        calls=calls, calls_per_step=round(sum(per_step) / len(per_step), 2) if per_step else None,
        mean_bytes=sum(c.bytes for c in found) // max(calls, 1), busbw_gbps=weighted("busbw_gbps"), peak_pct=peak,
        small_time_pct=small, exposed_of_comm_pct=weighted("exposed_of_comm_pct"),
        bound=classify(peak, small, a.focus.params.detectors.get("collectives", CollectivesParams())))


def _collectives(before: Analysis, after: Analysis) -> CollectivesChange | None:
    """'collectives: 200 → 1 calls of 1.0 MB → 209.7 MB; latency-bound → bandwidth-bound; …'"""
    b, a = _collectives_side(before), _collectives_side(after)
    if b is None or a is None:
        return None
    words = {"bandwidth": "bandwidth-bound", "latency": "latency-bound", "below_peak": "below the link's peak"}
    calls = (f"{b['calls_per_step']:g} → {a['calls_per_step']:g} per step" if b["calls_per_step"] is not None
             and a["calls_per_step"] is not None else f"{b['calls']} → {a['calls']}")
    sentence = (f"Collectives: {calls}, {size(b['mean_bytes'])} → {size(a['mean_bytes'])} each; "
                f"{words[b['bound']]} → {words[a['bound']]} (bus bandwidth {rate(b['busbw_gbps'])} → "
                f"{rate(a['busbw_gbps'])}, {percent(b['peak_pct'])} → {percent(a['peak_pct'])} of the assumed "
                f"link's peak); not hidden by compute: {percent(b['exposed_of_comm_pct'])} → "
                f"{percent(a['exposed_of_comm_pct'])} of collective time.")
    return CollectivesChange(before=b, after=a, sentence=sentence)


def _kernels(before: Analysis, after: Analysis, per_b: float, per_a: float, top: int) -> list[KernelChange]:
    """The top kernels of both traces side by side: time per step (or per trace), calls in the
    whole trace, and the share of each trace's own kernel time (never the other trace's)."""
    def totals(a: Analysis, per: float) -> tuple[dict[str, dict[str, Any]], float]:
        out: dict[str, dict[str, Any]] = {}
        for r in a.ranks:
            for k in r.findings.kernels.top:
                row = out.setdefault(k.name, {"short_name": k.short_name, "us": 0.0, "count": 0})
                row["us"] += k.total_us / per
                row["count"] += k.count
        return out, sum(r.findings.kernels.total_us for r in a.ranks) / per

    (tb, all_b), (ta, all_a) = totals(before, per_b), totals(after, per_a)
    names = sorted(set(tb) | set(ta), key=lambda n: -max(tb.get(n, {"us": 0})["us"], ta.get(n, {"us": 0})["us"]))[:top]
    rows = []
    for n, label in zip(names, distinct_labels(names)):
        b, a = tb.get(n), ta.get(n)
        rows.append(KernelChange(
            name=n, short_name=(b or ta[n])["short_name"], label=label,
            before_us=round(b["us"], 3) if b else None, before_count=b["count"] if b else None,
            before_share_pct=pct(b["us"], all_b) if b else None,
            after_us=round(a["us"], 3) if a else None, after_count=a["count"] if a else None,
            after_share_pct=pct(a["us"], all_a) if a else None))
    return rows
