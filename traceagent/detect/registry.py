"""Detectors as units: each declares its name (its key in `analyze --json`, in Findings.extra and
in `--set NAME.PARAM=VALUE`), its parameters, its result type, how it runs, the sentence reports
say about it, and whether the agent gets a tool for it.

analyze_trace runs every entry of DETECTORS; the JSON, the JSON Schema, the reports' further
findings and the agent's tool list iterate over it. Adding a detector is its module, one entry
below, and its tests. The detectors the verdict is drawn from (idle, copies, communication,
kernels, launches, steps) are wired in analysis.py, since each feeds the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd

from ..trace.model import Trace
from .core.timing import timed
from .detectors.breakdown import BreakdownResult
from .detectors.collectives import CollectivesParams, CollectivesResult, collectives_sentence, detect_collectives
from .detectors.host_pauses import HostPausesParams, HostPausesResult, detect_host_pauses, host_pauses_sentence
from .detectors.interconnect import InterconnectParams, InterconnectResult, detect_interconnect, interconnect_sentence
from .detectors.launch_queue import LaunchQueueParams, LaunchQueueResult, detect_launch_queue, launch_queue_sentence
from .detectors.memcpy import MemcpyResult
from .detectors.phases import PhasesParams, PhasesResult, detect_phases, phases_sentence
from .detectors.shapes import ShapesParams, ShapesResult, detect_shapes, shapes_sentence
from .detectors.streams import StreamsParams, StreamsResult, detect_streams, streams_sentence


@dataclass(frozen=True)
class Inputs:
    """What a registered detector may read of one rank: its events, its classified gaps (every
    device, idle.trace_gaps), its breakdown and its copies. Detectors never read files."""

    trace: Trace
    gaps: pd.DataFrame
    breakdown: BreakdownResult
    copies: MemcpyResult  # the data movement detector's result


@dataclass(frozen=True)
class Detector:
    name: str
    title: str  # the heading of its line in reports
    description: str  # what it finds, for the agent's tool and the docs
    params: Any  # its default parameters: a frozen dataclass
    result: type  # its result: a frozen dataclass with to_dict(); None when the trace cannot say
    run: Callable[[Inputs, Any], Any]  # (inputs, params) -> result or None
    sentence: Callable[[Any], str | None]  # the result in one sentence for reports, or None
    since: str  # the schema_version that added its key to `analyze --json` (a minor version: keys added)
    needs: tuple[str, str]  # where its result is None: (why the trace cannot say, how to profile so it can)
    tool: bool = True  # the agent gets a tool that returns the result's JSON for a rank


DETECTORS: tuple[Detector, ...] = (
    Detector("host_pauses", "Host pauses", "Idle GPU time while the host was in Python's garbage collector "
             "(gc.collect) or importing modules: the calls, their host time and the device idle time under them.",
             HostPausesParams(), HostPausesResult, lambda i, p: detect_host_pauses(i.trace, i.gaps, p),
             host_pauses_sentence, since="1.2",
             needs=("the trace has no Python frames", "profile with torch.profiler.profile(with_stack=True)")),
    Detector("collectives", "Collective bandwidth", "Bytes, algorithm and bus bandwidth (nccl-tests conventions) per "
             "collective and process group, against the assumed link's peak (NVLink, PCIe, xGMI, network; the "
             "assumption is stated); the message-size distribution; whether communication is bandwidth-bound, "
             "latency-bound (many small messages) or below the link's peak, and whether it is exposed.",
             CollectivesParams(), CollectivesResult, lambda i, p: detect_collectives(i.trace, p),
             collectives_sentence, since="1.4",
             needs=("the trace's collective kernels carry no payload (message sizes), or it has none",
                    "profile with PyTorch >= 2.1, whose profiler records each NCCL/RCCL kernel's collective, "
                    "message sizes, dtype and process group")),
    Detector("interconnect", "Links", "Each copy kind's achieved bandwidth against its link's peak (HtoD/DtoH: the "
             "host link, PCIe or NVLink-C2C; PtoP: NVLink), with the assumption; and, from Nsight Systems GPU "
             "metrics, PCIe and NVLink throughput measured during copies and collectives and SM and tensor-core "
             "activity during the hot kernels, per GPU.",
             InterconnectParams(), InterconnectResult, lambda i, p: detect_interconnect(i.trace, i.copies, p),
             interconnect_sentence, since="1.4",
             needs=("the trace has no copies between host and device or between GPUs, and no GPU metrics",
                    "for link utilisation, profile with nsys --gpu-metrics-devices=all and export to SQLite")),
    Detector("shapes", "Shapes", "Matmul, convolution and attention per unique shape (M×K×N, the attention dims, "
             "the convolution's input and weight) and dtype: calls, device time, achieved TFLOP/s (all calls, the "
             "slowest, the fastest), TB/s, MFU, and which shapes run at under half their op's best shape (slow, "
             "with the time they lose).",
             ShapesParams(), ShapesResult, lambda i, p: detect_shapes(i.trace, p), shapes_sentence, since="2.0",
             needs=("no matmul, convolution or attention op has recorded shapes and device time",
                    "profile with torch.profiler.profile(record_shapes=True)")),
    Detector("streams", "Streams", "Each GPU stream over its own span: ops, busy and idle time, the idle split into "
             "host wait (the next op launched only after the stream emptied), kernel wait (queued ops' own overhead) "
             "and other wait (another stream, an event); and streams where collectives and compute take turns, "
             "which cannot overlap (with the fix).",
             StreamsParams(), StreamsResult, lambda i, p: detect_streams(i.trace, p), streams_sentence, since="2.0",
             needs=("the trace has no device work", "profile with CUDA (or ROCm) activities on")),
    Detector("launch_queue", "Launch queue", "Per stream, the launched ops not yet finished over time (the most, "
             "the time-weighted mean, a curve), and the host time spent blocked in launch calls on a full queue (the "
             "GPU, not the host, then sets the pace).",
             LaunchQueueParams(), LaunchQueueResult, lambda i, p: detect_launch_queue(i.trace, p),
             launch_queue_sentence, since="2.0",
             needs=("no device op's launch call is in the trace",
                    "profile with CPU and CUDA activities, so that launch calls link to their kernels")),
    Detector("phases", "Inference phases", "An inference server's steps (SGLang step[EXTEND/DECODE …], vLLM "
             "execute_N_context_C(…)_generation_G(…)) split into prefill, decode and mixed: per phase the steps and "
             "tokens, busy and idle time, launch gaps, the share of kernel time replayed from CUDA graphs, whether it "
             "is launch-bound (and CUDA-graph advice), FLOP/s and MFU, and its hot kernels.",
             PhasesParams(), PhasesResult, lambda i, p: detect_phases(i.trace, i.gaps, p), phases_sentence, since="1.4",
             needs=("the trace has no inference server steps (SGLang's step[...] or vLLM's execute_... ranges)",
                    "profile the server with its own profiler hooks (SGLang /start_profile, vLLM --profiler-config), "
                    "which record those ranges")),
)


def run_all(inputs: Inputs, params: dict[str, Any]) -> dict[str, Any]:
    """Every registered detector's result (None where the trace cannot say), by name; `params`
    holds each one's parameters by name (the default where absent)."""
    return {d.name: timed(d.name, partial(d.run, inputs, params.get(d.name, d.params))) for d in DETECTORS}
