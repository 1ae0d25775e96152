"""The math kernels' precision and whether they run on tensor cores, from their names: the answer
to "are my matmuls on tensor cores?", "is this running in fp32?", "is TF32 on?" on any trace,
recorded shapes or not.

The math kernels are the matmul, attention and convolution device ops (time_by_class's classes),
less the layout, cast and cache kernels among them. A kernel's name says its precision: the library's
type codes (`bf16`, `h884`, `s1688` for TF32, `e4m3`, `sgemm` and `scudnn` for fp32, Tensile's
`Cijk_…_BBS_…`) or its template arguments (`<float, …>`, `cutlass::bfloat16_t`); the narrowest
format it names wins (an fp8 GEMM also names its bf16 output). It runs on tensor (AMD: matrix)
cores where its name says so (`tensorop`, `wmma`, `gmma`, `nvjet`, `xdlops`, `MI16x16x1`) or its
format has only a tensor-core path; fp32 and fp64 math otherwise runs on the plain cores (SIMT),
where autocast or TF32 would put it on tensor cores. Names are read once each (categorical codes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import percent, shorten
from ...text import code, md_prose, md_table
from ...trace.model import Trace, rows_where
from ..core.asked import asks_yes_or_no
from ..core.peaks import autocast_dtype, peak_for
from ..core.view import pct, us
from .base import Detector
from .kernels import distinct_labels, short_name
from .time_by_class import class_rows, kernel_class

#: a math kernel's precision from its full name (lower-cased), first match wins: the narrowest format first
PRECISIONS = [(name, re.compile(pattern)) for name, pattern in [
    ("fp4", r"e2m1|fp4"),
    ("fp8", r"e4m3|e5m2|f8f8|fp8(?!kvcache)|^cijk_a[a-z]+_b[a-z]+_f8"),
    ("int8", r"i8816|imma|int8|i8i8|s8s8|^cijk_a[a-z]+_b[a-z]+_i8"),
    ("bf16", r"bf16|bfloat16|^cijk_a[a-z]+_b[a-z]+_b"),
    ("fp16", r"fp16|f16|half|h884|h1688|h16816|hgemm|hmma|^cijk_a[a-z]+_b[a-z]+_h"),
    ("tf32", r"tf32|xf32|s1688|s16816"),
    ("fp64", r"dgemm|dmma|d884|\bdouble\b|fp64|f64|^cijk_a[a-z]+_b[a-z]+_d"),
    ("fp32", r"sgemm|scudnn|simt|ffma|\bfloat\b|fp32|f32|^cijk_a[a-z]+_b[a-z]+_s"),
]]
#: the formats whose math has only a tensor-core path on the GPUs that have them
TENSOR_FORMATS = ("fp4", "fp8", "int8", "bf16", "fp16", "tf32")
#: names that say tensor (matrix) core instructions whatever the format
_TENSOR_UNITS = re.compile(r"tensorop|wmma|hmma|imma|dmma|gmma|xdl|mfma|_mi\d+x\d+|tensor\d+x\d+|[shid]884|[shi]1688|"
                           r"[shi]16816|i8816|nvjet|utcmma|tcgen|umma")
#: names that say the plain cores (SIMT, fused multiply-add) whatever the format
_PLAIN_UNITS = re.compile(r"simt|ffma|sgemm|scudnn|dgemm")
#: matrix-vector products: memory-bound in any format, on no tensor-core path
_VECTOR_MATH = re.compile(r"gemv|dot_kernel")
#: kernels in a math class that do none of its math: layout changes, casts, KV-cache writes, index setup
_NOT_MATH = re.compile(r"reshape_and_cache|kv_?cache|create_\w*indices|nchw_?(?:2|to)_?nhwc|nhwc_?(?:2|to)_?nchw|transpose|"
                       r"epilogue|computeoffsets")
_MATH_CLASSES = ("gemm", "attention", "convolution")
#: shares below this round to 0.0% and are left out of the sentence (kept in the result)
SHOWN_PCT = 0.05
#: the fp32 share of math time from which the sentence says how to move it to tensor cores
ADVISED_PCT = 10.0
#: kernels named for an architecture before the A100 (no bf16, no TF32), where the trace names no GPU
_BEFORE_AMPERE = re.compile(r"(?:^|_)(?:maxwell|pascal|volta|turing)_|^sm_?7[0-5]_")


@dataclass(frozen=True)
class PrecisionTime:
    precision: str  # fp4, fp8, int8, bf16, fp16, tf32, fp32, fp64, or unknown (the name does not say)
    time_us: float
    share_pct: float  # of PrecisionResult.math_us
    top_kernel: str  # its kernel with the most time (a readable name)


@dataclass(frozen=True)
class PrecisionResult:
    """Per rank, every GPU of it: device time is the ops' durations added up."""

    math_us: float  # the math kernels' durations added up: the shares' denominator
    math_pct: float  # of the rank's device time
    precisions: list[PrecisionTime]  # most time first
    tensor_core_pct: float  # of math_us: on tensor (matrix) cores, by name or by a tensor-core format
    plain_core_pct: float  # of math_us: fp32 or fp64 math on the plain cores (SIMT)
    unknown_pct: float  # of math_us: neither (a GEMV, or a name that says neither)
    plain_core_us: float
    plain_core_kernels: list[str]  # up to three, most time first
    gpu: str | None  # the device name the advice is for
    advice: str | None  # how to put the plain-core math on tensor cores on this GPU, where there is some


