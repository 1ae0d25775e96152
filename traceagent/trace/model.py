"""The normalized trace model: one `Trace` per rank, pandas frames with typed columns.

Times are integer nanoseconds on the trace's own clock. String columns are categorical so a
name is stored once, however many events carry it. See DESIGN.md, "The Trace model".
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

#: Bounds past which a loaded value is damage, not data: times (ns) and one copy's byte count. Both
#: keep sums over a trace inside int64. Every loader drops events beyond them and counts them.
MAX_TIME_NS = 2**61
MAX_COPY_BYTES = 2**48  # 256 TB in one copy

GPU_COLUMNS: dict[str, str] = {
    "kind": "category",  # kernel, memcpy, memset, sync (CUPTI synchronization records: not device work)
    "name": "category",
    "device": "int32",
    "stream": "int64",
    "start": "int64",
    "end": "int64",
    "correlation": "int64",  # -1 when unknown
    "external_id": "int64",  # the op that launched it; -1 when unknown
    "op": "category",  # name of that op, when the trace has it
    "bytes": "int64",  # copies and memsets; 0 otherwise
    "copy_kind": "category",  # HtoD, DtoH, DtoD, HtoH, PtoP
    "src_kind": "category",  # pageable, pinned, device, managed, array, unknown
    "dst_kind": "category",
    "is_comm": "bool",
    "op_from": "category",  # how `op` was found: launch (the op around its launch call); for kernels replayed
    # from a CUDA graph: capture (the op around its launch in the graph's capture), kernel name (the op that
    # launches it outside graphs); missing: no op found
    "rank": "int32",  # merged multi-rank files: the rank that recorded it; -1 in a one-rank file
    # NCCL/RCCL kernels whose trace records their payload: a JSON object {"name", "in_nelems",
    # "out_nelems", "group_size", "dtype", "group", "group_ranks"} as written (detect/detectors/collectives.py)
    "collective": "category",
    # a kernel's launch (NaN where the trace does not say): its grid's blocks per SM (Kineto's, or an Nsight
    # export's grid over its GPU's SM count; under 1 the grid cannot fill the GPU) and Kineto's estimated
    # achieved occupancy, in % of the SM's warps
    "blocks_per_sm": "float32",
    "occupancy": "float32",
}

CPU_COLUMNS: dict[str, str] = {
    "kind": "category",  # runtime, driver, op, python, annotation, dataloader
    "name": "category",
    "pid": "int64",
    "tid": "int64",
    "start": "int64",
    "end": "int64",
    "depth": "int32",  # nesting depth on its thread, 0 = outermost
    "correlation": "int64",
    "external_id": "int64",
    "stack": "category",  # "Call stack" of old with_stack traces, innermost frame first
    "rank": "int32",  # as for device activity
    "shapes": "category",  # ops in SHAPED_OPS recorded with record_shapes: JSON [dims, types, concrete inputs]
    "kernel": "category",  # launch calls: the kernel launched, where the trace records it (a graph capture's launches)
}

#: The ops whose recorded shapes the loaders keep: those the FLOPs detector counts (matmul family,
#: convolution, scaled-dot-product attention, forward and backward) and those whose bytes it
#: estimates for the roofline (elementwise, norms, softmax, copies). Others' shapes are not read.
SHAPED_OPS = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|_convolution|convolution_backward|"
                        r"_scaled_dot_product_\w+_attention(?:_backward)?|"
                        r"(?:add|sub|mul|div|gelu|silu|relu|sigmoid|tanh|threshold_backward|gelu_backward|"
                        r"silu_backward|_softmax|_softmax_backward_data|copy)_?|"
                        r"native_layer_norm|native_layer_norm_backward|native_batch_norm|cudnn_batch_norm|"
                        r"native_group_norm|_fused_rms_norm)$")

MEMORY_COLUMNS: dict[str, str] = {
    "device": "int32",  # the GPU; -1 for host memory
    "time": "int64",  # ns on the trace clock
    "bytes": "int64",  # allocated (+) or freed (−) by this event
    "allocated": "int64",  # the allocator's total after it; -1 when the trace does not say (old traces)
    "reserved": "int64",  # the caching allocator's reserved total; -1 when unknown
    "rank": "int32",  # as for device activity
}

METRIC_COLUMNS: dict[str, str] = {
    "device": "int32",  # the CUDA device
    "time": "int64",  # ns on the trace clock: the end of the sampling period the value covers
    "metric": "category",  # model.GPU_METRICS' keys: pcie_rx_pct, nvlink_tx_pct, sm_active_pct, ...
    "value": "float64",  # % of the unit's peak over the period
}

#: Nsight Systems GPU metrics the loaders keep (--gpu-metrics-devices), as % of peak. NVLink's user
#: data in requests and in responses (writes and read returns) are added into one direction.
GPU_METRICS = {
    "pcie_rx_pct": "PCIe received by the GPU", "pcie_tx_pct": "PCIe sent by the GPU",
    "nvlink_rx_pct": "NVLink received", "nvlink_tx_pct": "NVLink sent", "sm_active_pct": "SMs active",
    "tensor_active_pct": "tensor cores active", "dram_read_pct": "DRAM read", "dram_write_pct": "DRAM write",
}

STEP_COLUMNS: dict[str, str] = {
    "step": "int64",
    "name": "category",
    "start": "int64",  # host
    "end": "int64",
    "gpu_start": "Int64",  # device; <NA> when the step launched no device work
    "gpu_end": "Int64",
    "phase": "category",  # serving steps (SGLang, vLLM): prefill, decode, mixed; missing for training steps
    "tokens": "Int64",  # serving steps: tokens (SGLang toks=, else bs=; vLLM execute_N) the name says; <NA> otherwise
}


def categorical(values) -> pd.Categorical:
    """Strings → a categorical with plain object categories. factorize is several times faster
    than pd.Categorical on millions of names (pandas 3 infers Arrow strings for the latter)."""
    if isinstance(values, pd.Categorical):
        if values.categories.dtype == object:
            return values
        return pd.Categorical.from_codes(values.codes, categories=pd.Index(values.categories, dtype=object))
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    return pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object))


def texts(column: pd.Series) -> np.ndarray:
    """A categorical column's values as an object array of strings, NaN where missing: what
    `astype(str).to_numpy()` gives, by one take from its categories instead of a conversion per row."""
    return _per_row(column, np.asarray(column.array.categories, dtype=object), np.nan)


def among(column: pd.Series, values) -> np.ndarray:
    """Rows of a categorical column whose value is one of `values`: `isin` by its few categories
    (a tenth of pandas' cost on a small rank, where per-call overhead is most of the work)."""
    wanted = set(values)
    categories = column.array.categories
    return _per_row(column, np.fromiter((c in wanted for c in categories), dtype=bool, count=len(categories)), False)


def in_order_of_appearance(codes: np.ndarray, categories) -> pd.Categorical:
    """Codes into `categories` (-1: missing) as a categorical of the categories used, in order of
    first appearance: what `categorical` gives for the same column as strings (category order
    decides the order of groups and of ties)."""
    used, first = np.unique(codes, return_index=True)
    order = used[used >= 0][np.argsort(first[used >= 0], kind="stable")]
    new_code = np.full(len(categories) + 1, -1, dtype=codes.dtype)  # the last entry: code -1 stays -1
    new_code[order] = np.arange(len(order))
    return pd.Categorical.from_codes(new_code[codes], categories=pd.Index(np.asarray(categories, dtype=object)[order],
                                                                          dtype=object))


def matches(column: pd.Series, pattern: str | re.Pattern) -> np.ndarray:
    """Rows whose name matches a regex (re.search), testing each distinct name once."""
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    categories = column.cat.categories
    return _per_row(column, np.fromiter((bool(regex.search(str(c))) for c in categories), dtype=bool,
                                        count=len(categories)), False)


def per_category(column: pd.Series, value_of: Callable[[str], Any], missing: Any, dtype: Any) -> np.ndarray:
    """Each row of a categorical column as `value_of` its string, worked out once per distinct string;
    `missing` for rows without one (code -1)."""
    return _per_row(column, np.array([value_of(str(c)) for c in column.cat.categories], dtype=dtype), missing)


def _per_row(column: pd.Series, per_category: np.ndarray, missing: Any) -> np.ndarray:
    """A categorical column's rows looked up in `per_category` (an entry for each of its
    categories) by their codes, `missing` for rows without a value (code -1), in its dtype."""
    return np.append(per_category, np.array([missing], dtype=per_category.dtype))[column.array.codes]


def typed_frame(columns: dict[str, list | np.ndarray], schema: dict[str, str]) -> pd.DataFrame:
    """Build a frame with exactly the schema's columns and dtypes (missing ones empty/default)."""
    n = len(next(iter(columns.values()))) if columns else 0
    data = {}
    for col, dtype in schema.items():
        values = columns.get(col)
        if values is None:
            values = _default_column(dtype, n)
        if isinstance(values, np.ndarray) and _numpy_cast(values, dtype):  # ~50 µs less a column than pandas
            data[col] = values.astype(dtype, copy=False)
        elif dtype != "category":  # arrays are taken as they are, not copied (pandas 3 copies by default)
            data[col] = pd.Series(values, copy=False).astype(dtype)
        elif isinstance(values, pd.Categorical):
            data[col] = values
        else:
            data[col] = categorical(values)
    # column labels as objects: pandas 3 would make them Arrow strings, which every column lookup
    # in every detector then pays for (4% of a 20 MB rank's load and analysis)
    return pd.DataFrame(data, columns=pd.Index(list(data), dtype=object), copy=False)


def _numpy_cast(values: np.ndarray, dtype: str) -> bool:
    """Whether NumPy casts `values` to `dtype` as pandas would: numbers or bools to a NumPy dtype,
    floats not to integers (pandas refuses NaN there, NumPy makes it a number)."""
    if dtype in ("category", "Int64") or values.dtype.kind not in "biuf":
        return False
    return not (values.dtype.kind == "f" and np.dtype(dtype).kind in "iu")


#: an all-missing categorical's dtype, with n == 0 rows and with n > 0, as pd.Categorical makes them
_NO_CATEGORIES = (pd.CategoricalDtype(pd.Index([], dtype=object)), pd.CategoricalDtype(pd.Index([], dtype="float64")))


def _default_column(dtype: str, n: int):
    if dtype == "category":  # what pd.Categorical([None] * n) gives, its categories' dtype too, at a tenth of the cost
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), dtype=_NO_CATEGORIES[n > 0])
    if dtype == "bool":
        return np.zeros(n, dtype=bool)
    if dtype == "Int64":
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))  # all <NA>
    if dtype in ("float64", "float32"):
        return np.full(n, np.nan, dtype=dtype)
    if dtype.startswith("int"):
        fill = -1 if n else 0
        return np.full(n, fill, dtype=dtype)
    raise ValueError(dtype)


