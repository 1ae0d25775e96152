"""What each tool answers, as types: the offline analyst reads these fields (a renamed field is a
type error, not a KeyError at run time), and their projection (`projected`) is the JSON the model
reads, units in the keys, with a key left out where it does not apply (never a null the model must
interpret). An answer that reshapes a result for the model (short kernel names, a list cut to
MAX_ITEMS, a per-step share) says so in fields of its own, set from its sources in __post_init__.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, replace
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from ..detect.compare.diff import DiffResult, OpChange
from ..detect.compare.scaling import ScalingResult
from ..detect.core.encode import to_data
from ..detect.core.host import GapHost, HostEvent
from ..detect.detectors.annotations import AnnotationsResult
from ..detect.detectors.breakdown import Breakdown
from ..detect.detectors.comm import CommResult
from ..detect.detectors.flops import FlopsResult, KernelFlops
from ..detect.detectors.graphs import GraphsResult
from ..detect.detectors.idle import IdleLine, SyncSite
from ..detect.detectors.kernel_profiles import KernelProfile, KernelProfilesResult
from ..detect.detectors.kernels import HotKernel, KernelsResult, OpHost, short_name
from ..detect.detectors.launch import LaunchResult
from ..detect.detectors.memcpy import MemcpyResult
from ..detect.detectors.memory import DeviceMemory, MemoryResult
from ..detect.detectors.steps import StepRow, StepsResult
from ..detect.detectors.stragglers import RankComparison
from ..detect.detectors.window import DeviceWindow
from ..detect.verdict.diagnose import Verdict
from ..detect.verdict.savings import Saving
from ..detect.verdict.whatif import WhatIfResult

if TYPE_CHECKING:
    from ..detect.analysis import Analysis, RankAnalysis, TraceInfo

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
    own keys (a result's, at the top), one marked SOURCE none (what the answer was built from, for
    the offline analyst), any other its value under its name, a None left out."""


INLINE = {"json": "inline"}  # field metadata: the value's own keys, not the field's name
SOURCE = {"json": "source"}  # field metadata: read by the offline analyst, not sent to the model


def key(name: str) -> dict[str, str]:
    """Field metadata: sent under `name` (where the field's own name is a source's)."""
    return {"json": "key", "key": name}


def projected(answer: Projection) -> dict:
    out: dict = {}
    for f in fields(answer):  # type: ignore[arg-type]  # every Projection is a dataclass
        value = getattr(answer, f.name)
        if value is None or f.metadata.get("json") == "source":
            continue
        if f.metadata.get("json") == "inline":
            out |= plain(value)
        else:  # a key already inlined keeps its place, with the answer's value
            out[f.metadata.get("key", f.name)] = plain(value)
    return out


def _set(answer: Projection, **values: Any) -> None:
    """Set a frozen answer's derived fields (from __post_init__)."""
    for name, value in values.items():
        object.__setattr__(answer, name, value)


