"""Forward, backward and optimizer (a registered detector): a training rank's device time by the
phase whose launch call put it there. The trace is built here and the shares worked out by hand."""

from __future__ import annotations

import json

import jsonschema
from builder import TraceBuilder
from conftest import offline_answer

from traceagent import analyze
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.detect.core.encode import to_data
from traceagent.schema import SCHEMAS

BACKWARD_TID = 200  # autograd's device thread, as PyTorch runs the backward of CUDA tensors


def step_trace(tmp_path, name: str = "train.json"):
    """One step: the forward launches a 100 µs matmul from the main thread; autograd's thread runs
    MmBackward0 (two 100 µs kernels) and AccumulateGrad; DDP's all-reduce (50 µs, no launch call
    here) is communication; the optimizer's step launches one 50 µs kernel; one 25 µs kernel has no
    launch call. 425 µs of device time: forward 100, backward 200, optimizer 50, collectives 50,
    unlaunched 25."""
    b = TraceBuilder()
    b.op("aten::mm", 0, 10)
    b.kernel("ampere_sgemm_128x64_nn", 10, 100, launch_at=2)
    b.op("autograd::engine::evaluate_function: MmBackward0", 120, 20, tid=BACKWARD_TID)
    b.kernel("ampere_sgemm_128x64_nt", 140, 100, launch_at=122, launch_tid=BACKWARD_TID)
    b.kernel("ampere_sgemm_128x64_tn", 240, 100, launch_at=125, launch_tid=BACKWARD_TID)
    b.op("torch::autograd::AccumulateGrad", 145, 5, tid=BACKWARD_TID)
    b.collective(340, 50, nelems=1 << 20)
    b.op("Optimizer.step#AdamW.step", 390, 20, cat="user_annotation")
    b.kernel("multi_tensor_apply_kernel", 400, 50, launch_at=395)
    b.kernel("my_custom_kernel", 450, 25)
    return b.write(tmp_path / name)


def test_each_phase_s_device_time_worked_out_by_hand(tmp_path):
    analysis = analyze(step_trace(tmp_path))
    result = analysis.ranks[0].results["training_phases"]
    assert result.device_time_us == 425.0
    assert [(p.name, p.ops, p.time_us, p.share_pct) for p in result.phases] == [
        ("forward", 1, 100.0, 23.53), ("backward", 2, 200.0, 47.06), ("optimizer", 1, 50.0, 11.76),
        ("communication", 1, 50.0, 11.76), ("unlaunched", 1, 25.0, 5.88)]
    assert result.phases[1].top == ["ampere_sgemm_128x64_nt", "ampere_sgemm_128x64_tn"]
    assert result.backward_per_forward_x == 2.0  # 200 µs over 100 µs, the all-reduce left out
    # the optimizer at 11.76% passes the 10% from which advice names it; the backward at 2× does not
    assert len(result.advice) == 1 and "fused=True" in result.advice[0]
    data = json.loads(json.dumps(analysis.to_dict()))
    assert data["ranks"][0]["training_phases"] == to_data(result)
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(data)


def test_the_thresholds_are_settings_and_the_tool_and_offline_analyst_say_the_same(tmp_path, capsys):
    path = step_trace(tmp_path)
    quiet = analyze(path, settings=["training_phases.optimizer_pct=20"]).ranks[0].results["training_phases"]
    assert quiet.advice == []
    analysis = analyze(path)
    ctx = AnalysisContext(analysis)
    tool = {t.name: t for t in build_tools(ctx)}["training_phases"]
    assert json.loads(tool.invoke({}))["phases"] == to_data(analysis.ranks[0].results["training_phases"])["phases"]

    text = offline_answer(analysis, "How much time does the backward pass take?")
    assert "backward 47.1% (200.0 µs" in text and "The backward takes 2× the forward (collectives left out)" in text
    assert main(["report", str(path), "-o", str(tmp_path / "report.md")]) == 0
    assert "Forward, backward and optimizer" in (tmp_path / "report.md").read_text()


def test_an_inference_trace_has_no_phases_to_split(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 10)
    b.kernel("ampere_sgemm_128x64_nn", 10, 100, launch_at=2)
    result = analyze(b.write(tmp_path / "infer.json")).ranks[0].results["training_phases"]
    assert result is None
