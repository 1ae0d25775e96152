"""What kind of program the trace shows: training or inference (an inference server's phases), the
model (its outermost nn.Module) and a forward pass's device time, which DataLoader iterator feeds
it, its profiler steps, and how much host API activity there is. Advice depends on it, and it
answers "what am I looking at?"."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...format import counted, duration, percent, shorten
from ...text import code
from ...trace.model import Trace, among, matches
from ..core.view import pct
from .base import Detector, Inputs, Key
from .modules import ModulesResult
from .phases import PhasesResult
from .steps import StepsResult

# autograd's backward ops (AddmmBackward0) and Python frames (`backward`), FSDP's backward hooks
# (RegisterPostBackwardFunction), an optimizer step; not `save_for_backward`, which a custom autograd
# Function calls in inference too (vLLM's graph-capture trace)
_TRAINING = re.compile(r"(?<!_)backward|Backward|autograd::engine|Optimizer\.(?:step|zero_grad)|optimizer\.step|"
                       r"zero_grad")
#: the kernels torch.compile's Inductor generates (pointwise, reduction, persistent reduction, template)
_INDUCTOR_KERNEL = re.compile(r"^triton_(?:poi|red|per|tem)_|^triton_\w*fused|^triton__\d")
#: the host events of a compiled region: Dynamo's frame, AOTAutograd's function, Inductor's graph call
_COMPILED_REGION = re.compile(r"^Torch-Compiled Region|^CompiledFunction|CompiledFxGraph|^TorchDynamo Cache Lookup")
_MULTI = re.compile(r"_MultiProcessingDataLoaderIter")
_SINGLE = re.compile(r"_SingleProcessDataLoaderIter")


@dataclass(frozen=True)
class Workload:
    training: bool | None  # None: the trace has no host ops to tell by
    dataloader: str | None  # "multi_process", "single_process", or None (no DataLoader seen)
    runtime_calls: int  # CUDA/HIP runtime and driver calls on the host
    # 2.7: what the job runs
    module_ranges: bool = False  # the trace records nn.Module ranges (with_modules=True)
    model: str | None = None  # the outermost nn.Module type (modules.model); None where no module range holds others
    forward_calls: int = 0  # the model's calls: forward passes in the trace
    forward_device_us: float | None = None  # device time of one forward pass (mean), its children's included
    serving_phases: list[str] = field(default_factory=list)  # an inference server's phases seen (prefill, mixed, decode)
    steps: int = 0  # profiler steps (ProfilerStep#N or a server's steps)
    step_time_us: float | None = None  # the loop's time per step (steps.step_time_us)
    # 2.9: whether torch.compile runs it
    compiled_pct: float = 0.0  # of the rank's kernel time, in kernels torch.compile's Inductor generated (triton_poi_…)
    compiled_regions: int = 0  # host events of compiled regions (Torch-Compiled Region, CompiledFunction)


def detect_workload(trace: Trace, modules: ModulesResult | None = None, phases: PhasesResult | None = None,
                    steps: StepsResult | None = None) -> Workload:
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
    model = modules.model if modules else None
    kernels = (trace.gpu["kind"] == "kernel").to_numpy()
    took = (trace.gpu["end"] - trace.gpu["start"]).to_numpy()
    kernel_ns = int(took[kernels].sum())
    inductor = int(took[kernels & matches(trace.gpu["name"], _INDUCTOR_KERNEL)].sum())
    regions = int((matches(cpu["name"], _COMPILED_REGION) & ops).sum())
    return Workload(training, loader, int(among(cpu["kind"], ["runtime", "driver"]).sum()),
                    modules is not None, model.name if model else None,
                    model.calls if model else 0, model.mean_device_us if model else None,
                    [p.phase for p in phases.phases] if phases else [], steps.count if steps else 0,
                    steps.step_time_us if steps else None, pct(inductor, kernel_ns), regions)


def workload_sentence(w: Workload) -> str:
    """'An inference job (no backward pass or optimizer step); the model, BertLMHeadModel: 1 forward
    pass, 309.4 µs of device time each; 1 profiler step of 4.43 ms.'"""
    if w.serving_phases:
        kind = f"An inference server ({' and '.join(w.serving_phases)} steps)"
    elif w.training is None:
        kind = ("A job whose kind the trace cannot tell (it records no host ops: torch.profiler with CPU activities "
                "on, or NVTX ranges under Nsight Systems)")
    elif w.training:
        kind = "A training job (autograd's backward pass or an optimizer step is in the trace)"
    else:
        kind = "An inference job (no backward pass or optimizer step in the trace)"
    parts = [kind]
    if w.model:
        passes = f"{counted(w.forward_calls, 'forward pass', 'forward passes')}"
        each = ""
        if w.forward_device_us is not None:
            each = f", {duration(w.forward_device_us)} of device time" + (" each" if w.forward_calls != 1 else "")
        parts.append(f"the model, {code(w.model)} (its outermost nn.Module): {passes}{each}")
    elif w.module_ranges:
        parts.append("no nn.Module range holds the others, so the trace does not name the model (its forward may "
                     "replay from CUDA graphs, which record no module ranges)")
    elif w.training is not None:
        parts.append("the trace records no nn.Module ranges to name the model by (profile with with_stack=True, "
                     "with_modules=True)")
    if w.steps:
        parts.append(f"{counted(w.steps, 'profiler step')}"
                     + (f" of {duration(w.step_time_us)}" if w.step_time_us else ""))
    if w.compiled_pct or w.compiled_regions:
        parts.append(f"compiled with torch.compile: {percent(w.compiled_pct)} of kernel time in the kernels it generated"
                     + (f", {counted(w.compiled_regions, 'compiled-region call')} on the host" if w.compiled_regions else ""))
    if w.dataloader:
        parts.append("fed by a " + ("multi-process DataLoader (num_workers > 0)" if w.dataloader == "multi_process"
                                    else "single-process DataLoader (num_workers=0)"))
    return "; ".join(parts) + "."


