"""The JSON contract of `analyze --json` and `diff --json`: a `schema_version`, and JSON Schemas
generated (with pydantic) from the result types the detectors return, so the schema moves with the
code. `traceagent schema` prints them; the wheel ships them as traceagent/schemas/*.json.

The version changes its major number when a key is removed or changes meaning, its minor number
when keys are added.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict  # pydantic reads these on Python < 3.12

from .detect.analysis import SCHEMA_VERSION
from .detect.compare.diff import DiffResult
from .detect.detectors.annotations import AnnotationsResult
from .detect.detectors.breakdown import Breakdown, StepBreakdown
from .detect.detectors.comm import CommResult
from .detect.detectors.flops import FlopsResult
from .detect.detectors.idle import DeviceIdle, Gap, IdleParams, LaunchBound, SyncSite
from .detect.detectors.kernel_profiles import KernelProfilesResult
from .detect.detectors.kernels import HotKernel
from .detect.detectors.launch import LaunchResult
from .detect.detectors.memcpy import MemcpyResult
from .detect.detectors.memory import MemoryResult
from .detect.detectors.steps import StepsResult
from .detect.detectors.stragglers import RankComparison, StragglerParams
from .detect.detectors.workload import Workload
from .detect.registry import DETECTORS
from .detect.verdict.critical_path import CriticalPathResult
from .detect.verdict.diagnose import Verdict, VerdictParams
from .detect.verdict.savings import Saving


class FailedRank(TypedDict):
    """A rank file that could not be loaded or analysed (the other ranks were)."""

    file: str
    error: str


class TraceInfo(TypedDict):
    path: str
    format: str
    ranks: int
    world_size: int | None
    devices: list[str]
    warnings: list[str]
    failed_ranks: list[FailedRank]


class Params(TypedDict):
    idle: IdleParams
    verdict: VerdictParams
    stragglers: StragglerParams


class BreakdownJSON(TypedDict):
    """A rank's breakdown: the fields of Breakdown for all its GPUs, and these."""

    devices: dict[str, Breakdown]
    steps: list[StepBreakdown]
    exclusive_us: dict[str, float]


class NoSteps(TypedDict):
    """A rank whose trace marks no steps."""

    count: int
    mean_us: None
    max_us: None


class IdleJSON(TypedDict):
    idle_us: float
    span_us: float
    device_time_us: float
    idle_pct: float
    gaps: int
    by_cause_us: dict[str, float]
    by_cause_pct: dict[str, float]
    by_cause_count: dict[str, int]
    devices: dict[str, DeviceIdle]
    sync_sites: list[SyncSite]
    top_gaps: list[Gap]
    has_python_frames: bool
    launch_bound: list[LaunchBound]


class KernelCounts(TypedDict):
    count: int
    distinct: int
    total_us: float


class RankJSON(TypedDict):
    rank: int | None
    params: Params
    devices: dict[str, str]
    breakdown: BreakdownJSON
    idle: IdleJSON
    memcpy: MemcpyResult
    comm: CommResult
    hot_kernels: list[HotKernel]
    kernels: KernelCounts
    launch: LaunchResult
    flops: FlopsResult | None
    memory: MemoryResult | None
    graphs: GraphsJSON | None
    critical_path: CriticalPathResult | None
    annotations: AnnotationsResult | None
    steps: StepsResult | NoSteps
    workload: Workload
    savings: list[Saving]
    verdict: Verdict


class GraphsJSON(TypedDict):
    launches: int
    kernels: int
    kernels_per_launch: float | None
    device_us: float
    share_of_kernel_time_pct: float
    launch_calls_saved: int
    saved_us: float
    used: bool


class AnalysisJSON(TypedDict):
    """`traceagent analyze --json`."""

    schema_version: str
    trace: TraceInfo
    ranks: list[RankJSON]
    comparison: RankComparison | None
    verdict: Verdict
    kernel_profiles: KernelProfilesResult | None  # analyze --kernels ncu.csv


class MetricJSON(TypedDict, total=False):
    """One row of diff's metrics: units in the keys (see diff.Metric.to_dict)."""

    name: str
    before_us: float | None
    after_us: float | None
    change_us: float | None
    change_pct: float | None
    before_pct: float | None
    after_pct: float | None
    change_points: float | None


def _schema(kind: type, title: str) -> dict:
    schema = TypeAdapter(kind).json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
            "x-schema-version": SCHEMA_VERSION, **schema}


def closed(schema: Any) -> Any:
    """Every object with named properties admits no others (additionalProperties: false): a key the
    schema does not describe is an error, so the schema cannot fall behind the output unnoticed.
    Maps (dict[str, X], described by additionalProperties alone) stay maps."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


def _definition(kind: type) -> dict:
    return TypeAdapter(kind).json_schema(mode="serialization")


def analysis_schema() -> dict:
    schema = _schema(AnalysisJSON, "traceagent analyze --json")
    rank = schema["$defs"]["RankJSON"]
    for d in DETECTORS:  # each registered detector's result, under its name (None where the trace cannot say)
        one = TypeAdapter(d.result).json_schema(mode="serialization", ref_template="#/$defs/{model}")
        schema["$defs"] |= one.pop("$defs", {}) | {d.result.__name__: one}
        rank["properties"][d.name] = {"anyOf": [{"$ref": f"#/$defs/{d.result.__name__}"}, {"type": "null"}]}
        rank["required"] = [*rank.get("required", []), d.name]
    params = schema["$defs"]["Params"]
    params["properties"]["detectors"] = {"type": "object", "description": "each registered detector's parameters, by "
                                         "its name", "properties": {d.name: _definition(type(d.params))
                                                                    for d in DETECTORS}}
    params["required"] = [*params.get("required", []), "detectors"]
    # Saving.to_dict adds its sentence (the verdict's and every finding's saving)
    saving = schema["$defs"]["Saving"]
    saving["properties"]["sentence"] = {"title": "Sentence", "type": "string"}
    saving["required"] = [*saving.get("required", []), "sentence"]
    # a rank's breakdown is Breakdown's fields for all its GPUs together, and BreakdownJSON's
    breakdown, base = schema["$defs"]["BreakdownJSON"], _definition(Breakdown)
    breakdown["properties"] = {**base["properties"], **breakdown["properties"]}
    breakdown["required"] = sorted({*base.get("required", []), *breakdown.get("required", [])})
    return schema


def diff_schema() -> dict:
    schema = _schema(DiffResult, "traceagent diff --json")
    schema["properties"]["schema_version"] = {"type": "string"}
    schema["required"] = sorted({*schema.get("required", []), "schema_version"})
    schema["$defs"]["Metric"] = _definition(MetricJSON)  # written with units in its keys
    return schema


SCHEMAS = {"analyze": lambda: closed(analysis_schema()), "diff": lambda: closed(diff_schema())}
