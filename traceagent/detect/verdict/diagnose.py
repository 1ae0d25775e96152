"""The verdict: which limiter dominates, its root cause, the evidence, a one-sentence
hypothesis, and the next step as something the user can run or change.

The limiter is the largest avoidable loss, each measured as a share of the rank's span (of device
time, the GPUs' spans added up, when the rank has several GPUs):
idle time, exposed communication, exposed copies. If none reaches its threshold the device is
busy computing, and the hot kernels are what to look at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, Required

from typing_extensions import TypedDict  # pydantic reads these (the JSON Schema) on Python < 3.12

from ...format import counted, duration, of_span
from ..core.bounds import Percent, Share, TaggedBy
from ..core.vocabulary import GAP_ROOT, LIMITERS, ROOT_CAUSES, blocking, gap_causes_of
from ..detectors.annotations import AnnotationsResult
from ..detectors.base import Detector, Inputs, Key
from ..detectors.comm import CommResult
from ..detectors.flops import FlopsResult
from ..detectors.graphs import GraphsResult
from ..detectors.grid_fill import GridFillResult
from ..detectors.idle import IdleResult, LaunchBound
from ..detectors.kernels import HotKernel, KernelsResult, short_name
from ..detectors.launch import LaunchResult
from ..detectors.layout import LayoutResult
from ..detectors.memcpy import MemcpyResult
from ..detectors.memory import MemoryResult
from ..detectors.precision import ADVISED_PCT, PrecisionResult, kernel_precision
from ..detectors.steps import StepsResult
from ..detectors.stragglers import RankComparison
from ..detectors.streams import SHARED_FIX
from ..detectors.time_by_class import TimeByClassResult, memory_bound_dominates, memory_kernel_classes
from ..detectors.workload import Workload
from . import advice
from .critical_path import CriticalPathResult
from .savings import Saving, saving_for, straggler_saving


@dataclass(frozen=True)
class VerdictParams:
    idle_pct: Percent = 15.0  # idle share of the span (device time) that makes idle the limiter
    comm_pct: Percent = 10.0  # exposed communication (or waiting for a straggler) share of the span
    memcpy_pct: Percent = 10.0  # exposed copy share of the span
    pageable_share: Share = 0.5  # share of copied bytes from pageable memory that names it the cause
    # a wait whose removal the replay predicts saves under this share of its bound does not pace the step:
    # the verdict points at the host work it exposes first
    replayed_share: Share = 0.25


class SharedStreamEvidence(TypedDict):
    device: int
    stream: int
    collectives: int
    compute_kernels: int


class JobEvidence(TypedDict, total=False):
    """What every verdict's evidence may carry: a job's verdict adds the rank it was drawn from and
    each rank's limiter."""

    rank: int | None
    limiter_by_rank: dict[str, str | None]


class IdleEvidence(JobEvidence, total=False):
    """An idle verdict's: the idle and the gap cause(s) the root cause adds up; a sync's call, op,
    line and the line after it; launch statistics; the host events and line of the largest gap."""

    kind: Required[Literal["idle"]]
    idle_pct: float
    idle_us: float
    span_us: float
    cause: str
    cause_us: float
    cause_pct: float
    cause_gaps: int
    gap_causes: dict[str, float]
    dataloader: str | None  # the DataLoader seen: multi_process, single_process
    sync_call: str
    op: str | None
    python: str | None  # the user's line: of a sync, or of the largest gap's host work
    after: str  # a sync's: the user's line the host worked at once the wait returned
    sync_count: int
    sync_kind: str
    short_kernel_pct: float
    median_kernel_us: float | None
    median_launch_us: float | None
    launch_bound: list[LaunchBound]
    launches_by_call: dict[str, int]
    host_events: list[str]
    queued_us: float  # a device stall's: how long the largest stall's op sat queued on the idle device


class CommunicationEvidence(JobEvidence, total=False):
    """Exposed communication's: collective time, its exposed part, the top collective, and a stream
    collectives share with compute."""

    kind: Required[Literal["communication"]]
    comm_us: float
    comm_share_pct: float
    exposed_us: float
    exposed_pct: float
    exposed_of_comm_pct: float
    top_collective: str | None
    shared_stream: SharedStreamEvidence


class DataMovementEvidence(JobEvidence, total=False):
    """Copies': their share, exposed part, bytes, pageable bytes and bandwidth by kind."""

    kind: Required[Literal["data_movement"]]
    memcpy_share_pct: float
    exposed_pct: float
    exposed_us: float
    bytes: int
    pageable_count: int
    pageable_bytes: int
    by_kind_gbps: dict[str, float | None]
    side_stream_bytes: int


