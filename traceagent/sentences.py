"""What the results say, in sentences: one place, so the terminal, the report, the chat app and
the offline analyst word each finding the same way (numbers written by `format`)."""

from __future__ import annotations

from collections.abc import Callable

from .detect.analysis import RankAnalysis
from .detect.core.vocabulary import GAP_CAUSES, label
from .detect.detectors.idle import Gap
from .detect.detectors.steps import StepsResult
from .detect.detectors.stragglers import RankComparison
from .detect.registry import DETECTORS
from .format import duration, percent, rate, scope, shorten


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


def slowest_step_sentence(steps: StepsResult) -> str:
    """What the slowest step spent more time on than the median step: the causes of idle that grew,
    where they account for at least half of its extra time; else that they do not (its extra time
    is not GPU idle it added), so a few microseconds of growth are never given as the reason."""
    delta = steps.slowest_vs_median
    grew = {k.removeprefix("idle_").removesuffix("_us"): v for k, v in delta.items()
            if k.startswith("idle_") and k != "idle_us"}
    said = ", ".join(f"{label(GAP_CAUSES, cause)} idle +{duration(v)}" for cause, v in grew.items())
    extra = delta.get("host_us", 0.0)
    if extra <= 0 and not grew:
        return ""
    if sum(grew.values()) >= extra / 2:
        return f"The slowest step spent more than the median step on: {said}."
    device = delta.get("device_us", 0.0)
    return (f"The slowest step took {duration(extra)} more than the median step; "
            + (f"the idle that grew covers little of it ({said})" if said else "no cause of idle grew")
            + (f", and its device work spanned {duration(device)} more." if device > 0 else
               ", nor did its device work span longer.")
            + " The rest is time on the host that did not leave the GPU idle longer.")


def straggler_sentence(comparison: RankComparison) -> str:
    """The cross-rank comparison in one sentence (two where collectives record their sizes)."""
    c = comparison
    if c.straggler is None:
        text = (f"No rank causes most of the waiting in the {c.matched} matched collectives (at most "
                f"{c.caused_waiting_pct:.0f}% by one rank): no straggler.")
    else:
        cause = c.straggler_cause
        caused = next((r.caused_waiting_us for r in c.ranks if r.rank == c.straggler), 0.0)
        text = (f"Rank {c.straggler} causes {c.caused_waiting_pct:.0f}% of the ranks' waiting in the {c.matched} "
                f"matched collectives, entering {c.straggler_last_pct:.0f}% of them last "
                f"({'busy computing' if cause == 'hot_kernel' else cause} before them); the other ranks wait "
                f"{duration(c.others_waiting_us)} in them in all ({duration(caused)} of it for rank {c.straggler}), "
                f"{c.others_exposed_waiting_pct:.1f}% of their device time with no compute beside it.")
    if c.busbw_gbps is not None and c.busbw_without_waiting_gbps is not None:
        text += (f" Over the {c.payload_matched} matched collectives with recorded sizes, every rank's bus bandwidth "
                 f"is {rate(c.busbw_gbps)} over their kernel time and {rate(c.busbw_without_waiting_gbps)} "
                 "after the last rank entered: the difference is waiting, not the link.")
    return text


def device_lines(rank: RankAnalysis) -> list[str]:
    """One line per GPU of a rank, each over that GPU's own span: the same figures `analyze`
    prints in its per-GPU table."""
    return [f"{scope(rank.rank, device)}: span {duration(b.span_us)}, busy {percent(b.busy_pct)}, "
            f"idle {percent(b.idle_pct)}" for device, b in rank.breakdown.devices.items()]


def further_findings(rank: RankAnalysis) -> list[tuple[str, str]]:
    """(title, sentence) for what a rank's trace also says beyond the limiters: each detector's
    sentence (throughput and MFU, memory, CUDA graphs, the critical path, annotation ranges, then
    the registered detectors'), in the registry's order; only those it has."""
    found = [(d.title, d.say(rank.results.get(d.name), rank.params.params_for(d))) for d in DETECTORS]
    return [(title, text) for title, text in found if text]
