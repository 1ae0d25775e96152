"""Memory layout of the convolution work: whether it runs channels-first (NCHW) or channels-last
(NHWC), and the device time spent converting between the two: the answer to "am I using
channels_last?" on any trace, from kernel names.

cuDNN, MIOpen and PyTorch's own kernels name the layout they read or write (`bn_fw_tr_1C11_kernel_NCHW`,
`igemm_fwd_gtcx3_nhwc_bf16`, `max_pool_forward_nchw`, `batch_norm_collect_statistics_channels_last_kernel`);
where a name says two (`…_nhwckrsc_nchw`: NHWC in, NCHW out), the last is the one the model's
tensors have. Conversion kernels (`nchwToNhwcKernel`, `nhwcToNchwKernel`, and the transposes a
convolution or normalization op launches; MIOpen's `batched_transpose_*`) are the cost of feeding
channels-first tensors to kernels that work channels-last: tensor-core convolutions do, so
`channels_last` removes them. Names are read once each (categorical codes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...format import duration, percent, shorten
from ...text import code, md_prose
from ...trace.model import Trace, rows_where
from ..core.asked import asks_yes_or_no
from ..core.view import pct, us
from .base import Detector
from .kernels import distinct_labels, short_name
from .time_by_class import class_rows, kernel_class, op_class

#: a kernel that converts between the layouts, by its short name (lower-cased: no template arguments,
#: whose mangled forms spell anything)
CONVERSION = re.compile(r"[a-z]{4,5}_?(?:2|to)_?(?:ncd?hw|nd?hwc)|(?:ncd?hw|nd?hwc)_?(?:2|to)_?[a-z]{4,5}|"
                        r"channels_?(?:first|last)_?to_|^batched_transpose_")  # MIOpen's, for its NHWC convolutions
#: a transpose launched by a convolution, normalization or pooling op: a conversion too
TRANSPOSE = re.compile(r"(?<![a-z])(?:transpose|permute)")  # a word of its own: not a mangled name's "NoPermute"
#: the layout words of a kernel name (lower-cased): the last one is the layout of the tensors it writes
LAYOUT_WORD = re.compile(r"channels_?last|n(?:d)?hwc|nc(?:d)?hw")
#: the ops around which a transpose is a layout conversion
_LAYOUT_OPS = re.compile(r"conv|batch_norm|(?:max|avg)_pool\dd|adaptive_\w*pool|upsample|miopen|cudnn")
#: the share of layout-naming time one layout needs to be the trace's
DOMINANT_PCT = 80.0
#: convolution work from this share of device time (or any conversions from CONVERTING_PCT) gets the advice
ADVISED_CONV_PCT = 10.0
CONVERTING_PCT = 1.0

ADVICE = ("convert the model and its inputs to channels-last (`model = model.to(memory_format=torch.channels_last)`, "
          "`x = x.to(memory_format=torch.channels_last)`): tensor-core convolutions (fp16/bf16 with autocast, TF32) work "
          "channels-last, so channels-first tensors are converted around each of them")


@dataclass(frozen=True)
class LayoutResult:
    """Per rank, every GPU of it: device time is the ops' durations added up."""

    layout: str  # channels_first, channels_last, mixed, or unknown (no kernel names a layout)
    convolution_us: float  # the convolution kernels' time (time_by_class's class)
    convolution_pct: float  # of the rank's device time
    channels_first_us: float  # kernels whose names say NCHW (NCDHW) last, any class
    channels_last_us: float  # kernels whose names say NHWC (NDHWC, channels_last) last
    conversion_us: float  # kernels converting between the two
    conversion_pct: float  # of the rank's device time
    conversions: int  # their launches
    channels_first_kernels: list[str]  # up to three of each, most time first
    channels_last_kernels: list[str]
    conversion_kernels: list[str]
    advice: str | None  # where the convolution work or its conversions are worth moving to channels-last


def _layout_of(lowered: str) -> int:
    """1 channels-last, 0 channels-first, -1 the name says neither."""
    words = LAYOUT_WORD.findall(lowered)
    return -1 if not words else 0 if words[-1].startswith("nc") else 1


