"""The detectors as tools an LLM (or the offline analyst) calls: typed arguments, docstrings the
model can act on, compact JSON results with units in the keys.

Every result is bounded (top-N lists, never whole frames) and says plainly when the trace lacks
what was asked. Strings from the trace (kernel names, paths) appear only as JSON values here:
that is the one way trace text reaches a model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.tools import BaseTool, StructuredTool

from ..detect.analysis import Analysis, RankAnalysis, json_safe
from ..detect.diff import diff
from ..detect.host import calls_by_correlation, gap_host, host_events_in
from ..detect.idle import gap_launcher
from ..detect.kernels import short_name
from ..detect.view import on_device, us
from ..trace.model import matches

MAX_ITEMS = 25


@dataclass
class AnalysisContext:
    """What the tools read: the analysis of the trace, and optionally of a second one to compare."""

    analysis: Analysis
    other: Analysis | None = None

    def rank(self, rank: int | None) -> RankAnalysis:
        """A rank's analysis; None is the rank the verdict is about."""
        try:
            return self.analysis.rank(rank)
        except KeyError:
            raise ToolInputError(f"no rank {rank} in this trace; ranks are {[r.rank for r in self.analysis.ranks]}") \
                from None

    def scoped(self, rank: int | None, device: int | None) -> tuple[RankAnalysis, dict]:
        """The rank asked for (the verdict's by default) and the scope to report: which rank, which
        GPU ("all" of the rank's when none is named), and the rank's GPUs."""
        r = self.rank(rank)
        if device is not None and device not in r.devices:
            raise ToolInputError(f"rank {r.rank} has no GPU {device} with work; its GPUs are {r.devices}")
        return r, {"rank": r.rank, "device": "all" if device is None else device, "devices": r.devices}


class ToolInputError(ValueError):
    """A tool was asked for something the trace does not have; the message goes back to the model."""


def dumps(value: Any) -> str:
    return json.dumps(json_safe(value), separators=(",", ":"), default=_plain, allow_nan=False)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__name__)


# -- the tools: each takes the context first; the model supplies the rest --------------------------

def overview(ctx: AnalysisContext, rank: int | None = None, device: int | None = None) -> dict:
    """What the trace is and where device time went: format, ranks, GPUs, each GPU's span, busy
    and idle, event counts, and the verdict's limiter and rank. Start here. Without `rank`, every
    rank (up to 25); with `device`, that GPU's breakdown only."""
    data = ctx.analysis.to_dict()
    chosen = data["ranks"] if rank is None else [r for r in data["ranks"] if r["rank"] == ctx.rank(rank).rank]
    ranks = []
    for r in chosen[:MAX_ITEMS]:
        breakdown = r["breakdown"] | {"steps": None}
        if device is not None:
            ctx.scoped(r["rank"], device)
            breakdown["devices"] = {str(device): breakdown["devices"][str(device)]}
        ranks.append({"rank": r["rank"], "breakdown": breakdown, "counts": ctx.rank(r["rank"]).trace.counts(),
                      "limiter": r["verdict"]["limiter"], "root_cause": r["verdict"]["root_cause"]})
    return {
        "trace": data["trace"], "ranks": ranks,
        "verdict": {k: data["verdict"][k] for k in ("limiter", "root_cause", "headline", "rank")},
    }


def verdict(ctx: AnalysisContext, rank: int | None = None, device: int | None = None) -> dict:
    """The diagnosis: limiter, root cause, headline, one-sentence hypothesis, the next step to
    take, the evidence numbers, and what the trace lacks. Without `rank`, the job's verdict (its
    `rank` says which rank it is about); with `device`, also that GPU's breakdown."""
    v = ctx.rank(rank).verdict if rank is not None else ctx.analysis.verdict
    result = v.to_dict()
    if device is not None:
        r, scope = ctx.scoped(v.rank if rank is None else rank, device)
        result["device_breakdown"] = r.breakdown.devices[device].to_dict()
        result["scope"] = scope
    return result