def _precision(lowered: str) -> str:
    return next((p for p, pattern in PRECISIONS if pattern.search(lowered)), "unknown")


def name_precisions(names: pd.Categorical) -> np.ndarray:
    """Each row's precision as its kernel's name says it ("unknown" where it says none), each
    distinct name read once."""
    said = np.array([_precision(str(n).lower()) for n in names.categories] + ["unknown"], dtype=object)
    return said[names.codes]


def _units(name: str, precision: str) -> int:
    """1: tensor cores, 0: fp32 or fp64 on the plain cores, -1: the name does not say, or a GEMV (no
    tensor-core path in any format: its bytes, not its math, bound it)."""
    if _VECTOR_MATH.search(name):
        return -1
    tensor = bool(_TENSOR_UNITS.search(name))
    if not tensor and (_PLAIN_UNITS.search(name) or precision in ("fp32", "fp64")):
        return 0 if precision in ("fp32", "fp64", "unknown") else -1
    return 1 if tensor or precision in TENSOR_FORMATS else -1


def kernel_precision(name: str) -> tuple[str, int] | None:
    """A math kernel's precision and units (1: tensor cores, 0: the plain cores, -1: not said) from its
    name ('volta_sgemm_128x64_nn': ('fp32', 0)); None for a kernel that does no math."""
    if not _is_math(name):
        return None
    lowered = name.lower()
    precision = _precision(lowered)
    return precision, _units(lowered, precision)


def _is_math(name: str) -> bool:
    own = kernel_class(name)
    return (own is None or own in _MATH_CLASSES) and not _NOT_MATH.search(short_name(name).lower())


def advice_for(gpu: str | None, before_ampere: bool = False) -> str:
    """The change that runs float32 math on tensor cores, for this GPU's formats (`before_ampere`:
    the kernels' names say a GPU older than the A100 where the trace names none)."""
    peak = peak_for(gpu) if gpu else None
    if (peak is not None and autocast_dtype(peak) != "bf16") or (peak is None and before_ampere):
        return ("autocast to fp16 (`torch.autocast(\"cuda\", dtype=torch.float16)`, with `torch.amp.GradScaler` in "
                f"training; {peak.gpu if peak else 'a GPU before the A100'} has no bf16 or TF32 tensor-core path)")
    tf32 = (" or allow TF32 for float32 matmuls (`torch.set_float32_matmul_precision(\"high\")`: the same code, "
            "on tensor cores)" if peak is None or "tf32" in peak.tflops else "")
    return f"autocast to bf16 (`torch.autocast(\"cuda\", dtype=torch.bfloat16)`){tf32}"


