"""Kernel time by the library that wrote the kernels: cuBLAS, cuDNN, FlashAttention, Triton, NCCL,
PyTorch's own (ATen)... The answer to "how much time is in cuDNN?", "is anything still running
outside Triton after torch.compile?", "is flash attention used?".

A kernel's library is read from its name first (`cudnn::`, `nvjet_`, `Cijk_` for hipBLASLt,
`triton_`, `flash_fwd`, `at::native::`: its namespaces and name, then its template arguments);
where the name says none, from the op that launched it (`aten::cudnn_convolution` launches cuDNN's
`implicit_convolve_sgemm`, `aten::mm` cuBLAS's); then a launch from a loaded module (`cuLaunchKernel`,
`hipModuleLaunchKernel`: Triton, other JIT-compiled code, precompiled cubins). Library ops decide for
kernels named only for CUTLASS (cuBLAS builds many of its GEMMs from CUTLASS). A kernel nothing
names takes the library its name has elsewhere in the trace (a kernel replayed from a CUDA graph
has no op). Each distinct name and op is read once (codes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import counted, duration, percent, shorten
from ...text import code, md_prose, md_table
from ...trace.model import Trace, matches, per_category, rows_where
from ..core.host import launch_calls
from ..core.view import pct, us
from .base import Detector
from .kernels import distinct_labels, qualified_name

#: (key, how reports name it, what a kernel's name holds (lower-cased)); the first match wins, so the
#: specific come first (cuDNN's `implicit_convolve_sgemm` before cuBLAS's `gemm`)
LIBRARIES = [
    ("triton", "Triton", r"triton"),
    ("cudnn", "cuDNN / MIOpen", r"cudnn|miopen|implicit_convolve|xmma_(?:fprop|dgrad|wgrad)|(?:^|[^a-z])[dw]grad|"
                                r"bn_(?:fw|bw)_|winograd|igemm_(?:fwd|bwd|wrw)|naive_conv|gridwise_convolution"),
    ("serving", "vLLM / SGLang / AITER / TensorRT-LLM", r"vllm|sgl_|sglang|aiter|tensorrt_llm"),
    ("attention", "FlashAttention / FlashInfer / FMHA", r"flash|fmha|mha_(?:fwd|bwd)|xformers|efficient_attention|"
                                                        r"paged_attention"),
    ("fbgemm", "FBGEMM", r"fbgemm"),
    ("pytorch", "PyTorch (ATen)", r"at::native|at::cuda|at_cuda_detail|^at::|\bcunn_|catarraybatchedcopy|"
                                  r"(?<![a-z])(?:elementwise_kernel|reduce_kernel)|indexselect|distribution_elementwise"),
    ("blas", "cuBLAS / hipBLASLt", r"cublas|hipblas|rocblas|nvjet|gemv|gemm|^cijk_|tensile|splitkreduce|dot_kernel|"
                                   r"^(?:maxwell|pascal|volta|turing|ampere|hopper)_|sm\d+_xmma"),
    ("transformer_engine", "Transformer Engine", r"transformer_engine|nvte"),
    ("cutlass", "CUTLASS / Composable Kernel", r"cutlass|cute::|ck_tile|^ck::"),
]
#: what the launching op's name says (lower-cased), where the kernel's name says nothing: on a GPU, a
#: convolution op's own kernels (not named for ATen) are cuDNN's or MIOpen's
_OP_LIBRARIES = [
    ("cudnn", r"cudnn|miopen|conv"),
    ("attention", r"flash|efficient_attention|fmha"),
    ("blas", r"^aten::(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|addmv|mv|dot|_int_mm|_addmm_activation)$"),
    ("serving", r"^(?:vllm|_c|_moe_c|_rocm_c|sgl_kernel|sglang|aiter|trtllm)::"),
    ("fbgemm", r"^fbgemm::|splitlookupfunction"),
    ("pytorch", r"^(?:aten|prims)::"),
]
#: libraries whose ops decide for a kernel named only for a kernel template (cuBLAS's CUTLASS GEMMs)
_OP_DECIDES = ("cudnn", "blas")
#: a launch from a loaded module: how Triton (and other JIT-compiled code) launches its kernels;
#: hipExtModuleLaunchKernel is left out, ROCm's own libraries launch with it
_MODULE_LAUNCH = re.compile(r"^(?:cuLaunchKernel|hipModuleLaunchKernel)")
EXTRA = [("collectives", "collectives (NCCL, RCCL, ...)"),
         ("module", "loaded modules (Triton, other JIT-compiled code or cubins; the name says no library)"),
         ("other", "other (neither the name nor the op says)")]
LABELS = {key: label for key, label, _ in LIBRARIES} | dict(EXTRA)
_ORDER = list(LABELS)
_NAME_RULES = [(key, re.compile(pattern)) for key, _, pattern in LIBRARIES]
_OP_RULES = [(key, re.compile(pattern)) for key, pattern in _OP_LIBRARIES]
_OTHER = _ORDER.index("other")
#: the libraries a report names at least (shares under this are in the result, not the sentence)
SHOWN_PCT = 0.05


@dataclass(frozen=True)
class LibraryTime:
    library: str  # a key of LABELS: triton, cudnn, serving, attention, fbgemm, pytorch, blas, transformer_engine,
    # cutlass, collectives, module, other
    label: str  # how reports name it
    time_us: float  # its kernels' durations added up
    share_pct: float  # of LibrariesResult.kernel_time_us
    launches: int
    kernels: int  # distinct kernel names
    top_kernel: str  # its kernel with the most time (a readable name)


@dataclass(frozen=True)
class LibrariesResult:
    """Per rank, every GPU of it: kernel time is the kernels' durations added up (copies and memsets left out)."""

    kernel_time_us: float  # the shares' denominator
    libraries: list[LibraryTime]  # most time first; the libraries with no kernel are absent


