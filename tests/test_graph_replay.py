"""Kernels replayed from CUDA/HIP graphs: their op comes from the graph's capture (in the trace or in
a separate capture trace), else from the same kernel launched outside graphs, and the report says which."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from builder import TraceBuilder
from conftest import DATA
from rawtrace import events

import traceagent
from traceagent.cli import main
from traceagent.report.markdown import render_markdown

EXECUTION = DATA / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_execution.json.gz"
CAPTURE = DATA / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_capture.json.gz"


def capture_reading(path: Path) -> dict[str, str]:
    """Kernel name → the most common cpu_op carrying the same External id as the launch call that
    recorded the kernel during capture: Kineto's own link, read with the json module alone."""
    evs = list(events(path))
    ops = {e["args"]["External id"]: e["name"] for e in evs if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    counts: dict[str, Counter] = {}
    for e in evs:
        args = e.get("args", {})
        if e.get("cat") == "cuda_runtime" and "kernel" in args and args.get("External id") in ops:
            counts.setdefault(args["kernel"], Counter())[ops[args["External id"]]] += 1
    return {kernel: c.most_common(1)[0][0] for kernel, c in counts.items()}


def test_replayed_kernels_take_their_ops_from_a_separate_capture_trace():
    plain = traceagent.analyze(EXECUTION)
    assert all(k.op is None for k in plain.focus.findings.kernels.top if k.op_from != "launch")  # a replay names no op
    analysis = traceagent.analyze(EXECUTION, graph_capture=CAPTURE)
    expected = capture_reading(CAPTURE)
    replayed = [k for k in analysis.focus.findings.kernels.top if k.op_from == "capture"]
    assert len(replayed) >= 5
    for k in replayed:
        assert k.op == expected[k.name], k.short_name
    assert "(graph capture)" in render_markdown(analysis)
    assert analysis.verdict.limiter == "compute" and analysis.verdict.root_cause != "launch_overhead"


def test_without_a_capture_a_replayed_kernel_takes_the_op_that_launches_it_eagerly(tmp_path):
    b = TraceBuilder()
    mm = b.op("aten::mm", 0, 50)
    b.kernel("gemm_kernel", 20, 10, launch_at=10)  # launched inside aten::mm (warm-up, outside graphs)
    b.op("decode_step", 100, 200, cat="user_annotation")
    b.runtime("cudaGraphLaunch", 110, 10, correlation=500)
    for i in range(3):
        b.kernel("gemm_kernel", 130 + 20 * i, 10)["args"]["correlation"] = 500
    assert mm["name"] == "aten::mm"
    trace = b.load(tmp_path)
    replay = trace.gpu[trace.gpu["correlation"] == 500]
    assert set(replay["op"].astype(str)) == {"aten::mm"} and set(replay["op_from"].astype(str)) == {"kernel name"}
    eager = trace.gpu[(trace.gpu["correlation"] != 500).to_numpy() & (trace.gpu["kind"] == "kernel").to_numpy()]
    assert set(eager["op_from"].astype(str)) == {"launch"}


def test_a_capture_that_is_not_a_trace_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "capture.json"
    bad.write_text("not json")
    assert main(["analyze", str(EXECUTION), "--graph-capture", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "capture.json" in err and "Traceback" not in err


def test_a_graph_whose_kernels_never_run_eagerly_leaves_them_without_an_op(tmp_path):
    b = TraceBuilder()
    b.runtime("cudaGraphLaunch", 10, 10, correlation=7)
    b.kernel("only_in_graphs", 30, 5)["args"]["correlation"] = 7
    trace = b.load(tmp_path)
    assert trace.gpu["op"].isna().all() and trace.gpu["op_from"].isna().all()


def test_the_chat_loads_a_capture_in_its_child_process_as_analyze_does():
    from traceagent.request import AnalyzeRequest
    from traceagent.tui.loader import load_in_child

    analysis, _ = load_in_child(AnalyzeRequest(str(EXECUTION), graph_capture=str(CAPTURE)))
    expected = traceagent.analyze(EXECUTION, graph_capture=CAPTURE).focus.findings.kernels.top
    assert [(k.name, k.op, k.op_from) for k in analysis.focus.findings.kernels.top] == \
        [(k.name, k.op, k.op_from) for k in expected]
    assert any(k.op_from == "capture" for k in expected)


def test_a_graph_replays_kernels_have_one_launch_latency_and_no_launch_cost_of_their_own(tmp_path):
    # by hand: a cudaGraphLaunch at 0-10 µs replays three 5 µs kernels from 20, 25 and 30; a
    # cudaLaunchKernel at 100-105 launches a 2 µs kernel at 110. Latency: the replay's first kernel
    # (20 µs) and the plain one (10 µs), median 15 (not 22.5 over every node); launch cost and
    # "shorter than its launch": the plain kernel's alone (5 µs, 1 of 1), not the graph call's 10 µs
    from traceagent.detect.detectors.launch import detect_launch

    b = TraceBuilder()
    b.runtime("cudaGraphLaunch", 0, 10, correlation=99)
    for start in (20, 25, 30):
        b._x("kernel", f"node_{start}", start, 5, pid=0, tid=7, device=0, stream=7, correlation=99)
    b.kernel("plain", 110, 2, launch_at=100, launch_dur=5)
    result = detect_launch(b.load(tmp_path))
    assert (result.kernels, result.by_call) == (4, {"cudaGraphLaunch": 3, "cudaLaunchKernel": 1})
    assert (result.median_latency_us, result.median_launch_us, result.median_kernel_us) == (15.0, 5.0, 2.0)
    assert result.short_kernel_pct == 100.0