def workload_findings(w: Workload, on: str) -> list[tuple[str, str]]:
    """One side-panel line: the job's kind and its model."""
    kind = ("inference server" if w.serving_phases else "training" if w.training
            else "inference" if w.training is not None else None)
    if kind is None:
        return []
    return [(f"{kind} · {shorten(w.model, 24)}" if w.model else kind, f"What kind of job is this{on}?")]


def _run(inputs: Inputs, params: None) -> Workload:
    return detect_workload(inputs.trace, inputs["modules"], inputs["phases"], inputs["steps"])


DETECTOR = Detector("workload", "Workload", "What kind of job the trace is: training or inference (an inference "
                    "server's phases), the model (its outermost nn.Module) with its forward passes and a pass's device "
                    "time, the profiler steps, the DataLoader kind, and the runtime calls.",
                    None, Workload, _run, lambda r, p: workload_sentence(r), reads=("modules", "phases", "steps"),
                    asks=r"\b(?:training or inference|inference or training|is (?:this|it) (?:an? )?(?:training|"
                         # "is this inference job launch bound?" asks what limits it, not what kind it is
                         r"inference)\b(?!.*\b(?:bound|limited|bottleneck\w*|slow\w*|idle|wait\w*|fast\w*)\b)|"
                         r"what (?:kind|sort|type) of (?:job|workload|run|program|model|trace)|"
                         r"which workload\b|(?:what|which) model (?:is|was|does|did|are|runs?)\b|what am i looking at|"
                         r"what (?:is|does) this (?:trace|job|program|workload)(?: (?:do|show|run)\w*)?\s*\??\s*$)|"
                         # a forward pass's time: where the trace has no training phases, this answers (a
                         # question that names the backward too is the training phases')
                         r"^(?!.*\bbackward\b).*(?:\b(?:forward(?: pass)?|inference)\b.{0,40}\b(?:take|takes|took|time|long|"
                         r"latency)\b|\b(?:take|takes|took|time|long|latency)\b.{0,40}\b(?:forward(?: pass)?|inference)\b)",
                    findings=workload_findings, keys=(Key("workload", Workload),), place=81)
