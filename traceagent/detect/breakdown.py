"""Temporal breakdown: span, busy, idle, and busy by class of work, per device and per step."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..trace.model import Trace
from . import intervals as iv
from .view import DeviceView, device_views, pct, us


@dataclass(frozen=True)
class Breakdown:
    """Where a device's time went over a window.

    compute/comm/memcpy/memset are each the union of that class of work over all streams; two
    classes running at once on different streams both count, so they can add up to more than
    busy. exposed_comm is communication that no compute kernel overlaps.
    """

    span_us: float
    busy_us: float
    idle_us: float
    idle_pct: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    memcpy_us: float
    memset_us: float

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def total(parts: list["Breakdown"]) -> "Breakdown":
        """Several devices together: device-time adds up."""
        sums = {k: round(sum(getattr(p, k) for p in parts), 3) for k in Breakdown.__dataclass_fields__}
        sums["idle_pct"] = pct(sums["idle_us"], sums["span_us"])
        return Breakdown(**sums)


def window_breakdown(view: DeviceView, lo: int | None = None, hi: int | None = None) -> Breakdown:
    """Breakdown of one device between lo and hi (default: its own span)."""
    lo = view.span[0] if lo is None else lo
    hi = view.span[1] if hi is None else hi

    def part(x: iv.Intervals) -> int:
        return iv.length(iv.clip(x, lo, hi))

    span = max(hi - lo, 0)
    busy = part(view.busy)
    exposed = iv.length(iv.clip(iv.subtract(view.comm, view.compute), lo, hi))
    return Breakdown(
        span_us=us(span), busy_us=us(busy), idle_us=us(span - busy), idle_pct=pct(span - busy, span),
        compute_us=us(part(view.compute)), comm_us=us(part(view.comm)), exposed_comm_us=us(exposed),
        memcpy_us=us(part(view.memcpy)), memset_us=us(part(view.memset)),
    )


@dataclass(frozen=True)
class StepBreakdown:
    step: int
    device: int
    breakdown: Breakdown

    def to_dict(self) -> dict:
        return {"step": self.step, "device": self.device, **self.breakdown.to_dict()}


@dataclass(frozen=True)
class BreakdownResult:
    """The trace's breakdown: all devices together, each device, and each step on each device."""

    total: Breakdown
    devices: dict[int, Breakdown]
    steps: list[StepBreakdown]

    def to_dict(self) -> dict:
        return {**self.total.to_dict(),
                "devices": {str(d): b.to_dict() for d, b in self.devices.items()},
                "steps": [s.to_dict() for s in self.steps]}


def detect_breakdown(trace: Trace) -> BreakdownResult:
    """Span, busy, idle and the class split for every device, and per step on its device range."""
    views = device_views(trace)
    per_device = {v.device: window_breakdown(v) for v in views}
    steps = []
    ranged = trace.steps.dropna(subset=["gpu_start", "gpu_end"])
    for view in views:
        for step, lo, hi in zip(ranged["step"], ranged["gpu_start"], ranged["gpu_end"]):  # one row per step
            steps.append(StepBreakdown(int(step), view.device, window_breakdown(view, int(lo), int(hi))))
    total = Breakdown.total(list(per_device.values())) if per_device else Breakdown(*([0.0] * 9))
    return BreakdownResult(total=total, devices=per_device, steps=steps)