class ComputeEvidence(JobEvidence, total=False):
    """A busy device's: the idle left and the hot kernel."""

    kind: Required[Literal["compute"]]
    idle_pct: float
    kernel: str
    short_name: str
    kernel_share_of_busy_pct: float
    kernel_total_us: float
    kernel_count: int
    # where kernels memory-bound by nature take most of the device (root cause memory_bound_kernels)
    memory_kernels_pct: float  # of device time: elementwise, normalization, reductions, indexing, optimizer
    compute_heavy_pct: float  # of device time: matmul, attention, convolution


class StragglerEvidence(JobEvidence, total=False):
    """Waiting for a straggler's: the rank, what it was doing, how often it came last, and what its
    lateness cost the others."""

    kind: Required[Literal["straggler"]]
    straggler_rank: int | None
    straggler_cause: str
    last_pct: float
    caused_waiting_pct: float
    matched_collectives: int
    others_waiting_us: float
    others_exposed_waiting_pct: float
    lateness_by_cause_us: dict[str, float]
    python: str | None  # the straggler's line before it entered late


class NoEvidence(JobEvidence, total=False):
    """A verdict with no limiter (no device activity) rests on nothing."""

    kind: Required[Literal["none"]]


#: What a verdict rests on: a union tagged by `kind` (its limiter, or the straggler), each key of a
#: kind always meaning the same thing.
Evidence = Annotated[IdleEvidence | CommunicationEvidence | DataMovementEvidence | ComputeEvidence | StragglerEvidence
                     | NoEvidence, TaggedBy("kind")]


@dataclass(frozen=True)
class Verdict:
    limiter: str | None  # a vocabulary.LIMITERS name; None when there is no device activity
    root_cause: str | None  # a vocabulary.ROOT_CAUSES name
    headline: str
    hypothesis: str
    next_step: str
    evidence: Evidence = field(default_factory=lambda: NoEvidence(kind="none"))
    also: list[str] = field(default_factory=list)  # what would sharpen the diagnosis
    other_losses: list[str] = field(default_factory=list)  # losses besides the limiter over their threshold
    rank: int | None = None  # the rank it is about (None: no device activity anywhere)
    saving: Saving | None = None  # what fixing the root cause would save at most

    def hot_kernel(self) -> str | None:
        """The kernel a compute verdict names (None for any other)."""
        return self.evidence.get("kernel") if self.evidence["kind"] == "compute" else None


@dataclass(frozen=True)
class Findings:
    """The detector results a verdict is drawn from (one rank)."""

    idle: IdleResult
    memcpy: MemcpyResult
    comm: CommResult
    kernels: KernelsResult
    launch: LaunchResult
    steps: StepsResult | None
    has_python_frames: bool
    has_device_activity: bool
    ranks: int = 1
    workload: Workload = field(default_factory=lambda: Workload(None, None, 0))
    savings: list[Saving] = field(default_factory=list)  # every finding's, largest first
    flops: FlopsResult | None = None  # from recorded shapes: whether the hot kernel already runs near peak
    memory: MemoryResult | None = None
    graphs: GraphsResult | None = None
    annotations: AnnotationsResult | None = None
    critical_path: CriticalPathResult | None = None
    classes: TimeByClassResult | None = None  # device time by class of work
    precision: PrecisionResult | None = None  # the math kernels' precision: whether fp32 math misses the tensor cores
    grid_fill: GridFillResult | None = None  # whether the hot kernel's grid leaves SMs empty
    layout: LayoutResult | None = None  # the convolutions' layout: time converting channels-first tensors
    amd: bool = False  # AMD GPUs: kernels are profiled with ROCm Compute Profiler, not Nsight Compute

    @classmethod
    def of(cls, results: Mapping[str, Any], has_python_frames: bool, has_device_activity: bool,
           amd: bool = False) -> Findings:
        """The findings among detectors' results by name (registry.run_all); those the verdict does
        not read (throughput, memory, graphs, annotations) may be absent."""
        return cls(idle=results["idle"], memcpy=results["memcpy"], comm=results["comm"], kernels=results["kernels"],
                   launch=results["launch"], steps=results["steps"], has_python_frames=has_python_frames,
                   has_device_activity=has_device_activity, workload=results["workload"], savings=results["savings"],
                   critical_path=results["critical_path"], flops=results.get("flops"), memory=results.get("memory"),
                   graphs=results.get("graphs"), annotations=results.get("annotations"),
                   classes=results.get("time_by_class"), precision=results.get("precision"),
                   grid_fill=results.get("grid_fill"), layout=results.get("layout"), amd=amd)


def no_device_verdict(runtime_calls: int = 0) -> Verdict:
    if runtime_calls:  # a GPU job whose device records are missing, not a CPU-only one
        return Verdict(
            limiter=None, root_cause=None,
            headline=f"No kernel or copy records in this trace ({runtime_calls} CUDA API calls were recorded)",
            hypothesis="The host called the GPU, but the profiler recorded no device activity: CUDA activity was "
                       "not enabled, or the records were lost (a buffer overflow, a killed job).",
            next_step="Profile with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) "
                      "(or nsys profile -t cuda), and let the profiler finish writing before the job exits.",
        )
    return Verdict(
        limiter=None, root_cause=None,
        headline="No device activity: this is a CPU-only trace",
        hypothesis="The profiler recorded no kernels or copies, so there is no GPU time to explain.",
        next_step="Profile with the GPU enabled: torch.profiler.profile(activities=[ProfilerActivity.CPU, "
                  "ProfilerActivity.CUDA]) on a CUDA build of PyTorch, and check torch.cuda.is_available().",
    )


