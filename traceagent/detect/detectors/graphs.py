"""CUDA (and HIP) graphs: how many replays, kernels per replay, the share of device time inside
them, and the launch calls they saved. A graph launch is one host call whose correlation id every
kernel of the replay carries."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...format import duration, percent
from ...trace.model import Trace, matches
from ...trace.normalize import GRAPH_LAUNCH
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
    return GraphsResult(len(launches), n_replayed, round(n_replayed / replays, 1) if replays else None, us(device),
                        pct(device, total), saved, round(float(np.float64(saved) * median_launch_us), 3))


def graphs_sentence(graphs: GraphsResult | None) -> str | None:
    """CUDA graph replays and what they saved; None when the trace has none."""
    if not graphs or not graphs.used:
        return None
    return (f"{graphs.launches} CUDA graph replays ran {graphs.kernels} kernels "
            f"({percent(graphs.share_of_kernel_time_pct)} of kernel time), saving {graphs.launch_calls_saved} "
            f"launch calls (about {duration(graphs.saved_us)} of host time).")


DETECTOR = Detector("graphs", "CUDA graphs", "CUDA graph launches and the kernels they replay.", None, GraphsResult,
                    lambda i, p: detect_graphs(i.trace), place=18, tool=False,
                    sentence=lambda r, p: graphs_sentence(r))
