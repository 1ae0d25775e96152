"""Nothing traceagent writes can destroy a trace: an output that is the input (by any path or
link) is refused with exit 2 before anything runs, every file is written whole or not at all (a
full disk, simulated with RLIMIT_FSIZE in a child, leaves the old file as it was), and annotate
reads the trace it was asked for, repaired as the analysis repaired it."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import pytest
from builder import TraceBuilder
from conftest import DLRM_8RANK, write_trace
from test_hostile import RAW

import traceagent
from traceagent.cli import main
from traceagent.outputs import write_atomically
from traceagent.report.annotate import CATEGORY


def small_trace(path):
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 300)
    b.kernel("gemm", 50, 100, launch_at=10)
    b.kernel("gemm", 250, 40, launch_at=200)
    return b.write(path)


@pytest.mark.parametrize("command", ["report", "annotate"])
@pytest.mark.parametrize("how", ["same_path", "symlink", "hard_link", "relative"])
def test_an_output_that_is_the_input_is_refused_and_the_trace_survives(tmp_path, capsys, monkeypatch, command, how):
    trace = small_trace(tmp_path / "t.json")
    before = trace.read_bytes()
    output = {"same_path": trace, "symlink": tmp_path / "link.json", "hard_link": tmp_path / "hard.json",
              "relative": "sub/../t.json"}[how]
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        output.symlink_to(trace)
    elif how == "hard_link":
        os.link(trace, output)
    monkeypatch.chdir(tmp_path)
    assert main([command, str(trace), "-o", str(output)]) == 2
    err = capsys.readouterr().err
    assert "is the trace being read" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert trace.read_bytes() == before


def test_a_trace_named_output_inside_a_rank_directory_is_refused(tmp_path, capsys):
    job = tmp_path / "run"
    job.mkdir()
    for f in sorted(DLRM_8RANK.iterdir())[:2]:
        (job / f.name).write_bytes(f.read_bytes())
    listing = sorted(os.listdir(job))
    assert main(["report", str(job), "-o", str(job / "summary.json")]) == 2
    assert "would be read as a rank next time" in capsys.readouterr().err
    assert main(["report", str(job), "-o", str(job / listing[0])]) == 2  # a rank file itself
    assert "is the trace being read" in capsys.readouterr().err
    assert sorted(os.listdir(job)) == listing
    assert main(["report", str(job), "-o", str(job / "diagnosis.md")]) == 0  # not a trace name: fine


def _run_with_a_full_disk(args: list[str], limit: int, cache) -> subprocess.CompletedProcess:
    """`traceagent ARGS` in a child that may write no file past `limit` bytes (what a full disk
    does to a write: it fails part way, EFBIG here, ENOSPC there)."""
    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "traceagent", *args], capture_output=True, text=True,
                          preexec_fn=limit_writes, env={**os.environ, "TRACEAGENT_CACHE_DIR": str(cache)})


@pytest.mark.parametrize("command,name", [("report", "old_report.md"), ("annotate", "old_annotated.json")])
def test_a_full_disk_leaves_the_old_output_and_the_trace_as_they_were(tmp_path, command, name):
    trace = small_trace(tmp_path / "t.json")
    before = trace.read_bytes()
    output = tmp_path / name
    output.write_bytes(b"the previous output, which must survive")
    done = _run_with_a_full_disk([command, str(trace), "-o", str(output), "--no-cache"], 100, tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert "cannot write" in done.stderr and "Traceback" not in done.stderr
    assert output.read_bytes() == b"the previous output, which must survive"
    assert trace.read_bytes() == before
    assert set(os.listdir(tmp_path)) - {"cache"} == {"t.json", name}  # no temporary file left behind


def test_write_atomically_keeps_the_old_files_mode_and_follows_links(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "latest.md"
    link.symlink_to(target)
    write_atomically(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640


@pytest.mark.parametrize("damage", ["nan", "cut_short", "cut_after_decimal_point"])
def test_annotate_writes_valid_json_for_traces_the_analysis_repairs(tmp_path, capsys, damage):
    from test_hostile import CASES

    content = {"nan": CASES["nan_infinity"][0], "cut_short": CASES["cut_short"][0],
               "cut_after_decimal_point": CASES["cut_after_decimal_point"][0]}[damage]
    assert content != RAW
    trace = tmp_path / "damaged.json"
    trace.write_bytes(content)
    out = tmp_path / "annotated.json"
    assert main(["annotate", str(trace), "-o", str(out)]) == 0, capsys.readouterr().err

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    doc = json.loads(out.read_text(), parse_constant=no_constants)  # strict JSON: no NaN, no Infinity
    assert any(e.get("cat") == CATEGORY for e in doc["traceEvents"])
    original = traceagent.analyze(trace, use_cache=False).ranks[0]
    again = traceagent.analyze(out, use_cache=False).ranks[0]
    assert again.findings.idle.idle_us == original.findings.idle.idle_us
    assert len(again.trace.gpu) == len(original.trace.gpu)


def test_annotate_reads_the_file_it_was_asked_for_even_when_the_cache_knows_it_from_elsewhere(tmp_path, monkeypatch,
                                                                                              isolated_cache):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    small_trace(a / "t.json")
    write_trace(b / "t.json", [{"ph": "X", "cat": "kernel", "name": "not_this_one", "pid": 0, "tid": 7, "ts": 0,
                                "dur": 10, "args": {"device": 0, "stream": 7}}])
    monkeypatch.chdir(a)
    traceagent.analyze("t.json")  # cached with the path typed in a/
    monkeypatch.chdir(b)
    assert main(["annotate", "../a/t.json", "-o", "out.json"]) == 0
    names = {e["name"] for e in json.loads((b / "out.json").read_text())["traceEvents"]}
    assert "gemm" in names and "not_this_one" not in names


def test_sigterm_mid_write_leaves_no_temporary_file_and_the_old_output(tmp_path):
    trace = small_trace(tmp_path / "t.json")
    output = tmp_path / "report.md"
    output.write_text("the old report")
    # the report is written, then the child is held in fsync until the test terminates it
    script = ("import os, sys, time\n"
              "os.fsync = lambda fd: (print('writing', flush=True), time.sleep(60))\n"
              "from traceagent.cli import main\n"
              f"sys.exit(main(['report', {str(trace)!r}, '-o', {str(output)!r}]))\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the temporary is there, mid-write
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode == 143 and "terminated" in stderr and "Traceback" not in stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert output.read_text() == "the old report"


def test_a_later_write_removes_temporaries_of_killed_writers_and_keeps_live_ones(tmp_path):
    import socket

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    output = tmp_path / "out.json"
    killed = tmp_path / f".out.json.tmp-{host}-{int(dead.stdout)}-abc123.tmp"  # as SIGKILL mid-write leaves it
    live = tmp_path / f".out.json.tmp-{host}-{os.getpid()}-def456.tmp"  # a writer running now
    other = tmp_path / f".other.json.tmp-{host}-{int(dead.stdout)}-abc123.tmp"  # another output's
    mine = tmp_path / ".out.json.notes.tmp"  # not of our naming
    for f in (killed, live, other, mine):
        f.write_bytes(b"x" * 1000)
    write_atomically(output, "{}")
    assert not killed.exists() and live.exists() and other.exists() and mine.exists()
    assert output.read_text() == "{}"
