"""Why a hot kernel is slow, from Nsight Compute: each profiled kernel's speed of light (compute
and memory throughput as % of peak), occupancy and what limits it, warp stalls, arithmetic
intensity where the counters allow, classified memory-, compute- or latency-bound, and joined to
the trace's kernels of the same name so the verdict says what the kernel costs the program.

The classification is Nsight Compute's own reading of its Speed Of Light section: a kernel whose
compute or memory throughput reaches SOL_PCT of peak is bound by the higher one; below that on
both, neither unit is busy and the kernel is latency-bound (its SOLBottleneck rule: "below 60.0%
of peak typically indicate latency issues"), for which occupancy, waves and stalls say why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ...format import counted, duration, percent
from ...trace.ncu import KernelLaunch
from ..core.peaks import peak_for
from .kernels import HotKernel, short_name

SOL_PCT = 60.0
#: warp stall reason (as ncu's metric names spell it) → what it means and what helps
STALL_ADVICE = {
    "long_scoreboard": "warps wait on global/local memory (L1TEX): tile through shared memory, prefetch, or raise "
                       "occupancy to hide it",
    "short_scoreboard": "warps wait on shared memory or special-function results (MIO): fewer bank conflicts",
    "barrier": "warps wait at __syncthreads(): balance the work between a block's warps",
    "membar": "warps wait on memory fences: fewer __threadfence() calls",
    "math_pipe_throttle": "a math pipe is saturated: the kernel is near compute peak for that pipe",
    "mio_throttle": "the memory input/output queue is full: fewer, wider shared-memory accesses",
    "lg_throttle": "the local/global memory queue is full: vectorize loads (fewer, wider instructions)",
    "tex_throttle": "the texture unit is saturated",
    "wait": "fixed-latency dependencies: more independent instructions (ILP) per thread",
    "drain": "warps wait for memory writes at exit",
    "dispatch_stall": "the dispatcher stalls: rare; check for register-bank conflicts",
    "branch_resolving": "warps wait on branch targets: less divergent control flow",
    "no_instruction": "the instruction cache misses: smaller or less unrolled code",
    "imc_miss": "the constant cache misses",
    "sleeping": "warps sleep (nanosleep or yield)",
}
_LIMITERS = {"limit_registers": "registers", "limit_shared_mem": "shared memory", "limit_warps": "warps per block",
             "limit_blocks": "blocks per SM"}


@dataclass(frozen=True)
class Stall:
    reason: str
    cycles_per_instruction: float  # cycles a warp spent stalled on it per issued instruction


@dataclass(frozen=True)
class NcuRule:
    """One of ncu's own OPT/WRN rules for the kernel, with its estimated speedup."""

    name: str
    description: str
    speedup_pct: float | None


@dataclass(frozen=True)
class KernelProfile:
    name: str  # as ncu names it
    launches: int  # profiled launches (the metrics are their mean)
    block: str
    grid: str
    duration_us: float | None  # mean profiled duration
    compute_pct: float | None  # Compute (SM) Throughput, % of peak
    memory_pct: float | None  # Memory Throughput, % of peak (the busiest of DRAM, L2, L1)
    dram_pct: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    occupancy_limiters: list[str]  # what caps blocks per SM at the theoretical occupancy
    registers: float | None
    waves: float | None  # waves of blocks per SM: a fractional last wave leaves SMs idle
    stalls: list[Stall]  # the largest first
    intensity_flop_per_byte: float | None  # FLOPs (SASS counters) over DRAM bytes, where both were recorded
    achieved_tflops: float | None
    bound: str  # memory, compute, latency, unknown
    why: str
    next_step: str
    rules: list[NcuRule]  # ncu's own, the largest estimated speedup first
    # the trace's kernels of the same name (on the rank the verdict is about), None where none matched
    trace_name: str | None
    trace_count: int | None
    trace_total_us: float | None
    trace_share_of_busy_pct: float | None


@dataclass(frozen=True)
class KernelProfilesResult:
    """An ncu export read next to a trace (or alone)."""

    path: str
    rank: int | None  # the rank the trace's kernels were matched on
    kernels: list[KernelProfile]  # by time in the trace, then by profiled duration
    unmatched: list[str]  # profiled kernels the trace has no kernel of the same name for


