"""The detectors as tools an LLM (or the offline analyst) calls: typed arguments, docstrings the
model can act on, compact JSON results with units in the keys.

Every result is bounded (top-N lists, never whole frames, no string over `MAX_STRING` characters)
and says plainly when the trace lacks what was asked (`unavailable`: why, and how to profile to
get it). Strings from the trace (kernel names, paths) appear only as JSON values here: that is the
one way trace text reaches a model. Every argument has a description and, where the answer is one
of a few words, an enum, so a typo is an error the model can correct rather than an empty result.
"""

from __future__ import annotations

import ast
import copy
import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache, partial
from typing import TYPE_CHECKING, Annotated, Any, Literal

from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools.base import create_schema_from_function
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field

from ..detect.analysis import Analysis, RankAnalysis, joined_on
from ..detect.compare.diff import diff, op_change
from ..detect.compare.scaling import scaling as scale_runs
from ..detect.compare.scaling import world_size
from ..detect.core.encode import to_data
from ..detect.core.host import host_events_in, kernel_python_lines, launch_calls
from ..detect.core.view import on_device, pct, us
from ..detect.core.vocabulary import GAP_CAUSES
from ..detect.detectors.annotations import detect_annotations
from ..detect.detectors.idle import DeviceIdle, IdleResult, gap_host_activity
from ..detect.detectors.kernels import loosely, op_host
from ..detect.detectors.window import device_window
from ..detect.registry import DETECTORS, Detector
from ..detect.verdict.advice import profile_line, rocprof_line
from ..detect.verdict.critical_path import detect_critical_path, range_window, step_window
from ..detect.verdict.savings import by_expected
from ..detect.verdict.whatif import CHANGES, parse_change, simulate
from ..trace.model import matches
from .answers import (
    MAX_ITEMS,
    AnnotationsAnswer,
    Answer,
    CalcAnswer,
    CommAnswer,
    CompareAnswer,
    CopiesAnswer,
    DetectorAnswer,
    DeviceActivityAnswer,
    FlopsAnswer,
    GapRow,
    HostActivityAnswer,
    IdleGapsAnswer,
    IdleTotals,
    InstancesAnswer,
    KernelInstance,
    KernelProfilesAnswer,
    KernelRow,
    KernelsAnswer,
    LaunchesAnswer,
    MemoryAnswer,
    OverviewAnswer,
    RankOverview,
    ScalingAnswer,
    Scope,
    StepsAnswer,
    Unavailable,
    VerdictAnswer,
    WhatIfAnswer,
    plain,
)
from .numbers import PROSE_KEYS, Sources

MAX_STRING = 300  # a trace string longer than this reaches the model cut, with its length said
MAX_PROSE = 2000  # our own sentences: a verdict's next step runs to 650 characters

# the arguments the tools share, described once
Rank = Annotated[int | None, Field(description="the rank (process) to look at; default: the rank the verdict is about")]
Device = Annotated[int | None, Field(description="one GPU of that rank (its device id); default: all of the rank's GPUs")]
Top = Annotated[int, Field(description=f"how many items to list (at most {MAX_ITEMS})")]
FullNames = Annotated[bool, Field(description="true for full (templated) kernel names; default: short names only")]
if TYPE_CHECKING:  # the enum is built from the vocabulary at run time: a plain str to the type checker
    GapCause = str
else:
    GapCause = Literal[tuple(GAP_CAUSES)]
CopyKind = Literal["HtoD", "DtoH", "DtoD", "HtoH", "PtoP"]
KernelOrder = Literal["total", "mean", "max", "count"]
CalcUnit = Literal["us", "ms", "s", "pct", "x", "gbps", "bytes", "count"]


@dataclass
class AnalysisContext:
    """What the tools read: the analysis of the trace, and optionally of a second one to compare."""

    analysis: Analysis
    other: Analysis | None = None
    sources: Sources = field(default_factory=Sources)  # what the conversation's tools returned: `calc` reads it
    focus: tuple[int, int | None] | None = None  # the rank and GPU the user is looking at: the tools' default

    def rank(self, rank: int | None) -> RankAnalysis:
        """A rank's analysis; None is the rank in focus, else the one the verdict is about."""
        if rank is None and self.focus is not None:
            rank = self.focus[0]
        try:
            return self.analysis.rank(rank)
        except KeyError:
            raise ToolInputError(f"no rank {rank} in this trace; ranks are {[r.rank for r in self.analysis.ranks]}") \
                from None

    def rank_of(self, device: int) -> int | None:
        """The rank a GPU named without its rank is asked of: the default one where it has that GPU, else
        the one other rank that does (a job of one GPU a rank: GPU 3 is rank 3's); None (the default) else."""
        if device in self.rank(None).devices:
            return None
        owners = [r.rank for r in self.analysis.ranks if device in r.devices]
        return owners[0] if len(owners) == 1 else None

    def scoped(self, rank: int | None, device: int | None) -> tuple[RankAnalysis, Scope]:
        """The rank asked for (the one in focus, else the verdict's, by default) and the scope to
        report: which rank, which GPU ("all" of the rank's when none is named, unless a GPU is in
        focus and no rank was named), and the rank's GPUs."""
        if rank is None and device is None and self.focus is not None:
            rank, device = self.focus
        if rank is None and device is not None:
            rank = self.rank_of(device)
        r = self.rank(rank)
        if device is not None and device not in r.devices:
            raise ToolInputError(f"rank {r.rank} has no GPU {device} with work; its GPUs are {r.devices}")
        return r, Scope(rank=r.rank, device="all" if device is None else device, devices=r.devices)