_Listed = TypeVar("_Listed")


def listed_for(used: list[int], listed: dict[int, _Listed]) -> dict[int, _Listed]:
    """What a trace lists per device (a name, its memory), for the devices that ran work. When it lists one
    device and the work ran on one other id (AMD traces number GPUs by their system index, 2 or 9, while
    deviceProperties says 0), that one listed device is the one in use."""
    if len(listed) == 1 and len(used) == 1 and used[0] not in listed:
        return {used[0]: next(iter(listed.values()))}
    return {d: listed[d] for d in used if d in listed}


#: an AMD GPU as devices name themselves ("AMD Instinct MI300X", "AMD Radeon PRO W7900")
_AMD_GPU = re.compile(r"\bAMD\b|\bInstinct\b|\bRadeon\b|\bMI[123]\d{2}X?\b")


@dataclass
class TraceMeta:
    """What the trace says about itself, and what the loader noticed while reading it."""

    format: str  # "kineto" or "nsys"
    path: str
    rank: int | None = None
    world_size: int | None = None
    devices: dict[int, str] = field(default_factory=dict)  # device id -> name
    device_properties: list[dict] = field(default_factory=list)
    profiler: str = ""  # e.g. "PyTorch Profiler (Kineto schema 1)" or "Nsight Systems 2026.2"
    has_python_frames: bool = False
    has_flows: bool = False  # flow events (Chrome phase "s" starts one): arrows between events, e.g. launch → kernel
    warnings: list[str] = field(default_factory=list)  # e.g. "truncated: loaded 91% of the file"

    @property
    def memory_bytes(self) -> dict[int, int]:
        """Each GPU's memory (Kineto's deviceProperties totalGlobalMem), by the ids `devices` uses (`listed_for`,
        as the names are read)."""
        listed: dict[int, int] = {}
        for p in self.device_properties:
            try:
                total = int(p["totalGlobalMem"])
                if total > 0:
                    listed[int(p["id"])] = total
            except (KeyError, TypeError, ValueError):  # a property the trace left out or wrote oddly: no total
                continue
        return listed_for(list(self.devices), listed)

    @property
    def amd(self) -> bool:
        """Whether its GPUs are AMD's (ROCm): their kernels are profiled with AMD's tools, not Nsight."""
        return any(_AMD_GPU.search(name) for name in self.devices.values())