def detect_precision(trace: Trace) -> PrecisionResult | None:
    """None where the rank ran no math kernels."""
    gpu = trace.gpu
    ops = rows_where(gpu[["name", "op", "kind", "is_comm", "start", "end"]], (gpu["kind"] != "sync").to_numpy())
    if ops.empty:
        return None
    dur = (ops["end"].to_numpy(np.int64) - ops["start"].to_numpy(np.int64)).clip(0)
    names = ops["name"].cat.categories
    lowered = [str(n).lower() for n in names]
    # per distinct name: precision index, units, whether it does math; then one lookup per row by its code
    kinds = [p for p, _ in PRECISIONS] + ["unknown"]
    precision = np.array([kinds.index(_precision(n)) for n in lowered] + [len(kinds) - 1], dtype=np.int64)
    units = np.array([_units(n, kinds[precision[i]]) for i, n in enumerate(lowered)] + [-1], dtype=np.int64)
    math_name = np.array([_is_math(str(n)) for n in names] + [False])
    codes = ops["name"].cat.codes.to_numpy(np.int64)  # -1 (no name) takes the last entries
    math = class_rows(ops, list(_MATH_CLASSES)) & math_name[codes]
    total = int(dur[math].sum())
    if not total:
        return None
    by_precision = np.bincount(precision[codes][math], weights=dur[math], minlength=len(kinds))
    by_name = np.bincount(codes[math] + 1, weights=dur[math], minlength=len(names) + 1)[1:]
    rows = []
    for i in np.argsort(-by_precision, kind="stable"):  # eight formats, not events
        if by_precision[i] <= 0:
            break
        mine = np.where(precision[:-1] == i, by_name, 0.0)
        rows.append(PrecisionTime(kinds[i], us(by_precision[i]), pct(by_precision[i], total),
                                  distinct_labels([str(names[int(np.argmax(mine))])])[0]))
    by_units = {u: int(dur[math & (units[codes] == u)].sum()) for u in (1, 0, -1)}
    plain = np.where(units[:-1] == 0, by_name, 0.0)
    top = [int(n) for n in np.argsort(-plain, kind="stable")[:3] if plain[n] > 0]
    device = next(iter(trace.meta.devices.values()), None)
    device_total = int(dur.sum())
    return PrecisionResult(us(total), pct(total, device_total), rows, pct(by_units[1], total), pct(by_units[0], total),
                           pct(by_units[-1], total), us(by_units[0]), distinct_labels([str(names[n]) for n in top]),
                           device, advice_for(device, any(_BEFORE_AMPERE.search(n) for n in lowered))
                           if by_units[0] else None)


def precision_sentence(result: PrecisionResult) -> str:
    """'The math kernels (matmul, attention, convolution; 402.90 ms, 67.7% of device time, every GPU of
    the rank): 0.0% on tensor cores, 100.0% in fp32 or fp64 on the plain cores (led by …). By precision: …'"""
    formats = ", ".join(f"{p.precision} {percent(p.share_pct)}" for p in result.precisions if p.share_pct >= SHOWN_PCT)
    said = (f"The math kernels (matmul, attention and convolution kernels: {percent(result.math_pct)} of the rank's "
            f"device time, every GPU of it) run {percent(result.tensor_core_pct)} of their time on tensor cores")
    if result.plain_core_pct >= SHOWN_PCT:
        said += (f", {percent(result.plain_core_pct)} in fp32 or fp64 on the plain cores (led by "
                 f"{', '.join(code(shorten(k, 60)) for k in result.plain_core_kernels)})")
    if result.unknown_pct >= SHOWN_PCT:
        said += (f"; {percent(result.unknown_pct)} is neither (matrix-vector products, which no tensor core speeds "
                 "up, or kernels whose names do not say)")
    said += f". By precision: {formats}."
    if result.advice and result.plain_core_pct >= ADVISED_PCT:
        said += (f" To put that fp32 math on tensor cores, {result.advice}; `traceagent whatif TRACE --change amp` "
                 "predicts what it buys.")
    return said


def precision_section(result: PrecisionResult, params: None) -> list[str]:
    rows = [[p.precision, percent(p.share_pct), code(shorten(p.top_kernel, 70))] for p in result.precisions]
    return [md_prose(precision_sentence(result)), "", md_table(["precision", "share of math time", "top kernel"], rows)]


def precision_findings(result: PrecisionResult, on: str) -> list[tuple[str, str]]:
    """The side panel's line: the share of math time on tensor cores."""
    return [(f"math on tensor cores {percent(result.tensor_core_pct)}", f"Is the math on tensor cores{on}?")]


