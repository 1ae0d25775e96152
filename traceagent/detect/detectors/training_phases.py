"""Forward, backward and optimizer: a training rank's device time by the phase that launched it.

A device op belongs to the phase its launch call ran in: the optimizer where the call is inside an
`Optimizer.step#…` or `Optimizer.zero_grad#…` range, the backward where it is inside autograd's
work (`autograd::engine::evaluate_function: …`, a `…Backward` node, `AccumulateGrad`, on whichever
thread autograd ran them), the forward otherwise. Collectives are counted apart (DDP launches its
all-reduces from the backward: they are communication, not the backward's compute), as are ops
with no launch call in the trace. Ranks with no autograd work (inference, or a trace without host
ops) cannot say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...format import counted, duration, percent, shorten, upper_first
from ...text import code
from ...trace.model import Trace, among, matches, rows_where
from ...trace.normalize import innermost_enclosing
from ..core.bounds import Percent, Times
from ..core.host import launch_points
from ..core.view import pct, us
from .base import Detector
from .kernels import leading_kernels

BACKWARD = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|^torch::autograd::AccumulateGrad$")
OPTIMIZER = re.compile(r"^Optimizer\.(?:step|zero_grad)#")
PHASES = ("forward", "backward", "optimizer", "communication", "unlaunched")
#: the usual backward: about twice the forward (two gradients per matmul against one product)
USUAL_BACKWARD_X = 2.0


@dataclass(frozen=True)
class TrainingPhasesParams:
    """optimizer_pct: the optimizer's share of device time from which advice names it;
    backward_x: how many times the forward the backward may take before advice names it."""

    optimizer_pct: Percent = 10.0
    backward_x: Times = 3.0


@dataclass(frozen=True)
class TrainingPhase:
    name: str  # forward, backward, optimizer, communication (collectives), unlaunched (no launch call in the trace)
    ops: int  # device ops (kernels, copies, memsets) it launched
    time_us: float  # their durations added up
    share_pct: float  # of the rank's device time (the phases add up to 100%)
    top: list[str]  # its kernels (short names) with the most time, up to three


@dataclass(frozen=True)
class TrainingPhasesResult:
    """Per rank, every GPU of it: device time is the ops' durations added up, as for time by class."""

    device_time_us: float
    phases: list[TrainingPhase]  # in PHASES' order, phases without ops left out
    backward_per_forward_x: float | None  # backward device time over forward's, collectives left out (None: no forward)
    advice: list[str]  # what the split says to do, where it is unusual


def detect_training_phases(trace: Trace, params: TrainingPhasesParams = TrainingPhasesParams()
                           ) -> TrainingPhasesResult | None:
    """None where the rank shows no autograd work or no device work."""
    cpu, gpu = trace.cpu, trace.gpu
    columns = ["name", "pid", "tid", "start", "end"]
    host = among(cpu["kind"], ["op", "annotation", "python"])
    backward = cpu.loc[host & matches(cpu["name"], BACKWARD), columns].reset_index(drop=True)
    ops = rows_where(gpu, (gpu["kind"] != "sync").to_numpy())
    if backward.empty or ops.empty:
        return None
    optimizer = cpu.loc[host & matches(cpu["name"], OPTIMIZER), columns].reset_index(drop=True)
    found, pid, tid, t = launch_points(trace, ops["correlation"].to_numpy())
    phase = np.full(len(ops), PHASES.index("unlaunched"), dtype=np.int8)
    phase[found] = np.where(innermost_enclosing(optimizer, pid, tid, t) >= 0, PHASES.index("optimizer"),
                            np.where(innermost_enclosing(backward, pid, tid, t) >= 0, PHASES.index("backward"),
                                     PHASES.index("forward")))
    phase[ops["is_comm"].to_numpy(bool)] = PHASES.index("communication")
    dur = (ops["end"].to_numpy(np.int64) - ops["start"].to_numpy(np.int64)).clip(0)
    time = np.bincount(phase, weights=dur, minlength=len(PHASES))
    count = np.bincount(phase, minlength=len(PHASES))
    total = int(dur.sum())
    phases = []
    for i, name in enumerate(PHASES):  # five phases, not events
        if not count[i]:
            continue
        phases.append(TrainingPhase(name, int(count[i]), us(int(time[i])), pct(time[i], total),
                                    leading_kernels(ops["name"], dur, phase == i)[0]))
    forward, back = time[PHASES.index("forward")], time[PHASES.index("backward")]
    ratio = round(float(back / forward), 2) if forward else None
    return TrainingPhasesResult(us(total), phases, ratio, _advice(phases, ratio, params))


