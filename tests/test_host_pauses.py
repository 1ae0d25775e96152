"""Host pauses (a registered detector, detect/registry.py): idle GPU time under Python's garbage
collector and under imports. The trace is built here and the figures worked out by hand."""

from __future__ import annotations

import json

import jsonschema
import pytest
from builder import TraceBuilder

from traceagent import analyze
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.detect.core.encode import to_data
from traceagent.schema import SCHEMAS


def pauses_trace(tmp_path):
    """Kernels at 0-100, 600-700 and 1,000-1,100 µs: two gaps, 100-600 (500 µs) and 700-1,000
    (300 µs), 800 µs of idle. gc.collect runs 150-450: all 300 µs of it under the first gap. An
    import runs 650-900 (a nested one inside it, 700-850): one pause of 250 µs host time, 200 µs
    of it (700-900) under the second gap."""
    b = TraceBuilder()
    b.python("train.py(10): train", 0, 1200)
    b.kernel("gemm", 0, 100, launch_at=0, launch_dur=1)
    b.python("<built-in function collect>", 150, 300)
    b.kernel("gemm", 600, 100, launch_at=550, launch_dur=1)
    b.python("<frozen importlib._bootstrap>(1176): _find_and_load", 650, 250)
    b.python("<frozen importlib._bootstrap>(1147): _find_and_load_unlocked", 700, 150)
    b.kernel("gemm", 1000, 100, launch_at=950, launch_dur=1)
    return b.write(tmp_path / "pauses.json")


def test_gc_and_import_pauses_under_idle_time_worked_out_by_hand(tmp_path):
    analysis = analyze(pauses_trace(tmp_path))
    r = analysis.ranks[0]
    assert r.findings.idle.idle_us == 800.0
    result = r.results["host_pauses"]
    gc, imports = result.pauses
    assert (gc.kind, gc.pauses, gc.host_us, gc.idle_us, gc.share_of_idle_pct) == ("gc", 1, 300.0, 300.0, 37.5)
    assert (imports.kind, imports.pauses, imports.host_us, imports.idle_us, imports.share_of_idle_pct) == (
        "import", 1, 250.0, 200.0, 25.0)
    assert result.idle_us == 500.0 and "gc.freeze()" in gc.next_step
    data = json.loads(json.dumps(analysis.to_dict()))
    assert data["ranks"][0]["host_pauses"] == to_data(result)
    assert data["ranks"][0]["params"]["detectors"]["host_pauses"] == {"min_idle_us": 100.0}
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(data)


def test_the_threshold_is_set_like_any_other_and_the_tool_and_report_say_it(tmp_path, capsys):
    path = pauses_trace(tmp_path)
    only_gc = analyze(path, settings=["host_pauses.min_idle_us=250"]).ranks[0].results["host_pauses"]
    assert [p.kind for p in only_gc.pauses] == ["gc"]  # the import's 200 µs is under 250
    assert main(["analyze", str(path), "--set", "host_pauses.min_idle_us=250", "--json"]) == 0
    assert [p["kind"] for p in json.loads(capsys.readouterr().out)["ranks"][0]["host_pauses"]["pauses"]] == ["gc"]
    with pytest.raises(SystemExit) as usage:  # a usage error, before anything is loaded
        main(["analyze", str(path), "--set", "host_pauses.min_idle=1"])
    assert usage.value.code == 2 and "no parameter 'min_idle'; there are min_idle_us" in capsys.readouterr().err
    analysis = analyze(path)
    tool = {t.name: t for t in build_tools(AnalysisContext(analysis))}["host_pauses"]
    assert json.loads(tool.invoke({}))["pauses"] == to_data(analysis.ranks[0].results["host_pauses"])["pauses"]
    report = tmp_path / "report.md"
    assert main(["report", str(path), "-o", str(report)]) == 0
    text = report.read_text()
    assert "Host pauses" in text and "0.3 ms (37.5% of idle) while Python collected garbage (1 pause)" in text


def test_without_python_frames_the_trace_cannot_say(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100)
    b.kernel("gemm", 600, 100)
    analysis = analyze(b.write(tmp_path / "t.json"))
    assert analysis.ranks[0].results["host_pauses"] is None
    answer = json.loads({t.name: t for t in build_tools(AnalysisContext(analysis))}["host_pauses"].invoke({}))
    assert "with_stack=True" in answer["unavailable"]["how_to_get_it"]
