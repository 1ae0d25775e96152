"""Collective bandwidth on one rank: bytes, algorithm and bus bandwidth per collective and process
group, with nccl-tests' conventions, against the peak of the link each group is assumed to cross
(links.py); and whether communication is bandwidth-bound, latency-bound or slow for another reason.

nccl-tests (PERFORMANCE.md): algbw = S / t, where S is the collective's whole buffer (all-gather:
the gathered output; reduce-scatter: the input); busbw = algbw × 2(n-1)/n for all-reduce, ×(n-1)/n
for all-gather, reduce-scatter and all-to-all, ×1 for broadcast, reduce and point-to-point. busbw
is comparable with the link's peak whatever the number of ranks. Read from the payload PyTorch
(>= 2.1) records on each NCCL/RCCL kernel; t is the kernel's duration, which includes any wait for
the other ranks to arrive, so a figure far below peak on large messages may be waiting, not the link.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...format import counted, duration, percent, rate, size
from ...text import bounded, md_literal, md_table, visible
from ...trace.model import Trace
from ..core import intervals as iv
from ..core.bounds import Allowance, Bandwidth, Count, Micros, Percent
from ..core.links import Link, link_for
from ..core.view import device_time_ns, gbps, pct, us, views_of
from .base import Detector

#: bytes per element of PyTorch's scalar types, as Kineto names them in a collective's `dtype`
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "UInt16": 2,
               "UInt32": 4, "UInt64": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
               "Float8_e5m2fnuz": 1}

#: PyTorch's collective names → (kind, bus factor as a function of the group size n)
_KINDS: list[tuple[re.Pattern[str], str, Callable[[int], float]]] = [
    (re.compile(r"all_?reduce", re.I), "all_reduce", lambda n: 2 * (n - 1) / n),
    (re.compile(r"all_?gather", re.I), "all_gather", lambda n: (n - 1) / n),
    (re.compile(r"reduce_?scatter", re.I), "reduce_scatter", lambda n: (n - 1) / n),
    (re.compile(r"all_?to_?all", re.I), "all_to_all", lambda n: (n - 1) / n),
    (re.compile(r"broadcast", re.I), "broadcast", lambda n: 1.0),
    (re.compile(r"^_?reduce", re.I), "reduce", lambda n: 1.0),
    (re.compile(r"send|recv", re.I), "send_recv", lambda n: 1.0),
    (re.compile(r"gather|scatter", re.I), "gather_scatter", lambda n: (n - 1) / n),
]
#: the kinds _KINDS names, in its order
KIND_NAMES = tuple(kind for _, kind, _ in _KINDS)


def collective_kind(name: str) -> str | None:
    """The kind of collective a name says (_KINDS' names: 'ncclKernel_AllReduce_RING_LL_Sum_float',
    'nccl:all_to_all', 'allreduce' → all_reduce, all_to_all…), or None."""
    return next((kind for pattern, kind, _ in _KINDS if pattern.search(name)), None)


#: message sizes for the distribution: (upper bound in bytes, label)
SIZE_BINS = [(64 << 10, "< 64 KiB"), (1 << 20, "64 KiB - 1 MiB"), (16 << 20, "1 - 16 MiB"),
             (256 << 20, "16 - 256 MiB"), (1 << 62, ">= 256 MiB")]

NEXT_STEPS = {
    "latency": "send fewer, larger collectives: raise DDP's bucket_cap_mb (default 25), wrap larger FSDP units, "
               "or coalesce small all-reduces into one flat buffer",
    "bandwidth": "the link is near its peak: send fewer bytes (a DDP communication hook that compresses gradients "
                 "to bf16, or PowerSGD), overlap the collectives with compute, or use a faster link",
    "below_peak": "large messages well below the link's peak: the kernel time includes waiting for the other ranks "
                  "(see the straggler comparison) or the transport is slower than assumed; check NCCL_DEBUG=INFO "
                  "for the transport (NVLink/P2P, InfiniBand or sockets) and measure the link with nccl-tests",
    "exposed": "overlap them with compute: keep DDP's overlap of all-reduce with backward (no no_sync or "
               "find_unused_parameters stalls), turn on FSDP forward_prefetch/backward_prefetch, or issue "
               "collectives with async_op=True and wait late",
}


@dataclass(frozen=True)
class CollectivesParams:
    """latency_us: a message is small when its link would move it in less than this at peak
    (NCCL's per-call latency is about 5-30 µs). near_peak_pct: bus bandwidth at or above this share
    of the link's peak is bandwidth-bound. exposed_pct: collective time not hidden by compute at or
    above this share asks for overlap. worth_pct: collectives taking less of device time get no next
    step (22 µs of collectives in an 84 ms trace are not worth a change). gpus_per_node, nics_per_node
    and nic_gbps: the layout assumed for the link; across nodes a GPU's peak is its share of the node's NICs."""

    latency_us: Micros = 10.0
    near_peak_pct: Percent = 50.0
    exposed_pct: Percent = 50.0
    worth_pct: Percent = 1.0
    gpus_per_node: Count = 8
    nic_gbps: Bandwidth = 0.0  # each NIC's line rate; 0: the NIC usual for the GPU (links.py)
    nics_per_node: Allowance = 0  # 0: one NIC per GPU


@dataclass(frozen=True)
class CollectiveRow:
    """One kind of collective on one process group, over the rank's calls of it."""

    collective: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv
    names: list[str]  # the names PyTorch recorded ("allreduce", "_allgather_base")
    group: str  # the process group's name
    group_size: int
    calls: int
    bytes: int  # S added over calls (nccl-tests' size: the whole buffer)
    median_bytes: int
    time_us: float  # kernel time
    algbw_gbps: float  # bytes / time
    busbw_gbps: float  # algbw × the bus factor, time-weighted over calls
    best_busbw_gbps: float  # the fastest call's: the one that waited least
    peak_pct: float  # busbw of the link's peak
    link: int  # index into CollectivesResult.links


@dataclass(frozen=True)
class SizeBin:
    size: str  # "1 - 16 MiB"
    calls: int
    bytes: int
    time_us: float
    time_pct: float  # of the collectives' time


@dataclass(frozen=True)
class CollectivesResult:
    """Collectives with a recorded payload on one rank (all its devices)."""

    calls: int
    without_payload: int  # collective kernels the trace records no payload for: not in these figures
    bytes: int
    time_us: float
    busbw_gbps: float  # over all calls, time-weighted
    peak_pct: float  # time at each link's peak over the time taken: how much of the links' peak was used
    links: list[Link]  # the assumed links, each with its source and assumption
    rows: list[CollectiveRow]  # most time first
    sizes: list[SizeBin]  # the message-size distribution
    small_bytes: int  # messages under this are small (the main link's latency_us at peak)
    small_time_pct: float  # of the collectives' time, in small messages
    exposed_of_comm_pct: float  # of all collective time, not hidden by compute
    calls_per_step: float | None
    bound: str  # bandwidth, latency, below_peak
    exposed: bool  # exposed_of_comm_pct reached the parameter's share
    next_steps: list[str]


@dataclass(frozen=True)
class _Payload:
    name: str
    kind: str
    bytes: int
    factor: float
    group: str
    group_size: int
    ranks: tuple[int, ...]


def bus_factor(kind: str, group_size: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective kind (_KINDS' names) for a group size."""
    return next((factor(group_size) for _, name, factor in _KINDS if name == kind), 1.0)


def parse_payload(text: str) -> _Payload | None:
    """A kernel's recorded payload (trace.model.GPU_COLUMNS["collective"]), or None where it says
    too little to count bytes (an unknown dtype or collective, a barrier)."""
    try:
        p = json.loads(text)
        name, dtype = str(p["name"]), str(p["dtype"])
        elements = max(int(p["in_nelems"]), int(p["out_nelems"]))
        size = int(p["group_size"])
    except (ValueError, TypeError, KeyError):
        return None
    kind = collective_kind(name)
    if kind is None or dtype not in DTYPE_BYTES or size < 1 or elements < 0:
        return None
    ranks = _ranks(p.get("group_ranks"))
    return _Payload(visible(bounded(name, 80)), kind, elements * DTYPE_BYTES[dtype], bus_factor(kind, size),
                    visible(bounded(str(p.get("group")), 80)), size, ranks)


def _ranks(value) -> tuple[int, ...]:
    """'[0, 1, 2]' (as Kineto writes it) or a list → ranks; () when unreadable."""
    try:
        ranks = json.loads(value) if isinstance(value, str) else value
        return tuple(int(r) for r in ranks) if isinstance(ranks, list) else ()
    except (ValueError, TypeError):
        return ()


def moved_bytes(payloads: pd.Series) -> np.ndarray:
    """Each collective kernel's bytes × bus factor (what busbw counts), NaN where its payload is
    not recorded or not readable: a categorical column, each distinct payload parsed once."""
    parsed = [parse_payload(str(c)) for c in payloads.cat.categories]
    per_category = np.array([p.bytes * p.factor if p is not None else np.nan for p in parsed] + [np.nan])
    return per_category[payloads.cat.codes.to_numpy()]


def detect_collectives(trace: Trace, params: CollectivesParams = CollectivesParams()) -> CollectivesResult | None:
    """None when the rank's collective kernels carry no payload (or it has none). Each distinct
    payload is parsed, and its link chosen, once; calls are then columns indexed by its code."""
    gpu = trace.gpu
    comm = gpu[(gpu["kind"] == "kernel").to_numpy() & gpu["is_comm"].to_numpy()]
    column = comm["collective"]
    payloads = [parse_payload(str(c)) for c in column.cat.categories]
    codes = column.cat.codes.to_numpy()
    known = np.array([p is not None for p in payloads] + [False])[codes]  # code -1 (none) → False
    calls = comm[known]
    if calls.empty:
        return None
    codes = codes[known]
    device_name = trace.meta.devices.get(int(calls["device"].iloc[0]), "")
    links: list[Link] = []
    by_layout: dict[tuple[Any, ...], int] = {}  # (ranks, group size) → index in `links`: payloads differ mostly in size
    link_code = []  # per payload: its link's index
    for p in payloads:
        if p is None:
            link_code.append(-1)
            continue
        if (layout := (p.ranks, p.group_size)) not in by_layout:
            chosen = link_for(device_name, list(p.ranks), p.group_size, params.gpus_per_node, params.nic_gbps or None,
                              params.nics_per_node or None)
            if chosen not in links:
                links.append(chosen)
            by_layout[layout] = links.index(chosen)
        link_code.append(by_layout[layout])

    def per_call(values: list[Any], dtype) -> np.ndarray:  # a payload's value for each call
        return np.asarray(values, dtype=dtype)[codes]

    nbytes = per_call([p.bytes if p else 0 for p in payloads], np.int64)
    moved = nbytes * per_call([p.factor if p else 0.0 for p in payloads], np.float64)  # as busbw counts bytes
    link = per_call(link_code, np.int64)
    peak = np.array([x.peak_gbps for x in links])[link]  # GB/s = bytes/ns
    dur = np.maximum((calls["end"] - calls["start"]).to_numpy(np.int64), 1)
    at_peak_ns = moved / peak
    small = at_peak_ns < params.latency_us * 1000.0
    rows = _rows(payloads, codes, nbytes, moved, dur, link, links)
    total_ns = int(dur.sum())
    views = views_of(trace)
    all_comm = sum(iv.length(v.comm) for v in views)
    exposed = pct(sum(iv.length(v.exposed_comm) for v in views), all_comm)
    peak_pct = pct(at_peak_ns.sum(), total_ns)
    small_pct = pct(dur[small].sum(), total_ns)
    bound = classify(peak_pct, small_pct, params)
    is_exposed = exposed >= params.exposed_pct
    main = links[int(np.bincount(link, weights=dur, minlength=len(links)).argmax())]
    return CollectivesResult(
        calls=len(calls), without_payload=len(comm) - len(calls), bytes=int(nbytes.sum()), time_us=us(total_ns),
        busbw_gbps=gbps(moved.sum(), total_ns), peak_pct=peak_pct, links=links, rows=rows,
        sizes=_sizes(nbytes, dur, total_ns), small_bytes=int(params.latency_us * 1000.0 * main.peak_gbps),
        small_time_pct=small_pct, exposed_of_comm_pct=exposed,
        calls_per_step=round(len(calls) / len(trace.steps), 2) if len(trace.steps) else None,
        bound=bound, exposed=is_exposed,
        next_steps=([NEXT_STEPS[bound]] + ([NEXT_STEPS["exposed"]] if is_exposed else [])
                    if pct(total_ns, device_time_ns(views)) >= params.worth_pct else []),
    )


def classify(peak_pct: float, small_time_pct: float, params: CollectivesParams) -> str:
    """bandwidth: the links ran near their peak; latency: most of the time went to small messages;
    below_peak: large messages, slowly (waiting for other ranks, or a slower transport)."""
    if peak_pct >= params.near_peak_pct:
        return "bandwidth"
    return "latency" if small_time_pct >= 50.0 else "below_peak"


def _rows(payloads: list[_Payload | None], codes: np.ndarray, nbytes: np.ndarray, moved: np.ndarray, dur: np.ndarray,
          link: np.ndarray, links: list[Link]) -> list[CollectiveRow]:
    """One row per (collective, process group, link): payload codes grouped by that key (a few,
    however many calls)."""
    group_of: dict[tuple[Any, ...], int] = {}
    key_code = np.array([group_of.setdefault((p.kind, p.group, p.group_size), len(group_of)) if p else -1
                         for p in payloads], dtype=np.int64)[codes] * (len(links) + 1) + link
    rows = []
    for key in np.unique(key_code):
        i = np.flatnonzero(key_code == key)
        first = payloads[codes[i[0]]]
        if first is None:  # never: calls without a readable payload were left out
            continue
        at = int(link[i[0]])
        time_ns = int(dur[i].sum())
        best = int(np.argmax(moved[i] / dur[i]))
        rows.append(CollectiveRow(
            collective=first.kind, names=sorted({p.name for c in np.unique(codes[i]) if (p := payloads[c])}),
            group=first.group, group_size=first.group_size, calls=len(i), bytes=int(nbytes[i].sum()),
            median_bytes=int(np.median(nbytes[i])), time_us=us(time_ns),
            algbw_gbps=gbps(nbytes[i].sum(), time_ns), busbw_gbps=gbps(moved[i].sum(), time_ns),
            best_busbw_gbps=gbps(moved[i][best], dur[i][best]),
            peak_pct=pct(moved[i].sum() / links[at].peak_gbps, time_ns), link=at))
    return sorted(rows, key=lambda r: -r.time_us)


def _sizes(nbytes: np.ndarray, dur: np.ndarray, total_ns: int) -> list[SizeBin]:
    edges = np.array([upper for upper, _ in SIZE_BINS])
    which = np.searchsorted(edges, nbytes, side="right")
    return [SizeBin(label, int((which == b).sum()), int(nbytes[which == b].sum()), us(dur[which == b].sum()),
                    pct(dur[which == b].sum(), total_ns))
            for b, (_, label) in enumerate(SIZE_BINS) if (which == b).any()]


def collectives_sentence(result: CollectivesResult) -> str | None:
    """'21 collectives moved 120.5 MB at 10.0 GB/s bus bandwidth, 3.3% of NVLink 3's 300 GB/s (...): latency-bound…'"""
    link = result.links[result.rows[0].link] if result.rows else result.links[0]
    bound = {"bandwidth": "bandwidth-bound (near the link's peak)",
             "latency": f"latency-bound: {result.small_time_pct:.0f}% of their time is in messages under "
                        f"{size(result.small_bytes)}",
             "below_peak": "well below the link's peak on large messages"}[result.bound]
    exposed = f"; {result.exposed_of_comm_pct:.0f}% of collective time is not hidden by compute" if result.exposed else ""
    # kernels without a payload (symm_mem's multimem all-reduce, old PyTorch) are counted apart, never guessed
    unread = (f" (and {counted(result.without_payload, 'collective kernel')} without "
              "a recorded payload, not counted)") if result.without_payload else ""
    return (f"{counted(result.calls, 'collective')}{unread} moved {size(result.bytes)} at {rate(result.busbw_gbps)} "
            "bus bandwidth, "
            f"{result.peak_pct:.1f}% of {link.kind}'s {link.peak_gbps:g} GB/s (assumed: {link.assumption}): "
            f"{bound}{exposed}." + (f" Next: {'; and '.join(result.next_steps)}." if result.next_steps else ""))


def collectives_section(c: CollectivesResult, params: CollectivesParams) -> list[str]:
    """Bandwidth per collective and process group (nccl-tests' algbw and busbw), each share of a
    link's peak followed by the link it assumed."""
    rows = [[r.collective, f"{md_literal(r.group)} ({r.group_size})", str(r.calls), size(r.bytes), size(r.median_bytes),
             duration(r.time_us), f"{r.algbw_gbps:.1f}", f"{r.busbw_gbps:.1f}", f"{r.best_busbw_gbps:.1f}",
             f"{percent(r.peak_pct)} of {c.links[r.link].kind} [{r.link + 1}]"] for r in c.rows]
    links = [f"[{i}] {md_literal(link.kind)}: {link.peak_gbps:g} GB/s per GPU per direction ({md_literal(link.source)}); "
             f"assumed: {md_literal(link.assumption)}." for i, link in enumerate(c.links, 1)]
    sizes = ", ".join(f"{s.size}: {s.calls} ({percent(s.time_pct)} of the time)" for s in c.sizes)
    missing = (f" {c.without_payload} collective kernels record no message sizes and are not counted."
               if c.without_payload else "")
    return ["", "Bandwidth (nccl-tests conventions: algbw = bytes / time, busbw = algbw × the collective's bus "
                "factor, comparable with the link's peak):", "",
            md_table(["collective", "group (size)", "calls", "bytes", "median message", "time", "algbw GB/s",
                      "busbw GB/s", "best busbw", "of the link's peak"], rows),
            "", "  \n".join(links), "", f"Message sizes: {sizes}.{missing}"]


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("collectives", "Collective bandwidth", "Bytes, algorithm and bus bandwidth (nccl-tests conventions) per "
                    "collective and process group, against the assumed link's peak (NVLink, PCIe, xGMI, network; the "
                    "assumption is stated); the message-size distribution; whether communication is bandwidth-bound, "
                    "latency-bound (many small messages) or below the link's peak, and whether it is exposed.",
                    CollectivesParams(), CollectivesResult, lambda i, p: detect_collectives(i.trace, p),
                    lambda r, p: collectives_sentence(r),
                    section=collectives_section, report_under="Communication", since="1.4",
                    needs=("the trace's collective kernels carry no payload (message sizes), or it has none",
                           "profile with PyTorch >= 2.1, whose profiler records each NCCL/RCCL kernel's collective, "
                           "message sizes, dtype and process group"))
