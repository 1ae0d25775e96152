"""Nsight Compute exports: a real `ncu --csv` details page, the raw page as ncu writes it, the
classification, the join to a trace's kernels, and the errors a bad export gets."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import jsonschema
import pytest
from builder import TraceBuilder

import traceagent
from traceagent.agent.answers import plain
from traceagent.agent.offline import OfflineAnalyst
from traceagent.agent.tools import AnalysisContext, kernel_profiles
from traceagent.api import read_kernel_profiles
from traceagent.cli import main
from traceagent.report.markdown import render_markdown
from traceagent.schema import SCHEMAS

DATA = Path(__file__).parent / "data"
REAL = DATA / "ncu" / "superbench_cublaslt_b200.ncu.csv"  # microsoft/superbenchmark, MIT (tests/data/SOURCES.md)
GEMM = "cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn_align4_1sm_bias_f16_relu_aux_scalemax"


def details_reading(path: Path) -> dict[str, tuple[str, str]]:
    """(section, metric) → (unit, value) of launch 0, read with the csv module after the header."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"'))
    rows = csv.DictReader(lines[start:])
    return {(r["Section Name"], r["Metric Name"]): (r["Metric Unit"], r["Metric Value"]) for r in rows
            if r["ID"] == "0" and r["Metric Name"]}


def test_a_real_details_export_loads_with_the_values_ncu_wrote():
    result = read_kernel_profiles(REAL)
    [k] = result.kernels
    raw = details_reading(REAL)
    assert k.name == GEMM and (k.block, k.grid) == ("(384, 1, 1)", "(9, 32, 1)")
    unit, value = raw["GPU Speed Of Light Throughput", "Duration"]
    assert unit == "ns" and k.duration_us == float(value) / 1000
    assert k.compute_pct == float(raw["GPU Speed Of Light Throughput", "Compute (SM) Throughput"][1])
    assert k.memory_pct == float(raw["GPU Speed Of Light Throughput", "Memory Throughput"][1])
    assert k.achieved_occupancy_pct == float(raw["Occupancy", "Achieved Occupancy"][1])
    assert k.theoretical_occupancy_pct == float(raw["Occupancy", "Theoretical Occupancy"][1])
    assert k.waves == float(raw["Launch Statistics", "Waves Per SM"][1])
    # Block Limit Registers and Shared Mem are 1 block, Warps 5, SM 32: the first two cap occupancy
    assert k.occupancy_limiters == ["registers", "shared memory"]
    # both throughputs under 60% of peak: latency-bound, as ncu's own SOLBottleneck rule says
    assert k.bound == "latency" and "__launch_bounds__" in k.next_step and "whole waves" in k.next_step
    assert k.rules[0].name == "TheoreticalOccupancy" and k.rules[0].speedup_pct == 81.25


def test_the_export_joins_to_the_trace_kernels_of_the_same_name(tmp_path):
    b = TraceBuilder("NVIDIA B200")
    for i in range(4):  # the profiled GEMM, as Kineto names it, 4 × 400 µs; and a demangled variant 1 × 100 µs
        b.kernel(GEMM, start=1000 * i, dur=400)
    b.kernel(f"void {GEMM}<1>(Params)", start=5000, dur=100)
    b.kernel("other_kernel", start=6000, dur=50)
    a = traceagent.analyze(b.write(tmp_path / "t.json"), kernels=REAL, use_cache=False)
    [k] = a.kernel_profiles.kernels
    assert (k.trace_count, k.trace_total_us) == (5, 1700.0)  # by hand: 4 × 400 + 100
    assert a.kernel_profiles.unmatched == [] and a.kernel_profiles.rank == a.focus.rank
    data = json.loads(json.dumps(a.to_dict()))
    assert data["kernel_profiles"]["kernels"][0]["bound"] == "latency"
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(data)  # analyze --json with its schema
    report = render_markdown(a)
    assert "## Why the profiled kernels are slow (Nsight Compute)" in report and "5 × = 1.70 ms" in report

    ctx = AnalysisContext(a)
    answer = kernel_profiles(ctx, name_filter="cutlass3x")
    assert [p.name for p in answer.kernels] == [GEMM] and "unavailable" not in plain(answer)
    text = asyncio.run(_ask(OfflineAnalyst(ctx), "Why is my slowest kernel slow?"))
    assert "latency-bound" in text and "limited by registers and shared memory" in text


