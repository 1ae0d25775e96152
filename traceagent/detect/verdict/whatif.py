"""What a change would buy: one rank's dependency graph replayed with the change made (Daydream's
method, USENIX ATC 2020, on a profiler trace), so a saving is a prediction rather than a bound.

The graph, from the trace's own records:
- each host call (runtime or driver, the outermost on its thread) follows the one before it on its
  thread, after the host time between them (Python, ops, data loading);
- each device op follows the one before it on its stream, and its launch call: it starts at the
  later of the two, each with its measured delay (a gap on the stream, the time from launch to
  start); the one that bound it keeps its delay, the other the smaller of its own and the typical;
- a blocking call (vocabulary.BLOCKING_CALLS) returns after the device work it waited for (the op
  that ended last before it returned, among the ops its process launched on that device), plus its
  own time after the wait.
Replaying the unchanged graph gives back every time the trace recorded. What the trace does not
link (another stream's event, work launched by a thread the trace did not record) stays as the
measured delay: a change moves it with the op it belongs to, and the result says so.

The replay solves the max-plus recurrence of every chain (a thread, a stream) at once with
cumulative sums and maxima, and alternates host and device until nothing moves: as many passes as
the longest chain of host-device hand-overs (launches, then waits), never a loop per event.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ...format import counted, duration, rate, shorten
from ...trace.model import Trace, among, matches
from ...trace.normalize import thread_keys
from ..core import intervals as iv
from ..core.links import NAMED_LINKS, host_link, link_for, named_link
from ..core.peaks import Peak, autocast_dtype, known_gpus, peak_for
from ..core.view import index_type, us
from ..core.vocabulary import BLOCKING_NAME
from ..detectors.base import Detector, Key
from ..detectors.collectives import parse_payload
from ..detectors.kernels import op_kernels, short_name
from ..detectors.libraries import LABELS, library_keys, library_rows
from ..detectors.precision import TENSOR_FORMATS, name_precisions
from ..detectors.recompute import recompute_frames, recomputed_ops
from ..detectors.steps import step_time_ns
from ..detectors.time_by_class import class_indices, class_rows
from .critical_path import blocking_waits, launch_positions, thread_key
from .savings import Saving, estimate_savings

#: the changes, as `--change` takes them
CHANGES = {
    "dataloader=0": "the host time in data loading removed (dataloader=xF: F times shorter)",
    "sync=0": "every blocking wait removed, the value left on the device (sync:NAME=0: calls named NAME, or under op NAME)",
    "kernel:REGEX=xF": "kernels whose name matches REGEX F times faster",
    "op:NAME=xF": "the kernels an op (aten::mm, a record_function range) launches, at any depth, F times faster",
    "class:NAMES=xF": "kernels of these classes of work F times faster (time_by_class's classes, or a nature: "
                      "class:memory_bound=x2, what fusing memory-bound kernels buys at least)",
    "lib:NAMES=xF": "kernels of these libraries F times faster (the libraries detector's: cudnn, blas, attention, "
                    "triton, pytorch, cutlass, ...)",
    "launch=graphs": "kernels launched from a CUDA graph: each launch call's host cost gone",
    "copies=pinned": "copies from pageable host memory made from pinned memory: asynchronous, at pinned bandwidth",
    "recompute=0": "activation checkpointing off: the forward work the backward runs again removed (its device ops, "
                   "their launch calls, the host time inside torch.utils.checkpoint's recompute)",
    "amp": "mixed precision: matmul-class kernels at the GPU's tensor-core peak ratio, the rest at half the bytes",
    "fp8": "FP8 matmuls (Transformer Engine, torchao): bf16/fp16 matmul-class kernels at the GPU's fp8/bf16 peak ratio, "
           "the rest as measured",
    "gpu=NAME": "another GPU (H100, A100, MI300X…): matmul-class kernels by the FLOP/s peak ratio, the rest by the "
                "memory bandwidth ratio",
    "comm=overlap": "collectives overlapped with compute: nothing waits for them (an upper bound on what overlap buys)",
    "link=NAME": "collectives on another link (NVLink 5, PCIe Gen5 x16, InfiniBand NDR…): their time scaled by the "
                 "ratio of per-GPU peaks",
}
#: the kernel pattern that names every kernel (`kernel:.*=x2`: the device's work itself twice as fast)
ALL_KERNELS = ".*"
# kernels that do matrix math (compute-bound at size); every other kernel is taken to move memory
MATMUL_CLASS = re.compile(r"gemm|conv|cutlass|cublas|xmma|wgrad|dgrad|fprop|matmul|attention|attn|fmha|flash|sdpa|"
                          r"implicit_convolve|winograd|cudnn::detail|nchw.*(?:fw|bw)", re.I)
_SPEC = re.compile(r"^(?P<what>dataloader|sync|kernel|op|class|lib|launch|copies|recompute)(?::(?P<pattern>.+?))?="
                   r"(?P<value>x?[\d.]+|graphs|"
                   r"pinned)$")
#: the changes that name classes or libraries, and the check that each name is one (ValueError naming those there are)
_NAMES_CHECKED = {"class": class_indices, "lib": library_keys}
PINNED_SHARE = 0.8  # of the host link's peak, what pinned copies reach where the trace has none to measure
_NEVER = np.iinfo(np.int64).min // 4  # no floor (a quarter of the range: sums stay in range)
MAX_PASSES = 10_000  # whole-trace passes after the ordered replay: one confirms it, ties at segment edges take a few more


@dataclass(frozen=True)
class Change:
    """One change to replay."""

    spec: str  # as the user wrote it
    what: str  # dataloader, sync, kernel, op, launch, copies, amp, gpu
    pattern: str | None  # kernel regex, op name, blocking call or op name
    factor: float  # how many times faster or shorter; inf: removed

    @property
    def assumption(self) -> str:
        if self.what == "dataloader":
            return ("data loading takes no host time" if math.isinf(self.factor) else
                    f"data loading takes 1/{self.factor:g} of its host time") + \
                ": the batches are ready when the loop asks (workers that keep up, prefetching)"
        if self.what == "recompute":
            return ("activation checkpointing off: the recomputed forward's device ops and launch calls, and the host "
                    "time inside its recompute, removed; the activations it freed are kept instead (check that they "
                    "fit in memory)")
        if self.what == "sync":
            return ("blocking calls" + (f" named or under {self.pattern!r}" if self.pattern else "")
                    + " return without waiting for the GPU; their own host time stays")
        if self.what == "kernel":
            return (("every kernel runs" if self.pattern == ALL_KERNELS else f"kernels matching {self.pattern!r} run")
                    + f" {self.factor:g}× faster; launches and other work as measured")
        if self.what == "op":
            return f"the kernels {self.pattern!r} launches, itself or through the ops inside it, run {self.factor:g}× faster"
        if self.what == "class":
            return (f"kernels of class {self.pattern} run {self.factor:g}× faster (fusion also saves launches and "
                    "round trips through memory that this leaves as measured)")
        if self.what == "lib":
            return (f"the kernels of {', '.join(LABELS[name] for name in (self.pattern or '').split(','))} run "
                    f"{self.factor:g}× faster; launches and other work as measured")
        if self.what == "amp":
            return ("mixed precision: matmul-class kernels run at the tensor-core peak ratio of the lower precision "
                    "(an upper bound: kernels rarely reach peak in either), every other kernel on half the bytes; "
                    "copies and launches as measured")
        if self.what == "fp8":
            # short: with the peaks it must stay under the tools' string bound (tools.MAX_STRING), figures included
            return ("fp8 matmuls: bf16/fp16 matmul-class kernels at fp8's tensor-core peak ratio (an upper bound; "
                    "scaling casts not counted), the rest as measured")
        if self.what == "gpu":
            return (f"on a {self.pattern}: matmul-class kernels by the ratio of FLOP/s peaks for the run's dtype, every "
                    "other kernel by the ratio of memory bandwidths (from the peak table); the host, launches and "
                    "host copies as measured")
        if self.what == "comm":
            return ("collectives overlap compute completely: no op, stream or blocking call waits for them (the "
                    "bandwidth they would share with compute is not modelled): an upper bound on what overlapping them "
                    "(DDP's gradient buckets, FSDP's prefetch) buys")
        if self.what == "link":
            return (f"collectives reach the same share of the link's peak on {self.pattern}: their kernels take the "
                    "ratio of the per-GPU peaks as long (time spent waiting for other ranks inside them included)")
        if self.what == "copies":
            return ("pageable copies are made from pinned memory (pin_memory=True, non_blocking=True): each runs at "
                    "the pinned bandwidth below and its call returns as a kernel launch does; a synchronous copy "
                    "(.item(), .cpu()) still waits for its value")
        return ("each kernel launch costs the host nothing (replayed from a CUDA graph); the host time between "
                "launches (Python, the framework) stays, which torch.cuda.graphs would also remove")


def parse_change(spec: str) -> Change:
    """A `--change` spec → a Change; ValueError naming the valid changes."""
    found = _SPEC.match(spec.strip())
    valid = "; ".join(f"{k} ({v})" for k, v in CHANGES.items())
    if spec.strip() in ("amp", "fp8"):
        return Change(spec.strip(), spec.strip(), None, math.inf)
    if spec.strip() == "comm=overlap":
        return Change("comm=overlap", "comm", None, math.inf)
    if spec.strip().startswith("link="):
        link = named_link(spec.strip()[5:])
        if link is None:
            raise ValueError(f"{spec!r}: no link named {spec.strip()[5:]!r}; the links are: {', '.join(NAMED_LINKS)}")
        return Change(spec.strip(), "link", link[0], math.inf)
    if spec.strip().startswith("gpu="):
        name = spec.strip()[4:]
        if peak_for(name) is None:
            raise ValueError(f"{spec!r}: no GPU named {name!r} in the peak table; it has {', '.join(known_gpus())}")
        return Change(spec.strip(), "gpu", name, math.inf)
    if not found:
        raise ValueError(f"{spec!r} is not a change; the changes are: {valid}")
    what, pattern, value = found.group("what"), found.group("pattern"), found.group("value")
    if what == "launch":
        if value != "graphs" or pattern:
            raise ValueError(f"{spec!r}: launch takes only launch=graphs")
        return Change(spec, what, None, math.inf)
    if what == "copies":
        if value != "pinned" or pattern:
            raise ValueError(f"{spec!r}: copies takes only copies=pinned")
        return Change(spec, what, None, math.inf)
    if value in ("graphs", "pinned"):
        raise ValueError(f"{spec!r}: only launch takes graphs; the changes are: {valid}")
    if value.startswith("x"):
        factor = float(value[1:])
        if factor <= 0:
            raise ValueError(f"{spec!r}: the factor must be above 0")
    elif float(value) == 0 and what in ("dataloader", "sync", "recompute"):
        factor = math.inf
    else:
        raise ValueError(f"{spec!r}: write =0 (removed) or =xF (F times faster); the changes are: {valid}")
    if what == "sync" and not math.isinf(factor):
        raise ValueError(f"{spec!r}: a wait is removed (sync=0), not made faster")
    if what == "recompute" and (not math.isinf(factor) or pattern):
        raise ValueError(f"{spec!r}: the recomputation is removed whole (recompute=0)")
    if what in _NAMES_CHECKED:  # the names are checked before any trace is read
        try:
            _NAMES_CHECKED[what]((pattern or "").split(","))
        except ValueError as exc:
            raise ValueError(f"{spec!r}: {exc}") from None
    if what in ("kernel", "op", "class", "lib") and not pattern:
        raise ValueError(f"{spec!r}: name the kernels ({what}:NAME=xF)")
    if what == "kernel":
        try:
            re.compile(pattern or "")
        except re.error as exc:
            raise ValueError(f"{spec!r}: the kernel pattern is not a regex ({exc})") from None
    return Change(spec, what, pattern, factor)


@dataclass(frozen=True)
class Graph:
    """One rank's dependency graph, as arrays. Host calls are ordered by thread then start, device
    ops by stream then start; times are ns from the rank's first event."""

    origin: int
    # host calls
    c_start: np.ndarray
    c_end: np.ndarray
    c_group: np.ndarray  # the thread, as a group number (contiguous)
    c_gap: np.ndarray  # host time before it on its thread (0 for the first)
    c_wait: np.ndarray  # the device op a blocking call waited for, or -1
    c_post: np.ndarray  # its own time after the wait (or all of it, for calls that never blocked)
    c_waker: np.ndarray  # for a call after its thread sat idle: the call on another thread that woke it, or -1
    c_names: pd.Categorical
    c_thread: np.ndarray  # pid << 32 | tid
    # device ops
    d_start: np.ndarray
    d_end: np.ndarray
    d_group: np.ndarray  # the stream, as a group number (contiguous)
    d_gap: np.ndarray  # the delay after the op before it on its stream
    d_launch: np.ndarray  # the launch call (a row of the calls), or -1
    d_delay: np.ndarray  # the delay from its launch call's start
    d_names: pd.Categorical
    d_kind: pd.Categorical
    unlinked: int  # device ops with no launch call in the trace: they keep their measured start
    cross_process: int  # blocking calls whose process launched nothing on the device: no wait edge
    # the host calls' and device ops' rows, as positions in the trace's tables in the arrays' order:
    # a whole row is read only where one is written out (the simulated trace), never kept twice
    c_rows: np.ndarray = field(repr=False)
    d_rows: np.ndarray = field(repr=False)
    trace_cpu: pd.DataFrame = field(repr=False)
    trace_gpu: pd.DataFrame = field(repr=False)

    @property
    def calls(self) -> pd.DataFrame:
        """The host calls' rows, in the arrays' order (a copy: for writing them out)."""
        return self.trace_cpu.take(self.c_rows)

    @property
    def ops(self) -> pd.DataFrame:
        """The device ops' rows, in the arrays' order (a copy: for writing them out)."""
        return self.trace_gpu.take(self.d_rows)

    def op_column(self, name: str) -> pd.Series:
        """One column of the device ops, in the arrays' order."""
        return self.trace_gpu[name].take(self.d_rows).reset_index(drop=True)


