"""What the results say, in sentences: one place, so the terminal, the report, the chat app and
the offline analyst word each finding the same way (numbers written by `format`)."""

from __future__ import annotations

from collections.abc import Callable

from .detect.analysis import RankAnalysis
from .detect.detectors.annotations import AnnotationsResult
from .detect.detectors.flops import FlopsResult
from .detect.detectors.graphs import GraphsResult
from .detect.detectors.idle import Gap
from .detect.detectors.memory import DeviceMemory, MemoryResult
from .detect.detectors.steps import StepsResult
from .detect.detectors.stragglers import RankComparison
from .detect.registry import DETECTORS
from .detect.verdict.critical_path import critical_path_sentence
from .format import duration, percent, scope, shorten, size


def gap_evidence(gap: Gap, name_width: int = 50, wrap: Callable[[str], str] = str) -> str:
    """What the host was doing in an idle gap, in words: `cudaStreamSynchronize under aten::item at
    train.py(42)` for a sync, else what the launching thread was in, innermost first, and the
    user's line when it is not the first of those (each name passed through `wrap`, e.g. text.code)."""
    ev = gap.evidence
    if gap.cause == "sync":
        call, op, line = ev.get("sync_call"), ev.get("op"), ev.get("python")
        parts = [wrap(call) if call else None, f"under {wrap(op)}" if op else None, f"at {wrap(line)}" if line else None]
        return " ".join(p for p in parts if p)
    host = ev.get("host", [])
    names = ", ".join(wrap(shorten(h["name"], name_width)) for h in host)
    line = ev.get("python")
    if line and not any(h["name"] == line for h in host[:1]):
        names += f" at {wrap(shorten(line, name_width))}"
    return names or "-"


def gpu_behind(steps: StepsResult) -> str:
    """Where the GPU runs behind the host, the step time the loop really takes (what savings and
    diff use), said after the host's step figures; else nothing."""
    if steps.step_time_us == steps.mean_us:
        return ""
    return (f" The GPU runs behind the host: counted to the end of their GPU work, the steps take "
            f"{duration(steps.step_time_us)} each (the step time savings and diff use).")


def straggler_sentence(comparison: RankComparison) -> str:
    """The cross-rank comparison in one sentence (two where collectives record their sizes)."""
    c = comparison
    if c.straggler is None:
        text = (f"No rank causes most of the waiting in the {c.matched} matched collectives (at most "
                f"{c.caused_waiting_pct:.0f}% by one rank): no straggler.")
    else:
        cause = c.straggler_cause
        text = (f"Rank {c.straggler} causes {c.caused_waiting_pct:.0f}% of the ranks' waiting in the {c.matched} "
                f"matched collectives, entering {c.straggler_last_pct:.0f}% of them last "
                f"({'busy computing' if cause == 'hot_kernel' else cause} before them); the other ranks wait "
                f"{duration(c.others_waiting_us)} for it in all, {c.others_exposed_waiting_pct:.1f}% of their device "
                "time with no compute beside it.")
    if c.busbw_gbps is not None and c.busbw_without_waiting_gbps is not None:
        text += (f" Over the {c.payload_matched} matched collectives with recorded sizes, every rank's bus bandwidth "
                 f"is {c.busbw_gbps:.1f} GB/s over their kernel time and {c.busbw_without_waiting_gbps:.1f} GB/s "
                 "after the last rank entered: the difference is waiting, not the link.")
    return text


def device_lines(rank: RankAnalysis) -> list[str]:
    """One line per GPU of a rank, each over that GPU's own span: the same figures `analyze`
    prints in its per-GPU table."""
    return [f"{scope(rank.rank, device)}: span {duration(b.span_us)}, busy {percent(b.busy_pct)}, "
            f"idle {percent(b.idle_pct)}" for device, b in rank.breakdown.devices.items()]


def flops_sentence(flops: FlopsResult | None) -> str | None:
    """What the recorded shapes say about throughput, with the GPU, dtype and peak MFU assumed;
    None when the trace has no shapes."""
    if not flops or not flops.shaped_ops:
        return None
    if not flops.counted_ops:
        return f"{flops.shaped_ops} ops have recorded shapes, but none could be counted: {flops.note}."
    achieved = (f"{flops.achieved_tflops:.1f} TFLOP/s achieved" if flops.achieved_tflops is not None
                else "no throughput: their kernels did not run in the trace (a graph capture records launches only)")
    text = (f"Ops with recorded shapes ({flops.counted_ops} of {flops.shaped_ops} counted): "
            f"{flops.gflop:.1f} GFLOP in {duration(flops.gpu_us)} of their kernels, {achieved}")
    if flops.mfu_pct is not None:
        text += (f"; MFU {percent(flops.mfu_pct)} over the span ({flops.dtype} on {flops.peak_family}, "
                 f"peak {flops.peak_tflops:g} TFLOP/s per GPU: {flops.peak_source})")
    return text + "." + (f" Not counted: {flops.note}." if flops.note else "") + _roofline(flops)


