"""The tools the model calls: schemas a model can act on (every argument described, choices as
enums), and each newer tool on a real trace against an independent reading of the raw file."""

from __future__ import annotations

import json
import statistics

import pytest
from builder import TraceBuilder
from conftest import B200, DATA, DLRM_8RANK, NSYS_AFTER, NSYS_BEFORE, RESNET_NW0, RESNET_NW4, analyzed
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ValidationError
from rawtrace import events

from traceagent import analyze
from traceagent.agent.tools import MAX_STRING, AnalysisContext, ToolInputError, build_tools
from traceagent.detect.core.view import pct
from traceagent.detect.core.vocabulary import GAP_CAUSES

BERT = DATA / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"


def tools_of(path, other=None) -> dict:
    return {t.name: t for t in build_tools(AnalysisContext(analyzed(path), analyzed(other) if other else None))}


def call(tools: dict, name: str, **args) -> dict:
    return json.loads(tools[name].invoke(args))


def _enum(spec: dict) -> list:
    return next(s["enum"] for s in spec.get("anyOf", [spec]) if "enum" in s)


def test_every_argument_is_described_and_choices_are_enums():
    tools = tools_of(RESNET_NW0, RESNET_NW4)
    schemas = {name: convert_to_openai_tool(t)["function"] for name, t in tools.items()}
    assert {"launches", "annotations", "calc", "compare_traces", "steps"} <= set(schemas)
    for name, schema in schemas.items():
        assert schema["description"], name
        for arg, spec in schema["parameters"]["properties"].items():
            assert spec.get("description"), f"{name}({arg}) has no description"
        if name not in ("calc", "scaling"):  # arithmetic, and whole jobs at two sizes: not about a part of a trace
            assert {"rank", "device"} <= set(schema["parameters"]["properties"]), name
    props = {name: s["parameters"]["properties"] for name, s in schemas.items()}
    assert _enum(props["idle_gaps"]["cause"]) == list(GAP_CAUSES)
    assert _enum(props["data_movement"]["kind"]) == ["HtoD", "DtoH", "DtoD", "HtoH", "PtoP"]
    assert "pct" in _enum(props["calc"]["unit"])
    with pytest.raises(ValidationError, match="dataloader"):  # a typo is an error, not 0 gaps
        tools["idle_gaps"].invoke({"cause": "dataloadr"})


def test_launch_statistics_match_the_raw_launch_calls():
    raw = events(RESNET_NW0)
    launches = {e["args"]["correlation"]: e for e in raw if e.get("name") == "cudaLaunchKernel"}
    kernels = [e for e in raw if e.get("cat", "").lower() == "kernel" and e["args"].get("correlation") in launches]
    data = call(tools_of(RESNET_NW0), "launches")
    assert data["kernels"] == len(kernels) and data["by_call"] == {"cudaLaunchKernel": len(kernels)}
    call_durs = [launches[k["args"]["correlation"]]["dur"] for k in kernels]
    assert data["median_launch_us"] == pytest.approx(statistics.median(call_durs), abs=1e-3)
    shorter = sum(k["dur"] < launches[k["args"]["correlation"]]["dur"] for k in kernels)
    assert data["short_kernel_pct"] == pytest.approx(100 * shorter / len(kernels), abs=0.01)
    assert data["scope"] == {"rank": 0, "device": "all", "devices": [0]}


def test_each_step_is_compared_with_the_median_step():
    steps = {int(e["name"].split("#")[1]): e["dur"] for e in events(RESNET_NW0) if e["name"].startswith("ProfilerStep#")}
    median = statistics.median(steps.values())
    data = call(tools_of(RESNET_NW0), "steps")
    assert {row["step"] for row in data["steps"]} == set(steps)
    for row in data["steps"]:
        assert row["vs_median_pct"] == pytest.approx((steps[row["step"]] / median - 1) * 100, abs=0.01)
        owned = sum(row["idle_by_cause_us"].values())
        assert owned == pytest.approx(row["idle_us"], abs=0.01)  # the gaps a step owns, by cause


