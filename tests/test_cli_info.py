"""`traceagent info`, and what every kind of bad input looks like to the user."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import CPU_ONLY, DLRM_8RANK, NSYS_BEFORE, RESNET_NW0, write_trace

from traceagent.cli import main


def run_cli(*args: str, capsys) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def info_json(path, capsys) -> dict:
    code, out, _ = run_cli("info", str(path), "--json", capsys=capsys)
    assert code == 0
    return json.loads(out)


def test_info_on_the_8_rank_dlrm_directory(capsys):
    data = info_json(DLRM_8RANK, capsys)
    assert data["ranks"] == 8 and data["world_size"] == 8
    assert [r["rank"] for r in data["traces"]] == list(range(8))
    code, out, _ = run_cli("info", str(DLRM_8RANK), capsys=capsys)
    assert code == 0 and "8 rank(s)" in out


def test_info_on_nsight_export_lists_two_devices(capsys):
    data = info_json(NSYS_BEFORE, capsys)
    assert data["format"] == "nsys"
    assert data["traces"][0]["devices"] == {"0": "GPU 0", "1": "GPU 1"}
    assert data["traces"][0]["counts"]["kernels"] == 4010
    code, out, _ = run_cli("info", str(NSYS_BEFORE), capsys=capsys)
    rows = [line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│")]
    assert code == 0 and rows == ["0", "1"]  # unnamed GPUs by their id, not "0: GPU 0"
    code, out, _ = run_cli("info", str(DLRM_8RANK), capsys=capsys)
    assert "│ 0: Tesla" in out  # a named GPU keeps its name


def test_cpu_only_trace_loads_and_says_so(capsys):
    # recorded on this machine with the CPU build of PyTorch 2.13 (torch.profiler, CPU activity)
    data = info_json(CPU_ONLY, capsys)
    trace = data["traces"][0]
    assert trace["has_device_activity"] is False
    assert trace["counts"]["steps"] == 3 and trace["counts"]["host_events"] > 0
    code, out, _ = run_cli("info", str(CPU_ONLY), capsys=capsys)
    assert code == 0 and "no device activity" in out


def test_info_message_lines_stay_whole_under_a_long_path(tmp_path, capsys):
    # a CI checkout under a longer path once split this line at 80 columns, so grep missed it
    deep = tmp_path / ("a-long-directory-name-" * 4) / CPU_ONLY.name
    deep.parent.mkdir()
    shutil.copy(CPU_ONLY, deep)
    code, out, _ = run_cli("info", str(deep), capsys=capsys)
    assert code == 0
    assert f"{deep}: no device activity (a CPU-only trace)" in out.splitlines()[-1]


def test_demo_runs_on_the_bundled_trace(capsys):
    code, out, _ = run_cli("demo", capsys=capsys)
    assert code == 0 and "Verdict: idle · dataloader" in out


def test_truncated_json_loads_what_is_complete(tmp_path, capsys):
    raw = gzip.decompress(RESNET_NW0.read_bytes())
    cut = tmp_path / "killed.json"
    cut.write_bytes(raw[: len(raw) * 2 // 3])  # a job killed while writing its trace
    data = info_json(cut, capsys)
    trace = data["traces"][0]
    # this 2021 trace writes host events first, device events last: the cut keeps some host events
    # (fewer than the whole file has) and no device events
    whole = info_json(RESNET_NW0, capsys)["traces"][0]["counts"]
    assert 0 < trace["counts"]["host_events"] < whole["host_events"]
    assert trace["counts"]["kernels"] == 0 < whole["kernels"]
    assert any("the file ends mid-event (cut short" in w for w in trace["warnings"])


def test_truncated_gzip_loads_what_is_complete(tmp_path, capsys):
    cut = tmp_path / "killed.json.gz"
    cut.write_bytes(RESNET_NW0.read_bytes()[:600_000])
    data = info_json(cut, capsys)
    warnings = " ".join(data["traces"][0]["warnings"])
    assert "gzip stream ends early" in warnings and "ends mid-event" in warnings
    assert data["traces"][0]["counts"]["kernels"] > 0


def test_truncated_pretty_printed_trace(tmp_path, capsys):
    # current PyTorch writes one field per line: the recovery must not rely on one event per line
    raw = gzip.decompress(CPU_ONLY.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    data = info_json(cut, capsys)
    whole = info_json(CPU_ONLY, capsys)["traces"][0]["counts"]["host_events"]
    assert 0 < data["traces"][0]["counts"]["host_events"] < whole  # the events before the cut


@pytest.mark.parametrize("content, problem", [
    (b"hello, this is a text file\n", "not a trace file"),
    (b"", "the file is empty"),
    (b"\x1f\x8b\x08\x00garbage-garbage-garbage", "corrupt gzip file"),
    (b'{"some": "json", "but": ["not", "a", "trace"]}', "JSON without a traceEvents list"),
    (b'{"traceEvents": [{"ph": "X", "name": ', "malformed JSON that could not be recovered"),
])
def test_bad_files_get_one_clear_line_and_exit_2(tmp_path, capsys, content, problem):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, _, err = run_cli("info", str(bad), capsys=capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"traceagent: error: {bad}: {problem}")
    assert "Traceback" not in err


def test_missing_path(tmp_path, capsys):
    code, _, err = run_cli("info", str(tmp_path / "nope.json"), capsys=capsys)
    assert code == 2 and "no such file or directory" in err


def test_empty_directory(tmp_path, capsys):
    code, _, err = run_cli("info", str(tmp_path), capsys=capsys)
    assert code == 2 and "a directory with no trace files in it" in err


def test_two_files_claiming_the_same_rank(tmp_path, capsys):
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
             "args": {"device": 0, "stream": 7}}
    write_trace(tmp_path / "a.json", [event], distributedInfo={"rank": 3, "world_size": 4})
    write_trace(tmp_path / "b.json", [event], distributedInfo={"rank": 3, "world_size": 4})
    code, _, err = run_cli("info", str(tmp_path), capsys=capsys)
    assert code == 2
    assert "two files claim rank 3: a.json and b.json" in err


def test_unknown_sqlite_file(tmp_path, capsys):
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    code, _, err = run_cli("info", str(db), capsys=capsys)
    assert code == 2 and "a SQLite database but not an Nsight Systems export" in err


def test_nsys_rep_without_nsys_names_the_export_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00NSYS binary report")
    code, _, err = run_cli("info", str(rep), capsys=capsys)
    assert code == 2
    assert "nsys export --type sqlite" in err and "nsys is not on PATH" in err


def test_rank_directory_with_one_bad_file_names_that_file(tmp_path, capsys):
    # the bad rank is named, and the good ones are still described
    for src in sorted(DLRM_8RANK.iterdir())[:2]:
        shutil.copy(src, tmp_path / src.name)
    (tmp_path / "worker9.json").write_text("not json")
    code, out, err = run_cli("info", str(tmp_path), "--json", capsys=capsys)
    assert code == 0 and f"warning: {tmp_path / 'worker9.json'}: not a trace file" in err
    data = json.loads(out)
    assert data["ranks"] == 2 and [f["file"] for f in data["failed_ranks"]] == [str(tmp_path / "worker9.json")]


def test_console_script_exit_code_on_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("nope")
    done = subprocess.run([sys.executable, "-m", "traceagent", "info", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not a trace file" in done.stderr


@pytest.mark.parametrize("gate", ["dataloader:10", "idle:25", "dataloader"])
def test_fail_on_gates_a_pipeline(capsys, gate):
    from conftest import RESNET_NW0, RESNET_NW4, analyzed

    assert main(["analyze", str(RESNET_NW0), "--fail-on", gate]) == 1  # 28.6% waiting for data, 39.4% idle
    err = capsys.readouterr().err
    name = gate.split(":")[0]
    if ":" in gate:  # the figure said is the one analyze reports
        idle = analyzed(RESNET_NW0).ranks[0].findings.idle
        share = idle.idle_pct if name == "idle" else idle.by_cause_pct["dataloader"]
        assert f"traceagent: {name} is {share:.1f}% of the job's device time" in err
    assert main(["analyze", str(RESNET_NW4), "--fail-on", gate]) == 0  # num_workers=4: 0% data, 23.4% idle


def test_fail_on_an_unknown_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", "x.json", "--fail-on", "slowness:5"])
    assert exit_.value.code == 2 and "'slowness' is not one of: idle" in capsys.readouterr().err