def diagnose(f: Findings, params: VerdictParams = VerdictParams()) -> Verdict:
    """The limiter and root cause for one rank's findings."""
    if not f.has_device_activity:
        return no_device_verdict(f.workload.runtime_calls)
    idle, copies, comm = f.idle, f.memcpy, f.comm
    losses = {
        "idle": (idle.idle_pct, params.idle_pct),
        "communication": (comm.exposed_pct, params.comm_pct),
        "data_movement": (copies.exposed_pct, params.memcpy_pct),
    }
    over = {k: v for k, (v, threshold) in losses.items() if v >= threshold}
    limiter = max(over, key=over.__getitem__) if over else "compute"
    also = _missing(f)
    verdict = _verdict_for(limiter, f, params, also)
    # every other loss over its threshold, with its own cause and next step: on a DDP rank idle
    # can edge out exposed communication, and both need fixing
    others = []
    for k in sorted(over, key=over.__getitem__, reverse=True):
        if k != limiter:
            other = _verdict_for(k, f, params, also)
            cause = ROOT_CAUSES[other.root_cause].label if other.root_cause else "an unknown cause"
            what = LIMITERS[k].label
            source = "" if cause.lower() == what.lower() else f", from {cause}"  # not "communication, from communication"
            others.append(f"{what.capitalize()} also costs {over[k]:.1f}% {_of(f)}{source}: {other.next_step}")
    if (plain := _plain_core_math(f)) and TENSOR_CORE_STEP not in verdict.next_step:
        others.append(plain)
    if converting := _layout_conversions(f):
        others.append(converting)
    kernel = verdict.evidence.get("kernel") if verdict.evidence["kind"] == "compute" else None
    saving = saving_for(f.savings, verdict.root_cause, kernel) if verdict.root_cause else None
    return replace(verdict, other_losses=others, saving=saving)


def _plain_core_math(f: Findings) -> str | None:
    """fp32 math on the plain cores as a loss beside the limiter, where it takes a tenth of the
    device time or more: whatever limits the rank first, autocast or TF32 is a change to make."""
    p = f.precision
    share = p.math_pct * p.plain_core_pct / 100 if p is not None and p.advice else 0.0
    if p is None or share < PLAIN_CORE_LOSS_PCT:
        return None
    return (f"fp32 math off the tensor cores also takes {share:.1f}% of the rank's device time (matmul, attention and "
            f"convolution kernels, led by {', '.join(p.plain_core_kernels[:2])}): {p.advice}; "
            "`traceagent whatif TRACE --change amp` predicts what it buys.")


def _layout_conversions(f: Findings) -> str | None:
    """Kernels converting the convolutions' tensors between layouts, as a loss beside the limiter
    where they take LAYOUT_LOSS_PCT of the device time or more: all of it goes with channels_last."""
    layout = f.layout
    if layout is None or not layout.advice or layout.conversion_pct < LAYOUT_LOSS_PCT:
        return None
    return (f"Layout conversions also take {layout.conversion_pct:.1f}% of the rank's device time ({layout.conversions} "
            f"kernels converting the convolutions' tensors between channels-first and channels-last, led by "
            f"{', '.join(layout.conversion_kernels[:2])}): convert the model and its inputs to channels-last "
            "(`.to(memory_format=torch.channels_last)`) and they go.")


def _verdict_for(limiter: str, f: Findings, params: VerdictParams, also: list[str]) -> Verdict:
    if limiter == "idle":
        return _idle_verdict(f, params, also)
    if limiter == "communication":
        return _comm_verdict(f, also)
    if limiter == "data_movement":
        return _copy_verdict(f, params, also)
    return _compute_verdict(f, also)


def _of(f: Findings) -> str:
    return of_span(len(f.idle.devices))


def _busy(f: Findings) -> str:
    busy = 100 - f.idle.idle_pct
    if len(f.idle.devices) <= 1:
        return f"The GPU is busy {busy:.1f}% of the time"
    return f"The GPUs are busy {busy:.1f}% {_of(f)}"


def _missing(f: Findings) -> list[str]:
    also = []
    if not f.has_python_frames:
        also.append(f"The trace has no Python frames: re-profile with `{advice.profile_line()}` (it records them) "
                    "to see the line behind each stall.")
    if f.steps is None:
        also.append("The trace has no steps: use a torch.profiler schedule and call prof.step() each iteration "
                    "(or mark iterations with NVTX ranges) to compare steps.")
    return also


