"""Matmul, convolution and attention per unique shape (record_shapes=True): which shape is slow.

Each counted op's instances (flops.COUNTED) are grouped by op, shape (M×K×N for a matmul, with
the batch for bmm; the input and weight for a convolution; B, heads, L, S, E and whether it is
causal for attention) and data type: calls, device time, achieved TFLOP/s over all its calls and
the slowest and fastest call, achieved TB/s of its least traffic, and MFU against the GPU's peak
for its dtype. A shape whose throughput is under `slow_pct` of the best shape of the same op and
dtype is slow, and the time it loses is what it would take at that best shape's rate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ...format import counted, duration, flop_rate
from ...trace.model import Trace
from ..core.bounds import Count, Percent
from ..core.peaks import peak_for
from ..core.view import rounded_rate, us
from .base import Detector
from .flops import causal_share, counted_ops, per_op


@dataclass(frozen=True)
class ShapesParams:
    """slow_pct: a shape whose TFLOP/s is under this share of the best shape's (same op and dtype)
    is slow. top: how many shapes to list."""

    slow_pct: Percent = 50.0
    top: Count = 20


@dataclass(frozen=True)
class ShapeRow:
    """One op at one shape and dtype, over its calls."""

    op: str  # aten::mm, aten::_scaled_dot_product_flash_attention, …
    shape: str  # "M=4096 K=4096 N=4096", "B=16 H=16 L=559 S=559 E=64 causal", …
    dtype: str
    calls: int
    gpu_us: float  # its kernels' device time, all calls
    gflop: float
    tflops: float  # over all its calls
    min_tflops: float  # its slowest call
    max_tflops: float  # its fastest call
    tbps: float | None  # its least traffic over its device time
    mfu_pct: float | None  # of the GPU's dense peak for the dtype
    of_best_pct: float  # its TFLOP/s as a share of the best shape's of the same op and dtype
    lost_us: float  # device time beyond what it would take at the best shape's rate
    slow: bool


@dataclass(frozen=True)
class ShapesResult:
    gpu: str | None  # the peak table's GPU (MFU's denominator), or None
    shapes: int  # distinct (op, shape, dtype)
    rows: list[ShapeRow]  # most device time first
    slow: list[ShapeRow]  # the slow ones, most time lost first


def shape_key(name: str, shapes: str) -> str | None:
    """The shape that sets an op's cost, in words, from its recorded [dims, types, concrete]."""
    try:
        dims, _, concrete = json.loads(shapes)
        op = name.removeprefix("aten::")
        if op in ("mm", "addmm"):
            (m, k), (_, n) = dims[0 if op == "mm" else 1][:2], dims[1 if op == "mm" else 2][:2]
            return f"M={m} K={k} N={n}"
        if op in ("bmm", "baddbmm"):
            (b, m, k), (_, _, n) = dims[0 if op == "bmm" else 1][:3], dims[1 if op == "bmm" else 2][:3]
            return f"B={b} M={m} K={k} N={n}"
        if op.startswith("_scaled_dot_product_"):
            q, k = (dims[1], dims[2]) if op.endswith("_backward") else (dims[0], dims[1])
            b, h, length, e = q
            causal = causal_share(op, concrete if isinstance(concrete, list) else None, length, k[-2]) < 1
            return f"B={b} H={h} L={length} S={k[-2]} E={e}" + (" causal" if causal else "")
        if op in ("_convolution", "convolution_backward"):
            # (grad_output, input, weight, bias_sizes, stride, …) backward; (input, weight, bias, stride, …) forward
            backward = op == "convolution_backward"
            x, w = (dims[1], dims[2]) if backward else (dims[0], dims[1])
            at = 4 if backward else 3
            stride = concrete[at] if isinstance(concrete, list) and len(concrete) > at and concrete[at] else None
            return f"in={x} weight={w}" + (f" stride={stride}" if stride else "")
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return None


