"""FLOPs and achieved throughput from recorded shapes (record_shapes=True), and MFU against the
GPU's peak for the op's data type (peaks.py); bytes moved, for the roofline.

Counted: the matmul family (mm, addmm, bmm, baddbmm: 2·M·K·N per product, and M·N for the bias
addmm and baddbmm add), scaled-dot-product attention (4·B·H·L·S·E forward, twice that backward;
half of it with is_causal=True on a square score matrix), convolution forward when the trace records
stride/padding/dilation (Concrete Inputs) and convolution backward (twice the forward, its output
shape read from the incoming gradient). Wrappers (linear, matmul, conv2d) are not counted, so
nothing is counted twice. An op's device time is that of the kernels launched inside it on its
thread.

Bytes are the least traffic an op can have: each input tensor read once and each output written
once (so the achieved bandwidth is a lower bound). A counted op's arithmetic intensity (FLOP/byte)
against the GPU's ridge point (peak FLOP/s over peak memory bandwidth, for its dtype) says which
side of the roofline it sits on. Elementwise ops, norms, softmax and copies do few FLOPs: they get
their bytes and achieved bandwidth against the memory peak.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ...format import duration, flop_rate, percent, shorten, size
from ...trace.model import Trace, matches, per_trace, rows_where, texts
from ..core import intervals as iv
from ..core.host import calls_by_correlation, launch_rows, nested_in_its_name
from ..core.peaks import DTYPES, Peak, peak_for
from ..core.view import pct, rounded_rate, us
from .annotations import launched_gpu_ns
from .base import Detector
from .kernels import short_name
from .time_by_class import class_rows

TOP = 10
R = TypeVar("R")
#: the shaped ops whose FLOPs are counted; the other SHAPED_OPS get bytes only
COUNTED = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|_convolution|convolution_backward|"
                     r"_scaled_dot_product_\w+_attention(?:_backward)?)$")
#: bytes per element of the table's data types and of PyTorch's integer types
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp64": 8, "long int": 8, "int": 4, "short int": 2,
                 "signed char": 1, "unsigned char": 1, "bool": 1}
#: ops that read their tensor inputs and write one output of the broadcast shape
_ELEMENTWISE = re.compile(r"^(?:add|sub|mul|div|gelu|silu|relu|sigmoid|tanh|threshold_backward|gelu_backward|"
                          r"silu_backward|_softmax|_softmax_backward_data|copy|native_layer_norm|native_batch_norm|"
                          r"cudnn_batch_norm|native_group_norm|_fused_rms_norm)_?$")


@dataclass(frozen=True)
class OpFlops:
    """One op (by name and data type) over the trace."""

    name: str
    dtype: str  # fp32, bf16, fp16, fp8, fp64, or the trace's own word
    count: int
    gflop: float
    gpu_us: float  # its kernels' device time
    achieved_tflops: float | None
    mfu_pct: float | None  # achieved over the GPU's peak for this dtype
    gbytes: float | None = None  # the least traffic: inputs read once, outputs written once (to the byte)
    intensity_flop_per_byte: float | None = None
    roofline: str | None = None  # memory or compute: below or above the GPU's ridge point for this dtype


@dataclass(frozen=True)
class OpTraffic:
    """An op that does few FLOPs (elementwise, norm, softmax, copy): its bytes against the memory peak."""

    name: str
    dtype: str
    count: int
    gbytes: float  # the least traffic, as for OpFlops
    gpu_us: float
    achieved_gbps: float | None  # a lower bound: real kernels may move more
    memory_peak_pct: float | None  # of the GPU's peak memory bandwidth


@dataclass(frozen=True)
class KernelFlops:
    """One kernel (by name) over the trace: the FLOPs of the counted ops that launched it, shared
    among an op's kernels by their device time."""

    name: str
    short_name: str
    dtype: str
    count: int
    gflop: float
    gpu_us: float
    achieved_tflops: float | None
    mfu_pct: float | None