def _mean(launches: list[KernelLaunch], metric: str) -> float | None:
    values = [launch.metrics[metric] for launch in launches if metric in launch.metrics]
    return round(sum(values) / len(values), 3) if values else None


def profile(name: str, launches: list[KernelLaunch]) -> KernelProfile:
    """One kernel's launches read together, classified, with its next step (not yet joined)."""
    compute, memory = _mean(launches, "compute_pct"), _mean(launches, "memory_pct")
    achieved, theoretical = _mean(launches, "achieved_occupancy_pct"), _mean(launches, "theoretical_occupancy_pct")
    limits = {label: _mean(launches, key) for key, label in _LIMITERS.items()}
    present = {k: v for k, v in limits.items() if v is not None}
    limiters = sorted(k for k, v in present.items() if v == min(present.values())) if present else []
    stalls = _stalls(launches)
    waves = _mean(launches, "waves")
    duration_ns = _mean(launches, "duration")
    flops = [launch.flops for launch in launches if launch.flops is not None]
    dram = _mean(launches, "dram_bytes")
    mean_flops = sum(flops) / len(flops) if flops else None
    intensity = round(mean_flops / dram, 3) if mean_flops is not None and dram else None
    tflops = round(mean_flops / duration_ns / 1000.0, 3) if mean_flops is not None and duration_ns else None
    bound, why, step = _classify(compute, memory, achieved, theoretical, limiters, waves, stalls)
    rules = sorted({(r[0], r[1]): NcuRule(*r) for launch in launches for r in launch.rules}.values(),
                   key=lambda r: -(r.speedup_pct or 0.0))
    first = launches[0]
    return KernelProfile(
        name=name, launches=len(launches), block=first.block, grid=first.grid,
        duration_us=round(duration_ns / 1000.0, 3) if duration_ns is not None else None,
        compute_pct=compute, memory_pct=memory, dram_pct=_mean(launches, "dram_pct"),
        achieved_occupancy_pct=achieved, theoretical_occupancy_pct=theoretical, occupancy_limiters=limiters,
        registers=_mean(launches, "registers"), waves=waves, stalls=stalls, intensity_flop_per_byte=intensity,
        achieved_tflops=tflops, bound=bound, why=why, next_step=step, rules=rules[:5],
        trace_name=None, trace_count=None, trace_total_us=None, trace_share_of_busy_pct=None)


def _stalls(launches: list[KernelLaunch]) -> list[Stall]:
    reasons = {reason for launch in launches for reason in launch.stalls}
    means = {r: sum(launch.stalls.get(r, 0.0) for launch in launches) / len(launches) for r in reasons}
    return [Stall(r, round(v, 3)) for r, v in sorted(means.items(), key=lambda kv: -kv[1])[:5] if v > 0]


def _classify(compute: float | None, memory: float | None, achieved: float | None, theoretical: float | None,
              limiters: list[str], waves: float | None, stalls: list[Stall]) -> tuple[str, str, str]:
    """(bound, why, next step)."""
    if compute is None or memory is None:
        return ("unknown", "the export has no Speed Of Light throughputs",
                "profile with ncu's default sections (--section SpeedOfLight --section Occupancy) or --set full")
    if max(compute, memory) >= SOL_PCT:
        if memory >= compute:
            return ("memory", f"memory throughput is {percent(memory)} of peak (compute {percent(compute)})",
                    "move fewer bytes: fuse it with its neighbours (torch.compile), keep its tensors in lower "
                    "precision (bf16, fp8), or make accesses coalesced so each byte is read once")
        return ("compute", f"compute throughput is {percent(compute)} of peak (memory {percent(memory)})",
                "do the math faster: run it on tensor cores (bf16/fp16 autocast, TF32 for float32 matmuls), in "
                "lower precision (fp8), or do less of it")
    why = [f"compute {percent(compute)} and memory {percent(memory)} of peak, both under {SOL_PCT:g}%: "
           "neither unit is kept busy"]
    steps = []
    if achieved is not None:
        limited = f", limited by {' and '.join(limiters)}" if limiters else ""
        why.append(f"achieved occupancy {percent(achieved)}"
                   + (f" of a theoretical {percent(theoretical)}{limited}" if theoretical is not None else ""))
        if theoretical is not None and theoretical < 50.0 and limiters:
            steps.append(f"raise occupancy: use fewer {' and '.join(limiters)} per block (__launch_bounds__, "
                         "smaller tiles)")
    if waves is not None and waves < 4 and abs(waves - round(waves)) > 0.05:
        why.append(f"{waves:g} waves of blocks: the last wave leaves SMs idle")
        steps.append("choose a tile size or split-K that fills whole waves")
    if stalls:
        top = stalls[0]
        why.append(f"warps stall most on {top.reason} ({top.cycles_per_instruction:g} cycles per instruction)")
        steps.append(STALL_ADVICE.get(top.reason, f"reduce {top.reason} stalls"))
    if not steps:
        steps.append("more independent work per thread (ILP) and per launch: larger problems, or fuse small kernels")
    return "latency", "; ".join(why), "; ".join(steps)