def _rule(text: str, rules: list[tuple[str, re.Pattern[str]]]) -> int:
    return next((_ORDER.index(key) for key, rule in rules if rule.search(text)), -1)


def _by_name(name: str) -> int:
    """The library a kernel's name says: its namespaces and name, else its template arguments
    (`cutlass::Kernel2<cutlass_80_…>`); -1 for none."""
    found = _rule(qualified_name(name).lower(), _NAME_RULES)
    return found if found >= 0 else _rule(name.lower(), _NAME_RULES)


def library_of_kernels(kernels: pd.DataFrame, module_launched: np.ndarray) -> np.ndarray:
    """Each kernel's library (an index into _ORDER): its name, else its op where a library op launched it
    (deciding for kernels named for CUTLASS too), else a module launch, else its op, else what its name
    is elsewhere, else other."""
    by_name = per_category(kernels["name"], _by_name, -1, np.int8)
    by_op = per_category(kernels["op"], lambda op: _rule(op.lower(), _OP_RULES), -1, np.int8)
    op_decides = np.isin(by_op, [_ORDER.index(k) for k in _OP_DECIDES])
    chosen = np.where((by_name < 0) | ((by_name == _ORDER.index("cutlass")) & op_decides), by_op, by_name)
    chosen = np.where((by_name < 0) & ~op_decides & module_launched, _ORDER.index("module"), chosen)
    chosen = np.where(chosen >= 0, chosen, _OTHER).astype(np.int64)
    chosen[kernels["is_comm"].to_numpy(bool)] = _ORDER.index("collectives")
    # a kernel nothing names takes its name's most frequent library elsewhere (graph replays have no op)
    codes = kernels["name"].array.codes.astype(np.int64) + 1
    said = chosen != _OTHER
    seen = np.bincount(codes[said] * len(_ORDER) + chosen[said],
                       minlength=(codes.max() + 1) * len(_ORDER)).reshape(-1, len(_ORDER))
    usual = np.where(seen.any(axis=1), seen.argmax(axis=1), _OTHER)
    return np.where(said, chosen, usual[codes])


