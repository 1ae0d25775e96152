"""The fixed words of a diagnosis, defined once: limiters, root causes, causes of idle gaps and
classes of device work, each with its word for people, its one-line meaning and its colours.

Every layer reads these tables (detectors, diff, the offline analyst, the report, the TUI and
the system prompt), so a word means the same thing everywhere and is spelled in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Word:
    """One word of the vocabulary."""

    name: str  # as it appears in JSON and tool arguments
    label: str  # for people, in a sentence
    meaning: str  # one line: what it means
    color: str  # for HTML charts
    style: str  # for terminals (a Rich / Textual style)
    measure: str = ""  # root causes: the quantity `diff` follows before and after
    said: str = ""  # how answers and questions name it (a regex): what an answer blames, what a question asks about
    change: str = ""  # root causes: the what-if change that fixes it (`traceagent whatif --change`), where there is one
    finding: str = ""  # gap causes: their idle time as a saving names it ("Fixing idle time during other host work …")


def _table(*words: Word) -> dict[str, Word]:
    return {w.name: w for w in words}


#: What limits the program: the largest avoidable loss (or none, and then compute).
LIMITERS = _table(
    Word("idle", "idle time", "the GPU has nothing to run: gaps between device work", "#e4572e", "red"),
    Word("data_movement", "exposed copies", "copies run while no compute kernel does", "#3bb273", "green"),
    Word("communication", "exposed communication", "collectives run while no compute kernel hides them",
         "#a23b72", "magenta"),
    Word("compute", "kernel execution", "the GPU is busy computing: the hot kernels are what to speed up",
         "#2e86ab", "blue"),
)

#: how answers and questions name a stalled device (its root cause and its gaps' cause alike)
_STALL_SAID = r"stall(?:s|ed)? (?:gpu|device)|(?:gpu|device) stall|queued (?:but|and) not (?:started|run)|outside the trace"

#: Why the limiter happens: one per verdict.
ROOT_CAUSES = _table(
    Word("dataloader", "data loading", "the launching thread is inside the DataLoader while the GPU waits",
         "#e4572e", "red", "idle from data loading", change="dataloader=0"),
    Word("sync", "host synchronizations", "the host blocks on the GPU (.item(), .cpu(), a synchronize) and "
         "cannot queue work ahead", "#8e44ad", "magenta", "idle after host synchronizations", change="sync=0"),
    Word("launch_overhead", "launch overhead", "kernels finish faster than the host can launch the next one",
         "#f3a712", "yellow", "idle from launch overhead", change="launch=graphs"),
    Word("host_other", "other host work", "the host is busy with work that launches nothing, or untraced",
         "#29335c", "blue", "idle during other host work"),
    Word("device_stall", "a stalled device", "the device does not start work the host has already launched: "
         "something outside the trace holds it (another process on the GPU, the driver, another device)",
         "#6c5b7b", "bright_magenta", "idle with work queued", said=_STALL_SAID),
    Word("pageable_memcpy", "copies from pageable memory", "copies staged through a pinned buffer, slow and "
         "synchronous for the host", "#3bb273", "green", "bytes copied from pageable memory",
         said=r"pageable|pin(?:ned|_memory)", change="copies=pinned"),
    Word("memcpy", "exposed copies", "copies that no compute overlaps", "#3bb273", "green", "exposed copy time",
         said=r"\bcop(?:y|ies)\b|memcpy|transfer"),
    Word("communication", "exposed communication", "collective time that no compute overlaps", "#a23b72",
         "magenta", "exposed communication", said=r"communicat|nccl|rccl|collective|all-?reduce|all-?gather"),
    Word("straggler", "a straggler rank", "one rank enters collectives last and the others wait for it",
         "#c0392b", "bright_red", "waiting for the straggler", said=r"straggler|slow(?:est)? rank|late rank|lateness"),
    Word("memory_bound_kernels", "memory-bound kernels", "most device time goes to kernels that move more bytes "
         "than they compute with (elementwise, normalization, reductions), spread over many ops", "#17becf", "cyan",
         "time in memory-bound kernels", said=r"memory[- ]bound|\bfus(?:e|ed|ing|ion)\b|elementwise",
         change="class:memory_bound=x2"),
    Word("hot_kernel", "a hot kernel", "one kernel takes the largest share of device time", "#2e86ab", "blue",
         "time in the top kernel", said=r"\bkernel|gemm|matmul|compute"),
)

#: What the launching thread was doing over an idle gap.
GAP_CAUSES = _table(
    Word("dataloader", "waiting for data loading", "the DataLoader (or a data range) covers the gap",
         "#e4572e", "red", said=r"data[\s_-]?load(?:ing|er)|dataloader|input pipeline",
         finding="idle time waiting for data loading"),
    Word("sync", "after host synchronizations", "a synchronization call ended inside the gap or just before it",
         "#8e44ad", "magenta", said=r"\bsync(?:hroni[sz]\w*)?|\.item\(\)|\.cpu\(\)|cuda\w*synchronize|"
         r"block(?:s|ed|ing)? (?:on|for) the (?:gpu|device)|wait(?:s|ed|ing)? for the (?:gpu|device) to finish",
         finding="idle time after host synchronizations"),
    Word("launch_overhead", "launch-bound (kernels shorter than their launch)",
         "the host was launching, and each kernel is shorter than its launch",
         "#f3a712", "yellow", said=r"launch[\s_-]?(?:overhead|bound)",
         finding="launch-bound idle time (kernels shorter than their launch)"),
    Word("host_other", "other host work", "host events cover the gap but launch nothing", "#29335c", "blue",
         said=r"other host work|host[\s_]other|host-side work", finding="idle time during other host work"),
    Word("no_host_activity", "nothing traced on the host", "no host event covers the gap (untraced Python, I/O, "
         "another process)", "#9aa0a6", "bright_black", said=r"nothing traced|untraced|no host activity|no_host_activity",
         finding="idle time with nothing traced on the host"),
    Word("device_stall", "with work queued that the device did not start", "the op after the gap had been "
         "launched for most of it, and the device ran nothing", "#6c5b7b", "bright_magenta",
         said=_STALL_SAID, finding="idle time with work queued that the device did not start"),
    Word("launch_latency", "launch latency (short gaps between kernels)",
         "a gap shorter than launch_gap_us between two device ops",
         "#f7d08a", "bright_yellow", said=r"launch[\s_-]?latency",
         finding="idle time in launch latency (short gaps between kernels)"),
)

#: The root cause each gap cause counts towards.
GAP_ROOT = {"dataloader": "dataloader", "sync": "sync", "launch_overhead": "launch_overhead",
            "launch_latency": "launch_overhead", "host_other": "host_other", "no_host_activity": "host_other",
            "device_stall": "device_stall"}

#: Classes of device work, as the breakdown and the charts split busy time.
WORK = _table(
    Word("compute", "compute", "kernels that are not collectives", "#2e86ab", "blue"),
    Word("communication", "communication", "collective kernels (NCCL, RCCL, NVLS)", "#a23b72", "magenta"),
    Word("copies", "copies", "memory copies", "#3bb273", "green"),
    Word("memset", "memsets", "memory sets", "#7fb069", "green"),
)


@dataclass(frozen=True)
class Bound:
    """What "is it X-bound?" asks about: its words for people, and the limiters or root causes
    whose verdict answers yes."""

    label: str
    means: frozenset[str]


#: The bounds engineers ask about, by the word the question uses.
BOUNDS = {
    "compute": Bound("compute", frozenset({"compute"})),
    "copies": Bound("memory copies", frozenset({"data_movement"})),
    "communication": Bound("communication", frozenset({"communication"})),
    "launch": Bound("kernel launches", frozenset({"launch_overhead"})),
    "host": Bound("the host (CPU)", frozenset({"launch_overhead", "host_other", "sync", "dataloader"})),
    "input": Bound("data loading", frozenset({"dataloader"})),
    # no verdict names it: the device time by class says (kernels memory-bound by nature against compute-heavy)
    "memory_bound": Bound("memory bandwidth", frozenset()),
}


@dataclass(frozen=True)
class Blocking:
    """A kind of host call that waits for the GPU: what it is, and the fix that removes the wait."""

    kind: str
    label: str
    fix: str
    # an environment setting that may remove the wait with no code change (`traceagent profile --try`)
    tries: str = ""


#: Host calls that block until device work finishes, by kind, from the CUDA runtime and driver
#: APIs' synchronization behaviour and HIP's equivalents (a `_v2`, `_ptds` or `_ptsz` variant of a
#: name is the same call). A gap that starts as one of them returns is a synchronization gap.
BLOCKING_CALLS: dict[str, tuple[str, ...]] = {
    "synchronize": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
                    "cudaStreamQuery_blocking", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
                    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipCtxSynchronize"),
    # synchronous copies return once the copy (and the work before it) is done: .item(), .cpu(), .tolist()
    "copy": ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpyFromSymbol",
             "cudaMemcpyToSymbol", "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy2D", "cuMemcpy3D",
             "cuMemcpyPeer", "hipMemcpy", "hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoD", "hipMemcpy2D",
             "hipMemcpy3D", "hipMemcpyPeer", "hipMemcpyFromSymbol", "hipMemcpyToSymbol"),
    # freeing device memory and pinned host allocations wait for the whole device
    "allocator": ("cudaFree", "cudaFreeHost", "cudaFreeArray", "cudaMallocHost", "cudaHostAlloc", "cuMemFree",
                  "cuMemFreeHost", "cuMemAllocHost", "cuMemHostAlloc", "hipFree", "hipHostFree", "hipFreeHost",
                  "hipHostMalloc", "hipMallocHost", "hipFreeArray"),
    "memset": ("cudaMemset", "cudaMemset2D", "cudaMemset3D", "hipMemset", "hipMemset2D", "hipMemsetD8",
               "hipMemsetD32"),
}
BLOCKING = {b.kind: b for b in (
    Blocking("synchronize", "a synchronize call", "keep values on the GPU instead of calling .item()/.cpu()/print "
             "on tensors every step (log every N steps), and find other syncs with "
             "torch.cuda.set_sync_debug_mode('warn')"),
    Blocking("copy", "a synchronous copy (.item(), .cpu(), .tolist(), or a copy through pageable memory)",
             "keep values on the GPU instead of reading them back every step (log every N steps); for copies you "
             "need, copy into pinned memory with non_blocking=True; find the syncs with "
             "torch.cuda.set_sync_debug_mode('warn')"),
    Blocking("allocator", "the caching allocator freeing memory (cudaFree under memory pressure, then cudaMalloc "
             "again) or a pinned host allocation",
             "keep the allocator from freeing and allocating again: set "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep input shapes fixed (pad or bucket sequence "
             "lengths), lower the batch or checkpoint activations if memory is tight, and allocate pinned buffers "
             "once, up front", tries="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    Blocking("memset", "a synchronous memset", "use the stream-ordered form (cudaMemsetAsync; tensor.zero_() on "
             "the device) instead of a synchronous memset"),
)}
_BLOCKING_KIND = {name: kind for kind, names in BLOCKING_CALLS.items() for name in names}
#: any blocking call, as it may be written (`cuMemcpyDtoH_v2`, `cudaMemcpy_ptds`)
BLOCKING_NAME = re.compile(r"^(" + "|".join(sorted(_BLOCKING_KIND, key=len, reverse=True))
                           + r")(?:_v\d+)?(?:_pt(?:ds|sz))?$")


#: host calls that record an event: a stream waiting on it (cudaStreamWaitEvent) may start only then
EVENT_RECORD_NAME = re.compile(r"^(?:cuda|hip|cu)EventRecord(?:WithFlags)?(?:_v\d+)?(?:_pt(?:ds|sz))?$")


def blocking(call: str | None) -> Blocking:
    """What kind of blocking call `call` is (a synchronize when it is not in the table)."""
    found = BLOCKING_NAME.match(call or "")
    return BLOCKING[_BLOCKING_KIND[found.group(1)] if found else "synchronize"]


def gap_causes_of(root_cause: str) -> list[str]:
    """The gap causes that count towards one root cause (empty when it is not an idle cause)."""
    return [gap for gap, root in GAP_ROOT.items() if root == root_cause]


def label(table: dict[str, Word], name: str | None) -> str:
    """The word for people, or the name itself when the table lacks it."""
    word = table.get(name or "")
    return word.label if word else (name or "")


def as_prompt() -> str:
    """The vocabulary as Markdown bullets for the system prompt."""
    lines = ["Limiters (exactly these four):"]
    lines += [f"- `{w.name}`: {w.label}: {w.meaning}" for w in LIMITERS.values()]
    lines += ["", "Root causes:"]
    lines += [f"- `{w.name}`: {w.meaning}" for w in ROOT_CAUSES.values()]
    lines += ["", "Causes of an idle gap (the `cause` argument of idle_gaps):"]
    lines += [f"- `{w.name}`: {w.meaning}" for w in GAP_CAUSES.values()]
    return "\n".join(lines)
