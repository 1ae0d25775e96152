"""GPU time by class of work: matmuls, attention, convolutions, normalization, elementwise,
reductions, indexing, optimizer, communication, copies, other; and by nature, which says whether
the device's time goes to compute-heavy kernels or to kernels that are memory-bound by nature.

Each device op is classed by its kernel's name and by the op that launched it. The op decides where
it names a block of work (the GEMMs cuDNN runs inside a convolution are the convolution's, the
kernels under an attention op are attention's); the kernel's name decides where the op is generic
(elementwise, a wrapper, a CUDA-graph replay) or unknown. Copies and memsets are classed by kind,
collectives by their kernels. Names are classed once each (categorical codes), never per event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import counted, duration, percent, shorten, upper_first
from ...text import code, md_prose, md_table
from ...trace.model import Trace, per_category, rows_where
from ..core.view import pct, us
from .base import Detector
from .kernels import leading_kernels, short_name


@dataclass(frozen=True)
class WorkClass:
    """A class of device work: what it is called, and whether it is compute-heavy or memory-bound by nature."""

    name: str
    label: str
    nature: str  # a key of NATURES


CLASSES = {c.name: c for c in [
    WorkClass("gemm", "matmul (GEMM)", "compute_heavy"),
    WorkClass("attention", "attention", "compute_heavy"),
    WorkClass("convolution", "convolution", "compute_heavy"),
    WorkClass("normalization", "normalization", "memory_bound"),
    WorkClass("elementwise", "elementwise", "memory_bound"),
    WorkClass("reduction", "reduction (softmax, sums, sorts)", "memory_bound"),
    WorkClass("indexing", "indexing (embedding, gather, scatter)", "memory_bound"),
    WorkClass("optimizer", "optimizer", "memory_bound"),
    WorkClass("communication", "communication", "communication"),
    WorkClass("copy", "copies and memsets", "memory_bound"),
    WorkClass("other", "other", "unclassed"),
]}
NATURES = {"compute_heavy": "compute-heavy", "memory_bound": "memory-bound by nature",
           "communication": "communication", "unclassed": "unclassed"}

#: a kernel's short name (lower-cased) → its class, first match wins (attention and convolution
#: before GEMM: their kernels often say gemm or cutlass; communication before reductions)
KERNEL_CLASSES = [(name, re.compile(pattern)) for name, pattern in [
    ("communication", r"nccl|rccl|msccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|multimem|"
                      r"cross_device_reduce|sendrecv"),
    ("attention", r"flash|fmha|attention|attn|sdpa|\bmha|_mha|paged_?kv|reshape_and_cache|kv_?cache"),
    ("convolution", r"conv|winograd|implicit_?gemm|fprop|dgrad|wgrad|cudnn|igemm|im2col|col2im"),
    ("gemm", r"(?<!fb)gemm|gemv|xmma|cutlass|cublas|nvjet|^cijk_|wgmma|hgmma|matmul|\bbmm|_bmm|_mm_|^mm_|triton_tem_|"
             r"s884|s1688|s16816|h884|h1688|h16816|tensorop|splitk|fused_moe|hipblaslt|tensile|^kernel2$"),
    ("normalization", r"norm|^bn_|_bn_|welford"),
    ("optimizer", r"adam|\bsgd|_sgd|lamb_|lion_|adagrad|rmsprop|optim"),
    ("reduction", r"softmax|reduce|reduction|argmax|argmin|topk|top_k|sort|cumsum|scan|triton_red_|triton_per_|"
                  r"logsumexp|cross_entropy|nll_loss|histogram|unique|pool"),
    ("indexing", r"(?<!rotary_)embedding|index_?select|index_put|index_elementwise|^index|gather|scatter|take_|nonzero|"
                 r"masked_select"),
    ("elementwise", r"elementwise|pointwise|triton_poi_|vectorized|unrolled|fill|copy|catarray|^cat|activation|"
                    r"gelu|silu|relu|swiglu|act_and_mul|rotary|rope|quant|cast|convert|transpose|permute|clamp|"
                    r"dropout|distribution|philox|multi_tensor_apply|^triton_"),
]]
#: the launching op (lower-cased) → its class, for ops that name a block of work
OP_CLASSES = [(name, re.compile(pattern)) for name, pattern in [
    ("communication", r"nccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|symm_mem|broadcast"),
    ("attention", r"attention|attn|flash|sdpa|scaled_dot_product|fmha|reshape_and_cache|kv_cache"),
    ("convolution", r"convolution|conv[123]d|conv_transpose|cudnn_conv|miopen_conv|winograd"),
    ("gemm", r"^aten::(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_int_mm|addmv|mv|dot|_addmm_activation)$"
             r"|(?<!fb)gemm|scaled_mm"),
    ("normalization", r"layer_norm|batch_norm|group_norm|instance_norm|rms_norm|rmsnorm|layernorm|batchnorm"),
    ("optimizer", r"adam|\bsgd|_sgd|lamb|optimizer"),
    ("reduction", r"^aten::(?:_?softmax\w*|_log_softmax\w*|sum|mean|argmax|argmin|amax|amin|max|min|topk|sort|"
                  r"cumsum|cumprod|logsumexp|nll_loss\w*|cross_entropy\w*|var\w*|std\w*|prod|all|any|norm|"
                  r"linalg_vector_norm)$|pool"),
    ("indexing", r"(?<!rotary_)embedding|index|gather|scatter|^aten::take|masked_select|nonzero"),
]]
#: op classes that decide over the kernel's name (the kernels such an op runs are its work)
_OP_DECIDES = ("communication", "attention", "convolution", "gemm", "normalization", "optimizer")
_ORDER = list(CLASSES)
#: kernels memory-bound by nature limit a busy device where they take at least this share of its
#: time and more than the compute-heavy ones
MEMORY_BOUND_MIN_PCT = 40.0


@dataclass(frozen=True)
class ClassTime:
    name: str  # a key of CLASSES
    label: str
    nature: str  # a key of NATURES
    ops: int  # device ops in it
    time_us: float  # their durations added up
    share_pct: float  # of device_time_us (the classes add up to 100%)
    top: list[str]  # its kernels (short names) with the most time, up to three
    lead_us: float = 0.0  # the time of its one kernel (by full name) with the most


@dataclass(frozen=True)
class TimeByClassResult:
    """Per rank, every GPU of it: device time is the ops' durations added up, so ops that overlap on
    several streams each count (the classes then add up to 100% of it)."""

    device_time_us: float
    classes: list[ClassTime]  # most time first; classes without ops left out
    compute_pct: float  # of device_time_us: GEMM, attention, convolution
    memory_pct: float  # memory-bound by nature: elementwise, normalization, reductions, indexing, optimizer, copies
    communication_pct: float
    other_pct: float
    memory_kernels_pct: float  # of memory_pct, the kernels (copies and memsets left out: fusing does not remove them)


def kernel_class(name: str) -> str | None:
    """The class a kernel's name says ('sm90_xmma_gemm_…' → gemm), or None."""
    lowered = short_name(name).lower()
    return next((c for c, pattern in KERNEL_CLASSES if pattern.search(lowered)), None)


