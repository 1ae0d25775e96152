"""Temporal breakdown: span, busy, idle, and busy by class of work, per device and per step."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..core import intervals as iv
from ..core.view import DeviceView, device_views, pct, us, wall_span_ns
from ..core.vocabulary import WORK
from .base import Detector, Key
from .idle import idle_by, trace_gaps


@dataclass(frozen=True)
class Breakdown:
    """Where a device's time went over a window.

    compute/comm/memcpy/memset are each the union of that class of work over all streams; two
    classes running at once on different streams both count, so they can add up to more than
    busy. exposed_comm is communication that no compute kernel overlaps.

    For one device (or one step on it) span_us is its wall span and device_time_us equals it. For
    several devices together span_us is the wall span from the first to the last activity on any
    of them, device_time_us the sum of their spans, and every other time is a sum over devices;
    idle_pct is idle over device_time_us either way.
    """

    span_us: float
    device_time_us: float
    busy_us: float
    busy_pct: float  # of device time
    idle_us: float
    idle_pct: float  # of device time
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    memcpy_us: float
    memset_us: float

    @staticmethod
    def summed(parts: list[Breakdown], span_us: float) -> Breakdown:
        """Several devices together over their wall span: device time adds up."""
        sums = {k: round(sum(getattr(p, k) for p in parts), 3) for k in Breakdown.__dataclass_fields__}
        sums["span_us"] = span_us
        sums["idle_pct"] = pct(sums["idle_us"], sums["device_time_us"])
        sums["busy_pct"] = pct(sums["busy_us"], sums["device_time_us"])
        return Breakdown(**sums)


def window_breakdowns(view: DeviceView, lo: np.ndarray, hi: np.ndarray,
                      owned_idle: np.ndarray | None = None) -> list[Breakdown]:
    """Breakdowns of one device over many windows [lo, hi) at once: one prefix-sum query per
    class of work, so a thousand steps cost about what one does. With `owned_idle` (ns per
    window: the idle the gap table gives each step, idle.idle_by), idle is that and the span is
    busy plus it, so a step's idle is the same number here as everywhere else."""
    part = {name: iv.covered(getattr(view, name), lo, hi)
            for name in ("busy", "compute", "comm", "exposed_comm", "memcpy", "memset")}
    if owned_idle is None:
        span = np.maximum(hi - lo, 0)
        idle = span - part["busy"]
    else:
        idle = owned_idle.astype(np.int64)
        span = part["busy"] + idle
    return [Breakdown(
        span_us=us(span[i]), device_time_us=us(span[i]), busy_us=us(part["busy"][i]),
        busy_pct=pct(part["busy"][i], span[i]), idle_us=us(idle[i]),
        idle_pct=pct(idle[i], span[i]),
        compute_us=us(part["compute"][i]), comm_us=us(part["comm"][i]), exposed_comm_us=us(part["exposed_comm"][i]),
        memcpy_us=us(part["memcpy"][i]), memset_us=us(part["memset"][i]),
    ) for i in range(len(span))]


def window_breakdown(view: DeviceView, lo: int | None = None, hi: int | None = None) -> Breakdown:
    """Breakdown of one device between lo and hi (default: its own span)."""
    lo = view.span[0] if lo is None else lo
    hi = view.span[1] if hi is None else hi
    return window_breakdowns(view, np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))[0]


@dataclass(frozen=True)
class StepBreakdown:
    step: int
    device: int
    breakdown: Breakdown


@dataclass(frozen=True)
class BreakdownResult(Breakdown):
    """The rank's breakdown: its own fields are all its devices together (see Breakdown); then each
    device, and each step on each device.

    exclusive_us splits busy device time (summed over devices) so the parts add up: compute, then
    communication, copies and memsets that nothing before them covers. With the idle time it
    adds up to the summed device spans; the report's breakdown chart draws it.
    """

    devices: dict[int, Breakdown]
    steps: list[StepBreakdown]
    exclusive_us: dict[str, float]

    @property
    def total(self) -> Breakdown:
        """All the rank's devices together, as one Breakdown."""
        return Breakdown(**{f.name: getattr(self, f.name) for f in fields(Breakdown)})


def exclusive_work(view: DeviceView) -> dict[str, int]:
    """One device's busy time split into parts that add up (ns), in the order of vocabulary.WORK:
    each class counts only where no earlier class ran."""
    covered = view.compute
    split = {"compute": iv.length(view.compute)}
    for name, part in (("communication", view.comm), ("copies", view.memcpy), ("memset", view.memset)):
        if not len(part[0]):  # nothing of the kind: no sweep over every busy interval to say so
            split[name] = 0
            continue
        split[name] = iv.length(iv.subtract(part, covered))
        covered = iv.union(np.r_[covered[0], part[0]], np.r_[covered[1], part[1]])
    return split


def detect_breakdown(trace: Trace, gaps: pd.DataFrame | None = None) -> BreakdownResult:
    """Span, busy, idle and the class split for every device, and per step: its work over its
    device range, and as idle the gaps it owns (the rank's gap table, `gaps`: idle.idle_by), so a
    step's span on a device is its busy time plus its idle."""
    views = device_views(trace)
    per_device = {v.device: window_breakdown(v) for v in views}
    gaps = trace_gaps(trace) if gaps is None else gaps
    owned = idle_by(gaps[gaps["step_row"] >= 0], ["step_row", "device"])
    steps = []
    rows = np.flatnonzero(trace.steps["gpu_start"].notna().to_numpy() & trace.steps["gpu_end"].notna().to_numpy())
    ranged = trace.steps.iloc[rows]
    lo, hi = ranged["gpu_start"].to_numpy(np.int64), ranged["gpu_end"].to_numpy(np.int64)
    for view in views:
        idle = np.array([owned.get((row, view.device), 0) for row in rows], dtype=np.int64)
        for step, b in zip(ranged["step"], window_breakdowns(view, lo, hi, idle)):
            steps.append(StepBreakdown(int(step), view.device, b))
    total = Breakdown.summed(list(per_device.values()), us(wall_span_ns(views))) if per_device else Breakdown(*([0.0] * 11))
    exclusive = {name: 0 for name in WORK}
    for view in views:
        for name, ns in exclusive_work(view).items():
            exclusive[name] += ns
    return BreakdownResult(**asdict(total), devices=per_device, steps=steps,
                           exclusive_us={name: us(ns) for name, ns in exclusive.items()})


DETECTOR = Detector("breakdown", "Breakdown", "Each device's span, busy time by kind of work, and idle, with its steps.",
                    None, BreakdownResult, lambda i, p: detect_breakdown(i.trace, i["gaps"]), reads=("gaps",),
                    keys=(Key("breakdown", BreakdownResult),), place=10, tool=False)
