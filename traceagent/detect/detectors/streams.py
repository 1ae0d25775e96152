"""Per stream: how busy each GPU stream is, why it idles, and streams that run collectives beside
compute (as HTA's per-stream idle breakdown and nsys-ai's NCCL-on-the-compute-stream rule).

A stream's idle is the time between its ops, within its own span. Each stretch before an op is
- host wait: the op was launched only after the stream's previous op had ended (its queue was
  empty: the stream waited for the host);
- kernel wait: the op was already queued and the stretch is shorter than `kernel_wait_us` (the
  GPU's own overhead between queued kernels);
- other wait: the op was queued and still waited longer (for another stream's event, a
  dependency, a host-side stream wait), or its launch is not in the trace (that part also apart:
  a trace of the GPU alone cannot say what its streams waited for).

A stream that runs both collective kernels and compute kernels serializes them: communication
there cannot overlap compute, however the code is written.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import duration, percent
from ...trace.model import Trace, per_trace, rows_where
from ..core import intervals as iv
from ..core.bounds import Count, Micros
from ..core.host import launch_calls
from ..core.view import index_type, pct, us, views_of
from .base import Detector


@dataclass(frozen=True)
class StreamsParams:
    """kernel_wait_us: a stretch before an already queued op shorter than this is the GPU's own
    overhead between kernels. top: how many streams to list."""

    kernel_wait_us: Micros = 10.0
    top: Count = 16


@dataclass(frozen=True)
class StreamRow:
    """One stream of one GPU, over its own span (first to last op on it)."""

    device: int
    stream: int
    ops: int
    kernels: int
    collectives: int  # collective kernels among them
    span_us: float
    busy_us: float
    idle_us: float  # span − busy
    host_wait_us: float
    kernel_wait_us: float
    other_wait_us: float
    busy_of_span_pct: float
    unlaunched_wait_us: float = 0.0  # of the other wait: before ops whose launch call is not in the trace


@dataclass(frozen=True)
class SharedStream:
    """A stream where collectives and compute kernels take turns."""

    device: int
    stream: int
    collectives: int
    compute_kernels: int
    comm_us: float


@dataclass(frozen=True)
class StreamsResult:
    streams: int
    rows: list[StreamRow]  # most busy first
    shared: list[SharedStream]  # streams running both NCCL/RCCL and compute
    host_wait_us: float  # over every stream
    kernel_wait_us: float
    other_wait_us: float
    # 2.15: the time some stream of a GPU is busy, and the time two or more of its streams are busy at
    # once, each added up over the rank's GPUs ("do kernels overlap across streams?")
    busy_us: float = 0.0
    concurrent_us: float = 0.0
    concurrent_pct: float = 0.0  # of busy_us


SHARED_FIX = ("run collectives on a stream of their own: DDP and FSDP do; for torch.distributed calls of your own, "
              "use async_op=True (or a dedicated torch.cuda.Stream) and wait on the handle only where the result is "
              "needed")


@per_trace  # the rank's comm, its streams and each of its GPUs' comm read them
def shared_streams(trace: Trace) -> list[SharedStream]:
    """The streams where collectives and compute kernels both run, on every device of the rank."""
    kernels = rows_where(trace.gpu, (trace.gpu["kind"] == "kernel").to_numpy())
    if kernels.empty or not kernels["is_comm"].any():
        return []
    dur = (kernels["end"] - kernels["start"]).to_numpy(np.int64)
    table = pd.DataFrame({"device": kernels["device"].to_numpy(), "stream": kernels["stream"].to_numpy(),
                          "comm": kernels["is_comm"].to_numpy(), "comm_ns": np.where(kernels["is_comm"], dur, 0)})
    by = table.groupby(["device", "stream"])  # sums and size apart: pandas' named aggregation costs twice as much
    grouped = by[["comm", "comm_ns"]].sum().rename(columns={"comm": "collectives"}).assign(kernels=by.size())
    mixed = grouped[(grouped["collectives"] > 0) & (grouped["collectives"] < grouped["kernels"])]
    return [SharedStream(int(d), int(s), int(r["collectives"]), int(r["kernels"] - r["collectives"]), us(r["comm_ns"]))
            for (d, s), r in mixed.sort_values("comm_ns", ascending=False).iterrows()]


def _at_once_ns(device: np.ndarray, start: np.ndarray, ended: np.ndarray, same: np.ndarray) -> int:
    """ns with two or more streams of a GPU busy at once, added up over GPUs; the ops are by GPU, stream and
    start, `ended` the latest end on their stream so far. Each stream's ops merge into busy stretches; by
    start across a GPU's streams, a stretch overlaps those before it from its start to the earlier of its
    end and theirs (the latest so far), and those pieces' union is the time. A GPU with one stream has none."""
    at_once = 0
    edges = np.r_[0, np.flatnonzero(device[1:] != device[:-1]) + 1, len(device)]  # each GPU's run of ops
    for lo, hi in itertools.pairwise(edges.tolist()):
        if same[lo + 1:hi].all():  # one stream on this GPU (a GPU's loop, not an event's)
            continue
        s, e = start[lo:hi], ended[lo:hi]
        opens = ~same[lo:hi]
        opens[1:] |= s[1:] > e[:-1]
        first = np.flatnonzero(opens)
        begins, ends = s[first], np.maximum.reduceat(e, first)
        by_start = np.argsort(begins, kind="stable")
        begins, ends = begins[by_start], ends[by_start]
        piece_ends = np.minimum(ends[1:], np.maximum.accumulate(ends)[:-1])
        at_once += iv.length(iv.union(begins[1:], piece_ends))  # union drops the empty pieces
    return at_once


