"""GPU time by op (a registered detector): the device time of what each op launched. A trace built
here with its figures worked out by hand, and a real one against Kineto's own link from each kernel
to its op (the kernel's `external id`), read from the raw JSON in the test."""

from __future__ import annotations

import collections
import functools
import gzip
import json

import pytest
from builder import TraceBuilder
from conftest import DATA, RESNET_NW0, analyzed, offline_answer

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.detect.detectors.kernels import OpHost, detect_hot_kernels, op_host
from traceagent.detect.detectors.op_time import op_time_sentence


def ops_trace(tmp_path):
    """aten::mm called twice, each launching one gemm (20 µs, then 30 µs); aten::copy_ launching a
    10 µs copy; a 40 µs kernel launched outside every op. By hand: 100 µs of device time; aten::mm
    50 µs (50%, 2 calls, 25 µs a call), aten::copy_ 10 µs (10%), 40 µs (40%) launched by no op."""
    b = TraceBuilder()
    b.op("aten::mm", 0, 100)
    b.kernel("sm90_gemm", 20, 20, launch_at=10)
    b.op("aten::mm", 200, 100)
    b.kernel("sm90_gemm", 220, 30, launch_at=210)
    b.op("aten::copy_", 400, 50)
    b.memcpy(420, 10, 1 << 20, launch_at=410)
    b.kernel("custom_kernel", 500, 40, launch_at=480)
    return b.write(tmp_path / "ops.json")


def test_each_ops_device_time_calls_and_share_are_worked_out_by_hand(tmp_path):
    result = analyze(ops_trace(tmp_path), use_cache=False).ranks[0].results["op_time"]
    assert (result.device_time_us, result.ops, result.no_op_us, result.no_op_pct) == (100.0, 2, 40.0, 40.0)
    got = {o.name: (o.device_ops, o.time_us, o.share_pct, o.calls, o.per_call_us, o.top_kernel) for o in result.top}
    assert got == {"aten::mm": (2, 50.0, 50.0, 2, 25.0, "sm90_gemm"),
                   "aten::copy_": (1, 10.0, 10.0, 1, 10.0, "HtoD")}  # a copy by its kind, as the model names it
    assert [o.name for o in result.top] == ["aten::mm", "aten::copy_"]  # most device time first
    said = op_time_sentence(result)
    assert "`aten::mm` 50.0 µs (50.0%, 2 calls, 25.0 µs a call, led by `sm90_gemm`)" in said
    assert said.endswith("40.0% was launched by no recorded op.")


@functools.cache
def resnet_events() -> list[dict]:
    """The ResNet trace's raw events, read with the standard library (the independent reader)."""
    return json.loads(gzip.decompress(RESNET_NW0.read_bytes()))["traceEvents"]


def test_a_real_trace_matches_kinetos_link_from_each_kernel_to_its_op():
    raw = resnet_events()
    op_of = {e["args"]["External id"]: e["name"] for e in raw if e.get("cat") == "Operator" and "External id" in e["args"]}
    expected: collections.Counter = collections.Counter()
    for e in raw:
        if e.get("cat") in ("Kernel", "Memcpy", "Memset") and e.get("ph") == "X":
            expected[op_of.get(e["args"].get("external id"))] += e["dur"]
    result = analyzed(RESNET_NW0).ranks[0].results["op_time"]
    assert result.device_time_us == pytest.approx(sum(expected.values()), abs=0.01)
    for o in result.top[:5]:
        assert o.time_us == pytest.approx(expected[o.name], abs=0.01), o.name


@pytest.mark.parametrize("question, intent", [
    ("Which op takes the most GPU time?", "detector:op_time"), ("What is the most expensive op?", "detector:op_time"),
    ("which operator is slowest?", "detector:op_time"), ("GPU time by op?", "detector:op_time"),
    # the host's time is another detector's
    ("Which op is slowest on the CPU?", "detector:host_ops"),
])
def test_questions_about_ops_by_device_time_reach_it_and_the_hosts_do_not(question, intent):
    assert understand(question, AnalysisContext(analyzed(RESNET_NW0))).intent == intent


def test_the_offline_analyst_answers_with_its_sentence():
    analysis = analyzed(RESNET_NW0)
    answer = offline_answer(analysis, "Which op takes the most GPU time?")
    assert op_time_sentence(analysis.ranks[0].results["op_time"]) in answer


def test_kernels_replayed_from_a_cuda_graph_are_said_apart_with_how_to_name_their_ops(tmp_path):
    # by hand: one graph launch replays two 30 µs kernels, and a 40 µs kernel no op launched runs eagerly:
    # 100 µs launched by no op, 60 of it (60%) replayed from the graph
    b = TraceBuilder()
    b.runtime("cudaGraphLaunch", 0, 10, correlation=9000)
    for start in (20, 50):
        b.kernel("graphed_kernel", start, 30)["args"]["correlation"] = 9000
    b.kernel("eager_kernel", 100, 40, launch_at=90)
    result = analyze(b.write(tmp_path / "graph.json"), use_cache=False).ranks[0].results["op_time"]
    assert (result.no_op_us, result.no_op_pct, result.no_op_graph_pct, result.top) == (100.0, 100.0, 60.0, [])
    assert op_time_sentence(result) == ("No recorded op launched the 100.0 µs of device time (60.0% of it replayed from "
                                        "CUDA graphs: `--graph-capture` with a trace of their capture names their ops).")


