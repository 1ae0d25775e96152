"""Inference phases: SGLang and vLLM steps split into prefill, decode and mixed, checked against an
independent reading of the raw JSON; a launch-bound decode gets CUDA-graph advice, a graphed one not."""

from __future__ import annotations

from pathlib import Path

import pytest
from builder import TraceBuilder
from conftest import DATA
from rawtrace import events, length, union

import traceagent
from traceagent.detect.detectors.phases import phases_sentence

SGLANG_DECODE = DATA / "tracelens" / "mi300_sglang_Qwen3-8B_decode.json.gz"
SGLANG_PREFILL = DATA / "tracelens" / "mi300_sglang_Qwen3-8B_prefilldecode.json.gz"
VLLM_MIXED = DATA / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_execution.json.gz"
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}


def raw_reading(path: Path, step_name: str) -> dict:
    """The step range named `step_name`, widened to the device work its runtime calls launched; in
    it: busy share (device events' union), kernel time replayed from graphs (kernels carrying a
    hipGraphLaunch's correlation) and the top kernel's share. Read with the json module alone."""
    evs = list(events(path))
    step = next(e for e in evs if e.get("cat") == "user_annotation" and e["name"] == step_name)
    lo, hi = step["ts"], step["ts"] + step["dur"]
    calls = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    device = [e for e in evs if e.get("cat") in DEVICE]
    launched = [e for e in device if lo <= calls.get(e["args"].get("correlation"), {"ts": -1})["ts"] < hi]
    lo, hi = min([lo] + [e["ts"] for e in launched]), max([hi] + [e["ts"] + e["dur"] for e in launched])
    busy = union([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in device if e["ts"] < hi and e["ts"] + e["dur"] > lo])
    graphs = {c for c, e in calls.items() if e["name"] == "hipGraphLaunch"}
    kernels = [e for e in device if e["cat"] == "kernel" and lo <= e["ts"] < hi]
    total = sum(e["dur"] for e in kernels)
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + e["dur"]
    return {"busy_pct": 100 * length(busy) / (hi - lo),
            "graph_pct": 100 * sum(e["dur"] for e in kernels if e["args"].get("correlation") in graphs) / total,
            "top": max(by_name, key=by_name.__getitem__), "top_pct": 100 * max(by_name.values()) / total}


@pytest.mark.parametrize("path, phase, tokens", [(SGLANG_DECODE, "decode", 32), (SGLANG_PREFILL, "prefill", 15360)])
def test_sglang_steps_are_split_into_phases_with_figures_read_from_the_raw_json(path, phase, tokens):
    analysis = traceagent.analyze(path)
    [p] = analysis.focus.results["phases"].phases
    # SGLang wraps its step[DECODE bs=32] in a wider execute_32_context_0(…)_generation_32(…) range: the outer one is the step
    [step_name] = analysis.focus.trace.steps["name"].astype(str)
    assert step_name.startswith("execute_")
    raw = raw_reading(path, step_name)
    assert (p.phase, p.steps, p.tokens) == (phase, 1, tokens)
    assert p.busy_pct == pytest.approx(raw["busy_pct"], abs=0.02)
    assert p.graph_kernel_pct == pytest.approx(raw["graph_pct"], abs=0.02)
    assert p.top_kernels[0].name == raw["top"] and p.top_kernels[0].share_pct == pytest.approx(raw["top_pct"], abs=0.02)
    assert not p.launch_bound


def test_a_vllm_step_with_prefill_and_decode_requests_is_mixed_and_replayed_from_graphs():
    analysis = traceagent.analyze(VLLM_MIXED)
    [p] = analysis.focus.results["phases"].phases
    assert (p.phase, p.tokens) == ("mixed", 8192)  # execute_8192_context_9(…)_generation_37(…)
    assert p.graph_kernel_pct > 90 and not p.launch_bound
    assert analysis.verdict.limiter != "idle" and analysis.verdict.root_cause != "launch_overhead"
    # its graph-replayed matmuls have no op with shapes: the phase's MFU counts one aten::mm and says it is a lower bound,
    # as the rank's MFU does (most of the rank's matmul time ran outside the counted ops)
    assert analysis.focus.findings.flops.uncounted_pct > 90
    assert p.mfu_pct is not None and p.mfu_lower_bound
    assert f"MFU {p.mfu_pct:.1f}% (a lower bound)" in phases_sentence(analysis.focus.results["phases"])


def test_a_phase_whose_matmuls_are_counted_has_an_mfu_that_is_not_a_bound():
    [p] = traceagent.analyze(SGLANG_PREFILL).focus.results["phases"].phases
    assert p.mfu_pct is not None and not p.mfu_lower_bound


