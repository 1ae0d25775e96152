"""The offline analyst against a table of questions engineers ask, on real traces: each row says
the intent and entities it must read, and the facts its answer must contain. Facts come from the
analysis at test time (never literals), and every offline answer passes the number check."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pandas as pd
import pytest
from builder import TraceBuilder
from conftest import (
    B200,
    CPU_ONLY,
    DATA,
    DLRM_8RANK,
    NCCL_A100,
    NSYS_AFTER,
    NSYS_BEFORE,
    RESNET_NW0,
    RESNET_NW4,
    analyzed,
    offline_answer,
)

from traceagent import analyze
from traceagent.agent.offline import CANNED_QUESTIONS
from traceagent.agent.question import named_op, understand
from traceagent.agent.session import Answer, Session
from traceagent.agent.tools import AnalysisContext
from traceagent.detect.compare.diff import diff
from traceagent.detect.core.vocabulary import BOUNDS, GAP_CAUSES, ROOT_CAUSES, label
from traceagent.detect.detectors.flops import roofline
from traceagent.detect.detectors.kernels import detect_hot_kernels, op_host
from traceagent.detect.verdict.diagnose import replayed_little
from traceagent.detect.verdict.whatif import parse_change, simulate
from traceagent.format import counted, duration, percent, rate, shorten, size

H100_QWEN = DATA / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
TRACES = {"S": (DATA / "tracelens" / "mi300_sglang_Qwen3-8B_decode.json.gz", None),
          "P": (DATA / "tracelens" / "mi300_sglang_Qwen3-8B_prefilldecode.json.gz", None),
          "R": (RESNET_NW0, None), "D": (DLRM_8RANK, None), "N": (NSYS_BEFORE, NSYS_AFTER),
          "C": (RESNET_NW0, RESNET_NW4), "B": (B200, None), "Q": (H100_QWEN, None),
          "G": (DATA / "hta" / "negative_queue_rank0.json.gz", None), "A": (NCCL_A100, None),
          "T": (DATA / "test-cuda" / "report1.sqlite", None), "H": (DATA / "hta" / "alexnet_critical_path.json.gz", None),
          "V": (DATA / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_capture.json.gz", None),
          "W": (RESNET_NW4, None), "U": (CPU_ONLY, None)}


def context(key: str) -> AnalysisContext:
    path, other = TRACES[key]
    return AnalysisContext(analyzed(path), analyzed(other) if other else None)


def pin_advice(c) -> str:
    """The offline answer's lead to "should I pin?", from the copies detector's numbers."""
    m = focus(c).results["memcpy"]
    host = sum(m.by_kind[k].count for k in ("HtoD", "DtoH") if k in m.by_kind)
    tail = (f", though copies take only {percent(m.share_pct)} of the span: pinning them will save little."
            if m.share_pct < 1.0 else ".")
    return f"**Yes, for {m.pageable_count} of the {host} host copies:** they come from pageable memory{tail}"


def step_std(analysis) -> float:
    """The focus rank's host step times' population standard deviation, µs, from its step table."""
    steps = analysis.focus.trace.steps
    return float(((steps["end"] - steps["start"]).to_numpy() / 1000.0).std())


def row(ctx, name: str):
    """The diff's row (before → after) whose name starts with `name`."""
    return next(m for m in diff(ctx.analysis, ctx.other).metrics if m.name.startswith(name))


def peak(analysis) -> int:
    """The most memory allocated at once on any GPU, read here from each GPU's memory result."""
    return max(d.peak_allocated_bytes for r in analysis.ranks for d in r.findings.memory.devices)


def host_time_us(ctx, name: str) -> float:
    """The host time of the focus rank's events of that name (none nested in another), µs, from its host table."""
    cpu = focus(ctx).trace.cpu
    rows = cpu[cpu["name"] == name]
    return float((rows["end"] - rows["start"]).sum()) / 1000.0


def host_calls(ctx, name: str) -> int:
    cpu = focus(ctx).trace.cpu
    return int((cpu["name"] == name).sum())


def hot_top(ctx) -> list:
    """The focus rank's hottest kernels, as the kernels detector ranks them."""
    return focus(ctx).findings.kernels.top


def step_percentile(ctx, q: float) -> float:
    """A percentile of the focus rank's host step times, µs, from its step table (numpy's linear interpolation)."""
    steps = focus(ctx).trace.steps
    return round(float(np.percentile((steps["end"] - steps["start"]).to_numpy() / 1000.0, q)), 3)


def straggler(ctx) -> int:
    """The job's straggler, as the cross-rank comparison names it."""
    return ctx.analysis.comparison.straggler


def focus(ctx):
    return ctx.analysis.focus


def idle(ctx, rank=None):
    return (focus(ctx) if rank is None else ctx.analysis.rank(rank)).findings.idle


def kind(ctx, name: str):
    """One kind of collective on the rank the answer is about (the verdict's, on a job)."""
    return next(k for k in focus(ctx).findings.comm.kinds if k.kind == name)


def most_comm(ctx, kind: str | None = None):
    """The rank with the most collective time (its analysis), or with `kind`: (rank, that kind's time), from each
    rank's communication detector."""
    if kind is None:
        return max(ctx.analysis.ranks, key=lambda r: r.findings.comm.comm_us)
    return max(((r.rank, k.time_us) for r in ctx.analysis.ranks for k in r.findings.comm.kinds if k.kind == kind),
               key=lambda rank_time: rank_time[1])


def busy_by_gpu(ctx) -> list[float]:
    """Each GPU's busy time in the job, from each rank's per-device breakdown."""
    return [b.busy_us for r in ctx.analysis.ranks for b in r.breakdown.devices.values()]


def slowest_module(ctx):
    """The module type with the longest mean call among those called more than once, found here from the
    modules detector's rows."""
    return max((m for m in focus(ctx).results["modules"].modules if m.calls > 1), key=lambda m: m.mean_device_us)


def overlap_word(ctx) -> str:
    """The overlap judgement for the focus rank's exposed share of collective time (50% and 10% the lines)."""
    exposed = focus(ctx).findings.comm.exposed_of_comm_pct
    return "Mostly not" if exposed >= 50 else "Partly" if exposed >= 10 else "Yes"


def step_at(ctx, t_us: float) -> int:
    """The step whose host range holds a time (µs from the trace's first event), from the steps detector's rows."""
    return next(r.step for r in focus(ctx).findings.steps.steps if r.start_us <= t_us <= r.start_us + r.host_us)


def idle_line(ctx):
    """The user's line with the most idle on the focus rank, as the idle detector has it."""
    return focus(ctx).findings.idle.by_line[0]


def longest_span(ctx):
    """The rank whose GPU span is the longest, from each rank's breakdown."""
    return max(ctx.analysis.ranks, key=lambda r: r.breakdown.total.span_us)


def idle_lead(ctx) -> list[str]:
    """The idle answer's lead on the focus rank: its GPU idle share, as the idle detector has it."""
    return [f"The GPU is idle **{percent(idle(ctx).idle_pct)}**"]


def workload(ctx):
    return focus(ctx).results["workload"]


def top_kernel(ctx):
    return focus(ctx).findings.kernels.top[0]


def most_idle_gpu(ctx) -> str:
    rank, device, _ = max(((r.rank, d, b.idle_pct) for r in ctx.analysis.ranks for d, b in r.breakdown.devices.items()),
                          key=lambda g: g[2])
    return f"**Rank {rank}, GPU {device}**"


def links(ctx):
    return focus(ctx).results["interconnect"]


def collective_calls(ctx) -> int:
    """The focus rank's collective kernels that carry a payload (PyTorch's 'Collective name' arg), from its kernels."""
    gpu = focus(ctx).trace.gpu
    return int(gpu["collective"].notna().sum())


def collectives(ctx):
    return focus(ctx).results["collectives"]


def inside(ctx, op: str):
    """The kernels an op launched, read from the events by the detector's own query."""
    return detect_hot_kernels(focus(ctx).trace, top=5, op_filter=op)


def module(ctx, name: str):
    """A module type's row of the modules detector."""
    return next(m for m in focus(ctx).results["modules"].modules if m.name == name)


def hot(ctx, name: str):
    """The hottest kernel whose name holds `name`, by the detector's own query."""
    return detect_hot_kernels(focus(ctx).trace, top=1, name_filter=name).top[0]


def most_changed(ctx, way: int = 0) -> dict:
    """The diff's kernel row whose time per step changed most (both traces list it); way 1: of those that got
    slower, -1: of those that got faster."""
    rows = [k for k in diff(ctx.analysis, ctx.other).kernels if k["before_us"] is not None and k["after_us"] is not None
            and (k["after_us"] - k["before_us"]) * way >= 0]
    return max(rows, key=lambda k: abs(k["after_us"] - k["before_us"]))


def gpu_idle_pct(ctx, device: int) -> float:
    """One GPU's idle share of its own span, as the breakdown reports it."""
    return focus(ctx).results["breakdown"].devices[device].idle_pct


def most_grown(ctx) -> dict:
    """The diff's kernel row whose time per step grew most (both traces list it)."""
    rows = [k for k in diff(ctx.analysis, ctx.other).kernels if k["before_us"] is not None and k["after_us"] is not None]
    return max(rows, key=lambda k: k["after_us"] - k["before_us"])


def op_per_step(analysis, op: str) -> float:
    """An op's kernels' time per step on a one-rank trace: the hot kernels' op query over the profiler steps."""
    rank = analysis.ranks[0]
    return detect_hot_kernels(rank.trace, op_filter=op).total_us / rank.findings.steps.count


def by_op(ctx, name: str):
    """An op's row of the op_time detector (device time by the op around each launch)."""
    return next(o for o in focus(ctx).results["op_time"].top if o.name == name)


def host_op(ctx, name: str):
    """An op among the host's top ops by self time (the host_ops detector's list)."""
    return next(o for o in focus(ctx).results["host_ops"].top if o.name == name)


def phases_of(ctx) -> list[str]:
    return [p.phase for p in focus(ctx).results["phases"].phases]


def holds_back(ctx, a: int, b: int) -> str:
    """Of ranks a and b, the one whose lateness made the other ranks wait longer first, as the answer says it."""
    caused = {r.rank: r.caused_waiting_us for r in comparison(ctx).ranks}
    slow, fast = (a, b) if caused[a] >= caused[b] else (b, a)
    return f"**Rank {slow} holds the job back more than rank {fast}:**"


def why_slow(ctx, rank: int) -> list[str]:
    """The lead of "why is rank N slow?": the straggler is told it is one and what it causes; another rank, what
    it waits, and how much of all waiting the straggler causes."""
    c = comparison(ctx)
    asked = next(r for r in c.ranks if r.rank == rank)
    if rank == c.straggler:
        return [f"**Rank {rank} is the straggler:** it entered {asked.last_count} of the {c.matched} matched collectives "
                f"last, and caused {duration(asked.caused_waiting_us)} of the other ranks' waiting in them"]
    # its waiting is for whoever entered after it; how much of all waiting the straggler causes beside it
    return [f"**Rank {rank} is not the straggler:** it waits {duration(asked.exposed_waiting_us)} in collectives for the "
            f"ranks that enter after it", f"rank {c.straggler}, the straggler, causes {c.caused_waiting_pct:.0f}% of the "
            "ranks' waiting"]


def steps_of(ctx) -> list[int]:
    return [int(n) for n in focus(ctx).trace.steps["step"]]


def most_launched_count(ctx) -> int:
    """The most launches of one kernel name, counted from the focus rank's rows."""
    gpu = focus(ctx).trace.gpu
    return int(gpu[gpu["kind"] == "kernel"].groupby("name", observed=True).size().max())


def gpu_memory(ctx):
    """The focus rank's first GPU's memory, as the memory detector has it."""
    return focus(ctx).findings.memory.devices[0]


def busbw_judged(ctx) -> str:
    """The judgement of the collectives' bus bandwidth a yes-or-no question gets: near the peak from 60% of it."""
    c = collectives(ctx)
    return ("**Yes: near the links' peak**" if c.peak_pct >= 60 else "**Low, but latency-bound**" if c.bound == "latency"
            else "**No: well below the links' peak**")


def classes(ctx):
    return focus(ctx).results["time_by_class"]


def phase(ctx, name: str):
    return next(p for p in focus(ctx).results["training_phases"].phases if p.name == name)


def most_work_gpu(ctx) -> int:
    """The focus rank's GPU with the most busy time, from the breakdown's devices."""
    devices = focus(ctx).breakdown.devices
    return max(devices, key=lambda d: devices[d].busy_us)


def grew_most(ctx, slow: int, fast: int) -> str:
    """What the step answer says grew most from step `fast` to step `slow`, worked out here from the
    steps detector's rows: the device work or the idle cause with the largest growth."""
    rows = {r.step: r for r in focus(ctx).findings.steps.steps}
    a, b = rows[slow], rows[fast]
    parts = {"the device work": (a.device_us, b.device_us)}
    for cause in {*a.idle_by_cause_us, *b.idle_by_cause_us}:
        parts[f"idle {label(GAP_CAUSES, cause)}"] = (a.idle_by_cause_us.get(cause, 0.0), b.idle_by_cause_us.get(cause, 0.0))
    what, (mine, theirs) = max(parts.items(), key=lambda kv: (kv[1][0] - kv[1][1], kv[0]))
    return (f"{what} grew most: {duration(mine)} in step {slow} against "
            f"{duration(theirs) if theirs else 'none'} in step {fast}.")


def mean_kernel_us(ctx) -> float:
    """The mean duration of the focus rank's kernels, read here from its device rows."""
    gpu = focus(ctx).trace.gpu
    kernels = gpu[gpu["kind"] == "kernel"]
    return float((kernels["end"] - kernels["start"]).mean()) / 1000


def most_launching_op(ctx) -> tuple[str, int]:
    """The op that launched the most device ops on the focus rank and how many, read here from its device rows."""
    gpu = focus(ctx).trace.gpu
    counts = gpu[gpu["kind"] != "sync"]["op"].value_counts()
    return str(counts.index[0]), int(counts.iloc[0])


def kernels_a_step(ctx) -> float:
    """The mean over the focus rank's steps of the kernels that start inside each step's device work (its
    gpu_start to gpu_end in the step table), counted here step by step from the device table."""
    trace = focus(ctx).trace
    kernels = trace.gpu[trace.gpu["kind"] == "kernel"]
    counts = [int(((kernels["start"] >= s.gpu_start) & (kernels["start"] < s.gpu_end)).sum()) if pd.notna(s.gpu_start)
              else 0 for s in trace.steps.itertuples()]
    return round(sum(counts) / len(counts), 1)


def first_step(ctx) -> int:
    """The number of the focus rank's first profiled step, from its step table."""
    return int(focus(ctx).trace.steps["step"].min())


def decode_phase(ctx):
    """The decode phase of the focus rank's serving steps, as the phases detector has it."""
    return next(p for p in focus(ctx).results["phases"].phases if p.phase == "decode")


def copies_of(ctx, kind: str):
    """One kind of copy on the focus rank, as the copies detector has it."""
    return focus(ctx).findings.memcpy.by_kind[kind]


def work_class(ctx, name: str):
    """One class of work's time on the focus rank, as the time-by-class detector has it."""
    return next(k for k in focus(ctx).results["time_by_class"].classes if k.name == name)


def slowest_collective(ctx):
    """The collective kernel with the longest mean run on the focus rank, from its kernel table."""
    gpu = focus(ctx).trace.gpu
    comm = gpu[gpu["is_comm"].to_numpy(bool) & (gpu["kind"] == "kernel").to_numpy()]
    name = (comm["end"] - comm["start"]).groupby(comm["name"], observed=True).mean().idxmax()
    return next(k for k in detect_hot_kernels(focus(ctx).trace, top=50).top if k.name == name)


def comparison(ctx):
    return ctx.analysis.comparison