def nested_ops_trace(tmp_path):
    """Ops inside ops, as PyTorch records them. By hand: aten::convolution (0–100) around
    aten::cudnn_convolution, whose launch runs conv_fwd 30 µs; aten::convolution_backward around
    aten::cudnn_convolution_backward_input, whose launch runs conv_dgrad 50 µs; a record_function range
    `my_block` around aten::mm, which runs gemm 20 µs; and aten::mm outside the range, gemm 10 µs."""
    b = TraceBuilder()
    b.op("aten::convolution", 0, 100)
    b.op("aten::cudnn_convolution", 10, 80)
    b.kernel("conv_fwd", 30, 30, launch_at=20)
    b.op("aten::convolution_backward", 200, 100)
    b.op("aten::cudnn_convolution_backward_input", 210, 80)
    b.kernel("conv_dgrad", 230, 50, launch_at=220)
    b.op("my_block", 400, 100, cat="user_annotation")
    b.op("aten::mm", 410, 80)
    b.kernel("gemm", 430, 20, launch_at=420)
    b.op("aten::mm", 600, 50)
    b.kernel("gemm", 620, 10, launch_at=610)
    return b.write(tmp_path / "nested.json")


@pytest.mark.parametrize("op, kernels, total_us, host", [
    # the op of that name, not aten::convolution_backward too: 1 call of 100 µs on the host
    ("aten::convolution", {"conv_fwd"}, 30.0, OpHost(1, 100.0)),
    ("ATEN::Convolution", {"conv_fwd"}, 30.0, OpHost(1, 100.0)),  # case aside
    ("aten::cudnn_convolution", {"conv_fwd"}, 30.0, OpHost(1, 80.0)),  # the kernel's own op
    # no op of that name: every op whose name holds it, four calls; a call inside another is counted once
    ("convolution", {"conv_fwd", "conv_dgrad"}, 80.0, OpHost(4, 200.0)),
    ("my_block", {"gemm"}, 20.0, OpHost(1, 100.0)),  # a record_function range: the gemm inside it only
    ("aten::mm", {"gemm"}, 30.0, OpHost(2, 130.0)),
])
def test_an_ops_kernels_are_those_it_launched_itself_or_through_the_ops_inside_it(tmp_path, op, kernels, total_us,
                                                                                   host):
    trace = analyze(nested_ops_trace(tmp_path), use_cache=False).ranks[0].trace
    result = detect_hot_kernels(trace, op_filter=op)
    assert ({k.name for k in result.top}, result.total_us, op_host(trace, op)) == (kernels, total_us, host)


def test_how_long_an_op_around_the_launching_one_takes_is_answered_with_its_kernels(tmp_path):
    analysis = analyze(nested_ops_trace(tmp_path), use_cache=False)
    question = understand("How long does aten::convolution take?", AnalysisContext(analysis))
    assert (question.intent, question.op) == ("op", "aten::convolution")
    answer = offline_answer(analysis, "How long does aten::convolution take?")
    # by hand: 30 µs of the trace's 30 + 50 + 20 + 10 = 110 µs of device time is 27.3%
    assert ("**`aten::convolution`** launched 1 kernel (1 distinct), itself or through the ops inside, for 30.0 µs "
            "of device time (27.3% of the rank's device time). Its 1 call took 100.0 µs on the host") in answer


def test_on_a_real_trace_an_op_around_the_launches_holds_the_kernels_of_the_ops_inside_it():
    # ResNet's forward convolutions: aten::conv2d > aten::convolution > aten::_convolution > aten::cudnn_convolution,
    # which launches; every launch under aten::cudnn_convolution is under aten::convolution (checked independently:
    # the raw events' intervals on the launching thread)
    trace = analyzed(RESNET_NW0).ranks[0].trace
    inner, outer = (detect_hot_kernels(trace, top=50, op_filter=op) for op in ("aten::cudnn_convolution", "aten::convolution"))
    assert outer.kernels == inner.kernels > 0 and outer.total_us == inner.total_us
    raw = resnet_events()
    convs = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in raw if e.get("name") == "aten::convolution"]
    launches = {e["args"]["correlation"]: (e["tid"], e["ts"]) for e in raw
                if e.get("cat") == "Runtime" and e.get("name") == "cudaLaunchKernel"}
    under = [launches[e["args"]["correlation"]] for e in raw if e.get("cat") == "Kernel"
             and e["args"].get("correlation") in launches]
    inside = sum(1 for tid, ts in under if any(t == tid and s <= ts <= end for t, s, end in convs))
    assert outer.kernels == inside


def test_an_ops_calls_and_host_time_are_the_host_ops_detectors_for_every_op_it_lists():
    # two readers of the same quantity: op_host (ranges by name, each thread's union) and host_ops' total
    # (its own pass over the launching threads' events); on BERT every host op runs on the launching thread
    rank = analyzed(DATA / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz").ranks[0]
    listed = [o for o in rank.results["host_ops"].top if o.kind == "op"]
    assert len(listed) >= 3
    assert [op_host(rank.trace, o.name) for o in listed] == [OpHost(o.calls, o.total_us) for o in listed]
