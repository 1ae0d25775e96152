"""Host time by op: where the CPU's time goes, by self time (an event's time less the events inside
it on its thread), so a wrapper that only calls others does not rank above the work it calls; the
answer to "which op is the slowest on the CPU?" that torch.profiler's table sorts by self CPU time.

Each stretch of a thread's time between two event boundaries belongs to the innermost event open
over it (the last started): host events that cross rather than nest (ProfilerStep across Python
frames, a server's ranges) never count a moment twice, and self times add up to each thread's time
in events, the shares' denominator. Only the threads that launch device work are read where any
does. Where every event nests in the one around it (the usual trace) that is an event's time less
its children's, each child's parent found by one search; else one vectorised query for the
stretches that open at an event's end. No loop per event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...format import counted, duration, percent, shorten
from ...text import code, md_prose, md_table
from ...trace.model import Trace, matches
from ...trace.normalize import (
    STEP_NAME,
    depth_in_start_order,
    innermost_open,
    numbered_thread_time,
    start_order,
    thread_keys,
)
from ..core.bounds import Count
from ..core.host import launching_threads
from ..core.view import index_type, pct, us
from ..core.vocabulary import BLOCKING_NAME
from .base import Detector

#: runtime calls whose time is mostly a wait on the GPU or the driver
_WAITS = re.compile(r"Synchronize|Memcpy|Memset|Free|Malloc|Wait|Query", re.I)


@dataclass(frozen=True)
class HostOpsParams:
    """top: how many host events (by name and kind) to keep, most self time first."""

    top: Count = 10


@dataclass(frozen=True)
class HostOpTime:
    name: str
    kind: str  # op, python, annotation, runtime, driver, dataloader
    calls: int
    self_us: float  # its calls' time less the events inside them, added up
    total_us: float  # the time any of its calls was open, what they call included (a call inside one of its own once)
    share_pct: float  # of the host's time in events (self_us over host_time_us)


@dataclass(frozen=True)
class HostOpsResult:
    """Per rank: every host thread of it, the whole trace."""

    host_time_us: float  # each thread's time inside some host event, added up over threads: self times add up to it
    threads: int
    # True: only the threads that launch device work (a tqdm monitor or a queue's thread, waiting
    # most of the trace, would lead otherwise); False: every thread (none launches)
    launching_only: bool
    top: list[HostOpTime]  # by self time; profiler step markers left out (their self time is time in no event)
    # 2.13: every CUDA/HIP runtime and driver API called on those threads (cudaMalloc, cudaMemcpyAsync,
    # cuLaunchKernel...), by self time, up to RUNTIME_CALLS of them: "how much time is spent in cudaMalloc?"
    runtime_calls: list[HostOpTime] = field(default_factory=list)
    # 2.16: the self time of each kind of host event (op, python, annotation, runtime, driver, dataloader), µs: "how
    # much time is spent in Python?" is the python functions' own time, outside the ops they call
    self_by_kind_us: dict[str, float] = field(default_factory=dict)
    # 2.17: the calls on those threads that make the host wait for the GPU (vocabulary.BLOCKING_CALLS: synchronize,
    # synchronous copies and memsets, frees), of every name: "how many syncs are there?"
    waits_for_gpu: int = 0


#: how many runtime and driver APIs a result lists (a trace calls a few dozen at most)
RUNTIME_CALLS = 40
#: questions this detector answers with a lead of its own (the offline analyst's): the CPU's utilization,
#: which a trace does not measure, and how many threads launch work
UTILIZATION_ASKED = r"\b(?:cpu|host) (?:utili[sz]ation|usage|load)\b"
THREADS_ASKED = r"\bhow many (?:cpu |host |python )?threads\b"
#: the runtime and driver APIs asked about as a whole ("which CUDA API call takes the longest?")
_APIS_ASKED = r"\b(?:cuda|hip|runtime|driver) (?:api|runtime)(?: calls?)?\b|\bapi calls?\b|\b(?:cuda|hip) calls\b"
#: the time in Python asked ("how much time is spent in Python?", "is there Python overhead?")
PYTHON_ASKED = r"\b(?:time|spent|spend|overhead|much)\b.{0,30}\bin python\b|\bpython (?:time|overhead)\b"
#: the GIL asked about ("is the GIL a problem?"): a trace records threads' events, not the lock
GIL_ASKED = r"\bgil\b|\bglobal interpreter lock\b"


def detect_host_ops(trace: Trace, params: HostOpsParams = HostOpsParams()) -> HostOpsResult | None:
    """None where the trace records no host events."""
    cpu = trace.cpu
    pid, tid = cpu["pid"].to_numpy(np.int64), cpu["tid"].to_numpy(np.int64)
    start, end = cpu["start"].to_numpy(np.int64), cpu["end"].to_numpy(np.int64)
    # instants hold no time (and would claim the stretch after them); step markers are around
    # everything and explain nothing
    keep = (end > start) & ~matches(cpu["name"], STEP_NAME) & (cpu["name"].array.codes >= 0)
    launching = launching_threads(trace)
    if len(launching):
        keep &= np.isin(thread_keys(pid, tid),
                        thread_keys(launching["pid"].to_numpy(np.int64), launching["tid"].to_numpy(np.int64)))
    rows = np.flatnonzero(keep)
    if not len(rows):
        return None
    # each row's thread numbered once (hashed): the self times, the open times and the count read it
    thread, known = pd.factorize(thread_keys(pid[rows], tid[rows]))
    thread = thread.astype(index_type(len(known)), copy=False)
    start, end = start[rows], end[rows]
    own = _self_ns(thread, start, end)
    # per (name, kind), by bincounts over their codes: no table of the rows is built
    names, kinds = cpu["name"].array, cpu["kind"].array
    code = names.codes[rows].astype(np.int64) * (len(kinds.categories) + 1) + kinds.codes[rows]
    found, code = _dense(code)
    own_by = np.bincount(code, weights=own)
    calls_by = np.bincount(code)
    host_time = int(own.sum())
    ranked = np.argsort(-own_by, kind="stable")
    best = [i for i in ranked[:params.top] if own_by[i] > 0]
    kind_of = found % (len(kinds.categories) + 1)
    is_api = np.isin(kind_of, [kinds.categories.get_loc(k) for k in ("runtime", "driver") if k in kinds.categories])
    calls = ranked[is_api[ranked]][:RUNTIME_CALLS].tolist()  # the APIs, most self time first
    total_by = _open_time(code, sorted({*best, *calls}), thread, start, end)

    def row(i: int) -> HostOpTime:
        return HostOpTime(str(names.categories[found[i] // (len(kinds.categories) + 1)]), str(kinds.categories[kind_of[i]]),
                          int(calls_by[i]), us(int(own_by[i])), us(total_by[i]), pct(own_by[i], host_time))
    own_by_kind = np.bincount(kind_of, weights=own_by, minlength=len(kinds.categories) + 1)
    by_kind = {str(k): us(int(own_by_kind[i])) for i, k in enumerate(kinds.categories) if own_by_kind[i] > 0}
    api = np.flatnonzero(is_api)  # a name each: matched once per name, not per call
    waits = [i for i in api if BLOCKING_NAME.match(str(names.categories[found[i] // (len(kinds.categories) + 1)]))]
    return HostOpsResult(us(host_time), len(known), bool(len(launching)), [row(i) for i in best], [row(i) for i in calls],
                         by_kind, int(calls_by[waits].sum()))


def _dense(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(code, return_inverse=True) for non-negative codes: by a table over the codes' range where it is no
    larger than the codes (a bincount, not a sort: names × kinds is a few thousand), else by sorting."""
    top = int(code.max()) + 1 if len(code) else 0
    if top > len(code):
        return np.unique(code, return_inverse=True)
    found = np.flatnonzero(np.bincount(code, minlength=top))
    rank = np.zeros(top, dtype=index_type(len(found)))
    rank[found] = np.arange(len(found), dtype=rank.dtype)
    return found, rank[code]


