"""Inference phases: an inference server's steps (SGLang's `step[EXTEND …]` / `step[DECODE …]`,
vLLM's `execute_N_context_C(…)_generation_G(…)`: trace/normalize.SERVING_STEP) grouped into
prefill, decode and mixed (chunked prefill beside decode), each with its idle time, launch
overhead, CUDA-graph replay, hot kernels and FLOP/s.

A phase's time is its steps' windows (host range and device work, whichever is wider) on each
GPU. A phase whose idle time is mostly launch overhead is launch-bound and gets CUDA-graph advice,
unless its kernels already replay from graphs: then the launches are not what it waits on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ...format import counted, duration, shorten
from ...trace.model import Trace, matches, rows_where
from ..core import intervals as iv
from ..core.bounds import Percent
from ..core.peaks import peak_for
from ..core.view import pct, us, views_of
from .base import Detector
from .flops import COUNTED, FlopsResult, op_flops, per_op, uncounted_sentence
from .graphs import replayed
from .kernels import short_name

LAUNCH_CAUSES = ("launch_overhead", "launch_latency")
ORDER = ("prefill", "mixed", "decode")


@dataclass(frozen=True)
class PhasesParams:
    """launch_bound_pct: launch gaps at or above this share of a phase's device time make it
    launch-bound; graphs_pct: kernel time replayed from graphs at or above this share means the
    phase already uses them."""

    launch_bound_pct: Percent = 20.0
    graphs_pct: Percent = 50.0


@dataclass(frozen=True)
class PhaseKernel:
    name: str
    short_name: str
    total_us: float
    share_pct: float  # of the phase's kernel time


@dataclass(frozen=True)
class Phase:
    phase: str  # prefill, decode, mixed
    steps: int
    tokens: int | None  # as the steps' names say
    mean_step_us: float  # the steps' windows (host range or device work, whichever is wider; overlaps once) per step
    device_us: float  # the steps' windows, every GPU added up: the denominator below
    busy_pct: float
    idle_pct: float
    launch_idle_pct: float  # idle in launch-overhead and launch-latency gaps
    graph_kernel_pct: float  # of the phase's kernel time, replayed from CUDA/HIP graphs
    launch_bound: bool
    gflop: float | None  # counted ops (matmul, attention, convolution) launched in the phase
    tflops: float | None  # those FLOPs over the phase's device time
    mfu_pct: float | None  # against the GPU's peak for the main dtype
    top_kernels: list[PhaseKernel]
    next_step: str | None
    tokens_per_s: float | None = None  # its tokens over its steps' windows: a GPU behind its host is not faster
    # 2.17: the MFU leaves out most of the work: the rank's matmul, attention and convolution kernels ran mostly outside
    # the counted ops (CUDA graph replays, custom ops: flops.uncounted_pct), as the rank's MFU says of itself
    mfu_lower_bound: bool = False


@dataclass(frozen=True)
class PhasesResult:
    phases: list[Phase]  # prefill, mixed, decode, those present


def detect_phases(trace: Trace, gaps: pd.DataFrame, params: PhasesParams = PhasesParams(),
                  flops: FlopsResult | None = None) -> PhasesResult | None:
    """None when the trace has no inference server steps. `flops`, the rank's: whether its MFU is a lower bound."""
    steps = trace.steps[trace.steps["phase"].notna().to_numpy()]
    if steps.empty:
        return None
    graph_rows = replayed(trace)
    kernels = rows_where(trace.gpu, (trace.gpu["kind"] == "kernel").to_numpy())
    in_graph = graph_rows[(trace.gpu["kind"] == "kernel").to_numpy()]
    out = []
    for phase in ORDER:
        mine = steps[(steps["phase"] == phase).to_numpy()]
        if len(mine):
            out.append(_phase(trace, gaps, phase, mine, kernels, in_graph, params))
    if flops is not None and uncounted_sentence(flops) is not None:
        out = [replace(p, mfu_lower_bound=True) if p.mfu_pct is not None else p for p in out]
    return PhasesResult(out)


def _windows(steps: pd.DataFrame) -> iv.Intervals:
    lo = np.minimum(steps["start"].to_numpy(np.int64), steps["gpu_start"].fillna(steps["start"]).to_numpy(np.int64))
    hi = np.maximum(steps["end"].to_numpy(np.int64), steps["gpu_end"].fillna(steps["end"]).to_numpy(np.int64))
    return iv.union(lo, hi)