def profiles(launches: list[KernelLaunch]) -> list[KernelProfile]:
    """Every profiled kernel, its launches read together (longest profiled duration first)."""
    by_name: dict[str, list[KernelLaunch]] = {}
    for launch in launches:
        by_name.setdefault(launch.name, []).append(launch)
    found = [profile(name, group) for name, group in by_name.items()]
    return sorted(found, key=lambda k: -(k.duration_us or 0.0))


def same_kernel(ncu_name: str, trace_name: str) -> bool:
    """ncu prints a kernel's function name (or its demangled signature); a trace, its demangled
    signature: the same kernel when equal, or when their bare names (no return type, namespace,
    template arguments or parameters) are."""
    return ncu_name == trace_name or short_name(ncu_name) == short_name(trace_name)


def joined(path: str, found: list[KernelProfile], rank: int | None = None,
           kernels_named: Callable[[str], list[HotKernel]] | None = None) -> KernelProfilesResult:
    """The profiles with the time their kernels take in a rank's trace (`kernels_named(bare name)`:
    that rank's kernels whose name contains it), most time first; profiles without a kernel of
    their name there are listed as unmatched. Without a trace, the profiles alone."""
    if kernels_named is None:
        return KernelProfilesResult(path, None, [_unjoined(k) for k in found], [])
    out, unmatched = [], []
    for k in map(_unjoined, found):
        rows = [h for h in kernels_named(bare(k.name)) if same_kernel(k.name, h.name)]
        if not rows:
            unmatched.append(k.name)
            out.append(k)
            continue
        main = max(rows, key=lambda h: h.total_us)
        out.append(replace(k, trace_name=main.name, trace_count=sum(h.count for h in rows),
                           trace_total_us=round(sum(h.total_us for h in rows), 3),
                           trace_share_of_busy_pct=round(sum(h.share_of_busy_pct for h in rows), 2)))
    out.sort(key=lambda k: (-(k.trace_total_us or 0.0), -(k.duration_us or 0.0)))
    return KernelProfilesResult(path, rank, out, unmatched)


def _unjoined(k: KernelProfile) -> KernelProfile:
    return replace(k, trace_name=None, trace_count=None, trace_total_us=None, trace_share_of_busy_pct=None)


def bare(name: str) -> str:
    """The bare name to search the trace for (detect_hot_kernels' name filter is a substring)."""
    return re.sub(r"\s+", " ", short_name(name))


def roofline(intensity: float | None, device_name: str, dtype: str = "bf16") -> str | None:
    """'below the ridge point (295 FLOP/byte) of an H100 SXM: memory-bound on the roofline' or None."""
    peak = peak_for(device_name)
    if intensity is None or peak is None or peak.hbm_gbps is None or dtype not in peak.tflops:
        return None
    ridge = peak.tflops[dtype] * 1e12 / (peak.hbm_gbps * 1e9)
    side = "below" if intensity < ridge else "above"
    return (f"{intensity:g} FLOP/byte is {side} the {dtype} ridge point ({ridge:.0f} FLOP/byte) of {peak.gpu}: "
            f"{'memory' if side == 'below' else 'compute'}-bound on the roofline")


def profile_sentence(k: KernelProfile) -> str:
    """One kernel's reading, with where it sits in the trace when it matched."""
    where = (f" In the trace it ran {counted(k.trace_count or 0, 'time')} for {duration(k.trace_total_us)} "
             f"({percent(k.trace_share_of_busy_pct)} of busy time)." if k.trace_total_us is not None else "")
    return f"`{short_name(k.name)}` is {k.bound}-bound: {k.why}.{where} Next: {k.next_step}."
