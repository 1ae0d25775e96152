"""Run every detector on a job and draw the verdicts: the stable contract behind `analyze --json`,
the agent's tools and the report.

An analysis keeps the parameters it ran with and what it computed (the classified gaps, the
breakdowns): the tools, the report and the TUI read those and never run a detector again, so
they cannot disagree with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, replace
from functools import cached_property
from typing import Any, Protocol

import pandas as pd

from ..trace.model import Trace, TraceMeta, per_trace
from .core.bounds import out_of_range
from .core.encode import to_data
from .detectors.breakdown import BreakdownResult
from .detectors.comm import CommResult
from .detectors.idle import IdleParams, trace_gaps
from .detectors.kernel_profiles import KernelProfilesResult, joined
from .detectors.kernels import KernelsResult, detect_hot_kernels
from .detectors.launch import LaunchResult
from .detectors.memcpy import MemcpyResult
from .detectors.per_device import DeviceFindings
from .detectors.steps import StepsResult
from .detectors.stragglers import RankComparison, RankTimeline, StragglerParams, compare_ranks
from .detectors.timeline import TimelineResult
from .registry import DETECTORS, Detector, run_all
from .verdict.diagnose import Findings, Verdict, VerdictParams, no_device_verdict, straggler_verdict

#: The version of the JSON that analyze --json and diff --json print (traceagent/schema.py): the
#: major number changes when a key is removed or changes meaning, the minor when keys are added. A
#: registered detector adds its key and says in which version (registry.Detector.since). 1.3: the
#: annotations' idle_ranges (idle_us and share_of_idle_pct on each range), a launch-bound op's
#: range. 2.0: the idle parameters sync_trailing_ops and sync_trailing_within_us are gone (a wait
#: owns the gaps until work is queued again); the straggler parameter is straggler_waiting_pct;
#: added: steps[].start_us, sync_sites[].after, comparison caused_waiting_pct and each rank's
#: caused_waiting_us, collectives.nics_per_node, diff's grew. 2.1: added each saving's change and
#: simulated_pct (the what-if replay), diff's prediction simulated_pct and change. 2.2: steps.step_time_us
#: (the loop's step time, the GPU's where it runs behind the host: what savings and diff divide by).
#: 2.3: a verdict's evidence says its kind (idle, communication, data_movement, compute, straggler,
#: none) and holds only that kind's keys (the schema: a union tagged by `kind`). 2.4: the verdict
#: parameter replayed_share (a wait whose replayed removal saves under that share of its bound).
#: 2.5: each saving's gpus (how many GPUs' device time its pct is over; a kernel's time on the
#: critical path is over the rank's span). 2.7: the workload's model, forward passes, serving
#: phases and steps, the modules' model. 2.8: flops' compute-heavy kernel time and the part of it
#: outside the counted ops (uncounted_us, _pct, _kernel, _op: what makes MFU a lower bound); the
#: steps' steps_per_s; launch.min_latency_us; op_time (its own `since`). 2.9: precision and grid_fill (their own
#: `since`); the workload's compiled_pct and compiled_regions. 2.10: layout (its own `since`); comm.kinds
#: (each kind of collective's time and exposed part). 2.11: recompute (its own `since`); the steps'
#: slowest_vs_median also holds host_us (the slowest step's extra time) and device_us. 2.12: libraries (its own `since`).
#: 2.13: comm.compute_us and comm.comm_to_compute_x (communication over computation, in the same scope);
#: host_ops.runtime_calls (each runtime and driver API's calls and self time); modules.layer and modules.layers;
#: graphs.captures, capture_us and instantiate_us. 2.14: op_time.most_device_ops (the op that launched
#: the most); kernels.mean_us; idle.by_line (the user's lines the GPU idles over). 2.15: streams.busy_us,
#: concurrent_us and concurrent_pct (two or more streams of a GPU busy at once); memory.devices[].total_bytes and
#: peak_share_pct (the GPU's memory from the trace's device properties, and the peak's share of it). 2.16:
#: steps.kernels_per_step and steps.steps[].kernels (the kernels that start inside each step's device work);
#: steps.p90_us and p99_us (the step time's tail); host_ops.self_by_kind_us (each kind of host event's own time).
#: 2.17: host_ops.waits_for_gpu (the calls that make the host wait for the GPU); phases[].mfu_lower_bound.
SCHEMA_VERSION = max(["2.17", *(d.since for d in DETECTORS)], key=lambda v: tuple(map(int, v.split("."))))


@dataclass(frozen=True)
class AnalysisParams:
    """The thresholds an analysis ran with (each documented where it is defined): the core
    detectors', and each registered detector's by its name (registry.DETECTORS)."""

    idle: IdleParams = field(default_factory=IdleParams)
    verdict: VerdictParams = field(default_factory=VerdictParams)
    stragglers: StragglerParams = field(default_factory=StragglerParams)
    detectors: dict[str, Any] = field(default_factory=lambda: {d.name: d.params for d in DETECTORS if d.own_params})

    def params_for(self, detector: Detector) -> Any:
        """The parameters a detector runs with: the shared ones it names, else its own."""
        return getattr(self, detector.settings) if detector.settings else self.detectors.get(detector.name, detector.params)

    def with_settings(self, settings: list[str]) -> AnalysisParams:
        """These parameters with `NAME.PARAM=VALUE` settings applied (`idle.launch_gap_us=50`,
        `host_pauses.min_idle_us=0`); ValueError naming what is wrong, and what there is."""
        params = self
        core = ("idle", "verdict", "stragglers")
        for setting in settings:
            target, _, text = setting.partition("=")
            name, _, field_name = target.strip().partition(".")
            if name not in (*core, *params.detectors) or not text.strip():
                raise ValueError(f"{setting!r}: expected NAME.PARAM=VALUE, NAME one of "
                                 f"{', '.join([*core, *params.detectors])}")
            current = getattr(params, name) if name in core else params.detectors[name]
            changed = _set_field(current, field_name.strip(), text.strip(), setting)
            params = (replace(params, **{name: changed}) if name in core
                      else replace(params, detectors={**params.detectors, name: changed}))
        return params


def _set_field(params: Any, name: str, text: str, setting: str) -> Any:
    """`params` with one field set from text, converted to the field's type."""
    kinds = {f.name: f.type for f in fields(params)}
    if name not in kinds:
        raise ValueError(f"{setting!r}: no parameter {name!r}; there are {', '.join(kinds) or 'none'}")
    current = getattr(params, name)
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            value: Any = text.lower() in ("true", "1", "yes")
        elif isinstance(current, int):
            value = int(text)
        elif isinstance(current, float):
            value = float(text)
        else:
            value = text
    except ValueError:
        raise ValueError(f"{setting!r}: {name} takes a {type(current).__name__}, not {text!r}") from None
    if (wanted := out_of_range(type(params), name, value)) is not None:
        raise ValueError(f"{setting!r}: {name} takes {wanted}, not {text!r}")
    return replace(params, **{name: value})