@dataclass(frozen=True)
class FlopsResult:
    """What the shapes say. MFU is only given with the GPU and data type it assumed."""

    shaped_ops: int  # op instances with recorded shapes that the detector reads
    counted_ops: int  # of those, with FLOPs known
    gflop: float
    gpu_us: float  # device time of the counted ops' kernels
    achieved_tflops: float | None  # gflop over that time
    gpu: str | None  # the device name, and the peak row it matched
    peak_family: str | None
    peak_source: str | None
    dtype: str | None  # the data type with the most FLOPs: the job-level MFU's
    peak_tflops: float | None
    mfu_pct: float | None  # FLOPs of that dtype over (span × GPUs × peak): model FLOPs utilization
    span_us: float
    by_op: list[OpFlops]
    note: str | None = None  # what kept FLOPs from being counted
    by_kernel: list[KernelFlops] = field(default_factory=list)
    memory_gbps: float | None = None  # the GPU's peak memory bandwidth (the peak table's source)
    ridge_flop_per_byte: float | None = None  # peak FLOP/s of `dtype` over peak memory bandwidth
    traffic: list[OpTraffic] = field(default_factory=list)  # the low-FLOP ops, most device time first
    # where an op is counted: the device time of the matmul, attention and convolution kernels (every
    # GPU of the rank), and how much of it ran outside the counted ops (0 and None where none is counted)
    compute_heavy_us: float = 0.0
    uncounted_us: float = 0.0  # of it, launched outside every op whose FLOPs are counted: work MFU leaves out
    uncounted_kernel: str | None = None  # the kernel (short name) with the most of that time
    uncounted_op: str | None = None  # the op that launched most of that kernel's time
    uncounted_pct: float = 0.0  # uncounted_us of compute_heavy_us


def op_flops(name: str, shapes: str) -> tuple[float | None, str]:
    """(FLOPs or None, dtype) of one op instance from its recorded [dims, types, concrete]. Shapes
    come from the trace: anything malformed counts as unknown, never as an error."""
    try:
        dims, types, concrete = json.loads(shapes)
    except (ValueError, TypeError):
        return None, "unknown"
    first = next((str(t) for t in types if t), "") if isinstance(types, list) else ""
    dtype = DTYPES.get(first, first or "unknown")
    try:
        flops = _flops(name.removeprefix("aten::"), dims, concrete if isinstance(concrete, list) else None)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return None, dtype
    return (float(flops), dtype) if flops is not None and math.isfinite(flops) and flops > 0 else (None, dtype)


def op_bytes(name: str, shapes: str) -> float | None:
    """The least bytes one op instance moves (inputs read once, outputs written once), or None
    where its shapes or data type do not say."""
    try:
        dims, types, concrete = json.loads(shapes)
        first = next((str(t) for t in types if t and t not in ("Scalar", "ScalarList")), "")
        size = ELEMENT_BYTES.get(DTYPES.get(first, first))
        elements = _elements(name.removeprefix("aten::"), dims, concrete if isinstance(concrete, list) else None)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return None
    if size is None or elements is None or not math.isfinite(elements) or elements <= 0:
        return None
    return float(elements * size)


def _numel(shape) -> int:
    return math.prod(shape) if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape) else 0


def _elements(op: str, dims: list[Any], concrete: list[Any] | None) -> float | None:
    """Elements read and written by one op (see op_bytes)."""
    n = [_numel(d) for d in dims]
    if op in ("mm", "bmm"):
        out = math.prod(dims[0][:-1]) * dims[1][-1]
        return n[0] + n[1] + out
    if op in ("addmm", "baddbmm"):
        out = math.prod(dims[1][:-1]) * dims[2][-1]
        return n[0] + n[1] + n[2] + out
    if op.startswith("_scaled_dot_product_"):
        if op.endswith("_backward"):  # grad_out, q, k, v, out read; dq, dk, dv written
            return n[0] + 2 * (n[1] + n[2] + n[3]) + n[4]
        q, v = dims[0], dims[2]
        return n[0] + n[1] + n[2] + math.prod(q[:-1]) * v[-1]
    if op == "convolution_backward":  # grad_out, input, weight read; grad_input, grad_weight written
        return n[0] + 2 * (n[1] + n[2])
    if op == "_convolution":
        flops = _conv_forward(dims, concrete)
        if flops is None:
            return None
        w = dims[1]
        out = flops / (2.0 * w[1] * math.prod(w[2:]))  # each output element is one dot product of that length
        return n[0] + n[1] + out
    if op == "copy_":  # (destination, source)
        return n[0] + n[1]
    if _ELEMENTWISE.match(op):  # tensor inputs read, one output of the largest input's shape written
        tensors = [x for x in n if x]
        return sum(tensors) + max(tensors) if tensors else None
    return None