def _top_idle_root(idle: IdleResult) -> tuple[str, list[str]]:
    """The root cause whose gap causes add up to the most idle time (launch overhead and launch
    latency are one root cause, as the savings count them), and those gap causes, largest first."""
    by_root: dict[str, float] = {}
    for cause, value in idle.by_cause_us.items():
        by_root[GAP_ROOT[cause]] = by_root.get(GAP_ROOT[cause], 0.0) + value
    root = max(by_root, key=by_root.__getitem__)
    causes = sorted((c for c in gap_causes_of(root) if c in idle.by_cause_us), key=lambda c: -idle.by_cause_us[c])
    return root, causes


def _idle_verdict(f: Findings, params: VerdictParams, also: list[str]) -> Verdict:
    idle = f.idle
    root, causes = _top_idle_root(idle)
    cause = causes[0]
    cause_us = round(sum(idle.by_cause_us[c] for c in causes), 3)
    cause_pct = round(sum(idle.cause_pct(c) for c in causes), 2)
    evidence = IdleEvidence(kind="idle", idle_pct=idle.idle_pct, idle_us=idle.idle_us, span_us=idle.span_us, cause=cause,
                            cause_us=cause_us, cause_pct=cause_pct,
                            cause_gaps=sum(idle.by_cause_count.get(c, 0) for c in causes))
    if len(causes) > 1:  # which gap causes the root cause's share adds up
        evidence["gap_causes"] = {c: idle.cause_pct(c) for c in causes}
    head = (f"GPU idle {idle.idle_pct:.1f}% of the time" if len(idle.devices) <= 1
            else f"GPUs idle {idle.idle_pct:.1f}% {_of(f)}")
    if root == "dataloader":
        evidence["dataloader"] = f.workload.dataloader
        hypothesis, step = advice.dataloader(f.workload)
        return Verdict("idle", root, f"{head}, mostly waiting for data loading ({cause_pct:.1f}% {_of(f)})",
                       hypothesis, step, evidence, also)
    if root == "sync":
        site = idle.sync_sites[0] if idle.sync_sites else None
        where = ""
        if site:
            where = f" {site.call}" + (f" under {site.op}" if site.op else "") + (f" at {site.python}" if site.python else "")
            evidence.update({"sync_call": site.call, "op": site.op, "python": site.python, "sync_count": site.count})
            if site.after:  # the host work the wait exposed: the second place to look
                where += f", then works at {site.after} before it queues more"
                evidence["after"] = site.after
        kind = blocking(site.call if site else None)  # the fix depends on what blocked: a read-back, the allocator…
        evidence["sync_kind"] = kind.kind
        at_line = f" at {site.python}" if site and site.python else ""
        hypothesis = (f"The host blocks on the GPU{where} ({kind.label}), so it cannot queue work ahead and the GPU "
                      "drains while the host catches up.")
        step = f"Remove the wait{at_line}: {kind.fix}."
        replayed = replayed_little(saving_for(f.savings, "sync"), params)
        if replayed is not None:  # the host's own work between the waits is as long as the step: it paces the GPU
            saving, simulated = replayed
            host_work = f" at {site.after}" if site and site.after else " between the waits"
            whole = "step" if saving.step_pct is not None else "span"
            shorter = f"only {simulated:.1f}% shorter" if simulated >= 0.05 else "no shorter"
            hypothesis = (f"The host blocks on the GPU{where} ({kind.label}), but the wait does not set the pace: "
                          f"replayed without the waits (`sync=0`) the {whole} is {shorter} (the bound is "
                          f"{saving.bound}), because the host's own work{host_work} takes about as long as the "
                          f"{whole}. The GPU idles for the host, not for the wait.")
            step = (f"Cut the host's work{host_work} first (`py-spy record -o host.svg -- python train.py` shows where "
                    "its time goes): do it less often, off the thread that launches GPU work, or cheaper; where it is "
                    "per-op Python overhead, fewer and larger launches (torch.compile, CUDA graphs) cut it. Then "
                    f"remove the wait{at_line} ({kind.fix}), so that what remains of the host's work overlaps the "
                    "GPU's.")
        elif site and site.after:
            step += (f" The host work at {site.after} that follows it shows only because of the wait: once the "
                     "value stays on the device, that work overlaps the GPU's.")
        if kind.tries:  # a setting may do it: measured against the run as it is, with no code edit
            step += f" Try it with no code change: `{advice.profile_line('--try', kind.tries)}`."
        if not f.has_python_frames:
            step += f" Re-profile with `{advice.profile_line()}` (Python frames on) to get the line."
        return Verdict("idle", root, f"{head}, mostly after host synchronizations ({cause_pct:.1f}% {_of(f)})",
                       hypothesis, step, evidence, also)
    if root == "launch_overhead":
        launch = f.launch
        evidence.update({"short_kernel_pct": launch.short_kernel_pct, "median_kernel_us": launch.median_kernel_us,
                         "median_launch_us": launch.median_launch_us, "launch_bound": idle.launch_bound,
                         "launches_by_call": launch.by_call})
        hypothesis, step = advice.launch_bound(idle, launch)
        named: dict[tuple[str, ...], str] = {("launch_overhead",): "launch-bound gaps",
                                             ("launch_latency",): "launch latency"}
        gaps = named.get(tuple(causes), "launch-bound gaps and launch latency")
        why = ("in short gaps between kernels, with no launch calls in the trace to show why" if not launch.kernels
               else "the host cannot launch kernels fast enough")
        return Verdict("idle", root, f"{head}: {why} ({cause_pct:.1f}% {_of(f)} in {gaps})",
                       hypothesis, step, evidence, also)
    if root == "device_stall":
        return _stall_verdict(f, head, cause_pct, evidence, also)
    top = idle.top_gaps[0] if idle.top_gaps else None
    hosts = [h["name"] for h in (top.evidence.get("host", []) if top else [])][:3]
    user = top.evidence.get("python") if top else None  # the innermost frame of the user's own code
    if hosts:
        evidence["host_events"] = hosts
    step = ("Profile the host side: `py-spy record -o host.svg -- python train.py`, or re-profile with "
            f"`{advice.profile_line()}` (Python frames on) and look at the frames over the largest gaps.")
    if user:  # the user's line first, the library frame under it as context
        evidence["python"] = user
        inside = f", inside {hosts[0]}" if hosts and hosts[0] != user else ""
        what = f" (in the largest gap: {user}{inside})"
        step = (f"Start at {user}: it holds the launching thread over the largest gap. Move that work off the "
                "thread that launches GPU work (into DataLoader workers or a background thread), do it once before "
                "the loop, or make it cheaper; `py-spy record -o host.svg -- python train.py` shows where its time "
                "goes.")
    else:
        what = f" (in the largest gap: {', '.join(hosts)})" if hosts else ""
    return Verdict("idle", "host_other", f"{head}, while the host does other work ({cause_pct:.1f}% {_of(f)})",
                   f"The host spends the gaps in its own work{what} rather than in launching device work.", step,
                   evidence, also)


