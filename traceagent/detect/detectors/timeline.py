"""What the timeline pictures draw, computed with the analysis so that the HTML report and the
chat app's strip never read events: each GPU's busy time as a coverage curve, its busiest
streams binned, its largest gaps with their cause, step starts and memory over time.

All bounded: a few thousand numbers per GPU whatever the trace's size, so a rank analysed on a
Dask worker brings its pictures back with its results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..core import intervals as iv
from ..core.view import device_views
from .base import Detector

FINE_BINS = 8192  # a GPU's busy curve over its own span: the chat app's strip re-bins it to its width
STREAM_BINS = 480  # each stream's busy share over the rank's span, as the HTML report draws it
MAX_DEVICES = 8
MAX_STREAMS = 12  # per GPU, the busiest
MAX_GAPS = 4000  # per GPU, the longest
MEMORY_POINTS = 600  # per GPU, about


@dataclass(frozen=True, eq=False)
class Coverage:
    """How much of [edges[0], t] work covered, at each edge: any binning of the span from it."""

    edges: np.ndarray  # ns on the trace clock
    covered: np.ndarray  # ns covered up to each edge

    def share(self, lo: int, hi: int, bins: int) -> np.ndarray:
        """The share of each of `bins` equal bins of [lo, hi] that was covered (exact at the
        stored edges, linear between them)."""
        edges = iv.even_edges(lo, hi, bins)
        origin = self.edges[0]  # interpolated from it: epoch ns as floats are off by up to 128 ns
        covered = np.interp(edges - origin, self.edges - origin, self.covered)
        return np.diff(covered) / np.maximum(np.diff(edges), 1)


def coverage(intervals: iv.Intervals, lo: int, hi: int, bins: int) -> Coverage:
    edges = iv.even_edges(lo, hi, bins)
    covered = np.r_[0, np.cumsum(iv.covered(intervals, edges[:-1], edges[1:]))]
    return Coverage(edges, covered)


@dataclass(frozen=True, eq=False)
class DeviceTimeline:
    device: int
    span: tuple[int, int]  # its first to last work, ns
    busy: Coverage  # every stream, over its own span in FINE_BINS
    streams: dict[int, np.ndarray]  # its busiest streams, busiest first: share of each STREAM_BINS bin of the rank span
    gaps: pd.DataFrame  # start, end, dur, cause of its longest classified gaps, in time order


@dataclass(frozen=True, eq=False)
class MemoryLine:
    """One GPU's allocated bytes over time (the allocator's totals, or bytes from the trace's
    start without them), thinned to about MEMORY_POINTS points."""

    device: int
    times: np.ndarray
    level: np.ndarray
    peak: float  # of the whole series, not only of the points kept


@dataclass(frozen=True, eq=False)
class TimelineResult:
    span: tuple[int, int] | None  # the rank's first to last device work (None: no device work)
    devices: list[DeviceTimeline]
    step_starts: list[tuple[int, int]]  # (step, its first device work), ns
    memory: list[MemoryLine]
    memory_span: tuple[int, int] | None  # the first and last memory event, ns

    def device(self, device: int | None) -> DeviceTimeline | None:
        """One GPU's timeline (the first GPU's when none is named), None when it has no work."""
        return next((d for d in self.devices if device is None or d.device == device), None)


def detect_timeline(trace: Trace, gaps: pd.DataFrame) -> TimelineResult:
    """The pictures of one rank, from its events and its classified gaps (idle.trace_gaps)."""
    views = device_views(trace)[:MAX_DEVICES]
    span = (min(v.span[0] for v in views), max(v.span[1] for v in views)) if views else None
    lo, hi = span or (0, 0)  # only read inside the loop over views, where there is a span
    devices = []
    for view in views:
        streams = sorted(view.work.groupby("stream"), key=lambda kv: -(kv[1]["end"] - kv[1]["start"]).sum())
        binned = {}
        for stream, rows in streams[:MAX_STREAMS]:
            union = iv.union(rows["start"].to_numpy(), rows["end"].to_numpy())
            binned[int(stream)] = iv.binned_share(union, lo, hi, STREAM_BINS)[1]
        mine = gaps[gaps["device"] == view.device]
        longest = mine.nlargest(MAX_GAPS, "dur").sort_index()[["start", "end", "dur", "cause"]]
        devices.append(DeviceTimeline(view.device, view.span, coverage(view.busy, *view.span, FINE_BINS), binned,
                                      longest.reset_index(drop=True)))
    steps = trace.steps.dropna(subset=["gpu_start"])
    mem = trace.memory[trace.memory["device"] >= 0]
    return TimelineResult(span, devices, [(int(s), int(t)) for s, t in zip(steps["step"], steps["gpu_start"])],
                          _memory_lines(mem), (int(mem["time"].min()), int(mem["time"].max())) if len(mem) else None)


def _memory_lines(mem: pd.DataFrame) -> list[MemoryLine]:
    if len(mem) < 2:
        return []
    lines = []
    for device, group in mem.groupby("device"):
        totals = group["allocated"].to_numpy()
        level = totals if (totals >= 0).all() else group["bytes"].cumsum().to_numpy()
        step = max(1, len(group) // MEMORY_POINTS)
        lines.append(MemoryLine(int(device), group["time"].to_numpy()[::step], level[::step],
                                max(float(level.max()), 1.0)))
    return lines


#: what the timeline charts draw (not a key of analyze --json): presentation never reads events
DETECTOR = Detector("timeline", "Timeline", "Each device's busy and idle per step, for the charts.", None, TimelineResult,
                    lambda i, p: detect_timeline(i.trace, i["gaps"]), reads=("gaps",), keys=(), place=91, tool=False)