def build_graph(trace: Trace) -> Graph | None:
    """The graph of one rank, or None without device work."""
    every_gpu = trace.gpu
    d_rows = np.flatnonzero((every_gpu["kind"] != "sync").to_numpy())
    if not len(d_rows):
        return None
    cpu = trace.cpu
    origin = int(min(every_gpu["start"].min(), cpu["start"].min() if len(cpu) else every_gpu["start"].min()))
    # the rows kept, as positions into the trace's tables: each table is copied once, at the end
    c_rows = np.flatnonzero(among(cpu["kind"], ["runtime", "driver"]))
    c_thread = thread_keys(cpu["pid"].to_numpy()[c_rows], cpu["tid"].to_numpy()[c_rows])
    c_start = cpu["start"].to_numpy(np.int64)[c_rows] - origin
    order = np.lexsort((c_start, c_thread))
    c_rows, c_thread, c_start = c_rows[order], c_thread[order], c_start[order]
    c_end = cpu["end"].to_numpy(np.int64)[c_rows] - origin
    # the outermost calls only (a runtime call's driver call runs inside it)
    group_first = _firsts(c_thread)
    reach = _grouped_cummax(c_end, c_thread)
    outer = group_first.copy()
    outer[1:] |= c_start[1:] >= reach[:-1]
    c_rows, c_thread, c_start, c_end = c_rows[outer], c_thread[outer], c_start[outer], c_end[outer]
    first = _firsts(c_thread)
    c_gap = np.where(first, 0, c_start - np.concatenate([[0], c_end[:-1]]))
    c_gap = np.maximum(c_gap, 0)

    # the ops by stream and start, each array made once and worked in place where it can be: the graph of ten
    # million ops is built beside the trace, and what it does not keep is let go as soon as it is read
    index = index_type(max(len(cpu), len(every_gpu)))
    d_key = every_gpu["device"].to_numpy(np.int64)[d_rows] * (1 << 40) + every_gpu["stream"].to_numpy(np.int64)[d_rows]
    d_order = np.lexsort((every_gpu["start"].to_numpy(np.int64)[d_rows], d_key))
    d_rows, d_key = d_rows[d_order].astype(index), d_key[d_order]
    del d_order
    d_first = _firsts(d_key)
    d_group = np.cumsum(d_first, dtype=index)
    d_group -= 1
    del d_key
    d_start = every_gpu["start"].to_numpy(np.int64)[d_rows]
    d_start -= origin
    d_end = every_gpu["end"].to_numpy(np.int64)[d_rows]
    d_end -= origin
    np.maximum(d_end, d_start, out=d_end)
    d_gap = np.zeros(len(d_start), dtype=np.int64)  # negative: overlapping ops, as recorded
    np.subtract(d_start[1:], d_end[:-1], out=d_gap[1:])
    d_gap[d_first] = 0
    # launches: a call and its device op share a correlation id
    d_launch = launch_positions(every_gpu["correlation"].to_numpy(np.int64)[d_rows],
                                cpu["correlation"].to_numpy(np.int64)[c_rows], index)
    launched = np.flatnonzero(d_launch >= 0)
    d_delay = np.zeros(len(d_start), dtype=np.int64)
    d_delay[launched] = d_start[launched] - c_start[d_launch[launched]]
    early = launched[d_delay[launched] < 0]  # an op that started before its launch call: not linked after all
    d_launch[early], d_delay[early] = -1, 0
    del launched, early
    linked = d_launch >= 0
    # the binding constraint keeps its delay; the other gets the smaller of its own and the typical one
    stream_bound = ~d_first & (~linked | (d_gap <= d_delay))
    # the typical launch latency, from ops that waited for their launch: not a stream's first op in the
    # trace, whose delay may be a queue of work from before it (a GPU that never caught up with its host
    # shows every op 150 ms after its launch); with no such op, a launch call's own time
    launch_bound = linked & ~stream_bound & ~d_first
    typical_delay = int(np.median(d_delay[launch_bound])) if launch_bound.any() else int(
        np.median(_at(c_end - c_start, d_launch[linked]))) if linked.any() else 0
    del launch_bound
    typical_gap = int(np.median(d_gap[stream_bound])) if stream_bound.any() else 0
    np.minimum(d_delay, typical_delay, out=d_delay, where=stream_bound)
    np.minimum(d_gap, typical_gap, out=d_gap, where=~(stream_bound | d_first))
    del stream_bound, d_first

    # blocking calls: the op that ended last before the call returned, on a device its process launched on
    c_pid = c_thread >> 32
    c_names = cpu["name"].array.take(c_rows)
    c_wait, cross_process = blocking_waits(c_pid, c_end, matches(pd.Series(c_names), BLOCKING_NAME),
                                           every_gpu["device"].to_numpy(np.int64)[d_rows], d_end,
                                           np.where(linked, _at(c_pid, d_launch), -1))
    waited_end = np.where(c_wait >= 0, _at(d_end, c_wait), 0)
    c_post = np.where(c_wait >= 0, c_end - np.maximum(c_start, waited_end), c_end - c_start)
    c_waker = _wakers(cpu, c_thread, c_start, c_end, c_gap, first, origin)
    c_gap = np.where(c_waker >= 0, 0, c_gap)  # it waited for the other thread, not for host work of its own
    # positions and group numbers in the narrowest exact type (times stay int64 ns): the graph of ten million
    # events is held through every replay
    np.maximum(d_delay, 0, out=d_delay)
    return Graph(origin, c_start, c_end, _groups(c_thread).astype(index), c_gap, c_wait.astype(index),
                 np.maximum(c_post, 0), c_waker.astype(index), c_names, c_thread, d_start, d_end,
                 d_group, d_gap, d_launch, d_delay,
                 every_gpu["name"].array.take(d_rows), every_gpu["kind"].array.take(d_rows), int((~linked).sum()),
                 cross_process, c_rows.astype(index), d_rows, cpu, every_gpu)


