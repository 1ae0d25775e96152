"""Steps: per-step time, its spread, and what made the slowest step slow."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .idle import IdleParams, gap_step_rows, trace_gaps
from .view import us


@dataclass(frozen=True)
class StepsResult:
    count: int
    mean_us: float  # host step duration (ProfilerStep#N)
    median_us: float
    std_us: float
    min_us: float
    max_us: float
    slowest: int | None  # step number
    steps: list[dict]  # step, host_us, device_us, idle_us, idle by cause, ts_us: its start on the trace's clock
    slowest_vs_median: dict  # what the slowest step spent more time on than the median step

    def to_dict(self) -> dict:
        return asdict(self)


def detect_steps(trace: Trace, limit: int = 50, params: IdleParams = IdleParams(),
                 device: int | None = None) -> StepsResult | None:
    """None when the trace has no steps (no ProfilerStep#N ranges). Idle per step counts the
    gaps of every device, or of one."""
    steps = trace.steps
    if steps.empty:
        return None
    host = (steps["end"] - steps["start"]).to_numpy(np.int64)
    table = pd.DataFrame({"step": steps["step"].to_numpy(), "host_us": host / 1000.0,
                          "device_us": ((steps["gpu_end"] - steps["gpu_start"]).astype("float64") / 1000.0).to_numpy()})
    # idle by cause per step, by the one rule of which step owns a gap (idle.gap_step_rows)
    gaps = trace_gaps(trace, params)
    if device is not None:
        gaps = gaps[gaps["device"] == device]
    rows = gap_step_rows(trace, gaps["start"].to_numpy(np.int64))
    assigned = gaps[rows >= 0].assign(row=rows[rows >= 0])
    by_cause = assigned.pivot_table(index="row", columns="cause", values="dur", aggfunc="sum", fill_value=0) / 1000.0
    by_cause = by_cause.reindex(range(len(steps)), fill_value=0.0)
    table["idle_us"] = by_cause.sum(axis=1).to_numpy()
    for cause in by_cause.columns:
        table[f"idle_{cause}_us"] = by_cause[cause].to_numpy()

    slowest_row = int(np.argmax(host))
    median = table.drop(columns="step").median()
    diff = (table.drop(columns="step").iloc[slowest_row] - median)
    diff = {k: round(float(v), 3) for k, v in diff.items() if k.startswith("idle_") and v > 0}
    return StepsResult(
        count=len(steps), mean_us=us(host.mean()), median_us=us(np.median(host)), std_us=us(host.std()),
        min_us=us(host.min()), max_us=us(host.max()), slowest=int(steps["step"].iloc[slowest_row]),
        steps=[{k: (round(float(v), 3) if k != "step" else int(v)) for k, v in row.items()} | {"ts_us": us(start)}
               for row, start in zip(table.head(limit).to_dict("records"), steps["start"].to_numpy())],
        slowest_vs_median=diff,
    )