def detect_layout(trace: Trace) -> LayoutResult | None:
    """None where the rank ran neither convolutions nor kernels that name a layout."""
    gpu = trace.gpu
    # every device op: the shares are of the rank's device time, as precision's and time_by_class's are
    ops = rows_where(gpu[["name", "op", "kind", "is_comm", "start", "end"]], (gpu["kind"] != "sync").to_numpy())
    if ops.empty:
        return None
    names, launching = ops["name"].cat.categories, ops["op"].cat.categories
    lowered = [str(n).lower() for n in names]
    short = [short_name(str(n)).lower() for n in names]
    # per distinct name and op first: a trace with no convolution and no layout word is done here
    said = np.array([_layout_of(n) for n in lowered] + [-1], dtype=np.int8)
    converts = np.array([bool(CONVERSION.search(n)) for n in short] + [False])
    transposes = np.array([bool(TRANSPOSE.search(n)) for n in short] + [False])
    around = np.array([bool(_LAYOUT_OPS.search(str(o).lower())) or op_class(str(o)) == "convolution"
                       for o in launching] + [False])
    has_conv = any(kernel_class(str(n)) == "convolution" for n in names) or around.any()
    if not has_conv and (said < 0).all() and not converts.any():
        return None
    codes = ops["name"].cat.codes.to_numpy(np.int64)  # -1 (no name) takes the last entries
    op_codes = ops["op"].cat.codes.to_numpy(np.int64)
    dur = (ops["end"].to_numpy(np.int64) - ops["start"].to_numpy(np.int64)).clip(0)
    device_total = int(dur.sum())
    conversion = converts[codes] | (transposes[codes] & around[op_codes])
    layout = np.where(conversion, -1, said[codes])
    conv = class_rows(ops, ["convolution"])
    first, last, converted = (int(dur[m].sum()) for m in (layout == 0, layout == 1, conversion))
    if not (conv.any() or first or last or converted):
        return None
    named = first + last
    kind = ("unknown" if not named else "channels_first" if pct(first, named) >= DOMINANT_PCT
            else "channels_last" if pct(last, named) >= DOMINANT_PCT else "mixed")

    def leading(rows: np.ndarray) -> list[str]:
        mine = np.bincount(codes[rows] + 1, weights=dur[rows], minlength=len(names) + 1)[1:]
        top = [int(n) for n in np.argsort(-mine, kind="stable")[:3] if mine[n] > 0]
        return distinct_labels([str(names[n]) for n in top])

    conv_us = int(dur[conv].sum())
    worth = (pct(converted, device_total) >= CONVERTING_PCT
             or (kind in ("channels_first", "mixed") and pct(conv_us, device_total) >= ADVISED_CONV_PCT))
    return LayoutResult(kind, us(conv_us), pct(conv_us, device_total), us(first), us(last), us(converted),
                        pct(converted, device_total), int(conversion.sum()), leading(layout == 0), leading(layout == 1),
                        leading(conversion), ADVICE if worth else None)