class ToolInputError(ValueError):
    """A tool was asked for something the trace does not have; the message goes back to the model."""


def unavailable(what: str, why: str, how: str) -> Unavailable:
    """The typed answer for what the trace cannot tell: what was asked, why it is not there, and
    how to profile so that it is."""
    return Unavailable(what=what, why=why, how_to_get_it=how)


# characters that change how text displays or reads without being seen (bidi overrides, zero widths,
# line separators): escaped even where JSON allows them raw
_UNSEEN = re.compile("[\x7f-\x9f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def dumps(value: Any) -> str:
    """An answer as the JSON a model reads: plain values, no NaN, every string bounded."""
    return model_json(_bounded(to_data(plain(value))))


def model_json(data: Any) -> str:
    """JSON values as a model reads them: compact, non-ASCII text as itself ("µs", not "\\u00b5s",
    which small models copy into answers as it is) but for characters no one sees."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return _UNSEEN.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _bounded(value: Any, key: str | None = None) -> Any:
    """Every string cut to MAX_STRING characters (a 10 MB kernel name is not sent whole); our own
    sentences (numbers.PROSE_KEYS: a verdict's hypothesis, a saving's sentence) to MAX_PROSE, so the
    model reads every figure they state (they quote trace strings shortened)."""
    if isinstance(value, str):
        limit = MAX_PROSE if key in PROSE_KEYS else MAX_STRING
        return value if len(value) <= limit else f"{value[:limit]}… ({len(value)} characters)"
    if isinstance(value, dict):
        return {k: _bounded(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a list under a prose key (assumptions) is prose
        return [_bounded(v, key) for v in value]
    return value


# -- the tools: each takes the context first; the model supplies the rest --------------------------

NO_FRAMES = unavailable("the Python line", "this trace has no Python frames",
                        f"record with `{profile_line()}` (it sets with_stack=True), or profile with "
                        "torch.profiler.profile(with_stack=True)")
NO_STEPS = unavailable("per-step times", "the trace marks no iterations",
                       "use a torch.profiler schedule and call prof.step() each iteration, or an NVTX range per "
                       "step (then `--steps REGEX`)")
NO_ANNOTATIONS = unavailable("time per code region", "the trace has no user annotations (NVTX ranges)",
                             "wrap regions in torch.profiler.record_function(...) or torch.cuda.nvtx.range(...)")
ONE_RANK = unavailable("waiting on other ranks, the straggler", "one rank's trace is loaded",
                       "load the directory with every rank's trace")
NO_COUNTERS = unavailable("memory bandwidth of kernels, occupancy, warp stalls, FLOP/s of kernels without shapes",
                          "a timeline trace records when kernels ran, not hardware counters",
                          f"profile the hot kernel with Nsight Compute: `{profile_line('--ncu', 'NAME')}` (or ncu "
                          "--kernel-name regex:NAME --set full --csv --page details --log-file ncu.csv, then "
                          "traceagent analyze TRACE --kernels ncu.csv); on AMD GPUs with ROCm Compute Profiler: "
                          f"{rocprof_line('NAME')}")
NO_SHAPES = unavailable("FLOPs, achieved TFLOP/s and MFU", "the trace has no recorded shapes",
                        f"record with `{profile_line()}` (it sets record_shapes=True), or profile with "
                        "torch.profiler.profile(record_shapes=True) (PyTorch ≥ 2.1 also records the convolutions' stride "
                        "and padding)")
NO_MEMORY = unavailable("GPU memory use", "the trace has no [memory] events",
                        f"record with `{profile_line()}` (it sets profile_memory=True); for who allocated what, "
                        "torch.cuda.memory._record_memory_history() and torch.cuda.memory._dump_snapshot()")


def overview(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> OverviewAnswer:
    """What the trace is and where device time went: format, ranks, GPUs, each GPU's span, busy
    and idle, event counts, the verdict's limiter and rank, and what the trace cannot answer
    (with how to profile so it can). Start here. Without `rank`, every rank (up to 25); with
    `device`, that GPU's breakdown only."""
    chosen = ctx.analysis.ranks if rank is None else [ctx.rank(rank)]
    for r in chosen[:MAX_ITEMS]:
        if device is not None:
            ctx.scoped(r.rank, device)
    return OverviewAnswer(ctx.analysis, [RankOverview(r, device) for r in chosen[:MAX_ITEMS]], trace_limits(ctx))


def trace_limits(ctx: AnalysisContext) -> list[Unavailable]:
    """What this trace cannot answer (about the verdict's rank), each with how to get it."""
    r = ctx.analysis.focus
    f = r.findings
    lacks = [(not f.has_python_frames, NO_FRAMES), (f.steps is None, NO_STEPS),
             (len(ctx.analysis.ranks) == 1 and (r.meta.world_size or 1) > 1, ONE_RANK),
             (not _has_annotations(r), NO_ANNOTATIONS), (not (f.flops and f.flops.shaped_ops), NO_SHAPES),
             (not r.counts["memory_events"], NO_MEMORY), (ctx.analysis.kernel_profiles is None, NO_COUNTERS)]
    return [entry for lacking, entry in lacks if lacking]


def _has_annotations(r: RankAnalysis) -> bool:
    return bool(r.findings.annotations and r.findings.annotations.distinct)


def _top(n: int) -> int:
    """A requested list length, bounded: results stay small."""
    return max(1, min(n, MAX_ITEMS))


def verdict(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> VerdictAnswer:
    """The diagnosis: limiter, root cause, headline, one-sentence hypothesis, the next step to
    take, the evidence numbers, what fixing it would save (and every finding's saving, the most
    expected first: a replay's prediction, else the bound; what to optimize first), and what the
    trace lacks. Without
    `rank`, the job's verdict (its `rank` says which rank it is about); with `device`, also that
    GPU's breakdown."""
    v = ctx.rank(rank).verdict if rank is not None else ctx.analysis.verdict
    about = ctx.rank(rank if rank is not None else v.rank)
    savings = by_expected(about.findings.savings)
    if device is None:
        return VerdictAnswer(v, savings)
    r, scope = ctx.scoped(v.rank if rank is None else rank, device)
    return VerdictAnswer(v, savings, r.breakdown.devices[device], scope)


def idle_gaps(ctx: AnalysisContext, rank: Rank = None, device: Device = None,
              cause: Annotated[GapCause | None, Field(description="only gaps of this cause")] = None,
              step: Annotated[int | None, Field(description="only gaps that belong to this step number")] = None,
              min_us: Annotated[float, Field(description="only gaps at least this long, in µs")] = 0.0,
              top: Top = 10) -> IdleGapsAnswer:
    """Idle time on the GPUs and why: totals by cause and the largest gaps with evidence (what
    the launching thread was doing, the sync call and op, the user's Python line when the trace
    has frames). Times are µs from the trace's first event; `ts_us` is the same start on the
    trace's own clock, to find a gap in Perfetto or Nsight."""
    r, scope = ctx.scoped(rank, device)
    idle = r.findings.idle
    gaps = r.gaps
    if device is None:
        totals = IdleTotals(idle.idle_us, idle.span_us, idle.device_time_us, idle.idle_pct, idle.gaps,
                            idle.by_cause_us, idle.by_cause_pct, idle.by_cause_count)
    else:
        gaps = r.device_gaps(device)
        one = idle.devices[device]
        counts = gaps.groupby("cause", observed=True)["dur"].size()
        totals = IdleTotals(one.idle_us, one.span_us, None, one.idle_pct, len(gaps), one.by_cause_us, None,
                            {c: int(counts[c]) for c in one.by_cause_us})
    answer = partial(IdleGapsAnswer, totals, scope, r.params.idle.launch_gap_us, idle.sync_sites,
                     None if idle.has_python_frames else NO_FRAMES, by_line=idle.by_line if device is None else [])
    trace, origin = r.trace, r.trace.origin_ns()
    if gaps.empty and not trace.has_device_activity:
        return answer(matching_gaps=None, matching_idle_us=None, top_gaps=[], note="no device activity in this trace")
    if cause:
        gaps = gaps[gaps["cause"] == cause]
    if min_us:
        gaps = gaps[gaps["dur"] >= min_us * 1000]
    if step is not None:
        steps = trace.steps
        if steps.empty:
            raise ToolInputError("this trace has no steps (no ProfilerStep#N ranges)")
        row = steps[steps["step"] == step]
        if row.empty or row["gpu_start"].isna().all():
            raise ToolInputError(f"no step {step} with device work; steps are {list(steps['step'])}")
        gaps = gaps[gaps["step"] == step]  # the gap before a step's first device work is that step's, as `steps` says
    listed = [GapRow(us(g.start - origin), us(g.start), us(g.dur), g.cause, int(g.device),
                     # what the thread that launched the next work was doing
                     None if g.cause == "launch_latency" else
                     gap_host_activity(trace, g))
              for g in gaps.nlargest(_top(top), "dur").itertuples()]
    return answer(matching_gaps=len(gaps), matching_idle_us=us(gaps["dur"].sum()), top_gaps=listed,
                  mean_gap_us=us(gaps["dur"].mean()) if len(gaps) else None,
                  median_gap_us=us(gaps["dur"].median()) if len(gaps) else None)


def host_activity(ctx: AnalysisContext,
                  start_us: Annotated[float, Field(description="window start, µs from the trace's first event")],
                  end_us: Annotated[float, Field(description="window end, µs from the trace's first event")],
                  rank: Rank = None, device: Device = None, top: Top = 10) -> HostActivityAnswer:
    """What the host (CPU) was doing in a window (µs from the trace's first event, as gaps report
    them): the host events that spent the most time in it. Host events belong to the rank (its
    process); `device` only checks the GPU exists."""
    r, scope, lo, hi = _window(ctx, start_us, end_us, rank, device)
    events = host_events_in(r.trace, lo, hi, top=_top(top))
    return HostActivityAnswer(scope, round(end_us - start_us, 3), events,
                              None if events else "no host events were recorded in this window", start_us, end_us)


def device_activity(ctx: AnalysisContext,
                    start_us: Annotated[float, Field(description="window start, µs from the trace's first event")],
                    end_us: Annotated[float, Field(description="window end, µs from the trace's first event")],
                    rank: Rank = None, device: Device = None, top: Top = 5) -> DeviceActivityAnswer:
    """What the GPUs were doing in a window (µs from the trace's first event, as gaps report them): each
    GPU's busy time there, its idle by cause, and the kernels, copies and memsets with the most time
    inside it. host_activity gives the host's side of the same window."""
    r, scope, lo, hi = _window(ctx, start_us, end_us, rank, device)
    return DeviceActivityAnswer(scope, start_us, end_us, device_window(r.trace, r.gaps, lo, hi, device, _top(top)))


def _window(ctx: AnalysisContext, start_us: float, end_us: float, rank: int | None,
            device: int | None) -> tuple[RankAnalysis, Scope, int, int]:
    """The rank and scope a window tool reads, and the window in ns on the trace's clock."""
    if end_us <= start_us:
        raise ToolInputError("end_us must be after start_us")
    r, scope = ctx.scoped(rank, device)
    origin = r.trace.origin_ns()
    return r, scope, origin + int(start_us * 1000), origin + int(end_us * 1000)


def data_movement(ctx: AnalysisContext, rank: Rank = None, device: Device = None,
                  kind: Annotated[CopyKind | None, Field(description="only copies of this direction")] = None
                  ) -> CopiesAnswer:
    """Copies by kind (HtoD, DtoH, DtoD, HtoH, PtoP): count, bytes, time, achieved GB/s, pageable
    copies, and copy time that no compute overlaps (exposed), on a rank's GPUs or one of them."""
    r, scope = ctx.scoped(rank, device)
    copies = r.memcpy(device)
    note = None
    if kind is not None:
        copies = replace(copies, by_kind={k: c for k, c in copies.by_kind.items() if k == kind})
        if not copies.by_kind:
            note = f"no {kind} copies in this scope"
    if not copies.count:
        note = "no memory copies in this scope"
    return CopiesAnswer(copies, scope, note)


def communication(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> CommAnswer:
    """Collective (NCCL/RCCL) kernels: time, share of device time, how much compute does not hide
    (exposed), the largest collectives; across ranks, each rank's waiting (for the last rank to
    enter) against communication proper, and the straggler with what delayed it."""
    r, scope = ctx.scoped(rank, device)
    comm = r.comm(device)
    one_rank = ctx.analysis.comparison is None and len(ctx.analysis.ranks) == 1
    return CommAnswer(comm, scope, ctx.analysis.comparison, ONE_RANK if one_rank else None,
                      None if comm.kernels else "no collective kernels in this scope")


def hot_kernels(ctx: AnalysisContext, top: Top = 10,
                name_filter: Annotated[str | None, Field(description="only kernels whose name contains this (case and "
                                                                    "underscores aside: allreduce finds all_reduce)")] = None,
                rank: Rank = None, device: Device = None, full_names: FullNames = False,
                order_by: Annotated[KernelOrder, Field(description="rank by total time (default), by time per call "
                                                                    "(mean or max), or by launches (count)")] = "total",
                op_filter: Annotated[str | None, Field(description="only kernels an op launched, itself or through "
                                                                    "the ops inside it: the op of this name (aten::mm, "
                                                                    "aten::convolution, vllm::moe_forward, a "
                                                                    "record_function range), else every op whose name "
                                                                    "contains it, case and underscores aside")] = None,
                collectives: Annotated[bool, Field(description="only collective (NCCL/RCCL) kernels: which collective "
                                                               "is slowest per call")] = False,
                ) -> KernelsAnswer:
    """Kernels ranked by total device time (or per call, or by launches): count, total, mean,
    median, max, share of busy time, the op that launched them, the user's Python line (when the
    trace has frames) and achieved TFLOP/s and MFU (when it has shapes), on a rank's GPUs or one;
    with op_filter, where the time inside one op goes (the totals are then that op's kernels',
    op_share_pct their share of the scope's device time, and op_host its calls and time on the host)."""
    r, scope = ctx.scoped(rank, device)
    result = r.hot_kernels(top=_top(top), name_filter=name_filter, device=device, order=order_by, op_filter=op_filter,
                           collectives=collectives)
    frames = r.findings.has_python_frames
    lines = kernel_python_lines(r.trace, [k.name for k in result.top]) if frames else {}
    # from recorded shapes, over the rank's GPUs (see the flops tool)
    throughput = {k.name: k for k in r.findings.flops.by_kernel} if r.findings.flops and device is None else {}
    rows = [KernelRow(k, lines.get(k.name), throughput.get(k.name), full_names) for k in result.top]
    wanted = " and ".join(w for w in ("are collectives" if collectives else "",
                                      f"match {name_filter!r}" if name_filter else "",
                                      f"are launched by or inside an op matching {op_filter!r}" if op_filter else "") if w)
    note = None if result.kernels else (f"no kernels {wanted}" if wanted else "no kernels in this scope")
    share = None
    if op_filter:  # the op's kernels over the device time of the scope, as op_time's shares are
        work = on_device(r.trace.gpu, device)
        device_ns = int((work["end"] - work["start"]).to_numpy()[(work["kind"] != "sync").to_numpy()].sum())
        share = pct(result.total_us, us(device_ns))
    return KernelsAnswer(result, rows, scope, order_by, None if frames else NO_FRAMES, note,
                         op_host(r.trace, op_filter) if op_filter else None, share)


def kernel_profiles(ctx: AnalysisContext,
                    name_filter: Annotated[str | None, Field(description="only kernels whose name contains this (case "
                                                                        "and underscores aside)")]
                    = None, rank: Rank = None, device: Device = None) -> KernelProfilesAnswer:
    """Why a kernel is slow, from the Nsight Compute export loaded with the trace (--kernels):
    per profiled kernel, compute and memory throughput as % of peak (speed of light), achieved and
    theoretical occupancy and what limits it, waves, top warp stalls, arithmetic intensity where
    recorded, the class (memory-, compute- or latency-bound) with why and the next step, ncu's own
    rules, and the kernel's count and time in the trace (on the rank, or GPU, asked; the verdict's
    rank by default) where its name matched."""
    r, scope = ctx.scoped(rank, device)
    found = ctx.analysis.kernel_profiles
    if found is None:
        return KernelProfilesAnswer(None, [], scope, NO_COUNTERS)
    if r.rank != found.rank or device is not None:
        found = joined_on(found, r, device)
    wanted = loosely(name_filter) if name_filter else None
    kernels = [k for k in found.kernels if wanted is None or wanted.search(k.name)]
    return KernelProfilesAnswer(found, kernels, scope,
                                note=None if kernels else f"no profiled kernel matches {name_filter!r}")


def critical_path(ctx: AnalysisContext, rank: Rank = None, device: Device = None,
                  step: Annotated[int | None, Field(description="the path of this step alone (its host range to the "
                                                                 "end of its device work)")] = None,
                  range_name: Annotated[str | None, Field(description="the path of one record_function / NVTX range "
                                                                       "by name")] = None,
                  instance: Annotated[int, Field(description="which instance of range_name (1 = the first)")] = 1
                  ) -> DetectorAnswer:
    """The rank's critical path (the chain of dependent work that sets its length: device ops on
    their streams, launch calls, host work between calls, blocking calls, waits), or one step's or
    range's: its length split into device work, host calls, host work and waits; the kernels with
    the most time on it, each with what making it 2× faster saves at most; the hot kernels off it,
    which save nothing when faster; the host ops its host time is spent in. Per rank (`device` only
    checks the GPU exists)."""
    r, scope = ctx.scoped(rank, device)
    if step is None and range_name is None:
        return DetectorAnswer(r.findings.critical_path, scope, None if r.findings.critical_path else unavailable(
            "the critical path", "the rank ran no device work", "profile a step that runs on the GPU"))
    try:
        window = step_window(r.trace, step) if step is not None else range_window(r.trace, range_name or "", instance)
    except KeyError as exc:
        raise ToolInputError(str(exc.args[0])) from None
    path = detect_critical_path(r.trace, [k.name for k in r.findings.kernels.top], window)
    within = Scope(**scope, window=f"step {step}" if step is not None else f"{range_name} #{instance}")
    return DetectorAnswer(path, within,
                          None if path else unavailable("the critical path", "the window ran no device work",
                                                        "pick a step or range that launches GPU work"))


def kernel_instances(ctx: AnalysisContext,
                     name: Annotated[str, Field(description="a kernel name or part of one (as hot_kernels lists)")],
                     rank: Rank = None, device: Device = None, top: Top = 10, full_names: FullNames = False
                     ) -> InstancesAnswer:
    """The longest instances of one kernel: start, duration, GPU, stream, the op that launched it,
    and how long after its launch call it started."""
    r, scope = ctx.scoped(rank, device)
    trace = r.trace
    kernels = on_device(trace.gpu, device)
    kernels = kernels[kernels["kind"] == "kernel"]
    match = kernels[matches(kernels["name"], re.compile(re.escape(name), re.IGNORECASE))]
    if match.empty:
        raise ToolInputError(f"no kernel name contains {name!r} in this scope; call hot_kernels to see names")
    # in match's order, exact ns (-1: no launch call in the trace)
    launch = launch_calls(trace, match["correlation"].to_numpy(), ("start",))["start"].to_numpy("int64", na_value=-1)
    origin = trace.origin_ns()
    chosen = match.assign(dur=match["end"] - match["start"], launch=launch).nlargest(_top(top), "dur")
    return InstancesAnswer(
        scope, len(match), sorted(set(chosen["name"].astype(str)))[:5], full_names,
        us((match["end"] - match["start"]).sum()),
        [KernelInstance(us(k.start - origin), us(k.start), us(k.dur), int(k.device), int(k.stream),
                        None if k.op is None or k.op != k.op else str(k.op),
                        None if k.launch < 0 else us(k.start - k.launch))
         for k in chosen.itertuples()])


def launches(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> LaunchesAnswer:
    """Kernel launch statistics: launches per API (and kernels per step), the launch call's median duration,
    launch-to-start latency (median, p90), how many kernels are shorter than their own launch
    call, the idle time the host's launching costs (launch-bound gaps), and CUDA graphs (replays,
    kernels per replay, share of kernel time, launch calls saved), on a rank's GPUs or one."""
    r, scope = ctx.scoped(rank, device)
    idle: IdleResult | DeviceIdle = r.findings.idle if device is None else r.findings.idle.devices[device]
    launch = r.launch(device)
    # a rank's share only: a device has no share of the rank's device time
    share = idle.by_cause_pct.get("launch_overhead", 0.0) if isinstance(idle, IdleResult) else None
    stepped = r.steps(device)
    return LaunchesAnswer(launch, scope, idle.by_cause_us.get("launch_overhead", 0.0),
                          idle.by_cause_us.get("launch_latency", 0.0), r.params.idle.launch_gap_us, share,
                          r.findings.graphs,
                          None if launch.kernels else "no kernel is linked to its launch call in this trace",
                          stepped.kernels_per_step if stepped and stepped.count else None)


def steps(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> StepsAnswer:
    """Per-step table: host and device time, the idle each step owns by cause (the gap before a
    step's first device work is that step's), each step against the median step, the slowest
    step and what it spent more time on than the median."""
    r, scope = ctx.scoped(rank, device)
    result = r.steps(device)
    return StepsAnswer(result, scope, NO_STEPS if result is None else None)


def flops(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> FlopsAnswer:
    """Achieved FLOP/s and MFU from recorded shapes: FLOPs per op (matmuls, attention,
    convolutions) and data type, their kernels' device time, achieved TFLOP/s, and MFU against the
    GPU's peak for that data type, always with the GPU, dtype and peak it assumed and the peak's
    source. Per rank (`device` only checks the GPU exists)."""
    r, scope = ctx.scoped(rank, device)
    result = r.findings.flops
    return FlopsAnswer(result, scope, NO_SHAPES if not result or not result.shaped_ops else None)


def memory(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> MemoryAnswer:
    """GPU memory from the allocator's events: per GPU the peak allocated and reserved bytes,
    growth, allocated-minus-freed per step (a leak grows in every step), allocations per step;
    and the allocator calls that synchronize (cudaMalloc, cudaFree, pinned host allocations) with
    the idle device time during them."""
    r, scope = ctx.scoped(rank, device)
    return MemoryAnswer(r.findings.memory, device, scope, None if r.counts["memory_events"] else NO_MEMORY)


def annotation_ranges(ctx: AnalysisContext, rank: Rank = None, device: Device = None,
                      name_filter: Annotated[str | None, Field(description="only ranges whose name contains this; "
                                                                   "then ops and Python functions count too")]
                      = None, top: Top = 10) -> AnnotationsAnswer:
    """User annotations (record_function / NVTX ranges) by name: how many times each ran, host
    time, the GPU time of the kernels launched inside it and its share of busy time, and the
    device's idle share while it ran; and each step's top ranges. With name_filter, every host range
    whose name holds it (an op such as Optimizer.zero_grad#SGD.zero_grad, a Python function). On a
    rank's GPUs or one of them (a nested range counts in its parent too)."""
    r, scope = ctx.scoped(rank, device)
    if not name_filter and not _has_annotations(r):
        return AnnotationsAnswer(None, scope, NO_ANNOTATIONS)
    busy = r.breakdown.total.busy_us if device is None else r.breakdown.devices[device].busy_us
    return AnnotationsAnswer(detect_annotations(r.trace, r.gaps, busy, top=_top(top), device=device,
                                                name_filter=name_filter), scope)


annotation_ranges.__name__ = "annotations"  # the tool's name (`annotations` is taken by the __future__ import)


_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCTIONS: dict[str, Callable[..., float]] = {"min": min, "max": max, "abs": abs}
# constants any derivation may use: small integers, unit conversions
_CONSTANTS = {float(c) for c in [*range(11), 60, 100, 1000, 1e6, 1e9, 1024, 2**20, 2**30]}
_CALC_KEYS = {"us": "result_us", "ms": "result_ms", "s": "result_s", "pct": "result_pct", "x": "result_x",
              "gbps": "result_gbps", "bytes": "result_bytes", "count": "result"}


def calc(ctx: AnalysisContext,
         expression: Annotated[str, Field(description="arithmetic (+ - * / parentheses, min, max, abs) over numbers "
                                                      "copied exactly as tools returned them, e.g. "
                                                      "'285214 / 996477 * 100'")],
         unit: Annotated[CalcUnit, Field(description="the unit of the result: us, ms, s, pct, x (a ratio), gbps, "
                                                     "bytes or count")] = "count") -> CalcAnswer:
    """Compute a derived number (a ratio, a difference, a share) from values tools returned, so
    the answer can state it and the number check accepts it. Every number in the expression must
    be one a tool returned in this conversation (or a unit constant such as 100 or 1000)."""
    try:
        tree = ast.parse(expression.replace("×", "*").replace("÷", "/"), mode="eval")
    except SyntaxError:
        raise ToolInputError(f"not an arithmetic expression: {expression[:80]!r}") from None
    unknown: list[str] = []

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            number = float(node.value)
            if number not in _CONSTANTS and not ctx.sources.returned(number):
                unknown.append(f"{node.value:g}")
            return number
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
                and node.args and not node.keywords:
            return _FUNCTIONS[node.func.id](*(value(a) for a in node.args))
        raise ToolInputError("only numbers, + - * /, parentheses, min, max and abs are allowed")

    try:
        result = value(tree)
    except ZeroDivisionError:
        raise ToolInputError("division by zero") from None
    if unknown:
        raise ToolInputError(f"{', '.join(unknown)}: not a value any tool returned in this conversation; call the "
                             "tool that reports it, and copy numbers exactly as the tool wrote them")
    return CalcAnswer(expression, unit, _CALC_KEYS[unit], round(result, 6))


def compare_traces(ctx: AnalysisContext, rank: Rank = None, device: Device = None,
                   op: Annotated[str | None, Field(description="also this op's kernels in both traces (launched by "
                                                             "it or inside it, as hot_kernels' op_filter)")] = None,
                   ) -> CompareAnswer:
    """Before (the first trace) against after (the second): step time, busy and idle, losses by
    cause, whether the first trace's root cause went away, the predicted against the measured
    saving, new problems, hot kernels side by side (time, calls, share of each trace's own kernel
    time), and with `op` that op's kernels per step in each. The comparison is of whole jobs; `rank`
    and `device` are checked against the first trace."""
    if ctx.other is None:
        raise ToolInputError("only one trace is loaded; start with --compare OTHER to compare two")
    scope = ctx.scoped(rank, device)[1] if rank is not None or device is not None else Scope(rank="all", device="all")
    result = diff(ctx.analysis, ctx.other)
    return CompareAnswer(result, scope, op_change(ctx.analysis, ctx.other, op, result) if op else None)


def scaling(ctx: AnalysisContext,
            project: Annotated[list[int] | None, Field(description="world sizes to predict the step at")] = None
            ) -> ScalingAnswer:
    """How the job scales: the two runs loaded (the first and the one beside it, at another world
    size) compared as one job at two sizes: step time, speedup and parallel efficiency, the
    efficiency lost to compute per GPU, exposed transfer, waiting for the slowest rank and host
    idle (µs per step and points), the collectives' latency and bandwidth fitted, and the step
    projected at `project` sizes."""
    if ctx.other is None:
        raise ToolInputError("one run is loaded; scaling compares runs of the job at two sizes: start with --compare "
                             "OTHER (the job at another size), or run `traceagent scaling RUN RUN …`")
    runs = [(a, world_size(a) or 1) for a in (ctx.analysis, ctx.other)]  # one rank saying nothing: one GPU
    try:
        return ScalingAnswer(scale_runs(runs, project=project))
    except ValueError as exc:
        raise ToolInputError(str(exc)) from None


def what_if(ctx: AnalysisContext,
            change: Annotated[str, Field(description="one change, or several joined by ' + ': "
                                                     + "; ".join(f"{k}: {v}" for k, v in CHANGES.items()))],
            rank: Rank = None, device: Device = None) -> WhatIfAnswer:
    """Predict what a change would buy before making it: the rank's dependency graph (each thread's
    calls, each stream's kernels, launches, waits) replayed with the change made. Gives the measured
    and predicted mean step, the saving, what sets the pace after the change, and the assumptions.
    A rank is replayed whole: `device` is checked, and the result is of all its GPUs."""
    try:
        changes = [parse_change(spec) for spec in change.split(" + ")]
        ctx.scoped(rank, device)  # a GPU the rank lacks is an error
        r, scope = ctx.scoped(rank, None)
        result = simulate(r.trace, changes)
    except ValueError as exc:
        raise ToolInputError(str(exc)) from None
    if result is None:
        raise ToolInputError(f"rank {r.rank} has no device work to replay")
    return WhatIfAnswer(result, scope)


TOOL_FUNCTIONS: list[Callable[..., Answer]] = [overview, verdict, idle_gaps, host_activity, device_activity, data_movement,
                                             communication, hot_kernels, kernel_profiles, critical_path, kernel_instances,
                                             launches,
                                             steps,
                                             annotation_ranges, flops, memory, what_if, calc, compare_traces,
                                             scaling]


def registered_tool(detector: Detector) -> Callable[..., Answer]:
    """A registered detector's tool: its result for a rank as analysed, under its own name (of the
    rank's GPUs together: `device` is checked, as host_activity checks it)."""

    def tool(ctx: AnalysisContext, rank: Rank = None, device: Device = None) -> DetectorAnswer:
        r, scope = ctx.scoped(rank, device)
        result = r.results.get(detector.name)
        return DetectorAnswer(result, scope,
                              unavailable(detector.title.lower(), *detector.needs) if result is None else None)

    tool.__name__ = detector.name
    tool.__doc__ = detector.description
    return tool


def tool_functions() -> dict[str, Callable[..., Answer]]:
    """The tools by name, in the order the model sees them: the detectors', the registered ones',
    then calc and compare_traces."""
    core = [f for f in TOOL_FUNCTIONS if f not in (calc, compare_traces, scaling)]
    return {f.__name__: f for f in [*core, *(registered_tool(d) for d in DETECTORS if d.tool), calc, compare_traces,
                                     scaling]}


def build_tools(ctx: AnalysisContext) -> list[BaseTool]:
    """LangChain tools bound to one trace's analysis. Each returns JSON text; a bad request comes
    back as {"error": ...} so the model can correct itself."""
    return [_structured(func, ctx) for func in tool_functions().values()
            if func not in (compare_traces, scaling) or ctx.other is not None]


def tool_schemas() -> list[BaseTool]:
    """Every tool as a client sees it (name, description, argument schema) before a trace is open;
    running one needs build_tools."""
    return [_structured(func, None) for func in tool_functions().values()]


def openai_schema(tool: BaseTool) -> dict:
    """The tool as the server is told of it. Built once per process for each name, description and
    argument class (pydantic's JSON schema generation was most of what starting a session cost),
    and copied, so no request can change the next one's."""
    if not isinstance(tool.args_schema, type):
        return convert_to_openai_tool(tool)
    key = (tool.name, tool.description, tool.args_schema)
    if (schema := _SCHEMAS.get(key)) is None:
        schema = _SCHEMAS[key] = convert_to_openai_tool(tool)
    return copy.deepcopy(schema)


_SCHEMAS: dict[tuple[str, str, type], dict] = {}


def _structured(func: Callable[..., Answer], ctx: AnalysisContext | None) -> BaseTool:
    return StructuredTool.from_function(func=_bind(func, ctx), name=func.__name__, args_schema=_args_schema(func.__name__),
                                        description=" ".join((func.__doc__ or "").split()), handle_tool_error=False)


@cache
def _args_schema(name: str) -> type[BaseModel]:
    """A tool's argument schema, derived from its signature once per process (60 ms a tool: a
    chat session or an MCP trace binds every tool)."""
    schema: type[BaseModel] = create_schema_from_function(name, _bind(tool_functions()[name], None))  # type: ignore[assignment]
    return schema


def _bind(func: Callable[..., Answer], ctx: AnalysisContext | None) -> Callable[..., str]:
    """The function without its context argument, returning JSON; keeps the signature so the
    argument schema is derived from the type hints."""
    import functools
    import inspect

    @functools.wraps(func)
    def run(*args, **kwargs) -> str:
        return dumps(func(ctx, *args, **kwargs))

    signature = inspect.signature(func)
    run.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
    run.__annotations__ = {k: v for k, v in func.__annotations__.items() if k != "ctx"}
    return run
