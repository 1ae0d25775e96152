"""The next step for each root cause, chosen from what the trace shows. Each rule is a small
function of detector results returning (hypothesis, next step); none may say what a field of
the same result contradicts (workers already in use, memory already pinned, a side stream
already used, an inference program)."""

from __future__ import annotations

import re

from ...format import counted
from ..detectors.idle import IdleResult
from ..detectors.launch import LaunchResult
from ..detectors.memcpy import MemcpyResult
from ..detectors.workload import Workload

_OPTIMIZER = re.compile(r"Optimizer\.step|optimizer|_foreach_|\badam|\bsgd|\blamb\b|multi_tensor", re.IGNORECASE)
_DRIVER_LAUNCH = re.compile(r"^cuLaunchKernel")  # Triton and torch.compile kernels launch through the driver API


def profile_line(*options: str) -> str:
    """The `traceagent profile` command line that records what is asked (stacks, shapes, memory and
    steps are always on), for the user's own script in place of train.py."""
    return " ".join(["traceagent profile", *options, "-- python train.py"])


def rocprof_line(kernel: str) -> str:
    """ROCm Compute Profiler's command line for one kernel (`kernel` as written in the command: quoted, or NAME)."""
    return f"rocprof-compute profile -n hot_kernel -k {kernel} -- python train.py"


def kernel_profiler(kernel: str, amd: bool = False) -> tuple[str, str]:
    """The command that reads one kernel's hardware counters, and the profiler's name: Nsight Compute through
    `traceagent profile --ncu` (its reading joins the trace), or on AMD GPUs ROCm Compute Profiler."""
    if amd:
        return rocprof_line(repr(kernel)), "ROCm Compute Profiler"
    return profile_line("--ncu", repr(kernel)), "Nsight Compute"


def dataloader(workload: Workload) -> tuple[str, str]:
    """Data loading stalls: more workers for a single-process loader; for one already using
    workers, what makes workers keep up."""
    loop = "The training loop" if workload.training else "The loop"
    if workload.dataloader == "multi_process":
        return (f"{loop} already loads batches in worker processes (`_MultiProcessingDataLoaderIter`), but the "
                "workers do not keep up: the GPU still waits for each batch.",
                "Make the workers keep up: raise num_workers and prefetch_factor, keep them alive across epochs "
                "(persistent_workers=True), make __getitem__ and collate_fn cheaper (decode and augment once, "
                "offline or on the GPU), and check the storage they read; then compare with `traceagent diff`.")
    return (f"{loop} fetches each batch in the main process (`DataLoader.__next__` runs while the GPU has nothing "
            "queued), so the GPU waits for every batch.",
            "Load data in worker processes and pin it: DataLoader(dataset, num_workers=4, pin_memory=True, "
            "persistent_workers=True); then re-profile and compare with `traceagent diff before after`.")


def pageable_copies(copies: MemcpyResult) -> tuple[str, str]:
    """Pageable copies: device-to-host ones come from reading values back; host-to-device ones
    from unpinned inputs. The direction with more pageable bytes decides."""
    by_direction = {k: c.pageable_bytes for k, c in copies.by_kind.items() if c.pageable_bytes}
    direction = max(by_direction, key=by_direction.__getitem__) if by_direction else "HtoD"
    if direction == "DtoH":
        return ("Copies from the GPU into pageable host memory are synchronous: each one waits for the GPU and "
                "for a staging copy, so the host stalls and the GPU drains.",
                "Find what reads values back each step (.item(), .cpu(), .numpy(), .tolist(), printing a tensor) "
                "and keep those values on the GPU, read them every N steps, or copy into a preallocated pinned "
                "buffer with non_blocking=True and synchronize only when the value is needed.")
    return ("Copies from pageable memory are staged through a pinned buffer, run at a fraction of the link's "
            "bandwidth and make cudaMemcpyAsync synchronous for the host.",
            "Pin host memory: DataLoader(pin_memory=True) or tensor.pin_memory(), and copy with "
            ".to(device, non_blocking=True) so copies overlap compute.")


def exposed_copies(copies: MemcpyResult) -> tuple[str, str]:
    """Exposed copies: if they already run on a side stream, overlap is blocked by something
    else (pageable memory or a wait), so advising a side stream would contradict the evidence."""
    if copies.bytes and copies.side_stream_bytes >= copies.bytes / 2:
        pageable = " Some copies touch pageable memory, which makes them synchronous." if copies.pageable_count else ""
        return ("The copies already run on a side stream, yet no compute runs beside them: the compute stream "
                "waits for them (an event wait or a synchronize), or there is no independent work to overlap." + pageable,
                "Start each copy a step ahead: prefetch the next batch on the side stream while this step "
                "computes (pinned memory, non_blocking=True, record an event and wait on it only where the data "
                "is used), and remove synchronizations between the copy and the compute.")
    return ("Data moves between host and device (or device to device) while the GPU computes nothing.",
            "Keep tensors on the device across steps, batch small copies, and overlap the rest with compute on a "
            "side stream (copy with non_blocking=True from pinned memory).")


def launch_bound(idle: IdleResult, launch: LaunchResult) -> tuple[str, str]:
    """Launch-bound gaps, named by the op that launched the waited-for kernels: an unfused
    optimizer, kernels launched one by one through the driver (Triton, torch.compile), or other ops."""
    if not launch.kernels:  # no kernel is linked to its launch call: nothing here measures the launch cost
        return ("The GPU idles in gaps too short for host work between its ops (launch latency), but no kernel in "
                "the trace is linked to a launch call (it has no kernels, or its host side, the CUDA runtime, was "
                "not recorded), so it cannot show whether the host launched too slowly or each op waited for the "
                "one before.",
                "Record the host side too, then look again: "
                f"`{profile_line()}` (or torch.profiler with ProfilerActivity.CPU beside CUDA).")
    top = idle.launch_bound[0] if idle.launch_bound else None
    within = f" in `{top['range']}`" if top and top.get("range") else ""
    who = f" (mostly from `{top['op']}`{within}, {counted(top['gaps'], 'gap')})" if top else ""
    hypothesis = (f"Kernels are small (median {launch.median_kernel_us:.1f} µs) against their launch cost (median "
                  f"{launch.median_launch_us:.1f} µs per call), so the GPU finishes each one before the host issues "
                  f"the next{who}.")
    driver = sum(n for call, n in launch.by_call.items() if _DRIVER_LAUNCH.match(call))
    if top and (_OPTIMIZER.search(str(top["op"])) or _OPTIMIZER.search(str(top.get("range") or ""))):
        return hypothesis, ("The optimizer step launches one small kernel per parameter: use the multi-tensor or "
                            "fused implementation (torch.optim.AdamW(params, fused=True), or foreach=True), and "
                            "wrap the step in torch.compile if it is still launch-bound.")
    if driver and driver >= launch.kernels / 2:
        return hypothesis + f" {driver} of {launch.kernels} kernels launch through cuLaunchKernel (Triton / compiled).", (
            "Replay the loop as a CUDA graph instead of launching kernel by kernel: "
            "torch.compile(model, mode='reduce-overhead'), or capture the decode step with torch.cuda.CUDAGraph.")
    op = f" around `{top['op']}`" if top else ""
    return hypothesis, (f"Cut launches{op}: fuse the small ops with torch.compile, capture the step in a CUDA graph "
                        "(torch.compile(mode='reduce-overhead') or torch.cuda.graphs), or raise the batch size.")