def detect_streams(trace: Trace, params: StreamsParams = StreamsParams()) -> StreamsResult | None:
    """None when the trace has no device work. The ops are read as arrays by stream and start, and
    each per-op array is summed by stream and let go before the next is made: ten million ops hold
    a few columns at once, not a dozen."""
    gpu = trace.gpu
    rows = np.flatnonzero((gpu["kind"] != "sync").to_numpy()).astype(index_type(len(gpu)))
    if not len(rows):
        return None
    busy = sum(iv.length(v.busy) for v in views_of(trace))
    device, stream = gpu["device"].to_numpy(np.int64)[rows], gpu["stream"].to_numpy(np.int64)[rows]
    rows = rows[np.lexsort((gpu["start"].to_numpy(np.int64)[rows], stream, device))]  # each stream a run, by start
    device, stream = gpu["device"].to_numpy(np.int64)[rows], gpu["stream"].to_numpy(np.int64)[rows]
    same = np.r_[False, (device[1:] == device[:-1]) & (stream[1:] == stream[:-1])]  # a previous op on this stream
    firsts = np.flatnonzero(~same)  # each stream's first op
    devices, streams_of, ops = device[firsts].tolist(), stream[firsts].tolist(), np.diff(np.append(firsts, len(rows))).tolist()
    del stream

    def per_stream(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, firsts, dtype=np.int64)

    is_kernel = (gpu["kind"] == "kernel").to_numpy()[rows]
    kernels, collectives = per_stream(is_kernel), per_stream(is_kernel & gpu["is_comm"].to_numpy(bool)[rows])
    del is_kernel
    start, end = gpu["start"].to_numpy(np.int64)[rows], gpu["end"].to_numpy(np.int64)[rows]
    spans = np.maximum.reduceat(end, firsts) - np.minimum.reduceat(start, firsts)
    # what each stream had done before each op: the end of its latest op so far (ops may overlap by ns)
    ended = pd.Series(end).groupby(np.cumsum(~same)).cummax().to_numpy()
    del end
    concurrent = _at_once_ns(device, start, ended, same)
    del device
    launch = launch_calls(trace, gpu["correlation"].to_numpy()[rows], ("start",))["start"]
    launched = launch.notna().to_numpy()
    queued = np.zeros(len(rows), dtype=bool)  # launched before the stream was done with the op before it (exact ns)
    queued[1:] = launched[1:] & (launch.to_numpy(np.int64, na_value=-1)[1:] < ended[:-1])
    del launch, rows
    gap = np.zeros(len(start), dtype=np.int64)  # the op's wait for its stream
    np.subtract(start[1:], ended[:-1], out=gap[1:])
    del start, ended
    np.maximum(gap, 0, out=gap)
    gap[~same] = 0
    host = same & launched & ~queued
    short = queued & (gap < params.kernel_wait_us * 1000)
    idle, unlaunched = per_stream(gap), per_stream(np.where(same & ~launched, gap, 0))
    host_wait, kernel_wait = per_stream(np.where(host, gap, 0)), per_stream(np.where(short, gap, 0))
    other_wait = per_stream(np.where(same & ~host & ~short, gap, 0))
    del gap, host, short, queued, launched, same
    columns = zip(devices, streams_of, ops, kernels.tolist(), collectives.tolist(), spans.tolist(), idle.tolist(),
                  host_wait.tolist(), kernel_wait.tolist(), other_wait.tolist(), unlaunched.tolist())
    streams = [StreamRow(d, s, n, k, c, us(span), us(span - i), us(i), us(h), us(q), us(o), pct(span - i, span), us(u))
               for d, s, n, k, c, span, i, h, q, o, u in columns]
    streams.sort(key=lambda r: -r.busy_us)
    return StreamsResult(len(streams), streams[:params.top], list(shared_streams(trace)), us(int(host_wait.sum())),
                         us(int(kernel_wait.sum())), us(int(other_wait.sum())), us(busy), us(concurrent),
                         pct(concurrent, busy))