async def _ask(analyst: OfflineAnalyst, question: str) -> str:
    return "".join([getattr(e, "text", "") async for e in analyst.answer(question)])


def raw_page(tmp_path: Path) -> Path:
    """The raw page as ncu writes it: a header of metric names, a row of units, a row per launch.
    Two launches of a memory-bound elementwise kernel (values chosen by hand)."""
    header = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC", "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
              "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum",
              "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
              "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
              "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"]
    units = ["", "", "", "", "", "", "", "", "", "", "", "usecond", "%", "%", "Mbyte", "inst", "inst", "ratio", "ratio"]
    rows = [[str(i), "77", "python3", "host", "vectorized_elementwise_kernel", "1", "7", "(128, 1, 1)", "(4096, 1, 1)",
             "0", "9.0", duration, "12.5", memory, "1,000", "1,000,000", "500,000", stall, "0.25"]
            for i, (duration, memory, stall) in enumerate([("100", "88", "6.5"), ("120", "92", "7.5")])]
    path = tmp_path / "raw.csv"
    with path.open("w", newline="") as f:
        f.write("==PROF== Connected to process 77 (python3)\n")
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows([header, units, *rows])
    return path


def test_the_raw_page_gives_the_same_reading_and_the_roofline_inputs(tmp_path):
    [k] = read_kernel_profiles(raw_page(tmp_path)).kernels
    assert k.launches == 2 and k.duration_us == 110.0  # mean of 100 and 120 µs
    assert (k.compute_pct, k.memory_pct) == (12.5, 90.0)
    assert k.bound == "memory" and "fuse" in k.next_step
    # FLOPs per launch: 2 × 1,000,000 FMA + 500,000 add = 2.5 MFLOP over 1,000 MB of DRAM traffic
    assert k.intensity_flop_per_byte == round(2.5e6 / 1e9, 3)
    assert k.achieved_tflops == round(2.5e6 / 110_000 / 1000, 3)
    assert [(s.reason, s.cycles_per_instruction) for s in k.stalls] == [("long_scoreboard", 7.0), ("barrier", 0.25)]


@pytest.mark.parametrize("content, says", [
    ("just,some,columns\n1,2,3\n", "no header row"),
    ("", "no header row"),
    ('"ID","Kernel Name","gpu__time_duration.sum"\n"","","usecond"\n"1","k"\n', "line 3: 2 columns where the header has 3"),
    ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n"x","k","S","M","","1"\n',
     "line 2: the ID column holds 'x'"),
    ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n', "without any profiled kernel"),
])
def test_a_malformed_export_is_one_line_and_exit_2(tmp_path, capsys, content, says):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    for argv in (["kernels", str(bad)], ["analyze", str(DATA / "hta" / "alexnet_critical_path.json.gz"), "--kernels",
                                         str(bad)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_chat_app_loads_the_export_with_its_trace():
    from traceagent.request import AnalyzeRequest
    from traceagent.tui.loader import load_in_child

    trace = DATA / "tracelens" / "b200_eager_trace.json.gz"
    analysis, _ = load_in_child(AnalyzeRequest(str(trace), kernels=str(REAL)))  # in a child process, as the app does
    assert analysis.kernel_profiles is not None and analysis.kernel_profiles.kernels[0].bound == "latency"


@pytest.mark.parametrize("command", [["kernels"], ["analyze", "TRACE", "--kernels"]])
def test_an_export_too_large_to_be_one_says_so_in_the_words_of_an_export(tmp_path, capsys, command):
    huge = tmp_path / "ncu.csv"
    with open(huge, "wb") as f:
        f.write(b'"ID","Kernel Name"\n')
        f.truncate(300 << 20)  # sparse: the size is what is checked, before a byte is read
    b = TraceBuilder()
    b.kernel("gemm", 0, 10)
    trace = b.write(tmp_path / "t.json")
    assert main([str(trace) if word == "TRACE" else word for word in command] + [str(huge)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(huge) in err and "Nsight Compute export" in err and "--kernel-name" in err
    assert "--max-bytes" not in err and "trace" not in err.replace(str(tmp_path), "").removeprefix("traceagent")