def test_annotations_give_the_gpu_time_launched_inside_each_range():
    raw = events(B200)
    calls = {e["args"]["correlation"]: e for e in raw
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    kernels = [(calls[k["args"]["correlation"]], k["dur"]) for k in raw
               if k.get("cat") == "kernel" and k["args"].get("correlation") in calls]
    data = call(tools_of(B200), "annotations", top=25)
    assert data["ranges"]
    for r in data["ranges"][:5]:  # the independent reading: kernels whose launch call lies inside the range
        ranges = [e for e in raw if e.get("cat") == "user_annotation" and e["name"] == r["name"]]
        gpu = sum(dur for c, dur in kernels for a in ranges
                  if c["tid"] == a["tid"] and a["ts"] <= c["ts"] <= a["ts"] + a["dur"])
        assert (r["count"], r["gpu_us"]) == (len(ranges), pytest.approx(gpu, abs=0.01)), r["name"]


def test_a_name_asked_finds_host_ranges_of_any_kind(tmp_path):
    """Built by hand: two 300 µs `Optimizer.zero_grad#SGD.zero_grad` ops (record_function as older traces record
    it: an op, no annotation), each launching one 20 µs fill kernel, and an annotation elsewhere. Asked by a word
    of its name: 2 calls, 600 µs on the host, 40 µs of GPU work from 2 kernels; a word nothing holds: no range."""
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 2000)
    for start in (100, 1100):
        b.op("Optimizer.zero_grad#SGD.zero_grad", start, 300)
        b.kernel("fill_kernel", start + 50, 20, launch_at=start + 10)
    b.op("forward", 500, 400, cat="user_annotation")
    tools = {t.name: t for t in build_tools(AnalysisContext(analyze(b.write(tmp_path / "t.json"))))}
    (found,) = call(tools, "annotations", name_filter="zero_grad")["ranges"]
    assert (found["name"], found["count"], found["host_us"], found["gpu_us"], found["kernels"]) == (
        "Optimizer.zero_grad#SGD.zero_grad", 2, 600.0, 40.0, 2)
    assert call(tools, "annotations", name_filter="sampler")["ranges"] == []
    assert [r["name"] for r in call(tools, "annotations")["ranges"]] == []  # unfiltered: annotations only (none ran GPU work)


def test_a_trace_without_annotations_says_how_to_get_them():
    data = call(tools_of(RESNET_NW0), "annotations")
    assert data["ranges"] == [] and "record_function" in data["unavailable"]["how_to_get_it"]
    nsys = call(tools_of(NSYS_BEFORE), "steps")
    assert nsys["count"] == 0 and "prof.step()" in nsys["unavailable"]["how_to_get_it"]
    whats = [u["what"] for u in call(tools_of(NSYS_BEFORE), "overview")["unavailable"]]
    assert {"the Python line", "per-step times"} <= set(whats)
    whats = [u["what"] for u in call(tools_of(RESNET_NW0), "overview")["unavailable"]]
    assert "time per code region" in whats and "per-step times" not in whats  # it has steps and frames


def test_hot_kernels_give_short_names_and_the_python_line():
    tools = tools_of(B200)
    short = call(tools, "hot_kernels", top=3)
    assert all("name" not in k and k["short_name"] for k in short["top"])
    full = call(tools, "hot_kernels", top=3, full_names=True)
    assert all(len(k["name"]) >= len(k["short_name"]) for k in full["top"])
    assert full["top"][0]["python"].startswith("flashinfer/fused_moe/core.py(")  # B200 was profiled with stacks


def test_no_trace_string_reaches_the_model_whole(tmp_path):
    b = TraceBuilder()
    b.kernel("void huge<" + "float, " * 150_000 + "int>(int)", 0, 900)  # a 1 MB name
    tools = {t.name: t for t in build_tools(AnalysisContext(analyze(b.write(tmp_path / "t.json"), use_cache=False)))}
    text = tools["hot_kernels"].invoke({"full_names": True})
    name = json.loads(text)["top"][0]["name"]
    assert len(name) < MAX_STRING + 40 and name.endswith("characters)") and len(text) < 5000


def test_our_own_sentences_reach_the_model_whole():
    """A verdict's hypothesis and next step run past MAX_STRING on the BERT trace (its Python frames
    named): the model reads them whole, every figure in them, as the analysis wrote them."""
    analysis = analyzed(BERT)
    verdict = analysis.verdict
    assert max(len(verdict.hypothesis), len(verdict.next_step)) > MAX_STRING  # else this test shows nothing
    told = call(tools_of(BERT), "verdict")
    assert told["hypothesis"] == verdict.hypothesis and told["next_step"] == verdict.next_step


