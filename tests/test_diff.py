"""`traceagent diff` on the ResNet50 pair that SOURCE.md describes as before/after: num_workers 0 → 4."""

from __future__ import annotations

import json

import pytest
from conftest import CPU_ONLY, DATA, NSYS_AFTER, NSYS_BEFORE, RESNET_NW0, RESNET_NW4, analyzed

from traceagent.cli import main
from traceagent.detect.compare.diff import diff
from traceagent.report.markdown import render_diff_markdown
from traceagent.text import md_prose


@pytest.fixture(scope="module")
def pair():
    return analyzed(RESNET_NW0), analyzed(RESNET_NW4)


def test_data_loading_idle_falls_and_steps_get_faster(pair):
    before, after = pair
    d = diff(before, after)
    rc = d.root_cause
    assert rc["cause"] == "dataloader" and rc["gone"]
    # the shares are the idle detector's own numbers for each trace
    assert rc["before_pct"] == before.ranks[0].findings.idle.cause_pct("dataloader") > 15
    assert rc["after_pct"] == after.ranks[0].findings.idle.cause_pct("dataloader") < 2
    step_b, step_a = before.ranks[0].findings.steps.mean_us, after.ranks[0].findings.steps.mean_us
    assert d.time_basis == "step"
    assert d.slower_pct == pytest.approx(100 * (step_a - step_b) / step_b, abs=0.01) and d.slower_pct < -10
    assert "idle from data loading" in d.headline and "(gone)" in d.headline
    assert d.helped


def test_a_trace_against_itself_did_not_help():
    d = diff(analyzed(RESNET_NW0), analyzed(RESNET_NW0))
    assert d.slower_pct == 0 and not d.root_cause["gone"]
    assert not d.helped and d.noise_pct > 0 and d.prediction["measured_pct"] == 0.0
    assert "measured 0.0%" in d.prediction["sentence"]  # never "-0.0%"


def test_a_change_within_the_noise_is_no_gain_never_a_negative_speedup():
    # the two test-cuda exports: the after one a little slower, by less than runs differ by
    d = diff(analyzed(DATA / "test-cuda" / "report1.sqlite"), analyzed(DATA / "test-cuda" / "report2.sqlite"))
    slower = d.slower_pct
    assert 0 < slower < d.noise_pct and d.prediction["measured_pct"] == -round(slower, 2)
    said = render_diff_markdown(d)
    assert f"about as fast ({-d.prediction['measured_pct']:.1f}% slower; runs differ by up to" in said
    assert f"{d.prediction['measured_pct']:.1f}% faster" not in said  # once "-0.7% faster, within the estimate"


