"""`traceagent annotate`: the findings go back onto the timeline, and the annotated file is still
the same trace to any reader (traceagent included)."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import NSYS_BEFORE, RESNET_NW0, analyzed

import traceagent
from traceagent.cli import main
from traceagent.detect.core.encode import to_data
from traceagent.report.annotate import CATEGORY, GAPS


def findings(path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    return [e for e in doc["traceEvents"] if e.get("cat") == CATEGORY]


def without_path(data: dict) -> dict:
    return data | {"trace": data["trace"] | {"path": None}}


def test_a_kineto_trace_keeps_its_analysis_and_gains_a_slice_per_gap(tmp_path):
    out = tmp_path / "annotated.json.gz"
    assert main(["annotate", str(RESNET_NW0), "-o", str(out)]) == 0
    original = analyzed(RESNET_NW0)
    again = traceagent.analyze(out, use_cache=False)
    assert without_path(again.to_dict()) == without_path(original.to_dict())
    events = findings(out)
    r = original.ranks[0]
    gaps = [e for e in events if GAPS <= e["tid"] < GAPS + 100]
    assert len(gaps) == len(r.gaps)
    assert sorted(e["name"] for e in gaps) == sorted(r.gaps["cause"].astype(str))
    assert sum(e["dur"] for e in gaps) == pytest.approx(r.findings.idle.idle_us, abs=1)
    assert sum(e["name"].startswith("step ") for e in events) == r.findings.steps.count
    verdict = next(e for e in events if e["ph"] == "i")
    assert verdict["name"] == f"verdict: {original.verdict.headline}"
    assert any("host" in e["args"] for e in gaps), "the largest gaps carry their evidence"


def test_an_nsight_export_becomes_a_chrome_trace_of_its_device_work_and_findings(tmp_path):
    out = tmp_path / "annotated.json"
    assert main(["annotate", str(NSYS_BEFORE), "-o", str(out)]) == 0
    original = analyzed(NSYS_BEFORE).ranks[0]
    again = traceagent.analyze(out, use_cache=False).ranks[0]
    assert to_data(again.breakdown) == to_data(original.breakdown)  # the device work, to the nanosecond
    assert again.findings.kernels.top[0].name == original.findings.kernels.top[0].name
    gaps = [e for e in findings(out) if GAPS <= e["tid"] < GAPS + 100]
    assert len(gaps) == len(original.gaps) and {e["tid"] - GAPS for e in gaps} == {0, 1}