def share(ctx, name: str) -> float:
    return next(k for k in classes(ctx).classes if k.name == name).share_pct


def flops(ctx):
    return focus(ctx).findings.flops


def largest_gap_of(ctx, cause: str):
    """The focus rank's largest gap of a cause, from the idle detector's largest gaps."""
    return next(g for g in idle(ctx).top_gaps if g.cause == cause)


def busiest_gpu(ctx) -> int:
    """The focus rank's GPU with the least idle share, from the idle detector's devices."""
    return min(idle(ctx).devices, key=lambda d: idle(ctx).devices[d].idle_pct)


def after_cause(ctx) -> str:
    """How the second run's verdict names its root cause ("other host work")."""
    return label(ROOT_CAUSES, ctx.other.verdict.root_cause)


def precision_of(ctx, name: str) -> float:
    """One precision's share of the focus rank's math kernel time."""
    return next(p.share_pct for p in focus(ctx).results["precision"].precisions if p.precision == name)


def library(ctx, key: str):
    """One library's row of the focus rank's kernel time by library."""
    return next(lib for lib in focus(ctx).results["libraries"].libraries if lib.library == key)


def kernels_named(ctx, part: str) -> str:
    """'3 kernels, 1.36 ms': the focus rank's kernels whose name holds `part`, read from its table."""
    gpu = focus(ctx).trace.gpu
    mine = gpu[(gpu["kind"] == "kernel") & gpu["name"].astype(str).str.contains(part)]
    return f"{counted(len(mine), 'kernel')}, {duration((mine['end'] - mine['start']).sum() / 1000)}"


def longest_kernel_us(ctx) -> float:
    """The longest single kernel run on the focus rank, µs, from its device table."""
    gpu = focus(ctx).trace.gpu
    kernels = gpu[gpu["kind"] == "kernel"]
    return float((kernels["end"] - kernels["start"]).max()) / 1000


def ops_replayed(ctx, word: str):
    """The what-if of every op whose name holds `word` (case aside) and that launched kernels, each
    op's kernels 2× faster: the ops read from the focus rank's device table here."""
    gpu = focus(ctx).trace.gpu
    ops = sorted({str(o) for o in gpu.loc[gpu["kind"] == "kernel", "op"].dropna() if word in str(o).lower()})
    return simulate(focus(ctx).trace, [parse_change(f"op:{o}=x2") for o in ops])


def replayed(ctx, spec: str):
    """The what-if of a change on the focus rank, replayed here."""
    return simulate(focus(ctx).trace, [parse_change(spec)])