def test_diff_json_and_regression_gate(capsys):
    assert main(["diff", str(RESNET_NW0), str(RESNET_NW4), "--json", "--fail-if-slower", "5"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["root_cause"]["gone"] is True
    names = [m["name"] for m in data["metrics"]]
    assert names[:3] == ["step time (mean)", "busy", "idle"]
    # the other way round the change is a regression: a pipeline gating at 5% fails
    assert main(["diff", str(RESNET_NW4), str(RESNET_NW0), "--fail-if-slower", "5"]) == 1
    assert "slower than before" in capsys.readouterr().err
    assert main(["diff", str(RESNET_NW4), str(RESNET_NW0), "--fail-if-slower", "50"]) == 0


def test_a_job_compared_with_itself_keeps_its_straggler_and_says_its_scope():
    from conftest import DLRM_8RANK

    job = analyzed(DLRM_8RANK)
    d = diff(job, job)
    assert d.root_cause["cause"] == "straggler" and not d.root_cause["gone"]
    # the straggler's cost is the others' waiting, as the comparison measures it
    assert d.root_cause["before_pct"] == d.root_cause["after_pct"] == job.comparison.others_exposed_waiting_pct > 0
    # step time is the mean over ranks of each rank's mean step (what analyze reports per rank)
    step = d.metrics[0]
    assert step.name == "step time (mean over 8 ranks)"
    assert step.before == pytest.approx(sum(r.findings.steps.mean_us for r in job.ranks) / 8)


def test_a_slower_after_trace_says_slower_did_not_help_and_what_grew(tmp_path, capsys):
    from builder import TraceBuilder

    import traceagent

    def job(name: str, loader_us: float):
        # 4 steps of 1000 µs of kernels; before each, the DataLoader holds the host `loader_us`
        b = TraceBuilder()
        t = 0.0
        for step in range(4):
            b.op(f"ProfilerStep#{step}", t, loader_us + 1000)
            b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, loader_us, cat="user_annotation")
            b.kernel("gemm", t + loader_us, 1000, launch_at=t + loader_us - 5)
            t += loader_us + 1000
        return traceagent.analyze(b.write(tmp_path / name))

    before, after = job("before.json", 200.0), job("after.json", 1400.0)  # the change made loading slower
    d = diff(before, after)
    # by hand: steps of 1200 µs become 2400 µs: 100% slower; data loading idle grows from 200/1200 of the time
    assert d.slower_pct == pytest.approx(100.0) and not d.helped
    assert "slower by 100.0%: the change did not help" in d.headline and "faster" not in d.headline.split(";")[1]
    assert d.grew.startswith("idle: dataloader")
    if d.prediction:
        assert not d.prediction["within_estimate"] and "slower" in d.prediction["sentence"]
    assert main(["diff", str(tmp_path / "before.json"), str(tmp_path / "after.json")]) == 0
    out = capsys.readouterr().out
    assert "slower" in out and "did not help" in out and "-100" not in out


def test_a_range_that_regresses_is_first_in_diff_and_its_gate_fails(tmp_path, capsys):
    from builder import TraceBuilder

    import traceagent

    def job(name: str, forward_us: float):
        # 3 steps: record_function "forward" launches a kernel for `forward_us`, "optimizer" for 200 µs
        b = TraceBuilder()
        t = 0.0
        for step in range(3):
            b.op(f"ProfilerStep#{step}", t, forward_us + 220)
            b.op("forward", t, forward_us, cat="user_annotation")
            b.kernel("fwd_gemm", t + 5, forward_us - 10, launch_at=t + 1)
            b.op("optimizer", t + forward_us + 10, 200, cat="user_annotation")
            b.kernel("adam", t + forward_us + 15, 180, launch_at=t + forward_us + 11)
            t += forward_us + 220
        return b.write(tmp_path / name)

    before, after = job("before.json", 500.0), job("after.json", 800.0)
    d = diff(traceagent.analyze(before), traceagent.analyze(after))
    first = d.ranges[0]
    # by hand, per step: forward 500 → 800 µs of host time (+60%), 490 → 790 µs of its kernel; optimizer unchanged
    assert (first["name"], first["before_host_us"], first["after_host_us"], first["change_pct"]) == \
        ("forward", 500.0, 800.0, 60.0)
    assert (first["before_gpu_us"], first["after_gpu_us"]) == (490.0, 790.0)
    optimizer = next(r for r in d.ranges if r["name"] == "optimizer")
    assert optimizer["change_pct"] == 0.0
    assert main(["diff", str(before), str(after), "--gate", "optim:5"]) == 0  # the optimizer did not grow
    capsys.readouterr()
    assert main(["diff", str(before), str(after), "--gate", "forw:50", "--gate", "optim:5"]) == 1
    err = capsys.readouterr().err
    assert "range 'forward' is 60.0% slower (limit 50% for 'forw')" in err and "optimizer" not in err
    with pytest.raises(SystemExit):
        main(["diff", str(before), str(after), "--gate", "forward"])  # no percentage: a usage error


def test_two_traces_without_device_work_compare_by_time_alone():
    # no root cause to follow and a compute time of zero: the headline is the time, the table renders
    from traceagent.report.markdown import render_diff_markdown

    d = diff(analyzed(CPU_ONLY), analyzed(CPU_ONLY))
    assert d.root_cause["cause"] is None and d.headline.startswith(("step time", "span"))
    assert "(+0.0%)" in d.headline and "| compute" in render_diff_markdown(d)


def test_a_replayed_kernel_is_named_by_its_finding_not_by_its_escaped_regex():
    """The Nsight pair's before verdict is a hot templated kernel: its replay's change is an escaped
    regex of the full name (for `whatif --change`), but the prediction says the kernel by name."""
    before = analyzed(NSYS_BEFORE)
    saving = before.verdict.saving
    assert saving.root_cause == "hot_kernel" and saving.change.startswith("kernel:^") and "\\" in saving.change
    d = diff(before, analyzed(NSYS_AFTER))
    assert d.prediction["change"] == saving.change and d.prediction["replayed_as"] == saving.finding
    assert f"(simulated with {saving.finding}; at most" in d.prediction["sentence"]
    text = render_diff_markdown(d)
    assert f"(simulated with {md_prose(saving.finding)}; at most" in text and "\\(int\\)" not in text


def test_captures_of_one_length_holding_different_work_are_compared_per_that_work(tmp_path):
    """Two captures without steps, of one length (750 µs from the first kernel to the last), as
    `nsys profile --duration` takes them: before, 4 iterations of gemm (100 µs) and bias (50 µs) 50 µs
    apart; after, 3 iterations 150 µs apart. By hand: the after trace holds 3/4 of the work, so its
    750 µs are 1000 µs for the before's four iterations: 33.3% slower, not the same."""
    from builder import TraceBuilder

    import traceagent

    def capture(name: str, iterations: int, gap: float):
        b = TraceBuilder()
        for i in range(iterations):
            t = i * (150 + gap)
            b.kernel("gemm", t, 100, launch_at=t - 10)
            b.kernel("bias", t + 100, 50, launch_at=t - 5)
        return traceagent.analyze(b.write(tmp_path / name), use_cache=False)

    d = diff(capture("before.json", 4, 50), capture("after.json", 3, 150))
    assert d.time_basis == "span" and d.work["ratio"] == 0.75
    assert d.slower_pct == pytest.approx(100 * (750 / 0.75 - 750) / 750, abs=0.01) and not d.helped
    assert "span 750.0 µs → 1.00 ms for the same work (+33.3%)" in d.headline
    gemm = next(k for k in d.kernels if k["name"] == "gemm")
    assert (gemm["before_us"], gemm["after_us"]) == (400.0, 400.0)  # 300 µs of it after, scaled to four iterations
    assert any("ran 3 times after against 4 before" in n for n in d.notes)
    assert "Hot kernels (for the before's work)" in render_diff_markdown(d)
    # the same work in both: spans as they are
    same = diff(capture("a.json", 4, 50), capture("b.json", 4, 150))
    assert same.work is None and same.slower_pct == pytest.approx(100 * (1050 - 750) / 750, abs=0.01)


def test_peak_memory_is_compared_where_both_runs_record_it(tmp_path):
    """Built by hand: one step whose allocator reaches 3 GB before (1 GB, then 2 GB more) and 1.5 GB after
    (activation checkpointing's kind of change): the diff's memory row is 3e9 → 1.5e9 bytes, -50%; the report
    shows it; a trace without memory events gives no row."""
    from builder import TraceBuilder

    import traceagent

    def run(name: str, allocations: tuple[int, ...], memory: bool = True):
        b = TraceBuilder()
        b.op("ProfilerStep#1", 0, 1000)
        b.kernel("gemm", 10, 900, launch_at=5)
        total = 0
        for i, nbytes in enumerate(allocations if memory else ()):
            total += nbytes
            b.memory(20 + i, nbytes, allocated=total, reserved=total)
        return traceagent.analyze(b.write(tmp_path / name))

    before, after = run("before.json", (10**9, 2 * 10**9)), run("after.json", (10**9, 5 * 10**8))
    (row,) = [m for m in diff(before, after).metrics if m.unit == "bytes"]
    assert (row.name, row.before_bytes, row.after_bytes, row.change_bytes, row.change_pct) == (
        "peak memory allocated (the most of any GPU)", 3 * 10**9, 15 * 10**8, -15 * 10**8, -50.0)
    assert ("| peak memory allocated (the most of any GPU) | 3.00 GB | 1.50 GB | -1.50 GB (-50.0%) |"
            in render_diff_markdown(diff(before, after)))
    assert not [m for m in diff(before, run("none.json", (), memory=False)).metrics if m.unit == "bytes"]


def test_the_step_times_spread_is_compared_and_answers_whether_the_run_is_steadier(tmp_path):
    """Built by hand: four steps of 1000 and 1200 µs in turn before (population standard deviation 100 µs) and of
    1000 and 1400 µs after (200 µs): the spread row is 100 → 200 µs, +100%; 'is it more stable now?' is no, 'does it
    vary more?' yes. One step a run has no spread: no row."""
    from builder import TraceBuilder
    from conftest import offline_answer

    import traceagent

    def run(name: str, lengths: tuple[float, ...]):
        b = TraceBuilder()
        t = 0.0
        for step, length in enumerate(lengths):
            b.op(f"ProfilerStep#{step}", t, length)
            b.kernel("gemm", t + 10, length - 20, launch_at=t + 5)
            t += length
        return traceagent.analyze(b.write(tmp_path / name))

    before, after = run("before.json", (1000, 1200) * 2), run("after.json", (1000, 1400) * 2)
    (row,) = [m for m in diff(before, after).metrics if m.name.startswith("step time spread")]
    assert (row.before_us, row.after_us, row.change_pct) == (100.0, 200.0, 100.0)
    assert offline_answer(before, "Is the step time more stable now?", after).startswith("**No:** step time spread")
    assert offline_answer(before, "Does the step time vary more now?", after).startswith("**Yes:** step time spread")
    assert not [m for m in diff(run("one.json", (1000,)), run("one_more.json", (1200,))).metrics
                if m.name.startswith("step time spread")]