def streams_sentence(result: StreamsResult) -> str | None:
    text = ""
    if result.shared:
        s = result.shared[0]
        text = (f"GPU {s.device} stream {s.stream} runs both collectives ({s.collectives}, {duration(s.comm_us)}) and "
                f"{s.compute_kernels} compute kernels: there they cannot overlap, so that communication is exposed "
                f"whatever the code asks. Fix: {SHARED_FIX}. ")
    busiest = result.rows[0]
    waits = {"the host (host wait)": busiest.host_wait_us, "queued kernels (kernel wait)": busiest.kernel_wait_us,
             "other streams or events (other wait)": busiest.other_wait_us}
    why = max(waits, key=waits.__getitem__)
    if not busiest.idle_us:
        idle = ""
    elif busiest.unlaunched_wait_us > busiest.idle_us / 2:  # no host side recorded for its ops
        idle = (f"; of its {duration(busiest.idle_us)} idle, {duration(busiest.unlaunched_wait_us)} is before ops "
                "whose launch call is not in the trace, so what they waited for is unknown (other wait)")
    else:
        idle = f"; of its {duration(busiest.idle_us)} idle, most waits for {why}: {duration(waits[why])}"
    many = f"{result.streams} streams; the busiest, " if result.streams > 1 else "One stream, "
    at_once = (f" Two or more streams of a GPU run at once for {duration(result.concurrent_us)}, "
               f"{percent(result.concurrent_pct)} of the time the GPUs are busy." if result.concurrent_us else "")
    return text + (f"{many}GPU {busiest.device} stream {busiest.stream}, is busy {busiest.busy_of_span_pct:.1f}% of "
                   f"its span{idle}.{at_once}")


#: whether streams run at once, asked ("do kernels overlap across streams?", "is there any concurrency?")
_AT_ONCE_ASKED = re.compile(r"\boverlap\w*|\bconcurren\w*|\bin parallel\b|\bat (?:the same time|once)\b|\bsimultaneous\w*",
                            re.I)


def streams_lead(result: StreamsResult, question: str) -> str | None:
    """Whether two or more streams of a GPU run at once, and for how long, where the question asks it; else None."""
    if not _AT_ONCE_ASKED.search(question):
        return None
    if result.concurrent_us:
        return (f"**Yes: two or more streams of a GPU run at once for {duration(result.concurrent_us)}**, "
                f"{percent(result.concurrent_pct)} of the {duration(result.busy_us)} the GPUs are busy.")
    if result.streams == 1:
        return "**No:** one stream runs all the device work, so nothing runs beside it."
    return f"**No:** the {result.streams} streams never run at once on a GPU: they take turns."


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("streams", "Streams", "Each GPU stream over its own span: ops, busy and idle time, the idle split into "
                    "host wait (the next op launched only after the stream emptied), kernel wait (queued ops' own overhead) "
                    "and other wait (another stream, an event); and streams where collectives and compute take turns, "
                    "which cannot overlap (with the fix).",
                    StreamsParams(), StreamsResult, lambda i, p: detect_streams(i.trace, p),
                    lambda r, p: streams_sentence(r), since="2.0",
                    needs=("the trace has no device work", "profile with CUDA (or ROCm) activities on"),
                    asks=r"\bstreams?\b|host wait|kernel wait|\bconcurren\w*|\bkernels? (?:run(?:ning)? )?(?:overlap\w*|"
                         r"in parallel|at (?:the same|once))|\boverlapping kernels\b",
                    lead=streams_lead)
