"""Per-device interval sets that every detector shares: busy, compute, communication, copies.

Built once per trace (memoized by identity) so the detectors, each a pure function of the
trace, do not sort the same millions of intervals again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.model import Trace, per_trace, rows_where
from . import intervals as iv


@dataclass(frozen=True, eq=False)
class DeviceView:
    """One device's work and its unions. Times are ns on the trace clock."""

    device: int
    work: pd.DataFrame  # device activity rows (sync records excluded), by start
    busy: iv.Intervals  # all work, every stream
    compute: iv.Intervals  # kernels that are not collectives
    comm: iv.Intervals  # collective kernels
    exposed_comm: iv.Intervals  # collectives while no compute kernel runs
    memcpy: iv.Intervals
    memset: iv.Intervals

    @property
    def span(self) -> tuple[int, int]:
        return int(self.busy[0][0]), int(self.busy[1][-1])

    @property
    def span_ns(self) -> int:
        return self.span[1] - self.span[0]


@per_trace
def device_views(trace: Trace) -> list[DeviceView]:
    """One view per device that has work, in device order."""
    gpu = trace.gpu
    work = (gpu["kind"] != "sync").to_numpy()
    device = gpu["device"].to_numpy()
    views = []
    for d in np.unique(device[work]):
        # one GPU with no sync records (the usual rank) is the table itself: no copy of its rows
        view = _view(int(d), rows_where(gpu, work & (device == d)))
        if len(view.busy[0]):  # a device with only zero-length records has no span
            views.append(view)
    return views


def _view(device: int, rows: pd.DataFrame) -> DeviceView:
    start, end = rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64)
    kind = rows["kind"].array
    comm = rows["is_comm"].to_numpy()
    busy = iv.union(start, end)

    def union_of(mask: np.ndarray) -> iv.Intervals:
        if mask.all():  # every op (a rank of kernels alone): the busy set itself, not a second copy
            return busy
        return iv.union(start[mask], end[mask]) if mask.any() else iv.EMPTY

    is_kernel = np.asarray(kind == "kernel")
    compute, collectives = union_of(is_kernel & ~comm), union_of(is_kernel & comm)
    return DeviceView(
        device=device,
        work=rows,
        busy=busy,
        compute=compute,
        comm=collectives,
        exposed_comm=iv.subtract(collectives, compute),
        memcpy=union_of(np.asarray(kind == "memcpy")),
        memset=union_of(np.asarray(kind == "memset")),
    )


def views_of(trace: Trace, device: int | None = None) -> list[DeviceView]:
    """Every device's view, or one device's (empty when it has no work)."""
    return [v for v in device_views(trace) if device is None or v.device == device]


def on_device(frame: pd.DataFrame, device: int | None) -> pd.DataFrame:
    """Rows of a device-activity frame on one device (all rows for None)."""
    return frame if device is None else frame[frame["device"] == device]


def wall_span_ns(views: list[DeviceView]) -> int:
    """A rank's span: first to last activity over its devices (0 without any). Sums of the
    devices' own spans are device time, never called span."""
    return max(v.span[1] for v in views) - min(v.span[0] for v in views) if views else 0


def device_time_ns(views: list[DeviceView]) -> int:
    """The devices' spans added up: the denominator of a rank's percentages."""
    return sum(v.span_ns for v in views)


def index_type(count: int) -> type[np.signedinteger]:
    """The narrowest exact type for positions into (or labels of) `count` rows: int32 below 2**31
    (a table of ten million rows holds half the bytes), else int64."""
    return np.int32 if count < 2**31 else np.int64


def us(ns: float | int | np.integer) -> float:
    """ns → µs, rounded to the nanosecond. Whole nanoseconds are divided as integers first: an
    epoch time (1.6e18 ns) is past a float's exact range, and float(ns) / 1000 would be off by 0.2 µs."""
    if isinstance(ns, (int, np.integer)):
        whole, rest = divmod(int(ns), 1000)
        return round(whole + rest / 1000.0, 3)
    return round(float(ns) / 1000.0, 3)


def rounded_rate(value: float) -> float:
    """A rate (GB/s, TFLOP/s) to 3 decimals, and below 1 to 4 significant digits: a 1-byte copy's
    0.0004 GB/s or a tiny matmul's 0.0088 TFLOP/s would round to 0, and rates are quoted down to kB/s
    and MFLOP/s (format.rate, format.flop_rate)."""
    return round(value, 3) if abs(value) >= 1 else float(f"{value:.4g}")


def gbps(nbytes: float, ns: float) -> float:
    """Bytes over nanoseconds: GB/s, rounded_rate."""
    return rounded_rate(float(nbytes) / float(ns)) if ns else 0.0


def pct(part: float, whole: float) -> float:
    return round(100.0 * float(part) / float(whole), 2) if whole else 0.0
