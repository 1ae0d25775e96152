"""One definition of idle per step: each step's idle is the same number in every section that
reports it (the step table, the per-GPU breakdown, the per-GPU step tables, the phases), and the
steps' idle adds up to the rank's idle inside steps. Checked on every trace in tests/data."""

from __future__ import annotations

import pytest
from builder import TraceBuilder
from conftest import DATA, analyzed

import traceagent
from traceagent.detect.core.encode import to_data

TRACES = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json.gz", ".sqlite")))


def _check(analysis: traceagent.Analysis) -> int:
    """The steps checked; an AssertionError names the first that disagrees."""
    checked = 0
    for rank in analysis.ranks:
        steps = rank.findings.steps
        if steps is None:
            continue
        data = to_data(rank.record())
        by_step = {row["step"]: row["idle_us"] for row in data["steps"]["steps"]}
        breakdown: dict[int, float] = {}
        for row in data["breakdown"]["steps"]:
            b = row["breakdown"]
            breakdown[row["step"]] = breakdown.get(row["step"], 0.0) + b["idle_us"]
            assert b["span_us"] == pytest.approx(b["busy_us"] + b["idle_us"], abs=0.002)
        for step, idle in by_step.items():
            assert breakdown.get(step, 0.0) == pytest.approx(idle, abs=0.002 * len(rank.devices)), f"step {step}"
            if len(rank.devices) > 1:  # each GPU's own step table adds up to the rank's
                per_gpu = sum(next((s.idle_us for s in rank.steps(d).steps if s.step == step), 0.0)
                              for d in rank.devices)
                assert per_gpu == pytest.approx(idle, abs=0.002 * len(rank.devices))
            checked += 1
        if len(steps.steps) == steps.count:  # every step listed: they add up to the idle inside steps
            inside = rank.gaps[rank.gaps["step_row"] >= 0]["dur"].sum() / 1000.0
            assert sum(by_step.values()) == pytest.approx(inside, rel=1e-6, abs=0.01)
        phases = rank.results.get("phases")
        if phases is not None:  # a phase's idle is its steps' idle
            for p in phases.phases:
                assert p.idle_pct == pytest.approx(100.0 - p.busy_pct, abs=0.02)
    return checked


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(DATA)))
def test_each_steps_idle_is_one_number_everywhere_on_every_shared_trace(path):
    _check(analyzed(path))


def test_the_resnet_step_six_idle_is_the_same_in_the_breakdown_and_the_step_table():
    from conftest import RESNET_NW0

    analysis = analyzed(RESNET_NW0)
    assert _check(analysis) >= 5
    step6 = next(s for s in analysis.ranks[0].findings.steps.steps if s.step == 6)
    breakdown6 = next(s for s in analysis.ranks[0].breakdown.steps if s.step == 6)
    assert breakdown6.breakdown.idle_us == step6.idle_us


def test_a_stall_between_two_steps_is_the_next_steps_idle_by_hand(tmp_path):
    # step 1: kernel 0-100; a 300 µs stall; step 2: kernels 400-500 and 520-600 (a 20 µs gap inside)
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 200)
    b.kernel("a", 0, 100, launch_at=1)
    b.op("ProfilerStep#2", 200, 500)
    b.kernel("b", 400, 100, launch_at=210)
    b.kernel("c", 520, 80, launch_at=220)
    analysis = traceagent.analyze(b.write(tmp_path / "t.json"))
    rank = analysis.ranks[0]
    assert [(s.step, s.idle_us) for s in rank.findings.steps.steps] == [(1, 0.0), (2, 320.0)]
    assert [(s.step, s.breakdown.idle_us, s.breakdown.busy_us, s.breakdown.span_us) for s in rank.breakdown.steps] == [
        (1, 0.0, 100.0, 100.0), (2, 320.0, 180.0, 500.0)]
    assert rank.findings.idle.idle_us == 320.0
    _check(analysis)