# (trace, question, intent, entities, facts the answer must contain)
TABLE = [
    ("R", "Why is my GPU idle?", "idle", {},
     lambda c: [f"{percent(idle(c).by_cause_pct['dataloader'])} of the span", "num_workers=4"]),
    ("R", "What should I optimize first?", "optimize_first", {},
     lambda c: ["Start with **idle time waiting for data loading**", c.analysis.verdict.saving.sentence]),
    ("B", "Is my communication bandwidth-bound or latency-bound?", "interconnect", {},
     lambda c: [f"{collectives(c).busbw_gbps:.1f} GB/s bus bandwidth", "latency-bound",
                f"of {collectives(c).links[0].kind}'s", collectives(c).links[0].assumption]),
    ("B", "What NVLink bandwidth do the all-gathers get?", "interconnect", {},
     lambda c: [f"busbw {collectives(c).rows[0].busbw_gbps:.1f} GB/s"]),
    ("S", "How is the decode phase doing?", "phases", {},
     lambda c: ["**decode**: 1 step, 32 tokens",
                f"{percent(focus(c).results['phases'].phases[0].graph_kernel_pct)} of kernel time replayed"]),
    ("N", "Is flash_fwd_kernel on the critical path?", "critical_path", {},
     lambda c: [f"saves at most {duration(focus(c).findings.critical_path.kernels[0].saving_2x_us)}"]),
    ("R", "Is this compute bound?", "bound", {"limit": "compute"}, lambda c: ["**No.**", "not by compute"]),
    ("R", "Is it input-bound?", "bound", {"limit": "input"}, lambda c: ["**Yes.**"]),
    # two bounds named: which of them, or neither; kernels memory-bound by nature against compute-heavy ones
    ("R", "Are we bound by communication or data loading?", "bound", {"limits": ("communication", "input")},
     lambda c: ["**Data loading**, not communication."]),
    # a class of work named as the bottleneck: its share, and what making it 2× faster buys, replayed at test time
    ("B", "Is attention the bottleneck?", "bound", {},
     lambda c: [f"**No.** With attention kernels 2× faster, the step would take "
                f"{percent(max(replayed(c, 'class:attention=x2').saving_pct, 0))} less time",
                f"attention {percent(share(c, 'attention'))} ", "It is limited by **idle time (launch overhead)**"]),
    ("N", "Is attention the bottleneck?", "bound", {},
     lambda c: [f"**Yes.** With attention kernels 2× faster, the span would take "
                f"{percent(replayed(c, 'class:attention=x2').saving_pct)} less time", "they set the pace"]),
    ("B", "Is the convolution the bottleneck?", "bound", {}, lambda c: ["**No.** This rank ran no convolution kernels."]),
    ("B", "Is attention the bottleneck on rank 5?", "bound", {"rank": 5}, lambda c: ["no rank 5 in this trace"]),
    ("B", "What is the throughput of rank 3?", "throughput", {"rank": 3}, lambda c: ["no rank 3 in this trace"]),
    ("Q", "Is softmax expensive?", "bound", {},
     lambda c: [f"With reduction (softmax, sums, sorts) kernels 2× faster, the step would take "
                f"{percent(replayed(c, 'class:reduction=x2').saving_pct)} less time",
                f"reduction (softmax, sums, sorts) {percent(share(c, 'reduction'))}"]),
    ("B", "Are all-gathers the bottleneck?", "bound", {"limit": "communication"}, lambda c: ["not by communication"]),
    # the job's rate: steps per second from the step time (one over it, worked out here), tokens/s for a server
    ("R", "What is the throughput in images per second?", "throughput", {},
     lambda c: [f"**{round(1e6 / focus(c).findings.steps.step_time_us, 3):g} steps per second**",
                "The trace does not record the batch size"]),
    ("B", "What's the throughput?", "throughput", {},
     lambda c: [f"{focus(c).results['phases'].phases[0].tokens_per_s:g} tokens/s over its steps"]),
    # kernels per step: the launch detector's kernels over the steps detector's count, worked out here
    ("R", "How many kernels are launched per step?", "launch", {},
     lambda c: [f"About {kernels_a_step(c):g} kernels a step"]),
    # the typical kernel, not only the hottest: the mean asked (worked out here from the trace's kernel rows),
    # and the median duration beside the launch call's
    ("R", "What is the average kernel duration?", "kernels", {},
     lambda c: [f"**A kernel runs {duration(mean_kernel_us(c))} on average**",
                f"**A kernel runs {duration(focus(c).findings.launch.median_kernel_us)} at the median**",
                top_kernel(c).short_name]),
    # "mean" said of a time is no op of that name (ResNet has aten::mean)
    ("R", "What is the mean kernel time?", "kernels", {"op": None},
     lambda c: [f"**A kernel runs {duration(mean_kernel_us(c))} on average**"]),
    # launches counted, not timed: the optimizer's many small adds, outside the top ops by time (found here from
    # the trace's device rows)
    ("R", "Which operator launches the most kernels?", "detector:op_time", {},
     lambda c: [f"**`{most_launching_op(c)[0]}` launched the most device ops: {most_launching_op(c)[1]}**"]),
    # a runtime call named for its kind of work (no word boundary before Memcpy or Synchronize)
    ("R", "How much time is spent in cudaMemcpy?", "copies", {}, lambda c: ["mostly HtoD"]),
    ("R", "Where is cudaStreamSynchronize called?", "sync", {}, lambda c: ["cudaStreamSynchronize"]),
    # advice asked as an improvement, not a comparison of two runs
    ("R", "What is the biggest single improvement I can make?", "optimize_first", {},
     lambda c: ["Start with **idle time waiting for data loading**"]),
    ("R", "Where can I improve?", "optimize_first", {}, lambda c: ["Start with **idle time waiting for data loading**"]),
    # which kernels, not a yes or a no
    ("B", "Which kernels are memory bound?", "bound", {"limits": ("memory_bound",)},
     lambda c: [f"**Kernels that are memory-bound by nature: elementwise {percent(share(c, 'elementwise'))} of device time"]),
    # MFU over the counted ops leaves the fused MoE's matmuls out: a lower bound, by how much
    ("B", "What is my MFU?", "mfu", {},
     lambda c: ["(a lower bound: kernels outside the counted ops", f"{percent(flops(c).uncounted_pct)} of the "
                f"{duration(flops(c).compute_heavy_us)} in matmul, attention and convolution kernels"]),
    # a kind of collective named: its kernels, counted here from the trace's own kernel table
    ("D", "How long do all-reduces take?", "communication", {},
     lambda c: [f"**All-reduce: {kernels_named(c, 'AllReduce')}**.", "from `nccl:all_reduce`"]),
    ("B", "How long do the all-reduces take?", "communication", {},
     lambda c: [f"**All-reduce: {kernels_named(c, 'multimem_all_reduce')}**.", "`multimem_all_reduce_kernel`"]),
    ("D", "Are all-gathers slow?", "communication", {}, lambda c: ["**All-gather: none** in this scope"]),
    # changes named with what they would buy: replayed (the step time predicted comes from the replay at test time)
    ("R", "Would mixed precision help?", "whatif", {}, lambda c: ["**With amp: step "]),
    # a class of work or a kernel made faster, asked whether it would help: replayed
    ("R", "Would making the convolutions faster help?", "whatif", {},
     lambda c: [f"**With class:convolution=x2: step {duration(replayed(c, 'class:convolution=x2').measured_us)} → "
                f"{duration(replayed(c, 'class:convolution=x2').predicted_us)}"]),
    ("R", "Would speeding up dgrad help?", "whatif", {}, lambda c: ["**With kernel:dgrad=x2: step "]),
    # "the slowest kernel": the hottest one (the kernels detector's top), not every kernel
    ("R", "What would happen if the slowest kernel were twice as fast?", "whatif", {},
     lambda c: [f"**With kernel:^{re.escape(top_kernel(c).name)}$=x2: step "]),
    ("R", "What if cuDNN were 2x faster?", "whatif", {}, lambda c: ["**With lib:cudnn=x2: step "]),
    ("R", "What would I gain on an H100?", "whatif", {}, lambda c: ["**With gpu=H100: step "]),
    ("Q", "Would FP8 help?", "whatif", {},
     lambda c: [f"**With fp8: step {duration(replayed(c, 'fp8').measured_us)} → {duration(replayed(c, 'fp8').predicted_us)}"]),
    ("R", "Would FP8 help?", "whatif", {}, lambda c: ["V100 SXM2 has no fp8 peak in the table"]),
    ("R", "Am I using tensor cores?", "detector:precision", {},
     lambda c: [f"{percent(focus(c).results['precision'].tensor_core_pct)} of their time on tensor cores", "--change amp"]),
    ("R", "Should I use torch.compile?", "compile", {},
     lambda c: ["**Not for what limits this trace first.**",
                f"here they take {percent(classes(c).memory_kernels_pct)} of device time"]),
    ("R", "What fraction of time is elementwise?", "detector:time_by_class", {},
     lambda c: [f"elementwise {percent(work_class(c, 'elementwise').share_pct)}"]),
    ("R", "How does the forward compare with the backward?", "detector:training_phases", {},
     lambda c: [f"The backward takes {focus(c).results['training_phases'].backward_per_forward_x:g}× the forward"]),
    ("R", "Is it compute-bound or memory-bound?", "bound", {"limits": ("memory_bound", "compute")},
     lambda c: ["**Neither.**", f"{percent(classes(c).compute_pct)} of device time is in compute-heavy kernels",
                f"{percent(classes(c).memory_kernels_pct)} in kernels memory-bound by nature"]),
    ("R", "Which kernel is slowest per call?", "slow_kernel", {},
     lambda c: [detect_hot_kernels(focus(c).trace, top=1, order="mean").top[0].short_name, top_kernel(c).short_name]),
    ("R", "Why is dgrad_engine so slow?", "kernel", {"kernel": "dgrad_engine"},
     lambda c: [f"ran {top_kernel(c).count} times for {duration(top_kernel(c).total_us)}"]),
    ("R", "What are the hot kernels?", "kernels", {}, lambda c: [top_kernel(c).short_name, "ncu --kernel-name"]),
    ("R", "How much time goes to memcpy?", "copies", {},
     lambda c: ["mostly HtoD", f"{focus(c).findings.memcpy.pageable_count} from pageable memory"]),
    ("R", "How fast do my copies cross PCIe?", "copies", {},
     lambda c: [f"{percent(links(c).copies[0].peak_pct)} of PCIe Gen3 x16's 15.75 GB/s", "x16 slot assumed"]),
    ("R", "Is the GPU underutilized?", "idle", {}, lambda c: [f"**{percent(idle(c).idle_pct)}**"]),
    ("D", "Which GPU is most idle?", "most_idle", {}, lambda c: [most_idle_gpu(c)]),
    ("S", "How many tokens per second?", "phases", {},
     lambda c: [f"{focus(c).results['phases'].phases[0].tokens_per_s:g} tokens/s over its steps"]),
    ("S", "What's the time to first token?", "phases", {}, lambda c: ["include queueing and batching"]),
    ("B", "What is the GPU doing most of the time?", "idle", {}, lambda c: [f"**{focus(c).verdict.headline}.**"]),
    # a step named by its order: its number in this trace
    ("R", "Why is the first step slower than the rest?", "one_step", {},
     lambda c: [f"step {min(steps_of(c))}: ", f"It is not the slowest step: step {focus(c).findings.steps.slowest} is."]),
    ("R", "How long was the last step?", "one_step", {}, lambda c: [f"step {max(steps_of(c))}: "]),
    # asked the other way round: enough workers is no where the GPU waits for data
    ("R", "Is the data loader using enough workers?", "dataloader", {}, lambda c: ["**No:** the GPU waits for data"]),
    ("R", "Does the GPU wait for data loading?", "dataloader", {}, lambda c: ["**Yes:** the GPU waits for data"]),
    # layers by their nn.Module ranges, where the trace records them
    ("R", "Which layer is the slowest?", "detector:modules", {}, lambda c: ["with_modules=True"]),
    ("B", "Which layer is the slowest?", "detector:modules", {},
     lambda c: [f"The slowest of the modules called more than once: {focus(c).results['modules'].slowest_per_call}"]),
    # the batch size is not in a trace: what a small one looks like in it, against the verdict
    ("R", "Is my batch size too small?", "batch_size", {},
     lambda c: ["**Not what limits this trace.**", f"{percent(focus(c).findings.launch.short_kernel_pct)} of kernels"]),
    ("B", "Is my batch size too small?", "batch_size", {}, lambda c: ["**Probably: the GPU waits on kernel launches"]),
    ("D", "What is GPU utilization on each rank?", "most_idle", {}, lambda c: [most_idle_gpu(c)]),
    ("D", "How balanced are the ranks?", "straggler", {}, lambda c: [f"**Rank {comparison(c).straggler}**"]),
    # a phase the trace does not hold is said to be missing, with the phases it does hold
    ("S", "How fast is prefill?", "phases", {},
     lambda c: [f"**This trace has no prefill steps:** it holds {' and '.join(phases_of(c))} steps only"]),
    ("B", "How many tokens per second in decode?", "phases", {},
     lambda c: [f"**This trace has no decode steps:** it holds {' and '.join(phases_of(c))} steps only"]),
    # no serving steps: the model's forward passes, as the workload counts them, are what the trace holds
    ("Q", "How long does one decode step take?", "phases", {},
     lambda c: ["This trace cannot say prefill and decode phases",
                f"What the trace does hold: {counted(workload(c).forward_calls, 'forward pass')} of "
                f"`{workload(c).model}`, {duration(workload(c).forward_device_us)} of device time"]),
    ("D", "Is the time the same on all ranks?", "straggler", {}, lambda c: [f"**Rank {comparison(c).straggler}**"]),
    # the ranks in step with each other (not the host with its GPU: that is the sync answer's)
    ("D", "Are the ranks in sync?", "straggler", {}, lambda c: [f"**Rank {comparison(c).straggler}**"]),
    # an op or range named as written in snake_case, no namespace: that one, not every op holding it
    ("D", "What is the time spent in record_param_comms?", "op", {"op": "record_param_comms"},
     lambda c: [f"**`record_param_comms`** launched {counted(inside(c, 'record_param_comms').kernels, 'kernel')}"]),
    # one rank named as slow: the straggler is told it is one, any other rank whom it waits for; with one
    # rank loaded there is no other rank to be slow against: its idle time
    ("D", "Why is rank 3 slow?", "idle", {"rank": 3},
     lambda c: [*why_slow(c, 3), f"Rank 3: The GPU is idle **{percent(idle(c, 3).idle_pct)}**"]),
    ("R", "Why is rank 0 slow?", "idle", {"rank": 0}, idle_lead),
    # two ranks side by side: who makes the other ranks wait more, from the comparison at test time
    ("D", "Why is rank 0 slower than rank 1?", "rank_vs_rank", {"ranks": (0, 1)},
     lambda c: [holds_back(c, 0, 1),
                f"- rank 0: span {duration(c.analysis.ranks[0].breakdown.total.span_us)}",
                f"- rank 1: span {duration(c.analysis.ranks[1].breakdown.total.span_us)}"]),
    ("D", "rank 3 vs 5", "rank_vs_rank", {"ranks": (3, 5)},
     lambda c: [holds_back(c, 3, 5)]),
    ("R", "Compare rank 0 and rank 1", "rank_vs_rank", {"ranks": (0, 1)}, lambda c: ["no rank 1 in this trace"]),
    ("D", "What would overlapping communication buy?", "whatif", {}, lambda c: ["**With comm=overlap: step "]),
    # the device's work as a whole made faster: every kernel, not the verdict's own change
    ("R", "What if kernels were 2x faster?", "whatif", {},
     lambda c: ["**With kernel:.*=x2: step ", "every kernel runs 2× faster"]),
    ("R", "What if the GPU were twice as fast?", "whatif", {}, lambda c: ["**With kernel:.*=x2: step "]),
    # data loading made shorter, not removed
    ("R", "What if I halved the data loading time?", "whatif", {}, lambda c: ["**With dataloader=x2: step "]),
    ("R", "What if data loading were 4x faster?", "whatif", {}, lambda c: ["**With dataloader=x4: step "]),
    # a class of work or an op said in a what-if: its kernels made that many times faster
    ("R", "What would a 2x faster convolution buy?", "whatif", {}, lambda c: ["**With class:convolution=x2: step "]),
    # a factor said with the work it speeds up: the replay of that change, not the top cause's saving
    ("R", "How much faster would the step be with 1.5x faster convolutions?", "whatif", {},
     lambda c: [f"**With class:convolution=x1.5: step {duration(replayed(c, 'class:convolution=x1.5').measured_us)} → "
                f"{duration(replayed(c, 'class:convolution=x1.5').predicted_us)}"]),
    ("B", "What if attention and matmuls were 3x faster?", "whatif", {}, lambda c: ["**With class:attention,gemm=x3:"]),
    ("B", "What if aten::addmm were 2x faster?", "whatif", {"op": "aten::addmm"}, lambda c: ["**With op:aten::addmm=x2:"]),
    ("R", "What does the dataloader cost per step?", "dataloader", {},
     lambda c: [f"The GPU waits for data loading {duration(idle(c).by_cause_us['dataloader'])}"]),
    ("R", "Is data loading the problem?", "dataloader", {},
     lambda c: ["**Yes:**", duration(idle(c).by_cause_us["dataloader"])]),
    ("R", "Where does the sync come from?", "sync", {}, lambda c: [idle(c).sync_sites[0].python]),
    ("R", "What is the longest gap?", "longest_gap", {},
     lambda c: [duration(focus(c).gaps["dur"].max() / 1000)]),
    ("R", "Show me gaps longer than 50 ms", "gaps", {"min_us": 50_000.0},
     lambda c: [f"{int((focus(c).gaps['dur'] >= 50e6).sum())} gaps of at least 50.00 ms"]),
    ("R", "How long is a step?", "steps", {}, lambda c: [duration(focus(c).findings.steps.mean_us)]),
    ("R", "Compare step 5 and step 6", "step_vs_step", {"steps": [5, 6]}, lambda c: ["- step 5:", "- step 6:"]),
    ("R", "step 8 vs 9: which is slower?", "step_vs_step", {"steps": [8, 9]}, lambda c: ["**Step 8 is slower.**"]),
    ("R", "Why is step 5 slower than step 6?", "step_vs_step", {"steps": [5, 6]},
     lambda c: ["- step 5:", "- step 6:", grew_most(c, 5, 6)]),
    ("R", "What happened in step 7?", "one_step", {"steps": [7]}, lambda c: ["step 7:", "against the median step"]),
    ("R", "Which step is the slowest?", "steps", {},
     lambda c: [f"slowest: step {focus(c).findings.steps.slowest}"]),
    ("R", "Should I use CUDA graphs?", "launch", {}, lambda c: ["**Not for speed here:**"]),
    ("R", "What's the kernel launch overhead?", "launch", {},
     lambda c: [f"{percent(focus(c).findings.launch.short_kernel_pct)} of kernels are shorter"]),
    ("R", "What is the MFU?", "mfu", {},  # shapes, but forward convolutions lack their stride: a lower bound
     lambda c: [f"**MFU {percent(focus(c).findings.flops.mfu_pct)}** (a lower bound", "V100 SXM2 fp32 peak"]),
    ("N", "What's the MFU?", "mfu", {}, lambda c: ["**The trace cannot say:**", "record_shapes=True"]),
    ("B", "What is the achieved TFLOP/s of the matmuls?", "mfu", {},
     lambda c: [f"**MFU {percent(focus(c).findings.flops.mfu_pct)}**"]),
    ("B", "What is the throughput of the matmul kernels?", "mfu", {},
     lambda c: [f"**MFU {percent(focus(c).findings.flops.mfu_pct)}**"]),
    # what the job is: training or inference, the model
    ("S", "Is this inference or training?", "detector:workload", {}, lambda c: ["An inference server (decode steps)"]),
    # the kind of job said in passing: the question is what limits it
    ("S", "Is this inference job launch bound?", "bound", {"limit": "launch"}, lambda c: ["**No.**"]),
    # the phases weighed against each other, where the trace holds one of them
    ("S", "Is prefill or decode the bottleneck?", "phases", {},
     lambda c: ["**This trace has no prefill steps** to weigh against decode"]),
    ("R", "Is this a training run?", "detector:workload", {},
     lambda c: ["A training job", "single-process DataLoader (num_workers=0)", "with_modules=True"]),
    ("B", "What model is this?", "detector:workload", {},
     lambda c: [f"`{focus(c).results['workload'].model}` (its outermost nn.Module)",
                duration(focus(c).results["workload"].forward_device_us)]),
    ("R", "What should I profile next?", "profile_next", {},
     lambda c: ["`traceagent profile --nsys -- python train.py`",
                f"`traceagent profile --ncu {top_kernel(c).short_name!r} -- python train.py`"]),
    ("R", "Which rank is the straggler?", "straggler", {}, lambda c: ["one rank's trace is loaded"]),
    ("R", "Summarize this trace.", "summary", {}, lambda c: [c.analysis.verdict.headline]),
    # everyday phrasings: the hardware, making it faster, what blocks the host, data copied, the optimizer's time
    ("R", "Is the GPU memory bandwidth saturated?", "bound", {"limits": ("memory_bound",)},
     lambda c: [f"{percent(classes(c).memory_kernels_pct)} in kernels memory-bound by nature"]),
    # asked of pageable memory, yes means pageable copies
    ("R", "Are the copies pageable?", "copies", {},
     lambda c: [f"**Yes:** {focus(c).results['memcpy'].pageable_count} of the "
                f"{focus(c).results['memcpy'].by_kind['HtoD'].count} host copies come from pageable memory"]),
    ("T", "Are there pageable copies?", "copies", {},
     lambda c: [f"**No:** the {sum(focus(c).results['memcpy'].by_kind[k].count for k in ('HtoD', 'DtoH'))} host copies "
                "come from pinned memory"]),
    ("R", "Is pin_memory on?", "copies", {},
     lambda c: [f"**No:** {focus(c).results['memcpy'].pageable_count} of the "
                f"{focus(c).results['memcpy'].by_kind['HtoD'].count} host copies come from pageable memory"]),
    # asked the other way round ("should I?"): yes means pin them, and whether the copies' time makes it matter
    ("R", "Should I use pinned memory?", "copies", {}, lambda c: [pin_advice(c)]),
    ("R", "Would pinning host memory help?", "copies", {}, lambda c: [pin_advice(c)]),
    ("R", "What would happen if I doubled the batch size?", "batch_size", {},
     lambda c: ["The trace does not record the batch size"]),
    ("R", "How many GPUs?", "summary", {}, lambda c: [f"1 rank(s) on {focus(c).trace.meta.devices[0]}"]),
    ("R", "What GPU is this?", "summary", {}, lambda c: [focus(c).trace.meta.devices[0]]),
    ("R", "What is the GPU model?", "summary", {}, lambda c: [focus(c).trace.meta.devices[0]]),
    ("R", "How long did profiling run?", "summary", {}, lambda c: [f"span {duration(idle(c).span_us)}"]),
    ("R", "How many dataloader workers should I use?", "dataloader", {},
     lambda c: [f"The GPU waits for data loading {duration(idle(c).by_cause_us['dataloader'])}", "num_workers="]),
    ("R", "Is this trace from AMD or NVIDIA?", "summary", {}, lambda c: [focus(c).trace.meta.devices[0]]),
    ("R", "How can I make this faster?", "optimize_first", {}, lambda c: ["Start with"]),
    ("R", "What's blocking the CPU?", "sync", {}, lambda c: [idle(c).sync_sites[0].python]),
    ("R", "How much data is copied to the GPU?", "copies", {}, lambda c: ["mostly HtoD"]),
    ("R", "How much time goes to the optimizer?", "detector:training_phases", {},
     lambda c: [f"optimizer {percent(phase(c, 'optimizer').share_pct)}"]),
    ("R", "tell me a joke", None, {}, lambda c: ["I did not recognize", "Why is my GPU idle?", "**Verdict:**"]),
    # an op the trace does not have: said, with the ops that have the most device time (op_time's)
    ("N", "How long does aten::mm take?", None, {},
     lambda c: [f"This trace has no op `aten::mm` that launched device work; the ops with the most device time are "
                f"`{focus(c).results['op_time'].top[0].name}`", "**Verdict:**"]),
    ("R", "¿Por qué mi GPU está inactiva?", None, {"foreign": True},
     lambda c: ["open questions need a configured model", "**Verdict:**"]),
    ("R", "Which NVTX ranges take the most GPU time?", "annotations", {}, lambda c: ["record_function"]),
    ("R", "did it help?", "compare", {}, lambda c: ["Only one trace is loaded"]),
    ("D", "How does this scale to more GPUs?", "scaling", {},
     lambda c: ["`traceagent scaling RUN RUN … --project 16`", percent(focus(c).findings.comm.exposed_pct),
                percent(comparison(c).others_exposed_waiting_pct)]),
    # every rank's step time, asked of a job: each rank's own, the longest named first
    ("D", "What's the average step time across ranks?", "steps", {},
     lambda c: [f"on rank {max(c.analysis.ranks, key=lambda r: r.findings.steps.mean_us).rank}.",
                *(f"- rank {r.rank}: {duration(r.findings.steps.mean_us)}" for r in c.analysis.ranks)]),
    ("D", "Which rank is the straggler?", "straggler", {},
     lambda c: [f"**Rank {comparison(c).straggler}** is the straggler"]),
    # the busiest rank, not the straggler; what fixing the straggler saves, its saving (the waiting it causes)
    ("D", "Which rank is busiest?", "most_idle", {}, lambda c: ["Every GPU, least idle first:"]),
    ("D", "What would fixing the straggler save?", "straggler", {},
     lambda c: [f"**Rank {comparison(c).straggler}** is the straggler.", c.analysis.verdict.saving.sentence]),
    ("D", "What is rank 3 waiting for?", "straggler", {"rank": 3},
     lambda c: [f"**Rank 3 waits {duration(comparison(c).ranks[3].exposed_waiting_us)} in collectives for the ranks "
                f"that enter after it**", f"rank {comparison(c).straggler}, the straggler, causes "
                f"{comparison(c).caused_waiting_pct:.0f}% of the ranks' waiting"]),
    ("D", "Why is rank 7 slow?", "idle", {"rank": 7},
     lambda c: [*why_slow(c, 7), f"Rank 7: The GPU is idle **{percent(idle(c, 7).idle_pct)}**"]),
    ("D", "Is the all-to-all overlapped with compute?", "communication", {},
     lambda c: [f"**All-to-all: {counted(kind(c, 'all_to_all').kernels, 'kernel')}",
                f"{percent(kind(c, 'all_to_all').exposed_pct)} of its time ({duration(kind(c, 'all_to_all').exposed_us)}) "
                "no compute overlapped"]),
    # communication weighed against computation, and the slowest collective per call (from the detectors' numbers)
    ("D", "What's the comm to compute ratio on rank 3?", "communication", {"rank": 3},
     lambda c: [f"**Communication to computation: {c.analysis.rank(3).findings.comm.comm_to_compute_x:g}×**: collectives "
                f"ran {duration(c.analysis.rank(3).findings.comm.comm_us)}, compute kernels "
                f"{duration(c.analysis.rank(3).findings.comm.compute_us)}"]),
    ("D", "How does communication time compare with compute time?", "communication", {},
     lambda c: [f"**Communication to computation: {focus(c).findings.comm.comm_to_compute_x:g}×**"]),
    ("D", "Which collective call is the slowest?", "communication", {},
     lambda c: [f"**By time per call, the slowest collective is `{slowest_collective(c).label}`**: mean "
                f"{duration(slowest_collective(c).mean_us)}"]),
    ("D", "Is communication overlapped?", "communication", {},
     lambda c: [f"**{percent(focus(c).findings.comm.exposed_of_comm_pct)}**"]),
    ("D", "Is it communication-bound?", "bound", {"limit": "communication"}, lambda c: ["**No.**", "straggler"]),
    ("D", "Why is rank 9 slow?", "idle", {"rank": 9}, lambda c: ["no rank 9 in this trace"]),
    # the ranks' waiting, asked in other words; one rank against the others with one job loaded
    ("D", "Why do the ranks wait?", "straggler", {},
     lambda c: [f"**Rank {comparison(c).straggler}** is the straggler"]),
    ("D", "Is there skew between ranks?", "straggler", {},
     lambda c: [f"**Rank {comparison(c).straggler}** is the straggler"]),
    ("D", "Is rank 7 the problem?", "straggler", {"rank": 7}, lambda c: ["**Rank 7 is the straggler:**"]),
    ("D", "How does rank 0 compare to the others?", "straggler", {"rank": 0},
     lambda c: [f"**Rank 0 waits {duration(next(r for r in comparison(c).ranks if r.rank == 0).exposed_waiting_us)} in "
                "collectives for the ranks that enter after it**"]),
    ("D", "Why is all_reduce taking so long?", "communication", {},
     lambda c: [f"**All-reduce: {counted(kind(c, 'all_reduce').kernels, 'kernel')}"]),
    ("D", "Is the gradient sync overlapped with backward?", "communication", {},
     lambda c: [f"**{percent(focus(c).findings.comm.exposed_of_comm_pct)}**"]),
    ("D", "Which GPU has the most idle time?", "most_idle", {}, lambda c: ["Every GPU, most idle first:"]),
    ("D", "Where does rank 7 spend its time?", "idle", {"rank": 7},
     lambda c: [f"Rank 7: The GPU is idle **{percent(idle(c, 7).idle_pct)}**"]),
    # what the host does while the GPU waits: the idle answer, whose gaps say what the host was in
    # shorthand engineers type, read as the words it stands for
    ("R", "gpu util?", "idle", {}, lambda c: [f"The GPU is idle **{percent(idle(c).idle_pct)}**"]),
    # a figure asked: the figure first
    ("R", "What is the peak memory?", "memory", {}, lambda c: ["**Peak memory:** GPU 0: peak "]),
    # how far the host runs ahead: the launch queue's depth
    ("R", "Is there CPU-GPU overlap?", "detector:launch_queue", {}, lambda c: ["**Launch queue.** GPU 0 stream"]),
    ("G", "Are kernels waiting in the queue?", "detector:launch_queue", {}, lambda c: ["**Launch queue.** GPU 0 stream"]),
    ("D", "comms overlap?", "communication", {}, lambda c: ["collective kernels ran"]),
    ("R", "What does the CPU do between kernels?", "idle", {},
     lambda c: ["The GPU is idle **", "The largest gap of each cause, and what the launching thread was doing in it:"]),
    ("D", "Is the load balanced across ranks?", "straggler", {},
     lambda c: [f"**No:** **Rank {c.analysis.comparison.straggler}** is the straggler."]),
    ("D", "What is rank 3 doing?", "idle", {"rank": 3},
     lambda c: [f"Rank 3: The GPU is idle **{percent(idle(c, 3).idle_pct)}**"]),
    ("D", "Is there a network problem?", "interconnect", {}, lambda c: ["This trace cannot say the collectives' bandwidth"]),
    ("D", "What should I optimize first on rank 0?", "optimize_first", {"rank": 0}, lambda c: ["Start with"]),
    # a speed-up to find, not one measured: the first thing to fix, in the words people ask it
    ("R", "How can I speed up training?", "optimize_first", {},
     lambda c: [f"Start with **{focus(c).findings.savings[0].finding}**"]),
    ("B", "How can I make inference faster?", "optimize_first", {}, lambda c: ["Start with"]),
    ("R", "Any tips to improve performance?", "optimize_first", {}, lambda c: ["Start with"]),
    ("R", "What would help most?", "optimize_first", {}, lambda c: ["Start with"]),
    ("R", "What are the biggest inefficiencies?", "optimize_first", {}, lambda c: ["Start with"]),
    ("R", "What's eating my GPU time?", "kernels", {}, lambda c: [f"1. `{top_kernel(c).label}`"]),
    ("R", "How much time is wasted?", "idle", {}, idle_lead),
    ("R", "Is the CPU waiting on the GPU?", "sync", {}, lambda c: ["blocks the host"]),
    ("R", "Which operations could be fused?", "compile", {}, lambda c: ["torch.compile helps in two ways"]),
    ("R", "Is the trace complete?", "profile_next", {}, lambda c: ["What this trace lacks, and how to record it:"]),
    ("R", "Why does the GPU go idle every step?", "idle", {}, idle_lead),
    ("R", "Why are there gaps after the optimizer step?", "idle", {},
     idle_lead),
    # the line with the most idle of any cause (the loader's here), not only a sync's line
    ("R", "Which line of my code causes the most idle time?", "idle", {},
     lambda c: [f"**`{idle_line(c).python}` leaves the GPU idle the most", f"`{idle(c).sync_sites[0].python}`"]),
    # an op (not a class of work) asked about as the bottleneck: its kernels replayed twice as fast
    ("B", "Is the MoE layer the bottleneck?", "op_bound", {"op": "moe"},
     lambda c: ["**Yes.**" if ops_replayed(c, "moe").saving_pct >= 10 else "**No.**",
                f"({duration(ops_replayed(c, 'moe').measured_us)} → {duration(ops_replayed(c, 'moe').predicted_us)}, "
                f"simulated", f"They launched {inside(c, 'moe').kernels} kernels"]
     # where its kernels are not the limit but the verdict names the op for its launches: said so
     + (["**Its host side is, though:**"] if ops_replayed(c, "moe").saving_pct < 10
        and "moe" in focus(c).results["verdict"].hypothesis.lower() else [])),
    ("R", "Is aten::addmm the bottleneck?", "op_bound", {"op": "aten::addmm"},
     lambda c: [f"({duration(ops_replayed(c, 'aten::addmm').measured_us)} → "
                f"{duration(ops_replayed(c, 'aten::addmm').predicted_us)}, simulated"]),
    ("R", "Are kernels overlapping?", "detector:streams", {}, lambda c: ["**Streams.** One stream"]),
    ("N", "How many kernels run concurrently?", "detector:streams", {}, lambda c: ["**Streams.**"]),
    ("R", "Are the kernels' grids too small?", "detector:grid_fill", {}, lambda c: ["**Grids that cannot fill the GPU.**"]),
    # which kernel to work on, where kernels are not the limit: that first, then the hottest
    ("S", "Which kernel should I tune first?", "kernels", {},
     lambda c: [f"**Kernels are not what limits this trace first:** {focus(c).verdict.headline}.",
                f"1. `{shorten(top_kernel(c).label, 80)}`"]),
    # two formats asked as a choice: each one's share, the larger first; neither, with the format there is
    ("B", "Is this fp8 or fp4?", "detector:precision", {},
     lambda c: [f"**Mostly fp4:** fp4 takes {percent(precision_of(c, 'fp4'))}, fp8 takes "
                f"{percent(precision_of(c, 'fp8'))} of the math kernels' time."]),
    ("B", "Is it bf16 or fp16?", "detector:precision", {},
     lambda c: [f"**Neither:** no math kernel's name says bf16 or fp16; the most math time is fp4's "
                f"({percent(precision_of(c, 'fp4'))})."]),
    # why the steps are slow: the verdict, with the idle behind it; why the slowest is: the step list's comparison
    ("R", "Why is the step so slow?", "idle", {}, lambda c: [f"**{focus(c).verdict.headline}.**"]),
    ("R", "Why is the slowest step slow?", "steps", {}, lambda c: ["The slowest step took "]),
    ("R", "Why are some steps slower than others?", "steps", {}, lambda c: ["The slowest step took "]),
    ("R", "Why is the GPU idle in some steps?", "idle", {}, lambda c: [f"**{focus(c).verdict.headline}.**"]),
    # how many layers: the modules' calls; a word of a kernel's name that names no kernel in particular leads nowhere
    ("Q", "How many layers does the model have?", "detector:modules", {},
     lambda c: [f"**{focus(c).results['modules'].layers} layers** of `{focus(c).results['modules'].layer}`",
                "**Modules.**"]),
    # occupancy: Kineto's estimate first; the SM efficiency is the grids' fill; "how much faster could it run?" the savings
    ("R", "What is the achieved occupancy?", "detector:grid_fill", {},
     lambda c: [f"**Achieved occupancy: {percent(focus(c).results['grid_fill'].occupancy_pct)}** of the SMs' warps"]),
    ("R", "What's the SM efficiency?", "detector:grid_fill", {}, lambda c: ["**Grids that cannot fill the GPU.**"]),
    ("R", "How much faster could this run?", "saving", {}, lambda c: [f"**{c.analysis.verdict.saving.sentence}"]),
    # whether it runs compiled, asked as "used": that first, then whether compiling answers the limit
    ("B", "Is torch.compile used?", "compile", {},
     lambda c: [("**It runs compiled now:**" if workload(c).compiled_pct or workload(c).compiled_regions
                 else "**It does not run compiled now:**")]),
    # the warm-up asked of: whether the first profiled step is the slowest (from the steps detector)
    ("C", "Is the warmup step slower?", "steps", {},
     lambda c: [(f"**Yes: the first profiled step, step {first_step(c)}, is the slowest**"
                 if first_step(c) == focus(c).findings.steps.slowest else
                 f"**No: the first profiled step, step {first_step(c)}, is not the slowest**: step "
                 f"{focus(c).findings.steps.slowest} is"), f"median {duration(focus(c).findings.steps.median_us)})."]),
    # an inference server's batch asked as requests: the decode step's tokens, one a request
    ("S", "How many requests are in the batch?", "phases", {},
     lambda c: [f"**{decode_phase(c).tokens} requests** in the decode step: a decode step makes one token for each "
                "request in the batch."]),
    # a figure asked of both runs ("did X change?"): each run's answer, the first then the second
    ("N", "Did the comm to compute ratio change?", "communication", {},
     lambda c: ["**In the first run** (before the change):\n\n**Communication to computation: "
                f"{focus(c).findings.comm.comm_to_compute_x:g}×**",
                "**In the second run** (after the change):\n\n**Communication to computation: "
                f"{c.other.focus.findings.comm.comm_to_compute_x:g}×**"]),
    # the collectives' payloads asked about: latency- or bandwidth-bound, and their message sizes
    ("A", "Are the collectives latency bound?", "interconnect", {},
     lambda c: [f"**{'Yes' if collectives(c).bound == 'latency' else 'No'}: ",
                f"({percent(collectives(c).small_time_pct)} of the collectives' time is in messages under "
                f"{size(collectives(c).small_bytes)})."]),
    ("A", "What message sizes are the all-reduces?", "communication", {},
     lambda c: [f"**Message sizes** (median per call): {collectives(c).rows[0].collective} on group "
                f"{collectives(c).rows[0].group} {size(collectives(c).rows[0].median_bytes)}"]),
    # graph captures asked about: their count, the host time inside them and instantiating them
    ("V", "How long did graph capture take?", "launch", {},
     lambda c: [f"**{focus(c).findings.graphs.captures} graph captures: {duration(focus(c).findings.graphs.capture_us)} "
                f"of host time from each capture's begin to its end, {duration(focus(c).findings.graphs.instantiate_us)} "
                "instantiating.**"]),
    # the host's threads counted, and CPU utilization asked (which a trace does not measure)
    ("R", "How many threads launch work?", "detector:host_ops", {},
     lambda c: [f"**{focus(c).results['host_ops'].threads} threads launch GPU work.**"]),
    ("R", "What is the CPU utilization?", "detector:host_ops", {},
     lambda c: ["**The trace does not measure CPU utilization:**", "**Host time by op.**"]),
    # the critical path asked of what is off it, and of its host share (not host time by op)
    ("H", "Which kernels are not on the critical path?", "critical_path", {},
     lambda c: [("**Off the path:** " + ", ".join(f"`{k}`" for k in focus(c).findings.critical_path.off_path))
                if focus(c).findings.critical_path.off_path else "**Every hot kernel has time on the path.**"]),
    ("H", "How much of the critical path is host time?", "critical_path", {},
     lambda c: [f"**Host calls {percent(focus(c).findings.critical_path.host_call_pct)} and host work between them "
                f"{percent(focus(c).findings.critical_path.host_work_pct)} of the path**"]),
    # a GPU named in a job of one GPU a rank: the rank whose GPU it is, not "rank 7 has no GPU 3"
    ("D", "What is GPU 3 doing?", "idle", {"rank": 3, "device": 3},
     lambda c: [f"Rank 3, GPU 3: The GPU is idle **{percent(c.analysis.rank(3).findings.idle.devices[3].idle_pct)}**"]),
    # communication asked of every rank: each rank's collective time, most first
    ("D", "What is the total communication time across all ranks?", "communication", {},
     lambda c: [f"**Rank {most_comm(c).rank} spends the most time in communication: "
                f"{duration(most_comm(c).findings.comm.comm_us)}**",
                *[f"- rank {r.rank}: {duration(r.findings.comm.comm_us)} ({percent(r.findings.comm.share_pct)} of its "
                  f"device time), {duration(r.findings.comm.exposed_us)} of it" for r in c.analysis.ranks]]),
    # the ranks ranked by communication, not the straggler; of one kind of collective where it is named
    ("D", "Which rank communicates the most?", "communication", {},
     lambda c: [f"**Rank {most_comm(c).rank} spends the most time in communication: "
                f"{duration(most_comm(c).findings.comm.comm_us)}** ({percent(most_comm(c).findings.comm.share_pct)} "
                "of its device time)"]),
    ("D", "Which rank spends the most time in all-reduce?", "communication", {},
     lambda c: [f"**Rank {most_comm(c, 'all_reduce')[0]} spends the most time in all-reduce: "
                f"{duration(most_comm(c, 'all_reduce')[1])}**"]),
    # a training phase named: its time first; the two weighed: the backward over the forward first
    ("R", "What is the optimizer time?", "detector:training_phases", {},
     lambda c: [f"**Optimizer: {duration(phase(c, 'optimizer').time_us)}, {percent(phase(c, 'optimizer').share_pct)} of "
                f"device time** ({counted(phase(c, 'optimizer').ops, 'device op')}", "**Forward, backward and optimizer.**"]),
    ("R", "What's the backward to forward ratio?", "detector:training_phases", {},
     lambda c: [f"**The backward takes {focus(c).results['training_phases'].backward_per_forward_x:g}× the forward**"]),
    # "converge" is no convolution; a class of work asked "efficient" is the math's rate (or why the trace cannot say)
    ("S", "Does the step time converge after warm-up?", "steps", {}, lambda c: ["The trace records one step"]),
    ("S", "Is the KV cache read efficiently?", "mfu", {}, lambda c: ["**The trace cannot say:**"]),
    ("R", "How efficient are the convolutions?", "mfu", {}, lambda c: ["**MFU "]),
    # attention and the MLP where no module type has those names: the classes of work, replayed faster
    ("S", "Is attention or MLP the bottleneck in decode?", "bound", {},
     lambda c: ["With matmul (GEMM) and attention kernels 2× faster",
                f"attention {percent(work_class(c, 'attention').share_pct)}"]),
    # the collectives' bandwidth judged against the links' peak (the collectives detector's figures; near it from 60%)
    ("A", "Is the all-reduce bandwidth good?", "interconnect", {},
     lambda c: [busbw_judged(c), f"({rate(collectives(c).busbw_gbps)} bus bandwidth over {collectives(c).calls} "
                f"collectives, {percent(collectives(c).peak_pct)} of the links' peak"]),
    # whether the link is used to the full: the same judgement, asked in other words
    ("A", "Is the network saturated?", "interconnect", {},
     lambda c: [busbw_judged(c), f"{percent(collectives(c).peak_pct)} of the links' peak"]),
    ("A", "Are the all-reduces at the link's peak?", "communication", {},
     lambda c: [busbw_judged(c), f"{percent(collectives(c).peak_pct)} of the links' peak"]),
    # the time of a thing nothing in the trace is named: said so, with how to make it appear
    ("R", "How much time is spent in the sampler?", None, {},
     lambda c: ["Nothing in this trace is named `sampler`", "record_function('sampler')"]),
    ("R", "How long does the tokenizer take?", None, {}, lambda c: ["Nothing in this trace is named `tokenizer`"]),
    # copies "between GPUs" are peer-to-peer ones; a model "too small for the GPU" is what a too-small batch looks like
    ("N", "Is there any memory copy between GPUs?", "copies", {},
     lambda c: ["**No peer-to-peer (PtoP) copies** in this scope." if "PtoP" not in focus(c).findings.memcpy.by_kind
                else "**PtoP (peer-to-peer): "]),
    ("N", "Is the model too small for this GPU?", "batch_size", {}, lambda c: ["The trace does not record the batch size"]),
    # the room a larger batch needs: the peak against the GPU's memory (the memory detector's figures)
    ("Q", "Will a bigger batch fit in memory?", "batch_size", {},
     lambda c: [f"- memory: at its peak the allocator holds {gpu_memory(c).peak_share_pct:.1f}% of GPU "
                f"{gpu_memory(c).device}'s {size(gpu_memory(c).total_bytes)}"]),
    # two runs: the speedup leads with the step time; what to do next is the second run's own answer
    ("C", "What is the speedup?", "compare", {},
     lambda c: [f"**{percent(abs(diff(c.analysis, c.other).slower_pct))} faster:** step time (mean) "
                f"{duration(c.analysis.focus.findings.steps.step_time_us)} → "
                f"{duration(c.other.focus.findings.steps.step_time_us)}."]),
    # the typical gap: the mean from the idle totals (idle over gaps), the median of the gap table's lengths
    ("R", "What is the average gap between kernels?", "gaps", {},
     lambda c: [f"**A gap lasts {duration(idle(c).idle_us / idle(c).gaps)} on average, "
                f"{duration(float(focus(c).gaps['dur'].median()) / 1000)} at the median** ({idle(c).gaps} gaps"]),
    # the host and the device weighed: which one, not a yes or a no
    *[(key, "Is the host or the device the bottleneck?", "bound", {},
       lambda c: ["**The host (CPU).**" if {focus(c).verdict.limiter, focus(c).verdict.root_cause} & BOUNDS["host"].means
                  else "**The GPU, not the host.**"]) for key in ("Q", "R")],
    # the link asked as the limiter, in its own words: yes or no by the verdict (communication's limiters and causes)
    *[(key, question, "bound", {},
       lambda c: ["**Yes.**" if {focus(c).verdict.limiter, focus(c).verdict.root_cause} & BOUNDS["communication"].means
                  else "**No.**", "communication"])
      for key, question in (("N", "Is the network the bottleneck?"), ("A", "Is NVLink limiting us?"),
                            ("N", "Is the interconnect holding us back?"))],
    # the kernels launched most often: ranked by their count (expected: counted by name from the trace's rows)
    ("Q", "Which kernels are launched the most?", "kernels", {},
     lambda c: ["Launched most often:\n1. ", f"{most_launched_count(c)} launches"]),
    # which ops to fuse: the classes fusing shortens, not a yes
    ("Q", "Which operator should I fuse?", "compile", {},
     lambda c: [f"**Fusing shortens the kernels memory-bound by nature:** elementwise "
                f"{percent(work_class(c, 'elementwise').share_pct)} of device time"]),
    ("Q", "What is the GPU utilization per step?", "steps", {}, lambda c: ["**Idle by step**"]),
    # an AMD GPU's kernels are profiled with ROCm Compute Profiler (Nsight Compute does not run there)
    ("S", "What should I profile next?", "profile_next", {},
     lambda c: [f"2. The hot kernel, with ROCm Compute Profiler: `rocprof-compute profile -n hot_kernel -k "
                f"{top_kernel(c).short_name!r} -- python train.py`."]),
    # one step recorded: steps compared ("how variable?", "is the first slower?") are said to need more
    ("B", "How variable are the step times?", "steps", {},
     lambda c: [f"1 step (step {focus(c).findings.steps.slowest}): **{duration(focus(c).findings.steps.mean_us)}**.",
                "The trace records one step, so there is nothing to weigh it against"]),
    ("B", "Is the first step slower than the rest?", "one_step", {},
     lambda c: [f"step {focus(c).findings.steps.slowest}: {duration(focus(c).findings.steps.mean_us)} on the host, ",
                "The trace records one step"]),
    # data loading asked per step: each step's own wait for it (the gaps each step owns)
    ("R", "How much time does the data loader take per step?", "dataloader", {},
     lambda c: ["**Waiting for data loading by step**"] + [
         f"- step {r.step}: {duration(w) if (w := r.idle_by_cause_us.get('dataloader', 0)) else 'none'} of a "
         f"{duration(r.host_us)} step" for r in focus(c).findings.steps.steps]),
    ("R", "What fraction of the step is spent in the backward pass?", "detector:training_phases", {},
     lambda c: [f"**Backward: {duration(phase(c, 'backward').time_us)}, {percent(phase(c, 'backward').share_pct)} of "
                "device time**"]),
    # an op on the host asked: host time by op (C++'s operator() in kernels' names names no kernel here)
    ("R", "What is the longest running operator on the CPU?", "detector:host_ops", {},
     lambda c: ["On the host, by self time", f"`{focus(c).results['host_ops'].top[0].name}`"]),
    ("R", "What is the slowest op on the host?", "detector:host_ops", {}, lambda c: ["On the host, by self time"]),
    # what no profiler trace records: said so, where to read it, and what the trace does say
    ("R", "How many parameters does the model have?", "not_recorded", {},
     lambda c: ["**The trace does not record the model's parameter count**", "p.numel()",
                f"**What this trace does say:** {focus(c).verdict.headline}."]),
    ("R", "Is the loss going down?", "not_recorded", {},
     lambda c: ["**The trace does not record loss or accuracy values**"]),
    # module types named: each one's time first; the slowest asked: the longest mean call, and its longest instance
    ("Q", "What's the time spent in attention vs MLP?", "detector:modules", {},
     lambda c: [f"**`{module(c, 'Qwen2Attention').name}`: {duration(module(c, 'Qwen2Attention').device_us)} of device "
                f"time** ({percent(module(c, 'Qwen2Attention').share_pct)} of the rank's",
                f"**`Qwen2MLP`: {duration(module(c, 'Qwen2MLP').device_us)} of device time**"]),
    ("Q", "Which module is slowest?", "detector:modules", {},
     lambda c: [f"**`{slowest_module(c).name}` has the longest calls: {duration(slowest_module(c).mean_device_us)} of "
                f"device time a call**", f"its longest call is `{slowest_module(c).longest_call}`'s"]),
    # the job's size: the GPUs in the trace, and the ranks its distributed info says the job ran (one rank's trace here)
    ("B", "How many GPUs are used?", "summary", {},
     lambda c: [f"**1 GPU in this trace** (1 rank); the job ran {c.analysis.trace_info().world_size} ranks"]),
    ("N", "How many GPUs are used?", "summary", {},
     lambda c: [f"**{len(busy_by_gpu(c))} GPUs in this trace** (1 rank)."]),
    ("D", "What is the number of GPUs?", "summary", {},
     lambda c: [f"**{sum(len(r.trace.meta.devices) for r in c.analysis.ranks)} GPUs in these traces** "
                f"({len(c.analysis.ranks)} ranks)."]),
    # what the program does: the kind of job, then the trace in short (its verdict); only the kind when that is asked
    ("T", "What is this program doing?", "detector:workload", {},
     lambda c: ["**Workload.**", f"**Verdict:** {focus(c).verdict.headline}."]),
    # the batch size of an inference server: its decode step's tokens, one per request (the phases detector's)
    ("S", "What is the batch size?", "phases", {},
     lambda c: [f"**{decode_phase(c).tokens} requests** in the decode step"]),
    # CUDA graphs asked of a phase: its share of kernel time replayed from them, yes or no first
    ("S", "Are CUDA graphs used for decode?", "phases", {},
     lambda c: [f"**{'Yes' if decode_phase(c).graph_kernel_pct >= 50 else 'No'}:** "
                f"{percent(decode_phase(c).graph_kernel_pct)} of decode's kernel time is replayed from CUDA graphs."]),
    ("P", "Are CUDA graphs used for decode?", "phases", {}, lambda c: ["**This trace has no decode steps:**"]),
    ("S", "Should I increase the batch size?", "batch_size", {}, lambda c: ["The trace does not record the batch size"]),
    # whether a fix worked, asked of one trace: yes where the GPU no longer waits (and no where it still does)
    ("W", "Did using 4 workers fix the data loading?", "dataloader", {},
     lambda c: ["**Yes:** the GPU never waits for data loading in this trace, so faster loading would not shorten a step."]),
    # how to speed up one thing: that thing's answer, not the trace's first fix
    # how much the job waits: the other ranks' waiting first, and the straggler's part of it
    ("D", "How much time is wasted waiting on other ranks?", "straggler", {},
     lambda c: [f"**The other ranks wait {duration(c.analysis.comparison.others_waiting_us)} in the matched collectives**, "
                f"{duration(next(r.caused_waiting_us for r in c.analysis.comparison.ranks if r.rank == straggler(c)))} "
                f"of it for rank {straggler(c)}, the straggler."]),
    # the cost of a host range named by a word of its name: its calls and host time, read here from the host table
    ("R", "How much does zero_grad cost?", "named_range", {"range_name": "zero_grad"},
     lambda c: [f"**`Optimizer.zero_grad#SGD.zero_grad`: {duration(host_time_us(c, 'Optimizer.zero_grad#SGD.zero_grad'))} "
                f"on the host** over {host_calls(c, 'Optimizer.zero_grad#SGD.zero_grad')} calls"]),
    ("R", "How long does zero_grad take?", "named_range", {"range_name": "zero_grad"}, lambda c: ["on the host** over"]),
    ("R", "How much time is spent in the sampler?", None, {}, lambda c: ["Nothing in this trace is named `sampler`"]),
    # a class of work named in one word (batchnorm), the forward's share, what the optimizer does: their detectors
    ("R", "How much time is spent in batchnorm?", "detector:time_by_class", {},
     lambda c: [f"**Normalization: {percent(share(c, 'normalization'))} of device time**"]),
    ("R", "What fraction of the step is forward?", "detector:training_phases", {}, lambda c: ["**Forward: "]),
    ("R", "What is the optimizer doing?", "detector:training_phases", {}, lambda c: ["**Optimizer: "]),
    # how many asked: that many rows, the hottest (or slowest per call) first, as the kernels detector ranks them
    ("R", "What are the top 3 kernels?", "kernels", {},
     lambda c: [f"3. `{shorten(hot_top(c)[2].label, 80)}`", "The hottest:\n1. "]),
    ("R", "What are the three slowest kernels?", "slow_kernel", {}, lambda c: ["\n3. `"]),
    ("A", "Are the messages small?", "communication", {},
     lambda c: [f"**{'Yes' if collectives(c).small_time_pct >= 50 else 'No'}:** {percent(collectives(c).small_time_pct)} "
                f"of the collectives' time is in messages under {size(collectives(c).small_bytes)}"]),
    ("A", "How big are the messages?", "communication", {},
     lambda c: [f"**Message sizes** (median per call): {collectives(c).rows[0].collective} on group "
                f"{collectives(c).rows[0].group} {size(collectives(c).rows[0].median_bytes)}"]),
    # one kind of collective's bandwidth: its rows (each process group), or that it has none; "all-to-all" is a
    # collective, not a copy
    ("A", "What is the all-reduce bandwidth?", "interconnect", {},
     lambda c: [f"**All-reduce on group {r.group} ({r.group_size} ranks): busbw {rate(r.busbw_gbps)}** (best call "
                f"{rate(r.best_busbw_gbps)})" for r in collectives(c).rows if r.collective == "all_reduce"]),
    ("A", "What is the all-gather bandwidth?", "interconnect", {},
     lambda c: ["**No all-gather with a recorded payload** in this scope: its collectives are "
                + ", ".join(sorted({r.collective for r in collectives(c).rows}))]),
    ("D", "What is the all-to-all bandwidth?", "interconnect", {}, lambda c: ["cannot say the collectives' bandwidth"]),
    # collectives a step: the payload calls over the steps, counted from the trace's kernels and steps here
    ("A", "How many collectives per step?", "communication", {},
     lambda c: [f"**{collective_calls(c) / len(focus(c).trace.steps):g} collectives a step** ({collective_calls(c)} calls"]),
    # occupancy where the trace has no estimate (an Nsight export): said so, and where to measure it; Unified Memory
    # faults, which no trace traceagent reads records
    ("T", "What is the SM occupancy?", "detector:grid_fill", {},
     lambda c: ["**This trace records no achieved occupancy**", "traceagent profile --ncu KERNEL"]),
    ("T", "Are there unified memory page faults?", "not_recorded", {},
     lambda c: ["**The trace does not record Unified Memory page faults or migrations**", "--cuda-um-gpu-page-faults=true"]),
    # the runtime API calls asked about as a whole: the host_ops detector's, by host time
    ("T", "Which CUDA API call takes the longest?", "detector:host_ops", {},
     lambda c: ["**Runtime and driver API calls by host time:** "
                f"`{focus(c).results['host_ops'].runtime_calls[0].name}` "
                f"{duration(focus(c).results['host_ops'].runtime_calls[0].self_us)}"]),
    # how often a runtime API runs, or the host waits for the GPU: the calls, counted from the trace's host table
    ("R", "How many times is cudaStreamSynchronize called?", "sync", {},
     lambda c: [f"**`cudaStreamSynchronize`: {host_calls(c, 'cudaStreamSynchronize')} calls, "]),
    ("R", "How many syncs are there per step?", "sync", {},
     lambda c: [f"**{sum(host_calls(c, n) for n in ('cudaStreamSynchronize', 'cudaDeviceSynchronize'))} calls that wait "
                f"for the GPU**", f"`cudaDeviceSynchronize` {host_calls(c, 'cudaDeviceSynchronize')} call"]),
    # the GIL: no lock in a trace; the threads that share it, Python's own time, and how to measure it
    ("R", "Is the GIL a problem?", "detector:host_ops", {},
     lambda c: ["**The trace cannot show the GIL:**",
                f"Here {focus(c).results['host_ops'].threads} threads launch GPU work", "py-spy record --gil"]),
    ("Q", "Could the global interpreter lock slow my training?", "detector:host_ops", {},
     lambda c: ["Here one thread launches GPU work",
                f"Python functions take {duration(focus(c).results['host_ops'].self_by_kind_us['python'])} of their own"]),
    # the roofline by name: each counted op's FLOP per byte against the GPU's ridge point (the flops detector's words)
    ("Q", "What is the arithmetic intensity?", "bound", {},
     lambda c: [roofline(focus(c).findings.flops).strip()]),
    ("Q", "How far from peak am I?", "mfu", {}, lambda c: [f"**MFU {percent(focus(c).findings.flops.mfu_pct)}**"]),
    ("Q", "Is my training efficient?", "summary", {}, lambda c: [f"**Verdict:** {focus(c).verdict.headline}."]),
    # how to reduce one thing: that thing's answer; the step time: the first fix
    ("R", "How can I reduce the step time?", "optimize_first", {},
     lambda c: [f"Start with **{(focus(c).verdict.saving or focus(c).findings.savings[0]).finding}**"]),
    ("R", "How do I reduce idle time?", "idle", {}, lambda c: [f"The GPU is idle **{percent(idle(c).idle_pct)}**"]),
    ("R", "How can I lower the number of kernels?", "launch", {}, lambda c: ["linked to their launch call"]),
    # each rank's kernels side by side: by count where launches are counted, else by time (each rank's own table)
    ("D", "Which rank launches the most kernels?", "kernels", {},
     lambda c: [f"**Rank {max(c.analysis.ranks, key=lambda r: r.findings.kernels.kernels).rank} runs the most kernels: "
                f"{max(r.findings.kernels.kernels for r in c.analysis.ranks)} kernels**"]),
    ("D", "Which rank spends the most time in kernels?", "kernels", {},
     lambda c: [f"**Rank {max(c.analysis.ranks, key=lambda r: r.findings.kernels.total_us).rank} spends the most time in "
                f"kernels: {duration(max(r.findings.kernels.total_us for r in c.analysis.ranks))}**"]),
    ("D", "Which rank waits the most?", "straggler", {}, lambda c: ["Waiting for the last rank, by rank"]),
    # each rank's step time, and the straggler's part in it (it has the shortest step here: the others wait for it)
    ("D", "Which rank has the longest step?", "steps", {},
     lambda c: [f"on rank {max(c.analysis.ranks, key=lambda r: r.findings.steps.mean_us).rank}.",
                f"Rank {straggler(c)} is the straggler (it enters most matched collectives last)"]),
    # pinning asked of the replay: the host copies from pinned memory (copies=pinned), not a kernel named "memory"
    ("W", "What if I pinned memory?", "whatif", {"kernel": None},
     lambda c: [f"**With copies=pinned: step {duration(replayed(c, 'copies=pinned').measured_us)} → "
                f"{duration(replayed(c, 'copies=pinned').predicted_us)}"]),
    # the allocator asked about: its allocations a step, its reserve where the trace records allocator totals
    ("R", "How many allocations per step?", "memory", {},
     lambda c: [f"**Allocations:** GPU 0: {gpu_memory(c).allocations_per_step:g} a step, {gpu_memory(c).allocations} in all."]),
    ("Q", "How much memory is reserved?", "memory", {},
     lambda c: [f"**GPU 0: the caching allocator reserved at most {size(gpu_memory(c).peak_reserved_bytes)}**, its "
                f"tensors at most {size(gpu_memory(c).peak_allocated_bytes)}"]),
    ("R", "How much memory is reserved?", "memory", {}, lambda c: ["**GPU 0: the trace records no allocator totals**"]),
    # the step time's tail: p90 and p99 over the steps' host times, worked out here from the step table
    ("R", "What is the p90 step time?", "steps", {},
     lambda c: [f"**Step time p90 {duration(step_percentile(c, 90))}, p99 {duration(step_percentile(c, 99))}** over "]),
    # a phase the trace lacks, asked of a registered detector: said first, since what follows is the whole trace's
    ("P", "How much time is in attention during decode?", "detector:time_by_class", {},
     lambda c: ["**This trace has no decode steps** (it holds prefill steps only): what follows is about the whole "
                f"trace.\n\n**Attention: {percent(share(c, 'attention'))} of device time**"]),
    # the time in Python: the python functions' own time, from the host_ops detector (none recorded: said so)
    ("B", "How much time is spent in Python?", "detector:host_ops", {},
     lambda c: [f"**Python functions: {duration(focus(c).results['host_ops'].self_by_kind_us['python'])} of their own "
                "time on the host**"]),
    ("R", "How much time is spent in Python?", "detector:host_ops", {},
     lambda c: ["**The trace records no Python functions** (profile with `with_stack=True`)"]),
    # whether the GPU is used at all: its idle (a CPU-only trace: that it has no GPU work); all the SMs: the grids' fill
    ("U", "Is there any GPU work?", "detector:host_ops", {}, lambda c: ["**No GPU work in this trace** (CPU activities only)"]),
    ("R", "Does it use the GPU?", "idle", {}, lambda c: [f"The GPU is idle **{percent(idle(c).idle_pct)}**"]),
    ("R", "Does it use all the SMs?", "detector:grid_fill", {}, lambda c: ["**Grids that cannot fill the GPU.**"]),
    ("W", "How can I speed up data loading?", "dataloader", {},
     lambda c: ["The GPU never waits for data loading in this trace, so faster loading would not shorten a step. "
                f"{focus(c).verdict.headline}."]),
    ("R", "How can I speed up data loading?", "dataloader", {},
     lambda c: [f"The GPU waits for data loading {duration(idle(c).by_cause_us['dataloader'])}"]),
    ("W", "How do I make the copies faster?", "copies", {}, lambda c: ["Pin the memory (`DataLoader(pin_memory=True)`"]),
    ("D", "How can I make the allreduce faster?", "communication", {},
     lambda c: [f"**All-reduce: {kind(c, 'all_reduce').kernels} kernels, {duration(kind(c, 'all_reduce').time_us)}**"]),
    ("W", "What should I optimize first: the dataloader or the kernels?", "optimize_first", {},
     lambda c: [f"Start with **{(focus(c).verdict.saving or focus(c).findings.savings[0]).finding}**"]),
    ("W", "Would more dataloader workers help?", "dataloader", {}, lambda c: ["**No:** the GPU never waits"]),
    # whether graphs helped, asked of a run that replays none: none ran (not whether they would help)
    ("W", "Did CUDA graphs help?", "launch", {}, lambda c: ["**This trace replays no CUDA graphs**"]),
    # overlap asked: the judgement from the exposed share first; the mean message size: the sizes per call
    ("A", "Is NCCL overlapping with compute?", "communication", {},
     lambda c: [f"**{overlap_word(c)}:** {percent(focus(c).findings.comm.exposed_of_comm_pct)} of the collectives' time "
                "runs with no compute beside it."]),
    ("A", "What is the average all-reduce size?", "communication", {},
     lambda c: [f"**Message sizes** (median per call): all_reduce on group {collectives(c).rows[0].group} "
                f"{size(collectives(c).rows[0].median_bytes)}"]),
    # a moment or a stretch named by its time: the step it falls in (found here from the step rows), each GPU's
    # work there (by hand in test_detect) and the host's busiest events
    ("R", "What is happening at 500 ms?", "window", {"window": (499_500.0, 500_500.0)},
     lambda c: [f"**From {duration(499_500.0)} to {duration(500_500.0)}** (from the trace's first event), in step "
                f"{step_at(c, 500_000.0)}:", "- GPU 0: busy ", "The host was busiest in:"]),
    ("R", "What runs between 100 and 200 ms?", "window", {"window": (100_000.0, 200_000.0)},
     lambda c: [f"across steps {step_at(c, 100_000.0)} to {step_at(c, 200_000.0)}"]),
    # the lines of the user's code the GPU idles over (the idle detector's by_line), or why the trace cannot say
    ("R", "Which line of my code makes the GPU wait?", "idle", {},
     lambda c: [f"**`{idle_line(c).python}` leaves the GPU idle the most: {duration(idle_line(c).idle_us)} in "
                f"{counted(idle_line(c).gaps, 'gap')}**, mostly {label(GAP_CAUSES, idle_line(c).cause)}."]),
    ("N", "Which python line causes the most idle time?", "idle", {},
     lambda c: ["**The trace cannot tie the idle time to lines of code:** this trace has no Python frames."]),
    # idle asked of the steps: each step's own idle (the one idle-per-step rule) before the step times
    ("R", "How much idle time is there per step?", "steps", {},
     lambda c: ["**Idle by step**", *[f"- step {r.step}: {duration(r.idle_us)} idle" for r in focus(c).findings.steps.steps],
                f"{focus(c).findings.steps.count} steps: mean"]),
    # how long the trace is: the longest rank's GPU span, the profiled steps, and that it is a window of the run
    ("R", "What is the total training time?", "summary", {},
     lambda c: [f"**The trace records {duration(focus(c).breakdown.total.span_us)} of GPU activity** (first "
                f"to last device activity); it ran {counted(focus(c).findings.steps.count, 'profiled step')} of "
                f"{duration(focus(c).findings.steps.step_time_us)}", "A profile records a window of the run"]),
    ("D", "How long is the trace?", "summary", {},
     lambda c: [f"**The trace records {duration(longest_span(c).breakdown.total.span_us)} of GPU activity** "
                f"(rank {longest_span(c).rank}'s span, the longest of the 8 ranks')"]),
    # which GPU is slower: the one with the most device work (it sets the pace), and the one that idles most
    ("N", "Which GPU is slower?", "most_idle", {},
     lambda c: [f"**Rank 0, GPU {most_work_gpu(c)} has the most device work**", "Every GPU, least idle first:"]),
    # the GPUs' load weighed: their busy time side by side (the breakdown's), the judgement by the 90% rule first
    ("N", "Are the two GPUs balanced?", "most_idle", {},
     lambda c: [f"**{'Yes, roughly' if min(busy_by_gpu(c)) >= 0.9 * max(busy_by_gpu(c)) else 'No'}:** the GPUs' busy "
                f"time ranges from {duration(min(busy_by_gpu(c)))}", f"to {duration(max(busy_by_gpu(c)))}"]),
    ("N", "What does GPU 1 spend its time on?", "idle", {"device": 1},
     lambda c: [f"Rank 0, GPU 1: The GPU is idle **{percent(focus(c).findings.idle.devices[1].idle_pct)}**"]),
    # kernels counted: every kernel (linked to a launch or not), or a step's
    ("T", "How many kernels ran?", "launch", {},
     lambda c: [f"**{counted(focus(c).findings.kernels.kernels, 'kernel')} ran** "
                f"({counted(focus(c).findings.kernels.distinct, 'distinct name')}, "
                f"{duration(focus(c).findings.kernels.total_us)} in all)."]),
    ("R", "How many kernels per step?", "launch", {},
     lambda c: [f"**About {kernels_a_step(c):g} kernels a step** (the mean over its steps of the kernels that start "
                "inside each step's device work)."]),
    # launches counted, by the API named or all, and their latency asked: the figures first
    ("R", "How many cudaLaunchKernel calls are there?", "launch", {},
     lambda c: [f"**{focus(c).findings.launch.by_call['cudaLaunchKernel']} `cudaLaunchKernel` calls** launched kernels"]),
    ("R", "How many kernel launches are there?", "launch", {},
     lambda c: [f"**{sum(focus(c).findings.launch.by_call.values())} launch calls** ran kernels here"]),
    ("R", "What is the average kernel launch latency?", "launch", {},
     lambda c: [f"**Launch-to-start latency: median {duration(focus(c).findings.launch.median_latency_us)}, p90 "
                f"{duration(focus(c).findings.launch.p90_latency_us)}**; the launch call itself takes "
                f"{duration(focus(c).findings.launch.median_launch_us)} (median)."]),
    # a class of work named: its share first; a kind of copy named: there or not, first
    ("Q", "How much time does attention take?", "detector:time_by_class", {},
     lambda c: [f"**Attention: {percent(work_class(c, 'attention').share_pct)} of device time** "
                f"({duration(work_class(c, 'attention').time_us)} in {work_class(c, 'attention').ops} ops",
                "**GPU time by class.**"]),
    ("Q", "How much time do convolutions take?", "detector:time_by_class", {},
     lambda c: ["**No convolution kernels** in this scope."]),
    ("Q", "Are there any copies from host to device?", "copies", {},
     lambda c: ["**No host-to-device (HtoD) copies** in this scope."] if "HtoD" not in focus(c).findings.memcpy.by_kind
     else ["**HtoD (host-to-device): "]),
    ("Q", "How long do D2H copies take?", "copies", {},
     lambda c: [f"**DtoH (device-to-host): {counted(copies_of(c, 'DtoH').count, 'copy', 'copies')}**, "
                f"{size(copies_of(c, 'DtoH').bytes)} in {duration(copies_of(c, 'DtoH').us)}."]),
    # a direction said in words ("copied to the GPU"): that kind of copy first
    ("R", "How much data is copied to the GPU per step?", "copies", {},
     lambda c: [f"**HtoD (host-to-device): {counted(copies_of(c, 'HtoD').count, 'copy', 'copies')}**, "
                f"{size(copies_of(c, 'HtoD').bytes)} in {duration(copies_of(c, 'HtoD').us)}."]),
    ("Q", "What PyTorch version made this trace?", None, {}, lambda c: ["I did not recognize"]),
    # what the host does while the GPU waits: the largest gap of each cause, with the launching thread's events
    ("R", "What does the CPU do while the GPU is idle?", "idle", {},
     lambda c: ["The largest gap of each cause, and what the launching thread was doing in it:",
                f"- waiting for data loading: {duration(largest_gap_of(c, 'dataloader').dur_us)} at "]),
    # what to do, asked tersely: the first thing to fix
    ("R", "next step?", "optimize_first", {}, lambda c: ["Start with **"]),
    ("R", "fix?", "optimize_first", {}, lambda c: ["Start with **"]),
    ("R", "speedup ideas", "optimize_first", {}, lambda c: ["Start with **"]),
    # a bound asked of a phase the trace lacks: said first
    ("P", "Is decode memory-bound?", "bound", {},
     lambda c: ["**This trace has no decode steps** (it holds prefill steps only): what follows is about the whole "
                "trace.", "**No.**"]),
    # tokens in a batch: a server's steps count them; a training loop's trace records no batch
    ("S", "How many tokens are in the batch?", "phases", {}, lambda c: ["tokens"]),
    ("R", "How many tokens are in the batch?", "batch_size", {}, lambda c: ["The trace does not record the batch size"]),
    # a library named: its share of kernel time first, then every library's
    ("R", "What percent of GPU time is spent in cuDNN kernels?", "detector:libraries", {},
     lambda c: [f"**cuDNN / MIOpen: {percent(library(c, 'cudnn').share_pct)}** of the rank's kernel time",
                "**Kernel time by library.**"]),
    ("R", "How much time is spent in triton kernels?", "detector:libraries", {}, lambda c: ["**No Triton kernels:**"]),
    ("Q", "What share of the time is cuBLAS?", "detector:libraries", {},
     lambda c: [f"**cuBLAS / hipBLASLt: {percent(library(c, 'blas').share_pct)}**"]),
    ("N", "Is flash attention used?", "detector:libraries", {},
     lambda c: [f"**FlashAttention / FlashInfer / FMHA: {percent(library(c, 'attention').share_pct)}**"]),
    ("B", "Which libraries do the kernels come from?", "detector:libraries", {},
     lambda c: ["**Kernel time by library.**", f"loaded modules (Triton, other JIT-compiled code or cubins; the name "
                                               f"says no library) {percent(library(c, 'module').share_pct)}"]),
    ("D", "What can't this trace tell me?", "profile_next", {}, lambda c: ["What this trace lacks, and how to record it:"]),
    ("R", "What should I record next time?", "profile_next", {}, lambda c: ["What this trace lacks, and how to record it:"]),
    # more ways of asking, each to the answer that has its figures
    ("T", "What's in this trace?", "summary", {}, lambda c: ["A nsys trace with 1 rank(s)", "**Verdict:**"]),
    ("R", "Where is the time going?", "summary", {}, lambda c: ["**Verdict:**", f"idle {percent(idle(c).idle_pct)}"]),
    ("R", "Is there a warmup effect?", "steps", {}, lambda c: [f"{focus(c).findings.steps.count} steps: mean **"]),
    ("R", "How much time is spent on the CPU?", "detector:host_ops", {}, lambda c: ["On the host, by self time"]),
    ("R", "Which function in my code is slowest?", "detector:host_ops", {}, lambda c: ["On the host, by self time"]),
    ("R", "How close to peak is the GEMM throughput?", "mfu", {}, lambda c: ["of peak"]),
    ("R", "Is non_blocking used?", "copies", {}, lambda c: ["non_blocking=True"]),
    ("R", "Is there fragmentation?", "memory", {}, lambda c: ["**No sign of a memory problem:**"]),
    ("R", "How does the time split between forward and backward?", "detector:training_phases", {},
     lambda c: [f"forward {percent(phase(c, 'forward').share_pct)}"]),
    ("R", "What's the speedup?", "compare", {}, lambda c: ["Only one trace is loaded"]),
    ("N", "Is this compute bound?", "bound", {"limit": "compute"}, lambda c: ["**Yes.**"]),
    # the limiter asked in other words; where the root cause says what the limiter does, it is said once
    ("T", "What is limiting this program?", "bound", {}, lambda c: ["It is limited by **exposed copies**."]),
    ("R", "What's holding back my training?", "bound", {}, lambda c: ["It is limited by **idle time (data loading)**."]),
    ("T", "What does the timeline look like?", "summary", {}, lambda c: ["**Verdict:** Copies take"]),
    ("N", "compute bound or memory bound?", "bound", {"limits": ("memory_bound", "compute")},
     lambda c: ["**Compute**, not memory bandwidth.", f"{percent(classes(c).compute_pct)} of device time is in compute-heavy"]),
    # the GPUs of one rank weighed against each other: each one's idle and busy, the busier first where asked
    ("N", "Which GPU is busier?", "most_idle", {},
     lambda c: [f"**Rank 0, GPU {busiest_gpu(c)}**: busy {percent(focus(c).breakdown.devices[busiest_gpu(c)].busy_pct)}"
                f" of its span", "Every GPU, least idle first:"]),
    ("N", "Is the load balanced between the GPUs?", "most_idle", {},
     lambda c: [f"- rank 0, GPU {d}: idle {percent(idle(c).devices[d].idle_pct)}" for d in (0, 1)]),
    # two GPUs named: every GPU's idle and busy, side by side
    ("N", "Is the work split evenly across the GPUs?", "most_idle", {},
     lambda c: [f"rank 0, GPU {d}: idle {percent(idle(c).devices[d].idle_pct)}" for d in (0, 1)]),
    ("N", "Is GPU 0 slower than GPU 1?", "device_vs_device", {"devices": (0, 1)},
     lambda c: [f"- GPU {d}: idle {percent(gpu_idle_pct(c, d))}" for d in (0, 1)]),
    # how busy a GPU is: that GPU's busy share of its own span first
    ("N", "What's the GPU busy time on GPU 1?", "idle", {"device": 1},
     lambda c: [f"**Rank 0, GPU 1: busy {percent(focus(c).breakdown.devices[1].busy_pct)}** of its span "
                f"({duration(focus(c).breakdown.devices[1].busy_us)} of "]),
    ("R", "What's the GPU utilization?", "idle", {},
     lambda c: [f"**Rank 0, GPU 0: busy {percent(focus(c).breakdown.devices[0].busy_pct)}**"]),
    # the busy share asked in words leads with it too, not with the idle share alone
    ("R", "What fraction of time is the GPU computing?", "idle", {},
     lambda c: [f"**Rank 0, GPU 0: busy {percent(focus(c).breakdown.devices[0].busy_pct)}** of its span"]),
    ("N", "What percentage of the time are the GPUs in use?", "idle", {},
     lambda c: [f"**Rank 0, GPU {d}: busy {percent(focus(c).breakdown.devices[d].busy_pct)}** of its span" for d in (0, 1)]),
    ("N", "Why is GPU 1 idle?", "idle", {"device": 1},
     lambda c: [f"Rank 0, GPU 1: The GPU is idle **{percent(idle(c).devices[1].idle_pct)}**"]),
    ("N", "did it help?", "compare", {},
     lambda c: [("**Yes:** " if diff(c.analysis, c.other).helped else "**No:** "),
                # the two captures hold different work: the answer says so, with the counts diff read
                f"ran {diff(c.analysis, c.other).kernels[0]['after_count']} times after against "
                f"{diff(c.analysis, c.other).kernels[0]['before_count']} before"]),
    ("N", "Did my change make the step faster?", "compare", {}, lambda c: [diff(c.analysis, c.other).headline]),
    ("N", "what changed?", "compare", {}, lambda c: [f"**{diff(c.analysis, c.other).headline}.**"]),
    # one measure asked of two runs: its row of the diff first, yes or no by its direction (worked out here)
    ("N", "Did the idle time go down?", "compare", {},
     lambda c: [f"**{'Yes' if row(c, 'idle').change_points < -1 else 'No'}:** {row(c, 'idle').name} "
                f"{percent(row(c, 'idle').before_pct)} → {percent(row(c, 'idle').after_pct)}, "
                f"{row(c, 'idle').change_points:+.1f} points."]),
    ("C", "Is the GPU busier now?", "compare", {},
     lambda c: [f"**{'Yes' if row(c, 'busy').change_points > 1 else 'No'}:** busy {percent(row(c, 'busy').before_pct)} → "
                f"{percent(row(c, 'busy').after_pct)}"]),
    # a fix named by what it fixed ("the sync fix"): that cause's idle row, yes where it went down past a point of
    # the span (worked out here); the before run's own root cause is the run's answer, which says it
    ("C", "Did the data loading fix work?", "compare", {},  # the before run's root cause: the run's yes, its headline
     lambda c: [f"**{'Yes' if row(c, 'idle: dataloader').change_points < -1 else 'No'}:** idle from data loading: "
                f"{percent(row(c, 'idle: dataloader').before_pct)} → {percent(row(c, 'idle: dataloader').after_pct)}"]),
    ("C", "Did the sync fix help?", "compare", {},
     lambda c: [f"**{'About the same' if abs(row(c, 'idle: sync').change_points) < 1 else 'Yes'}:** idle: sync "
                f"{percent(row(c, 'idle: sync').before_pct)} → {percent(row(c, 'idle: sync').after_pct)}"]),
    ("C", "Did the pinned-memory change help?", "compare", {},
     lambda c: [f"exposed copies {percent(row(c, 'exposed copies').before_pct)} → "
                f"{percent(row(c, 'exposed copies').after_pct)}"]),
    # steadier steps: the spread row, whose words run the other way ("more stable" is less spread); the ResNet run
    # with workers varies more (its standard deviation from the host step table, worked out here)
    ("C", "Is the step time more stable now?", "compare", {},
     lambda c: [f"**{'No' if step_std(c.other) > step_std(c.analysis) else 'Yes'}:** step time spread (standard deviation "
                f"across steps) {duration(step_std(c.analysis))} → {duration(step_std(c.other))}"]),
    # the allocator's peak: 131 kB apart of 2.79 GB is the same (under 1%); the Nsight exports record no memory
    ("C", "Is the new version using less memory?", "compare", {},
     lambda c: [f"**About the same:** peak memory allocated (the most of any GPU) "
                f"{size(peak(c.analysis))} → {size(peak(c.other))}"]),
    ("N", "Is the new version using less memory?", "compare", {}, lambda c: ["**The two traces do not both record memory**"]),
    ("N", "How much faster is the step now?", "compare", {},
     lambda c: [f"**{percent(diff(c.analysis, c.other).slower_pct)} slower:**"]),
    # which kernels got faster: those whose time went down, and only those
    ("N", "Which kernels got faster?", "compare", {},
     lambda c: ["Kernels that got faster, device time per span (before → after), most changed first:\n- "
                f"`{most_changed(c, -1)['label']}`"]),
    ("N", "How much time goes to memcpy?", "copies", {}, lambda c: ["mostly DtoD"]),
    ("N", "Which kernel takes the most time?", "kernels", {}, lambda c: ["flash_fwd_kernel"]),
    # the longest single run, from the kernels' rows here: not the kernel slowest on average
    ("R", "How long is the longest kernel?", "slow_kernel", {},
     lambda c: ["The longest single kernel run is of **`", f"`**: {duration(longest_kernel_us(c))} (mean"]),
    ("S", "What's the max kernel duration?", "slow_kernel", {},
     lambda c: ["The longest single kernel run is of **`", f"`**: {duration(longest_kernel_us(c))} (mean"]),
    ("B", "What is the longest single kernel?", "slow_kernel", {},
     lambda c: ["The longest single kernel run is of **`", f"`**: {duration(longest_kernel_us(c))} (mean"]),
    ("N", "Are there any NCCL collectives?", "communication", {}, lambda c: ["ncclDevKernel_SendRecv"]),
    # two GPUs of the rank side by side, by the breakdown's idle of each over its own span
    ("N", "Why is GPU 1 idle more than GPU 0?", "device_vs_device", {"devices": (1, 0)},
     lambda c: [f"**GPU 1 is idle more than GPU 0:** {percent(gpu_idle_pct(c, 1))} of its span against "
                f"{percent(gpu_idle_pct(c, 0))}", "- GPU 1: idle ", "- GPU 0: idle "]),
    ("N", "Is GPU 1 doing the same as GPU 0?", "device_vs_device", {"devices": (1, 0)}, lambda c: ["- GPU 0: idle "]),
    ("C", "did it help?", "compare", {}, lambda c: ["**Yes:**", "(gone)"]),
    ("C", "is it faster?", "compare", {}, lambda c: ["**Yes:**", diff(c.analysis, c.other).prediction["sentence"]]),
    ("C", "did num_workers fix it?", "compare", {}, lambda c: ["**Yes:**", "(gone)"]),
    ("C", "Is the data loading fixed?", "compare", {}, lambda c: ["**Yes:**", "(gone)"]),
    # one trace: "fixed?" is answered no where the GPU still waits for data
    ("R", "Is the data loading fixed?", "dataloader", {},
     lambda c: [f"**No:** the GPU waits for data loading {duration(idle(c).by_cause_us['dataloader'])}"]),
    ("C", "what changed?", "compare", {}, lambda c: ["step time (mean)"]),
    # two runs loaded: what asks about the change is the comparison's, in whatever words
    ("C", "What got faster?", "compare", {}, lambda c: [diff(c.analysis, c.other).headline]),
    # kernels asked of two runs: the diff's kernel rows, most changed first; an op: its kernels per step in each
    ("C", "Which kernels got slower?", "compare", {},
     lambda c: ["Kernels that got slower, device time per step (before → after), most changed first:",
                f"- `{most_changed(c, 1)['label']}`: {duration(most_changed(c, 1)['before_us'])} → "
                f"{duration(most_changed(c, 1)['after_us'])}"]),
    ("C", "Which kernels changed the most?", "compare", {},
     lambda c: [f"- `{most_changed(c)['label']}`: {duration(most_changed(c)['before_us'])} → "
                f"{duration(most_changed(c)['after_us'])}"]),
    ("C", "Did aten::convolution get faster?", "compare", {"op": "aten::convolution"},
     lambda c: [f"took {duration(op_per_step(c.analysis, 'aten::convolution'))} per step before and "
                f"{duration(op_per_step(c.other, 'aten::convolution'))} after"]),
    # the replay predicted 26.8% and 20.1% was measured: more than the 2-point noise and a tenth of the
    # prediction below it, so it promised more than came, and says where the rest went
    ("C", "Was the prediction right?", "compare", {},
     lambda c: ["**It promised more than came:** the before verdict " + diff(c.analysis, c.other).prediction["sentence"],
                f"Part of the gain went to what limits it now: {diff(c.analysis, c.other).new_problems[0]}"]),
    # what grew though the run got faster: the new problems, then the kernels that take longer per step
    ("C", "What got slower?", "compare", {},
     lambda c: ["**The run is not slower**, but these grew:", f"- {diff(c.analysis, c.other).new_problems[0]}",
                f"- kernel `{most_grown(c)['label']}`: {duration(most_grown(c)['before_us'])} → "
                f"{duration(most_grown(c)['after_us'])} per step"]),
    ("C", "Did the idle time go down?", "compare", {}, lambda c: ["- idle: "]),
    # how things stand now, two runs loaded: the second run's own answer, said to be its
    ("C", "What is the bottleneck now?", "bound", {},
     lambda c: ["**In the second run** (after the change):", f"It is limited by **idle time ({after_cause(c)})**."]),
    ("C", "Is the GPU still idle?", "idle", {},
     lambda c: ["**In the second run** (after the change):",
                f"The GPU is idle **{percent(c.other.focus.results['idle'].idle_pct)}**"]),
    ("C", "What should I do next?", "optimize_first", {},
     lambda c: ["**In the second run** (after the change):", f"**Next step:** {c.other.verdict.next_step}"]),
    ("C", "Is there a new problem?", "compare", {},
     lambda c: ["**The run is not slower**, but these grew:", f"- {diff(c.analysis, c.other).new_problems[0]}"]),
    ("C", "Is it worth keeping the change?", "compare", {}, lambda c: ["**Yes:**"]),
    ("C", "What are the hot kernels?", "kernels", {}, lambda c: [f"1. `{top_kernel(c).label}`"]),
    ("B", "Should I use CUDA graphs?", "launch", {}, lambda c: ["**Yes:**"]),
    # the verdict's own fix replays to little (a wait that does not pace the span): where the verdict points leads
    ("H", "What should I change in my code?", "optimize_first", {},
     lambda c: [f"Start where the verdict points: **{c.analysis.verdict.headline}**.", "Its own fix alone: "]
     if c.analysis.verdict.root_cause == "sync" and replayed_little(c.analysis.verdict.saving,
                                                                    c.analysis.focus.params.verdict) else
     [f"Start with **{c.analysis.verdict.saving.finding}**"]),
    # how it is asked, not advice: whether graphs replay, first (the launch detector's graphs: none here)
    ("B", "Are CUDA graphs used?", "launch", {},
     lambda c: ["**It already uses them:**" if focus(c).findings.graphs.used else
                "**No: this trace replays no CUDA graphs.** Launch overhead "
                + ("does limit it" if c.analysis.verdict.root_cause == "launch_overhead" else "is not what limits it")]),
    ("B", "Are the kernels too small?", "launch", {},
     lambda c: ["**Yes, launch overhead limits it.**",
                f"{percent(focus(c).findings.launch.short_kernel_pct)} of kernels are shorter than their own launch"]),
    # a how-much question gets the figures, led by whether launches limit the trace: not a "yes" to no question
    # compile time asked of: whether the job runs compiled, first
    ("R", "How much time is spent compiling?", "compile", {},
     lambda c: ["**It does not run compiled now:**", "**Compiling would not answer what limits this trace first.**"]),
    ("B", "How long do launches take?", "launch", {},
     lambda c: ["**Launch overhead limits this trace.**",
                f"linked to their launch call: the call takes {duration(focus(c).findings.launch.median_launch_us)} (median)"]),
    ("B", "Which annotation ranges take the most GPU time?", "annotations", {}, lambda c: ["execute_context_1"]),
    ("B", "Is memory a problem?", "memory", {}, lambda c: ["profile_memory=True"]),
    ("R", "Is memory a problem?", "memory", {}, lambda c: ["**No sign of a memory problem:**", "per step"]),
    # what fixing a cause would save: the one named, else the verdict's, with the others after it
    ("R", "How much would fixing the top cause save?", "saving", {},
     lambda c: [f"**{c.analysis.verdict.saving.sentence}**", "upper bounds", "traceagent diff"]),
    ("R", "how much would removing the syncs save?", "saving", {},
     lambda c: [f"**{next(s for s in c.analysis.focus.findings.savings if s.root_cause == 'sync').sentence}**"]),
    ("G", "Would CUDA graphs help?", "launch", {},
     lambda c: [f"**It already uses them:** {focus(c).findings.graphs.launches} graph replays"]),
    ("G", "How much time is outside the graphs?", "launch", {},
     lambda c: [f"**It already uses them:** {focus(c).findings.graphs.launches} graph replays"]),
    ("D", "How much does data parallelism cost?", "communication", {},
     lambda c: [f"**{percent(focus(c).findings.comm.exposed_of_comm_pct)}**"]),
    ("S", "What is the latency per token?", "phases", {}, lambda c: ["include queueing and batching"]),
    ("S", "Is the scheduler overhead significant?", "idle", {},
     idle_lead),
    ("N", "Which NVTX range takes the most GPU time?", "annotations", {},
     lambda c: [f"1. `{focus(c).findings.annotations.ranges[0].name}`"]),
    ("B", "Why is multimem_all_reduce_kernel slow?", "kernel", {"kernel": "multimem_all_reduce_kernel"},
     lambda c: ["**`multimem_all_reduce_kernel`** ran"]),
    # an op named (not a kernel, and not vLLM's phases): its kernels, from the events at test time
    ("B", "Where is the time going inside vllm::moe_forward?", "op", {"op": "vllm::moe_forward"},
     lambda c: [f"**`vllm::moe_forward`** launched {inside(c, 'vllm::moe_forward').kernels} kernels",
                f"1. `{inside(c, 'vllm::moe_forward').top[0].short_name[:40]}"]),
    # a distinctive part of op names said in words: every op whose name holds it
    ("B", "Where is the time going inside the MoE layer?", "op", {"op": "moe"},
     lambda c: [f"Ops whose name contains **`moe`** launched {inside(c, 'moe').kernels} kernels"]),
    ("B", "How long is a step?", "steps", {}, lambda c: [f"1 step (step {focus(c).findings.steps.slowest})"]),
    ("B", "how long does aten::addmm take?", "op", {"op": "aten::addmm"},
     lambda c: [f"for {duration(inside(c, 'aten::addmm').total_us)} of device time"]),
    # an op around the launching ones (aten::linear around aten::addmm and aten::mm): its kernels at any depth,
    # its calls and host time (op_host), its self time where the host's top ops list it (host_ops)
    ("Q", "How many kernels does aten::linear launch?", "op", {"op": "aten::linear"},
     lambda c: [f"launched {counted(inside(c, 'aten::linear').kernels, 'kernel')}",
                f"took {duration(op_host(focus(c).trace, 'aten::linear').host_us)} on the host"]),
    ("Q", "How much CPU time does aten::linear take?", "op", {"op": "aten::linear"},
     lambda c: [f"took {duration(op_host(focus(c).trace, 'aten::linear').host_us)} on the host"]),
    ("Q", "What is the self time of aten::mm?", "op", {"op": "aten::mm"},
     lambda c: [f"{duration(host_op(c, 'aten::mm').self_us)} of it its own (self time"]),
    ("R", "How long does aten::convolution take?", "op", {"op": "aten::convolution"},
     lambda c: [f"for {duration(inside(c, 'aten::convolution').total_us)} of device time"]),
    ("R", "How much of the step is aten::convolution?", "op", {"op": "aten::convolution"},
     lambda c: [f"for {duration(inside(c, 'aten::convolution').total_us)} of device time"]),
    # an op that launched copies, no kernel: its host time, and its device ops as op_time counts them
    ("R", "What does aten::copy_ do in this trace?", "op", {"op": "aten::copy_"},
     lambda c: ["No kernel in this scope was launched by `aten::copy_`.",
                f"took {duration(op_host(focus(c).trace, 'aten::copy_').host_us)} on the host",
                f"It launched {counted(by_op(c, 'aten::copy_').device_ops, 'device op')} (copies or memsets) for "
                f"{duration(by_op(c, 'aten::copy_').time_us)} of device time"]),
    # an op written as the trace nearly has it: the trace's own (in-place aten::relu_); one it lacks is said to be
    # missing, never answered with a module or kernel that shares a word (Qwen's RMSNorm, SiLU)
    ("R", "How long does aten::relu take?", "op", {"op": "aten::relu_"},
     lambda c: [f"for {duration(inside(c, 'aten::relu_').total_us)} of device time"]),
    ("Q", "How long does aten::convolution take?", None, {}, lambda c: ["This trace has no op `aten::convolution`"]),
    ("Q", "How much time does aten::rms_norm take?", None, {}, lambda c: ["This trace has no op `aten::rms_norm`"]),
    # a module type named (as written, or by its name's end past the model's prefix): its row of the modules detector
    ("Q", "How much time does the MLP take?", "module", {"op": "Qwen2MLP"},
     lambda c: [f"**`Qwen2MLP`: {counted(module(c, 'Qwen2MLP').calls, 'call')}, "
                f"{duration(module(c, 'Qwen2MLP').device_us)} of device time**"]),
    ("Q", "How long does RMSNorm take?", "module", {"op": "Qwen2RMSNorm"},
     lambda c: [f"{duration(module(c, 'Qwen2RMSNorm').device_us)} of device time"]),
    ("Q", "How much time does the decoder layer take?", "module", {"op": "Qwen2DecoderLayer"},
     lambda c: [f"{duration(module(c, 'Qwen2DecoderLayer').mean_device_us)} a call"]),
    ("S", "How much time does the sampler take?", "module", {"op": "Sampler"},
     lambda c: [f"{duration(module(c, 'Sampler').host_us)} on the host"]),
    # a block called by another name: the experts are the MoE layer (FusedMoE), the feed-forward layers the MLP block
    ("B", "How long do the experts take?", "module", {"op": "FusedMoE"},
     lambda c: [f"**`FusedMoE`: {counted(module(c, 'FusedMoE').calls, 'call')}, "
                f"{duration(module(c, 'FusedMoE').device_us)} of device time**"]),
    ("B", "How much time goes to the feed-forward layers?", "module", {"op": "MLPBlock"},
     lambda c: [f"{duration(module(c, 'MLPBlock').device_us)} of device time"]),
    # which expert gets which tokens is the router's, not the trace's (a fused MoE kernel runs them together)
    ("B", "Is there any load imbalance between experts?", "not_recorded", {},
     lambda c: ["**The trace does not record how tokens are routed among the experts", "torch.bincount(topk_ids"]),
    ("B", "Which experts are hot?", "not_recorded", {}, lambda c: ["how tokens are routed among the experts"]),
    # a distinctive word of kernels' names (no kernel, op or module named otherwise): those kernels
    ("S", "How much time does RMSNorm take?", "kernel", {"kernel": "rmsnorm"},
     lambda c: [f"ran {hot(c, 'rmsnorm').count} times for {duration(hot(c, 'rmsnorm').total_us)}"]),
    ("S", "What does rotary embedding cost?", "kernel", {"kernel": "rotary_embedding"},
     lambda c: [f"**`rotary_embedding_kernel`** ran {hot(c, 'rotary_embedding').count} times"]),
    # a phase named beside a comparison, with one trace: the phases; a bottleneck asked of a phase: the bound answer;
    # why the GPU idles in a phase: the idle answer
    ("S", "How much time does prefill take compared to decode?", "phases", {}, lambda c: ["**decode**: 1 step"]),
    ("S", "Is attention the bottleneck during decode?", "bound", {},
     lambda c: [f"With attention kernels 2× faster, the step would take "
                f"{percent(max(replayed(c, 'class:attention=x2').saving_pct, 0))} less time"]),
    ("S", "Why is the GPU idle between decode steps?", "idle", {}, idle_lead),
    ("S", "What limits throughput?", "bound", {},
     lambda c: ["It is limited by **idle time (a stalled device)**", c.analysis.verdict.headline]),
    # what the step's time goes to is the summary's (the limiter and each GPU's busy and idle), not the step list
    ("B", "What's eating my step time?", "summary", {}, lambda c: [c.analysis.verdict.headline]),
    ("R", "Break down the step time.", "summary", {}, lambda c: [c.analysis.verdict.headline]),
    ("R", "Where does my iteration time go?", "summary", {}, lambda c: [c.analysis.verdict.headline]),
    ("R", "What's consuming the most time?", "summary", {}, lambda c: [c.analysis.verdict.headline]),
    # a kind of collective named, singular or plural: that kind's time and exposure (comm.kinds)
    ("D", "How much time is spent in all-to-all?", "communication", {},
     lambda c: [f"**All-to-all: {counted(kind(c, 'all_to_all').kernels, 'kernel')}, "
                f"{duration(kind(c, 'all_to_all').time_us)}**"]),
    ("D", "How much time do the all-to-alls take?", "communication", {},
     lambda c: [f"**All-to-all: {counted(kind(c, 'all_to_all').kernels, 'kernel')}, "
                f"{duration(kind(c, 'all_to_all').time_us)}**"]),
    ("D", "How long do the all to all calls take?", "communication", {},
     lambda c: [f"**All-to-all: {counted(kind(c, 'all_to_all').kernels, 'kernel')}"]),
    # the time between kernels is idle time; the busy share asked in words is the idle answer's
    ("R", "Why are there gaps between kernels?", "idle", {},
     idle_lead),
    ("D", "Why is the GPU idle between kernels?", "idle", {},
     idle_lead),
    ("R", "What percentage of time is the GPU actually computing?", "idle", {},
     idle_lead),
    # a bound asked of a phase is a bound; the KV cache is the attention kernels' work
    ("S", "Is the decode phase compute-bound or memory-bound?", "bound", {"limits": ("memory_bound", "compute")},
     lambda c: [f"{percent(classes(c).compute_pct)} of device time is in compute-heavy"]),
    ("S", "Is the KV cache the bottleneck?", "bound", {},
     lambda c: [f"attention {percent(work_class(c, 'attention').share_pct)}",
                "The KV cache is read and written by the attention kernels"]),
]
# Known gaps: questions an engineer asks that the table's reading does not handle yet.
KNOWN_GAPS = {
    ("R", "Which op allocates the most memory?"),  # allocations are not attributed to the ops that made them
}