def layout_sentence(result: LayoutResult) -> str:
    """'Channels-first: the kernels that name a layout run channels-first (NCHW) …', or 'Channels-last: …'
    (plain text: reports print it as it is; the layout word first answers "am I using channels_last?")."""
    named = result.channels_first_us + result.channels_last_us
    whole = (f"convolution kernels take {percent(result.convolution_pct)} of the rank's device time (every GPU of it)"
             if result.convolution_us else "the rank ran no convolution kernels")
    converted = (f"{result.conversions} conversion kernels take {duration(result.conversion_us)}, "
                 f"{percent(result.conversion_pct)} of the rank's device time (led by "
                 f"{', '.join(code(shorten(k, 60)) for k in result.conversion_kernels)})")
    if result.conversion_pct >= CONVERTING_PCT:
        said = (f"Channels-first, converted: the model's tensors are channels-first (NCHW), and kernels convert them "
                f"to and from channels-last around the convolutions: {converted}; {whole}.")
    elif result.layout in ("channels_first", "channels_last"):
        first = result.layout == "channels_first"
        lead, word, time, kernels = (
            ("Channels-first", "channels-first (NCHW)", result.channels_first_us, result.channels_first_kernels) if first
            else ("Channels-last", "channels-last (NHWC)", result.channels_last_us, result.channels_last_kernels))
        said = (f"{lead}: the kernels that name a layout run {word}: "
                f"{duration(time)}, {percent(100 * time / named)} of their time (led by "
                f"{', '.join(code(shorten(k, 60)) for k in kernels)})"
                + ("" if first or result.conversion_us else ", with no conversions") + f"; {whole}.")
    elif result.layout == "mixed":
        said = (f"Partly channels-last: of the kernels that name a layout, {duration(result.channels_last_us)} run "
                f"channels-last (NHWC) and {duration(result.channels_first_us)} channels-first (NCHW, led by "
                f"{', '.join(code(shorten(k, 60)) for k in result.channels_first_kernels)}); {whole}.")
    else:
        said = (f"The kernel names do not say a memory layout (channels-first or channels-last); {whole}. Profile "
                "with record_shapes=True and look at the convolutions' input strides to tell.")
    if result.conversion_us and result.conversion_pct < CONVERTING_PCT:
        said += f" Besides, {converted}."
    if result.advice:
        said += f" To change it, {result.advice}."
    return said


def layout_section(result: LayoutResult, params: None) -> list[str]:
    return [md_prose(layout_sentence(result))]


def layout_findings(result: LayoutResult, on: str) -> list[tuple[str, str]]:
    """The side panel's line, where there is something to change: the conversions, or the layout."""
    if not result.advice:
        return []
    what = (f"layout conversions {percent(result.conversion_pct)}" if result.conversion_us
            else f"convolutions channels-first {percent(result.convolution_pct)}")
    return [(what, f"Are the convolutions channels-last{on}?")]


def layout_lead(result: LayoutResult, question: str) -> str | None:
    """A yes or a no where the question asks whether a layout is used ("am I using channels_last?"), else None."""
    asked = re.search(r"channels?[ _-]?(last|first)|\b(nhwc|nchw)\b", question, re.I)
    if not asked or not asks_yes_or_no(question) or result.layout == "unknown":
        return None
    last = (asked[1] or "").lower() == "last" or (asked[2] or "").lower() == "nhwc"
    if result.conversion_pct >= CONVERTING_PCT:  # channels-first tensors, converted around the convolutions
        return (f"**{'No' if last else 'Yes'}:** the model's tensors are channels-first (NCHW); {result.conversions} "
                f"kernels convert them to and from channels-last around the convolutions ({duration(result.conversion_us)}).")
    used = result.layout in (("channels_last", "mixed") if last else ("channels_first", "mixed"))
    time = result.channels_last_us if last else result.channels_first_us
    word = "channels-last (NHWC)" if last else "channels-first (NCHW)"
    return (f"**{'Yes' if used else 'No'}:** the kernels that name a layout run {word} for {duration(time)} of "
            f"{duration(result.channels_first_us + result.channels_last_us)}" + (
                "" if result.layout != "mixed" else " (the rest the other way)") + ".")


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("layout", "Memory layout",
                    "The convolution work's memory layout, from kernel names: channels-first (NCHW) or channels-last "
                    "(NHWC) by the kernels' time, the time in kernels converting between the two, and the change to "
                    "channels-last where it is worth it.",
                    None, LayoutResult, lambda i, p: detect_layout(i.trace), lambda r, p: layout_sentence(r), since="2.10",
                    needs=("the rank ran no convolutions and no kernel names a memory layout",
                           "profile with CUDA (or ROCm) activities on"),
                    asks=r"channels?[ _-]?(?:last|first)|memory[ _-]?format|\bnhwc\b|\bnchw\b|\b(?:memory|tensor|data) "
                         r"layouts?\b|\blayouts?\b.*\bconv",
                    lead=layout_lead, section=layout_section, findings=layout_findings, place=67)