def idle_gaps(ctx: AnalysisContext, rank: int | None = None, device: int | None = None, cause: str | None = None,
              step: int | None = None, min_us: float = 0.0, top: int = 10) -> dict:
    """Idle time on the GPUs and why: totals by cause (dataloader, sync, launch_overhead,
    host_other, no_host_activity, launch_latency) and the largest gaps with evidence (the sync call,
    op and Python line; the host events during the gap). Filter by rank, GPU, cause, step number,
    or a minimum gap length in µs. Times are µs from the trace's first event."""
    r, scope = ctx.scoped(rank, device)
    idle = r.findings.idle
    gaps = r.gaps
    if device is None:
        result: dict = {"idle_us": idle.idle_us, "span_us": idle.span_us, "device_time_us": idle.device_time_us,
                        "idle_pct": idle.idle_pct, "gaps": idle.gaps, "by_cause_us": idle.by_cause_us,
                        "by_cause_pct": idle.by_cause_pct, "by_cause_count": idle.by_cause_count}
    else:
        gaps = r.device_gaps(device)
        one = idle.devices[device]
        counts = gaps.groupby("cause")["dur"].size()
        result = {"idle_us": one.idle_us, "span_us": one.span_us, "idle_pct": one.idle_pct, "gaps": len(gaps),
                  "by_cause_us": one.by_cause_us, "by_cause_count": {c: int(counts[c]) for c in one.by_cause_us}}
    result |= {"scope": scope, "launch_gap_us": r.params.idle.launch_gap_us,
               "sync_sites": [s.to_dict() for s in idle.sync_sites]}
    if not idle.has_python_frames:
        result["note"] = "this trace has no Python frames (profile with with_stack=True to get source lines)"
    trace, origin = r.trace, r.trace.origin_ns()
    if gaps.empty and not trace.has_device_activity:
        return result | {"top_gaps": [], "note": "no device activity in this trace"}
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
        lo, hi = int(row["gpu_start"].iloc[0]), int(row["gpu_end"].iloc[0])
        gaps = gaps[(gaps["start"] >= lo) & (gaps["start"] < hi)]
    chosen = gaps.nlargest(max(1, min(top, MAX_ITEMS)), "dur")
    listed = []
    for g in chosen.itertuples():
        item = {"start_us": us(g.start - origin), "dur_us": us(g.dur), "cause": g.cause, "device": int(g.device)}
        if g.cause != "launch_latency":  # what the thread that launched the next work was doing
            item |= gap_host(trace, int(g.start), int(g.end), gap_launcher(trace, int(g.device), int(g.next_op))).to_dict()
        listed.append(item)
    result["matching_gaps"] = len(gaps)
    result["matching_idle_us"] = us(gaps["dur"].sum())
    result["top_gaps"] = listed
    return result


def host_activity(ctx: AnalysisContext, start_us: float, end_us: float, rank: int | None = None,
                  device: int | None = None, top: int = 10) -> dict:
    """What the host (CPU) was doing between start_us and end_us (µs from the trace's first event,
    as gaps report them): the host events that spent the most time in that window. Host events
    belong to the rank (its process); `device` only checks the GPU exists."""
    if end_us <= start_us:
        raise ToolInputError("end_us must be after start_us")
    r, scope = ctx.scoped(rank, device)
    origin = r.trace.origin_ns()
    lo, hi = origin + int(start_us * 1000), origin + int(end_us * 1000)
    events = host_events_in(r.trace, lo, hi, top=max(1, min(top, MAX_ITEMS)))
    result = {"scope": scope, "window_us": round(end_us - start_us, 3), "events": [e.to_dict() for e in events]}
    if not events:
        result["note"] = "no host events were recorded in this window"
    return result


def data_movement(ctx: AnalysisContext, rank: int | None = None, device: int | None = None) -> dict:
    """Copies by kind (HtoD, DtoH, DtoD...): count, bytes, time, achieved GB/s, pageable copies,
    and copy time that no compute overlaps (exposed), on a rank's GPUs or one of them."""
    r, scope = ctx.scoped(rank, device)
    copies = r.memcpy(device)
    result = copies.to_dict() | {"scope": scope}
    if not copies.count:
        result["note"] = "no memory copies in this scope"
    return result


def communication(ctx: AnalysisContext, rank: int | None = None, device: int | None = None) -> dict:
    """Collective (NCCL/RCCL) kernels: time, share of device time, how much compute does not hide
    (exposed), the largest collectives; across ranks, each rank's waiting (for the last rank to
    enter) against communication proper, and the straggler with what delayed it."""
    r, scope = ctx.scoped(rank, device)
    comm = r.comm(device)
    result = comm.to_dict() | {"scope": scope}
    if not comm.kernels:
        result["note"] = "no collective kernels in this scope"
    if ctx.analysis.comparison:
        result["ranks"] = ctx.analysis.comparison.to_dict()
        result["ranks"]["ranks"] = result["ranks"]["ranks"][:MAX_ITEMS]
    elif len(ctx.analysis.ranks) == 1:
        result["ranks_note"] = "one rank loaded: load the directory of all ranks' traces to compare ranks"
    return result