def replayed_little(saving: Saving | None, params: VerdictParams) -> tuple[Saving, float] | None:
    """The saving and its replayed share where the replay of its fix predicts under `replayed_share`
    of its bound (what the bound counts is real, but something else paces the step once it is
    gone); None otherwise, or where nothing was replayed."""
    if saving is None or saving.simulated_pct is None:
        return None
    return (saving, saving.simulated_pct) if saving.simulated_pct < params.replayed_share * saving.bound_pct else None


def _comm_verdict(f: Findings, also: list[str]) -> Verdict:
    comm = f.comm
    evidence = CommunicationEvidence(kind="communication", comm_us=comm.comm_us, comm_share_pct=comm.share_pct,
                                     exposed_us=comm.exposed_us,
                                     exposed_pct=comm.exposed_pct, exposed_of_comm_pct=comm.exposed_of_comm_pct,
                                     top_collective=comm.top[0]["name"] if comm.top else None)
    if comm.shared_streams:  # overlap is impossible where they take turns on one stream: say that first
        s = comm.shared_streams[0]
        evidence["shared_stream"] = SharedStreamEvidence(device=s.device, stream=s.stream, collectives=s.collectives,
                                                         compute_kernels=s.compute_kernels)
        return Verdict("communication", "communication",
                       f"Communication is exposed for {comm.exposed_pct:.1f}% {_of(f)}: GPU {s.device} stream "
                       f"{s.stream} runs both collectives and compute, so they cannot overlap",
                       f"Collectives and compute kernels take turns on GPU {s.device} stream {s.stream}: kernels on one "
                       "stream run in order, so no compute can hide that communication, however the code is written.",
                       f"Put the collectives on a stream of their own: {SHARED_FIX}.", evidence, also)
    return Verdict("communication", "communication",
                   f"Communication is exposed for {comm.exposed_pct:.1f}% {_of(f)} "
                   f"({comm.exposed_of_comm_pct:.0f}% of collective time is not hidden by compute)",
                   "Collectives run while no compute kernel does, so the GPU waits on the network (or on a slower "
                   "rank) instead of overlapping the two.",
                   "Overlap communication with compute (DDP bucket_cap_mb, FSDP forward/backward prefetch, "
                   "no_sync() with gradient accumulation), compare ranks for a straggler (`traceagent analyze` on "
                   "the rank directory), and check the transport with NCCL_DEBUG=INFO.",
                   evidence, also)