ROWS = [pytest.param(*row, id=f"{row[0]}: {row[1]}") for row in TABLE]


def answer(ctx: AnalysisContext, question: str) -> Answer:
    async def run():
        return [e async for e in Session(ctx).ask(question)]
    return asyncio.run(run())[-1]


def test_the_table_is_broad_enough():
    assert len(TABLE) >= 40 and len({row[0] for row in TABLE}) >= 4


@pytest.mark.parametrize("key, question, intent, entities, facts", ROWS)
def test_each_question_is_read_and_answered(key, question, intent, entities, facts):
    ctx = context(key)
    q = understand(question, ctx)
    assert q.intent == intent
    for name, value in entities.items():
        assert getattr(q, name) == value, name
    result = answer(ctx, question)
    for fact in facts(ctx):
        assert fact in result.text, fact
    assert result.unverified == [], "an offline answer states only tool figures"
    assert "no LLM is configured" in result.text


@pytest.mark.parametrize(("question", "listed"), [("What are the top 3 kernels?", 3), ("List the ten hottest kernels", 10),
                                                   ("What are the two slowest kernels per call?", 2),
                                                   ("What are the hot kernels?", 5)])
def test_as_many_kernels_are_listed_as_asked(question, listed):
    assert len(re.findall(r"^\d+\. `", answer(context("R"), question).text, re.M)) == listed