def op_class(op: str) -> str | None:
    """The class a launching op's name says ('aten::cudnn_convolution' → convolution), or None."""
    lowered = op.lower()
    return next((c for c, pattern in OP_CLASSES if pattern.search(lowered)), None)


def _codes(column: pd.Series, classify) -> np.ndarray:
    """Each row's class as an index into _ORDER (-1: none), classifying each distinct value once."""
    return per_category(column, lambda v: _ORDER.index(c) if (c := classify(v)) else -1, -1, np.int8)


def classes_of(device_ops: pd.DataFrame) -> np.ndarray:
    """Each device op's class, as an index into CLASSES' order."""
    by_kernel, by_op = _codes(device_ops["name"], kernel_class), _codes(device_ops["op"], op_class)
    decides = np.isin(by_op, [_ORDER.index(c) for c in _OP_DECIDES])
    chosen = np.where(decides, by_op, np.where(by_kernel >= 0, by_kernel, by_op))
    chosen = np.where(chosen >= 0, chosen, _ORDER.index("other"))
    chosen[device_ops["is_comm"].to_numpy(bool)] = _ORDER.index("communication")
    copies = device_ops["kind"].isin(["memcpy", "memset"]).to_numpy()
    chosen[copies] = _ORDER.index("copy")
    return chosen