#: where each attention op takes `is_causal` among its inputs (PyTorch's schemas), so that its
#: recorded Concrete Inputs say whether half the score matrix is masked out
_CAUSAL_ARG = {
    "_scaled_dot_product_flash_attention": 4, "_scaled_dot_product_flash_attention_for_cpu": 4,
    "_scaled_dot_product_efficient_attention": 6, "_scaled_dot_product_cudnn_attention": 6,
    "_scaled_dot_product_fused_attention_overrideable": 5,
    "_scaled_dot_product_flash_attention_backward": 11, "_scaled_dot_product_flash_attention_for_cpu_backward": 7,
    "_scaled_dot_product_efficient_attention_backward": 11, "_scaled_dot_product_cudnn_attention_backward": 14,
    "_scaled_dot_product_fused_attention_overrideable_backward": 13,
}


def causal_share(op: str, concrete: list[Any] | None, length: int, keys: int) -> float:
    """The share of the L×S score matrix an attention op computes: 1, or for `is_causal=True`
    (read from its Concrete Inputs) the lower triangle PyTorch keeps (`tril`, aligned top-left):
    one half for a square one, as FlashAttention's and TraceLens's FLOP counts take it, and row i's
    min(i+1, S) keys otherwise."""
    at = _CAUSAL_ARG.get(op)
    if at is None or not concrete or len(concrete) <= at or str(concrete[at]).strip().lower() != "true":
        return 1.0
    if length == keys:
        return 0.5
    kept = length * (length + 1) / 2 if length <= keys else keys * (keys + 1) / 2 + (length - keys) * keys
    return kept / (length * keys)


def _flops(op: str, dims: list[Any], concrete: list[Any] | None) -> float | None:
    if op == "mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * k * n
    if op == "addmm":  # bias + mat1 @ mat2: the product, and the bias added to each output element
        (m, k), (_, n) = dims[1], dims[2]
        return 2.0 * m * k * n + m * n
    if op == "bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2.0 * b * m * k * n
    if op == "baddbmm":
        (b, m, k), (_, _, n) = dims[1], dims[2]
        return 2.0 * b * m * k * n + b * m * n
    if op.startswith("_scaled_dot_product_"):
        q, k, v = (dims[1], dims[2], dims[3]) if op.endswith("_backward") else (dims[0], dims[1], dims[2])
        b, h, length, e = q
        s, ev = k[-2], v[-1]
        forward = (2.0 * b * h * length * s * e + 2.0 * b * h * length * s * ev) * causal_share(op, concrete, length, s)
        return 2 * forward if op.endswith("_backward") else forward
    if op == "convolution_backward":  # (grad_output, input, weight, ...): the output's shape is known
        out, weight = dims[0], dims[2]
        return 2 * _conv(out[0], out[1], weight, math.prod(out[2:]))
    if op == "_convolution":
        return _conv_forward(dims, concrete)
    return None


def _conv(batch: int, out_channels: int, weight: list[int], out_pixels: int) -> float:
    # weight: [out_channels, in_channels / groups, *kernel]: each output element is a dot product
    return 2.0 * batch * out_channels * weight[1] * math.prod(weight[2:]) * out_pixels


def _conv_forward(dims: list[Any], concrete: list[Any] | None) -> float | None:
    """Forward convolution: the output size needs stride, padding and dilation (Concrete Inputs)."""
    if not concrete or len(concrete) < 6:
        return None
    stride, padding, dilation = (json.loads(concrete[i]) if concrete[i] else None for i in (3, 4, 5))
    if not all(isinstance(x, list) for x in (stride, padding, dilation)):
        return None
    x, w = dims[0], dims[1]
    spatial = [(size + 2 * p - d * (k - 1) - 1) // s + 1
               for size, k, s, p, d in zip(x[2:], w[2:], stride or [], padding or [], dilation or [])]
    return _conv(x[0], w[0], w, math.prod(spatial))


def per_op(ops: pd.DataFrame, cost: Callable[[str, str], R]) -> list[R]:
    """`cost(name, shapes)` for each shaped op row, worked out once per distinct (name, shapes):
    an op repeats its shapes every step. Pairs are told apart by their category codes."""
    name, shapes = ops["name"].array, ops["shapes"].array
    pair = name.codes.astype(np.int64) * (len(shapes.categories) + 1) + shapes.codes
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    names, shaped = texts(ops["name"]), texts(ops["shapes"])
    once = [cost(names[i], shaped[i]) for i in first]
    return [once[i] for i in inverse.ravel()]


