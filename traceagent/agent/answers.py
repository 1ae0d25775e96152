"""What each tool answers, as types: the offline analyst reads these fields (a renamed field is a
type error, not a KeyError at run time), and `to_dict` is the JSON the model reads, units in the
keys, with a key left out where it does not apply (never a null the model must interpret).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from ..detect.compare.diff import DiffResult
from ..detect.compare.scaling import ScalingResult
from ..detect.core.encode import to_data
from ..detect.core.host import GapHost, HostEvent
from ..detect.detectors.annotations import AnnotationsResult
from ..detect.detectors.breakdown import Breakdown
from ..detect.detectors.comm import CommResult
from ..detect.detectors.flops import FlopsResult, KernelFlops
from ..detect.detectors.graphs import GraphsResult
from ..detect.detectors.idle import SyncSite
from ..detect.detectors.kernel_profiles import KernelProfile, KernelProfilesResult
from ..detect.detectors.kernels import HotKernel, KernelsResult, short_name
from ..detect.detectors.launch import LaunchResult
from ..detect.detectors.memcpy import MemcpyResult
from ..detect.detectors.memory import DeviceMemory, MemoryResult
from ..detect.detectors.steps import StepRow, StepsResult
from ..detect.detectors.stragglers import RankComparison
from ..detect.verdict.diagnose import Verdict
from ..detect.verdict.savings import Saving
from ..detect.verdict.whatif import WhatIfResult

if TYPE_CHECKING:
    from ..detect.analysis import Analysis, RankAnalysis

MAX_ITEMS = 25  # the longest list a tool returns


class Scope(TypedDict, total=False):
    """Who a tool's numbers belong to: the rank, the GPU ("all" of the rank's) and the rank's GPUs."""

    rank: int | str | None
    device: int | str
    devices: list[int]
    window: str  # a step or range the answer is about alone ("step 5", "forward #2")


class Unavailable(TypedDict):
    """What the trace cannot tell: what was asked, why it is not there, how to profile so it is."""

    what: str
    why: str
    how_to_get_it: str


class Projection:
    """An answer whose JSON is its fields, in order (`projected`): a field marked INLINE gives its
    own keys (a result's, at the top), any other its value under its name, a None left out."""


INLINE = {"json": "inline"}  # field metadata: the value's own keys, not the field's name


def projected(answer: Projection) -> dict:
    out: dict = {}
    for f in fields(answer):  # type: ignore[arg-type]  # every Projection is a dataclass
        value = getattr(answer, f.name)
        if value is None:
            continue
        if f.metadata.get("json") == "inline":
            out |= plain(value)
        else:
            out[f.name] = plain(value)
    return out


