"""Activation checkpointing's recomputation: the device time of the forward work the backward runs
again, the price of the memory checkpointing saves.

A device op is recomputed where its launch call ran inside torch.utils.checkpoint's recompute: the
non-reentrant checkpoint's `checkpoint.py(N): recompute_fn` (autograd calls it when the backward
first unpacks a saved tensor of the segment), or a reentrant checkpoint's backward node
(`CheckpointFunctionBackward`), but not inside a backward node nested in that (the segment's own
backward, which it runs after the forward again). The non-reentrant recompute is seen by its Python
frame: a trace recorded without stacks cannot say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...format import duration, percent, shorten
from ...trace.model import Trace, among, matches
from ...trace.normalize import innermost_enclosing
from ..core.host import launch_points
from ..core.view import pct, us
from .base import Detector, Inputs
from .kernels import leading_kernels
from .training_phases import TrainingPhasesResult

#: the non-reentrant checkpoint's recompute: a Python frame, on the thread that runs the backward
RECOMPUTE_FRAME = re.compile(r"checkpoint\.py\(\d+\): recompute_fn$")
#: where a checkpointed segment's forward runs again: that frame, or a reentrant checkpoint's backward node
RECOMPUTE = re.compile(rf"{RECOMPUTE_FRAME.pattern}|^autograd::engine::evaluate_function: CheckpointFunctionBackward")
#: a backward node other than a reentrant checkpoint's: the launches inside it are backward work
BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function: (?!CheckpointFunctionBackward)")


@dataclass(frozen=True)
class RecomputeResult:
    """Per rank, every GPU of it: device time is the ops' durations added up, as for the training phases."""

    regions: int  # recomputations: checkpointed segments run again (recompute_fn calls, reentrant backward nodes)
    ops: int  # device ops (kernels, copies, memsets) launched inside them
    recomputed_us: float  # their durations added up
    share_pct: float  # of the rank's device time
    of_forward_pct: float | None  # of the forward phase's device time (training_phases); None where it has none
    top: list[str]  # its kernels (short names) with the most time, up to three


def detect_recompute(trace: Trace, phases: TrainingPhasesResult | None = None) -> RecomputeResult | None:
    """None where the rank shows no recomputation (no checkpointing, or no host events to see it by)
    or no device work."""
    gpu = trace.gpu
    device_op = (gpu["kind"] != "sync").to_numpy()
    recomputed, regions = recomputed_ops(trace)
    if not regions or not device_op.any():
        return None
    dur = (gpu["end"].to_numpy(np.int64) - gpu["start"].to_numpy(np.int64)).clip(0)
    time, total = int(dur[recomputed].sum()), int(dur[device_op].sum())
    forward = next((p.time_us for p in phases.phases if p.name == "forward"), None) if phases else None
    return RecomputeResult(regions=regions, ops=int(recomputed.sum()), recomputed_us=us(time),
                           share_pct=pct(time, total), of_forward_pct=pct(us(time), forward) if forward else None,
                           top=leading_kernels(gpu["name"], dur, recomputed)[0])


def recomputed_ops(trace: Trace) -> tuple[np.ndarray, int]:
    """(whether each row of trace.gpu is a device op launched inside a recompute, how many recomputes
    the host shows): what the detector sums and what-if's `recompute=0` removes."""
    cpu, gpu = trace.cpu, trace.gpu
    host = among(cpu["kind"], ["op", "annotation", "python"])
    recompute = host & matches(cpu["name"], RECOMPUTE)
    recomputed = np.zeros(len(gpu), dtype=bool)
    if not recompute.any():
        return recomputed, 0
    # the recompute ranges and the backward nodes together: a launch is recomputed where the innermost of
    # them around it is a recompute (a node nested in a reentrant checkpoint's backward is its backward)
    marks = cpu.loc[recompute | (host & matches(cpu["name"], BACKWARD_NODE)),
                    ["name", "pid", "tid", "start", "end"]].reset_index(drop=True)
    is_recompute = matches(marks["name"], RECOMPUTE)
    ops = np.flatnonzero((gpu["kind"] != "sync").to_numpy())
    found, pid, tid, t = launch_points(trace, gpu["correlation"].to_numpy()[ops])
    inside = innermost_enclosing(marks, pid, tid, t)
    recomputed[ops[found]] = (inside >= 0) & is_recompute[np.maximum(inside, 0)]
    return recomputed, int(recompute.sum())


def recompute_frames(trace: Trace) -> np.ndarray:
    """The host events of the non-reentrant recompute (their Python frames), a mask over trace.cpu:
    the host time what-if's `recompute=0` removes with the recomputed ops."""
    cpu = trace.cpu
    return among(cpu["kind"], ["python"]) & matches(cpu["name"], RECOMPUTE_FRAME)


def recompute_sentence(result: RecomputeResult) -> str:
    """'Activation checkpointing runs the forward again 12 times in the backward: 1234 device ops,
    5.20 ms, 5.2% of device time (96.0% of the forward's own), led by …', and what to do about it."""
    if not result.ops:
        return (f"Activation checkpointing recomputes {result.regions} times in the backward, launching no device "
                "work the trace holds.")
    of_forward = f" ({percent(result.of_forward_pct)} of the forward's own)" if result.of_forward_pct is not None else ""
    led = f", led by {shorten(result.top[0], 50)}" if result.top else ""
    return (f"Activation checkpointing runs the forward again {result.regions} times in the backward: {result.ops} "
            f"device ops, {duration(result.recomputed_us)}, {percent(result.share_pct)} of device time{of_forward}{led}. "
            "That is the price of the memory it saves: where memory allows, checkpoint fewer layers, or keep the "
            "costly activations (selective checkpointing: torch.utils.checkpoint with a context_fn from "
            "create_selective_checkpoint_contexts that saves the matmuls' outputs); `traceagent whatif TRACE --change "
            "recompute=0` predicts what turning it off buys.")


def _run(inputs: Inputs, params: None) -> RecomputeResult | None:
    return detect_recompute(inputs.trace, inputs["training_phases"])


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("recompute", "Activation checkpointing",
                    "The forward work activation checkpointing runs again in the backward: how many recomputations, "
                    "their device ops and time, its share of device time and of the forward's, and the kernels that "
                    "lead it.",
                    None, RecomputeResult, _run, lambda r, p: recompute_sentence(r), since="2.11",
                    needs=("the rank shows no activation-checkpoint recomputation (no checkpointing, or a trace "
                           "without the Python frames that show it)",
                           "profile with with_stack=True (`traceagent profile` sets it): torch.utils.checkpoint's "
                           "recompute shows as its recompute_fn frame"),
                    # checkpointing said with what it checkpoints (saving a model checkpoint is another question);
                    # "what if I turned it off?" is what-if's (recompute=0)
                    asks=r"^(?!.*\b(?:what if|if (?:i|we)|without)\b).*(?:\b(?:activation|gradient)s? checkpoint\w*|"
                         r"\bcheckpoint_wrapper\b|torch\.utils\.checkpoint|\brecomput\w*|\brematerializ\w*)",
                    reads=("training_phases",), place=64)
