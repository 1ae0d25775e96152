"""CUDA (and HIP) graphs: how many replays, kernels per replay, the share of device time inside
them, and the launch calls they saved. A graph launch is one host call whose correlation id every
kernel of the replay carries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...format import duration, percent
from ...trace.model import Trace, among, matches
from ...trace.normalize import GRAPH_LAUNCH, thread_keys
from ..core.host import LAUNCH_CALLS, calls_by_correlation
from ..core.view import pct, us
from .base import Detector


@dataclass(frozen=True)
class GraphsResult:
    launches: int  # graph replays
    kernels: int  # kernels run inside them
    kernels_per_launch: float | None
    device_us: float  # their kernels' device time
    share_of_kernel_time_pct: float  # of all kernel time on the rank
    launch_calls_saved: int  # kernels − replays: launch calls the host did not make
    saved_us: float  # those calls at the median cost of a launch call outside graphs: an estimate
    used: bool = field(init=False, default=False)  # whether the rank replayed any graph
    # 2.13: graphs captured in the trace (cudaStreamBeginCapture / hipStreamBeginCapture), the host time from
    # each capture's begin to its end on its thread (the work recorded, not run), and instantiating them
    captures: int = 0
    capture_us: float = 0.0
    instantiate_us: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "used", self.launches > 0)


def replayed(trace: Trace) -> np.ndarray:
    """Which device rows are kernels replayed from a graph: they carry a graph launch's correlation."""
    calls = calls_by_correlation(trace)
    launches = calls[matches(calls["name"], GRAPH_LAUNCH)]
    gpu = trace.gpu
    return (gpu["kind"] == "kernel").to_numpy() & np.isin(gpu["correlation"].to_numpy(), launches.index.to_numpy())


def detect_graphs(trace: Trace) -> GraphsResult:
    """Graph replays on the rank; the launch calls they saved are priced at the median ordinary
    launch call of the trace."""
    calls = calls_by_correlation(trace)
    graph = matches(calls["name"], GRAPH_LAUNCH)
    launches = calls[graph]
    ordinary = (calls["end"] - calls["start"]).to_numpy()[matches(calls["name"], LAUNCH_CALLS) & ~graph]
    median_launch_us = us(np.median(ordinary)) if len(ordinary) else 0.0
    gpu = trace.gpu  # columns as arrays: a copy of the kernel rows cost more than all the rest
    kernel = (gpu["kind"] == "kernel").to_numpy()
    dur = (gpu["end"] - gpu["start"]).to_numpy()
    correlation = gpu["correlation"].to_numpy()
    inside = replayed(trace)
    n_replayed = int(inside.sum())
    replays = len(np.unique(correlation[inside])) if n_replayed else len(launches)
    total, device = float(dur[kernel].sum()), float(dur[inside].sum())
    saved = max(n_replayed - replays, 0)
    captures, capture_ns, instantiate_ns = _captures(trace)
    return GraphsResult(len(launches), n_replayed, round(n_replayed / replays, 1) if replays else None, us(device),
                        pct(device, total), saved, round(float(np.float64(saved) * median_launch_us), 3),
                        captures, us(capture_ns), us(instantiate_ns))


_BEGIN_CAPTURE, _END_CAPTURE = re.compile(r"^(?:cuda|hip)StreamBeginCapture"), re.compile(r"^(?:cuda|hip)StreamEndCapture")
_INSTANTIATE = re.compile(r"^(?:cuda|hip)GraphInstantiate")


def _captures(trace: Trace) -> tuple[int, int, int]:
    """Stream captures begun, the ns from each begin to the first end after it on its thread (to the
    thread's last event where the trace cut it), and the ns spent instantiating graphs."""
    cpu = trace.cpu
    api = among(cpu["kind"], ["runtime", "driver"])
    begin, end = api & matches(cpu["name"], _BEGIN_CAPTURE), api & matches(cpu["name"], _END_CAPTURE)
    start, stop = cpu["start"].to_numpy(np.int64), cpu["end"].to_numpy(np.int64)
    instantiate = api & matches(cpu["name"], _INSTANTIATE)
    instantiate_ns = int((stop[instantiate] - start[instantiate]).sum())
    if not begin.any():
        return 0, 0, instantiate_ns
    thread = thread_keys(cpu["pid"].to_numpy(np.int64), cpu["tid"].to_numpy(np.int64))
    captured = 0
    for key in np.unique(thread[begin]):  # a thread or two capture
        mine = thread == key
        ends = np.append(np.sort(stop[end & mine]), stop[mine].max())  # after the last end: the thread's last event
        starts = start[begin & mine]
        captured += int((ends[np.searchsorted(ends[:-1], starts, side="left")] - starts).sum())
    return int(begin.sum()), captured, instantiate_ns


def graphs_sentence(graphs: GraphsResult | None) -> str | None:
    """CUDA graph replays and what they saved; None when the trace has none."""
    if not graphs or not (graphs.used or graphs.captures):
        return None
    replays = (f"{graphs.launches} CUDA graph replays ran {graphs.kernels} kernels "
               f"({percent(graphs.share_of_kernel_time_pct)} of kernel time), saving {graphs.launch_calls_saved} "
               f"launch calls (about {duration(graphs.saved_us)} of host time).") if graphs.used else ""
    return " ".join(part for part in (replays, capture_sentence(graphs)) if part)


def capture_sentence(graphs: GraphsResult) -> str:
    """'25 graph captures: 45.31 ms of host time from each capture's begin to its end, 1.69 ms instantiating.'"""
    if not graphs.captures:
        return ""
    return (f"{graphs.captures} graph {'capture' if graphs.captures == 1 else 'captures'}: {duration(graphs.capture_us)} "
            f"of host time from each capture's begin to its end, {duration(graphs.instantiate_us)} instantiating.")


DETECTOR = Detector("graphs", "CUDA graphs", "CUDA graph launches and the kernels they replay.", None, GraphsResult,
                    lambda i, p: detect_graphs(i.trace), place=18, tool=False,
                    sentence=lambda r, p: graphs_sentence(r))
