"""Launch: how long device work waits after its launch call, and how many kernels run shorter
than the call that launched them (the sign of a launch-bound program)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...format import duration, percent
from ...trace.model import Trace, matches
from ...trace.normalize import GRAPH_LAUNCH
from ..core.host import LAUNCH_CALLS, kernel_launches
from ..core.view import on_device, pct, us
from .base import Detector, Key


@dataclass(frozen=True)
class LaunchResult:
    kernels: int  # kernels linked to their launch call
    median_latency_us: float  # launch call start → kernel start (a graph replay's: its first kernel's)
    p90_latency_us: float
    median_launch_us: float  # duration of the launch call itself (graph replays' kernels have none of their own)
    median_kernel_us: float
    short_kernel_pct: float  # kernels shorter than their launch call, of those not replayed from a graph
    by_call: dict[str, int]  # launches per API (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch...)
    before_launch_pct: float = 0.0  # kernels that start before their launch call: host and device clocks disagree
    min_latency_us: float = 0.0  # the shortest launch call start → kernel start: far above a launch's cost, a queue


#: what reports say of launches where no kernel is linked to its launch call (kernels == 0)
NO_LAUNCHES = ("No kernel is linked to the call that launched it (the trace has no kernels, or no CUDA runtime "
               "events for them): launch latency and launch cost cannot be measured here.")


def detect_launch(trace: Trace, device: int | None = None) -> LaunchResult:
    """Launch statistics of the kernels of every GPU, or of one."""
    linked = on_device(kernel_launches(trace), device)
    linked = linked[matches(linked["name_call"], LAUNCH_CALLS)]
    if linked.empty:
        return LaunchResult(0, 0.0, 0.0, 0.0, 0.0, 0.0, {})
    # a graph launch is one call for all its kernels: the first kernel of each replay measures the
    # launch latency (a later one waits for the nodes before it), and none pays a launch of its own
    graph = matches(linked["name_call"], GRAPH_LAUNCH)
    own = ~graph
    timed = own.copy()
    if graph.any():  # rows are in start order: a replay's first is the first of its call (thread, start)
        timed[graph] = ~linked.loc[graph, ["tid", "start_call"]].duplicated().to_numpy()
    start, start_call = linked["start"].to_numpy(), linked["start_call"].to_numpy()
    latency = (start - start_call)[timed]
    # a kernel cannot start before it is launched: such pairs measure clock skew, not latency
    skewed = latency < 0
    measured = latency[~skewed] if (~skewed).any() else np.zeros(1, dtype=np.int64)
    call_dur = (linked["end_call"].to_numpy() - start_call)[own]
    kernel_dur = (linked["end"].to_numpy() - start)[own]
    by_call = linked["name_call"].astype(object).value_counts()  # not str: pandas 3 would build Arrow strings
    return LaunchResult(
        kernels=len(linked), median_latency_us=us(np.median(measured)), p90_latency_us=us(np.percentile(measured, 90)),
        median_launch_us=us(np.median(call_dur)) if len(call_dur) else 0.0,
        median_kernel_us=us(np.median(kernel_dur)) if len(kernel_dur) else 0.0,
        short_kernel_pct=pct((kernel_dur < call_dur).sum(), len(call_dur)),
        by_call={str(k): int(v) for k, v in by_call.items()}, before_launch_pct=pct(int(skewed.sum()), len(latency)),
        min_latency_us=us(measured.min()),
    )


#: kernels starting before their launch call above this share (%): the host's and the GPU's clocks disagree
CLOCK_SKEW_PCT = 1.0
#: no kernel starting sooner than this after its launch call (µs): the GPU never caught up with the host
#: (a launch takes a few µs to reach the GPU; the test traces' shortest are 2-11 µs where it ever caught up)
NEVER_CAUGHT_UP_US = 10_000.0


def latency_note(launch: LaunchResult) -> str | None:
    """What the launch-to-start times say about the trace's clocks or queue, where they say
    something: launch latency is then not the launch path's cost."""
    if launch.before_launch_pct >= CLOCK_SKEW_PCT:
        return (f"{percent(launch.before_launch_pct)} of kernels start before their launch call: the host's and the "
                "GPU's clocks disagree, so times between them (launch latency, what the host did during a gap) are off "
                "by as much.")
    if launch.kernels and launch.min_latency_us >= NEVER_CAUGHT_UP_US:
        return (f"No kernel started sooner than {duration(launch.min_latency_us)} after its launch call: the GPU "
                "never caught up with the host in this trace (work queued before it began, or the host's and the GPU's "
                "clocks offset: the trace cannot tell them apart), so launch latency here is queueing.")
    return None


DETECTOR = Detector("launch", "Launches", "Launch latency and kernels shorter than their launch call.", None,
                    LaunchResult, lambda i, p: detect_launch(i.trace), keys=(Key("launch", LaunchResult),), place=15,
                    tool=False)
