"""GPU time by op: the device time of the kernels, copies and memsets each op launched, the answer
to "which op takes the most GPU time?" that torch.profiler's table sorts by CUDA time and
TraceLens's op table gives.

An op is the one around the launch call on its thread (model.GPU_COLUMNS["op"]: the innermost; a
kernel replayed from a CUDA graph takes the op around its launch in the capture). Device work no
recorded op launched is counted apart. Each op's calls are its events in the trace, so a call's
device time is the op's over them. One bincount over the op codes; no loop per event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...format import counted, duration, percent, shorten
from ...text import code, md_prose, md_table
from ...trace.model import Trace, rows_where
from ..core.bounds import Count
from ..core.view import pct, us
from .base import Detector
from .graphs import replayed
from .kernels import leading_kernels


@dataclass(frozen=True)
class OpTimeParams:
    """top: how many ops to keep, most device time first."""

    top: Count = 10


@dataclass(frozen=True)
class OpTime:
    name: str
    device_ops: int  # the kernels, copies and memsets it launched
    time_us: float  # their durations added up
    share_pct: float  # of the rank's device time (OpTimeResult.device_time_us)
    calls: int  # its events in the trace (0 where it has none: an op known from a graph's capture alone)
    per_call_us: float | None  # time_us over calls
    top_kernel: str | None  # the short name of its kernel with the most time


@dataclass(frozen=True)
class OpTimeResult:
    """Per rank, every GPU of it, the whole trace."""

    device_time_us: float  # every device op's duration added up: the shares' denominator
    ops: int  # distinct ops that launched device work
    no_op_us: float  # device time launched by no op the trace records
    no_op_pct: float
    top: list[OpTime]  # most device time first
    no_op_graph_pct: float = 0.0  # of no_op_us, kernels replayed from a CUDA graph (a capture trace names their ops)
    # 2.14: the op that launched the most device ops (more time first among equals): "which op launches the
    # most kernels?" (many tiny elementwise launches can sit outside the top by time)
    most_device_ops: OpTime | None = None


def detect_op_time(trace: Trace, params: OpTimeParams = OpTimeParams()) -> OpTimeResult | None:
    """None where the rank ran no device work."""
    gpu = trace.gpu
    device = (gpu["kind"] != "sync").to_numpy()
    work = rows_where(gpu[["name", "op", "start", "end"]], device)
    if work.empty:
        return None
    dur = (work["end"].to_numpy(np.int64) - work["start"].to_numpy(np.int64)).clip(0)
    ops = work["op"].array
    codes = ops.codes.astype(np.int64)
    launched = codes >= 0
    time = np.bincount(codes[launched], weights=dur[launched], minlength=len(ops.categories))
    count = np.bincount(codes[launched], minlength=len(ops.categories))
    # each op's events in the trace, by the host table's name codes: one bincount, then a lookup per op kept
    names = trace.cpu["name"].array
    calls_by_name = np.bincount(names.codes[names.codes >= 0], minlength=len(names.categories))
    total = int(dur.sum())

    def op_time(i: int) -> OpTime:
        name = str(ops.categories[i])
        at = names.categories.get_indexer([name])[0]
        calls = int(calls_by_name[at]) if at >= 0 else 0
        kernels, _ = leading_kernels(work["name"], dur, codes == i, top=1)
        return OpTime(name, int(count[i]), us(int(time[i])), pct(time[i], total), calls,
                      us(time[i] / calls) if calls else None, kernels[0] if kernels else None)

    top = [op_time(i) for i in np.argsort(-time, kind="stable")[:params.top] if count[i]]  # the ops kept, not events
    most = int(np.lexsort((-time, -count))[0]) if len(count) else -1
    no_op = int(dur[~launched].sum())
    graphed = int(dur[~launched & replayed(trace)[device]].sum()) if no_op else 0
    return OpTimeResult(us(total), int((count > 0).sum()), us(no_op), pct(no_op, total), top, pct(graphed, no_op),
                        op_time(most) if most >= 0 and count[most] else None)


def op_time_sentence(result: OpTimeResult) -> str | None:
    """'Device time by op (…): aten::cudnn_convolution_backward_input 80.76 ms (13.4%, 162 calls, 498.5 µs a call,
    led by dgrad_engine); …'"""
    graphs = (f" ({percent(result.no_op_graph_pct)} of it replayed from CUDA graphs: `--graph-capture` with a trace of "
              "their capture names their ops)" if result.no_op_graph_pct >= 0.05 else "")
    if not result.top:  # no op launched anything the trace records
        return f"No recorded op launched the {duration(result.device_time_us)} of device time{graphs}."
    parts = [f"{code(shorten(o.name, 60))} {duration(o.time_us)} ({percent(o.share_pct)}"
             + (f", {counted(o.calls, 'call')}, {duration(o.per_call_us)} a call" if o.per_call_us is not None else "")
             + (f", led by {code(shorten(o.top_kernel, 50))}" if o.top_kernel else "") + ")" for o in result.top[:5]]
    return (f"Device time by op (the op around each launch; of {duration(result.device_time_us)}, every GPU of the "
            f"rank): {'; '.join(parts)}."
            + (f" {percent(result.no_op_pct)} was launched by no recorded op{graphs}." if result.no_op_pct >= 0.05 else ""))