IDLE_THREAD_NS = 100_000  # a thread with nothing traced on it this long before a call was woken by another
IDLE_COVER = 0.1  # "nothing traced": its own host events cover less than this share of the gap


def _wakers(cpu: pd.DataFrame, c_thread: np.ndarray, c_start: np.ndarray, c_end: np.ndarray, c_gap: np.ndarray,
            first: np.ndarray, origin: int) -> np.ndarray:
    """For each call that follows a long idle stretch of its thread (the autograd engine's thread
    while the main thread runs the forward pass), the last call on another thread that ended
    before it: the trace records no such edge, and keeping the idle stretch as host time would pin
    the thread to its measured times whatever the other thread does."""
    waker = np.full(len(c_start), -1, dtype=np.int64)
    candidates = np.flatnonzero(~first & (c_gap >= IDLE_THREAD_NS))
    if not len(candidates) or len(np.unique(c_thread)) < 2:
        return waker
    traced = _thread_intervals(cpu, ~among(cpu["kind"], ["runtime", "driver"]))
    busy = np.zeros(len(candidates))
    for t in np.unique(c_thread[candidates]):
        mine = c_thread[candidates] == t
        at = candidates[mine]
        busy[mine] = iv.covered(traced.get(int(t), _NONE), c_end[at - 1] + origin, c_start[at] + origin)
    idle = candidates[busy < IDLE_COVER * c_gap[candidates]]
    by_end = np.argsort(c_end, kind="stable")
    for t in np.unique(c_thread[idle]):
        mine = idle[c_thread[idle] == t]
        others = by_end[c_thread[by_end] != t]
        at = np.searchsorted(c_end[others], c_start[mine], side="right") - 1
        ok = (at >= 0) & (c_end[_at(others, at)] > c_end[mine - 1])  # it ended while this thread sat idle
        waker[mine[ok]] = others[at[ok]]
    return waker


def _at(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index] where index >= 0, else 0 (and zeros where `values` is empty)."""
    if not len(values):
        return np.zeros(len(index), dtype=values.dtype)
    valid = index >= 0
    if valid.all():  # every op launched, say: one gather
        return values[index]
    out = np.zeros(len(index), dtype=values.dtype)
    at = np.flatnonzero(valid)  # a few woken calls among millions: only theirs gathered
    out[at] = values[index[at]]
    return out


def _firsts(keys: np.ndarray) -> np.ndarray:
    """Whether each element is the first of its run of equal (sorted) keys."""
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return first


def _groups(keys: np.ndarray) -> np.ndarray:
    """Sorted keys → group numbers 0, 1, 2…"""
    return np.cumsum(_firsts(keys)) - 1


def _grouped_cummax(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The running maximum of `values` within each run of equal sorted `keys` (a new array)."""
    if len(values) < 2:
        return values.copy()
    return _cummax_by_run(values, _firsts(keys), np.empty_like(values))


