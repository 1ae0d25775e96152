"""`traceagent analyze` on the real shared traces: verdicts that match what is known about each
job (SOURCE.md describes the ResNet50 runs as DataLoader-bound with num_workers=0 and fixed with
num_workers=4), and the JSON contract the agent and the report build on."""

from __future__ import annotations

import json

import pytest
import rawtrace
from conftest import B200, CPU_ONLY, DLRM_8RANK, MI300, RESNET_NW0, RESNET_NW0_B, RESNET_NW4, RESNET_NW4_B, analyzed

from traceagent.cli import main


def analyze_json(path, capsys) -> dict:
    assert main(["analyze", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("path", [RESNET_NW0, RESNET_NW0_B], ids=["run1", "run2"])
def test_resnet_num_workers_0_waits_on_data_loading(path):
    result = analyzed(path)
    v = result.verdict
    assert (v.limiter, v.root_cause) == ("idle", "dataloader")
    idle = result.ranks[0].findings.idle
    # the independent reader (tests/rawtrace.py) applies the first rule of the cause precedence
    # to the raw JSON: gaps of at least 10 µs that the DataLoader covers for at least half
    expected_us = rawtrace.dataloader_idle_ns(path) / 1000
    assert idle.by_cause_us["dataloader"] == pytest.approx(expected_us, abs=1.0)
    assert v.evidence["cause_us"] == pytest.approx(expected_us, abs=1.0)
    assert idle.cause_pct("dataloader") > 15


@pytest.mark.parametrize("path", [RESNET_NW4, RESNET_NW4_B], ids=["run1", "run2"])
def test_resnet_num_workers_4_is_not_data_loading(path):
    result = analyzed(path)
    assert result.verdict.root_cause != "dataloader"
    assert result.ranks[0].findings.idle.cause_pct("dataloader") < 2


def test_dlrm_reports_communication_per_rank(capsys):
    data = analyze_json(DLRM_8RANK, capsys)
    assert [r["rank"] for r in data["ranks"]] == list(range(8))
    for rank in data["ranks"]:
        assert rank["comm"]["kernels"] > 0 and rank["comm"]["comm_us"] > 0
        assert 0 <= rank["comm"]["exposed_pct"] <= 100
    comparison = data["comparison"]
    assert len(comparison["ranks"]) == 8
    # each rank's collective time, read from its raw file by the independent reader
    files = {int(p.name[len("worker")]): p for p in DLRM_8RANK.glob("worker*.json.gz")}
    for row in comparison["ranks"]:
        assert row["comm_us"] == pytest.approx(rawtrace.collective_ns(files[row["rank"]]) / 1000, abs=1.0)


@pytest.mark.parametrize("path, pageable", [(B200, 2), (RESNET_NW0, 12)])
def test_pageable_copies_are_reported(path, pageable, capsys):
    # counts of "Pageable" copy names in the raw JSON (see test_load.py)
    data = analyze_json(path, capsys)
    copies = data["ranks"][0]["memcpy"]
    assert copies["pageable_count"] == pageable
    assert copies["by_kind"]["HtoD"]["pageable_count"] == pageable


def test_json_contract(capsys):
    data = analyze_json(MI300, capsys)
    assert set(data["trace"]) >= {"path", "format", "ranks", "devices"}
    rank = data["ranks"][0]
    assert set(rank["breakdown"]) >= {"span_us", "busy_us", "idle_us", "idle_pct", "compute_us", "memcpy_us",
                                      "memset_us", "comm_us", "exposed_comm_us"}
    assert set(rank["idle"]) >= {"gaps", "by_cause_us", "top_gaps"}
    assert set(rank["idle"]["top_gaps"][0]) >= {"start_us", "dur_us", "cause", "evidence"}
    assert set(rank["memcpy"]) >= {"share_pct", "by_kind"}
    assert set(rank["memcpy"]["by_kind"]["DtoD"]) >= {"count", "bytes", "us", "gbps", "pageable_count"}
    assert set(rank["comm"]) >= {"share_pct", "exposed_pct", "exposed_of_comm_pct"}
    assert set(rank["hot_kernels"][0]) >= {"name", "count", "total_us", "share_of_busy_pct", "mean_us"}
    assert set(rank["launch"]) >= {"median_latency_us", "short_kernel_pct"}
    assert set(rank["steps"]) >= {"count", "mean_us", "max_us"}
    for verdict in (rank["verdict"], data["verdict"]):
        assert set(verdict) >= {"limiter", "root_cause", "headline", "hypothesis", "next_step", "evidence"}
        assert verdict["limiter"] in ("idle", "data_movement", "communication", "compute")
    # busy and span per device, from the raw events by the independent reader
    for device, intervals in rawtrace.device_intervals(MI300).items():
        busy = rawtrace.union(intervals)
        b = rank["breakdown"]["devices"][str(device)]
        assert b["busy_us"] == pytest.approx(rawtrace.length(busy) / 1000, abs=1.0)
        assert b["span_us"] == pytest.approx((busy[-1][1] - busy[0][0]) / 1000, abs=0.01)


def test_cpu_only_trace_verdict(capsys):
    data = analyze_json(CPU_ONLY, capsys)
    assert data["verdict"]["limiter"] is None
    assert "CPU-only" in data["verdict"]["headline"]
    assert main(["analyze", str(CPU_ONLY)]) == 0
    assert "no device activity" in capsys.readouterr().out


def test_readable_output_leads_with_the_verdict(capsys):
    assert main(["analyze", str(RESNET_NW0)]) == 0
    out = capsys.readouterr().out
    assert out.index("Verdict: idle · dataloader") < out.index("Hot kernels")
    assert "num_workers=4" in out and "dataloader" in out


def test_trace_strings_print_literally_not_as_markup(tmp_path, capsys):
    # names are untrusted: Rich would read "[/]" as a closing tag (and crash) and "[red]" as a style
    from builder import TraceBuilder

    b = TraceBuilder()
    for i in range(5):
        b.op("[/]aten::evil[red]", start=i * 100, dur=20)
        b.kernel("fused_[/]kernel[bold]", start=i * 100 + 10, dur=30, launch_at=i * 100 + 1)
    folder = tmp_path / "runs [rank0]"
    folder.mkdir()
    path = b.write(folder / "trace.json")
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fused_[/]kernel[bold]" in out and "by [/]aten::evil[red]" in out
    assert f"{path}" in out


def test_tables_fit_80_columns_with_every_number_whole(capsys):
    # at 80 columns Rich once cut "4.00 ms" to "4.00 …" to make room for long NCCL kernel names
    assert main(["analyze", str(DLRM_8RANK)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines if line[:1] in "┏┃┡│└") <= 80  # prose lines soft-wrap
    result = analyzed(DLRM_8RANK)
    # the detail tables show the rank the verdict is about
    first = next(r for r in result.to_dict()["ranks"] if r["rank"] == result.verdict.rank)
    from traceagent.format import duration

    table = lines[lines.index(next(line for line in lines if "Hot kernels" in line)):]
    rows = [line for line in table[4:] if line.startswith("│ ") and not line.startswith("│   by")]
    for kernel, row in zip(first["hot_kernels"][:8], rows):
        assert row.startswith("│ " + kernel["short_name"][:30])
        assert f" {duration(kernel['total_us'])} │" in row and f" {duration(kernel['mean_us'])} │" in row