def test_words_that_only_run_into_an_op_name_do_not_name_it():
    ctx = context("D")  # ops nccl:all_to_all and nccl:all_reduce
    for question in ("What is sent to all ranks?", "Is the time the same on all ranks?"):
        assert understand(question, ctx).op is None, question


def test_a_compound_op_name_said_in_words_names_the_op():
    ctx = context("D")
    for question, op in [("How long do the all to all calls take?", "all_to_all"), ("what about all-to-all?", "all_to_all"),
                         ("and the all reduce ops?", "all_reduce")]:
        assert named_op(question, ctx) == op, question


@pytest.mark.parametrize("key, question", sorted(KNOWN_GAPS))
def test_known_gaps_still_get_a_useful_answer(key, question):
    result = answer(context(key), question)
    assert result.text.strip() and result.unverified == []  # an answer from the tools, if not the one asked for


def test_the_readmes_questions_get_what_they_ask():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    asked = re.findall(r'^traceagent ask (\S+) "([^"]+)"(.*)$', readme, re.MULTILINE)
    assert len(asked) >= 5
    for _, question, rest in asked:
        if "--compare" in rest:
            ctx = context("C")
            assert understand(question, ctx).intent == "compare"
            assert diff(ctx.analysis, ctx.other).headline in answer(ctx, question).text
        else:
            assert understand(question, context("D")).intent is not None, question


