"""A strip of device busy/idle over the trace: one character per slice of time, idle slices
coloured by the cause of their gap, step boundaries marked underneath."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ...detect.analysis import Analysis, RankAnalysis
from ...detect.core import intervals as iv
from ...detect.core.vocabulary import GAP_CAUSES
from ...detect.detectors.timeline import DeviceTimeline
from ..scope import default_scope

_SHADES = " ▁▂▃▄▅▆▇█"


class Timeline(Widget):
    """One GPU of the loaded analysis (`show`): the rank and GPU in `scope` (bound to the app's), or
    the first GPU of the verdict's rank."""

    DEFAULT_CSS = """
    Timeline { height: 4; padding: 0 1; }
    """
    # always_update: the pictures hold arrays, which cannot be compared for equality
    data: reactive[tuple[DeviceTimeline, list[int]] | None] = reactive(None, always_update=True)
    scope: reactive[tuple[int, int] | None] = reactive(None, init=False)
    analysis: Analysis | None = None

    def show(self, analysis: Analysis) -> None:
        """Draw from this analysis (its pictures: no events are read)."""
        self.analysis = analysis
        self.watch_scope(self.scope)

    def watch_scope(self, scope: tuple[int, int] | None) -> None:
        if self.analysis is not None:
            shown = scope or default_scope(self.analysis)
            self.data = timeline_data(self.analysis.rank(shown[0]), shown[1]) if shown is not None else None

    def render(self) -> Text:
        if self.data is None:
            return Text("timeline: loading…", style="dim")
        device, step_starts = self.data
        lo, hi = device.span
        gaps = device.gaps[device.gaps["cause"] != "launch_latency"]  # what a host-side fix cannot remove
        width = max(self.size.width - 2, 10)
        edges, share = iv.even_edges(lo, hi, width), device.busy.share(lo, hi, width)
        # the cause of the longest gap overlapping each slice
        slice_cause = np.full(width, None, dtype=object)
        if len(gaps):
            longest = gaps.sort_values("dur")
            first = np.searchsorted(edges, longest["start"].to_numpy(), side="right") - 1
            last = np.searchsorted(edges, longest["end"].to_numpy(), side="left") - 1
            for a, b, cause in zip(first, last, longest["cause"]):  # bounded by the width, longest last
                slice_cause[max(a, 0):min(b, width - 1) + 1] = cause
        line = Text()
        for s, cause in zip(share, slice_cause):
            if s >= 0.5 or cause is None:
                line.append(_SHADES[round(s * 8)], style="green")
            else:
                line.append("▁", style=f"bold {GAP_CAUSES[cause].style if cause in GAP_CAUSES else 'white'}")
        marks = [" "] * width
        for start in step_starts:
            x = int((start - lo) / max(hi - lo, 1) * width)
            if 0 <= x < width:
                marks[x] = "┃"
        shown = [w for w in GAP_CAUSES.values() if w.name != "launch_latency"]  # never drawn (see render)
        legend = Text("  ".join(f"■ {w.name}" for w in shown), style="dim")
        for word in shown:
            legend.highlight_words([f"■ {word.name}"], style=word.style)
        return Text("\n").join([line, Text("".join(marks), style="dim"), legend])


def timeline_data(rank: RankAnalysis, device: int | None = None) -> tuple[DeviceTimeline, list[int]] | None:
    """What the strip draws for one GPU of a rank (its first by default), from its analysis: the
    GPU's pictures and the steps' starts. None without devices."""
    drawn = rank.pictures.device(device)
    if drawn is None:
        return None
    return drawn, [start for _, start in rank.pictures.step_starts]