class EventSource(Protocol):
    """Loads a rank's events again (trace.load.RankSource): detectors know no files."""

    def load(self, meta: TraceMeta) -> Trace: ...


@dataclass(frozen=True)
class RankAnalysis:
    """One rank's results: every detector's (registry.run_all) but the gap table, by name. They
    hold no events: `trace` is the rank's Trace where it was analysed in this process, else loaded
    again from `source` when a narrower query needs its events; the classified gaps likewise (they
    grow with the trace, and the cross-rank step does not read them)."""

    rank: int | None
    params: AnalysisParams
    meta: TraceMeta
    results: dict[str, Any]  # each detector's result by its name (None where the trace cannot say)
    counts: dict[str, int]  # events by kind (Trace.counts)
    streams: list[int]  # the streams device work ran on
    step_numbers: list[int]  # the steps the trace has
    has_device_activity: bool  # device work other than syncs
    source: EventSource | None = None
    loaded: Trace | None = field(default=None, repr=False, compare=False)
    kept_gaps: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    @cached_property
    def findings(self) -> Findings:
        """The results the verdict and the presentation read by type."""
        return Findings.of(self.results, self.meta.has_python_frames, self.has_device_activity, self.meta.amd)

    @property
    def breakdown(self) -> BreakdownResult:
        return self.results["breakdown"]

    @property
    def verdict(self) -> Verdict:
        return self.results["verdict"]

    @property
    def timeline(self) -> RankTimeline:
        """What the cross-rank comparison reads."""
        return self.results["rank_timeline"]

    @property
    def pictures(self) -> TimelineResult:
        """What the timeline charts draw: presentation never reads events."""
        return self.results["timeline"]

    @property
    def by_device(self) -> dict[int, DeviceFindings]:
        """Each GPU's copies, collectives, kernels, launches, steps."""
        return self.results["per_gpu"]

    @property
    def gaps(self) -> pd.DataFrame:
        """Every classified gap of every device (see idle.trace_gaps); ns on the trace clock."""
        if self.kept_gaps is not None:
            return self.kept_gaps
        tables, params = _gap_tables(self.trace), self.params.idle
        if (gaps := tables.get(params)) is None:
            gaps = tables[params] = trace_gaps(self.trace, params)
        return gaps

    @property
    def trace(self) -> Trace:
        """The rank's events (loaded again, and kept for the next query, when they are not here)."""
        if self.loaded is not None:
            return self.loaded
        if self.source is None:
            raise LookupError(f"rank {self.rank}: its events were not kept and it has no source to load them from")
        return self.source.load(self.meta)

    def without_events(self) -> RankAnalysis:
        """The results alone: what a worker sends back."""
        return replace(self, loaded=None, kept_gaps=None)

    def with_rank(self, rank: int) -> RankAnalysis:
        """The same results under the rank the job settled on (a file name can say it)."""
        meta = replace(self.meta, rank=rank)
        loaded = replace(self.loaded, meta=meta) if self.loaded is not None else None
        results = {**self.results, "verdict": replace(self.verdict, rank=rank),
                   "rank_timeline": replace(self.timeline, rank=rank)}
        return replace(self, rank=rank, meta=meta, results=results, loaded=loaded)

    def device_gaps(self, device: int) -> pd.DataFrame:
        """The classified gaps of one device."""
        return self.gaps[self.gaps["device"] == device]

    @property
    def devices(self) -> list[int]:
        """The GPUs of this rank that ran work."""
        return sorted(int(d) for d in self.findings.idle.devices)

    def hot_kernels(self, top: int = 10, name_filter: str | None = None, device: int | None = None,
                    order: str = "total", op_filter: str | None = None, collectives: bool = False) -> KernelsResult:
        """The hot kernels as analyzed (of the rank, or of one GPU), or a query of the events for
        what the analysis did not list (a name or op filter, collectives alone, a longer list, another order)."""
        kernels = self.findings.kernels if device is None else self.by_device[device].kernels
        if name_filter is None and op_filter is None and not collectives and order == "total" and top <= len(kernels.top):
            return replace(kernels, top=kernels.top[:top])
        return detect_hot_kernels(self.trace, top=top, name_filter=name_filter, device=device, order=order,
                                  op_filter=op_filter, collectives=collectives)

    def memcpy(self, device: int | None = None) -> MemcpyResult:
        """Copies on the rank, or on one of its GPUs."""
        return self.findings.memcpy if device is None else self.by_device[device].memcpy

    def comm(self, device: int | None = None) -> CommResult:
        """Collectives on the rank, or on one of its GPUs."""
        return self.findings.comm if device is None else self.by_device[device].comm

    def launch(self, device: int | None = None) -> LaunchResult:
        """Launch statistics on the rank, or on one of its GPUs."""
        return self.findings.launch if device is None else self.by_device[device].launch

    def steps(self, device: int | None = None) -> StepsResult | None:
        """Steps with idle from every GPU of the rank, or from one."""
        return self.findings.steps if device is None else self.by_device[device].steps

    def record(self) -> Any:
        """The rank as `analyze --json` prints it (a RankRecord): each detector's keys."""
        p = self.params
        return RankRecord(rank=self.rank, params=ParamsRecord(p.idle, p.verdict, p.stragglers,
                                                              DetectorParams(**p.detectors)),
                          devices=dict(self.meta.devices),
                          **{k.name: k.value(self.results[d.name]) for d in DETECTORS for k in d.json_keys()})