def _copy_verdict(f: Findings, params: VerdictParams, also: list[str]) -> Verdict:
    copies = f.memcpy
    evidence = DataMovementEvidence(kind="data_movement", memcpy_share_pct=copies.share_pct,
                                    exposed_pct=copies.exposed_pct, exposed_us=copies.exposed_us,
                                    bytes=copies.bytes, pageable_count=copies.pageable_count,
                                    pageable_bytes=copies.pageable_bytes,
                                    by_kind_gbps={k: v.gbps for k, v in copies.by_kind.items()})
    evidence["side_stream_bytes"] = copies.side_stream_bytes
    if copies.bytes and copies.pageable_bytes / copies.bytes >= params.pageable_share:
        hypothesis, step = advice.pageable_copies(copies)
        return Verdict("data_movement", "pageable_memcpy",
                       f"Copies take {copies.exposed_pct:.1f}% {_of(f)} with no compute beside them, "
                       f"mostly from pageable host memory ({copies.pageable_count} copies)",
                       hypothesis, step, evidence, also)
    hypothesis, step = advice.exposed_copies(copies)
    return Verdict("data_movement", "memcpy", f"Copies take {copies.exposed_pct:.1f}% {_of(f)} with no compute beside them",
                   hypothesis, step, evidence, also)


def _stall_verdict(f: Findings, head: str, cause_pct: float, evidence: IdleEvidence, also: list[str]) -> Verdict:
    """The device had work queued and ran nothing: what the trace can say is which op waited and
    how long; why is outside it."""
    stall = next((g for g in f.idle.top_gaps if g.cause == "device_stall"), None)
    what = ""
    if stall is not None and (op := stall.evidence.get("queued_op")):
        queued = stall.evidence.get("queued_us") or 0.0
        evidence.update({"op": op, "queued_us": queued})
        held = "all of it" if queued >= stall.dur_us else f"{duration(queued)} of it"
        what = (f": in the largest such gap ({duration(stall.dur_us)} on GPU {stall.device}), {short_name(op)} had "
                f"been launched and sat queued for {held}")
    return Verdict("idle", "device_stall",
                   f"{head}, with work queued that the device did not start ({cause_pct:.1f}% {_of(f)})",
                   f"The host had already launched the next work, yet the trace shows the GPU running nothing{what}. "
                   "What held it is outside the trace: device work the trace does not hold (a sampled or filtered "
                   "trace, events the profiler dropped), another process on the GPU, the driver or runtime (a JIT "
                   "compile, memory mapping), or a wait on another device. The host's work is not what to speed up.",
                   "Check that the trace is whole (the profiler's warnings about dropped events; no filtering or "
                   "sampling), then what else runs on the GPU during the job (`nvidia-smi` or `rocm-smi` while it "
                   "runs; `nsys profile` records every process); profile more steps: a stall in one step only (a "
                   "warm-up, a JIT compile, a first allocation) may not recur.", evidence, also)


def _compute_verdict(f: Findings, also: list[str]) -> Verdict:
    kernels = f.kernels
    top = kernels.top[0] if kernels.top else None
    evidence = ComputeEvidence(kind="compute", idle_pct=f.idle.idle_pct)
    if top is None:
        return Verdict("compute", "hot_kernel", "The device is busy, but the trace names no kernels", "", "", evidence, also)
    evidence |= ComputeEvidence(kind="compute", kernel=top.name, short_name=top.short_name,
                                kernel_share_of_busy_pct=top.share_of_busy_pct, kernel_total_us=top.total_us,
                                kernel_count=top.count)
    if f.classes is not None and memory_bound_dominates(f.classes):
        return _memory_bound_verdict(f, f.classes, top, evidence, also)
    hypothesis = (f"Time goes into kernel execution, led by {top.label} ({counted(top.count, 'launch', 'launches')}"
                  + (f", from {top.op}" if top.op else "") + "); speeding it up is the largest single gain.")
    said = kernel_precision(top.name)
    dtype = (f". It runs in {said[0]} on tensor cores already (its name says so): look at its shape and how full it "
             "keeps them" if said and said[1] == 1 and said[0] != "unknown" else
             ", and check it runs in a fast dtype (bf16/TF32) and shape")
    profiler, profiler_name = advice.kernel_profiler(top.short_name, f.amd)
    step = (f"Profile that kernel: `{profiler}` ({profiler_name} on it" + ("" if f.amd else ", joined to the trace")
            + f"){dtype}.")
    sparse = next((k for k in (f.grid_fill.top if f.grid_fill else []) if k.kernel == top.name
                   and k.blocks_per_sm <= SPARSE_GRID_BLOCKS_PER_SM and k.share_pct >= SPARSE_GRID_MIN_PCT), None)
    if sparse is not None:
        # a grid that leaves most SMs empty: no kernel-level tuning beats giving it more blocks
        hypothesis += (f" Its grid has about {sparse.blocks_per_sm:g} blocks per SM, so most of the GPU's SMs sit "
                       "idle while it runs.")
        step = (f"Give {top.label} more blocks per launch: a larger batch or more tokens per step, several small "
                "launches fused or grouped into one, split-K or stream-K for a small matmul; then profile it: "
                f"`{profiler}`.")
    p = f.precision
    if p is not None and p.advice and p.plain_core_pct >= ADVISED_PCT and said is not None and said[1] == 0:
        # fp32 math off the tensor cores: the dtype, not the kernel, is the first fix
        hypothesis += (f" It runs in fp32 on the plain cores, as does {p.plain_core_pct:.1f}% of the math kernels' time: "
                       "the GPU's tensor cores sit unused.")
        step = (f"{TENSOR_CORE_STEP}: {p.advice}; `traceagent whatif TRACE --change amp` predicts what it "
                f"buys. Then profile what stays hot: `{profiler}`.")
    rated = next((k for k in (f.flops.by_kernel if f.flops else []) if k.name == top.name and k.mfu_pct is not None), None)
    if rated is not None and rated.mfu_pct is not None and rated.mfu_pct >= NEAR_PEAK_PCT:
        # a kernel near its peak has little left to give: the gain is in doing less of it
        hypothesis += (f" It already runs at {rated.mfu_pct:.1f}% of the GPU's {rated.dtype} peak (from the recorded "
                       "shapes), so a faster kernel has little room left.")
        step = ("Look past this kernel: it runs near peak already. Do less of its math (a lower precision such as fp8 "
                "where the GPU has it, smaller or fewer matmuls), and cut the time around it: the other kernels and "
                "the gaps between them (`traceagent analyze` lists both).")
    return Verdict("compute", "hot_kernel",
                   f"{_busy(f)}; the top kernel, {top.label}, "
                   f"takes {top.share_of_busy_pct:.1f}% of busy time", hypothesis, step, evidence, also)