@pytest.mark.parametrize("question", ["did it help?", "is it faster?", "what changed?", "Is it any better now?",
                                      "Did my change make the step faster?", "did our fix help the step time?",
                                      "is there any improvement?", "how much improvement did we get?"])
def test_compare_phrasings_answer_with_the_comparison(question):
    ctx = context("C")
    assert diff(ctx.analysis, ctx.other).headline in answer(ctx, question).text


@pytest.mark.parametrize("question", CANNED_QUESTIONS)
def test_a_cpu_only_trace_gets_an_answer_to_every_canned_question(question):
    # a trace with no GPU work: "Which GPU is most idle?" once indexed an empty list of GPUs
    result = answer(AnalysisContext(analyzed(CPU_ONLY)), question)
    assert result.text.strip() and result.unverified == []
    if question == "Which GPU is most idle?":
        assert "no GPU activity" in result.text


@pytest.mark.parametrize("question", ["Is the dataloader slow?", "Is data loading fast enough?"])
def test_on_a_trace_with_no_device_work_data_loading_is_neither_yes_nor_no(question):
    """No GPU ran: nothing waited for data, so the answer says that and how to record the GPU, not
    "No: the GPU never waits" about a GPU the trace does not have."""
    analysis = analyzed(CPU_ONLY)
    result = answer(AnalysisContext(analysis), question)
    assert result.text.startswith(f"**There is no GPU work here to wait for data:** {analysis.verdict.headline}.")
    assert analysis.verdict.next_step in result.text and "**No:**" not in result.text and "**Yes:**" not in result.text


