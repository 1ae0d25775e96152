"""How a job scales across runs of different sizes: per run the step time, speedup and parallel
efficiency against the smallest run, the lost efficiency split into its causes, a latency +
bandwidth model of the collectives fitted over every run, and the step time projected at sizes
not measured.

Each run's step is split, per step and averaged over ranks, into compute (its compute kernels'
device time), exposed transfer (communication no compute overlaps, less the waiting), waiting for
the slowest rank (exposed waiting in matched collectives), host-side idle (the gaps by cause) and
what is left (copies, memsets, the host's step beyond the device's). Against the smallest run,
each part scales ideally by N₁/N (strong: the same work spread over more GPUs) or stays (weak: the
same work per GPU): a part's loss is what it takes beyond that, in µs per step and in points of
efficiency (100 × loss / step time), and the losses add up to the efficiency lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analysis import Analysis
from ..detectors.collectives import bus_factor, parse_payload
from ..detectors.stragglers import RankComparison

#: the parts a step splits into, in the order reports list them
PARTS = {"compute": "compute per GPU", "transfer": "exposed communication (transfer)",
         "waiting": "waiting for the slowest rank", "host_idle": "idle on the host side",
         "other": "unexplained (copies, memsets, host time beyond the device's)"}
COMMUNICATION_BOUND_PCT = 50.0  # of a projected step in exposed communication and waiting
SAME_WORK_TOLERANCE = 0.15  # FLOPs per step within 15% across runs: the same total work (strong scaling)


@dataclass(frozen=True)
class Loss:
    part: str  # a PARTS name
    per_step_us: float  # beyond the ideal share of the smallest run's
    points: float  # of parallel efficiency


@dataclass(frozen=True)
class ScalingRun:
    """One run of the job: its size, speed and where its time goes, per step, averaged over ranks."""

    path: str
    world_size: int
    step_us: float
    speedup_x: float  # strong: T₁/T_N; weak: throughput ratio, (N/T_N)/(N₁/T₁)
    efficiency_pct: float  # strong: T₁·N₁/(T_N·N); weak: T₁/T_N
    ideal_step_us: float
    parts_us: dict[str, float]  # PARTS, per step
    idle_by_cause_us: dict[str, float]  # the host-side idle per step, by gap cause
    losses: list[Loss]  # against the smallest run, largest first
    gflop_per_step: float | None  # per GPU, from recorded shapes
    tflops_per_gpu: float | None  # achieved over the step
    mfu_pct: float | None
    collectives_per_step: float
    straggler: int | None  # the rank the others waited for, where one stands out


@dataclass(frozen=True)
class CommFit:
    """time = latency + bus bytes / bandwidth, for one collective kind over one kind of link."""

    kind: str
    link: str  # "one node" or "across nodes"
    latency_us: float
    busbw_gbps: float  # GB/s (10^9 bytes/s): the fitted bandwidth, nccl-tests' bus bandwidth
    error_pct: float  # RMS of the relative error over the calls fitted
    calls: int
    crossover_bytes: float  # bus bytes where latency and transfer take as long: below it latency-bound
    median_bus_bytes_by_run: dict[str, float]  # where each run's messages sit on the curve


@dataclass(frozen=True)
class Projection:
    world_size: int
    step_us: float
    low_us: float  # from the fit's error
    high_us: float
    efficiency_pct: float
    speedup_x: float
    communication_share_pct: float  # exposed transfer and waiting, of the projected step


@dataclass(frozen=True)
class ScalingResult:
    mode: str  # strong or weak
    mode_reason: str
    runs: list[ScalingRun]  # smallest first
    fits: list[CommFit]
    projections: list[Projection]
    sentence: str
    assumptions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Measured:
    """One run as scaling reads it, before it is set against the smallest."""

    analysis: Analysis
    size: int
    parts: dict[str, float]
    causes: dict[str, float]
    step: float
    gflop: float | None  # per GPU and step
    mfu: float | None
    calls: pd.DataFrame  # collective_calls


def _measured(analysis: Analysis, size: int) -> _Measured:
    parts, causes, step = _per_step_parts(analysis)
    flops = [r.findings.flops for r in analysis.ranks]
    # per GPU and step (a rank's FLOPs over its steps; the trace's FLOPs lie in its steps)
    gflop = (float(np.mean([f.gflop for f in flops if f is not None])) / max(_steps(analysis), 1)
             if all(f is not None and f.gflop for f in flops) else None)
    mfus = [f.mfu_pct for f in flops if f is not None and f.mfu_pct is not None]
    return _Measured(analysis, size, parts, causes, step, gflop, float(np.mean(mfus)) if mfus else None,
                     collective_calls(analysis, analysis.path))


def _speed(mode: str, base: _Measured, size: int, step: float) -> tuple[float, float, float]:
    """A step of `step` µs at `size` GPUs against the smallest run: the ideal step, the speedup
    (strong: T₁/T_N; weak: the throughput ratio) and the parallel efficiency."""
    ideal = base.step * (base.size / size if mode == "strong" else 1.0)
    speedup = base.step / step if mode == "strong" else (size / step) / (base.size / base.step)
    return ideal, speedup, 100 * ideal / step if step else 0.0


def _per_step_parts(analysis: Analysis) -> tuple[dict[str, float], dict[str, float], float]:
    """A run's step split into PARTS (mean over ranks, per step), its idle by cause and step time;
    ValueError when a rank marks no steps."""
    comparison: RankComparison | None = analysis.comparison
    waiting = {r.rank: r.exposed_waiting_us for r in comparison.ranks} if comparison else {}
    parts: dict[str, list[float]] = {p: [] for p in PARTS}
    causes: dict[str, float] = {}
    step_times = []
    for rank in analysis.ranks:
        steps = rank.findings.steps
        if steps is None or not steps.count:
            raise ValueError(f"{analysis.path}: rank {rank.rank} marks no steps: scaling compares step times "
                             "(profile with a schedule and prof.step(), or name the steps with --steps REGEX)")
        n = steps.count
        rows = rank.breakdown.steps
        compute = sum(s.breakdown.compute_us for s in rows) / n
        exposed = sum(s.breakdown.exposed_comm_us for s in rows) / n
        wait = min(waiting.get(rank.rank, 0.0) / n, exposed) if rank.rank is not None else 0.0
        idle_causes: dict[str, float] = {}
        for row in steps.steps:
            for cause, us_ in row.idle_by_cause_us.items():
                idle_causes[cause] = idle_causes.get(cause, 0.0) + us_ / n
        idle = sum(idle_causes.values())
        parts["compute"].append(compute)
        parts["transfer"].append(exposed - wait)
        parts["waiting"].append(wait)
        parts["host_idle"].append(idle)
        parts["other"].append(steps.step_time_us - compute - exposed - idle)
        step_times.append(steps.step_time_us)
        for cause, us_ in idle_causes.items():
            causes[cause] = causes.get(cause, 0.0) + us_ / len(analysis.ranks)
    mean = {p: round(float(np.mean(v)), 3) + 0.0 for p, v in parts.items()}  # + 0.0: no -0.0
    return mean, {c: round(v, 3) for c, v in causes.items()}, float(np.mean(step_times))


def collective_calls(analysis: Analysis, label: str) -> pd.DataFrame:
    """Every matched collective of a run with its payload: kind, group size, bus bytes (bytes ×
    the bus factor) and its transfer time, from when the last rank entered to its end (the median
    over ranks): what the communication model is fitted on. Read from each rank's collectives as
    the analysis kept them (RankTimeline): no events are read again."""
    none = pd.DataFrame({"run": [], "kind": [], "group_size": [], "bus_bytes": [], "transfer_us": []})
    calls = pd.concat([r.timeline.collectives.assign(rank=r.rank) for r in analysis.ranks], ignore_index=True)
    calls = calls[calls.groupby(["name", "nth"])["rank"].transform("nunique") == len(analysis.ranks)]
    if calls.empty:
        return none
    calls = calls.assign(last=calls.groupby(["name", "nth"])["start"].transform("max"))
    calls = calls.assign(transfer=(calls["end"] - calls["last"]).clip(lower=0))
    per_call = calls.groupby(["name", "nth"], sort=False).agg(transfer=("transfer", "median"),
                                                               payload=("payload", "first")).reset_index()
    read = [parse_payload(str(p)) for p in per_call["payload"]]
    per_call = per_call[[p is not None for p in read]]
    parsed = [p for p in read if p is not None]
    return pd.DataFrame({"run": label, "kind": [p.kind for p in parsed], "group_size": [p.group_size for p in parsed],
                         "bus_bytes": [p.bytes * p.factor for p in parsed],
                         "transfer_us": per_call["transfer"].to_numpy(np.float64) / 1000})


def fit_communication(calls: pd.DataFrame, gpus_per_node: int) -> list[CommFit]:
    """Least squares of transfer time on bus bytes, per collective kind and link."""
    if calls.empty:
        return []
    calls = calls[calls["group_size"] > 1]
    calls = calls.assign(link=np.where(calls["group_size"] > gpus_per_node, "across nodes", "one node"))
    fits = []
    for (kind, link), group in calls.groupby(["kind", "link"], sort=True):
        x, y = group["bus_bytes"].to_numpy(np.float64), group["transfer_us"].to_numpy(np.float64)
        if len(np.unique(x)) < 2:
            continue  # one message size: latency and bandwidth cannot be told apart
        slope, intercept = np.polyfit(x, y, 1)
        if slope <= 0:
            continue
        fitted = intercept + slope * x
        error = float(np.sqrt(np.mean(((fitted - y) / np.maximum(y, 1e-9)) ** 2)) * 100)
        medians = group.groupby("run")["bus_bytes"].median()
        fits.append(CommFit(kind=str(kind), link=str(link), latency_us=round(max(float(intercept), 0.0), 3),
                            busbw_gbps=round(1 / slope / 1000, 3), error_pct=round(error, 2), calls=len(group),
                            crossover_bytes=round(max(float(intercept), 0.0) / slope, 1),
                            median_bus_bytes_by_run={str(k): float(v) for k, v in medians.items()}))
    return fits


def scaling(runs: list[tuple[Analysis, int]], mode: str | None = None, project: list[int] | None = None,
            gpus_per_node: int = 8, force: bool = False) -> ScalingResult:
    """Compare runs of one job at different sizes (each with its world size); `mode` strong or
    weak, else inferred from the FLOPs per step; `project`: sizes to predict. ValueError (one
    line) for fewer than two sizes, a run without steps, or runs that are not the same job (unless
    `force`)."""
    if len({n for _, n in runs}) < 2:
        raise ValueError("scaling needs runs at two or more sizes (world sizes)")
    runs = sorted(runs, key=lambda r: r[1])
    if not force and (differs := not_the_same_job([a for a, _ in runs])):
        raise ValueError(f"{differs}: these are not runs of one job (--force compares them anyway)")
    measured = [_measured(analysis, n) for analysis, n in runs]
    assumptions: list[str] = []
    mode, reason = _mode(mode, [(m.size, m.gflop) for m in measured], assumptions)
    base = measured[0]
    scaled_runs = []
    for m in measured:
        ideal, speedup, efficiency = _speed(mode, base, m.size, m.step)
        share = ideal / base.step  # of each part of the smallest run's step: N₁/N (strong) or all of it (weak)
        losses = sorted((Loss(p, round(m.parts[p] - base.parts[p] * share, 3),
                              round(100 * (m.parts[p] - base.parts[p] * share) / m.step, 2)) for p in PARTS),
                        key=lambda loss: -loss.points)
        comparison = m.analysis.comparison
        scaled_runs.append(ScalingRun(
            path=m.analysis.path, world_size=m.size, step_us=round(m.step, 3), speedup_x=round(speedup, 3),
            efficiency_pct=round(efficiency, 2), ideal_step_us=round(ideal, 3), parts_us=m.parts,
            idle_by_cause_us=m.causes, losses=losses, gflop_per_step=round(m.gflop, 3) if m.gflop is not None else None,
            tflops_per_gpu=round(m.gflop / m.step * 1000, 3) if m.gflop is not None and m.step else None,  # GFLOP/µs
            mfu_pct=round(m.mfu, 2) if m.mfu is not None else None,
            collectives_per_step=round(len(m.calls) / max(_steps(m.analysis), 1), 2),
            straggler=comparison.straggler if comparison else None))
    fits = fit_communication(pd.concat([m.calls for m in measured], ignore_index=True), gpus_per_node)
    if any(n > gpus_per_node for _, n in runs) or any(p > gpus_per_node for p in project or []):
        assumptions.append(f"{gpus_per_node} GPUs per node (--gpus-per-node): groups larger than that cross nodes")
    projections = [_project(measured[-1], base, n, mode, fits, gpus_per_node, assumptions) for n in project or []]
    return ScalingResult(mode=mode, mode_reason=reason, runs=scaled_runs, fits=fits, projections=projections,
                         sentence=_sentence(mode, scaled_runs, projections), assumptions=list(dict.fromkeys(assumptions)))


SAME_KERNELS = 0.5  # of the kernel names that take most of a run's time, the share another run must also run


def not_the_same_job(analyses: list[Analysis]) -> str | None:
    """What differs between runs that should be one job at different sizes: the kernels that take
    most of the first run's time missing from another (another model, precision or code); None
    when they match."""
    def hot(a: Analysis) -> set[str]:
        return {k.name for k in a.focus.findings.kernels.top[:10] if not k.is_comm}

    first = hot(analyses[0])
    for other in analyses[1:]:
        theirs = hot(other)
        if first and theirs and len(first & theirs) < SAME_KERNELS * min(len(first), len(theirs)):
            missing = sorted(first - theirs)[:2]
            return (f"{other.path} runs other kernels than {analyses[0].path} (not in it: "
                    f"{', '.join(m[:60] for m in missing)})")
    return None


def world_size(analysis: Analysis) -> int | None:
    """A run's world size: as its traces say, else its ranks counted; None for one rank that says
    nothing (it may be one rank of a larger job)."""
    return analysis.world_size or (len(analysis.ranks) if len(analysis.ranks) > 1 else None)


def _steps(analysis: Analysis) -> int:
    counts = [r.findings.steps.count for r in analysis.ranks if r.findings.steps]
    return max(counts, default=0)


def _mode(asked: str | None, work: list[tuple[int, float | None]], assumptions: list[str]) -> tuple[str, str]:
    """Strong when the FLOPs per step of the whole job stay the same, weak when the FLOPs per GPU do."""
    if asked:
        return asked, f"--{asked}, as asked"
    if all(g is not None for _, g in work):
        (n1, g1), (nk, gk) = work[0], work[-1]
        job_ratio = (gk * nk) / (g1 * n1) if g1 else math.inf  # type: ignore[operator]
        if abs(job_ratio - 1) <= SAME_WORK_TOLERANCE:
            return "strong", f"the job's FLOPs per step stay the same from {n1} to {nk} GPUs"
        if abs(gk / g1 - 1) <= SAME_WORK_TOLERANCE:  # type: ignore[operator]
            return "weak", f"the FLOPs per step per GPU stay the same from {n1} to {nk} GPUs"
    assumptions.append("the work per step could not be read from the traces (no recorded shapes): strong scaling "
                       "assumed (--weak if each GPU kept its own batch)")
    return "strong", "assumed: the traces record no shapes to count the work per step"


def _project(largest: _Measured, base: _Measured, n: int, mode: str, fits: list[CommFit], gpus_per_node: int,
             assumptions: list[str]) -> Projection:
    """The largest run's step at `n` GPUs: compute by the work per GPU, each collective by the fitted
    model at the new group size, the waiting and host-side idle as measured (stragglers kept)."""
    size, parts, calls = largest.size, largest.parts, largest.calls
    compute = parts["compute"] * (size / n if mode == "strong" else 1.0)
    steps = max(_steps(largest.analysis), 1)
    link = "across nodes" if n > gpus_per_node else "one node"
    by_kind = {(f.kind, f.link): f for f in fits}
    measured_comm = projected_comm = 0.0
    errors = []
    for kind, group in calls.groupby("kind"):
        fit = by_kind.get((str(kind), link))
        if fit is None and (fit := next((f for f in fits if f.kind == kind), None)) is not None:
            assumptions.append(f"no {kind} was measured {link}: the {fit.link} fit is used there (the same link "
                               "assumed; measure a run that large for its own)")
        if fit is None:
            assumptions.append(f"no fit for {kind}: its calls keep their measured time")
            continue
        bytes_ = group["bus_bytes"].to_numpy(np.float64) / np.array([bus_factor(str(kind), int(g)) or 1.0
                                                                     for g in group["group_size"]])
        measured_comm += float(group["transfer_us"].sum()) / steps
        projected_comm += float(np.sum(fit.latency_us + bytes_ * bus_factor(str(kind), n) / (fit.busbw_gbps * 1000))) / steps
        errors.append(fit.error_pct)
    exposed_share = parts["transfer"] / measured_comm if measured_comm else 1.0
    transfer = parts["transfer"] + (projected_comm - measured_comm) * min(exposed_share, 1.0)
    step = compute + transfer + parts["waiting"] + parts["host_idle"] + parts["other"]
    error = (max(errors) / 100 if errors else 0.0) * transfer
    _, speedup, efficiency = _speed(mode, base, n, step)
    assumptions.append(f"projection from the {size}-GPU run: compute {'split over' if mode == 'strong' else 'kept per'} "
                       "GPU, collectives by the fitted model (the same messages, the bus factor of the new size), "
                       "waiting and host-side idle as measured, communication as exposed as measured")
    return Projection(world_size=n, step_us=round(step, 3), low_us=round(step - error, 3), high_us=round(step + error, 3),
                      efficiency_pct=round(efficiency, 2), speedup_x=round(speedup, 3),
                      communication_share_pct=round(100 * (transfer + parts["waiting"]) / step, 2) if step else 0.0)


def _sentence(mode: str, runs: list[ScalingRun], projections: list[Projection]) -> str:
    first, last = runs[0], runs[-1]
    top = [loss for loss in last.losses if loss.points >= 1][:2]
    why = "; ".join(f"{loss.points:.0f} points to {PARTS[loss.part]}"
                    + (f" (rank {last.straggler})" if loss.part == "waiting" and last.straggler is not None else "")
                    for loss in top)
    text = (f"From {first.world_size} to {last.world_size} GPUs ({mode} scaling) efficiency is "
            f"{last.efficiency_pct:.0f}%, a {last.speedup_x:.2f}× speedup" + (f": {why}" if why else ""))
    for p in projections[:1]:
        ratio = p.world_size / last.world_size
        text += (f"; {p.world_size} GPUs would give {p.step_us / 1000:.2f} ms a step, {p.speedup_x / last.speedup_x:.2f}× "
                 f"for {ratio:g}× the GPUs ({p.efficiency_pct:.0f}% efficiency)")
    bound = next((p for p in projections if p.communication_share_pct >= COMMUNICATION_BOUND_PCT), None)
    if bound is not None:
        text += (f". From {bound.world_size} GPUs the step is communication-bound ({bound.communication_share_pct:.0f}% "
                 "communication): overlapping it with the backward pass, larger gradient buckets, gradient compression "
                 "or a faster link push that point out")
    return text + "."