@per_trace  # the throughput detector and counted_ops (the shapes detector's too) read them
def _recorded(trace: Trace) -> pd.DataFrame:
    """The host ops with recorded shapes, less those called inside one of their name (its work,
    kernels and bytes are the outer one's: counted twice, an aten::div's bytes ran at 119% of the
    GPU's memory bandwidth)."""
    cpu = trace.cpu
    recorded = cpu[cpu["shapes"].notna().to_numpy()]
    return recorded[~nested_in_its_name(recorded)]


@per_trace
def counted_ops(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ops whose FLOPs are counted (COUNTED, with recorded shapes), and beside them a table
    of each one's name, dtype, FLOPs and least bytes (NaN: not known) and the device ns of the
    kernels launched inside it: what the throughput and the shapes detectors both read."""
    ops = _recorded(trace)
    ops = ops[matches(ops["name"], COUNTED)]
    computed = per_op(ops, lambda n, s: (*op_flops(n, s), op_bytes(n, s)))
    gpu_ns, _ = launched_gpu_ns(trace, ops)
    return ops, pd.DataFrame({"name": texts(ops["name"]), "dtype": [d for _, d, _ in computed],
                              "flops": np.array([f if f is not None else np.nan for f, _, _ in computed]),
                              "bytes": np.array([b if b is not None else np.nan for _, _, b in computed]),
                              "gpu_ns": gpu_ns})


def detect_flops(trace: Trace, span_us: float, devices: int) -> FlopsResult:
    """FLOPs of the shaped ops, their achieved TFLOP/s, and MFU over the rank's span; their bytes
    and roofline side; the low-FLOP ops' bytes and achieved bandwidth."""
    recorded = _recorded(trace)
    low_flop = recorded[~matches(recorded["name"], COUNTED)]
    shaped, table = counted_ops(trace)
    names = next(iter(trace.meta.devices.values()), None)
    peak = peak_for(names) if names else None
    memory_gbps = peak.hbm_gbps if peak else None
    traffic = _traffic(trace, low_flop, memory_gbps)
    known_rows = table["flops"].notna().to_numpy()
    # with no op counted there is no rate to qualify: the kernels are not read for it
    uncounted = _uncounted_compute(trace, shaped[known_rows]) if known_rows.any() else {}
    if shaped.empty:
        return FlopsResult(0, 0, 0.0, 0.0, None, names, peak.gpu if peak else None, peak.source if peak else None,
                           None, None, None, span_us, [],
                           "no recorded shapes: profile with torch.profiler.profile(record_shapes=True)"
                           if recorded.empty else "no matmul, attention or convolution ops with recorded shapes",
                           memory_gbps=memory_gbps, traffic=traffic, **uncounted)
    known = table[known_rows]
    rows = []
    for (name, dtype), group in known.groupby(["name", "dtype"]):
        gpu = float(group["gpu_ns"].sum())
        achieved = group["flops"].sum() / gpu / 1e3 if gpu else None  # FLOP/ns → TFLOP/s
        moved = float(group["bytes"].sum()) if group["bytes"].notna().all() else None
        intensity = float(group["flops"].sum()) / moved if moved else None
        ridge = _ridge(peak, dtype)
        rows.append(OpFlops(name, dtype, len(group), round(float(group["flops"].sum()) / 1e9, 3), us(gpu),
                            rounded_rate(float(achieved)) if achieved else None, _mfu(achieved, peak, dtype),
                            round(moved / 1e9, 9) if moved else None, round(intensity, 2) if intensity else None,
                            ("memory" if intensity < ridge else "compute") if intensity and ridge else None))
    rows.sort(key=lambda r: -r.gflop)
    total, gpu_total = float(known["flops"].sum()), float(known["gpu_ns"].sum())
    dtype = str(known.groupby("dtype")["flops"].sum().idxmax()) if len(known) else None
    peak_tflops = peak.tflops.get(dtype) if peak and dtype else None
    mfu = None
    if peak_tflops and span_us:  # FLOPs of the main dtype over the whole span of every GPU of the rank
        main = float(known.loc[known["dtype"] == dtype, "flops"].sum())
        mfu = round(100.0 * main / (span_us * 1e-6 * devices) / (peak_tflops * 1e12), 2)
    note = None
    unknown = table.loc[table["flops"].isna(), "name"]
    if len(unknown):
        why = ("forward convolutions need the stride and padding that PyTorch ≥ 2.1 records as Concrete Inputs"
               if (unknown == "aten::_convolution").all() else "their recorded shapes could not be read")
        note = f"{len(unknown)} shaped ops have no FLOPs count ({why})"
    if peak is None:
        note = (note + "; " if note else "") + f"no peak throughput is known for {names or 'this GPU'}: no MFU"
    ridge = _ridge(peak, dtype) if dtype else None
    return FlopsResult(len(table), len(known), round(total / 1e9, 3), us(gpu_total),
                       rounded_rate(total / gpu_total / 1e3) if gpu_total else None, names,
                       peak.gpu if peak else None, peak.source if peak else None, dtype, peak_tflops, mfu, span_us,
                       rows[:TOP], note, _by_kernel(trace, shaped[known_rows], known, peak),
                       memory_gbps, round(ridge, 1) if ridge else None, traffic, **uncounted)


def _uncounted_compute(trace: Trace, counted: pd.DataFrame) -> dict[str, Any]:
    """The device time of the compute-heavy kernels (matmul, attention, convolution: time_by_class)
    and the part launched outside every counted op, with the kernel and op that lead it: MFU over
    the counted ops leaves that work out (a custom op such as a fused MoE, a graph replay, an op
    with no recorded shapes), so it is a lower bound by that much."""
    gpu = trace.gpu
    heavy = class_rows(gpu, ["compute_heavy"]) & (gpu["kind"] == "kernel").to_numpy()
    rows = rows_where(gpu[["name", "op", "start", "end", "correlation"]], heavy)
    dur = (rows["end"].to_numpy(np.int64) - rows["start"].to_numpy(np.int64)).clip(0)
    outside = np.ones(len(rows), dtype=bool)
    at = launch_rows(trace, rows["correlation"].to_numpy())
    calls = calls_by_correlation(trace)
    launched = np.flatnonzero(at >= 0)
    call_start, call_tid = calls["start"].to_numpy()[at[launched]], calls["tid"].to_numpy()[at[launched]]
    op_tid = counted["tid"].to_numpy()
    for tid in np.unique(op_tid):  # the threads that ran counted ops: a few
        mine = op_tid == tid
        spans = iv.union(counted["start"].to_numpy(np.int64)[mine], counted["end"].to_numpy(np.int64)[mine])
        here = call_tid == tid
        t = call_start[here].astype(np.int64)
        outside[launched[here]] = iv.covered(spans, t, t + 1) == 0  # the launch call starts inside a counted op
    lost = np.bincount(rows["name"].array.codes[outside], weights=dur[outside],
                       minlength=len(rows["name"].array.categories)) if outside.any() else np.zeros(0)
    kernel = op = None
    if len(lost) and lost.max() > 0:
        lead = int(lost.argmax())
        kernel = short_name(str(rows["name"].array.categories[lead]))
        of_lead = outside & (rows["name"].array.codes == lead) & (rows["op"].array.codes >= 0)
        if of_lead.any():
            by_op = np.bincount(rows["op"].array.codes[of_lead], weights=dur[of_lead])
            op = str(rows["op"].array.categories[int(by_op.argmax())])
    heavy_ns, lost_ns = int(dur.sum()), int(dur[outside].sum())
    return {"compute_heavy_us": us(heavy_ns), "uncounted_us": us(lost_ns), "uncounted_kernel": kernel,
            "uncounted_op": op, "uncounted_pct": pct(lost_ns, heavy_ns)}


def _ridge(peak: Peak | None, dtype: str) -> float | None:
    """The roofline's ridge point for a dtype: peak FLOP/s over peak memory bandwidth (FLOP/byte)."""
    rate = peak.tflops.get(dtype) if peak else None
    return rate * 1e12 / (peak.hbm_gbps * 1e9) if peak and rate and peak.hbm_gbps else None


#: an op's least bytes over its kernels' time above this share of the memory's peak cannot be right
#: (the shapes say nothing of strides: a broadcast input reads far less than its shape); a little
#: above 1 allows for traces timed to the microsecond
OVER_PEAK = 1.05


def _traffic(trace: Trace, ops: pd.DataFrame, memory_gbps: float | None) -> list[OpTraffic]:
    """The low-FLOP ops by name and dtype: their least bytes over their kernels' time."""
    if ops.empty:
        return []
    computed = per_op(ops, lambda n, s: (op_bytes(n, s), op_flops(n, s)[1]))
    gpu_ns, _ = launched_gpu_ns(trace, ops)
    table = pd.DataFrame({"name": texts(ops["name"]), "dtype": [d for _, d in computed],
                          "bytes": [b if b is not None else np.nan for b, _ in computed], "gpu_ns": gpu_ns})
    table = table[table["bytes"].notna() & (table["gpu_ns"] > 0)]  # ops that launched no device work say nothing
    out = []
    for (name, dtype), group in table.groupby(["name", "dtype"]):
        gpu, moved = float(group["gpu_ns"].sum()), float(group["bytes"].sum())
        gbps = moved / gpu if gpu else None  # bytes/ns = GB/s
        if gbps and memory_gbps and gbps > OVER_PEAK * memory_gbps:
            continue  # faster than the memory can go: the shapes overstate the bytes (an expanded, broadcast input)
        out.append(OpTraffic(name, dtype, len(group), round(moved / 1e9, 9), us(gpu),
                             round(gbps, 1) if gbps else None,
                             round(100.0 * gbps / memory_gbps, 2) if gbps and memory_gbps else None))
    return sorted(out, key=lambda r: -r.gpu_us)[:TOP]


def _by_kernel(trace: Trace, ops: pd.DataFrame, known: pd.DataFrame, peak) -> list[KernelFlops]:
    """Each counted op's FLOPs shared among the kernels launched inside it (on its thread), by
    their device time; then summed per kernel name."""
    if ops.empty:
        return []
    calls = calls_by_correlation(trace).reset_index()
    kernels = rows_where(trace.gpu, (trace.gpu["kind"] == "kernel").to_numpy())
    launched = kernels[["name", "correlation", "start", "end"]].merge(
        calls[["correlation", "start", "tid"]], on="correlation", suffixes=("", "_call"))
    rows = []
    op_flops_ = known["flops"].to_numpy()
    op_gpu = known["gpu_ns"].to_numpy()
    op_dtype = known["dtype"].to_numpy()
    for tid, group in launched.groupby("tid"):
        mine = np.flatnonzero((ops["tid"] == tid).to_numpy())
        if not len(mine):
            continue
        order = mine[np.argsort(ops["start"].to_numpy()[mine])]
        starts, ends = ops["start"].to_numpy()[order], ops["end"].to_numpy()[order]
        at = group["start_call"].to_numpy()
        slot = np.searchsorted(starts, at, side="right") - 1
        inside = (slot >= 0) & (at <= ends[np.clip(slot, 0, None)])
        owner = order[slot[inside]]
        dur = (group["end"] - group["start"]).to_numpy()[inside].astype(float)
        share = np.where(op_gpu[owner] > 0, dur / np.maximum(op_gpu[owner], 1), 0.0)
        rows.append(pd.DataFrame({"name": group["name"].astype(str).to_numpy()[inside], "dtype": op_dtype[owner],
                                  "flops": op_flops_[owner] * share, "dur": dur}))
    if not rows:
        return []
    by = pd.concat(rows).groupby(["name", "dtype"])  # apart: pandas' named aggregation costs twice as much
    table = by[["flops", "dur"]].sum().assign(count=by.size()).reset_index()
    table = table.sort_values("flops", ascending=False).head(TOP)
    out = []
    for t in table.itertuples():
        achieved = t.flops / t.dur / 1e3 if t.dur else None
        out.append(KernelFlops(t.name, short_name(t.name), t.dtype, int(t.count), round(float(t.flops) / 1e9, 3),
                               us(t.dur), rounded_rate(float(achieved)) if achieved else None, _mfu(achieved, peak, t.dtype)))
    return out


def _mfu(achieved: float | None, peak, dtype: str) -> float | None:
    rate = peak.tflops.get(dtype) if peak else None
    return round(100.0 * float(achieved) / rate, 2) if achieved and rate else None


def flops_sentence(flops: FlopsResult | None) -> str | None:
    """What the recorded shapes say about throughput, with the GPU, dtype and peak MFU assumed;
    None when the trace has no shapes."""
    if not flops or not flops.shaped_ops:
        return None
    if not flops.counted_ops:
        return f"{flops.shaped_ops} ops have recorded shapes, but none could be counted: {flops.note}."
    achieved = (f"{flop_rate(flops.achieved_tflops)} achieved" if flops.achieved_tflops is not None
                else "no throughput: their kernels did not run in the trace (a graph capture records launches only)")
    text = (f"Ops with recorded shapes ({flops.counted_ops} of {flops.shaped_ops} counted): "
            f"{flops.gflop:.1f} GFLOP in {duration(flops.gpu_us)} of their kernels, {achieved}")
    if flops.mfu_pct is not None:
        text += (f"; MFU {percent(flops.mfu_pct)} over the span ({flops.dtype} on {flops.peak_family}, "
                 f"peak {flops.peak_tflops:g} TFLOP/s per GPU: {flops.peak_source})")
    uncounted = uncounted_sentence(flops)
    return (text + "." + (f" {uncounted}" if uncounted else "") + (f" Not counted: {flops.note}." if flops.note else "")
            + roofline(flops))


#: compute-heavy kernel time outside the counted ops worth saying (%): less is the odd graph replay
UNCOUNTED_PCT = 5.0


def uncounted_sentence(flops: FlopsResult) -> str | None:
    """'A lower bound: 88.2% of the 6.65 ms in matmul, attention and convolution kernels ran outside
    the counted ops, …', or None where nearly all of it ran inside them."""
    if not flops.counted_ops or flops.uncounted_pct < UNCOUNTED_PCT:
        return None
    lead = (f" (led by `{shorten(flops.uncounted_kernel, 60)}`" + (f" from `{flops.uncounted_op}`"
                                                                   if flops.uncounted_op else "") + ")"
            if flops.uncounted_kernel else "")
    what = ("MFU and the achieved rate are lower bounds" if flops.mfu_pct is not None
            else "The achieved rate is the counted ops' alone")
    return (f"{what}: {percent(flops.uncounted_pct)} of the {duration(flops.compute_heavy_us)} in matmul, attention and "
            f"convolution kernels ({duration(flops.uncounted_us)}) ran outside the counted ops{lead}, its FLOPs "
            "unknown (a custom or fused op, a CUDA graph replay, or an op recorded without shapes).")


def roofline(flops: FlopsResult) -> str:
    """' Roofline (least bytes: inputs read once, outputs written once): aten::mm 662 FLOP/byte, …'"""
    placed = [o for o in flops.by_op if o.intensity_flop_per_byte is not None][:3]
    text = ""
    if placed:
        ridge = (f" against {flops.peak_family}'s {flops.dtype} ridge point of {flops.ridge_flop_per_byte:g} FLOP/byte "
                 f"({flops.peak_tflops:g} TFLOP/s over {flops.memory_gbps:g} GB/s)" if flops.ridge_flop_per_byte else "")
        text += (f" Roofline (bytes as the least traffic: inputs read once, outputs written once){ridge}: "
                 + "; ".join(f"{o.name} ({o.dtype}) {o.intensity_flop_per_byte:g} FLOP/byte"
                             + (f", {o.roofline}-bound" if o.roofline else "") for o in placed) + ".")
    moving = [t for t in flops.traffic if t.achieved_gbps][:3]
    if moving:
        text += (" Low-FLOP ops (memory-bound by nature): "
                 + "; ".join(f"{t.name} ({t.dtype}) moved at least {size(t.gbytes * 1e9)} in {duration(t.gpu_us)}, "
                             f"{t.achieved_gbps:g} GB/s"
                             + (f" ({percent(t.memory_peak_pct)} of the {flops.memory_gbps:g} GB/s peak)"
                                if t.memory_peak_pct is not None else "") for t in moving) + ".")
    return text


DETECTOR = Detector("flops", "Throughput", "FLOPs from recorded shapes, achieved FLOP/s and MFU.", None, FlopsResult,
                    lambda i, p: detect_flops(i.trace, i["breakdown"].total.span_us, len(i["breakdown"].devices)),
                    reads=("breakdown",), place=16, tool=False,
                    sentence=lambda r, p: flops_sentence(r))