def plain(value: Any) -> Any:
    """An answer (or any result) as JSON values: its projection, else the result's fields
    (encode.to_data)."""
    if isinstance(value, Projection):
        return projected(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return to_data(value)


@dataclass(frozen=True)
class OverviewBreakdown(Projection):
    """A rank's breakdown without its steps (the steps tool has them), its GPUs those asked for."""

    total: Breakdown = field(metadata=INLINE)
    devices: dict[int, Breakdown]
    exclusive_us: dict[str, float]


@dataclass(frozen=True)
class RankOverview(Projection):
    source: RankAnalysis = field(metadata=SOURCE)
    device: int | None = field(metadata=SOURCE)  # one GPU's breakdown only
    rank: int | None = field(init=False)
    breakdown: OverviewBreakdown = field(init=False)
    counts: dict[str, int] = field(init=False)
    limiter: str | None = field(init=False)
    root_cause: str | None = field(init=False)

    def __post_init__(self) -> None:
        r = self.source
        _set(self, rank=r.rank, counts=r.counts, limiter=r.verdict.limiter, root_cause=r.verdict.root_cause,
             breakdown=OverviewBreakdown(r.breakdown.total, self.devices, r.breakdown.exclusive_us))

    @property
    def devices(self) -> dict[int, Breakdown]:
        """Each GPU's breakdown (of the one asked for)."""
        return {d: b for d, b in self.source.breakdown.devices.items() if self.device in (None, d)}


@dataclass(frozen=True)
class VerdictHeadline:
    limiter: str | None
    root_cause: str | None
    headline: str
    rank: int | None


@dataclass(frozen=True)
class OverviewAnswer(Projection):
    analysis: Analysis = field(metadata=SOURCE)
    trace: TraceInfo = field(init=False)
    ranks: list[RankOverview]
    verdict: VerdictHeadline = field(init=False)
    unavailable: list[Unavailable]

    def __post_init__(self) -> None:
        v = self.analysis.verdict
        _set(self, trace=self.analysis.trace_info(), verdict=VerdictHeadline(v.limiter, v.root_cause, v.headline, v.rank))


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
    by_line: list[IdleLine] = field(default_factory=list)  # the rank's (whole-rank scope only): idle by the user's line
    # the matching gaps' mean and median length ("what is the average gap between kernels?"); None without gaps
    mean_gap_us: float | None = None
    median_gap_us: float | None = None


@dataclass(frozen=True)
class HostActivityAnswer(Projection):
    scope: Scope
    window_us: float
    events: list[HostEvent]  # the busiest host events in the window
    note: str | None = None
    start_us: float | None = None  # the window, µs from the trace's first event (as asked)
    end_us: float | None = None


@dataclass(frozen=True)
class DeviceActivityAnswer(Projection):
    scope: Scope
    start_us: float  # the window, µs from the trace's first event (as asked)
    end_us: float
    devices: list[DeviceWindow]  # each GPU asked about: its busy time, idle by cause and top ops in the window


@dataclass(frozen=True)
class CopiesAnswer(Projection):
    copies: MemcpyResult = field(metadata=INLINE)  # its by_kind holds only the kind asked for, if one was
    scope: Scope
    note: str | None = None


@dataclass(frozen=True)
class CollectiveRow:
    short_name: str
    count: int
    total_us: float


@dataclass(frozen=True)
class CommAnswer(Projection):
    comm: CommResult = field(metadata=INLINE)  # its top collectives by full name: `top` shortens them
    scope: Scope
    comparison: RankComparison | None = field(metadata=SOURCE)  # across ranks
    unavailable: Unavailable | None = None
    note: str | None = None
    top: list[CollectiveRow] = field(init=False)
    ranks: RankComparison | None = field(init=False)  # the comparison's first MAX_ITEMS ranks

    def __post_init__(self) -> None:
        c = self.comparison
        _set(self, top=[CollectiveRow(short_name(t["name"]), t["count"], t["total_us"]) for t in self.comm.top],
             ranks=replace(c, ranks=c.ranks[:MAX_ITEMS]) if c else None)


#: a hot kernel as the model reads it unless it asks for full names: without the templated name
ShortKernel = make_dataclass("ShortKernel", [(f.name, f.type) for f in fields(HotKernel) if f.name != "name"],
                             frozen=True)


@dataclass(frozen=True)
class KernelRow(Projection):
    kernel: HotKernel = field(metadata=SOURCE)
    python: str | None  # the user's line that launched it (None: unknown, or no frames)
    flops: KernelFlops | None = field(metadata=SOURCE)  # from recorded shapes, over the rank's GPUs
    full_name: bool = field(metadata=SOURCE)  # whether the model asked for the templated name
    shown: Any = field(init=False, metadata=INLINE)  # the kernel, or its ShortKernel
    achieved_tflops: float | None = field(init=False)
    mfu_pct: float | None = field(init=False)
    dtype: str | None = field(init=False)

    def __post_init__(self) -> None:
        k, f = self.kernel, self.flops
        _set(self, shown=k if self.full_name else ShortKernel(**{f.name: getattr(k, f.name) for f in fields(ShortKernel)}),
             achieved_tflops=f.achieved_tflops if f else None, mfu_pct=f.mfu_pct if f else None,
             dtype=f.dtype if f else None)


@dataclass(frozen=True)
class KernelsAnswer(Projection):
    kernels: KernelsResult = field(metadata=INLINE)  # its top by full name: `top` is the rows shown
    top: list[KernelRow]
    scope: Scope
    order_by: str
    unavailable: Unavailable | None = None
    note: str | None = None
    op_host: OpHost | None = None  # with an op filter: those ops' calls and time on the host
    # with an op filter: its kernels' time over the scope's device time (every device op's duration added up)
    op_share_pct: float | None = None


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
class KernelName(Projection):
    name: str | None  # the templated name, where the model asked for full names
    short_name: str


@dataclass(frozen=True)
class InstancesAnswer(Projection):
    scope: Scope
    matching_kernels: int
    matched: list[str] = field(metadata=SOURCE)  # the full names that matched (the first few)
    full_names: bool = field(metadata=SOURCE)
    names: list[KernelName] = field(init=False)
    total_us: float
    instances: list[KernelInstance]

    def __post_init__(self) -> None:
        _set(self, names=[KernelName(n if self.full_names else None, short_name(n)) for n in self.matched])


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
    kernels_per_step: float | None = None  # the steps' mean kernels (StepsResult.kernels_per_step; None without steps)


@dataclass(frozen=True)
class StepShare(Projection):
    row: StepRow = field(metadata=INLINE)
    vs_median_pct: float | None  # its host time against the median step's


@dataclass(frozen=True)
class StepsAnswer(Projection):
    steps: StepsResult | None = field(metadata=INLINE)  # None: the trace marks no steps
    scope: Scope
    unavailable: Unavailable | None = None
    count: int | None = field(init=False)  # 0 without steps (the steps' own count otherwise)
    shown: list[StepShare] | None = field(init=False, metadata=key("steps"))  # the first MAX_ITEMS

    def __post_init__(self) -> None:
        _set(self, count=0 if self.steps is None else None,
             shown=[StepShare(r, self.vs_median_pct(r)) for r in self.rows] if self.steps else None)

    def vs_median_pct(self, row: StepRow) -> float | None:
        """A step's host time against the median step's, in percent."""
        median = self.steps.median_us if self.steps else None
        return round((row.host_us / median - 1) * 100, 2) if median else None

    @property
    def rows(self) -> list[StepRow]:
        return self.steps.steps[:MAX_ITEMS] if self.steps else []


@dataclass(frozen=True)
class FlopsAnswer(Projection):
    flops: FlopsResult | None = field(metadata=INLINE)
    scope: Scope
    unavailable: Unavailable | None = None


@dataclass(frozen=True)
class MemoryAnswer(Projection):
    memory: MemoryResult | None = field(metadata=INLINE)
    device: int | None = field(metadata=SOURCE)
    shown: list[DeviceMemory] = field(init=False, metadata=key("devices"))  # the GPUs asked for, steps cut
    scope: Scope
    unavailable: Unavailable | None = None

    def __post_init__(self) -> None:
        _set(self, shown=[replace(d, step_net_bytes=d.step_net_bytes[:MAX_ITEMS]) for d in self.devices])

    @property
    def devices(self) -> list[DeviceMemory]:
        found = self.memory.devices if self.memory else []
        return [d for d in found if self.device in (None, d.device)]


@dataclass(frozen=True)
class AnnotationsAnswer(Projection):
    annotations: AnnotationsResult | None = field(metadata=INLINE)  # None: the trace has no annotations
    scope: Scope
    unavailable: Unavailable | None = None
    no_ranges: list[str] | None = field(init=False, metadata=key("ranges"))  # [] without annotations

    def __post_init__(self) -> None:
        _set(self, no_ranges=[] if self.annotations is None else None)


@dataclass(frozen=True)
class CompareAnswer(Projection):
    diff: DiffResult = field(metadata=INLINE)
    scope: Scope
    op: OpChange | None = None  # with an op asked of: its kernels in both traces


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
class CalcAnswer(Projection):
    expression: str
    unit: str
    key: str = field(metadata=SOURCE)  # the result's key names its unit: result_us, result_pct, … (result for a count)
    result: float = field(metadata=SOURCE)
    keyed: dict[str, float] = field(init=False, metadata=INLINE)

    def __post_init__(self) -> None:
        _set(self, keyed={self.key: self.result})


@dataclass(frozen=True)
class WhatIfAnswer(Projection):
    """A change replayed on one rank's dependency graph (verdict/whatif.py)."""

    result: WhatIfResult = field(metadata=INLINE)
    scope: Scope


@dataclass(frozen=True)
class KernelProfilesAnswer(Projection):
    """Nsight Compute's reading of the profiled kernels (those matching a filter, if given)."""

    profiles: KernelProfilesResult | None = field(metadata=SOURCE)
    path: str | None = field(init=False)
    kernels: list[KernelProfile] = field(metadata=SOURCE)
    scope: Scope  # where the trace's kernels were matched
    shown: list[KernelProfile] | None = field(init=False, metadata=key("kernels"))  # the first MAX_ITEMS
    unmatched: list[str] | None = field(init=False)
    unavailable: Unavailable | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        p = self.profiles
        _set(self, path=p.path if p else None, shown=self.kernels[:MAX_ITEMS] if p else None,
             unmatched=(p.unmatched or None) if p else None)


Answer = (OverviewAnswer | VerdictAnswer | IdleGapsAnswer | HostActivityAnswer | DeviceActivityAnswer | CopiesAnswer
          | CommAnswer | KernelsAnswer | InstancesAnswer | LaunchesAnswer | StepsAnswer | FlopsAnswer | MemoryAnswer
          | AnnotationsAnswer | CompareAnswer | ScalingAnswer | DetectorAnswer | CalcAnswer | KernelProfilesAnswer
          | WhatIfAnswer)