def class_indices(names: list[str]) -> list[int]:
    """The classes named (a class, or a nature: memory_bound, compute_heavy), as indices into
    CLASSES' order; ValueError naming the classes there are."""
    unknown = [n for n in names if n not in CLASSES and n not in NATURES]
    if unknown:
        raise ValueError(f"no class {', '.join(map(repr, unknown))}; the classes are {', '.join(CLASSES)}, and the "
                         f"natures {', '.join(NATURES)}")
    return [i for i, c in enumerate(CLASSES.values()) if c.name in names or c.nature in names]


def class_rows(device_ops: pd.DataFrame, names: list[str]) -> np.ndarray:
    """The device ops of the classes named (class_indices)."""
    return np.isin(classes_of(device_ops), class_indices(names))


def memory_kernel_classes(result: TimeByClassResult) -> list[ClassTime]:
    """The classes of kernels memory-bound by nature, most time first (copies and memsets left out:
    fusing kernels does not remove them)."""
    return [c for c in result.classes if c.nature == "memory_bound" and c.name != "copy"]


def memory_kernels_us(result: TimeByClassResult) -> float:
    """The device time of kernels memory-bound by nature."""
    return round(sum(c.time_us for c in memory_kernel_classes(result)), 3)


def memory_bound_dominates(result: TimeByClassResult) -> bool:
    """Whether kernels memory-bound by nature take most of a busy device's time, spread over many
    (no one of them holds half their time): fusing them, not one hot kernel, is then what to do."""
    if result.memory_kernels_pct < MEMORY_BOUND_MIN_PCT or result.memory_kernels_pct <= result.compute_pct:
        return False
    lead = max((c.lead_us for c in memory_kernel_classes(result)), default=0.0)
    return lead < memory_kernels_us(result) / 2


def detect_time_by_class(trace: Trace) -> TimeByClassResult | None:
    """None where the rank ran no device work."""
    gpu = trace.gpu
    ops = rows_where(gpu, (gpu["kind"] != "sync").to_numpy())
    if ops.empty:
        return None
    dur = (ops["end"].to_numpy(np.int64) - ops["start"].to_numpy(np.int64)).clip(0)
    chosen = classes_of(ops)
    time = np.bincount(chosen, weights=dur, minlength=len(_ORDER))
    count = np.bincount(chosen, minlength=len(_ORDER))
    total = int(dur.sum())
    # each class's top kernels: time per (class, name) pair, by codes
    classes = []
    for i in np.argsort(-time, kind="stable"):  # a dozen classes, not events
        if not count[i]:
            continue
        c = CLASSES[_ORDER[i]]
        top, lead_ns = leading_kernels(ops["name"], dur, chosen == i)
        classes.append(ClassTime(c.name, c.label, c.nature, int(count[i]), us(int(time[i])), pct(time[i], total), top,
                                 us(lead_ns)))
    nature_ns = {n: sum(time[_ORDER.index(c.name)] for c in CLASSES.values() if c.nature == n) for n in NATURES}
    copy_ns = time[_ORDER.index("copy")]
    share = {n: pct(ns, total) for n, ns in nature_ns.items()}
    return TimeByClassResult(us(total), classes, share["compute_heavy"], share["memory_bound"], share["communication"],
                             share["unclassed"], pct(nature_ns["memory_bound"] - copy_ns, total))


def time_by_class_sentence(result: TimeByClassResult) -> str:
    """'Of 45.6 ms of device time (ops' durations added up): matmul (GEMM) 42.1%, … By nature: …'"""
    parts = [f"{c.label} {percent(c.share_pct)}" + (f" (led by {shorten(c.top[0], 50)})" if c.top else "")
             for c in result.classes if c.share_pct >= 0.05]
    natures = [(result.compute_pct, "compute-heavy (matmul, attention, convolution)"),
               (result.memory_pct, "memory-bound by nature (elementwise, normalization, reductions, indexing, "
                                   "optimizer, copies)"),
               (result.communication_pct, "communication"), (result.other_pct, "unclassed")]
    text = (f"Of {duration(result.device_time_us)} of device time (its ops' durations added up, every GPU of the "
            f"rank): {'; '.join(parts)}. By nature: " + ", ".join(f"{percent(p)} {what}" for p, what in natures if p)
            + ".")
    if memory_bound_dominates(result):
        text += (f" {percent(result.memory_kernels_pct)} of it is in kernels that are memory-bound by nature (elementwise, "
                 "normalization, reductions, indexing): fusing them (torch.compile, fused norm and activation "
                 "kernels) cuts the bytes they move.")
    return text