def test_the_same_trace_twice_is_no_measurable_change():
    ctx = AnalysisContext(analyzed(RESNET_NW0), analyzed(RESNET_NW0))
    text = answer(ctx, "Did my change make the step faster?").text
    assert text.startswith("**No:** no measurable change (within the 2% run-to-run noise):")


def test_two_ranks_without_collectives_are_compared_by_their_device_work(tmp_path):
    """Rank 0 runs kernels for 300 µs, rank 1 for 100 µs (built here): no collective says who waits,
    so the one with more device work is named, with both busy times."""
    for rank, busy in ((0, 300), (1, 100)):
        b = TraceBuilder(distributedInfo={"rank": rank, "world_size": 2})
        b.kernel("sm90_xmma_gemm_bf16", 10, busy, launch_at=5)
        b.write(tmp_path / f"rank{rank}.json")
    text = offline_answer(analyze(tmp_path), "Why is rank 1 faster than rank 0?")
    assert "**Rank 0 does more device work than rank 1:** busy 300.0 µs against 100.0 µs" in text


def test_on_a_trace_with_no_device_work_the_ops_time_is_the_hosts():
    """'Which op takes the most time?' on a CPU-only trace: host time by op, not GPU time it has none of."""
    analysis = analyzed(CPU_ONLY)
    ctx = AnalysisContext(analysis)
    assert understand("Which op takes the most time?", ctx).intent == "detector:host_ops"
    top = analysis.focus.results["host_ops"].top[0]
    assert f"({top.kind}) {duration(top.self_us)}" in answer(ctx, "Which op takes the most time?").text
    assert understand("Which op takes the most time?", context("R")).intent == "detector:op_time"
    # "what takes the most time?" too, where the trace has only host work; of a GPU trace, the summary
    assert understand("What takes the most time?", ctx).intent == "detector:host_ops"
    assert f"({top.kind}) {duration(top.self_us)}" in answer(ctx, "What takes the most time?").text
    assert understand("What takes the most time?", context("R")).intent == "summary"
    # why it is slow, and what to optimize first: where the host's time goes too, said to be all there is
    for question in ("Why is my training slow?", "What should I optimize first?"):
        assert understand(question, ctx).intent == "detector:host_ops"
        said = answer(ctx, question).text
        assert said.startswith("**No GPU work in this trace** (CPU activities only)")
        assert f"({top.kind}) {duration(top.self_us)}" in said
    assert understand("Why is my training slow?", context("R")).intent == "idle"


def test_what_to_optimize_first_starts_with_the_verdicts_fix_then_the_rest_by_what_each_is_expected_to_save():
    """DLRM's job: the straggler's cost first (the verdict's why and next step follow it), then rank 7's own
    findings by the replay's prediction where there is one, else the bound: its sync, bounded at 28% but
    replayed at 0.1%, no longer comes second."""
    ctx = context("D")
    v = ctx.analysis.verdict
    text = answer(ctx, "What should I change in my code?").text
    assert text.startswith(f"Start with **{v.saving.finding}**") and f"**Next step:** {v.next_step}" in text
    listed = [s for s in ctx.analysis.rank(v.rank).findings.savings if s.sentence in text.split("Then, by")[1]]
    expected = [s.simulated_pct if s.simulated_pct is not None else s.step_pct if s.step_pct is not None else s.pct
                for s in sorted(listed, key=lambda s: text.index(s.sentence))]
    assert len(expected) >= 3 and expected == sorted(expected, reverse=True)
