"""What each GPU did in a stretch of the trace: its busy time there, its idle by cause (the rank's gap
table clipped to the stretch) and the device ops with the most time inside it. The answer to "what was
the GPU doing between 100 and 200 ms?", beside the host's side (host.host_events_in)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..core import intervals as iv
from ..core.view import pct, us, views_of
from .kernels import short_name


@dataclass(frozen=True)
class WindowOp:
    name: str  # the kernel's short name, or the copy's or memset's
    kind: str  # kernel, memcpy, memset
    count: int  # its instances with time inside the window
    time_us: float  # their time inside it


@dataclass(frozen=True)
class DeviceWindow:
    device: int
    busy_us: float  # time inside the window when any of its work ran
    busy_pct: float  # of the window
    idle_by_cause_us: dict[str, float]  # its gaps' time inside the window, by cause (before its first work and
    # after its last there are no gaps: the device's span bounds them)
    top: list[WindowOp]  # most time inside the window first


def device_window(trace: Trace, gaps: pd.DataFrame, lo: int, hi: int, device: int | None = None,
                  top: int = 5) -> list[DeviceWindow]:
    """Each GPU's (or one GPU's) work in [lo, hi) ns on the trace clock; `gaps` is the rank's gap table."""
    out = []
    for view in views_of(trace, device):
        busy = iv.length(iv.clip(view.busy, lo, hi))
        mine = gaps[gaps["device"] == view.device]
        inside = iv.inside(mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64), lo, hi)
        held = inside > 0
        idle = pd.Series(inside[held]).groupby(mine["cause"].to_numpy()[held], observed=True).sum()
        work = view.work
        overlap = iv.inside(work["start"].to_numpy(np.int64), work["end"].to_numpy(np.int64), lo, hi)
        ran = np.flatnonzero(overlap > 0)  # a window holds few of a trace's ops: the rest are never read
        ops = pd.DataFrame({"name": work["name"].to_numpy()[ran], "kind": work["kind"].to_numpy()[ran],
                            "time": overlap[ran]})
        by_op = ops.groupby(["name", "kind"], observed=True)["time"].agg(["sum", "size"])
        by_op = by_op.sort_values("sum", ascending=False, kind="stable").head(top)
        out.append(DeviceWindow(view.device, us(busy), pct(busy, hi - lo),
                                {str(c): us(int(t)) for c, t in idle.items() if t > 0},
                                [WindowOp(short_name(str(name)), str(kind), int(r["size"]), us(int(r["sum"])))
                                 for (name, kind), r in by_op.iterrows()]))
    return out