def detect_shapes(trace: Trace, params: ShapesParams = ShapesParams()) -> ShapesResult | None:
    """None when no counted op has recorded shapes and device time."""
    ops, counted = counted_ops(trace)
    if ops.empty:
        return None
    table = counted.rename(columns={"name": "op"}).assign(shape=per_op(ops, shape_key))
    table = table[table["flops"].notna() & table["shape"].notna() & (table["gpu_ns"] > 0)]
    if table.empty:
        return None
    # TFLOP/s of each call; bytes not known counted per group (a group's TB/s needs them all)
    table = table.assign(rate=table["flops"] / table["gpu_ns"] / 1e3, bytes_unknown=table["bytes"].isna())
    by = table.groupby(["op", "shape", "dtype"], sort=False)  # apart: pandas' named aggregation costs twice as much
    grouped = by[["gpu_ns", "flops", "bytes", "bytes_unknown"]].sum().assign(
        calls=by.size(), min_rate=by["rate"].min(), max_rate=by["rate"].max())
    grouped["bytes_known"] = grouped["bytes_unknown"] == 0
    grouped["tflops"] = grouped["flops"] / grouped["gpu_ns"] / 1e3
    best = grouped.groupby(level=["op", "dtype"])["tflops"].transform("max")
    names = next(iter(trace.meta.devices.values()), None)
    peak = peak_for(names) if names else None
    rows = []
    for (op, shape, dtype), g in grouped.iterrows():  # one row per distinct shape, not per event
        of_best = float(100.0 * g["tflops"] / best[(op, shape, dtype)])
        lost = float(g["gpu_ns"] - g["flops"] / (best[(op, shape, dtype)] * 1e3))
        rate = peak.tflops.get(dtype) if peak else None
        rows.append(ShapeRow(str(op), str(shape), str(dtype), int(g["calls"]), us(float(g["gpu_ns"])),
                             round(float(g["flops"]) / 1e9, 3), rounded_rate(float(g["tflops"])),
                             rounded_rate(float(g["min_rate"])), rounded_rate(float(g["max_rate"])),
                             round(float(g["bytes"] / g["gpu_ns"] / 1e3), 4) if g["bytes_known"] else None,
                             round(100.0 * float(g["tflops"]) / rate, 2) if rate else None, round(of_best, 2),
                             us(max(lost, 0.0)), bool(of_best < params.slow_pct)))
    rows.sort(key=lambda r: -r.gpu_us)
    slow = sorted((r for r in rows if r.slow), key=lambda r: -r.lost_us)
    return ShapesResult(peak.gpu if peak else None, len(rows), rows[:params.top], slow[:params.top])


def shapes_sentence(result: ShapesResult) -> str | None:
    if not result.slow:
        top = result.rows[0]
        return (f"{result.shapes} matmul, convolution and attention shapes; none is under half the best shape's "
                f"throughput of its op; the most time: {top.op} {top.shape} ({top.dtype}), {duration(top.gpu_us)} "
                f"at {flop_rate(top.tflops)}.")
    s = result.slow[0]
    mfu = f", {s.mfu_pct:g}% MFU on {result.gpu}" if s.mfu_pct is not None else ""
    return (f"The slowest shape for its op: {s.op} {s.shape} ({s.dtype}) runs at {flop_rate(s.tflops)}{mfu}, "
            f"{s.of_best_pct:.0f}% of that op's best shape: {duration(s.lost_us)} lost over its {counted(s.calls, 'call')}. "
            "Pad its dimensions to multiples of 64 (8 for fp16/bf16 tensor cores at least), or batch such calls.")


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("shapes", "Shapes", "Matmul, convolution and attention per unique shape (M×K×N, the attention dims, "
                    "the convolution's input and weight) and dtype: calls, device time, achieved TFLOP/s (all calls, the "
                    "slowest, the fastest), TB/s, MFU, and which shapes run at under half their op's best shape (slow, "
                    "with the time they lose).",
                    ShapesParams(), ShapesResult, lambda i, p: detect_shapes(i.trace, p),
                    lambda r, p: shapes_sentence(r), since="2.0",
                    needs=("no matmul, convolution or attention op has recorded shapes and device time",
                           "profile with torch.profiler.profile(record_shapes=True)"),
                    asks=r"\bshapes?\b|\bm\s*[x×/]\s*n\s*[x×/]\s*k\b|which (?:matmul|gemm|conv\w*|attention)s?\b.{0,30}"
                         r"\b(?:slow|fast)|(?:slow|slowest|worst) (?:matmul|gemm|conv\w*|attention)")