def test_calc_computes_only_from_numbers_tools_returned():
    ctx = AnalysisContext(analyzed(RESNET_NW0))
    tools = {t.name: t for t in build_tools(ctx)}
    idle = json.loads(tools["idle_gaps"].invoke({}))
    ctx.sources.add_result(json.dumps(idle))  # as the session records each result
    loader, span = idle["by_cause_us"]["dataloader"], idle["span_us"]
    result = json.loads(tools["calc"].invoke({"expression": f"{loader:g} / {span:g} * 100", "unit": "pct"}))
    assert result["result_pct"] == pytest.approx(loader / span * 100)
    with pytest.raises(ToolInputError, match="12345: not a value any tool returned"):
        tools["calc"].invoke({"expression": f"{loader:g} / 12345", "unit": "x"})
    with pytest.raises(ToolInputError, match="only numbers"):
        tools["calc"].invoke({"expression": "__import__('os').system('true')"})
    with pytest.raises(ToolInputError, match="division by zero"):
        tools["calc"].invoke({"expression": f"{loader:g} / 0"})


def test_compare_traces_gives_each_trace_its_own_share():
    before, after = analyzed(NSYS_BEFORE), analyzed(NSYS_AFTER)
    data = call(tools_of(NSYS_BEFORE, NSYS_AFTER), "compare_traces")
    kernel = before.verdict.evidence["kernel"]
    span_after = sum(r.findings.idle.device_time_us for r in after.ranks)
    time_after = sum(k.total_us for r in after.ranks for k in r.findings.kernels.top if k.name == kernel)
    assert data["root_cause"]["after_pct"] == pct(time_after, span_after)  # the after time over the after span
    row = next(k for k in data["kernels"] if k["short_name"] == "flash_fwd_kernel")
    # the after capture holds less work than the before's: its times are scaled to the before's work
    total_after = sum(r.findings.kernels.total_us for r in after.ranks) / (data["work"]["ratio"] if data["work"] else 1)
    assert row["after_share_pct"] == pytest.approx(100 * row["after_us"] / total_after, abs=0.01)
    assert row["before_share_pct"] != row["after_share_pct"]
    assert row["before_count"] > 0 and row["after_count"] > 0


def test_the_gaps_of_a_step_are_the_ones_steps_gives_it(tmp_path):
    # two steps; before step 2's first kernel the host loads data for 1,790 µs. By hand: step 1
    # runs a kernel 100-900; step 2's kernel starts at 2,900, so the gap 900-2,900 (2,000 µs)
    # comes before step 2's first device work: it is step 2's, in `steps` and in idle_gaps(step=2)
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 1000)
    b.kernel("gemm", 100, 800, launch_at=50)
    b.op("ProfilerStep#2", 1000, 3000)
    b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1010, 1790)
    b.kernel("gemm", 2900, 600, launch_at=2850)
    tools = {t.name: t for t in build_tools(AnalysisContext(analyze(b.write(tmp_path / "t.json"))))}
    steps = json.loads(tools["steps"].invoke({}))
    step2 = next(s for s in steps["steps"] if s["step"] == 2)
    assert step2["idle_us"] == 2000.0 and step2["idle_by_cause_us"]["dataloader"] == 2000.0
    gaps = json.loads(tools["idle_gaps"].invoke({"step": 2}))
    assert gaps["matching_gaps"] == 1 and gaps["matching_idle_us"] == step2["idle_us"]
    assert gaps["top_gaps"][0]["cause"] == "dataloader"
    assert json.loads(tools["idle_gaps"].invoke({"step": 1}))["matching_gaps"] == 0  # step 1 has no gap


def test_tool_json_keeps_units_as_they_read_and_escapes_what_no_one_sees():
    # a small model copies "\u00b5s" into its answer as written; a bidi override or a line
    # separator from a trace's names must not reach the model raw
    from traceagent.agent.tools import dumps

    text = dumps({"gap": "397.3 µs on GPU 2", "name": "k\u202eevil\u2028x", "x": "2×"})
    assert json.loads(text) == {"gap": "397.3 µs on GPU 2", "name": "k\u202eevil\u2028x", "x": "2×"}
    assert "µs" in text and "2×" in text and "\u202e" not in text and "\u2028" not in text and "\\u202e" in text


def test_a_gpu_named_without_its_rank_is_the_rank_that_owns_it():
    """DLRM's eight ranks each run one GPU (GPU n on rank n): a tool asked for GPU 3 alone answers of
    rank 3 (not "rank 7, the verdict's, has no GPU 3"); a GPU no rank has is still an error."""
    tools = tools_of(DLRM_8RANK)
    answer = call(tools, "hot_kernels", device=3, top=1)
    assert (answer["scope"]["rank"], answer["scope"]["device"]) == (3, 3)
    assert answer["kernels"] == analyzed(DLRM_8RANK).rank(3).hot_kernels(device=3).kernels
    with pytest.raises(ToolInputError, match="has no GPU 9"):
        call(tools, "hot_kernels", device=9)