def _open_time(code: np.ndarray, chosen: list[int], thread: np.ndarray, start: np.ndarray,
               end: np.ndarray) -> dict[int, int]:
    """For the chosen groups, the time (ns) any of their events was open on its thread: a recursive
    frame (`_call_impl` inside `_call_impl`) counts its outermost call only, never more than the thread."""
    rows = np.flatnonzero(np.isin(code, chosen))
    t_min, width = int(start.min()), int(end.max() - start.min()) + 1
    s = numbered_thread_time(thread[rows], start[rows], t_min, width)
    e = s + (end[rows] - start[rows])
    order = np.lexsort((s, code[rows]))
    group, s, e = code[rows][order], s[order], e[order]
    table = pd.DataFrame({"group": group, "end": e})
    reached = table.groupby("group", sort=False)["end"].cummax().groupby(group, sort=False).shift(1)
    covered = (e - np.maximum(s, reached.fillna(np.iinfo(np.int64).min).to_numpy(np.int64))).clip(0)
    sums = np.bincount(group, weights=covered, minlength=max(chosen, default=0) + 1)
    return {g: int(sums[g]) for g in chosen}


def _self_ns(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each event's self time: every stretch of its thread's time between two event boundaries goes
    to the innermost event open over it (the last started), so events that cross rather than nest
    (an annotation across Python frames) never count a moment twice; self times add up to each
    thread's time in events. A stretch that opens at a start is that event's; one that opens at an
    end is found in one vectorised query (normalize.innermost_open). Temporaries are let go as they
    are done with: this runs over every host event."""
    t_min, width = int(start.min()), int(end.max() - start.min()) + 1
    s = numbered_thread_time(thread, start, t_min, width)
    e = s + (end - start)
    order = start_order(s, e)  # on a tie, the longer first: the shorter is inside it
    s, e = s[order], e[order]
    if (nested := _nested_self_ns(s, e)) is not None:
        own = np.empty(len(order), dtype=np.int64)
        own[order] = nested
        return own
    bounds = np.sort(np.concatenate([s, e]), kind="stable")  # timsort: two nearly sorted runs
    bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])]  # np.unique hashes: 30× slower here
    length = np.diff(bounds)
    # a thread's last boundary opens no stretch of its own (the next one is another thread's)
    firsts = np.searchsorted(bounds, np.arange(1, int(bounds[-1] // width) + 2, dtype=np.int64) * width)
    length[(firsts - 1)[(firsts > 0) & (firsts <= len(length))]] = 0
    at = bounds[:-1]
    del bounds
    last = np.searchsorted(s, at, side="right") - 1  # the last event started by then
    owner = np.where((last >= 0) & (s[last.clip(0)] == at), last, -1)  # a stretch opening at a start
    del last
    ends = np.flatnonzero((owner < 0) & (length > 0))
    owner[ends] = innermost_open(s, e, at[ends], at_least=at[ends] + 1)
    del ends, s, e, at
    held = (owner >= 0) & (length > 0)
    own = np.empty(len(order), dtype=np.int64)
    own[order] = np.bincount(owner[held], weights=length[held], minlength=len(order)).astype(np.int64)
    return own


def _nested_self_ns(s: np.ndarray, e: np.ndarray) -> np.ndarray | None:
    """Self times where every event nests in the one around it (the usual trace): an event's time less
    its children's, each child found as the last event before it one level up. None where some event
    crosses another's end: the stretches then decide (_self_ns). Events in start order (start_order)."""
    n = len(s)
    if not n or (e <= s).any():  # instants own no time (the detector leaves them out)
        return None
    position = index_type(n)  # positions and depths in 32 bits: this runs over every host event
    depth = depth_in_start_order(s, e).astype(position)  # the events open at each start: its ancestors, where events nest
    above = np.flatnonzero(depth > 0).astype(position)
    # each event's parent: the last event before it one level up, found by one search of (level, position); depths
    # in 16 bits where they fit (a few levels, always in practice), which NumPy's stable sort orders by radix
    by_level = np.argsort(depth.astype(np.int16) if depth.max() < 2**15 else depth, kind="stable").astype(position)
    keys = depth[by_level].astype(np.int64) * n + by_level
    parent = by_level[np.searchsorted(keys, (depth[above] - 1).astype(np.int64) * n + above) - 1]
    del by_level, keys
    if (depth[parent] != depth[above] - 1).any() or (e[above] > e[parent]).any():
        return None  # an event crosses the end of one it started inside
    del depth
    dur = e - s
    return dur - np.bincount(parent, weights=dur[above], minlength=n).astype(np.int64)


def threads_read(result: HostOpsResult) -> str:
    """The threads the shares are of, in words: 'the thread that launches GPU work', '3 threads'."""
    threads = counted(result.threads, "thread")
    if result.launching_only:
        return "the thread that launches GPU work" if result.threads == 1 else f"the {threads} that launch GPU work"
    return threads


def host_ops_sentence(result: HostOpsResult) -> str | None:
    """'On the host, by self time …: aten::cudnn_convolution 11.900 s (27.4%), …'"""
    if not result.top:
        return None
    parts = [f"{code(shorten(o.name, 60))} ({o.kind}) {duration(o.self_us)} ({percent(o.share_pct)})"
             for o in result.top[:5]]
    waits = [o for o in result.top[:5] if o.kind in ("runtime", "driver") and _WAITS.search(o.name)]
    return (f"On the host, by self time (an event's time less the events inside it) of {duration(result.host_time_us)} "
            f"in host events on {threads_read(result)}: {'; '.join(parts)}."
            + (" A synchronizing runtime call's self time is time the host waited on the GPU or the driver." if waits else ""))


def host_ops_section(result: HostOpsResult, params: HostOpsParams) -> list[str]:
    rows = [[code(shorten(o.name, 60)), o.kind, str(o.calls), duration(o.self_us), percent(o.share_pct),
             duration(o.total_us)] for o in result.top]
    return [md_prose(host_ops_sentence(result) or ""), "",
            md_table(["host event", "kind", "calls", "self time", "share", "total (with what it calls)"], rows)]


#: a CUDA/HIP runtime or driver API written as code (cudaLaunchKernel, hipMemcpyAsync, cuMemAlloc)
API_NAMED = re.compile(r"\b(?:cuda|hip|cu)[A-Z]\w+")


#: how often something is called ("how many times is cudaStreamSynchronize called?", "the number of syncs")
COUNT_ASKED = r"\bhow (?:many|often)\b|\bnumber of\b|\bcount\b"
#: host synchronizations counted without an API named ("how many syncs are there per step?")
SYNCS_COUNTED = r"\b(?:how many|how often|number of|count of)\b.{0,30}\bsync\w*|\bsync\w* (?:count|calls)\b"


def api_time(result: HostOpsResult, question: str) -> list[str]:
    """Each runtime or driver API the question names (and its variants: cudaMallocAsync), its calls and host
    time, or that there are none."""
    lines = []
    for name in dict.fromkeys(API_NAMED.findall(question)):
        found = [c for c in result.runtime_calls if c.name.lower().startswith(name.lower())]
        lines += [f"**`{c.name}`: {counted(c.calls, 'call')}, {duration(c.self_us)} on the host** "
                  f"({percent(c.share_pct)} of the time in host events on {threads_read(result)})." for c in found] or [
            f"**No `{shorten(name, 60)}` calls** on {threads_read(result)} in this trace."]
    return lines


def sync_call_counts(result: HostOpsResult) -> str:
    """The calls that make the host wait for the GPU (vocabulary.BLOCKING_CALLS), each with its count and host time."""
    if not result.waits_for_gpu:
        return f"**No call that waits for the GPU** (synchronize, synchronous copy or memset) on {threads_read(result)}."
    calls = result.waits_for_gpu
    waits = [c for c in result.runtime_calls if BLOCKING_NAME.match(c.name)]  # those listed (most host time first)
    return (f"**{counted(calls, 'call')} that {'wait' if calls > 1 else 'waits'} for the GPU** on {threads_read(result)}"
            + (": " + "; ".join(f"`{c.name}` {counted(c.calls, 'call')} ({duration(c.self_us)} on the host)"
                                for c in waits) if waits else "") + ".")


def gil_lines(result: HostOpsResult) -> str:
    """What a trace can say about the GIL: no lock events, but how many threads share it and how much of their
    time is Python's own; and how to measure the contention."""
    if result.launching_only and result.threads > 1:
        threads = (f"Here {counted(result.threads, 'thread')} launch GPU work; Python code on them takes turns under "
                   "one GIL (PyTorch's ops and autograd's backward thread run in C++ and release it). ")
    elif result.launching_only:
        threads = ("Here one thread launches GPU work: the GIL costs it only where other threads of the process run "
                   "Python beside it. ")
    else:
        threads = f"Here {counted(result.threads, 'thread')} record host events and none launches GPU work. "
    python = result.self_by_kind_us.get("python")
    own = (f"Python functions take {duration(python)} of their own time of {duration(result.host_time_us)} in host "
           f"events on {threads_read(result)}. " if python else "")
    return ("**The trace cannot show the GIL:** a profiler records when each thread ran ops and calls, not which one "
            "held the lock or waited for it. " + threads + own
            + "To measure it: `py-spy record --gil -o gil.svg --pid PID` samples only the thread holding the GIL; "
              "compare with `py-spy record --idle` (every thread). A DataLoader with `num_workers > 0` loads in worker "
              "processes, each with its own GIL.")


def host_ops_lead(result: HostOpsResult, question: str) -> str | None:
    """How many threads launch work, that a trace does not measure CPU utilization, and each runtime API's
    host time, as far as the question asks them; else None."""
    lines = []
    if re.search(THREADS_ASKED, question, re.I):
        lines.append(f"**{counted(result.threads, 'thread')} {'launch' if result.threads > 1 else 'launches'} GPU work.**"
                     if result.launching_only else
                     f"**{counted(result.threads, 'thread')}** with host events; none launches GPU work.")
    if re.search(PYTHON_ASKED, question, re.I):
        python = result.self_by_kind_us.get("python")
        lines.append(f"**Python functions: {duration(python)} of their own time on the host**, of "
                     f"{duration(result.host_time_us)} in host events on {threads_read(result)} (the ops they call "
                     "are the ops', not theirs)." if python else
                     "**The trace records no Python functions** (profile with `with_stack=True`): its host time is "
                     "in ops and runtime calls only.")
    if re.search(UTILIZATION_ASKED, question, re.I):
        lines.append("**The trace does not measure CPU utilization:** a profiler records the events on the host's "
                     "threads, not how loaded its cores are. What it says is where those threads' time in events goes:")
    if re.search(GIL_ASKED, question, re.I):
        lines.append(gil_lines(result))
    named = api_time(result, question)
    if not named and re.search(_APIS_ASKED, question, re.I):  # "which CUDA API call takes the longest?": the top ones
        named = [("**Runtime and driver API calls by host time:** " + "; ".join(
            f"`{c.name}` {duration(c.self_us)} ({counted(c.calls, 'call')})" for c in result.runtime_calls[:5]) + ".")
            if result.runtime_calls else "**No runtime or driver API calls** are recorded on the host."]
    return " ".join(lines + named) or None



#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("host_ops", "Host time by op", "Where the host's (CPU's) time goes, by self time: each host event "
                    "(op, Python function, annotation, runtime call) by name, its calls, its self time (less the events "
                    "inside it), its total time, and its share of the threads' time in host events.",
                    HostOpsParams(), HostOpsResult, lambda i, p: detect_host_ops(i.trace, p),
                    lambda r, p: host_ops_sentence(r), since="2.7",
                    needs=("the trace records no host events", "profile with CPU activities on "
                           "(torch.profiler.ProfilerActivity.CPU)"),
                    # the critical path's host share is the path's ("how much of the critical path is host time?")
                    asks=r"^(?!.*\bcritical path\b).*?(?:"
                         r"\b(?:which|what) (?:ops?|functions?|calls?|python (?:functions?|code))\b.{0,40}\b(?:cpu|host)\b|"
                         # "what is the longest running operator on the CPU?"
                         r"\b(?:which|what)\b.{0,30}\b(?:ops?|operators?|functions?|calls?)\b.{0,20}"
                         r"\b(?:on|in) the (?:cpu|host)\b|"
                         r"\b(?:cpu|host)(?: side)? (?:time|ops?|hotspots?|profile)\b|\b(?:where|how) does the (?:cpu|host) "
                         r"spend\b|\bself (?:cpu )?time\b|\bwhy is (?:the |my )?(?:cpu|host)(?: side)? (?:so )?(?:slow|busy)\b|"
                         r"\btime (?:is )?spent (?:on|in) the (?:cpu|host)\b|"
                         rf"{UTILIZATION_ASKED}|{THREADS_ASKED}|{_APIS_ASKED}|{PYTHON_ASKED}|{GIL_ASKED}|"
                         # a runtime or driver API named as written (cudaMalloc, hipFree, cuMemAlloc); syncs, launches
                         # and copies have answers of their own
                         r"(?-i:\b(?:cuda|hip)(?!\w*(?:Synchroni|Launch|Memcpy|Memset))[A-Z]\w+|"
                         r"\bcu(?!\w*(?:Launch|Memcpy|Memset))[A-Z][a-z]\w+)|"
                         r"^(?!.*\b(?:idle|sync\w*|wait\w*|stall\w*|gaps?)\b).*"  # the line behind idle time: sync's
                         r"\b(?:which|what) (?:python )?(?:functions?|lines?) (?:in|of) (?:my|the) (?:code|script|program)\b)",
                    lead=host_ops_lead, section=host_ops_section, place=66)
