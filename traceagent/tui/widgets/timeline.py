"""A strip of device busy/idle over the trace: one character per slice of time, idle slices
coloured by the cause of their gap, step boundaries marked underneath."""

from __future__ import annotations

import numpy as np
import pandas as pd
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ...detect import intervals as iv
from ...detect.view import device_views
from ...detect.vocabulary import GAP_CAUSES

_SHADES = " ▁▂▃▄▅▆▇█"


class Timeline(Widget):
    """Set `data` to (busy intervals, classified gaps, step starts, span) for one device."""

    DEFAULT_CSS = """
    Timeline { height: 4; padding: 0 1; }
    """
    # always_update: the tuple holds frames, which cannot be compared for equality
    data: reactive[tuple | None] = reactive(None, always_update=True)

    def render(self) -> Text:
        if self.data is None:
            return Text("timeline: loading…", style="dim")
        busy, gaps, step_starts, (lo, hi) = self.data
        width = max(self.size.width - 2, 10)
        edges, share = iv.binned_share(busy, lo, hi, width)
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
        shown = [w for w in GAP_CAUSES.values() if w.name != "launch_latency"]  # never drawn: see timeline_data
        legend = Text("  ".join(f"■ {w.name}" for w in shown), style="dim")
        for word in shown:
            legend.highlight_words([f"■ {word.name}"], style=word.style)
        return Text("\n").join([line, Text("".join(marks), style="dim"), legend])


def timeline_data(rank, device: int | None = None) -> tuple | None:
    """What the strip draws for one GPU of a rank (its first by default), from its analysis (the
    gaps as classified there): busy intervals, gaps with a host-side cause, step starts, span.
    None without devices."""
    views = [v for v in device_views(rank.trace) if device is None or v.device == device]
    if not views:
        return None
    view = views[0]
    gaps: pd.DataFrame = rank.device_gaps(view.device)
    steps = rank.trace.steps.dropna(subset=["gpu_start"])
    return view.busy, gaps[gaps["cause"] != "launch_latency"], steps["gpu_start"].astype("int64").tolist(), view.span
