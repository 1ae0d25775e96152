"""The launch queue (as HTA's queue-length analysis): per stream, how many launched ops had not yet
finished over time, and how long the host sat blocked in launch calls because the queue was full.

A CUDA stream holds about a thousand pending launches; past that a launch call blocks until one
finishes. A host blocked on a full queue is ahead of the GPU: the GPU, not the host, sets the
pace, and launch-side fixes (CUDA graphs, fewer launches) buy nothing there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...format import duration
from ...trace.model import Trace, rows_where
from ..core import intervals as iv
from ..core.asked import asks_yes_or_no
from ..core.bounds import Count
from ..core.host import calls_by_correlation, launch_calls
from ..core.view import us
from .base import Detector

#: points of each stream's queue-length curve
SAMPLES = 64


@dataclass(frozen=True)
class LaunchQueueParams:
    """full_at: a queue this long is full (a launch then blocks until an op finishes; CUDA's limit is
    about 1,024 pending launches). top: how many streams to list."""

    full_at: Count = 1000
    top: Count = 8


@dataclass(frozen=True)
class StreamQueue:
    """One stream's queue of launched, unfinished ops."""

    device: int
    stream: int
    launches: int  # ops on it whose launch call is in the trace
    max_queue: int
    mean_queue: float  # time-weighted, from its first launch to its last op's end
    full_us: float  # time the queue was at or above full_at
    blocked_us: float  # host time in launch calls made while it was full
    curve: list[tuple[float, int]]  # (µs from the trace's start, ops queued) at SAMPLES points


@dataclass(frozen=True)
class LaunchQueueResult:
    full_at: int
    streams: list[StreamQueue]  # largest queue first
    blocked_us: float  # every stream's
    max_queue: int


def detect_launch_queue(trace: Trace, params: LaunchQueueParams = LaunchQueueParams()) -> LaunchQueueResult | None:
    """None when no device op's launch call is in the trace."""
    work = rows_where(trace.gpu, (trace.gpu["kind"] != "sync").to_numpy())
    calls = calls_by_correlation(trace)
    if work.empty or calls.empty:
        return None
    launch = launch_calls(trace, work["correlation"].to_numpy(), ("start", "end"))
    known = launch["start"].notna().to_numpy()
    if not known.any():
        return None
    every = bool(known.all())

    def kept(values: np.ndarray) -> np.ndarray:  # the ops with a launch call; no copy when that is all of them
        return values if every else values[known]

    called = kept(launch["start"].to_numpy(np.int64, na_value=-1))
    call_ns = kept(launch["end"].to_numpy(np.int64, na_value=-1)) - called
    start, end = kept(work["start"].to_numpy(np.int64)), kept(work["end"].to_numpy(np.int64))
    device, stream = kept(work["device"].to_numpy()), kept(work["stream"].to_numpy())
    del launch
    origin = trace.origin_ns()
    streams = []
    for rows, first in _by_stream(device, stream):  # one pass per stream
        streams.append(_stream(int(device[first]), int(stream[first]), called[rows], call_ns[rows], start[rows],
                               end[rows], origin, params.full_at))
    streams.sort(key=lambda s: (-s.max_queue, -s.blocked_us))
    return LaunchQueueResult(params.full_at, streams[:params.top], us(sum(s.blocked_us * 1000 for s in streams)),
                             max(s.max_queue for s in streams))


def _by_stream(device: np.ndarray, stream: np.ndarray) -> list[tuple[np.ndarray | slice, int]]:
    """Each stream's rows and its first row, streams in order of first appearance; one stream's
    rows as a slice (no copy of a million-op table to take all of it)."""
    key = device.astype(np.int64) * (1 << 32) + stream.astype(np.int64)
    if bool((key == key[0]).all()):
        return [(slice(None), 0)]
    order = np.argsort(key, kind="stable")
    parts = np.split(order, np.flatnonzero(np.diff(key[order])) + 1)
    return sorted(((rows, int(rows[0])) for rows in parts), key=lambda part: part[1])


