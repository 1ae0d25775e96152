"""What kind of program the trace shows, as far as advice depends on it: training or inference,
which DataLoader iterator feeds it, and how much host API activity there is."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...trace.model import Trace, among, matches
from .base import Detector, Key

_TRAINING = re.compile(r"backward|Backward|autograd::engine|Optimizer\.(step|zero_grad)|optimizer\.step|zero_grad")
_MULTI = re.compile(r"_MultiProcessingDataLoaderIter")
_SINGLE = re.compile(r"_SingleProcessDataLoaderIter")


@dataclass(frozen=True)
class Workload:
    training: bool | None  # None: the trace has no host ops to tell by
    dataloader: str | None  # "multi_process", "single_process", or None (no DataLoader seen)
    runtime_calls: int  # CUDA/HIP runtime and driver calls on the host


def detect_workload(trace: Trace) -> Workload:
    cpu = trace.cpu
    # masks over the whole name column (each distinct name tested once), not a copy of the rows
    ops = among(cpu["kind"], ["op", "python", "annotation"])
    training = bool((matches(cpu["name"], _TRAINING) & ops).any()) if ops.any() else None
    loading = (cpu["kind"] == "dataloader").to_numpy()
    if (matches(cpu["name"], _MULTI) & loading).any():
        loader = "multi_process"
    elif (matches(cpu["name"], _SINGLE) & loading).any():
        loader = "single_process"
    else:
        loader = None
    return Workload(training, loader, int(among(cpu["kind"], ["runtime", "driver"]).sum()))


DETECTOR = Detector("workload", "Workload", "What kind of job the trace is: training or inference, and its runtime calls.",
                    None, Workload, lambda i, p: detect_workload(i.trace), keys=(Key("workload", Workload),), place=81,
                    tool=False)