def kernels_with_libraries(trace: Trace) -> tuple[np.ndarray, pd.DataFrame, np.ndarray]:
    """The device ops that are kernels (their rows in trace.gpu), their columns, and each one's library
    (an index into _ORDER)."""
    gpu = trace.gpu
    kernel = (gpu["kind"] == "kernel").to_numpy()
    kernels = rows_where(gpu[["name", "op", "is_comm", "correlation", "start", "end"]], kernel)
    calls = launch_calls(trace, kernels["correlation"].to_numpy(), ("name",))["name"]
    module_launched = matches(calls, _MODULE_LAUNCH) if len(calls) else np.zeros(len(kernels), bool)
    return np.flatnonzero(kernel), kernels, library_of_kernels(kernels, module_launched) if len(kernels) else \
        np.zeros(0, np.int64)


def library_rows(trace: Trace, libraries: list[str]) -> np.ndarray:
    """The device ops (rows of trace.gpu) that are kernels of the libraries named (keys of LABELS)."""
    at, _, chosen = kernels_with_libraries(trace)
    hit = np.zeros(len(trace.gpu), dtype=bool)
    hit[at] = np.isin(chosen, [_ORDER.index(name) for name in libraries])
    return hit


def library_keys(names: list[str]) -> list[str]:
    """The libraries named, as keys of LABELS; ValueError naming the keys there are."""
    unknown = [n for n in names if n not in LABELS]
    if unknown:
        raise ValueError(f"no library {', '.join(map(repr, unknown))}; the libraries are {', '.join(LABELS)}")
    return names


def detect_libraries(trace: Trace) -> LibrariesResult | None:
    """None where the rank ran no kernels."""
    _, kernels, chosen = kernels_with_libraries(trace)
    if kernels.empty:
        return None
    dur = (kernels["end"].to_numpy(np.int64) - kernels["start"].to_numpy(np.int64)).clip(0)
    total = int(dur.sum())
    if not total:
        return None
    time = np.bincount(chosen, weights=dur, minlength=len(_ORDER))
    launches = np.bincount(chosen, minlength=len(_ORDER))
    names = kernels["name"].array
    codes = names.codes.astype(np.int64) + 1  # -1 (no name) counts apart, at 0
    pairs = chosen.astype(np.int64) * (len(names.categories) + 1) + codes
    shape = (len(_ORDER), len(names.categories) + 1)
    by_pair = np.bincount(pairs, weights=dur, minlength=shape[0] * shape[1]).reshape(shape)
    named = np.bincount(pairs, minlength=shape[0] * shape[1]).reshape(shape) > 0
    rows = []
    for i in np.argsort(-time, kind="stable"):  # a dozen libraries, not events
        if not launches[i]:
            break
        lead = int(np.argmax(by_pair[i])) if by_pair[i].any() else int(np.argmax(named[i]))
        top = distinct_labels([str(names.categories[lead - 1])])[0] if lead else "(unnamed)"
        rows.append(LibraryTime(_ORDER[i], LABELS[_ORDER[i]], us(time[i]), pct(time[i], total), int(launches[i]),
                                int(named[i].sum()), top))
    return LibrariesResult(us(total), rows)


def libraries_sentence(result: LibrariesResult) -> str:
    """'Of 591.53 ms of kernel time (every GPU of the rank, durations added up): cuDNN / MIOpen 63.2%
    (led by `dgrad_engine`), PyTorch (ATen) 35.1% (…), …'"""
    shown = [lib for lib in result.libraries if lib.share_pct >= SHOWN_PCT]
    said = "; ".join(f"{lib.label} {percent(lib.share_pct)} ({duration(lib.time_us)}, "
                     f"{counted(lib.launches, 'launch', 'launches')}, led by {code(shorten(lib.top_kernel, 50))})"
                     for lib in shown)
    return (f"Of {duration(result.kernel_time_us)} of kernel time (every GPU of the rank, durations added up; copies "
            f"and memsets left out), by the library that wrote the kernels: {said}. The library is read from the "
            "kernel's name, else from the op that launched it.")


#: the libraries as questions name them ("is cuDNN slow?", "how much time is in Triton?")
NAMED_IN_QUESTIONS = [("cudnn", r"\b(?:cudnn|miopen)\b"), ("blas", r"\b(?:cublas\w*|hipblas\w*|rocblas)\b"),
                      ("triton", r"\btriton\b"), ("cutlass", r"\b(?:cutlass|composable kernel)\b"),
                      ("attention", r"\bflash[- ]?(?:attn|attention)\b|\b(?:flashinfer|xformers)\b"),
                      ("pytorch", r"\baten\b"), ("fbgemm", r"\bfbgemm\b")]


