"""What kind of job a trace shows (a registered detector): training or inference, the model (its
outermost nn.Module) and a forward pass's device time. Traces are built here with the figures
worked out by hand; on real traces an independent reader of the JSON names the model."""

from __future__ import annotations

import gzip
import json

import jsonschema
from builder import TraceBuilder
from conftest import DATA, MI300, RESNET_NW0, analyzed, offline_answer

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.detect.core.encode import to_data
from traceagent.format import duration
from traceagent.schema import SCHEMAS

BERT = DATA / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"


def checkpointed_trace(tmp_path):
    """Model_0 (0-300 µs) holds Block_0 (0-100) and Block_1 (100-200); kernels of 10 µs launched at
    5, 105 and 250 (inside Model). Block_2 (400-500) is a block re-run outside the model, as
    activation checkpointing re-runs it in the backward, with two 200 µs kernels: the block then has
    the most device time (420 µs) but the model holds the most module calls (2). A backward op
    makes it training."""
    b = TraceBuilder()
    b.python("nn.Module: Model_0", 0, 300)
    b.python("nn.Module: Block_0", 0, 100)
    b.python("nn.Module: Block_1", 100, 100)
    b.python("nn.Module: Block_2", 400, 100)
    b.op("autograd::engine::evaluate_function: AddmmBackward0", 390, 200)
    for at, start, dur in [(5, 5, 10), (105, 105, 10), (250, 250, 10), (410, 410, 200), (420, 620, 200)]:
        b.kernel("sm90_xmma_gemm_bf16", start, dur, launch_at=at, launch_dur=2)
    return b.write(tmp_path / "checkpointed.json")


def test_the_model_is_the_module_holding_the_others_not_the_one_with_most_time(tmp_path):
    analysis = analyze(checkpointed_trace(tmp_path))
    modules = analysis.ranks[0].results["modules"]
    assert modules.modules[0].name == "Block" and modules.model is not None and modules.model.name == "Model"
    w = analysis.ranks[0].results["workload"]
    assert (w.training, w.module_ranges, w.model, w.forward_calls, w.forward_device_us) == (True, True, "Model", 1, 30.0)
    data = json.loads(json.dumps(analysis.to_dict()))
    assert data["ranks"][0]["workload"] == to_data(w)
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(data)
    text = offline_answer(analysis, "Is this training or inference?")
    assert "A training job" in text and "the model, `Model` (its outermost nn.Module): 1 forward pass, 30.0 µs" in text


def test_save_for_backward_alone_is_not_training_and_a_trace_without_modules_says_how_to_get_them(tmp_path):
    b = TraceBuilder()
    # a custom autograd Function's forward saves its tensors in inference too (vLLM's capture trace)
    b.python("torch/autograd/function.py(39): save_for_backward", 0, 5)
    b.kernel("sm90_xmma_gemm_bf16", 10, 100, launch_at=6)
    analysis = analyze(b.write(tmp_path / "inference.json"))
    w = analysis.ranks[0].results["workload"]
    assert (w.training, w.module_ranges, w.model) == (False, False, None)
    text = offline_answer(analysis, "What kind of job is this?")
    assert "An inference job" in text and "with_modules=True" in text


def _outermost_module(path) -> str:
    """An independent reader: of the trace's nn.Module ranges, the one whose thread's other module
    ranges fall inside it most often, less its instance suffix."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    calls = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("nn.Module: ")]

    def inside(c):
        return sum(1 for o in calls if o is not c and (o["pid"], o["tid"]) == (c["pid"], c["tid"])
                   and c["ts"] <= o["ts"] < c["ts"] + c["dur"])
    best = max(calls, key=inside)
    return best["name"].removeprefix("nn.Module: ").rsplit("_", 1)[0]


def test_on_real_traces_the_model_is_the_readers_outermost_module():
    for path in (BERT, MI300):  # MI300: a checkpointed ResNet under DDP, its blocks re-run in the backward
        r = analyzed(path).ranks[0]
        assert r.results["workload"].model == _outermost_module(path) == r.results["modules"].model.name
    modules = analyzed(MI300).ranks[0].results["modules"]
    assert modules.modules[0].name != modules.model.name  # the block re-run in the backward has more device time


def test_the_side_panel_question_and_the_users_words_reach_it():
    analysis = analyzed(BERT)
    ctx = AnalysisContext(analysis)
    w = analysis.ranks[0].results["workload"]
    for question in ("Is this inference or training?", "What model is this?", "What kind of workload is this?",
                     "Is this a training run?", "What am I looking at?"):
        assert understand(question, ctx).intent == "detector:workload", question
    for question in ("What is the trace's step time?", "Which model layer is the slowest?", "What is the MFU?"):
        assert understand(question, ctx).intent != "detector:workload", question
    text = offline_answer(analysis, "What model is this?")
    assert "An inference job" in text and f"`{w.model}`" in text and f"{w.forward_calls} forward pass" in text


def test_a_forward_pass_question_goes_where_the_trace_has_an_answer():
    """Both the training phases and the workload name "forward pass" questions: a training trace
    gets its forward share, an inference trace (no training phases) its forward passes."""
    question = "How long does one forward pass take?"
    inference, training = analyzed(BERT), analyzed(RESNET_NW0)
    assert inference.ranks[0].results["training_phases"] is None
    for asked in (question, "How long does the model forward take?"):
        assert understand(asked, AnalysisContext(inference)).intent == "detector:workload"
        assert understand(asked, AnalysisContext(training)).intent == "detector:training_phases"
    w = inference.ranks[0].results["workload"]
    assert f"{w.forward_calls} forward pass, {duration(w.forward_device_us)} of device time" in offline_answer(inference,
                                                                                                        question)


def test_a_compiled_run_is_told_by_its_inductor_kernels_and_compiled_regions(tmp_path):
    """By hand: Inductor's kernels (today's `triton_poi_…` 30 µs, PyTorch 2.0's `triton__0d1d2d` 10 µs)
    take 40 of the 100 µs of kernel time; the host enters 2 compiled regions (Dynamo's frame and
    AOTAutograd's function). A trace with neither says it does not run compiled."""
    b = TraceBuilder()
    b.op("Torch-Compiled Region: 0/0", 0, 100)
    b.op("CompiledFunction", 1, 90)
    b.kernel("triton_poi_fused_add_mul_0", 10, 30, launch_at=2)
    b.kernel("triton__0d1d2d", 40, 10, launch_at=3)
    b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 50, 60, launch_at=4)
    analysis = analyze(b.write(tmp_path / "compiled.json"), use_cache=False)
    workload = analysis.ranks[0].results["workload"]
    assert (workload.compiled_pct, workload.compiled_regions) == (40.0, 2)
    assert "compiled with torch.compile: 40.0% of kernel time in the kernels it generated" in \
        offline_answer(analysis, "What kind of job is this?")
    assert offline_answer(analysis, "Is the model compiled?").startswith(
        "**It runs compiled now:** 40.0% of kernel time is in the kernels torch.compile generated")
    plain = analyzed(RESNET_NW0)
    assert plain.ranks[0].results["workload"].compiled_pct == 0.0
    assert offline_answer(plain, "Is the model compiled?").startswith("**It does not run compiled now:**")