def _roofline(flops: FlopsResult) -> str:
    """' Roofline (least bytes: inputs read once, outputs written once): aten::mm 662 FLOP/byte, …'"""
    placed = [o for o in flops.by_op if o.intensity_flop_per_byte is not None][:3]
    text = ""
    if placed:
        ridge = (f" against {flops.peak_family}'s {flops.dtype} ridge point of {flops.ridge_flop_per_byte:g} FLOP/byte "
                 f"({flops.peak_tflops:g} TFLOP/s over {flops.memory_gbps:g} GB/s)" if flops.ridge_flop_per_byte else "")
        text += (f" Roofline (bytes as the least traffic: inputs read once, outputs written once){ridge}: "
                 + "; ".join(f"{o.name} ({o.dtype}) {o.intensity_flop_per_byte:g} FLOP/byte"
                             + (f", {o.roofline}-bound" if o.roofline else "") for o in placed) + ".")
    moving = [t for t in flops.traffic if t.achieved_gbps][:3]
    if moving:
        text += (" Low-FLOP ops (memory-bound by nature): "
                 + "; ".join(f"{t.name} ({t.dtype}) moved at least {size(t.gbytes * 1e9)} in {duration(t.gpu_us)}, "
                             f"{t.achieved_gbps:g} GB/s"
                             + (f" ({percent(t.memory_peak_pct)} of the {flops.memory_gbps:g} GB/s peak)"
                                if t.memory_peak_pct is not None else "") for t in moving) + ".")
    return text


def memory_peak(device: DeviceMemory) -> str:
    """One GPU's peak memory: the allocator's totals, or growth from the trace's start without them."""
    if device.peak_allocated_bytes is None:
        return f"up to {size(device.growth_bytes)} above the start"
    if device.reconstructed:
        return (f"peak {size(device.peak_allocated_bytes)} allocated (reconstructed from the events' bytes: "
                "the trace has no allocator totals)")
    reserved = device.peak_reserved_bytes
    return (f"peak {size(device.peak_allocated_bytes)} allocated"
            + (f", {size(reserved)} reserved" if reserved is not None else ""))


def memory_sentence(memory: MemoryResult | None) -> str | None:
    """Peak memory per GPU, a leak, and synchronizing allocator calls; None without [memory] events."""
    if not memory or not memory.devices:
        return None
    parts = [f"GPU {d.device}: {memory_peak(d)}" + ("; grows in every step (a leak)" if d.leak else "")
             for d in memory.devices]
    text = "; ".join(parts) + "."
    if memory.allocator_calls:
        text += (f" {memory.allocator_calls} synchronizing allocator calls, {duration(memory.allocator_idle_us)} "
                 "of idle device time during them.")
    return text


def graphs_sentence(graphs: GraphsResult | None) -> str | None:
    """CUDA graph replays and what they saved; None when the trace has none."""
    if not graphs or not graphs.used:
        return None
    return (f"{graphs.launches} CUDA graph replays ran {graphs.kernels} kernels "
            f"({percent(graphs.share_of_kernel_time_pct)} of kernel time), saving {graphs.launch_calls_saved} "
            f"launch calls (about {duration(graphs.saved_us)} of host time).")


def annotations_sentence(annotations: AnnotationsResult | None, top: int = 3) -> str | None:
    """The annotated ranges (record_function / NVTX) that launched the most GPU time, and those the
    GPU sat idle under without work of their own."""
    waiting = [r for r in annotations.idle_ranges if not r.gpu_us][:top] if annotations else []
    if not annotations or not (annotations.ranges or annotations.idle_ranges):
        return None
    parts = []
    if annotations.ranges:
        parts.append("Annotated ranges by GPU time launched inside them: " + "; ".join(
            f"{shorten(r.name, 40)} {duration(r.gpu_us)} ({percent(r.share_of_busy_pct)} of busy)"
            for r in annotations.ranges[:top]) + ".")
    if waiting:
        parts.append("The GPU sat idle under ranges that launched nothing: " + "; ".join(
            f"{shorten(r.name, 40)} {duration(r.idle_us)} ({percent(r.share_of_idle_pct)} of idle)"
            for r in waiting) + ".")
    return " ".join(parts)


def further_findings(rank: RankAnalysis) -> list[tuple[str, str]]:
    """(title, sentence) for what a rank's trace also says beyond the limiters: throughput and
    MFU, CUDA graphs, memory, annotation ranges, then each registered detector's sentence; only
    those it has."""
    f = rank.findings
    found = [("Throughput", flops_sentence(f.flops)), ("CUDA graphs", graphs_sentence(f.graphs)),
             ("Memory", memory_sentence(f.memory)), ("Annotations", annotations_sentence(f.annotations)),
             ("Critical path", critical_path_sentence(f.critical_path) if f.critical_path else None)]
    found += [(d.title, d.say(rank.results.get(d.name), rank.params.params_for(d))) for d in DETECTORS]
    return [(title, text) for title, text in found if text]