def library_named(text: str) -> str | None:
    """The library (a key of LABELS) a question names, the first in NAMED_IN_QUESTIONS' order, or None."""
    return next((key for key, pattern in NAMED_IN_QUESTIONS if re.search(pattern, text, re.I)), None)


def library_sentence(result: LibrariesResult, library: str) -> str:
    """One library's share, led by the figure ('**cuDNN / MIOpen: 75.5%** of the rank's kernel time …'),
    or that no kernel is its; for Triton, the kernels launched from loaded modules too (Triton's own way)."""
    found = next((lib for lib in result.libraries if lib.library == library), None)
    if found is None:
        said = f"**No {LABELS[library]} kernels:** no kernel's name or launching op says {LABELS[library]}."
    else:
        said = (f"**{found.label}: {percent(found.share_pct)}** of the rank's kernel time ({duration(found.time_us)} "
                f"of {duration(result.kernel_time_us)}, every GPU of it, durations added up): "
                f"{counted(found.launches, 'launch', 'launches')} of {counted(found.kernels, 'kernel')}, led by "
                f"{code(shorten(found.top_kernel, 60))}.")
    module = next((lib for lib in result.libraries if lib.library == "module"), None)
    if library == "triton" and module is not None:
        said += (f" A further {percent(module.share_pct)} ({duration(module.time_us)}, led by "
                 f"{code(shorten(module.top_kernel, 60))}) is launched from loaded modules, as Triton launches its "
                 "kernels, under names that say no library.")
    return said


def libraries_section(result: LibrariesResult, params: None) -> list[str]:
    rows = [[lib.label, percent(lib.share_pct), duration(lib.time_us), str(lib.launches), str(lib.kernels),
             code(shorten(lib.top_kernel, 60))] for lib in result.libraries]
    return [md_prose(libraries_sentence(result)), "",
            md_table(["library", "share of kernel time", "time", "launches", "kernels", "top kernel"], rows)]


def libraries_findings(result: LibrariesResult, on: str) -> list[tuple[str, str]]:
    """The side panel's line: the library with the most kernel time."""
    lead = result.libraries[0]
    return [(f"{lead.label} kernels {percent(lead.share_pct)}", f"Which libraries do my kernels come from{on}?")]


def libraries_lead(result: LibrariesResult, question: str) -> str | None:
    """The share of the library the question names ("how much time is in cuDNN?"), or None."""
    asked = library_named(question)
    return library_sentence(result, asked) if asked else None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("libraries", "Kernel time by library",
                    "Kernel time by the library that wrote the kernels (cuBLAS/hipBLASLt, cuDNN/MIOpen, "
                    "FlashAttention/FlashInfer/FMHA, Triton, PyTorch's ATen, CUTLASS, Transformer Engine, "
                    "NCCL/RCCL, serving engines' own kernels, JIT-compiled code, other): each one's share of the "
                    "rank's kernel time, launches, distinct kernels and top kernel, read from kernel names and the "
                    "ops that launched them.",
                    None, LibrariesResult, lambda i, p: detect_libraries(i.trace),
                    lambda r, p: libraries_sentence(r), since="2.12",
                    needs=("the rank ran no kernels", "profile with CUDA activities on"),
                    # what a library made faster would buy is what-if's (lib:NAMES=xF)
                    asks=r"^(?!.*\b(?:what if|if (?:i|we)|faster|speed\w*|help|buy|gain|save|worth)\b)"
                         r".*\b(?:cudnn|cublas(?:lt)?|hipblas(?:lt)?|rocblas|miopen|triton|cutlass|composable kernel|"
                         r"flash[- ]?attn|flash[- ]?attention|flashinfer|xformers|aten kernels?|"
                         r"(?:kernel |gpu |cuda |math )?librar(?:y|ies))\b",
                    lead=libraries_lead, section=libraries_section, findings=libraries_findings, place=68)
