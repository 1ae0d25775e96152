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
from ..detect.host import calls_by_correlation, host_events_in
from ..detect.kernels import short_name
from ..detect.view import us
from ..trace.model import matches

MAX_ITEMS = 25


@dataclass
class AnalysisContext:
    """What the tools read: the analysis of the trace, and optionally of a second one to compare."""

    analysis: Analysis
    other: Analysis | None = None

    def rank(self, rank: int | None) -> RankAnalysis:
        if rank is None:
            return self.analysis.ranks[0]
        for r in self.analysis.ranks:
            if r.rank == rank:
                return r
        raise ToolInputError(f"no rank {rank} in this trace; ranks are {[r.rank for r in self.analysis.ranks]}")


class ToolInputError(ValueError):
    """A tool was asked for something the trace does not have; the message goes back to the model."""


def dumps(value: Any) -> str:
    return json.dumps(json_safe(value), separators=(",", ":"), default=_plain, allow_nan=False)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__name__)


# -- the tools: each takes the context first; the model supplies the rest --------------------------

def overview(ctx: AnalysisContext) -> dict:
    """What the trace is and where device time went: format, ranks, devices, span, busy and idle
    per rank, event counts, and the verdict's limiter. Start here."""
    data = ctx.analysis.to_dict()
    return {
        "trace": data["trace"],
        "ranks": [{"rank": r["rank"], "breakdown": r["breakdown"] | {"steps": None},
                   "counts": ctx.rank(r["rank"]).trace.counts(), "limiter": r["verdict"]["limiter"],
                   "root_cause": r["verdict"]["root_cause"]} for r in data["ranks"][:MAX_ITEMS]],
        "verdict": {k: data["verdict"][k] for k in ("limiter", "root_cause", "headline")},
    }


def verdict(ctx: AnalysisContext, rank: int | None = None) -> dict:
    """The diagnosis: limiter, root cause, headline, one-sentence hypothesis, the next step to
    take, the evidence numbers, and what the trace lacks. Without `rank`, the job's verdict."""
    v = ctx.rank(rank).verdict if rank is not None else ctx.analysis.verdict
    return v.to_dict()


def idle_gaps(ctx: AnalysisContext, rank: int | None = None, cause: str | None = None, step: int | None = None,
              min_us: float = 0.0, top: int = 10) -> dict:
    """Idle time on the device and why: totals by cause (dataloader, sync, launch_overhead,
    host_other, no_host_activity, launch_latency) and the largest gaps with evidence (the sync call,
    op and Python line; the host events during the gap). Filter by cause, step number, or a
    minimum gap length in µs. Times are µs from the trace's first event."""
    r = ctx.rank(rank)
    idle = r.findings.idle
    result: dict = {"idle_us": idle.idle_us, "span_us": idle.span_us, "idle_pct": idle.idle_pct, "gaps": idle.gaps,
                    "by_cause_us": idle.by_cause_us, "by_cause_pct": idle.by_cause_pct,
                    "by_cause_count": idle.by_cause_count, "launch_gap_us": r.params.idle.launch_gap_us,
                    "sync_sites": [s.to_dict() for s in idle.sync_sites]}
    if not idle.has_python_frames:
        result["note"] = "this trace has no Python frames (profile with with_stack=True to get source lines)"
    trace, origin = r.trace, r.trace.origin_ns()
    gaps = r.gaps
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
        if g.cause != "launch_latency":
            item["host"] = [h.to_dict() for h in host_events_in(trace, int(g.start), int(g.end), top=3)]
        listed.append(item)
    result["matching_gaps"] = len(gaps)
    result["matching_idle_us"] = us(gaps["dur"].sum())
    result["top_gaps"] = listed
    return result


def host_activity(ctx: AnalysisContext, start_us: float, end_us: float, rank: int | None = None, top: int = 10) -> dict:
    """What the host (CPU) was doing between start_us and end_us (µs from the trace's first event,
    as gaps report them): the host events that spent the most time in that window."""
    if end_us <= start_us:
        raise ToolInputError("end_us must be after start_us")
    r = ctx.rank(rank)
    origin = r.trace.origin_ns()
    lo, hi = origin + int(start_us * 1000), origin + int(end_us * 1000)
    events = host_events_in(r.trace, lo, hi, top=max(1, min(top, MAX_ITEMS)))
    result = {"window_us": round(end_us - start_us, 3), "events": [e.to_dict() for e in events]}
    if not events:
        result["note"] = "no host events were recorded in this window"
    return result