def hot_kernels(ctx: AnalysisContext, top: int = 10, name_filter: str | None = None, rank: int | None = None,
                device: int | None = None) -> dict:
    """Kernels ranked by total device time: count, total, mean, median, max, share of busy time,
    the op that launched them, on a rank's GPUs or one of them. `name_filter` keeps names
    containing that text."""
    r, scope = ctx.scoped(rank, device)
    result = r.hot_kernels(top=max(1, min(top, MAX_ITEMS)), name_filter=name_filter, device=device)
    data = result.to_dict() | {"scope": scope}
    if not result.kernels:
        data["note"] = f"no kernels match {name_filter!r}" if name_filter else "no kernels in this scope"
    return data


def kernel_instances(ctx: AnalysisContext, name: str, rank: int | None = None, device: int | None = None,
                     top: int = 10) -> dict:
    """The longest instances of one kernel (a name or part of one): start, duration, GPU, stream,
    the op that launched it, and how long after its launch call it started."""
    r, scope = ctx.scoped(rank, device)
    trace = r.trace
    kernels = on_device(trace.gpu, device)
    kernels = kernels[kernels["kind"] == "kernel"]
    match = kernels[matches(kernels["name"], re.compile(re.escape(name), re.IGNORECASE))]
    if match.empty:
        raise ToolInputError(f"no kernel name contains {name!r} in this scope; call hot_kernels to see names")
    launch = match["correlation"].map(calls_by_correlation(trace)["start"])
    origin = trace.origin_ns()
    chosen = match.assign(dur=match["end"] - match["start"], launch=launch).nlargest(max(1, min(top, MAX_ITEMS)), "dur")
    names = sorted(set(chosen["name"].astype(str)))
    return {
        "scope": scope, "matching_kernels": len(match),
        "names": [{"name": n, "short_name": short_name(n)} for n in names[:5]],
        "total_us": us((match["end"] - match["start"]).sum()),
        "instances": [{"start_us": us(k.start - origin), "dur_us": us(k.dur), "device": int(k.device),
                       "stream": int(k.stream), "op": None if k.op is None or k.op != k.op else str(k.op),
                       "launch_to_start_us": None if k.launch != k.launch else us(k.start - k.launch)}
                      for k in chosen.itertuples()],
    }


def steps(ctx: AnalysisContext, rank: int | None = None, device: int | None = None) -> dict:
    """Per-step times (host and device), idle by cause per step (from the rank's GPUs or one), the
    slowest step and what it spent more time on than the median step."""
    r, scope = ctx.scoped(rank, device)
    result = r.steps(device)
    if result is None:
        return {"scope": scope, "count": 0, "note": "this trace has no steps: use a torch.profiler schedule with "
                                                    "prof.step(), or NVTX ranges, to mark iterations"}
    data = result.to_dict() | {"scope": scope}
    data["steps"] = data["steps"][:MAX_ITEMS]
    return data


def compare_traces(ctx: AnalysisContext, rank: int | None = None, device: int | None = None) -> dict:
    """Before (the first trace) against after (the second): step time, busy and idle, losses by
    cause, whether the first trace's root cause went away, new problems, hot kernels side by side.
    The comparison is of whole jobs; `rank` and `device` are checked against the first trace."""
    if ctx.other is None:
        raise ToolInputError("only one trace is loaded; start with --compare OTHER to compare two")
    scope = ctx.scoped(rank, device)[1] if rank is not None or device is not None else {"rank": "all", "device": "all"}
    return diff(ctx.analysis, ctx.other).to_dict() | {"scope": scope}


TOOL_FUNCTIONS: list[Callable[..., dict]] = [overview, verdict, idle_gaps, host_activity, data_movement,
                                             communication, hot_kernels, kernel_instances, steps, compare_traces]


def build_tools(ctx: AnalysisContext) -> list[BaseTool]:
    """LangChain tools bound to one trace's analysis. Each returns JSON text; a bad request comes
    back as {"error": ...} so the model can correct itself."""
    tools = []
    for func in TOOL_FUNCTIONS:
        if func is compare_traces and ctx.other is None:
            continue
        tools.append(StructuredTool.from_function(func=_bind(func, ctx), name=func.__name__,
                                                  description=" ".join(func.__doc__.split()),
                                                  handle_tool_error=False))
    return tools


def _bind(func: Callable[..., dict], ctx: AnalysisContext) -> Callable[..., str]:
    """The function without its context argument, returning JSON; keeps the signature so the
    argument schema is derived from the type hints."""
    import functools
    import inspect

    @functools.wraps(func)
    def run(*args, **kwargs) -> str:
        return dumps(func(ctx, *args, **kwargs))

    signature = inspect.signature(func)
    run.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    run.__annotations__ = {k: v for k, v in func.__annotations__.items() if k != "ctx"}
    return run