def plain(value: Any) -> Any:
    """An answer (or any result) as JSON values: its projection, else the result's fields
    (encode.to_data)."""
    if isinstance(value, Projection):
        return projected(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return to_data(value)


def _present(**items: Any) -> dict:
    """The items that apply (not None), as JSON values."""
    return {k: plain(v) for k, v in items.items() if v is not None}


@dataclass(frozen=True)
class RankOverview:
    rank: RankAnalysis
    device: int | None  # one GPU's breakdown only

    @property
    def devices(self) -> dict[int, Breakdown]:
        """Each GPU's breakdown (of the one asked for)."""
        return {d: b for d, b in self.rank.breakdown.devices.items() if self.device in (None, d)}

    def to_dict(self) -> dict:
        breakdown = to_data(self.rank.breakdown) | {"steps": None}
        breakdown["devices"] = {str(d): to_data(b) for d, b in self.devices.items()}
        return {"rank": self.rank.rank, "breakdown": breakdown, "counts": self.rank.counts,
                "limiter": self.rank.verdict.limiter, "root_cause": self.rank.verdict.root_cause}


@dataclass(frozen=True)
class OverviewAnswer:
    analysis: Analysis
    ranks: list[RankOverview]
    unavailable: list[Unavailable]

    def to_dict(self) -> dict:
        v = self.analysis.verdict
        return {"trace": self.analysis.trace_info(), "ranks": [r.to_dict() for r in self.ranks],
                "verdict": {"limiter": v.limiter, "root_cause": v.root_cause, "headline": v.headline, "rank": v.rank},
                "unavailable": self.unavailable}


@dataclass(frozen=True)
class VerdictAnswer(Projection):
    verdict: Verdict = field(metadata=INLINE)
    savings: list[Saving]  # every finding's, largest first
    device_breakdown: Breakdown | None = None
    scope: Scope | None = None


@dataclass(frozen=True)
class GapRow(Projection):
    start_us: float  # from the trace's first event
    ts_us: float  # on the trace's own clock
    dur_us: float
    cause: str
    device: int
    # what the thread that launched the next work was doing (not for launch latency)
    host: GapHost | None = field(metadata=INLINE)


@dataclass(frozen=True)
class IdleTotals(Projection):
    """Idle time in a scope: a rank's GPUs together, or one GPU over its own span."""

    idle_us: float
    span_us: float
    device_time_us: float | None  # a rank's (its GPUs' spans added up); None for one GPU
    idle_pct: float
    gaps: int
    by_cause_us: dict[str, float]
    by_cause_pct: dict[str, float] | None  # of the rank's device time; None for one GPU (idle_pct is of its span)
    by_cause_count: dict[str, int]

    @property
    def whole_us(self) -> float:
        """What idle_pct is of."""
        return self.device_time_us if self.device_time_us is not None else self.span_us


@dataclass(frozen=True)
class IdleGapsAnswer(Projection):
    totals: IdleTotals = field(metadata=INLINE)
    scope: Scope
    launch_gap_us: float
    sync_sites: list[SyncSite]
    unavailable: Unavailable | None
    matching_gaps: int | None  # None: the scope has no device activity
    matching_idle_us: float | None
    top_gaps: list[GapRow]
    note: str | None = None


@dataclass(frozen=True)
class HostActivityAnswer(Projection):
    scope: Scope
    window_us: float
    events: list[HostEvent]  # the busiest host events in the window
    note: str | None = None


@dataclass(frozen=True)
class CopiesAnswer(Projection):
    copies: MemcpyResult = field(metadata=INLINE)  # its by_kind holds only the kind asked for, if one was
    scope: Scope
    note: str | None = None


@dataclass(frozen=True)
class CommAnswer:
    comm: CommResult
    scope: Scope
    comparison: RankComparison | None  # across ranks (its first MAX_ITEMS ranks)
    unavailable: Unavailable | None = None
    note: str | None = None

    def to_dict(self) -> dict:
        data = to_data(self.comm) | {"scope": self.scope}
        data["top"] = [{"short_name": short_name(c["name"]), "count": c["count"], "total_us": c["total_us"]}
                       for c in self.comm.top]
        ranks = None
        if self.comparison:
            ranks = to_data(self.comparison)
            ranks["ranks"] = ranks["ranks"][:MAX_ITEMS]
        return data | _present(note=self.note, ranks=ranks, unavailable=self.unavailable)


@dataclass(frozen=True)
class KernelRow:
    kernel: HotKernel
    python: str | None  # the user's line that launched it (None: unknown, or no frames)
    flops: KernelFlops | None  # from recorded shapes, over the rank's GPUs
    full_name: bool  # whether the model asked for the templated name

    def to_dict(self) -> dict:
        row = to_data(self.kernel) | {"python": self.python}
        if self.flops:
            row |= {"achieved_tflops": self.flops.achieved_tflops, "mfu_pct": self.flops.mfu_pct,
                    "dtype": self.flops.dtype}
        if not self.full_name:
            del row["name"]
        return row


@dataclass(frozen=True)
class KernelsAnswer:
    kernels: KernelsResult
    top: list[KernelRow]
    scope: Scope
    order_by: str
    unavailable: Unavailable | None = None
    note: str | None = None

    def to_dict(self) -> dict:
        k = self.kernels
        return {"kernels": k.kernels, "distinct": k.distinct, "total_us": k.total_us,
                "top": [row.to_dict() for row in self.top], "scope": self.scope,
                "order_by": self.order_by} | _present(unavailable=self.unavailable, note=self.note)


@dataclass(frozen=True)
class KernelInstance:
    start_us: float
    ts_us: float
    dur_us: float
    device: int
    stream: int
    op: str | None
    launch_to_start_us: float | None


@dataclass(frozen=True)
class InstancesAnswer:
    scope: Scope
    matching_kernels: int
    names: list[str]  # the full names that matched (the first few)
    full_names: bool
    total_us: float
    instances: list[KernelInstance]

    def to_dict(self) -> dict:
        names = [{"name": n, "short_name": short_name(n)} if self.full_names else {"short_name": short_name(n)}
                 for n in self.names]
        return {"scope": self.scope, "matching_kernels": self.matching_kernels, "names": names,
                "total_us": self.total_us, "instances": plain(self.instances)}


@dataclass(frozen=True)
class LaunchesAnswer(Projection):
    launch: LaunchResult = field(metadata=INLINE)
    scope: Scope
    launch_overhead_idle_us: float
    launch_latency_idle_us: float
    launch_gap_us: float
    launch_overhead_idle_pct: float | None  # of the rank's device time (None for one GPU of several)
    graphs: GraphsResult | None  # None (left out): the trace replays no CUDA graph
    note: str | None = None


@dataclass(frozen=True)
class StepsAnswer:
    steps: StepsResult | None  # None: the trace marks no steps
    scope: Scope
    unavailable: Unavailable | None = None

    def vs_median_pct(self, row: StepRow) -> float | None:
        """A step's host time against the median step's, in percent."""
        median = self.steps.median_us if self.steps else None
        return round((row.host_us / median - 1) * 100, 2) if median else None

    @property
    def rows(self) -> list[StepRow]:
        return self.steps.steps[:MAX_ITEMS] if self.steps else []

    def to_dict(self) -> dict:
        if self.steps is None:
            return _present(scope=self.scope, count=0, unavailable=self.unavailable)
        data = to_data(self.steps) | {"scope": self.scope}
        data["steps"] = [to_data(row) | {"vs_median_pct": self.vs_median_pct(row)} for row in self.rows]
        return data


@dataclass(frozen=True)
class FlopsAnswer(Projection):
    flops: FlopsResult | None = field(metadata=INLINE)
    scope: Scope
    unavailable: Unavailable | None = None


@dataclass(frozen=True)
class MemoryAnswer:
    memory: MemoryResult | None
    device: int | None
    scope: Scope
    unavailable: Unavailable | None = None

    @property
    def devices(self) -> list[DeviceMemory]:
        found = self.memory.devices if self.memory else []
        return [d for d in found if self.device in (None, d.device)]

    def to_dict(self) -> dict:
        data = to_data(self.memory) if self.memory else {}
        data["devices"] = [to_data(d) | {"step_net_bytes": d.step_net_bytes[:MAX_ITEMS]} for d in self.devices]
        return data | _present(scope=self.scope, unavailable=self.unavailable)


@dataclass(frozen=True)
class AnnotationsAnswer:
    annotations: AnnotationsResult | None  # None: the trace has no annotations
    scope: Scope
    unavailable: Unavailable | None = None

    def to_dict(self) -> dict:
        if self.annotations is None:
            return _present(scope=self.scope, ranges=[], unavailable=self.unavailable)
        return to_data(self.annotations) | {"scope": self.scope}


@dataclass(frozen=True)
class CompareAnswer(Projection):
    diff: DiffResult = field(metadata=INLINE)
    scope: Scope


@dataclass(frozen=True)
class ScalingAnswer(Projection):
    """How the job scales between the two runs loaded (detect/compare/scaling.py)."""

    result: ScalingResult = field(metadata=INLINE)


@dataclass(frozen=True)
class DetectorAnswer(Projection):
    """A registered detector's result for one rank as analysed (None where the trace cannot say)."""

    result: Any = field(metadata=INLINE)
    scope: Scope
    unavailable: Unavailable | None = None


@dataclass(frozen=True)
class CalcAnswer:
    expression: str
    unit: str
    key: str  # the result's key names its unit: result_us, result_pct, … (result for a count)
    result: float

    def to_dict(self) -> dict:
        return {"expression": self.expression, "unit": self.unit, self.key: self.result}


@dataclass(frozen=True)
class WhatIfAnswer(Projection):
    """A change replayed on one rank's dependency graph (verdict/whatif.py)."""

    result: WhatIfResult = field(metadata=INLINE)
    scope: Scope


@dataclass(frozen=True)
class KernelProfilesAnswer:
    """Nsight Compute's reading of the profiled kernels (those matching a filter, if given)."""

    profiles: KernelProfilesResult | None
    kernels: list[KernelProfile]
    scope: Scope  # where the trace's kernels were matched
    unavailable: Unavailable | None = None
    note: str | None = None

    def to_dict(self) -> dict:
        if self.profiles is None:
            return _present(scope=self.scope, unavailable=self.unavailable)
        return _present(path=self.profiles.path, scope=self.scope,
                        kernels=[plain(k) for k in self.kernels[:MAX_ITEMS]], unmatched=self.profiles.unmatched or None,
                        note=self.note)


Answer = (OverviewAnswer | VerdictAnswer | IdleGapsAnswer | HostActivityAnswer | CopiesAnswer | CommAnswer
          | KernelsAnswer | InstancesAnswer | LaunchesAnswer | StepsAnswer | FlopsAnswer | MemoryAnswer
          | AnnotationsAnswer | CompareAnswer | ScalingAnswer | DetectorAnswer | CalcAnswer | KernelProfilesAnswer
          | WhatIfAnswer)
