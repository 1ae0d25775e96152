"""Each GPU's copies, collectives, hot kernels, launches and steps, computed with the analysis so
that the tools and the chat app answer for one GPU without running a detector again."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Detector, Inputs
from .comm import CommResult, detect_comm
from .idle import IdleParams
from .kernels import KernelsResult, detect_hot_kernels
from .launch import LaunchResult, detect_launch
from .memcpy import MemcpyResult, detect_memcpy
from .steps import StepsResult, detect_steps


@dataclass(frozen=True)
class DeviceFindings:
    """What the tools report for one GPU of a rank."""

    memcpy: MemcpyResult
    comm: CommResult
    kernels: KernelsResult
    launch: LaunchResult
    steps: StepsResult | None  # idle per step from this GPU's gaps


def device_findings(inputs: Inputs, params: IdleParams) -> dict[int, DeviceFindings]:
    """Each GPU's findings; a rank with one GPU has the rank's."""
    trace, gaps = inputs.trace, inputs["gaps"]
    devices = sorted(int(d) for d in inputs["idle"].devices)
    if len(devices) == 1:
        return {devices[0]: DeviceFindings(inputs["memcpy"], inputs["comm"], inputs["kernels"], inputs["launch"],
                                           inputs["steps"])}
    return {d: DeviceFindings(detect_memcpy(trace, device=d), detect_comm(trace, device=d),
                              detect_hot_kernels(trace, device=d), detect_launch(trace, device=d),
                              detect_steps(trace, params=params, device=d, gaps=gaps))
            for d in devices}


DETECTOR = Detector("per_gpu", "Per GPU", "Each GPU's copies, collectives, hot kernels, launches and steps.", IdleParams(),
                    dict, device_findings, reads=("gaps", "idle", "memcpy", "comm", "kernels", "launch", "steps"),
                    settings="idle", keys=(), place=92, tool=False)
