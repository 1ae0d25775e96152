"""The public surface: `traceagent.analyze` as the README shows it, the command's options, and one
analysis read the same way by every layer when it runs with non-default parameters."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import RESNET_NW0, analyzed

import traceagent
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.format import duration
from traceagent.report.html import render_html
from traceagent.tui.widgets.timeline import timeline_data


def test_analyze_a_trace_file_as_the_readme_shows(capsys):
    analysis = traceagent.analyze(RESNET_NW0)
    data = analysis.to_dict()
    assert data["verdict"]["limiter"] == "idle" and data["ranks"][0]["rank"] == 0
    # the API's dict is what `analyze --json` prints
    assert main(["analyze", str(RESNET_NW0), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(data))


def test_analyze_takes_a_loaded_job_and_thresholds():
    job = traceagent.load(RESNET_NW0)
    strict = traceagent.analyze(job, verdict=traceagent.VerdictParams(idle_pct=99.0))
    assert strict.ranks[0].trace is job.traces[0]  # analysed in place: its events kept, not loaded again
    assert strict.ranks[0].params.verdict.idle_pct == 99.0
    # idle (39% of the span) no longer passes the threshold: the device counts as computing
    assert strict.verdict.limiter == "compute" and analyzed(RESNET_NW0).verdict.limiter == "idle"


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"traceagent {traceagent.__version__}"


@pytest.mark.parametrize("command", [["demo"], ["ask", str(RESNET_NW0), "why?"], ["report", str(RESNET_NW0)],
                                     ["chat", str(RESNET_NW0)]])
def test_json_is_a_usage_error_where_it_prints_no_data(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([*command, "--json"])
    assert done.value.code == 2 and "unrecognized arguments: --json" in capsys.readouterr().err


def _timeline_gap_titles(page: str) -> list[tuple[str, str]]:
    """(cause, duration) of every gap the HTML timeline draws."""
    figure = next(f for f in page.split("<figure>") if 'aria-label="device timeline"' in f)
    return re.findall(r'<rect [^>]*><title>(\w+): ([^<]+)</title></rect>', figure)


def test_non_default_idle_parameters_reach_every_layer():
    # loader_cover above 1 means no gap can be put down to data loading, and longer launch gaps:
    # on this trace the defaults give the largest gaps to `dataloader`, so a layer that classifies
    # gaps again with default parameters disagrees with --json below
    params = traceagent.IdleParams(loader_cover=1.01, launch_gap_us=50.0, top=5)
    analysis = traceagent.analyze(RESNET_NW0, idle=params)
    rank = analysis.to_dict()["ranks"][0]  # what `analyze --json` prints
    idle = rank["idle"]
    assert rank["params"]["idle"]["launch_gap_us"] == 50.0
    assert "dataloader" not in idle["by_cause_us"] and "dataloader" in analyzed(RESNET_NW0).ranks[0].findings.idle.by_cause_us

    # the agent's tool
    tools = {t.name: t for t in build_tools(AnalysisContext(analysis))}
    tool = json.loads(tools["idle_gaps"].invoke({"top": 5}))
    assert tool["launch_gap_us"] == 50.0
    assert (tool["by_cause_us"], tool["by_cause_count"], tool["gaps"]) == (idle["by_cause_us"], idle["by_cause_count"],
                                                                          idle["gaps"])
    assert [(g["start_us"], g["dur_us"], g["cause"]) for g in tool["top_gaps"]] == \
        [(g["start_us"], g["dur_us"], g["cause"]) for g in idle["top_gaps"]]

    # the HTML timeline draws each of the largest gaps with the cause --json gives it
    drawn = _timeline_gap_titles(render_html(analysis))
    assert {cause for cause, _ in drawn} <= set(idle["by_cause_us"])
    for gap in idle["top_gaps"]:
        assert (gap["cause"], duration(gap["dur_us"])) in drawn

    # the TUI strip gets the gaps with a host-side cause: as many of each as --json counts
    drawn_gpu, _ = timeline_data(analysis.ranks[0])
    gaps = drawn_gpu.gaps[drawn_gpu.gaps["cause"] != "launch_latency"]
    expected = {c: n for c, n in idle["by_cause_count"].items() if c != "launch_latency"}
    assert dict(Counter(gaps["cause"])) == expected


def test_the_readme_python_section_runs():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(block.replace('"trace.json.gz"', repr(str(RESNET_NW0))), namespace)  # our own README
    assert (namespace["analysis"].verdict.limiter, namespace["analysis"].verdict.root_cause) == ("idle", "dataloader")
    assert namespace["strict"].ranks[0].params.idle.launch_gap_us == 50
    assert namespace["data"] == namespace["analysis"].to_dict()


def test_any_threshold_is_set_by_name_from_python_the_cli_and_mcp_alike(capsys):
    by_type = traceagent.analyze(RESNET_NW0, idle=traceagent.IdleParams(loader_cover=1.01, launch_gap_us=50.0))
    by_name = traceagent.analyze(RESNET_NW0, settings=["idle.loader_cover=1.01", "idle.launch_gap_us=50"])
    assert by_name.to_dict() == by_type.to_dict()
    assert "dataloader" not in by_name.ranks[0].findings.idle.by_cause_us  # the setting took effect
    stragglers = traceagent.analyze(RESNET_NW0, settings=["stragglers.late_tolerance_us=20"])
    assert stragglers.ranks[0].params.stragglers.late_tolerance_us == 20.0
    assert main(["analyze", str(RESNET_NW0), "--set", "verdict.idle_pct=99", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"][0]["params"]["verdict"]["idle_pct"] == 99.0 and data["verdict"]["limiter"] == "compute"
    for bad, said in (("idle.nothing=1", "no parameter 'nothing'"), ("nowhere.x=1", "NAME one of idle, verdict"),
                      ("idle.launch_gap_us=soon", "launch_gap_us takes a float, not 'soon'")):
        with pytest.raises(ValueError, match=re.escape(said)):
            traceagent.analyze(RESNET_NW0, settings=[bad])
        with pytest.raises(SystemExit):  # the CLI says it as a usage error, before loading anything
            main(["analyze", str(RESNET_NW0), "--set", bad])
        assert said in capsys.readouterr().err