def _stream(device: int, stream: int, called: np.ndarray, call_ns: np.ndarray, start: np.ndarray, end: np.ndarray,
            origin: int, full_at: int) -> StreamQueue:
    # an op is in the queue once its launch call returns, or once it starts if that is sooner
    entered = np.sort(np.minimum(called + call_ns, start))
    ends = np.sort(end)
    # queued when each launch call began: entered by then, not yet finished; full: the call blocks
    before = np.searchsorted(entered, called, side="right") - np.searchsorted(ends, called, side="right")
    blocked = int(call_ns[before >= full_at].sum())
    del before
    # the queue as a step function: -1 as each op ends, +1 as each enters, ends first at the same instant
    # (a blocked launch returns as the op it waited for finishes). Times doubled with the low bit 0 for an
    # end and 1 for an entry order both in one sort of two sorted runs: no argsort, no gathers (times are
    # within ±2**61 ns: doubled, they stay in int64)
    events = np.concatenate([ends * 2, entered * 2 + 1])
    events.sort(kind="stable")
    level = np.cumsum(events & 1) * 2 - np.arange(1, len(events) + 1)  # entries so far less ends so far
    times = events >> 1
    del events
    held = np.diff(times, append=times[-1])
    total = int(times[-1] - times[0])
    mean = float((level * held).sum() / total) if total else float(level.max())
    full = int(held[level >= full_at].sum())
    samples = iv.even_edges(times[0], times[-1], SAMPLES - 1)
    queued = np.searchsorted(entered, samples, side="right") - np.searchsorted(ends, samples, side="right")
    return StreamQueue(device, stream, len(entered), int(level.max()), round(mean, 2), us(full), us(blocked),
                       [(us(int(t) - origin), int(q)) for t, q in zip(samples, queued)])


def launch_queue_sentence(result: LaunchQueueResult) -> str | None:
    top = result.streams[0]
    text = (f"GPU {top.device} stream {top.stream} had up to {top.max_queue} launched ops waiting (mean "
            f"{top.mean_queue:g})")
    if result.blocked_us:
        return (text + f"; the host spent {duration(result.blocked_us)} blocked in launch calls on a full queue "
                f"({result.full_at}+ waiting): it is ahead of the GPU, so the GPU's work, not launching, sets the pace.")
    return text + "."


def launch_queue_lead(result: LaunchQueueResult, question: str) -> str | None:
    """Whether the launch queue filled, where the question asks ("is the launch queue full?"), else None."""
    if not re.search(r"\bfull\b", question, re.I) or not asks_yes_or_no(question):
        return None
    if result.blocked_us:
        return (f"**Yes:** the host blocked {duration(result.blocked_us)} in launch calls on a full queue (at most "
                f"{result.max_queue} ops waited).")
    return f"**No:** no launch call waited on a full queue (at most {result.max_queue} ops waited)."


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("launch_queue", "Launch queue", "Per stream, the launched ops not yet finished over time (the most, "
                    "the time-weighted mean, a curve), and the host time spent blocked in launch calls on a full queue (the "
                    "GPU, not the host, then sets the pace).",
                    LaunchQueueParams(), LaunchQueueResult, lambda i, p: detect_launch_queue(i.trace, p),
                    lambda r, p: launch_queue_sentence(r), since="2.0",
                    needs=("no device op's launch call is in the trace",
                           "profile with CPU and CUDA activities, so that launch calls link to their kernels"),
                    asks=r"launch queue|queue(?:d)? (?:length|depth)|queued launches|outstanding (?:launches|kernels)"
                         r"|full queue|\b(?:kernels?|ops|launches|work)\b.{0,20}\bwait\w* in (?:the |a )?queue\b"
                         r"|\bhow (?:deep|long|full) is the (?:launch |kernel )?queue\b"
                         # how far the host runs ahead of the device: "is there CPU-GPU overlap?"
                         r"|\b(?:cpu|host)\b.{0,15}\b(?:gpu|device)\b.{0,10}\boverlap|\boverlap\w*\b.{0,20}\b(?:cpu|host)\b"
                         r".{0,15}\b(?:gpu|device)\b|\b(?:cpu|host) (?:runs? |get(?:s|ting)? )?ahead",
                    lead=launch_queue_lead)