def _phase(trace: Trace, gaps: pd.DataFrame, phase: str, steps: pd.DataFrame, kernels: pd.DataFrame,
           in_graph: np.ndarray, params: PhasesParams) -> Phase:
    windows = _windows(steps)
    # the phase's time on its GPUs: the work over its steps' device ranges, and as idle the gaps
    # its steps own (idle.idle_by on the rank's gap table: the same idle as each step's)
    ranged = steps.dropna(subset=["gpu_start", "gpu_end"])
    device_windows = iv.union(ranged["gpu_start"].to_numpy(np.int64), ranged["gpu_end"].to_numpy(np.int64))
    busy_ns = sum(iv.length(iv.intersect(view.busy, device_windows)) for view in views_of(trace))
    owned = gaps[gaps["step_row"].isin(trace.steps.index.get_indexer(steps.index)).to_numpy()]
    idle_ns = int(owned["dur"].sum())
    launch_ns = int(owned[owned["cause"].isin(LAUNCH_CAUSES).to_numpy()]["dur"].sum())
    device_ns = busy_ns + idle_ns
    start = kernels["start"].to_numpy(np.int64)
    inside = iv.covered(windows, start, start + 1) > 0  # kernels that start in the phase
    dur = (kernels["end"] - kernels["start"]).to_numpy(np.int64)
    kernel_ns = int(dur[inside].sum())
    graph_pct = pct(dur[inside & in_graph].sum(), kernel_ns)
    launch_pct = pct(launch_ns, device_ns)
    launch_bound = launch_pct >= params.launch_bound_pct and graph_pct < params.graphs_pct
    by_name = (pd.Series(dur[inside], index=kernels["name"].astype(str).to_numpy()[inside])
               .groupby(level=0).sum().nlargest(3))
    top = [PhaseKernel(str(n), short_name(str(n)), us(v), pct(v, kernel_ns)) for n, v in by_name.items()]
    gflop, dtype = _flops(trace, windows)
    peak = peak_for(next(iter(trace.meta.devices.values()), ""))
    tflops = gflop * 1e9 / device_ns / 1e3 if gflop is not None and device_ns else None  # FLOP/ns → TFLOP/s
    rate = peak.tflops.get(dtype) if peak and dtype else None
    tokens = steps["tokens"].dropna()
    # the steps' time: each step until its host range or its device work ends, whichever is later (the
    # host queueing work far ahead of a GPU that has not run it yet has not served its tokens)
    step_ns = iv.length(windows)
    return Phase(
        phase=phase, steps=len(steps), tokens=int(tokens.sum()) if len(tokens) else None,
        mean_step_us=us(step_ns / len(steps)), device_us=us(device_ns),
        busy_pct=pct(busy_ns, device_ns), idle_pct=pct(idle_ns, device_ns), launch_idle_pct=launch_pct,
        graph_kernel_pct=graph_pct, launch_bound=launch_bound, gflop=gflop,
        tflops=round(tflops, 3) if tflops is not None else None,
        mfu_pct=round(100.0 * tflops / rate, 2) if tflops is not None and rate else None,
        top_kernels=top, next_step=_next_step(phase, launch_pct, graph_pct, launch_bound, params),
        tokens_per_s=round(float(tokens.sum()) * 1e9 / step_ns, 1) if len(tokens) and step_ns else None)


def _flops(trace: Trace, windows: iv.Intervals) -> tuple[float | None, str | None]:
    """GFLOP of the counted ops that start in the windows, and their main dtype."""
    cpu = trace.cpu
    shaped = cpu[cpu["shapes"].notna().to_numpy()]
    shaped = shaped[matches(shaped["name"], COUNTED)]
    start = shaped["start"].to_numpy(np.int64)
    shaped = shaped[iv.covered(windows, start, start + 1) > 0]
    counted = per_op(shaped, op_flops)
    by_dtype: dict[str, float] = {}
    for flops, dtype in counted:
        if flops is not None:
            by_dtype[dtype] = by_dtype.get(dtype, 0.0) + flops
    if not by_dtype:
        return None, None
    return round(sum(by_dtype.values()) / 1e9, 3), max(by_dtype, key=by_dtype.__getitem__)


def _next_step(phase: str, launch_pct: float, graph_pct: float, launch_bound: bool, params: PhasesParams) -> str | None:
    if launch_bound:
        return (f"{phase} is launch-bound ({launch_pct:.1f}% of its time in launch gaps) and its kernels are not "
                "replayed from CUDA graphs: capture it (vLLM: leave enforce_eager off and cover the batch sizes in "
                "cudagraph_capture_sizes; SGLang: raise --cuda-graph-max-bs to the running batch size)")
    if launch_pct >= params.launch_bound_pct:
        return (f"{graph_pct:.0f}% of {phase}'s kernel time already replays from CUDA graphs: the launch gaps left are "
                "between replays (host scheduling and sampling), not kernel launches")
    return None


def phases_sentence(result: PhasesResult) -> str | None:
    parts = []
    for p in result.phases:
        text = (f"{p.phase}: {counted(p.steps, 'step')}"
                + (f" ({p.tokens} tokens" + (f", {p.tokens_per_s:g} tokens/s" if p.tokens_per_s else "") + ")"
                   if p.tokens is not None else "")
                + f", mean {duration(p.mean_step_us)}, busy {p.busy_pct:.1f}%, launch gaps "
                f"{p.launch_idle_pct:.1f}%, {p.graph_kernel_pct:.0f}% of kernel time in CUDA graphs")
        if p.mfu_pct is not None:
            text += f", MFU {p.mfu_pct:.1f}%" + (" (a lower bound)" if p.mfu_lower_bound else "")
        if p.top_kernels:
            text += f", led by {shorten(p.top_kernels[0].short_name, 50)} ({p.top_kernels[0].share_pct:.1f}%)"
        if p.next_step:
            text += f". {p.next_step}"
        parts.append(text)
    return "Inference phases: " + "; ".join(parts) + "." if parts else None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("phases", "Inference phases", "An inference server's steps (SGLang step[EXTEND/DECODE …], vLLM "
                    "execute_N_context_C(…)_generation_G(…)) split into prefill, decode and mixed: per phase the steps and "
                    "tokens, busy and idle time, launch gaps, the share of kernel time replayed from CUDA graphs, whether it "
                    "is launch-bound (and CUDA-graph advice), FLOP/s and MFU, and its hot kernels.",
                    PhasesParams(), PhasesResult, lambda i, p: detect_phases(i.trace, i["gaps"], p, i["flops"]),
                    lambda r, p: phases_sentence(r), reads=("gaps", "flops"), since="1.4",
                    needs=("the trace has no inference server steps (SGLang's step[...] or vLLM's execute_... ranges)",
                           "profile the server with its own profiler hooks (SGLang /start_profile, vLLM --profiler-config), "
                           "which record those ranges"))
