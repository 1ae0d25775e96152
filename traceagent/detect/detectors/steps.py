"""Steps: per-step time, its spread, and what made the slowest step slow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...format import duration
from ...trace.model import Trace
from ..core.view import us
from .base import Detector, Key
from .idle import IdleParams, idle_by, trace_gaps


@dataclass(frozen=True)
class StepRow:
    """One step: host time (its ProfilerStep range), device time (first to last work; None without
    any), the idle it owns (idle.gap_step_rows) in all and by cause, and its start: from the
    trace's first event like every other time (`start_us`), and on the trace's own clock to find
    it in a viewer (`ts_us`, as a gap's)."""

    step: int
    host_us: float
    device_us: float | None
    idle_us: float
    idle_by_cause_us: dict[str, float]
    ts_us: float
    start_us: float = 0.0
    kernels: int = 0  # 2.16: the kernels that start inside its device work (first to last work launched in it)


@dataclass(frozen=True)
class StepsResult:
    count: int
    mean_us: float  # host step duration (ProfilerStep#N)
    # the loop's time per step: the host's mean step, or, where the GPU runs behind the host by more
    # than a step at the end, from the first step's start to the end of the steps' GPU work, over
    # the steps (the host only queued the work). What savings and diff divide by.
    step_time_us: float
    steps_per_s: float  # the loop's rate: one over step_time_us (a training job's samples/s is this × its batch)
    median_us: float
    std_us: float
    min_us: float
    max_us: float
    slowest: int | None  # step number
    steps: list[StepRow]
    # what the slowest step spent more time on than the median step: host_us (its extra time), device_us
    # (its device work's span), idle_us and idle_<cause>_us; a key only where it grew
    slowest_vs_median: dict[str, float]
    # 2.16: the kernels a step runs (StepRow.kernels), the mean over every step (not only the rows listed)
    kernels_per_step: float = 0.0
    # 2.16: the host step time's tail, over every step (numpy's linear interpolation between the closest steps)
    p90_us: float = 0.0
    p99_us: float = 0.0


def detect_steps(trace: Trace, limit: int = 50, params: IdleParams = IdleParams(),
                 device: int | None = None, gaps: pd.DataFrame | None = None) -> StepsResult | None:
    """None when the trace has no steps (no ProfilerStep#N ranges). Idle per step counts the
    gaps of every device, or of one, each in the step that owns it (idle.idle_by over the rank's
    gap table, `gaps`)."""
    steps = trace.steps
    if steps.empty:
        return None
    host = (steps["end"] - steps["start"]).to_numpy(np.int64)
    table = pd.DataFrame({"step": steps["step"].to_numpy(), "host_us": host / 1000.0,
                          "device_us": ((steps["gpu_end"] - steps["gpu_start"]).astype("float64") / 1000.0).to_numpy()})
    # idle by cause per step, by the one rule of which step owns a gap (idle.gap_step_rows)
    gaps = trace_gaps(trace, params) if gaps is None else gaps
    if device is not None:
        gaps = gaps[gaps["device"] == device]
    owned = idle_by(gaps[gaps["step_row"] >= 0], ["step_row"], causes=True)
    by_cause = (owned.unstack("cause", fill_value=0) if len(owned) else pd.DataFrame(index=pd.Index([], name="step_row")))
    by_cause = by_cause.reindex(range(len(steps)), fill_value=0).astype("float64") / 1000.0
    table["idle_us"] = by_cause.sum(axis=1).to_numpy()
    for cause in by_cause.columns:
        table[f"idle_{cause}_us"] = by_cause[cause].to_numpy()

    origin = trace.origin_ns()
    host_mean, step_time = float(host.mean()), step_time_ns(steps)
    slowest_row = int(np.argmax(host))
    median = table.drop(columns="step").median()
    diff = (table.drop(columns="step").iloc[slowest_row] - median)
    # the slowest step's extra host time, and what of its device span and idle by cause grew
    diff = {k: round(float(v), 3) for k, v in diff.items() if v > 0}
    table["kernels"] = kernels = _kernels_in_steps(trace, device)
    return StepsResult(
        count=len(steps), mean_us=us(host_mean), step_time_us=us(step_time),
        steps_per_s=round(1e9 / step_time, 3) if step_time else 0.0,
        median_us=us(np.median(host)), std_us=us(host.std()),
        min_us=us(host.min()), max_us=us(host.max()), slowest=int(steps["step"].iloc[slowest_row]),
        steps=[_row(row, us(start), us(start - origin)) for row, start
               in zip(table.head(limit).to_dict("records"), steps["start"].to_numpy())],
        slowest_vs_median=diff, kernels_per_step=round(float(kernels.mean()), 1),
        p90_us=us(np.percentile(host, 90)), p99_us=us(np.percentile(host, 99)),
    )


def _kernels_in_steps(trace: Trace, device: int | None) -> np.ndarray:
    """Each step's kernels (of every GPU, or of one): those that start inside its device work, from the first
    to the last work launched in it (the steps' gpu_start and gpu_end); 0 for a step with none."""
    gpu, steps = trace.gpu, trace.steps
    mask = (gpu["kind"] == "kernel").to_numpy()
    if device is not None:
        mask = mask & (gpu["device"] == device).to_numpy()
    starts = gpu["start"].to_numpy(np.int64)[mask]  # in order: the device table is sorted by start (normalize)
    first, last = steps["gpu_start"].to_numpy("float64"), steps["gpu_end"].to_numpy("float64")
    known = ~np.isnan(first)
    counts = np.zeros(len(steps), np.int64)
    counts[known] = (np.searchsorted(starts, last[known].astype(np.int64), "left")
                     - np.searchsorted(starts, first[known].astype(np.int64), "left"))
    return counts


def step_time_ns(steps: pd.DataFrame) -> float:
    """The loop's time per step (the trace's step table): the host's mean step, unless the GPU runs
    behind the steps by more than a step at the end (the host queued work far ahead): then from the
    first step's start to the end of the steps' GPU work, over the steps."""
    device_end, host_mean = steps["gpu_end"].max(), float((steps["end"] - steps["start"]).mean())
    behind = not pd.isna(device_end) and int(device_end) - int(steps["end"].max()) > host_mean
    return (int(device_end) - int(steps["start"].min())) / len(steps) if behind else host_mean


def _row(row: dict[str, Any], ts_us: float, start_us: float) -> StepRow:
    device = round(float(row["device_us"]), 3)
    return StepRow(int(row["step"]), round(float(row["host_us"]), 3), None if device != device else device,
                   round(float(row["idle_us"]), 3),
                   {k.removeprefix("idle_").removesuffix("_us"): round(float(v), 3) for k, v in row.items()
                    if k.startswith("idle_") and k != "idle_us"}, ts_us, start_us, int(row["kernels"]))


@dataclass(frozen=True)
class NoSteps:
    """A rank whose trace marks no steps."""

    count: int = 0
    mean_us: None = None
    max_us: None = None


def steps_findings(result: StepsResult, on: str) -> list[tuple[str, str]]:
    return [(f"{result.count} steps, mean {duration(result.mean_us)}", f"How long is a step{on}?")] if result.count else []


DETECTOR = Detector("steps", "Steps", "Step times and each step's idle by cause.", IdleParams(), StepsResult,
                    lambda i, p: detect_steps(i.trace, params=p, gaps=i["gaps"]), reads=("gaps",), settings="idle",
                    keys=(Key("steps", StepsResult | NoSteps, lambda r: r or NoSteps()),), place=80, tool=False,
                    findings=steps_findings)