def _memory_bound_verdict(f: Findings, classes: TimeByClassResult, top: HotKernel, evidence: ComputeEvidence,
                          also: list[str]) -> Verdict:
    """A busy device whose time goes mostly to kernels memory-bound by nature, over many ops: no
    one kernel is the fix; fusing them is."""
    evidence |= ComputeEvidence(kind="compute", memory_kernels_pct=classes.memory_kernels_pct,
                                compute_heavy_pct=classes.compute_pct)
    memory = memory_kernel_classes(classes)
    named = "; ".join(f"{c.label} {c.share_pct:.1f}%" + (f" (led by {c.top[0]})" if c.top else "")
                      for c in memory[:3] if c.share_pct >= 1.0)
    generated = bool(memory and memory[0].top and memory[0].top[0].startswith("triton_"))
    step = ("They are torch.compile's generated kernels already: find what splits the graph (`TORCH_LOGS=graph_breaks`), "
            "try `mode=\"max-autotune\"`, and keep activations in bf16 (half the bytes)" if generated else
            "Fuse them: compile the model with `torch.compile` (or use fused kernels for the norms, activations and "
            "rotary embeddings; for inference, a serving engine such as vLLM or SGLang)")
    return Verdict("compute", "memory_bound_kernels",
                   f"{_busy(f)}; {classes.memory_kernels_pct:.1f}% of device time is in kernels memory-bound by nature, "
                   f"{classes.compute_pct:.1f}% in matmul, attention and convolution",
                   f"Time goes into kernel execution, mostly into kernels that move more bytes than they compute "
                   f"with: {named}. They are many small ops, not one kernel: the top kernel, {top.label}, takes "
                   f"{top.share_of_busy_pct:.1f}% of busy time. Fusing them cuts the bytes they move and their launches.",
                   f"{step}; then re-profile and compare with `traceagent diff before after`.", evidence, also)


#: a hot kernel at this share of its dtype's peak FLOP/s or more runs near peak: little is left to gain in it
NEAR_PEAK_PCT = 60.0
#: a hot kernel at or under this many blocks per SM leaves most SMs empty: the verdict says so first,
#: where those launches take at least this share of kernel time
SPARSE_GRID_BLOCKS_PER_SM = 0.5
SPARSE_GRID_MIN_PCT = 5.0
#: fp32 math on the plain cores is named beside the limiter from this share of the rank's device time
PLAIN_CORE_LOSS_PCT = 10.0
#: kernels converting between memory layouts are named beside the limiter from this share of the rank's
#: device time (lower than fp32's: channels_last removes all of it, autocast only part of the math's time)
LAYOUT_LOSS_PCT = 5.0
TENSOR_CORE_STEP = "Run the math on tensor cores"