def _cummax_by_run(values: np.ndarray, first: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The running maximum of `values` within each run (`first` marks each run's first; values before
    the first marked one are a run too), written to `out` (which may be `values`): one accumulate over
    the values lifted by their run's number times their range, so no run sees another's maximum (a
    loop over the runs only where that lift would leave int64), in place but for one array of lifts."""
    low = int(values.min())
    spread = int(values.max()) - low + 1
    runs = int(first.sum()) + (not first[0])
    if runs == 1:
        return np.maximum.accumulate(values, out=out)
    if spread * runs >= 2**62 or values.dtype.kind != "i":  # lifted floats would lose their fractions
        at = sorted({0, *np.flatnonzero(first).tolist()})
        for a, b in zip(at, [*at[1:], len(values)]):
            np.maximum.accumulate(values[a:b], out=out[a:b])
        return out
    lift = np.cumsum(first, dtype=np.int64)  # a run before the first marked one is lifted by -spread
    lift -= 1
    lift *= spread
    np.subtract(values, low, out=out)
    out += lift
    np.maximum.accumulate(out, out=out)
    out -= lift
    out += low
    return out


def _chain(step: np.ndarray, floor: np.ndarray, group: np.ndarray, has_floor: np.ndarray) -> np.ndarray:
    """x[i] = max(x[i-1] + step[i], floor[i]) along each run of equal `group` (its first: its
    floor, which every first must have): x = P + running max of (floor - P), P the steps summed
    within the group: one running maximum over every group at once (_grouped_cummax), no loop over events.
    `step` and `floor` are the caller's temporaries, worked in place (ten million ops hold two arrays fewer)."""
    if not len(step):
        return step.copy()
    opens = _firsts(group)
    base = _run_base(step, opens)
    lifted = np.subtract(floor, base, out=floor)
    # a step with no floor of its own never sets the maximum: every chain's first has one, so the
    # smallest floor in the array stands for "none" without changing any running maximum
    if not has_floor.all():
        np.copyto(lifted, lifted[has_floor].min(), where=~has_floor)
    lifted = _run_cummax(lifted, opens)
    lifted += base
    return lifted


@dataclass
class Replayed:
    """The times of one replay, ns from the rank's first event."""

    c_start: np.ndarray
    c_end: np.ndarray
    d_start: np.ndarray
    d_end: np.ndarray
    passes: int


def replay(g: Graph, c_gap: np.ndarray | None = None, c_dur: np.ndarray | None = None,
           c_wait: np.ndarray | None = None, d_dur: np.ndarray | None = None,
           d_delay: np.ndarray | None = None, c_anchor: np.ndarray | None = None) -> Replayed:
    """The graph's times with some host gaps, call durations, waits (-1: none), op durations
    (a change's scaled ones rounded to whole ns), launch delays or the start of each thread's first
    call changed; unchanged, the trace's own times."""
    c_gap_in, d_dur_in, d_delay_in = c_gap, d_dur, d_delay
    anchor = g.c_start if c_anchor is None else c_anchor
    c_gap = g.c_gap if c_gap is None else c_gap
    wait = g.c_wait if c_wait is None else c_wait
    if d_dur is None:
        d_dur = g.d_end - g.d_start
    elif d_dur.dtype.kind == "f":  # every time the replay sums is whole nanoseconds
        d_dur = np.round(d_dur).astype(np.int64)
    d_delay = g.d_delay if d_delay is None else d_delay
    # a call's own time: for one that waited, only the part after the wait (its wait removed or not)
    own = np.where(g.c_wait >= 0, g.c_post, (g.c_end - g.c_start) if c_dur is None else c_dur)
    linked = g.d_launch >= 0
    d_first = _firsts(g.d_group)
    c_first = _firsts(g.c_group)
    woken = g.c_waker >= 0
    unchanged = all(x is None for x in (c_gap_in, c_dur, c_wait, d_dur_in, d_delay_in, c_anchor))
    hands_over = _hands_over(wait, woken)
    # unchanged, the trace's own times solve the graph (its edges all point back in time): one pass confirms it
    if unchanged or not hands_over:
        c_start, c_end, d_start = g.c_start, g.c_end, g.d_start
    else:
        c_start, c_end, d_start = _in_order(g, c_gap, own, wait, d_dur, d_delay, anchor)
    # the same recurrences over everything at once, until nothing moves: one pass confirms the ordered
    # replay; more only where ties at a segment's edge left something to settle
    passes = 0
    while passes < MAX_PASSES:
        if unchanged and hands_over and passes == 2:  # a graph its own trace does not solve: replay it in order after all
            c_start, c_end, d_start = _in_order(g, c_gap, own, wait, d_dur, d_delay, anchor)
            unchanged = False
        passes += 1
        floor = _launch_floor(g, c_start, d_delay, linked)
        step = g.d_gap.copy()  # an op's step after the one before it on its stream: that one's duration and the gap
        np.add(step[1:], d_dur[:-1], out=step[1:])
        new_d_start = _chain(step, floor, g.d_group, linked | d_first)
        del floor, step  # each pass lets its arrays go once read: a trace of millions of events holds few at once
        new_d_end = new_d_start + d_dur
        wake = np.where(woken, _at(c_end, g.c_waker) + (g.c_start - _at(g.c_end, g.c_waker)), 0)
        blocked = np.where(wait >= 0, _at(new_d_end, wait) + g.c_post, 0)
        del new_d_end
        floor_c = np.maximum(np.where(wait >= 0, blocked, _NEVER), np.where(woken, wake + own, _NEVER))
        del blocked
        floor_c = np.where(c_first, np.maximum(anchor + own, floor_c), floor_c)
        new_c_end = _chain(c_gap + own, floor_c, g.c_group, (wait >= 0) | woken | c_first)
        del floor_c
        after_previous = np.concatenate([[0], new_c_end[:-1]]) + c_gap
        new_c_start = np.where(c_first, anchor, np.maximum(after_previous, np.where(woken, wake, _NEVER)))
        del after_previous, wake
        moved = not (np.array_equal(new_d_start, d_start) and np.array_equal(new_c_end, c_end))
        # a host that never waits has its final times after one pass, and the device's are final once they
        # were chained from those: a change of device work alone (kernel:, class:) takes one pass, not a second
        # pass to confirm it
        settled = not hands_over and np.array_equal(new_c_start, c_start)
        if not moved:  # the arrays held already are kept (unchanged: the graph's own), not equal copies of them
            if not settled:
                c_start = new_c_start
            break
        d_start, c_start, c_end = new_d_start, new_c_start, new_c_end
        if settled:
            break
    # unchanged, the ops end where the graph's do: its array, not a copy, is what the savings hold through each change
    d_end = g.d_end if d_start is g.d_start and d_dur_in is None else d_start + d_dur
    return Replayed(c_start, c_end, d_start, d_end, passes)


def _launch_floor(g: Graph, c_start: np.ndarray, d_delay: np.ndarray, linked: np.ndarray) -> np.ndarray:
    """Each op's floor: its launch call's start and its delay where it has one, else its measured
    start; gathered for the launched ops only (a trace of ten million kernels without launches
    makes no temporaries of its length here)."""
    floor = g.d_start.copy()
    at = np.flatnonzero(linked)
    floor[at] = c_start[g.d_launch[at]] + d_delay[at]
    return floor


def _hands_over(wait: np.ndarray, woken: np.ndarray) -> bool:
    """Whether the host ever waits for the device (a blocking call) or another thread (a woken
    call). Without either, the whole-trace passes settle any change in two at most, from the
    trace's own times (the host's chains read nothing of the device's), and the ordered replay is
    not needed."""
    return bool((wait >= 0).any() or woken.any())


@dataclass(frozen=True)
class _Segmented:
    """One kind of node (calls, ops or returns) laid out segment by segment: `order` holds the
    nodes' rows, each segment a slice of it between `cuts`; `opens` marks the first of each run of
    one chain (a thread, a stream) inside a segment, `runs` counts each segment's runs. Everything
    a segment reads that does not move is gathered into this order once, so a segment costs a few
    slices and array operations, whatever its size."""

    order: np.ndarray
    cuts: np.ndarray
    opens: np.ndarray
    runs: np.ndarray  # by segment

    @classmethod
    def of(cls, segment: np.ndarray, count: int, group: np.ndarray | None) -> _Segmented:
        order = np.argsort(segment, kind="stable").astype(index_type(len(segment)))
        order = order[segment[order] >= 0]
        cuts = np.searchsorted(segment[order], np.arange(count + 1))
        opens = np.zeros(len(order), dtype=bool)
        opens[cuts[:-1][cuts[:-1] < len(order)]] = True
        if group is not None and len(order):
            keys = group[order]
            opens[1:] |= keys[1:] != keys[:-1]
        runs_before = np.append(0, np.cumsum(opens))[cuts]  # the runs that open before each segment
        return cls(order, cuts, opens, np.diff(runs_before))


#: nodes (calls and ops) whose columns a chunk of segments gathers at most, unless one segment holds more
CHUNK_NODES = 1 << 15


def _chunk_end(nodes_before: list[int], first: int) -> int:
    """The segment after the last of a chunk that starts at segment `first` (`nodes_before`: the
    calls and ops before each segment): as many segments as stay within CHUNK_NODES (one at least)."""
    end = bisect.bisect_right(nodes_before, nodes_before[first] + CHUNK_NODES, lo=first + 1) - 1
    return min(max(end, first + 1), len(nodes_before) - 1)


def _run_base(step: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """The steps summed within each run after its first (0 at each run's first; `opens` marks the
    firsts, the array's first among them), summed in place over `step` (each caller's temporary): no
    second array the size of the trace."""
    base = np.cumsum(step, out=step)
    starts = np.flatnonzero(opens)
    if len(starts) == 1:
        base -= base[0]
    else:
        base -= np.repeat(base[starts], np.diff(np.append(starts, len(step))))
    return base


def _run_cummax(values: np.ndarray, opens: np.ndarray, runs: int | None = None) -> np.ndarray:
    """The running maximum within each run (`opens` marks each run's first, whose value is a real
    one; _NEVER elsewhere means no floor), in place; `runs`: how many there are, where known."""
    if (runs if runs is not None else int(opens.sum())) <= 1:
        return np.maximum.accumulate(values, out=values)
    real = values > _NEVER
    if not real.all():  # the smallest real value stands for "none" and lets the runs be lifted apart
        np.copyto(values, values[real].min(), where=~real)
    return _cummax_by_run(values, opens, values)


def _in_order(g: Graph, c_gap: np.ndarray, own: np.ndarray, wait: np.ndarray, d_dur: np.ndarray,
              d_delay: np.ndarray, anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The replay in time order, a segment at a time: the hand-overs from the device to the host
    (a blocking call's return) and between threads (a wake) cut the trace into segments; in each,
    the host calls, then the device ops, then the returns of the blocking calls are final after one
    vectorized scan of each chain, since nothing in a segment depends on what comes after it. Each
    kind of node is laid out by segment first (_Segmented), so a segment costs a few slices."""
    woken = g.c_waker >= 0
    waits = wait >= 0
    linked = g.d_launch >= 0
    # the hand-overs, and a cut every CHUNK_NODES calls by start: any time may cut a segment (a call or op
    # only depends on ones that started before it), and smaller segments bound what a chunk gathers
    cuts = g.c_start[CHUNK_NODES::CHUNK_NODES]  # every CHUNK_NODES-th call on its thread: near enough
    bounds = np.unique(np.concatenate([g.c_end[waits], _at(g.c_end, g.c_waker)[woken], cuts]))
    count = len(bounds) + 1
    # segment numbers in int32 (fewer segments than calls): three of them for every call and op
    call_seg = np.searchsorted(bounds, g.c_start, side="right").astype(np.int32)
    op_seg = np.maximum(np.searchsorted(bounds, g.d_start, side="left").astype(np.int32),
                        np.where(linked, _at(call_seg, g.d_launch), 0).astype(np.int32))
    wait_seg = np.where(waits, np.maximum(np.searchsorted(bounds, g.c_end, side="left").astype(np.int32),
                                          _at(op_seg, wait)), -1).astype(np.int32)
    c_first = _firsts(g.c_group)
    d_first = _firsts(g.d_group)
    # one slot past the calls holds 0: an op with no launch call reads its launch floor there, 0 + _NEVER
    c_start = np.append(g.c_start, 0)
    c_end = g.c_end.copy()
    d_start = g.d_start.copy()
    unlaunched = len(g.c_start)
    zero = np.zeros(1, dtype=np.int64)

    C = _Segmented.of(call_seg, count, g.c_group)
    D = _Segmented.of(op_seg, count, g.d_group)
    R = _Segmented.of(wait_seg, count, None)
    del call_seg, op_seg, wait_seg  # laid out in C, D and R now
    # plain ints and lists for the loop: numpy scalars cost more to index and compare with
    c_cuts, d_cuts, r_cuts = C.cuts.tolist(), D.cuts.tolist(), R.cuts.tolist()
    c_runs, d_runs = C.runs.tolist(), D.runs.tolist()
    # segments are replayed a chunk at a time, what each reads gathered for its chunk alone: memory holds
    # a chunk's columns, not a copy of every column of the graph. What a segment adds to a chunk's floors
    # comes from earlier segments at a few places (a run's first, a woken call): those are gathered as
    # short lists cut by segment, so a segment costs a few array operations, whatever its size.
    nodes_before = [c + d for c, d in zip(c_cuts, d_cuts)]
    chunk_start = 0
    while chunk_start < count:
        chunk_end = _chunk_end(nodes_before, chunk_start)
        ca, da, ra = c_cuts[chunk_start], d_cuts[chunk_start], r_cuts[chunk_start]
        # calls: x = base + running max of (floor - base), the floors: a thread's first at its anchor; a run's
        # first after the call before it on its thread and the host time between; a woken call no earlier than
        # its waker's end and the measured delay since. A call starts its own time before its end.
        p = C.order[ca:c_cuts[chunk_end]]
        opens = C.opens[ca:c_cuts[chunk_end]]
        p_own = own[p]
        p_base = _run_base(c_gap[p] + p_own, opens) if len(p) else p_own
        p_first = c_first[p]
        p_floor = np.where(p_first, anchor[p] + p_own - p_base, _NEVER)
        reopen = np.flatnonzero(opens & ~p_first)  # each follows a call of an earlier segment
        reopen_after = p[reopen] - 1
        reopen_add = (c_gap[p] + p_own - p_base)[reopen]
        woke = np.flatnonzero(woken[p])
        waker = g.c_waker[p[woke]]
        woke_add = (g.c_start[p[woke]] - g.c_end[waker]) + (p_own - p_base)[woke]
        del p_first
        # ops: after the op before on their stream (its duration and the gap), and their launch call's start
        q = D.order[da:d_cuts[chunk_end]]
        q_opens = D.opens[da:d_cuts[chunk_end]]
        q_linked = linked[q]
        # each op after the one before it in the chunk (a run's first has a floor: its step is not read)
        q_base = _run_base(g.d_gap[q] + np.concatenate([zero, d_dur[q[:-1]]]), q_opens) if len(q) else g.d_gap[q]
        q_launch = np.where(q_linked, g.d_launch[q], unlaunched)
        q_add = np.where(q_linked, d_delay[q] - q_base, _NEVER)
        q_first = d_first[q]
        fixed = np.flatnonzero(q_first & ~q_linked)  # a stream's first op with no launch: its measured start
        fixed_floor = (g.d_start[q] - q_base)[fixed]
        follows = np.flatnonzero(q_opens & ~q_first)  # after the op before on its stream, of an earlier segment
        follows_after = q[follows] - 1
        follows_add = (d_dur[follows_after] + g.d_gap[q[follows]]) - q_base[follows]
        del q_first, q_linked
        # returns: after the op waited for, and the call's own time after it
        r = R.order[ra:r_cuts[chunk_end]]
        r_wait = wait[r]
        r_after_wait = d_dur[r_wait] + g.c_post[r]
        # where each segment's few floors from earlier segments begin in their lists
        c_starts = np.array(c_cuts[chunk_start:chunk_end + 1]) - ca
        d_starts = np.array(d_cuts[chunk_start:chunk_end + 1]) - da
        reopen_at = np.searchsorted(reopen, c_starts).tolist()
        woke_at = np.searchsorted(woke, c_starts).tolist()
        fixed_at = np.searchsorted(fixed, d_starts).tolist()
        follows_at = np.searchsorted(follows, d_starts).tolist()

        for k, seg in enumerate(range(chunk_start, chunk_end)):
            a, b = c_cuts[seg] - ca, c_cuts[seg + 1] - ca
            if b > a:
                i, j = reopen_at[k], reopen_at[k + 1]
                if j > i:
                    p_floor[reopen[i:j]] = c_end[reopen_after[i:j]] + reopen_add[i:j]
                i, j = woke_at[k], woke_at[k + 1]
                if j > i:
                    at = woke[i:j]
                    p_floor[at] = np.maximum(p_floor[at], c_end[waker[i:j]] + woke_add[i:j])
                ends = _run_cummax(p_floor[a:b], opens[a:b], c_runs[seg])
                ends += p_base[a:b]
                ci = p[a:b]
                c_end[ci] = ends  # a blocking call's return: below, once what it waits for is known
                c_start[ci] = ends - p_own[a:b]
            a, b = d_cuts[seg] - da, d_cuts[seg + 1] - da
            if b > a:
                floor = c_start[q_launch[a:b]]
                floor += q_add[a:b]
                i, j = fixed_at[k], fixed_at[k + 1]
                if j > i:
                    at = fixed[i:j] - a
                    floor[at] = np.maximum(floor[at], fixed_floor[i:j])
                i, j = follows_at[k], follows_at[k + 1]
                if j > i:
                    at = follows[i:j] - a
                    floor[at] = np.maximum(floor[at], d_start[follows_after[i:j]] + follows_add[i:j])
                floor = _run_cummax(floor, q_opens[a:b], d_runs[seg])
                floor += q_base[a:b]
                d_start[q[a:b]] = floor
            a, b = r_cuts[seg] - ra, r_cuts[seg + 1] - ra
            if b > a:
                wi = r[a:b]
                c_end[wi] = np.maximum(c_end[wi], d_start[r_wait[a:b]] + r_after_wait[a:b])
        chunk_start = chunk_end
    return c_start[:unlaunched], c_end, d_start


@dataclass(frozen=True)
class ChangeApplied:
    spec: str
    assumption: str
    matched: int  # the kernels, calls or host gaps it changed


@dataclass(frozen=True)
class WhatIfResult:
    """A change's predicted effect on one rank's mean step (or span, without steps)."""

    rank: int | None
    changes: list[ChangeApplied]
    basis: str  # step (the mean ProfilerStep) or span (first to last device work)
    measured_us: float  # the trace's own mean step (or span)
    replayed_us: float  # the unchanged graph replayed: equal to measured_us when the graph is complete
    predicted_us: float  # with the changes
    saving_pct: float  # of the measured step
    speedup_x: float
    device_busy_after_pct: float  # device work over the predicted span
    launch_bound_after_pct: float  # device ops whose start their launch set, by count
    limits_after: str  # what sets the pace after the change, in words
    passes: int
    assumptions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Simulation:
    """A prediction and the replay it came from: what the simulated trace is written from."""

    result: WhatIfResult
    timeline: Timeline


@dataclass(frozen=True)
class Timeline:
    """A replay with what maps the rest of the host's events onto it: the graph, its replayed times,
    and the data loading a change removed (for the ranges between calls)."""

    graph: Graph
    replayed: Replayed
    removed: iv.Intervals | None
    factor: float

    def host_times(self, pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Host times (ns on the trace clock) on their threads, moved as the replay moved each thread."""
        out = t.copy()
        thread = thread_keys(pid, tid)
        for th in np.unique(thread):
            mine = thread == th
            out[mine] = _moved(self.graph, self.replayed, int(th), t[mine] - self.graph.origin, self.removed,
                               self.factor) + self.graph.origin
        return out


@dataclass(frozen=True)
class StepWindow:
    """The steps replayed: from the first step's start on its thread to the end of the last step's
    work (its host range, or its last device op where the GPU finishes later), over the steps."""

    thread: int  # pid << 32 | tid of the thread the step ranges are on
    start: int  # the first step's start, ns from the origin
    host_end: int  # the last step's end
    last_op: int  # the device op that ended the last step's work, or -1
    steps: int

    def mean(self, g: Graph, r: Replayed, loading: iv.Intervals | None = None, factor: float = 1.0) -> float:
        """The mean step with these times (the graph's own times for the trace's)."""
        start, end = _moved(g, r, self.thread, np.array([self.start, self.host_end]), loading, factor)
        if self.last_op >= 0:
            end = max(end, int(r.d_end[self.last_op]))
        return float(end - start) / self.steps


def _step_window(trace: Trace, g: Graph) -> StepWindow | None:
    """The trace's steps as a window to replay, or None without steps (or their thread)."""
    steps = trace.steps
    if steps.empty:
        return None
    cpu = trace.cpu
    rows = cpu[(cpu["name"] == steps["name"].iloc[0]).to_numpy()]
    if rows.empty:
        return None
    thread = int(thread_key(rows.iloc[:1])[0])
    gpu_end = steps["gpu_end"].iloc[-1]
    last_op = -1
    if not pd.isna(gpu_end):
        at = np.flatnonzero(g.d_end == int(gpu_end) - g.origin)
        last_op = int(at[0]) if len(at) else -1
    return StepWindow(thread, int(steps["start"].min()) - g.origin, int(steps["end"].iloc[-1]) - g.origin, last_op,
                      len(steps))


def _moved(g: Graph, r: Replayed, thread: int, t: np.ndarray, removed: iv.Intervals | None, factor: float) -> np.ndarray:
    """Times on a thread's host timeline after the replay: each after the last call that ended by
    it, plus the host time since (less what the change removed of it); before the thread's first
    call, less what the change removed since the origin."""
    mine = np.flatnonzero(g.c_thread == thread)
    if not len(mine):
        return t.copy()
    at = np.searchsorted(g.c_end[mine], t, side="right") - 1
    j = _at(mine, at)
    since_from = np.where(at >= 0, g.c_end[j], 0)
    since = t - since_from
    if removed is not None and len(removed[0]):
        since = since - (iv.covered(removed, since_from + g.origin, t + g.origin) * (1 - 1 / factor)).astype(np.int64)
    return np.where(at >= 0, r.c_end[j], 0) + since


def simulate(trace: Trace, changes: list[Change], graph: Graph | None = None, base: Replayed | None = None,
             describe: bool = True) -> WhatIfResult | None:
    """The changes' predicted effect on the rank (None: it has no device work to replay)."""
    simulation = simulate_replay(trace, changes, graph, base, describe)
    return simulation.result if simulation is not None else None


def simulate_replay(trace: Trace, changes: list[Change], graph: Graph | None = None, base: Replayed | None = None,
                    describe: bool = True) -> Simulation | None:
    """The rank replayed with the changes; None without device work. ValueError when a change
    matches nothing in the trace (what was searched). `graph` and `base` (its unchanged replay):
    the rank's, when built already; `describe`: say what sets the pace after the change (a walk
    of the replayed critical path, which the savings do not need)."""
    g = graph or build_graph(trace)
    if g is None:
        return None
    # the graph's own arrays until a change replaces one (each change makes new arrays, never writes in place)
    c_gap, c_dur, wait = g.c_gap, g.c_end - g.c_start, g.c_wait
    d_dur: np.ndarray = g.d_end - g.d_start  # floats once a change scales it
    d_delay = g.d_delay
    applied: list[ChangeApplied] = []
    loading: iv.Intervals | None = None
    loading_factor = 1.0
    loading_left: np.ndarray | None = None  # data loading left in each host gap, where a change cut it
    c_anchor = g.c_start
    for change in changes:
        if change.what == "dataloader":
            rows = (trace.cpu["kind"] == "dataloader").to_numpy()  # for the steps' boundaries, on their thread
            loading = iv.union(trace.cpu["start"].to_numpy(np.int64)[rows], trace.cpu["end"].to_numpy(np.int64)[rows])
            inside = _loading_in_gaps(trace, g)
            cut = (inside * (1 - 1 / change.factor)).astype(np.int64)
            matched = int((cut > 0).sum())
            if not matched:
                raise ValueError(f"{change.spec!r}: the trace has no data loading on the host (no DataLoader ranges)")
            c_gap = c_gap - cut
            loading_factor = change.factor
            before_first = _loading_before_first(trace, g)
            c_anchor = g.c_start - (before_first * (1 - 1 / change.factor)).astype(np.int64)
            matched += int((before_first > 0).sum())
            loading_left = (inside - cut).astype(np.int64)
            del inside, cut, before_first  # not held through the replay
        elif change.what == "sync":
            hit = wait >= 0
            if change.pattern:
                hit &= _called_or_under(trace, g, change.pattern)
            if not hit.any():
                raise ValueError(f"{change.spec!r}: no blocking call" + (f" named or under {change.pattern!r}"
                                                                        if change.pattern else "") + " in the trace")
            matched = int(hit.sum())
            wait = np.where(hit, -1, wait)
        elif change.what == "recompute":
            hit = recomputed_ops(trace)[0][g.d_rows]
            if not hit.any():
                raise ValueError(f"{change.spec!r}: the trace shows no activation-checkpoint recomputation (no "
                                 "recompute_fn frame or CheckpointFunctionBackward node launched device work)")
            matched = int(hit.sum())
            d_dur = np.where(hit, 0, d_dur)
            c_dur = np.where(_launch_calls(g, hit), 0, c_dur)
            c_gap = c_gap - _host_in_gaps(g, _thread_intervals(trace.cpu, recompute_frames(trace)))
        elif change.what in ("kernel", "op", "class", "lib"):
            pattern = change.pattern or ""
            if change.what == "class":
                hit = class_rows(trace.gpu, pattern.split(","))[g.d_rows]
            elif change.what == "lib":
                hit = library_rows(trace, pattern.split(","))[g.d_rows]
            elif change.what == "op":  # its kernels and those of the ops inside it, as the hot kernels' op filter
                hit = op_kernels(trace, pattern)[g.d_rows]
            else:
                hit = matches(pd.Series(g.d_names), re.compile(pattern))
            hit &= g.d_kind == "kernel"
            if not hit.any():
                raise ValueError(f"{change.spec!r}: no kernel " + {"kernel": f"matches {pattern!r}",
                                                                   "op": f"is launched by op {pattern!r}",
                                                                   "class": f"is of class {pattern}",
                                                                   "lib": f"is of library {pattern}"}[change.what])
            matched = int(hit.sum())
            d_dur = np.where(hit, d_dur / change.factor, d_dur)
        elif change.what in ("amp", "fp8", "gpu"):
            scale, note = _device_scale(trace, g, change)
            matched = int((scale != 1).sum())
            d_dur = d_dur / scale
            applied.append(ChangeApplied(change.spec, f"{change.assumption}; {note}", matched))
            continue
        elif change.what in ("comm", "link"):
            collective = (g.d_kind == "kernel") & g.op_column("is_comm").to_numpy(bool)
            if not collective.any():
                raise ValueError(f"{change.spec!r}: no collective kernels in the trace")
            matched = int(collective.sum())
            if change.what == "comm":
                d_dur = np.where(collective, 0.0, d_dur)
            else:
                scale, note = _link_scale(trace, g, change, collective)
                d_dur = d_dur * scale
                applied.append(ChangeApplied(change.spec, f"{change.assumption}; {note}", matched))
                continue
        elif change.what == "copies":
            pageable, pinned_ns, note = _pageable(trace, g)
            if not pageable.any():
                raise ValueError(f"{change.spec!r}: the trace has no copies from or to pageable host memory")
            matched = int(pageable.sum())
            d_dur = np.where(pageable, np.minimum(d_dur, pinned_ns), d_dur)
            c_dur = np.where(_launch_calls(g, pageable), _launch_ns(g), c_dur)
            applied.append(ChangeApplied(change.spec, f"{change.assumption}; {note}", matched))
            continue
        else:  # launch=graphs
            launches = _launch_calls(g, np.ones(len(g.d_launch), dtype=bool))
            matched = int(launches.sum())
            if not matched:
                raise ValueError(f"{change.spec!r}: no kernel launch calls in the trace")
            c_dur = np.where(launches, 0, c_dur)
        applied.append(ChangeApplied(change.spec, change.assumption, matched))
    base = base or replay(g)
    if d_dur.dtype.kind == "f":  # whole ns, as the replay sums them; the scaled floats let go before it runs
        d_dur = np.round(d_dur).astype(np.int64)
    after = replay(g, c_gap=c_gap, c_dur=c_dur, c_wait=wait, d_dur=d_dur, d_delay=d_delay, c_anchor=c_anchor)
    window = _step_window(trace, g)
    assumptions = [a.assumption for a in applied]
    if g.unlinked:
        assumptions.append(f"{g.unlinked} device ops have no launch call in the trace: each keeps its measured start "
                           "when first on its stream, else its measured gap after the op before it")
    if g.cross_process:
        assumptions.append(f"{g.cross_process} blocking calls are in a process that launched nothing on a device here: "
                           "they wait for nothing")
    if window is not None:
        # the loop's step time (the steps detector's, which savings and diff divide by), scaled by what the
        # replay changes of the window of steps (which also holds the last step's device work: a host
        # that runs ahead of the GPU does not shorten it)
        own = window.mean(g, Replayed(g.c_start, g.c_end, g.d_start, g.d_end, 0))
        measured = step_time_ns(trace.steps)
        replayed = measured * window.mean(g, base) / own
        predicted = measured * window.mean(g, after, loading, loading_factor) / own
        basis = "step"
    else:
        measured = float(g.d_end.max() - g.d_start.min())
        replayed = float(base.d_end.max() - base.d_start.min())
        predicted = float(after.d_end.max() - after.d_start.min())
        basis = "span"
        assumptions.append("the trace marks no steps: the prediction is of the span, first to last device work")
    if loading_left is None:  # the loading the path's host time holds, changed or not
        loading_left = _loading_in_gaps(trace, g)
    busy, launch_bound, limits = _after(g, after, d_delay, wait, loading_left) if describe else (0.0, 0.0, "")
    return Simulation(WhatIfResult(
        rank=trace.meta.rank, changes=applied, basis=basis, measured_us=us(measured), replayed_us=us(replayed),
        predicted_us=us(predicted), saving_pct=round(100 * (1 - predicted / measured), 2) if measured else 0.0,
        speedup_x=round(measured / predicted, 3) if predicted else 0.0, device_busy_after_pct=busy,
        launch_bound_after_pct=launch_bound, limits_after=limits, passes=after.passes, assumptions=assumptions),
        Timeline(g, after, loading, loading_factor))


def _run_dtype(trace: Trace, g: Graph, matmul: np.ndarray, said: np.ndarray) -> str:
    """The dtype the matmuls ran in: the one their kernels' names say for most of their time, else the
    shapes the trace recorded, else fp32."""
    named = matmul & (said != "unknown")
    if named.any():
        kinds, codes = np.unique(said[named], return_inverse=True)
        return str(kinds[np.bincount(codes, weights=(g.d_end - g.d_start)[named]).argmax()])
    recorded = " ".join(str(c) for c in trace.cpu["shapes"].cat.categories) if len(trace.cpu) else ""
    for name, dtype in (("c10::BFloat16", "bf16"), ("c10::Half", "fp16")):
        if name in recorded:
            return dtype
    return "fp32"


def _device_scale(trace: Trace, g: Graph, change: Change) -> tuple[np.ndarray, str]:
    """How many times faster each device op runs under `amp`, `fp8` or `gpu=NAME`, and the figures used;
    ValueError where the peak table cannot say."""
    device = next(iter(trace.meta.devices.values()), "")
    here = peak_for(device)
    if here is None:
        raise ValueError(f"{change.spec!r}: the trace's GPU ({device or 'unnamed'}) is not in the peak table; it has "
                         f"{', '.join(known_gpus())}")
    matmul = (g.d_kind == "kernel") & matches(pd.Series(g.d_names), MATMUL_CLASS)
    memory = (g.d_kind == "kernel") & ~matmul | ((g.d_kind != "kernel") & (g.op_column("copy_kind").astype(str) == "DtoD")
                                                   .to_numpy())
    said = name_precisions(g.d_names)
    dtype = _run_dtype(trace, g, matmul, said)
    if change.what == "amp":
        low = autocast_dtype(here)
        if dtype != "fp32" or low is None:
            raise ValueError(f"{change.spec!r}: the matmuls already run in {dtype}" if dtype != "fp32"
                             else f"{change.spec!r}: {here.gpu} has no lower-precision peak in the table")
        # kernels whose names say a lower precision already run in it: autocast leaves them as they are
        lower = np.isin(said, TENSOR_FORMATS)
        matmul, memory = matmul & ~lower, memory & ~lower
        compute, bandwidth = here.tflops[low] / here.tflops["fp32"], 2.0
        note = (f"{here.gpu}: {low} {here.tflops[low]:g} / fp32 {here.tflops['fp32']:g} TFLOP/s = {compute:.1f}× for "
                f"matmul-class kernels, 2× for the rest ({here.source})")
    elif change.what == "fp8":
        return _fp8_scale(change, here, matmul, said, dtype)
    else:
        there = peak_for(change.pattern or "")
        assert there is not None  # parse_change checked the name
        rate = there.tflops.get(dtype, there.tflops["fp32"])
        compute = rate / here.tflops.get(dtype, here.tflops["fp32"])
        bandwidth = (there.hbm_gbps or 0) / (here.hbm_gbps or 1) if there.hbm_gbps and here.hbm_gbps else 1.0
        note = (f"{here.gpu} → {there.gpu}: {dtype} {here.tflops.get(dtype, here.tflops['fp32']):g} → {rate:g} TFLOP/s "
                f"({compute:.2f}×), memory {here.hbm_gbps:g} → {there.hbm_gbps:g} GB/s ({bandwidth:.2f}×)")
    return np.where(matmul, compute, np.where(memory, bandwidth, 1.0)), note


def _fp8_scale(change: Change, here: Peak, matmul: np.ndarray, said: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """Under `fp8`: each matmul-class kernel in bf16 or fp16 (its name's precision, else the run's)
    by the fp8 peak over its own; kernels already in fp8 or below, and fp32 ones (amp comes first),
    as measured. ValueError where nothing would change or the table has no fp8 peak."""
    if "fp8" not in here.tflops:
        raise ValueError(f"{change.spec!r}: {here.gpu} has no fp8 peak in the table (fp8 tensor cores: Hopper, Ada, "
                         "Blackwell, MI300)")
    own = np.where(said == "unknown", dtype, said)
    scale = np.ones(len(matmul))
    ratios = {}
    for d in ("bf16", "fp16"):
        if d in here.tflops and (mine := matmul & (own == d)).any():
            ratios[d] = scale[mine] = here.tflops["fp8"] / here.tflops[d]
    if (scale == 1).all():
        raise ValueError(f"{change.spec!r}: no bf16 or fp16 matmul-class kernels to run in fp8 (the matmuls run in "
                         f"{dtype}" + ("; try amp first" if dtype == "fp32" else "") + ")")
    by_peak: dict[float, list[str]] = {}  # bf16 and fp16 share a peak on most GPUs: said once
    for d in ratios:
        by_peak.setdefault(here.tflops[d], []).append(d)
    note = f"{here.gpu}: fp8 {here.tflops['fp8']:g} TFLOP/s / " + ", ".join(
        f"{'/'.join(ds)} {peak:g} = {here.tflops['fp8'] / peak:.1f}×" for peak, ds in by_peak.items()) + f" ({here.source})"
    return scale, note


def _link_scale(trace: Trace, g: Graph, change: Change, collective: np.ndarray) -> tuple[np.ndarray, str]:
    """How many times longer each collective takes on the named link: the link it crossed (its
    group's, from its recorded payload: collectives.parse_payload, links.link_for) over the new one."""
    name, peak, _ = named_link(change.pattern or "") or (change.pattern, 0.0, "")
    device = next(iter(trace.meta.devices.values()), "")
    world = trace.meta.world_size or 1
    crossed: dict[str, float] = {}
    # each distinct payload read once (a job runs the same few collectives thousands of times)
    rows = np.flatnonzero(collective)
    codes, payloads = pd.factorize(g.op_column("collective").astype(str).to_numpy()[rows])
    peaks = np.empty(len(payloads))
    for code, payload in enumerate(payloads):
        parsed = parse_payload(payload)
        link = link_for(device, list(parsed.ranks) if parsed else None, parsed.group_size if parsed else world)
        crossed[link.kind] = peaks[code] = link.peak_gbps
    scale = np.ones(len(collective))
    scale[rows] = peaks[codes] / peak
    was = ", ".join(f"{kind} {gbps:g} GB/s" for kind, gbps in crossed.items())
    return scale, f"{was} → {name} {peak:g} GB/s per GPU"


def _pageable(trace: Trace, g: Graph) -> tuple[np.ndarray, np.ndarray, str]:
    """Which device ops are copies between the device and pageable host memory, each op's time as
    a pinned copy of its bytes in its direction (0 for other ops), and the pinned bandwidth in words."""
    kind, src, dst = _copy_columns(g, "copy_kind", "src_kind", "dst_kind")
    pageable = (g.d_kind == "memcpy") & (((kind == "HtoD") & (src == "pageable")) | ((kind == "DtoH") & (dst == "pageable")))
    rates = {"HtoD": _pinned_gbps(trace, g, kind, src, "HtoD"), "DtoH": _pinned_gbps(trace, g, kind, dst, "DtoH")}
    note = "; ".join(f"{d} at {rate(gbps)} ({why})" for d, (gbps, why) in rates.items()
                     if (pageable & (kind == d)).any())
    gbps = np.select([kind == "HtoD", kind == "DtoH"], [rates["HtoD"][0], rates["DtoH"][0]], default=np.inf)
    return pageable, g.op_column("bytes").to_numpy(np.float64) / gbps, note


def _pinned_gbps(trace: Trace, g: Graph, kind: np.ndarray, host_side: np.ndarray, direction: str) -> tuple[float, str]:
    """The bandwidth pinned copies of one direction reach (`kind`, `host_side`: the ops' copy kinds and
    host-side memory kinds, from _copy_columns): the trace's own pinned copies', else a share of the
    host link's peak."""
    pinned = (g.d_kind == "memcpy") & (kind == direction) & (host_side == "pinned")
    seconds = float((g.d_end - g.d_start)[pinned].sum()) / 1e9
    if pinned.any() and seconds > 0:
        return float(g.op_column("bytes").to_numpy()[pinned].sum()) / seconds / 1e9, "this trace's own pinned copies"
    link = host_link(next(iter(trace.meta.devices.values()), ""))
    return link.peak_gbps * PINNED_SHARE, f"{PINNED_SHARE:.0%} of {link.kind}'s {link.peak_gbps:g} GB/s"


def _copy_columns(g: Graph, *names: str) -> list[np.ndarray]:
    """String columns of the device ops as arrays, lower case for the host sides; read for the
    copies alone (a kernel has none of them), so no string is made per kernel."""
    copies = np.flatnonzero(g.d_kind == "memcpy")
    out = []
    for name in names:
        values = np.empty(len(g.d_rows), dtype=object)
        values[:] = ""  # one str shared (np.full would make one a row)
        column = g.trace_gpu[name].take(g.d_rows[copies]).astype(str)
        values[copies] = (column if name == "copy_kind" else column.str.lower()).to_numpy()
        out.append(values)
    return out


def _launch_calls(g: Graph, ops: np.ndarray) -> np.ndarray:
    """The host calls that launched the device ops `ops` marks and do not wait (a blocking copy's call
    keeps its time): a mask over the calls."""
    calls = np.zeros(len(g.c_start), dtype=bool)
    calls[g.d_launch[ops & (g.d_launch >= 0)]] = True
    calls &= g.c_wait < 0
    return calls


def _launch_ns(g: Graph) -> int:
    """What a launch call takes: the median of the calls that launched kernels."""
    kernels = (g.d_kind == "kernel") & (g.d_launch >= 0)
    calls = g.d_launch[kernels]
    return int(np.median((g.c_end - g.c_start)[calls])) if len(calls) else 0


def _thread_intervals(events: pd.DataFrame, where: np.ndarray) -> dict[int, iv.Intervals]:
    """Each thread's union of the spans (ns on the trace clock) of the host events `where` marks, by
    thread key: their columns read as arrays, no copy of their rows."""
    thread = thread_keys(events["pid"].to_numpy()[where], events["tid"].to_numpy()[where])
    starts, ends = events["start"].to_numpy(np.int64)[where], events["end"].to_numpy(np.int64)[where]
    return {int(t): iv.union(starts[thread == t], ends[thread == t]) for t in np.unique(thread)}


_NONE: iv.Intervals = iv.union(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def _loading(trace: Trace) -> dict[int, iv.Intervals]:
    """Each thread's data loading (a thread's own: another thread's gap is not shortened by it)."""
    return _thread_intervals(trace.cpu, (trace.cpu["kind"] == "dataloader").to_numpy())


def _loading_in_gaps(trace: Trace, g: Graph) -> np.ndarray:
    """The data loading inside each host gap (before each call), ns."""
    return _host_in_gaps(g, _loading(trace))


def _host_in_gaps(g: Graph, spans: dict[int, iv.Intervals]) -> np.ndarray:
    """The time inside each thread's spans in each host gap on it (before each call), ns."""
    inside = np.zeros(len(g.c_start), dtype=np.int64)
    prev_end = np.concatenate([[0], g.c_end[:-1]]) + g.origin
    for t, covering in spans.items():
        mine = g.c_thread == t
        inside[mine] = iv.covered(covering, prev_end[mine], g.c_start[mine] + g.origin)
    return np.where(g.c_gap > 0, np.minimum(inside, g.c_gap), 0).astype(np.int64)


def _loading_before_first(trace: Trace, g: Graph) -> np.ndarray:
    """For each thread's first call, its thread's data loading before it (from the origin), ns."""
    before = np.zeros(len(g.c_start), dtype=np.int64)
    loads = _loading(trace)
    for i in np.flatnonzero(_firsts(g.c_group)):
        if (loading := loads.get(int(g.c_thread[i]))) is not None:
            before[i] = iv.covered(loading, np.array([g.origin]), np.array([g.c_start[i] + g.origin]))[0]
    return before


def _called_or_under(trace: Trace, g: Graph, name: str) -> np.ndarray:
    """Calls named `name`, or inside an op named `name` on their thread."""
    named = np.asarray(g.c_names == name)
    under = np.zeros(len(g.c_start), dtype=bool)
    ops = ((trace.cpu["kind"] == "op") & (trace.cpu["name"] == name)).to_numpy()
    for t, spans in _thread_intervals(trace.cpu, ops).items():
        mine = g.c_thread == t
        t0 = g.c_start[mine] + g.origin
        under[mine] = iv.covered(spans, t0, t0 + 1) > 0
    return named | under


def _after(g: Graph, r: Replayed, d_delay: np.ndarray, wait: np.ndarray,
           loading: np.ndarray) -> tuple[float, float, str]:
    """After the change: the device's busy share of the replayed span, the share of device ops whose
    launch set their start, and what sets the pace: the replayed critical path, walked back from the
    op that ends last through whichever dependency bound each event."""
    span = float(r.d_end.max() - r.d_start.min()) if len(r.d_start) else 0.0
    busy = iv.length(iv.union(r.d_start, r.d_end))
    busy_pct = round(100 * busy / span, 2) if span else 0.0
    linked = g.d_launch >= 0
    by_launch = linked & (r.d_start == np.where(linked, _at(r.c_start, g.d_launch) + d_delay, -1))
    bound = round(100 * float(by_launch.mean()), 2) if len(by_launch) else 0.0
    waited = (wait >= 0) & (r.c_end == np.where(wait >= 0, _at(r.d_end, wait) + g.c_post, -1))
    c_first = _firsts(g.c_group)
    d_first = _firsts(g.d_group)
    previous_end = np.concatenate([[0], r.c_end[:-1]])
    woke = (g.c_waker >= 0) & ~waited & (r.c_start > previous_end + g.c_gap)
    device_ns = host_ns = loading_ns = 0
    kernels: dict[int, int] = {}
    codes = g.d_names.codes
    node, on_device = int(np.argmax(r.d_end)), True
    for _ in range(len(r.d_start) + len(r.c_start)):  # each event once at most
        if on_device:
            device_ns += int(r.d_end[node] - r.d_start[node])
            kernels[int(codes[node])] = kernels.get(int(codes[node]), 0) + int(r.d_end[node] - r.d_start[node])
            if by_launch[node]:
                node, on_device = int(g.d_launch[node]), False
            elif d_first[node]:
                break
            else:
                node -= 1
        else:
            if waited[node]:
                node, on_device = int(wait[node]), True
            elif woke[node]:
                host_ns += int(r.c_end[node] - r.c_start[node])
                node = int(g.c_waker[node])
            elif c_first[node]:
                break
            else:
                host_ns += int(r.c_start[node] - r.c_end[node - 1]) + int(r.c_end[node - 1] - r.c_start[node - 1])
                loading_ns += int(loading[node])
                node -= 1
    # the rest of the path is waits: a launched op's delay before it started, gaps kept between device ops
    began = int(r.d_start[node] if on_device else r.c_start[node])
    path = max(int(r.d_end.max()) - began, device_ns + host_ns)
    host_pct = 100 * host_ns / path if path else 0.0
    wait_pct = 100 * (path - device_ns - host_ns) / path if path else 0.0
    top = max(kernels, key=kernels.__getitem__) if kernels else -1
    top_name = str(g.d_names.categories[top]) if top >= 0 else ""
    loading_pct = 100 * loading_ns / path if path else 0.0
    if wait_pct >= 50:
        limits = (f"waits set the pace: {wait_pct:.0f}% of the replayed critical path is launched work not yet "
                  f"running (kept as measured: the change does not touch them), and the GPU is busy {busy_pct:.1f}% "
                  "of the replayed span")
    elif host_pct >= 50:
        loaded = f"{counted(round(loading_pct), 'point')} of it data loading, the rest " if loading_pct >= 1 else ""
        limits = (f"the host sets the pace: {host_pct:.0f}% of the replayed critical path is host time ({loaded}"
                  f"launch calls and the Python and framework work between them), and the GPU is busy "
                  f"{busy_pct:.1f}% of the replayed span")
    else:
        limits = (f"device work sets the pace: {100 * device_ns / path:.0f}% of the replayed critical path is on the GPU"
                  + (f", most in {shorten(short_name(top_name), 80)}" if top_name else "")
                  + f", busy {busy_pct:.1f}% of the replayed span; the hot kernels come next")
    return busy_pct, bound, limits


def whatif_sentence(result: WhatIfResult) -> str:
    """'Removing data loading: step 174.83 ms → 139.20 ms (20.4% faster, simulated)…'."""
    what = ", ".join(c.spec for c in result.changes)
    return (f"With {what}: {result.basis} {duration(result.measured_us)} → {duration(result.predicted_us)} "
            f"({result.saving_pct:.1f}% faster, {result.speedup_x:.2f}×; simulated on the trace's dependency graph). "
            f"After it, {result.limits_after}.")


SIMULATE_FROM_PCT = 1.0  # a finding whose bound is smaller keeps it: its prediction could only be smaller still


def simulated(trace: Trace, savings: list[Saving]) -> list[Saving]:
    """The savings with the replay's prediction where each has a change and a bound worth it (each
    change replayed once, on one graph); a change the trace gives nothing to (no data loading on
    the launching thread) leaves its bound alone."""
    worth = [s for s in savings if s.change and max(s.step_pct or 0.0, s.pct) >= SIMULATE_FROM_PCT]
    graph = build_graph(trace) if worth else None
    if graph is None:
        return savings
    base = replay(graph)
    predicted: dict[str, float | None] = {}
    for spec in dict.fromkeys(s.change for s in worth if s.change):
        try:
            result = simulate(trace, [parse_change(spec)], graph, base, describe=False)
        except ValueError:
            result = None
        # a change the replay finds would not shorten the step saves nothing (not a negative saving: a pinned
        # copy's call returning early can let the host queue work later, a hair slower in the replay)
        predicted[spec] = max(result.saving_pct, 0.0) if result is not None else None
    return [replace(s, simulated_pct=predicted.get(s.change)) if s.change else s for s in savings]


#: each finding's saving: the bound, and the replay's prediction where a change models the fix
DETECTOR = Detector("savings", "Savings", "What fixing each finding would give back, replayed where a change models it.",
                    None, list, lambda i, p: simulated(i.trace, estimate_savings(
                        i["idle"], i["memcpy"], i["comm"], i["kernels"], i["steps"], i["critical_path"],
                        i["time_by_class"])),
                    reads=("idle", "memcpy", "comm", "kernels", "steps", "critical_path", "time_by_class"),
                    keys=(Key("savings", list[Saving]),), place=82, tool=False)
