"""Memory: the caching allocator's [memory] events (Kineto, profile_memory=True) per GPU, and the
allocator calls that synchronize (cudaMalloc, cudaFree, pinned host allocations) with the idle time
they sit on.

Peak allocated and reserved come from the events' totals when the trace has them (PyTorch ≥ 1.10).
Older traces give only each event's signed bytes: the allocated total is then reconstructed as their
running sum from the first event, raised by what frees of earlier memory show was already held
(the least start that keeps the total from going negative), and said to be reconstructed. A leak is
memory that grows in every step; churn is allocations per step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ...format import duration, size
from ...trace.model import Trace, among, matches
from ..core import intervals as iv
from ..core.view import pct, us
from .base import Detector

#: allocator calls that synchronize the device (the async and stream-ordered ones do not)
ALLOCATOR_CALLS = re.compile(r"^(?:cudaMalloc|cudaFree|cudaMallocHost|cudaFreeHost|cudaHostAlloc|cudaHostRegister|"
                             r"cuMemAlloc(?:_v2)?|cuMemFree(?:_v2)?|cuMemAllocHost(?:_v2)?|cuMemFreeHost|"
                             r"hipMalloc|hipFree|hipHostMalloc|hipHostFree)$")
LEAK_SHARE = 0.01  # growth in every step that adds up to more than this share of the peak is a leak


@dataclass(frozen=True)
class DeviceMemory:
    device: int
    events: int
    allocations: int
    peak_allocated_bytes: int | None  # the trace's totals, or reconstructed (below); None without events
    peak_reserved_bytes: int | None  # None: the trace has no totals (reserved cannot be reconstructed)
    growth_bytes: int  # the most allocated at once above the trace's first moment
    net_bytes: int  # allocated minus freed over the trace
    step_net_bytes: list[int]  # per step, in step order
    leak: bool
    allocations_per_step: float | None
    reconstructed: bool = False  # peak_allocated_bytes is the running sum of the events' bytes, not the trace's totals
    # 2.15: the GPU's memory (the trace's device properties), and the peak the allocator held (reserved, else
    # allocated) as a share of it ("am I running out of memory?"); None where the trace does not say
    total_bytes: int | None = None
    peak_share_pct: float | None = None


@dataclass(frozen=True)
class MemoryResult:
    devices: list[DeviceMemory]  # GPUs only
    allocator_calls: int
    allocator_call_us: float
    allocator_idle_us: float  # idle device time during those calls: their synchronization's cost
    note: str | None = None


def detect_memory(trace: Trace, gaps: pd.DataFrame) -> MemoryResult:
    """Memory over time per GPU, and the synchronizing allocator calls with the idle they cost."""
    mem = trace.memory[trace.memory["device"] >= 0]
    steps = trace.steps.sort_values("start")
    totals = trace.meta.memory_bytes
    devices = [_with_total(_device(int(d), group, steps), totals.get(int(d))) for d, group in mem.groupby("device")]
    cpu = trace.cpu
    calls = cpu[among(cpu["kind"], ["runtime", "driver"]) & matches(cpu["name"], ALLOCATOR_CALLS)]
    call_iv = iv.union(calls["start"].to_numpy(np.int64), calls["end"].to_numpy(np.int64))
    gap_iv = iv.union(gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64))
    idle_ns = iv.length(iv.intersect(call_iv, gap_iv)) if len(calls) and len(gaps) else 0
    note = None if len(trace.memory) else "no [memory] events: profile with torch.profiler.profile(profile_memory=True)"
    return MemoryResult(devices, len(calls), us((calls["end"] - calls["start"]).sum()), us(idle_ns), note)


def _device(device: int, events: pd.DataFrame, steps: pd.DataFrame) -> DeviceMemory:
    delta = events["bytes"].to_numpy(np.int64)
    level = np.cumsum(delta)
    totals = events["allocated"].to_numpy(np.int64)
    known = totals >= 0
    reserved = events["reserved"].to_numpy(np.int64)
    per_step = []
    if len(steps):
        t = events["time"].to_numpy(np.int64)
        lo = np.searchsorted(t, steps["start"].to_numpy(np.int64), side="left")
        hi = np.searchsorted(t, steps["end"].to_numpy(np.int64), side="right")
        cum = np.concatenate([[0], level])
        per_step = [int(cum[h] - cum[low]) for low, h in zip(lo, hi)]
    reconstructed = not known.any() and len(level) > 0
    if reconstructed:  # the running sum, from the least start that frees of earlier memory imply
        peak: int | None = int(level.max()) + max(0, -int(level.min()))
    else:
        peak = int(totals[known].max()) if known.any() else None
    scale = peak if peak else int(level.max(initial=0))
    leak = len(per_step) >= 2 and all(n > 0 for n in per_step) and sum(per_step) > LEAK_SHARE * max(scale, 1)
    allocations = int((delta > 0).sum())
    return DeviceMemory(device, len(events), allocations, peak, int(reserved[reserved >= 0].max()) if (reserved >= 0).any()
                        else None, int(max(level.max(initial=0), 0)), int(level[-1]) if len(level) else 0, per_step,
                        bool(leak), round(allocations / len(steps), 1) if len(steps) else None, reconstructed)


def _with_total(device: DeviceMemory, total: int | None) -> DeviceMemory:
    """The device with its memory and the share of it the peak took."""
    held = device.peak_reserved_bytes if device.peak_reserved_bytes is not None else device.peak_allocated_bytes
    return replace(device, total_bytes=total, peak_share_pct=pct(held, total) if total and held is not None else None)


def memory_peak(device: DeviceMemory) -> str:
    """One GPU's peak memory: the allocator's totals, or growth from the trace's start without them."""
    if device.peak_allocated_bytes is None:
        return f"up to {size(device.growth_bytes)} above the start"
    if device.reconstructed:
        return (f"peak {size(device.peak_allocated_bytes)} allocated (reconstructed from the events' bytes: "
                "the trace has no allocator totals)" + _of_total(device))
    reserved = device.peak_reserved_bytes
    return (f"peak {size(device.peak_allocated_bytes)} allocated"
            + (f", {size(reserved)} reserved" if reserved is not None else "") + _of_total(device))


def _of_total(device: DeviceMemory) -> str:
    """', of the GPU's 34.09 GB: 8.2%' where the trace gives the GPU's memory."""
    if device.total_bytes is None or device.peak_share_pct is None:
        return ""
    return f", of the GPU's {size(device.total_bytes)}: {device.peak_share_pct:.1f}%"


def memory_sentence(memory: MemoryResult | None) -> str | None:
    """Peak memory per GPU, a leak, and synchronizing allocator calls; None without [memory] events."""
    if not memory or not memory.devices:
        return None
    parts = [f"GPU {d.device}: {memory_peak(d)}" + ("; grows in every step (a leak)" if d.leak else "")
             for d in memory.devices]
    text = "; ".join(parts) + "."
    if memory.allocator_calls:
        text += (f" {memory.allocator_calls} synchronizing allocator calls, {duration(memory.allocator_idle_us)} "
                 "of idle device time during them.")
    return text


DETECTOR = Detector("memory", "Memory", "Allocated device memory over the steps, its peak and its growth.", None,
                    MemoryResult, lambda i, p: detect_memory(i.trace, i["gaps"]), reads=("gaps",), place=17, tool=False,
                    sentence=lambda r, p: memory_sentence(r))
