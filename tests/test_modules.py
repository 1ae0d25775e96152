"""Device time by module (a registered detector): the device ops launched inside each nn.Module
call, its children's included. The trace is built here and the figures worked out by hand."""

from __future__ import annotations

import json

import jsonschema
from builder import TraceBuilder
from conftest import offline_answer

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.detect.core.encode import to_data
from traceagent.schema import SCHEMAS


def model_trace(tmp_path):
    """Model_0 (0-1000 µs) holds Layer_0 (0-400) and Layer_1 (400-800), each holding an Attention
    (5-15, 405-415). Launches: at 10 (100 µs kernel, inside Attention_0), 20 (50 µs, Layer_0 only),
    410 (100 µs, Attention_1), 900 (25 µs, Model only), 1100 (25 µs, outside every module).
    Device time 300 µs; Model 275, Layer 250 over 2 calls (150 and 100), Attention 200 over 2."""
    b = TraceBuilder()
    b.python("nn.Module: Model_0", 0, 1000)
    b.python("nn.Module: Layer_0", 0, 400)
    b.python("nn.Module: Attention_0", 5, 10)
    b.python("nn.Module: Layer_1", 400, 400)
    b.python("nn.Module: Attention_1", 405, 10)
    for at, start, dur in [(10, 10, 100), (20, 110, 50), (410, 410, 100), (900, 900, 25), (1100, 1100, 25)]:
        b.kernel("sm90_xmma_gemm_bf16", start, dur, launch_at=at, launch_dur=2)
    return b.write(tmp_path / "model.json")


def test_each_module_type_s_time_holds_its_children_and_is_worked_out_by_hand(tmp_path):
    analysis = analyze(model_trace(tmp_path))
    result = analysis.ranks[0].results["modules"]
    assert result.device_time_us == 300.0
    assert [(m.name, m.calls, m.device_us, m.mean_device_us, m.max_device_us, m.host_us, m.share_pct)
            for m in result.modules] == [("Model", 1, 275.0, 275.0, 275.0, 1000.0, 91.67),
                                         ("Layer", 2, 250.0, 125.0, 150.0, 800.0, 83.33),
                                         ("Attention", 2, 200.0, 100.0, 100.0, 20.0, 66.67)]
    assert result.slowest_per_call == "Layer"  # the model's single call is not a layer
    assert [m.longest_call for m in result.modules] == ["Model_0", "Layer_0", "Attention_0"]  # ties: the first call
    data = json.loads(json.dumps(analysis.to_dict()))
    assert data["ranks"][0]["modules"] == to_data(result)
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(data)


def test_the_tool_and_the_offline_analyst_say_the_same_and_a_trace_without_modules_cannot(tmp_path):
    analysis = analyze(model_trace(tmp_path))
    ctx = AnalysisContext(analysis)
    tool = {t.name: t for t in build_tools(ctx)}["modules"]
    assert json.loads(tool.invoke({}))["modules"] == to_data(analysis.ranks[0].results["modules"])["modules"]

    for question in ("Which decoder layer is slowest?", "How much time is spent in the MLP?", "Which block is slowest?"):
        assert understand(question, ctx).intent == "detector:modules", question
    text = offline_answer(analysis, "Which layer is the slowest?")
    assert "Layer, 2 calls, 250.0 µs (83.3% of device time), 125.0 µs a call" in text
    assert "The slowest of the modules called more than once: Layer, 125.0 µs a call (longest 150.0 µs, Layer_0)" in text
    b = TraceBuilder()
    b.kernel("sm90_xmma_gemm_bf16", 0, 100, launch_at=0)
    bare = analyze(b.write(tmp_path / "bare.json"))
    assert bare.ranks[0].results["modules"] is None
    answer = json.loads({t.name: t for t in build_tools(AnalysisContext(bare))}["modules"].invoke({}))
    assert "with_modules=True" in answer["unavailable"]["how_to_get_it"]


def test_the_report_says_it_once_in_its_section_with_trace_strings_shown_as_written(tmp_path):
    b = TraceBuilder()
    b.python("nn.Module: *Evil*_[x](http://e)_0", 0, 200)
    b.kernel("sm90_xmma_gemm_bf16", 0, 100, launch_at=1)
    path = b.write(tmp_path / "evil.json")
    assert main(["report", str(path), "-o", str(tmp_path / "report.md")]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.count("By module (nn.Module ranges") == 1  # in its section, not again among the findings
    assert r"\*Evil\*\_\[x\](http://e), 1 call" in text and "| `*Evil*_[x](http://e)` |" in text


def test_a_call_inside_a_call_of_its_own_type_counts_once(tmp_path):
    """vLLM's piecewise graphs nest GraphModules: the inner call's 100 µs kernel is the outer's work,
    so the type has one call of 100 µs (100% of device time), not 200 µs (200%)."""
    b = TraceBuilder()
    b.python("nn.Module: GraphModule_0", 0, 300)
    b.python("nn.Module: GraphModule_1", 10, 90)
    b.kernel("triton_poi_fused_add_0", 20, 100, launch_at=20)
    (graph,) = analyze(b.write(tmp_path / "nested.json")).ranks[0].results["modules"].modules
    assert (graph.name, graph.calls, graph.device_us, graph.share_pct) == ("GraphModule", 1, 100.0, 100.0)


def test_the_layers_are_the_distinct_instances_of_the_repeated_block(tmp_path):
    """By hand: two forward passes of Model_0, each through Block_0, Block_1 and Block_2 (and a Linear_0
    inside each block, called more often but no block): Block is called 6 times, 3 distinct instances,
    so 3 layers; a trace built from model_trace has Layer_0 and Layer_1: 2."""
    b = TraceBuilder()
    for base in (0, 1000):
        b.python("nn.Module: Model_0", base, 900)
        for i in range(3):
            b.python(f"nn.Module: Block_{i}", base + 300 * i, 250)
            b.python("nn.Module: Linear_0", base + 300 * i + 10, 100)
            b.kernel("gemm", base + 300 * i + 20, 50 + i, launch_at=base + 300 * i + 15, launch_dur=2)
    analysis = analyze(b.write(tmp_path / "passes.json"))
    result = analysis.ranks[0].results["modules"]
    assert (result.layer, result.layers) == ("Block", 3)
    assert next(m for m in result.modules if m.name == "Block").calls == 6
    assert offline_answer(analysis, "How many layers does the model have?").startswith(
        "**3 layers** of `Block` (the distinct instances of the model's repeated block that the trace ran).")
    result = analyze(model_trace(tmp_path)).ranks[0].results["modules"]
    assert (result.layer, result.layers) == ("Layer", 2)