_STRAGGLER_STEPS = {
    "dataloader": "Its input pipeline is slower than the others': compare its DataLoader (num_workers, the storage "
                  "or shard it reads, per-sample work) with theirs, and profile its host with py-spy.",
    "sync": "It blocks on its GPU before the collective: remove the synchronization on that rank "
            "(.item(), .cpu(), logging of tensor values), or do it every N steps.",
    "launch_overhead": "Its host cannot launch kernels fast enough: capture the step in a CUDA graph or fuse ops "
                       "with torch.compile.",
    "host_other": "Its host does work the others do not before the collective (logging, checkpointing, evaluation "
                  "on one rank): profile that rank's host with py-spy and move the work off the critical path.",
    "device_stall": "Its GPU did not start work its host had already launched: check what else runs on that GPU "
                    "(nvidia-smi, rocm-smi) and its health (nvidia-smi -q: clocks, temperature, ECC).",
    "memory_bound_kernels": "Its GPU spends longer than the others' in memory-bound kernels before each collective: "
                            "check for uneven work (sequence lengths, routing) and for a GPU with slower memory "
                            "(nvidia-smi -q: clocks, temperature, ECC).",
    "hot_kernel": "Its GPU computes longer than the others' before each collective: check for uneven work "
                  "(sharding, sequence lengths, routing), and for a slower GPU (nvidia-smi -q: clocks, "
                  "temperature, ECC, PCIe/NVLink placement).",
}


def straggler_verdict(comparison: RankComparison, late: Findings, late_verdict: Verdict,
                      frames: dict[str, str] | None = None, params: VerdictParams = VerdictParams()) -> Verdict:
    """The job's verdict when one rank makes the others wait: named by that rank and by what it
    was doing before the collectives it entered last (with the user's line or range that held
    that rank's idle of that cause, from `frames`); its own verdict and losses follow. Where that is
    host synchronizations whose removal the rank's replay finds saves little, its host's own work
    paces it, and the next step is the rank's own (cut that work first)."""
    rank, cause = comparison.straggler, comparison.straggler_cause or "host_other"
    limiter = "compute" if cause == "hot_kernel" else "idle"
    what = ROOT_CAUSES[cause].label if cause != "hot_kernel" else "longer compute on its GPU"
    where = (frames or {}).get(cause)
    if where:
        what += f" (at {where})"
    saving = straggler_saving(comparison, late.steps)
    evidence = StragglerEvidence(kind="straggler", straggler_rank=rank, straggler_cause=cause,
                                 last_pct=comparison.straggler_last_pct,
                                 caused_waiting_pct=comparison.caused_waiting_pct, matched_collectives=comparison.matched,
                                 others_waiting_us=comparison.others_waiting_us,
                                 others_exposed_waiting_pct=comparison.others_exposed_waiting_pct,
                                 lateness_by_cause_us=comparison.straggler_cause_us, rank=rank)
    if where:
        evidence["python"] = where
    hypothesis = (f"Collectives cannot finish before every rank joins, so the other ranks sit inside them while rank "
                  f"{rank} is still busy with {what}: their waiting is rank {rank}'s cost, not slow communication.")
    step = _STRAGGLER_STEPS[cause]
    if cause == "sync" and (replayed := replayed_little(saving_for(late.savings, "sync"), params)) is not None:
        # its waits are real but do not pace it: replayed without them, its step is hardly shorter
        shorter = f"only {replayed[1]:.1f}% shorter" if replayed[1] >= 0.05 else "no shorter"
        hypothesis += (f" Yet on rank {rank} itself, replayed without the waits (`sync=0`), the step is {shorter}: its "
                       "host's own work between the waits paces it, so that work is what makes it late.")
        # the rank's own verdict says which host work where it is the sync's (else: the host work, as a straggler's)
        step = late_verdict.next_step if late_verdict.root_cause == "sync" else _STRAGGLER_STEPS["host_other"]
    return Verdict(
        limiter, "straggler",
        f"Rank {rank} is the straggler: it causes {comparison.caused_waiting_pct:.0f}% of the ranks' waiting in "
        f"collectives (last into {comparison.straggler_last_pct:.0f}% of them), delayed by {what}; the other ranks "
        f"wait in collectives {comparison.others_exposed_waiting_pct:.1f}% of their device time",
        hypothesis,
        f"Look at rank {rank} first (`traceagent analyze` on its trace). " + step,
        evidence, _missing(late), [f"On rank {rank} itself: {late_verdict.headline}.", *late_verdict.other_losses],
        rank=rank, saving=saving,
    )


def rank_verdict(inputs: Inputs, params: VerdictParams) -> Verdict:
    """The verdict of one rank, drawn from the results of the detectors it reads."""
    trace = inputs.trace
    findings = Findings.of(inputs.results, trace.meta.has_python_frames, trace.has_device_activity, trace.meta.amd)
    return replace(diagnose(findings, params), rank=trace.meta.rank)


DETECTOR = Detector("verdict", "Verdict", "What limits the rank, its root cause, evidence, next step and saving.",
                    VerdictParams(), Verdict, rank_verdict, settings="verdict", keys=(Key("verdict", Verdict),),
                    reads=("idle", "memcpy", "comm", "kernels", "launch", "steps", "workload", "savings", "critical_path",
                           "time_by_class", "flops", "precision", "grid_fill", "layout"),
                    place=83, tool=False)