def time_by_class_section(result: TimeByClassResult, params: None) -> list[str]:
    """The report's table: one row per class."""
    rows = [[c.label, percent(c.share_pct), duration(c.time_us), str(c.ops), NATURES[c.nature],
             ", ".join(code(shorten(k, 50)) for k in c.top)] for c in result.classes]
    return [md_prose(time_by_class_sentence(result)), "",
            md_table(["class", "share", "time", "ops", "nature", "top kernels"], rows)]


#: the classes as questions name them ("how much time does attention take?")
_ASKED_CLASSES = (r"(?:attention|gemms?|matmuls?|convolutions?|elementwise|normali[sz]ations?|(?:batch|layer|group|rms)?"
                  r"[ _-]?norms?|softmax|reductions?|"
                  r"embeddings?|indexing|kv[- _]?cache)")


#: classes of work (time_by_class.CLASSES, and the memory-bound nature) as questions say them; a
#: collective's name is not an indexing kernel ("all-gathers", "reduce-scatter")
CLASS_WORDS = [("memory_bound", r"memory[- ]bound"),
               ("attention", r"attention|attn\b|flash|sdpa|kv[- _]?cache|paged[- ]?attention"),
               ("convolution", r"conv(?:olution)?s?\b"),
               # an MLP (feed-forward) block is its matmuls, as far as classes of work go
               ("gemm", r"matmuls?\b|gemms?\b|linear layers?|mat(?:rix)?[- ]?mul\w*|mlps?\b|ffns?\b|feed-?forward"),
               ("normalization", r"(?:layer|batch|group|rms)[ -]?norms?\b|normali[sz]ations?"),
               ("elementwise", r"element-?wise|pointwise"), ("reduction", r"softmax|reductions?\b"),
               ("indexing", r"embeddings?\b|(?<!all)(?<!all[- _])gathers?\b|(?<!reduce)(?<!reduce[- _])scatters?\b|"
                            r"indexing"),
               ("optimizer", r"optimi[sz]er\b|adam\w*")]


def classes_named(text: str, natures: bool = False) -> list[str]:
    """The classes of work a question names in words ("a 2x faster conv", "attention and matmuls"),
    and with `natures` the memory-bound nature too."""
    return [name for name, words in CLASS_WORDS if (natures or name != "memory_bound")
            and re.search(rf"\b(?:{words})", text, re.I)]

def time_by_class_lead(result: TimeByClassResult, question: str) -> str | None:
    """The time of each class the question names ("how much time does attention take?"), or None."""
    by_name = {c.name: c for c in result.classes}
    return " ".join(f"**{upper_first(c.label)}: {percent(c.share_pct)} of device time** ({duration(c.time_us)} "
                    f"in {counted(c.ops, 'op')}" + (f", led by {code(shorten(c.top[0], 60))}" if c.top else "")
                    + ")." if (c := by_name.get(name)) is not None else
                    f"**No {CLASSES[name].label} kernels** in this scope." for name in classes_named(question)) or None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("time_by_class", "GPU time by class", "Device time by class of work (matmul, attention, convolution, "
                    "normalization, elementwise, reductions, indexing, optimizer, communication, copies, other), each "
                    "with its share, ops and top kernels, and by nature: compute-heavy, memory-bound by nature, "
                    "communication.",
                    None, TimeByClassResult, lambda i, p: detect_time_by_class(i.trace),
                    lambda r, p: time_by_class_sentence(r), since="2.6",
                    needs=("the rank ran no device work", "profile with CUDA activities on"),
                    asks=r"\b(?:kernels?|ops|work|gpu time|device time) by (?:class|category|kind|type)\b|"
                         r"\bkernel categor(?:y|ies)\b|\b(?:kernel|gpu|device|compute) (?:time )?breakdown\b|"
                         r"\bbreakdown of (?:the )?(?:kernel|gpu|device) time\b|\bwhat kinds? of (?:kernels|work|ops)\b|"
                         rf"\b(?:how much|fraction|percent(?:age)?|share|proportion)\b.{{0,40}}\b{_ASKED_CLASSES}\b|"
                         rf"\b{_ASKED_CLASSES}\b.{{0,30}}\b(?:take|takes|took|spend|spent|share|fraction|percent(?:age)?)\b",
                    lead=time_by_class_lead, section=time_by_class_section, place=62)