#: Each registered detector's parameters, by its name: a type made from the registry, so the JSON
#: Schema describes every one of them.
DetectorParams = make_dataclass("DetectorParams", [(d.name, type(d.params)) for d in DETECTORS if d.own_params],
                                frozen=True)


@dataclass(frozen=True)
class ParamsRecord:
    """The thresholds a rank was analysed with, as the JSON states them."""

    idle: IdleParams
    verdict: VerdictParams
    stragglers: StragglerParams
    detectors: DetectorParams  # type: ignore[valid-type]  # made from the registry


#: A rank in `analyze --json`: its number, parameters and devices, then each detector's keys in
#: their places (registry.DETECTORS). Made from the registry, so a new detector is a new key of the
#: JSON and of its schema.
RankRecord = make_dataclass("RankRecord", [
    ("rank", int | None), ("params", ParamsRecord), ("devices", dict[int, str]),
    *((k.name, k.type) for d in DETECTORS for k in d.json_keys()),
], frozen=True)
RankRecord.__module__ = DetectorParams.__module__ = __name__  # made here, not in dataclasses


@dataclass(frozen=True)
class RankFailure:
    """A rank file that could not be loaded or analysed; the job's other ranks still are."""

    file: str
    error: str


@dataclass(frozen=True)
class Analysis:
    path: str  # what the job was opened from: a file, a directory, a glob, or a list's description
    ranks: list[RankAnalysis]
    verdict: Verdict
    comparison: RankComparison | None
    failed: list[RankFailure] = field(default_factory=list)
    kernel_profiles: KernelProfilesResult | None = None  # an Nsight Compute export read with it (--kernels)

    @property
    def format(self) -> str:
        return self.ranks[0].meta.format if self.ranks else "unknown"

    @property
    def world_size(self) -> int | None:
        return self.ranks[0].meta.world_size

    @property
    def devices(self) -> list[str]:
        """The names of every GPU of every rank, each once."""
        return sorted({name for r in self.ranks for name in r.meta.devices.values()})

    @property
    def warnings(self) -> list[str]:
        """Notes on the load; a note on the job (a sub-directory's choice) is on every rank: said once."""
        return list(dict.fromkeys(w for r in self.ranks for w in r.meta.warnings))

    @property
    def focus(self) -> RankAnalysis:
        """The rank the verdict is about (the first rank when it names none)."""
        return next((r for r in self.ranks if r.rank == self.verdict.rank), self.ranks[0])

    def rank(self, rank: int | None) -> RankAnalysis:
        """One rank's analysis; None means the verdict's rank."""
        if rank is None:
            return self.focus
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(rank)

    def trace_info(self) -> TraceInfo:
        """What was loaded: `analyze --json`'s "trace"."""
        return TraceInfo(self.path, self.format, len(self.ranks), self.world_size, self.devices, self.warnings,
                         self.failed)

    def record(self) -> AnalysisRecord:
        """The job as `analyze --json` prints it (encode.to_data makes it JSON)."""
        return AnalysisRecord(SCHEMA_VERSION, self.trace_info(), [r.record() for r in self.ranks], self.comparison,
                              self.verdict, self.kernel_profiles)

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `analyze --json` prints, as Python values (the public API's)."""
        return to_data(self.record())


@dataclass(frozen=True)
class TraceInfo:
    """What was loaded."""

    path: str
    format: str
    ranks: int
    world_size: int | None
    devices: list[str]
    warnings: list[str]
    failed_ranks: list[RankFailure]


@dataclass(frozen=True)
class AnalysisRecord:
    """`traceagent analyze --json`."""

    schema_version: str
    trace: TraceInfo
    ranks: list[RankRecord]  # type: ignore[valid-type]  # made from the registry
    comparison: RankComparison | None
    verdict: Verdict
    kernel_profiles: KernelProfilesResult | None  # an Nsight Compute export read with it (analyze --kernels)


def joined_on(profiled: KernelProfilesResult, rank: RankAnalysis, device: int | None = None) -> KernelProfilesResult:
    """An Nsight Compute export's kernels joined to one rank's (or one of its GPUs') kernels of the same name."""
    return joined(profiled.path, profiled.kernels, rank.rank,
                  lambda name: rank.hot_kernels(top=50, name_filter=name, device=device).top)


def analyze_trace(trace: Trace, params: AnalysisParams = AnalysisParams(),
                  source: EventSource | None = None) -> RankAnalysis:
    """Every detector on one rank (registry.run_all), its verdict among them."""
    results = run_all(trace, params.params_for)
    gaps = results.pop("gaps")  # the one gap table: kept beside the results while the events are
    return RankAnalysis(trace.meta.rank, params, trace.meta, results, counts=trace.counts(),
                        streams=sorted(int(s) for s in trace.gpu["stream"].unique()),
                        step_numbers=[int(s) for s in trace.steps["step"]],
                        has_device_activity=trace.has_device_activity, source=source, loaded=trace, kept_gaps=gaps)


@per_trace
def _gap_tables(trace: Trace) -> dict[IdleParams, pd.DataFrame]:
    """The gap tables of a Trace loaded again (RankSource.load hands back the same object while it
    keeps it), by parameters, filled as queries ask: classified once, not at every tool call, and
    gone with the Trace."""
    return {}


def reduce_job(path: str, ranks: list[RankAnalysis], params: AnalysisParams,
               failed: list[RankFailure] | None = None) -> Analysis:
    """The cross-rank step over ranks analysed anywhere: compare them; the job's verdict names the
    straggler when waiting for it costs the other ranks more than the communication threshold,
    else it is the verdict of the rank that loses the most time to the limiter most ranks share
    (for one rank: its own)."""
    ranks = sorted(ranks, key=lambda r: r.rank if r.rank is not None else -1)
    comparison = compare_ranks([r.timeline for r in ranks], params.stragglers)
    return Analysis(path=path, ranks=ranks, verdict=_job_verdict(ranks, comparison, params.verdict),
                    comparison=comparison, failed=failed or [])


def _job_verdict(ranks: list[RankAnalysis], comparison: RankComparison | None, params: VerdictParams) -> Verdict:
    active = [r for r in ranks if r.verdict.limiter is not None]
    if not active:
        return ranks[0].verdict if ranks else no_device_verdict()
    if len(ranks) == 1:
        return ranks[0].verdict
    if comparison and comparison.straggler is not None and comparison.others_exposed_waiting_pct >= params.comm_pct:
        late = next(r for r in ranks if r.rank == comparison.straggler)
        return straggler_verdict(comparison, late.findings, late.verdict, late.timeline.frames, params)
    counts: dict[str, int] = {}
    for r in active:
        if r.verdict.limiter is not None:  # `active` holds only those
            counts[r.verdict.limiter] = counts.get(r.verdict.limiter, 0) + 1
    limiter = max(counts, key=counts.__getitem__)
    chosen = max((r for r in active if r.verdict.limiter == limiter), key=lambda r: _loss(r, limiter))
    v = chosen.verdict
    evidence = v.evidence.copy()
    evidence["rank"] = chosen.rank
    evidence["limiter_by_rank"] = {str(r.rank): r.verdict.limiter for r in ranks}
    return replace(v, headline=f"{v.headline} (rank {chosen.rank}; {counts[limiter]} of {len(ranks)} ranks share "
                               "this limiter)", evidence=evidence)


def _loss(r: RankAnalysis, limiter: str) -> float:
    f = r.findings
    return {"idle": f.idle.idle_pct, "communication": f.comm.exposed_pct,
            "data_movement": f.memcpy.exposed_pct}.get(limiter, 100 - f.idle.idle_pct)

