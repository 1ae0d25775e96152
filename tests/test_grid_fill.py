"""Kernels whose grid cannot fill the GPU (a registered detector): a trace built here with Kineto's
"blocks per SM" on each kernel and the shares worked out by hand, and a real trace against an
independent reader of its JSON."""

from __future__ import annotations

import gzip
import json

import pytest
from builder import TraceBuilder
from conftest import DATA, analyzed, offline_answer

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.detect.detectors.grid_fill import grid_fill_sentence

QWEN = DATA / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def launched(b: TraceBuilder, name: str, start: float, dur: float, blocks_per_sm: float | None,
             occupancy: float = 0) -> None:
    event = b.kernel(name, start, dur, launch_at=start - 6)
    if blocks_per_sm is not None:  # as Kineto writes them (0: occupancy not estimated)
        event["args"] |= {"blocks per SM": blocks_per_sm, "est. achieved occupancy %": occupancy}


def test_shares_and_empty_sm_time_are_worked_out_by_hand(tmp_path):
    """By hand: of 180 µs of kernels with a recorded launch, gemv (2 × 30 µs at 0.25 blocks per SM)
    and tiny_reduce (20 µs at 0.5) run under one block per SM: 80 µs, 44.44%; the SM time they
    leave empty is 60 × 0.75 + 20 × 0.5 = 55 µs, 30.56%. big_gemm (100 µs at 3 blocks per SM) fills it;
    the collective (few blocks by design) and the kernel without a launch record are left out.
    Occupancy, weighted by time over the kernels that estimate one: (60 × 25 + 100 × 100) / 160 = 71.9%."""
    b = TraceBuilder()
    launched(b, "gemv_kernel", 10, 30, 0.25, occupancy=25)
    launched(b, "gemv_kernel", 50, 30, 0.25, occupancy=25)
    launched(b, "tiny_reduce", 90, 20, 0.5)
    launched(b, "big_gemm", 120, 100, 3.0, occupancy=100)
    launched(b, "unrecorded", 230, 50, None)
    b.collective(300, 40, 1024)["args"]["blocks per SM"] = 0.1
    result = analyze(b.write(tmp_path / "grids.json"), use_cache=False).ranks[0].results["grid_fill"]
    assert (result.kernel_time_us, result.underfilled_us, result.underfilled_pct, result.sm_idle_pct) == (
        180.0, 80.0, 44.44, 30.56)
    assert [(k.name, k.time_us, k.share_pct, k.launches, k.blocks_per_sm) for k in result.top] == [
        ("gemv_kernel", 60.0, 33.33, 2, 0.25), ("tiny_reduce", 20.0, 11.11, 1, 0.5)]
    said = grid_fill_sentence(result)
    assert said.startswith("44.4% of kernel time (every GPU of the rank) runs with fewer blocks than the GPU has SMs")
    assert "30.6% of the SMs' time" in said and "Give each launch more blocks" in said
    assert result.occupancy_pct == 71.9 and "estimated achieved occupancy, weighted by kernel time: 71.9%" in said


def test_a_trace_without_launch_records_cannot_say(tmp_path):
    b = TraceBuilder()
    launched(b, "k", 10, 30, None)
    analysis = analyze(b.write(tmp_path / "bare.json"), use_cache=False)
    assert analysis.ranks[0].results["grid_fill"] is None
    assert "cannot say" in offline_answer(analysis, "Do my kernels fill the GPU?")


def test_a_real_trace_matches_an_independent_reader_of_its_json():
    events = json.loads(gzip.decompress(QWEN.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and e["args"].get("blocks per SM", 0) > 0
               and not e["name"].startswith("nccl")]
    total = sum(e["dur"] for e in kernels)
    under = sum(e["dur"] for e in kernels if e["args"]["blocks per SM"] < 1)
    result = analyzed(QWEN).ranks[0].results["grid_fill"]
    assert result.kernel_time_us == pytest.approx(total, abs=0.01)
    assert result.underfilled_us == pytest.approx(under, abs=0.01)
    rated = [e for e in kernels if e["args"].get("est. achieved occupancy %", 0) > 0]
    weighted = sum(e["dur"] * e["args"]["est. achieved occupancy %"] for e in rated) / sum(e["dur"] for e in rated)
    assert result.occupancy_pct == pytest.approx(weighted, abs=0.05)


@pytest.mark.parametrize("question", ["Do my kernels fill the GPU?", "What is the occupancy?",
                                      "Are the grid sizes too small?", "How many SMs do my kernels use?"])
def test_grid_questions_reach_it(question):
    assert understand(question, AnalysisContext(analyzed(QWEN))).intent == "detector:grid_fill"


def test_an_nsight_export_gives_blocks_per_sm_from_the_grid_and_the_gpus_sm_count(tmp_path):
    """An Nsight export records each kernel's grid and the GPU's SM count: the kernel given a
    one-block grid here is under one block per SM; an independent reader of the SQLite file adds
    up the kernel time and that kernel's."""
    import shutil
    import sqlite3

    path = tmp_path / "report.sqlite"
    shutil.copy(DATA / "test-cuda" / "report2.sqlite", path)
    with sqlite3.connect(path) as con:
        (rowid, ns, sms) = con.execute("SELECT k.rowid, k.[end] - k.start, g.smCount FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                       "JOIN TARGET_INFO_GPU g ON g.id = k.deviceId ORDER BY k.start LIMIT 1").fetchone()
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 1, gridY = 1, gridZ = 1 WHERE rowid = ?", (rowid,))
        (total,) = con.execute("SELECT sum([end] - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    result = analyze(path, use_cache=False).ranks[0].results["grid_fill"]
    assert result.kernel_time_us == pytest.approx(total / 1000, abs=0.01)
    assert result.underfilled_us == pytest.approx(ns / 1000, abs=0.01)
    assert result.top[0].blocks_per_sm == round(1 / sms, 3)


def test_a_busy_gpu_led_by_a_sparse_grid_is_told_to_give_it_more_blocks(tmp_path):
    """The device is busy (a compute verdict) and its top kernel runs at 0.25 blocks per SM: the
    next step is more blocks per launch, not tuning the kernel."""
    b = TraceBuilder()
    b.op("aten::mv", 0, 10)
    launched(b, "gemv2T_kernel", 10, 900, 0.25)
    launched(b, "big_gemm", 910, 100, 3.0)
    verdict = analyze(b.write(tmp_path / "sparse.json"), use_cache=False).ranks[0].verdict
    assert (verdict.limiter, verdict.root_cause) == ("compute", "hot_kernel")
    assert "about 0.25 blocks per SM" in verdict.hypothesis
    assert verdict.next_step.startswith("Give gemv2T_kernel more blocks per launch")