@dataclass(eq=False)  # identity semantics: detectors memoize per-trace work in weak maps
class Trace:
    """One rank's trace: device activity, host events, steps and metadata. The device and host rows are in
    order of start (finish_trace sorts them), which detectors may rely on."""

    gpu: pd.DataFrame
    cpu: pd.DataFrame
    steps: pd.DataFrame
    meta: TraceMeta
    memory: pd.DataFrame = field(default_factory=lambda: typed_frame({}, MEMORY_COLUMNS))  # Kineto [memory] events
    metrics: pd.DataFrame = field(default_factory=lambda: typed_frame({}, METRIC_COLUMNS))  # Nsight GPU metrics

    @property
    def has_device_activity(self) -> bool:
        return bool((self.gpu["kind"] != "sync").any()) if len(self.gpu) else False

    @property
    def label(self) -> str:
        return f"rank {self.meta.rank}" if self.meta.rank is not None else Path(self.meta.path).name

    def counts(self) -> dict[str, int]:
        """Events by kind: kernels, copies, memsets, syncs, host calls, steps, memory events."""
        gpu_kinds = self.gpu["kind"].value_counts()
        return {
            "kernels": int(gpu_kinds.get("kernel", 0)),
            "memcpys": int(gpu_kinds.get("memcpy", 0)),
            "memsets": int(gpu_kinds.get("memset", 0)),
            "syncs": int(gpu_kinds.get("sync", 0)),
            "host_events": len(self.cpu),
            "runtime_calls": int(among(self.cpu["kind"], ["runtime", "driver"]).sum()),
            "steps": len(self.steps),
            "memory_events": len(self.memory),
            "gpu_metric_samples": len(self.metrics),
        }

    def origin_ns(self) -> int:
        """The trace's first timestamp: reported times are relative to it."""
        firsts = [int(f["start"].min()) for f in (self.gpu, self.cpu) if len(f)]
        return min(firsts) if firsts else 0

    def span_ns(self) -> tuple[int, int] | None:
        """First start and last end of device work (sync records excluded), or None."""
        work = self.gpu[self.gpu["kind"] != "sync"]
        if work.empty:
            return None
        return int(work["start"].min()), int(work["end"].max())


R = TypeVar("R")


def rows_where(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The rows of `frame` where `keep` holds: the frame itself when that is every row (a filter
    copies every column, and most traces have nothing to drop)."""
    return frame if bool(keep.all()) else frame[keep]


def per_trace(build: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """`build(trace)` computed once per trace and kept as long as the trace lives: what several
    detectors ask of one trace. Callers must not modify what it returns, unless it is a table
    built empty as their memo."""
    built: weakref.WeakKeyDictionary[Trace, R] = weakref.WeakKeyDictionary()

    @functools.wraps(build)
    def once(trace: Trace) -> R:
        if (found := built.get(trace)) is None:
            found = built[trace] = build(trace)
        return found

    return once


@dataclass
class Job:
    """Everything loaded from one path: one Trace per rank (a single file is a job of one)."""

    path: str
    traces: list[Trace]

    @property
    def ranks(self) -> list[int | None]:
        return [t.meta.rank for t in self.traces]

    @property
    def format(self) -> str:
        return self.traces[0].meta.format if self.traces else "unknown"

    def __len__(self) -> int:
        return len(self.traces)