def _advice(phases: list[TrainingPhase], ratio: float | None, params: TrainingPhasesParams) -> list[str]:
    said = []
    optimizer = next((p for p in phases if p.name == "optimizer"), None)
    if optimizer is not None and optimizer.share_pct >= params.optimizer_pct:
        said.append(f"The optimizer takes {percent(optimizer.share_pct)} of device time: use a fused or multi-tensor "
                    "optimizer (torch.optim.AdamW(..., fused=True), or foreach=True), or step it less often "
                    "(gradient accumulation).")
    if ratio is not None and ratio >= params.backward_x:
        said.append(f"The backward takes {ratio:g}× the forward, collectives left out (about {USUAL_BACKWARD_X:g}× is "
                    "usual): activation "
                    "checkpointing recomputes the forward inside it (the price of the memory it saves), and some ops "
                    "are slow backward (embedding and index backward's scatter-add, atomics); its top kernels say which.")
    return said


def training_phases_sentence(result: TrainingPhasesResult) -> str:
    """'Of 603.6 ms of device time: forward 31.0% (187.1 ms), backward 62.0% …, optimizer 6.2% ….'"""
    words = {"communication": "collectives", "unlaunched": "with no launch call in the trace"}
    parts = [f"{words.get(p.name, p.name)} {percent(p.share_pct)} ({duration(p.time_us)}"
             + (f", led by {shorten(p.top[0], 50)}" if p.top else "") + ")" for p in result.phases]
    text = f"Of {duration(result.device_time_us)} of device time (every GPU of the rank): {'; '.join(parts)}."
    if result.backward_per_forward_x is not None and not any(a.startswith("The backward") for a in result.advice):
        apart = " (collectives left out)" if any(p.name == "communication" for p in result.phases) else ""
        text += f" The backward takes {result.backward_per_forward_x:g}× the forward{apart}."
    return " ".join([text, *result.advice])


def training_phases_lead(result: TrainingPhasesResult, question: str) -> str | None:
    """The phase the question names ("how long does the optimizer take?"), or the backward over the forward
    where it weighs the two; else None."""
    named = re.findall(r"\b(forward|backward|optimi[sz]er)\b", question, re.I)
    if {n.lower() for n in named} == {"forward", "backward"}:
        return (f"**The backward takes {result.backward_per_forward_x:g}× the forward** (device time, collectives "
                "left out; about twice is usual)." if result.backward_per_forward_x is not None else None)
    phases = {p.name: p for p in result.phases}
    said = [("optimizer" if n.lower().startswith("optimi") else n.lower()) for n in dict.fromkeys(named)]
    return " ".join(f"**{upper_first(name)}: {duration(p.time_us)}, {percent(p.share_pct)} of device time** "
                    f"({counted(p.ops, 'device op')}" + (f", led by {code(shorten(p.top[0], 60))}" if p.top else "")
                    + ")." if (p := phases.get(name)) is not None else f"**No {name} work** in this trace."
                    for name in said) or None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("training_phases", "Forward, backward and optimizer",
                    "A training rank's device time by the phase that launched it (forward, backward, optimizer, no "
                    "launch call): each phase's ops, time, share and top kernels, the backward over the forward, and "
                    "advice where the optimizer or the backward takes more than usual.",
                    TrainingPhasesParams(), TrainingPhasesResult, lambda i, p: detect_training_phases(i.trace, p),
                    lambda r, p: training_phases_sentence(r), since="2.6",
                    needs=("the rank shows no autograd work (an inference run, or a trace that does not record autograd's "
                           "ops: no host ops, or NVTX ranges without them)",
                           "profile a training step with CPU activities on (torch.profiler records autograd's ops), or "
                           "under Nsight Systems inside torch.autograd.profiler.emit_nvtx()"),
                    asks=r"\b(?:forward|backward)(?: pass)?\b.{0,40}\b(?:take|takes|took|time|long|share|slow\w*|vs|"
                         r"versus|ratio|compar\w*)\b|\b(?:take|takes|took|time|long|share|fraction|percent\w*|proportion|spent|spend)\b.{0,40}"
                         r"\b(?:forward|backward) pass|"
                         r"\boptimi[sz]er(?: step)?\b.{0,30}\b(?:take|takes|took|time|long|share|slow\w*)\b|"
                         r"\b(?:time|long|share|spent|goes|go)\b.{0,30}\boptimi[sz]er\b|"
                         # "what fraction of the step is forward?", "what is the optimizer doing?"
                         r"\b(?:share|fraction|percent\w*|proportion|how much)\b.{0,40}\b(?:forward|backward)\b|"
                         r"\bwhat (?:is|does) the optimi[sz]er\b|"
                         r"\btraining phases?\b|\bforward, backward and optimi[sz]er\b|\bforward and backward\b|"
                         r"\bbackward and forward\b",
                    lead=training_phases_lead, place=63)
