"""`traceagent scaling` on hand-built jobs at 1, 2, 4, 8 and 16 ranks. Each step: a GEMM of
COMPUTE_US (strong: split over the ranks; weak: on each), then two bf16 all-reduces, each
LATENCY_US + bus bytes / BUSBW (bus bytes = bytes × 2(N−1)/N, nccl-tests'); every number the test
expects is worked out here from those constants."""

from __future__ import annotations

import json

import jsonschema
import pytest
from builder import TraceBuilder

import traceagent
from traceagent.cli import main
from traceagent.detect.compare.scaling import scaling
from traceagent.schema import SCHEMAS

H100 = "NVIDIA H100 80GB HBM3"
COMPUTE_US = 8000.0
LATENCY_US = 20.0
BUSBW = 100e9  # bytes/s
MESSAGES = (8 << 20, 2 << 20)  # bytes of each all-reduce per step
STEPS = 3


def comm_us(n: int) -> float:
    """Per step: both all-reduces at n ranks."""
    return sum(LATENCY_US + b * 2 * (n - 1) / n / BUSBW * 1e6 for b in MESSAGES) if n > 1 else 0.0


def job(tmp_path, n: int, weak: bool = False, late_us: float = 0.0):
    """n ranks; the last rank computes late_us longer each step (a straggler) and the others wait."""
    folder = tmp_path / f"{'weak' if weak else 'strong'}{n}{'late' if late_us else ''}"
    folder.mkdir()
    compute = COMPUTE_US if weak else COMPUTE_US / n
    for rank in range(n):
        b = TraceBuilder(H100, distributedInfo={"rank": rank, "world_size": n})
        t = 0.0
        for step in range(STEPS):
            own = compute + (late_us if rank == n - 1 else 0.0)
            b.kernel("sm90_xmma_gemm_bf16", t, own)
            entered, last = t + own, t + compute + late_us
            end = last
            for nbytes in MESSAGES if n > 1 else ():
                transfer = LATENCY_US + nbytes * 2 * (n - 1) / n / BUSBW * 1e6
                b.collective(entered, end + transfer - entered, nbytes // 2, ranks=list(range(n)))
                end += transfer
                entered = end
            end = end if n > 1 else t + own
            b.op(f"ProfilerStep#{step}", t, end - t)
            t = end
        b.write(folder / f"rank{rank}.json")
    return traceagent.analyze(folder, use_cache=False, scheduler="none"), n


@pytest.fixture(scope="module")
def strong(tmp_path_factory):
    """The strong-scaling job at 1, 2, 4, 8 and 16 ranks, by size (its folder: tmp / strongN)."""
    folder = tmp_path_factory.mktemp("jobs")
    return folder, {n: job(folder, n) for n in (1, 2, 4, 8, 16)}


@pytest.mark.xdist_group("strong")  # the tests that read the same built jobs: built once
def test_strong_scaling_efficiency_and_its_loss_to_communication_by_hand(strong):
    jobs = strong[1]
    runs = [jobs[n] for n in (1, 2, 4, 8)]
    result = scaling(runs, project=[16])
    assert result.mode == "strong" and "no recorded shapes" in result.assumptions[0]
    t1 = COMPUTE_US
    for run in result.runs:
        n = run.world_size
        tn = COMPUTE_US / n + comm_us(n)
        assert run.step_us == pytest.approx(tn, abs=0.01)
        assert run.efficiency_pct == pytest.approx(100 * t1 / (tn * n), abs=0.01)
        assert run.speedup_x == pytest.approx(t1 / tn, abs=1e-3)
        losses = {loss.part: loss for loss in run.losses}
        # all of the loss is the transfer: compute splits perfectly, nobody waits, no host idle
        assert losses["transfer"].per_step_us == pytest.approx(comm_us(n), abs=0.01)
        assert losses["transfer"].points == pytest.approx(100 * comm_us(n) / tn, abs=0.01)
        assert abs(losses["compute"].per_step_us) < 0.01 and abs(losses["waiting"].per_step_us) < 0.01
        assert sum(loss.points for loss in run.losses) == pytest.approx(100 - run.efficiency_pct, abs=0.05)
    # the communication model recovers the planted latency and bandwidth
    (fit,) = result.fits
    assert fit.kind == "all_reduce" and fit.link == "one node"
    assert fit.latency_us == pytest.approx(LATENCY_US, rel=0.05)
    assert fit.busbw_gbps == pytest.approx(BUSBW / 1e9, rel=0.05)
    # projected to 16 ranks, against a 16-rank job built the same way
    (projected,) = result.projections
    measured = scaling([runs[0], jobs[16]]).runs[-1]
    assert projected.step_us == pytest.approx(measured.step_us, rel=0.01)
    assert projected.efficiency_pct == pytest.approx(measured.efficiency_pct, abs=1.0)
    assert result.sentence.startswith("From 1 to 8 GPUs (strong scaling) efficiency is ")
    assert "points to exposed communication (transfer)" in result.sentence and "16 GPUs would give" in result.sentence
    assert "communication-bound" not in result.sentence  # 16 GPUs: under half the step
    assert "communication-bound" in scaling(runs, project=[64]).sentence


def test_weak_scaling_keeps_the_work_per_gpu(tmp_path):
    result = scaling([job(tmp_path, n, weak=True) for n in (1, 2, 4, 8)], mode="weak")
    for run in result.runs:
        tn = COMPUTE_US + comm_us(run.world_size)
        assert run.efficiency_pct == pytest.approx(100 * COMPUTE_US / tn, abs=0.01)
        assert run.speedup_x == pytest.approx(run.world_size * COMPUTE_US / tn, abs=1e-3)
        assert run.ideal_step_us == pytest.approx(COMPUTE_US, abs=0.01)
        losses = {loss.part: loss for loss in run.losses}  # each GPU keeps its compute: the transfer is the loss
        assert losses["transfer"].per_step_us == pytest.approx(comm_us(run.world_size), abs=0.01)
        assert abs(losses["compute"].per_step_us) < 0.01


def test_a_straggler_s_waiting_grows_with_the_ranks_and_is_named(tmp_path):
    late = 400.0
    result = scaling([job(tmp_path, n, late_us=late) for n in (2, 4, 8)])
    waiting = []
    for run in result.runs:
        n = run.world_size
        # the n−1 ranks on time wait `late` each step; the late rank waits for nobody
        assert run.parts_us["waiting"] == pytest.approx(late * (n - 1) / n, abs=0.01)
        assert run.straggler == n - 1
        waiting.append(next(loss.points for loss in run.losses if loss.part == "waiting"))
    assert waiting[1] < waiting[2]  # the waiting's share grows with N
    assert f"waiting for the slowest rank (rank {result.runs[-1].world_size - 1})" in result.sentence


@pytest.mark.xdist_group("strong")
def test_the_command_line_reads_sizes_prints_json_and_gates(strong, tmp_path, capsys):
    folders = [str(strong[0] / f"strong{n}") for n in (1, 2, 4)]
    assert main(["scaling", *folders, "--project", "8", "--json", "--no-cache"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(SCHEMAS["scaling"]()).validate(data)  # the shipped contract, closed
    assert [r["world_size"] for r in data["runs"]] == [1, 2, 4] and data["projections"][0]["world_size"] == 8
    report = tmp_path / "scaling.html"
    assert main(["scaling", *folders, "--fail-below-efficiency", "99", "--no-cache", "-o", str(report)]) == 1
    assert "below 99%" in capsys.readouterr().err
    page = report.read_text()
    assert "<svg" in page and "4 GPUs" in page and "Communication model" in page
    assert main(["scaling", *folders, "--no-cache", "-o", str(strong[0] / "strong1" / "rank0.json")]) == 2  # an input
    assert main(["scaling", folders[0], "--no-cache"]) == 2
    assert "two or more sizes" in capsys.readouterr().err


@pytest.mark.xdist_group("strong")
def test_runs_of_another_job_are_refused_unless_forced(strong, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for rank in range(2):
        b = TraceBuilder(H100, distributedInfo={"rank": rank, "world_size": 2})
        b.kernel("flash_fwd_kernel", 0, 500)
        b.op("ProfilerStep#0", 0, 500)
        b.write(other / f"rank{rank}.json")
    runs = [strong[1][1], (traceagent.analyze(other, use_cache=False, scheduler="none"), 2)]
    with pytest.raises(ValueError, match=r"runs other kernels than .* \(not in it: sm90_xmma_gemm_bf16\)"):
        scaling(runs)
    assert scaling(runs, force=True).runs[-1].world_size == 2


@pytest.mark.xdist_group("strong")
def test_with_the_job_at_another_size_beside_it_the_chat_has_a_scaling_tool_and_answer(strong):
    import asyncio

    from traceagent.agent.session import Session
    from traceagent.agent.tools import AnalysisContext, build_tools

    (two, _), (eight, _) = strong[1][2], strong[1][8]
    assert "scaling" not in {t.name for t in build_tools(AnalysisContext(two))}  # one run: nothing to scale
    ctx = AnalysisContext(two, eight)
    tool = {t.name: t for t in build_tools(ctx)}["scaling"]
    data = json.loads(tool.invoke({"project": [16]}))
    expected = scaling([(two, 2), (eight, 8)], project=[16])
    assert [r["efficiency_pct"] for r in data["runs"]] == [r.efficiency_pct for r in expected.runs]
    assert data["projections"][0]["step_us"] == expected.projections[0].step_us

    async def ask():
        return [e async for e in Session(ctx).ask("How does this scale?")][-1]

    answered = asyncio.run(ask())  # the offline analyst (no model configured here) asks for no projection
    assert scaling([(two, 2), (eight, 8)]).sentence in answered.text and answered.unverified == []
