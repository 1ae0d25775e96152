"""Activation checkpointing's recomputation: worked by hand on a built training step with both kinds
of checkpoint, and on TraceLens's MI300 ResNet trace (checkpointed, non-reentrant) against a plain
reader of its JSON written here."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from builder import TraceBuilder
from conftest import MI300, RESNET_NW0, analyzed, offline_answer

from traceagent.detect.analysis import analyze_trace
from traceagent.detect.detectors.recompute import recompute_sentence

BACKWARD_TID = 2  # autograd's thread


def checkpointed_step() -> TraceBuilder:
    """A forward of two 100 µs kernels on the main thread, then a backward on autograd's thread:
    - a node (MulBackward0) that first recomputes a non-reentrant segment: recompute_fn launches a 40 µs
      kernel, then the node's own 60 µs kernel after it;
    - a reentrant checkpoint's node: a 30 µs kernel launched in it directly (its forward again), then a
      nested backward node launching a 50 µs kernel (the segment's backward)."""
    b = TraceBuilder()
    b.op("aten::mm", 0, 20)
    b.kernel("fwd_gemm", 10, 100, launch_at=5)
    b.kernel("fwd_relu", 120, 100, launch_at=12)
    node = "autograd::engine::evaluate_function: MulBackward0"
    b.op(node, 300, 100, tid=BACKWARD_TID)
    b.python("torch/utils/checkpoint.py(1500): recompute_fn", 305, 40, tid=BACKWARD_TID)
    b.kernel("recomputed_gemm", 320, 40, launch_at=310, launch_tid=BACKWARD_TID)
    b.kernel("mul_backward", 370, 60, launch_at=350, launch_tid=BACKWARD_TID)
    b.op("autograd::engine::evaluate_function: CheckpointFunctionBackward", 450, 100, tid=BACKWARD_TID)
    b.kernel("recomputed_conv", 460, 30, launch_at=455, launch_tid=BACKWARD_TID)
    b.op("autograd::engine::evaluate_function: ConvolutionBackward0", 470, 50, tid=BACKWARD_TID)
    b.kernel("conv_backward", 500, 50, launch_at=475, launch_tid=BACKWARD_TID)
    return b


def test_recomputed_kernels_are_those_launched_in_a_recompute_and_not_in_a_backward_node_inside_it(tmp_path):
    result = analyze_trace(checkpointed_step().load(tmp_path)).results["recompute"]
    # by hand: recomputed_gemm (40) and recomputed_conv (30) of 380 µs of device ops in all; the
    # forward phase is the two forward kernels (200 µs)
    assert (result.regions, result.ops, result.recomputed_us) == (2, 2, 70)
    assert result.share_pct == pytest.approx(100 * 70 / 380, abs=0.01)
    assert result.of_forward_pct == pytest.approx(35.0)
    assert result.top == ["recomputed_gemm", "recomputed_conv"]
    assert recompute_sentence(result).startswith("Activation checkpointing runs the forward again 2 times in the "
                                                 "backward: 2 device ops, 70.0 µs, 18.4% of device time (35.0% of the "
                                                 "forward's own), led by recomputed_gemm.")


def test_a_trace_without_checkpointing_has_no_recompute():
    assert analyzed(RESNET_NW0).ranks[0].results["recompute"] is None


def mi300_recompute_by_hand() -> tuple[int, int, float]:
    """(recompute_fn frames, device ops launched inside one on the same thread, their µs), read from
    the JSON with plain Python: a launch's correlation to its device op, its time to the frames."""
    events = json.load(gzip.open(MI300))["traceEvents"]
    frames = [e for e in events if e.get("cat") == "python_function" and re.search(r"checkpoint\.py\(\d+\): "
                                                                                   r"recompute_fn$", e["name"])]
    inside = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and "correlation" in
              e.get("args", {}) and any(f["pid"] == e["pid"] and f["tid"] == e["tid"]
                                        and f["ts"] <= e["ts"] <= f["ts"] + f["dur"] for f in frames)}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
              and e.get("args", {}).get("correlation") in inside]
    return len(frames), len(device), sum(e["dur"] for e in device)


def test_the_mi300_checkpointed_resnet_recomputes_what_a_plain_reader_finds():
    result = analyzed(MI300).ranks[0].results["recompute"]
    frames, ops, time_us = mi300_recompute_by_hand()
    assert (result.regions, result.ops) == (frames, ops) == (12, result.ops) and ops > 0
    assert result.recomputed_us == pytest.approx(time_us, abs=0.01 * ops)  # µs rounded from ns, each op
    phases = analyzed(MI300).ranks[0].results["training_phases"]
    forward = next(p.time_us for p in phases.phases if p.name == "forward")
    assert result.of_forward_pct == pytest.approx(100 * result.recomputed_us / forward, abs=0.01)


def test_the_offline_analyst_answers_a_checkpointing_question_with_the_detectors_numbers():
    analysis = analyzed(MI300)
    text = offline_answer(analysis, "Is activation checkpointing costing me?")
    assert recompute_sentence(analysis.ranks[0].results["recompute"]) in text
    text = offline_answer(analyzed(RESNET_NW0), "How much recomputation is there?")
    assert "no activation-checkpoint recomputation" in text and "with_stack=True" in text


def test_checkpointing_is_asked_with_what_it_checkpoints():
    from traceagent.agent.question import understand
    from traceagent.agent.tools import AnalysisContext

    ctx = AnalysisContext(analyzed(MI300))
    for question in ("Is activation checkpointing costing me?", "Does gradient checkpointing slow it down?",
                     "How much recomputation is there?"):
        assert understand(question, ctx).intent == "detector:recompute", question
    # saving a model checkpoint is another question
    assert understand("How long does saving the checkpoint take?", ctx).intent != "detector:recompute"


def test_what_if_checkpointing_were_off_is_asked_in_words_and_replayed():
    from traceagent.detect.verdict.whatif import parse_change, simulate
    from traceagent.format import duration

    analysis = analyzed(MI300)
    result = simulate(analysis.ranks[0].trace, [parse_change("recompute=0")])
    # the recomputed ops gone: the step shortens by at most about their time per step (what overlapped
    # other work saves less)
    per_step = analysis.ranks[0].results["recompute"].recomputed_us / analysis.ranks[0].results["steps"].count
    assert 0 < result.measured_us - result.predicted_us <= per_step * 1.05
    text = offline_answer(analysis, "What if I turned off activation checkpointing?")
    assert f"**With recompute=0: step {duration(result.measured_us)} → {duration(result.predicted_us)}" in text
