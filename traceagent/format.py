"""How numbers are written for people: one place, so the CLI, the report, the TUI and the
offline analyst all say the same number the same way."""

from __future__ import annotations

from collections.abc import Callable


def duration(us: float | None) -> str:
    """µs → '812.0 µs', '12.34 ms', '1.234 s'."""
    if us is None:
        return "-"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def size(nbytes: int | float) -> str:
    """Bytes in decimal units, as bandwidths are quoted (GB/s)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{int(nbytes)} B"


def shorten(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def gap_evidence(gap: dict, name_width: int = 50, wrap: Callable[[str], str] = str) -> str:
    """What the host was doing in an idle gap, in words: `cudaStreamSynchronize under aten::item at
    train.py(42)` for a sync, else what the launching thread was in, innermost first, and the
    user's line when it is not the first of those (each name passed through `wrap`, e.g. text.code)."""
    ev = gap["evidence"]
    if gap["cause"] == "sync":
        parts = [wrap(ev["sync_call"]) if ev.get("sync_call") else None, f"under {wrap(ev['op'])}" if ev.get("op") else None,
                 f"at {wrap(ev['python'])}" if ev.get("python") else None]
        return " ".join(p for p in parts if p)
    names = ", ".join(wrap(shorten(h["name"], name_width)) for h in ev.get("host", []))
    line = ev.get("python")
    if line and not any(h["name"] == line for h in ev.get("host", [])[:1]):
        names += f" at {wrap(shorten(line, name_width))}"
    return names or "-"


def of_span(devices: int) -> str:
    """What a rank's percentages are over, in words: its span with one device, device time (the
    devices' spans added up) with more."""
    return "of the span" if devices <= 1 else f"of device time ({devices} GPUs)"


def scope(rank: int | None, device: int | str | None = None) -> str:
    """'rank 7, GPU 1', 'rank 7', or 'GPU 1': who a number belongs to."""
    parts = ([f"rank {rank}"] if rank is not None else []) + ([f"GPU {device}"] if device is not None else [])
    return ", ".join(parts)


def straggler_sentence(comparison: dict) -> str:
    """The cross-rank comparison (RankComparison.to_dict()) in one sentence."""
    if comparison["straggler"] is None:
        return (f"No rank is consistently last into the {comparison['matched']} matched collectives (at most "
                f"{comparison['straggler_last_pct']:.0f}% by one rank): no straggler.")
    cause = comparison["straggler_cause"]
    return (f"Rank {comparison['straggler']} enters {comparison['straggler_last_pct']:.0f}% of the "
            f"{comparison['matched']} matched collectives last ({'busy computing' if cause == 'hot_kernel' else cause}"
            f" before them); the other ranks wait {duration(comparison['others_waiting_us'])} for it in all, "
            f"{comparison['others_exposed_waiting_pct']:.1f}% of their device time with no compute beside it.")


def device_lines(rank: dict) -> list[str]:
    """One line per GPU of a rank (a RankAnalysis.to_dict()), each over that GPU's own span: the
    same figures `analyze` prints in its per-GPU table."""
    return [f"{scope(rank['rank'], device)}: span {duration(b['span_us'])}, busy {percent(b['busy_pct'])}, "
            f"idle {percent(b['idle_pct'])}" for device, b in rank["breakdown"]["devices"].items()]


def flops_sentence(flops: dict | None) -> str | None:
    """What the recorded shapes say about throughput, with the GPU, dtype and peak MFU assumed;
    None when the trace has no shapes."""
    if not flops or not flops["shaped_ops"]:
        return None
    if not flops["counted_ops"]:
        return f"{flops['shaped_ops']} ops have recorded shapes, but none could be counted: {flops['note']}."
    text = (f"Ops with recorded shapes ({flops['counted_ops']} of {flops['shaped_ops']} counted): "
            f"{flops['gflop']:.1f} GFLOP in {duration(flops['gpu_us'])} of their kernels, "
            f"{flops['achieved_tflops']:.1f} TFLOP/s achieved")
    if flops["mfu_pct"] is not None:
        text += (f"; MFU {percent(flops['mfu_pct'])} over the span ({flops['dtype']} on {flops['peak_family']}, "
                 f"peak {flops['peak_tflops']:g} TFLOP/s per GPU: {flops['peak_source']})")
    return text + "." + (f" Not counted: {flops['note']}." if flops["note"] else "")


def memory_peak(device: dict) -> str:
    """One GPU's peak memory: the allocator's totals, or growth from the trace's start without them."""
    if device["peak_allocated_bytes"] is None:
        return f"up to {size(device['growth_bytes'])} above the start"
    return f"peak {size(device['peak_allocated_bytes'])} allocated, {size(device['peak_reserved_bytes'])} reserved"


def memory_sentence(memory: dict | None) -> str | None:
    """Peak memory per GPU, a leak, and synchronizing allocator calls; None without [memory] events."""
    if not memory or not memory["devices"]:
        return None
    parts = [f"GPU {d['device']}: {memory_peak(d)}" + ("; grows in every step (a leak)" if d["leak"] else "")
             for d in memory["devices"]]
    text = "; ".join(parts) + "."
    if memory["allocator_calls"]:
        text += (f" {memory['allocator_calls']} synchronizing allocator calls, {duration(memory['allocator_idle_us'])} "
                 "of idle device time during them.")
    return text


def graphs_sentence(graphs: dict | None) -> str | None:
    """CUDA graph replays and what they saved; None when the trace has none."""
    if not graphs or not graphs["used"]:
        return None
    return (f"{graphs['launches']} CUDA graph replays ran {graphs['kernels']} kernels "
            f"({percent(graphs['share_of_kernel_time_pct'])} of kernel time), saving {graphs['launch_calls_saved']} "
            f"launch calls (about {duration(graphs['saved_us'])} of host time).")


def annotations_sentence(annotations: dict | None, top: int = 3) -> str | None:
    """The annotated ranges (record_function / NVTX) that launched the most GPU time, and those the
    GPU sat idle under without work of their own."""
    if not annotations or not (annotations["ranges"] or annotations.get("idle_ranges")):
        return None
    parts = []
    if annotations["ranges"]:
        parts.append("Annotated ranges by GPU time launched inside them: " + "; ".join(
            f"{shorten(r['name'], 40)} {duration(r['gpu_us'])} ({percent(r['share_of_busy_pct'])} of busy)"
            for r in annotations["ranges"][:top]) + ".")
    waiting = [r for r in annotations.get("idle_ranges", []) if not r["gpu_us"]][:top]
    if waiting:
        parts.append("The GPU sat idle under ranges that launched nothing: " + "; ".join(
            f"{shorten(r['name'], 40)} {duration(r['idle_us'])} ({percent(r['share_of_idle_pct'])} of idle)"
            for r in waiting) + ".")
    return " ".join(parts)


def further_findings(rank: dict) -> list[tuple[str, str]]:
    """(title, sentence) for what a rank's trace also says beyond the limiters: throughput and
    MFU, CUDA graphs, memory, annotation ranges, then each registered detector's sentence; only
    those it has."""
    from .detect.registry import DETECTORS

    found = [("Throughput", flops_sentence(rank.get("flops"))), ("CUDA graphs", graphs_sentence(rank.get("graphs"))),
             ("Memory", memory_sentence(rank.get("memory"))),
             ("Annotations", annotations_sentence(rank.get("annotations")))]
    found += [(d.title, d.sentence(rank[d.name])) for d in DETECTORS if rank.get(d.name)]
    return [(title, text) for title, text in found if text]