def decode_steps(tmp_path: Path, graphed: bool) -> Path:
    """Ten decode steps of 40 tiny kernels each, 2 µs kernels behind 10 µs launches (launch-bound),
    or the same kernels replayed from one graph launch per step."""
    b = TraceBuilder("NVIDIA H100 80GB HBM3")
    for step in range(10):
        t0 = step * 1000
        b.op("step[DECODE bs=8]", t0, 900, cat="user_annotation")
        if graphed:
            b.runtime("cudaGraphLaunch", t0 + 5, 10, correlation=10_000 + step)
            for k in range(40):
                event = b.kernel("decode_kernel", t0 + 20 + 3 * k, 2)
                event["args"]["correlation"] = 10_000 + step
        else:
            for k in range(40):
                b.kernel("decode_kernel", t0 + 20 + 12 * k, 2, launch_at=t0 + 8 + 12 * k, launch_dur=10)
    return b.write(tmp_path / f"decode_{graphed}.json")


def test_a_launch_bound_decode_gets_cuda_graph_advice_and_a_graphed_one_does_not(tmp_path):
    eager = traceagent.analyze(decode_steps(tmp_path, graphed=False), use_cache=False).focus.results["phases"]
    graphed = traceagent.analyze(decode_steps(tmp_path, graphed=True), use_cache=False).focus.results["phases"]
    [e], [g] = eager.phases, graphed.phases
    assert (e.phase, e.steps, e.tokens) == ("decode", 10, 80)
    assert e.launch_bound and "CUDA graphs" in e.next_step and e.graph_kernel_pct == 0.0
    assert g.graph_kernel_pct == 100.0 and not g.launch_bound


def test_vllm_steps_named_by_requests_and_tokens_split_into_prefill_decode_and_mixed(tmp_path):
    """vLLM's execute_context_N(T)_generation_M(T) ranges: 2 prefill steps, 6 decode steps and 1
    mixed one, each with kernels of known length; per-phase figures worked out by hand."""
    b = TraceBuilder("NVIDIA H100 80GB HBM3")
    names = (["execute_context_2(512)_generation_0(0)"] * 2 + ["execute_context_0(0)_generation_8(8)"] * 6
             + ["execute_context_1(128)_generation_7(7)"])
    for i, name in enumerate(names):
        t0 = i * 1000
        b.op(name, t0, 900, cat="user_annotation")
        work = 600 if "generation_0" in name else 100  # prefill kernels run 600 µs, decode 100 µs
        b.kernel("step_kernel", t0 + 50, work, launch_at=t0 + 10, launch_dur=5)
    phases = {p.phase: p for p in traceagent.analyze(b.write(tmp_path / "vllm.json"),
                                                      use_cache=False).focus.results["phases"].phases}
    assert (phases["prefill"].steps, phases["prefill"].tokens) == (2, 2 * 512)
    assert (phases["decode"].steps, phases["decode"].tokens) == (6, 6 * 8)
    assert (phases["mixed"].steps, phases["mixed"].tokens) == (1, 128 + 7)
    busy = {name: p.busy_pct * p.device_us / 100 for name, p in phases.items()}  # kernel time in each phase
    assert busy == pytest.approx({"prefill": 2 * 600, "decode": 6 * 100, "mixed": 100}, abs=1)


def test_tokens_per_second_count_each_step_until_its_gpu_work_is_done(tmp_path):
    """Four decode steps of 8 tokens whose host ranges last 100 µs each, back to back, while each
    step's one kernel takes 300 µs: the GPU falls behind. By hand, step k's window runs from its
    start (100·k) to its kernel's end (50 + 300·(k+1)): [0, 350], [100, 650], [200, 950], [300, 1250],
    one stretch of 1250 µs. 32 tokens in 1250 µs is 25,600 tokens/s (the host ranges alone, 400 µs,
    would say 80,000), 312.5 µs a step."""
    b = TraceBuilder("NVIDIA H100 80GB HBM3")
    for k in range(4):
        b.op("step[DECODE bs=8]", 100 * k, 100, cat="user_annotation")
        b.kernel("decode_kernel", 50 + 300 * k, 300, launch_at=100 * k + 10, launch_dur=5)
    [p] = traceagent.analyze(b.write(tmp_path / "behind.json"), use_cache=False).focus.results["phases"].phases
    assert (p.phase, p.steps, p.tokens) == ("decode", 4, 32)
    assert (p.tokens_per_s, p.mean_step_us) == (25600.0, 312.5)