def data_movement(ctx: AnalysisContext, rank: int | None = None) -> dict:
    """Copies by kind (HtoD, DtoH, DtoD...): count, bytes, time, achieved GB/s, pageable copies,
    and copy time that no compute overlaps (exposed)."""
    copies = ctx.rank(rank).findings.memcpy
    result = copies.to_dict()
    if not copies.count:
        result["note"] = "no memory copies in this trace"
    return result


def communication(ctx: AnalysisContext, rank: int | None = None) -> dict:
    """Collective (NCCL/RCCL) kernels: time, share of the span, how much compute does not hide
    (exposed), the largest collectives, and for several ranks who waits and who is slow."""
    comm = ctx.rank(rank).findings.comm
    result = comm.to_dict()
    if not comm.kernels:
        result["note"] = "no collective kernels in this trace"
    if ctx.analysis.comparison:
        result["ranks"] = ctx.analysis.comparison.to_dict()
    elif len(ctx.analysis.ranks) == 1:
        result["ranks_note"] = "one rank loaded: load the directory of all ranks' traces to compare ranks"
    return result


def hot_kernels(ctx: AnalysisContext, top: int = 10, name_filter: str | None = None, rank: int | None = None) -> dict:
    """Kernels ranked by total device time: count, total, mean, median, max, share of busy time,
    the op that launched them. `name_filter` keeps names containing that text."""
    result = ctx.rank(rank).hot_kernels(top=max(1, min(top, MAX_ITEMS)), name_filter=name_filter)
    data = result.to_dict()
    if not result.kernels:
        data["note"] = f"no kernels match {name_filter!r}" if name_filter else "no kernels in this trace"
    return data


def kernel_instances(ctx: AnalysisContext, name: str, rank: int | None = None, top: int = 10) -> dict:
    """The longest instances of one kernel (a name or part of one): start, duration, stream, the op
    that launched it, and how long after its launch call it started."""
    trace = ctx.rank(rank).trace
    kernels = trace.gpu[trace.gpu["kind"] == "kernel"]
    match = kernels[matches(kernels["name"], re.compile(re.escape(name), re.IGNORECASE))]
    if match.empty:
        raise ToolInputError(f"no kernel name contains {name!r}; call hot_kernels to see names")
    launch = match["correlation"].map(calls_by_correlation(trace)["start"])
    origin = trace.origin_ns()
    chosen = match.assign(dur=match["end"] - match["start"], launch=launch).nlargest(max(1, min(top, MAX_ITEMS)), "dur")
    names = sorted(set(chosen["name"].astype(str)))
    return {
        "matching_kernels": len(match), "names": [{"name": n, "short_name": short_name(n)} for n in names[:5]],
        "total_us": us((match["end"] - match["start"]).sum()),
        "instances": [{"start_us": us(k.start - origin), "dur_us": us(k.dur), "stream": int(k.stream),
                       "op": None if k.op is None or k.op != k.op else str(k.op),
                       "launch_to_start_us": None if k.launch != k.launch else us(k.start - k.launch)}
                      for k in chosen.itertuples()],
    }


def steps(ctx: AnalysisContext, rank: int | None = None) -> dict:
    """Per-step times (host and device), idle by cause per step, the slowest step and what it
    spent more time on than the median step."""
    result = ctx.rank(rank).findings.steps
    if result is None:
        return {"count": 0, "note": "this trace has no steps: use a torch.profiler schedule with prof.step(), "
                                    "or NVTX ranges, to mark iterations"}
    data = result.to_dict()
    data["steps"] = data["steps"][:MAX_ITEMS]
    return data


def compare_traces(ctx: AnalysisContext) -> dict:
    """Before (the first trace) against after (the second): step time, busy and idle, losses by
    cause, whether the first trace's root cause went away, new problems, hot kernels side by side."""
    if ctx.other is None:
        raise ToolInputError("only one trace is loaded; start with --compare OTHER to compare two")
    return diff(ctx.analysis, ctx.other).to_dict()


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