#: what a yes-or-no question about precision asks after, as it says it (PRECISIONS' names)
FORMATS_ASKED = [("tensor cores", r"\b(?:tensor|matrix)[- ]?cores?\b"), ("tf32", r"\btf32\b"),
                 ("mixed precision", r"\b(?:amp|autocast|mixed[- ]precision)\b"),
                 ("fp8", r"\b(?:fp8|float8|e4m3|e5m2)\b"), ("fp4", r"\b(?:fp4|nvfp4|mxfp4)\b"),
                 ("bf16", r"\b(?:bf16|bfloat16)\b"), ("fp16", r"\b(?:fp16|float16|half[- ]precision)\b"),
                 ("int8", r"\bint8\b"), ("fp32", r"\b(?:fp32|float32|single[- ]precision|full[- ]precision)\b"),
                 ("fp64", r"\b(?:fp64|float64|double[- ]precision)\b")]


def precision_lead(result: PrecisionResult, question: str) -> str | None:
    """A yes or a no where the question asks one about tensor cores or a format ("is TF32 on?", "am I using
    AMP?"), each format's share where it asks which of several ("fp8 or fp4?"); else None."""
    named = [f for f, pattern in FORMATS_ASKED if re.search(pattern, question, re.I)]
    if not named or not asks_yes_or_no(question):
        return None
    choices = [f for f in named if f not in ("tensor cores", "mixed precision")]
    if len(choices) > 1 and re.search(r"\bor\b", question, re.I):  # "fp8 or fp4?": each one's share, most first
        shares = sorted((p for p in result.precisions if p.precision in choices and p.share_pct >= SHOWN_PCT),
                        key=lambda p: -p.share_pct)
        if shares:
            return (f"**Mostly {shares[0].precision}:** "
                    + ", ".join(f"{p.precision} takes {percent(p.share_pct)}" for p in shares) + " of the math kernels' time.")
        top = next((p for p in result.precisions if p.precision != "unknown"), None)
        return (f"**Neither:** no math kernel's name says {' or '.join(choices)}"
                + (f"; the most math time is {top.precision}'s ({percent(top.share_pct)})." if top else "."))
    if named[0] == "tensor cores":
        return (f"**Yes:** {percent(result.tensor_core_pct)} of the math kernels' time runs on tensor cores."
                if result.tensor_core_pct >= 50 else
                f"**Partly:** {percent(result.tensor_core_pct)} of the math kernels' time runs on tensor cores."
                if result.tensor_core_pct >= SHOWN_PCT else "**No:** none of the math kernels' time runs on tensor cores.")
    formats = ("bf16", "fp16", "fp8", "fp4") if named[0] == "mixed precision" else (named[0],)
    shares = [p for p in result.precisions if p.precision in formats and p.share_pct >= SHOWN_PCT]
    if shares:
        return ("**Yes:** " + ", ".join(f"{p.precision} takes {percent(p.share_pct)}" for p in shares)
                + " of the math kernels' time.")
    unsaid = next((p.share_pct for p in result.precisions if p.precision == "unknown"), 0.0)
    return (f"**No:** no math kernel's name says {' or '.join(formats)}"
            + (f" (for {percent(unsaid)} of their time the names say no format)" if unsaid >= SHOWN_PCT else "") + ".")


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("precision", "Precision and tensor cores",
                    "The math kernels' (matmul, attention, convolution) precision and whether they run on tensor "
                    "cores, from their names: the share of their time per precision (fp4 … fp64, or unknown), on "
                    "tensor cores, in fp32/fp64 on the plain cores (with the kernels leading it), and the change "
                    "that would put that on tensor cores on this GPU.",
                    None, PrecisionResult, lambda i, p: detect_precision(i.trace),
                    lambda r, p: precision_sentence(r), since="2.9",
                    needs=("the rank ran no matmul, attention or convolution kernels", "profile with CUDA activities on"),
                    # what a change would buy is whatif's; the FLOP rate is flops'
                    asks=r"^(?!.*\b(?:help|buy|gain|save|faster|speed\w*|worth|mfu|flops?|utili[sz]ation|memory|"
                         r"timestamps?|clocks?|decimals?|digits?)\b)"
                         r".*(?:\b(?:tensor|matrix)[- ]?cores?\b|\btf32\b|\bprecisions?\b|\bdtypes?\b|\bdata ?types?\b|"
                         r"\b(?:fp32|float32|fp16|float16|bf16|bfloat16|fp8|fp4|int8|fp64|autocast|amp)\b|"
                         r"\b(?:half|single|full|double)[- ]precision\b)",
                    lead=precision_lead, section=precision_section, findings=precision_findings, place=66)