def op_time_section(result: OpTimeResult, params: OpTimeParams) -> list[str]:
    rows = [[code(shorten(o.name, 60)), str(o.calls), duration(o.time_us), percent(o.share_pct),
             duration(o.per_call_us) if o.per_call_us is not None else "-",
             code(shorten(o.top_kernel, 50)) if o.top_kernel else "-"] for o in result.top]
    return [md_prose(op_time_sentence(result) or ""), "",
            md_table(["op", "calls", "device time", "share", "per call", "top kernel"], rows)]


#: "which op launches the most kernels?": counted, not timed
MOST_LAUNCHED = re.compile(r"\bmost\b.{0,20}\b(?:kernels?|launch\w*|device ops?)\b|\blaunch\w* the most\b|"
                           r"\b(?:kernels?|launches) (?:per|by) (?:op|operator)s?\b", re.I)


def op_time_lead(result: OpTimeResult, question: str) -> str | None:
    """The op that launched the most device ops where the question asks for it, or None."""
    if not MOST_LAUNCHED.search(question) or (o := result.most_device_ops) is None:
        return None
    return (f"**{code(shorten(o.name, 60))} launched the most device ops: {o.device_ops}** (its kernels, copies "
            f"and memsets, for {duration(o.time_us)} of device time, {percent(o.share_pct)} of the rank's"
            + (f"; {counted(o.calls, 'call')} of the op" if o.calls else "") + ").")


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("op_time", "GPU time by op", "Device time by the op that launched it (the op around each kernel's, "
                    "copy's or memset's launch call): each op's device ops, time, share of the rank's device time, "
                    "calls, time per call and top kernel; and the device time no recorded op launched.",
                    OpTimeParams(), OpTimeResult, lambda i, p: detect_op_time(i.trace, p),
                    lambda r, p: op_time_sentence(r), since="2.8",
                    needs=("the rank ran no device work", "profile with CUDA activities on"),
                    # not the host's time ("which op is slowest on the CPU?" is host_ops')
                    asks=r"^(?!.*\b(?:cpu|host|python|self)\b).*(?:\b(?:which|what)\b.{0,15}\b(?:ops?|operators?|"
                         r"operations?)\b.{0,40}\b(?:most|gpu|device|slowest|expensive|costliest|heaviest|longest)\b|"
                         r"\b(?:slowest|most expensive|costliest|heaviest|hottest|top)\s+(?:aten\s+)?(?:ops?|"
                         r"operators?)\b|\b(?:gpu|device|cuda) time (?:by|per) (?:op|operator)s?\b|\b(?:ops?|operators?)"
                         r" by (?:gpu|device|cuda) time\b)",
                    lead=op_time_lead, section=op_time_section, place=64)
