"""`traceagent profile` and `traceagent runs`: scripts written here run unmodified under the CPU
build of PyTorch (CI installs it; these tests skip without it), each run is kept and compared with
the one before. The traces are read back here with gzip and json, apart from traceagent's reader."""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import io
import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import DATA, RESNET_NW0, RESNET_NW4

from traceagent.cli import main
from traceagent.profile import runs
from traceagent.profile.command import LAUNCHER, with_argument, wrapped
from traceagent.profile.record import _run, conclude

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="could not import 'torch'")

TRAIN = """
    import os, torch
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    batches = int(os.environ.get("TRAIN_BATCHES", "8"))
    data = TensorDataset(torch.randn(16 * batches, 32), torch.randint(0, 4, (16 * batches,)))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(DataLoader(data, batch_size=16)):
        if step == int(os.environ.get("FAIL_AT", "-1")):
            raise RuntimeError("planted failure")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def profile(*args: str) -> tuple[int, str, str]:
    """`traceagent profile ARGS` in this process: its exit status, stdout and stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["profile", *args])
    return code, stdout.getvalue(), stderr.getvalue()


def trace_events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def only_run(runs_dir: Path) -> tuple[Path, runs.RunRecord]:
    (found,) = runs.all_runs(runs_dir)
    return found


SECRET = "s3cr3t-Value-7731"


@pytest.fixture(scope="module")
def tried(tmp_path_factory):
    """A DataLoader training loop recorded as it is, then with --try FAIL_AT=5 (the variable makes
    it fail at its 6th batch, after the steps recorded), with a secret in the environment and on
    the command line."""
    folder = tmp_path_factory.mktemp("training")
    checks_args = f"import sys\nassert sys.argv[1:] == ['--api-key', {SECRET!r}]\n"  # passed through unchanged
    train = script(folder, "train.py", checks_args + textwrap.dedent(TRAIN))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MY_API_TOKEN", SECRET)
        result = profile("--runs-dir", str(folder / "runs"), "--skip", "2", "--steps", "3", "--label", "first",
                         "--try", "FAIL_AT=5", "--", sys.executable, str(train), "--api-key", SECRET)
    return folder / "runs", result


@needs_torch
@pytest.mark.xdist_group("tried")  # with the other reader of the same two runs: recorded once
def test_a_training_loop_is_recorded_unchanged_with_steps_from_the_optimizer(tried):
    runs_dir, (_, out, err) = tried
    folder, run = runs.all_runs(runs_dir)[0]
    assert (run.status, run.exit_code, run.label, run.steps_seen) == ("ok", 0, "first", 8)  # 8 batches, 8 steps
    assert run.traces == ["trace.pt.trace.json.gz"] and run.environment.torch
    events = trace_events(folder / "traces" / run.traces[0])
    # skip 2 steps, record 3: the steps the optimizer hook marked, as torch.profiler names them
    assert sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")) == [
        "ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert any("Input Dims" in e.get("args", {}) for e in events)  # shapes
    assert any(e.get("cat") == "python_function" for e in events)  # stacks
    assert any(e.get("name") == "[memory]" for e in events)  # memory
    # the verdict printed, as analyze prints it; the analysis kept beside the run
    assert "Verdict" in out and "recorded:" in err
    analysis = json.loads((folder / "analysis.json").read_text())
    assert analysis["verdict"]["headline"] == run.headline
    assert analysis["trace"]["failed_ranks"] == [] and sorted(p.name for p in (folder / "traces").iterdir()) == run.traces


@needs_torch
def test_an_inference_loop_is_stepped_by_a_named_function_or_recorded_for_a_time_window(tmp_path):
    script(tmp_path, "model_lib.py", """
        import torch
        def decode(x):
            return torch.tanh(x @ x.T)
    """)
    infer = script(tmp_path, "infer.py", """
        import sys, time, torch
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import model_lib
        x = torch.randn(64, 64)
        for _ in range(int(sys.argv[1])):
            with torch.no_grad():
                model_lib.decode(x)
            time.sleep(0.005)
    """)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env_path}"  # model_lib importable before the script runs
    try:
        code, _, err = profile("--runs-dir", str(tmp_path / "stepped"), "--steps-on", "model_lib:decode", "--skip", "2",
                               "--steps", "3", "--", sys.executable, str(infer), "10")
    finally:
        os.environ["PYTHONPATH"] = env_path
    assert code == 0, err
    folder, run = only_run(tmp_path / "stepped")
    events = trace_events(folder / "traces" / run.traces[0])
    assert run.steps_seen == 10
    assert len([e for e in events if e.get("name", "").startswith("ProfilerStep#")]) == 3

    code, _, err = profile("--runs-dir", str(tmp_path / "window"), "--window", "0.1", "--delay", "0.05", "--",
                           sys.executable, str(infer), "100")
    assert code == 0, err
    folder, run = only_run(tmp_path / "window")
    events = trace_events(folder / "traces" / run.traces[0])
    assert run.steps_seen == 0 and any(e.get("name") == "aten::tanh" for e in events)
    # 0.1 s of a loop of 5 ms iterations (over 0.5 s): some of them, not all 100 (a machine under
    # load may run only one or two in the window: the count is not a timing test)
    assert 1 <= len([e for e in events if e.get("name") == "aten::tanh"]) < 100


@needs_torch
def test_two_ranks_under_torchrun_on_gloo_are_one_job(tmp_path):
    ddp = script(tmp_path, "ddp.py", """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        model = torch.nn.Linear(32, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            loss = model(torch.randn(16, 32)).sum()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():  # data parallel by hand: gloo's all-reduce of each gradient
                dist.all_reduce(p.grad)
            opt.step()
        dist.barrier()
        dist.destroy_process_group()
    """)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    code, out, err = profile("--runs-dir", str(tmp_path / "runs"), "--skip", "1", "--steps", "2", "--timeout", "120",
                             "--", *torchrun, str(ddp))
    assert code == 0, err
    folder, run = only_run(tmp_path / "runs")
    assert run.traces == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"] and not run.notes
    analysis = json.loads((folder / "analysis.json").read_text())
    assert [r["rank"] for r in analysis["ranks"]] == [0, 1] and analysis["trace"]["world_size"] == 2
    assert "2 rank(s)" in out


def test_a_command_past_its_timeout_is_interrupted_as_ctrl_c_would(tmp_path):
    # the script gets a KeyboardInterrupt (and INTERRUPT_GRACE_S to write what it recorded)
    # -S: no site packages to import first, so a loaded machine reaches the try before the signal
    # (it came during start-up once, under load, and the child was killed: -9)
    handler = "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(7)\n"
    code, interrupted = _run([sys.executable, "-S", "-c", handler], dict(os.environ), timeout=2.0)
    assert (code, interrupted) == (7, True)


def test_the_timeout_reaches_a_script_even_where_the_shell_ignores_ctrl_c(tmp_path):
    # `traceagent profile ... &` from a script: SIGINT is ignored here, and would be in the child,
    # which then could not be interrupted (only killed, after the grace, its trace unwritten)
    handler = "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(7)\n"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code, interrupted = _run([sys.executable, "-S", "-c", handler], dict(os.environ), timeout=2.0)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # as this process had it
    finally:
        signal.signal(signal.SIGINT, before)
    assert (code, interrupted) == (7, True)


@pytest.mark.parametrize("args, says", [
    (["--steps", "0", "--", "python", "t.py"], "argument --steps: '0': expected at least 1"),
    (["--window", "-1", "--", "python", "t.py"], "argument --window: '-1': expected at least 0.001"),
    pytest.param(["--runs-dir", "{file}", "--", sys.executable, "t.py"], "cannot make a run folder there",
                 marks=needs_torch),
    ([], "no command: put it after --"),
    (["--", "bash", "run.sh"], "expected a Python command"),
])
def test_a_bad_request_is_one_line_exit_2_and_nothing_is_made(tmp_path, capsys, args, says):
    taken = tmp_path / "a file"
    taken.write_text("")
    argv = ["profile", "--runs-dir", str(tmp_path / "runs"), *(a.replace("{file}", str(taken)) for a in args)]
    try:
        code = main(argv)
    except SystemExit as usage:  # argparse's usage errors
        code = usage.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_missing_nsys_or_ncu_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither tool, nor anything else
    for option in (["--nsys"], ["--ncu", "gemm"]):
        code = main(["profile", "--runs-dir", str(tmp_path / "runs"), *option, "--", sys.executable, "train.py"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and " is not on PATH: install NVIDIA Nsight " in err
    assert not (tmp_path / "runs").exists()  # nothing half-made


def test_nsys_and_ncu_runs_are_exported_analysed_and_joined(tmp_path, monkeypatch, capsys):
    # stand-ins for nsys and ncu that write what the real ones would: an SQLite export, a CSV
    tools = tmp_path / "bin"
    tools.mkdir()
    sqlite, csv = DATA / "nsys-ai" / "mfu_2gpu_before.sqlite", DATA / "ncu" / "superbench_cublaslt_b200.ncu.csv"
    for name, body in (("nsys", f"""
            import shutil, sys
            if "--help" in sys.argv:
                print("--python-sampling=<true|false>")
            else:
                out = next(a for a in sys.argv if a.startswith("--output=")).split("=", 1)[1]
                open(out + ".args", "w").write(" ".join(sys.argv[1:]))
                shutil.copy({str(sqlite)!r}, out + ".sqlite")
        """), ("ncu", f"""
            import shutil, sys
            shutil.copy({str(csv)!r}, sys.argv[sys.argv.index("--log-file") + 1])
            open(sys.argv[sys.argv.index("--log-file") + 1] + ".args", "w").write(" ".join(sys.argv[1:]))
        """)):
        tool = script(tools, name, f"#!{sys.executable}\n" + textwrap.dedent(body))
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    code = main(["profile", "--runs-dir", str(tmp_path / "runs"), "--nsys", "--ncu", "gemm", "--",
                 sys.executable, "train.py", "--epochs", "1"])
    out = capsys.readouterr().out
    assert code == 0
    folder, run = only_run(tmp_path / "runs")
    assert run.traces == ["nsys.sqlite"] and run.status == "ok"
    nsys_args = (folder / "nsys.args").read_text()
    assert "--python-sampling=true" in nsys_args and nsys_args.endswith(f"{sys.executable} train.py --epochs 1")
    assert "--kernel-name regex:gemm" in (folder / "ncu.csv.args").read_text()
    analysis = json.loads((folder / "analysis.json").read_text())
    assert analysis["trace"]["format"] == "nsys" and analysis["kernel_profiles"]["kernels"]
    assert "Verdict" in out

    # a trace over the size limit is not kept, and the run says why and what to change
    code = main(["profile", "--runs-dir", str(tmp_path / "small"), "--nsys", "--max-mb", "0", "--", sys.executable,
                 "train.py"])
    _, run = only_run(tmp_path / "small")
    assert code == 1 and run.traces == [] and run.status == "no trace"
    assert run.notes[0].startswith("nsys.sqlite was ") and "over the 0 MB limit" in run.notes[0]
    assert "over the 0 MB limit" in capsys.readouterr().err


def recorded(runs_dir: Path, trace: Path, label: str, started: str) -> runs.RunRecord:
    """A run of `trace` as `profile` keeps it (the recording itself is tested above, on the CPU)."""
    folder = runs.create(runs_dir, label, "train.py")
    (folder / "traces" / "rank0.pt.trace.json.gz").symlink_to(trace)  # the trace's analysis is cached once
    record = runs.RunRecord(id=folder.name, label=label, command=["python", "train.py"], script="train.py",
                            started=started, seconds=1.0, status="ok", exit_code=0,
                            environment=runs.environment({}, {}, {"torch": "2.13.0", "gpus": ["Tesla V100"]}),
                            traces=["rank0.pt.trace.json.gz"])
    return conclude(folder, record, runs_dir).record


def mean_step_us(trace: Path) -> float:
    steps = [e["dur"] for e in trace_events(trace) if e.get("name", "").startswith("ProfilerStep#")]
    return sum(steps) / len(steps)


def test_each_run_is_compared_with_the_last_and_the_prediction_with_the_measurement(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside any git checkout: the runs differ in nothing but their traces
    runs_dir = tmp_path / "runs"
    first = recorded(runs_dir, RESNET_NW0, "num_workers=0", "2026-12-05T10:00:00.000+00:00")
    second = recorded(runs_dir, RESNET_NW4, "num_workers=4", "2026-12-05T10:00:00.001+00:00")  # in the same second
    third = recorded(runs_dir, RESNET_NW4, "again", "2026-12-05T10:00:00.002+00:00")
    assert first.baseline is None and (second.baseline, third.baseline) == (first.id, second.id)
    # measured: the mean ProfilerStep of each trace, read here
    before, after = mean_step_us(RESNET_NW0), mean_step_us(RESNET_NW4)
    assert second.faster_pct == pytest.approx((before - after) / before * 100, abs=0.01)
    # predicted before the change: the first run's verdict replayed without data loading
    predicted = json.loads((runs_dir / first.id / "analysis.json").read_text())["verdict"]["saving"]["simulated_pct"]
    assert second.predicted_pct == predicted and second.root_cause_gone is True
    assert f"predicted {predicted:.1f}% of step time" in second.comparison
    assert f"measured {second.faster_pct:.1f}% faster" in second.comparison
    assert third.faster_pct == 0.0

    assert main(["runs", "--runs-dir", str(runs_dir), "--json"]) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)] == ["num_workers=0", "num_workers=4", "again"]
    assert main(["runs", "--runs-dir", str(runs_dir)]) == 0
    listed = capsys.readouterr().out
    assert f"{second.faster_pct:+.1f}%, cause gone" in listed and "step time, run 1 → 3: █▁▁" in listed
    assert main(["runs", "--runs-dir", str(runs_dir), "-o", str(tmp_path / "runs.html")]) == 0
    page = (tmp_path / "runs.html").read_text()
    assert page.count("<rect") == 3 and "num_workers=4" in page and f"{second.faster_pct:+.1f}%" in page
    capsys.readouterr()
    assert main(["runs", "diff", "1", second.id, "--runs-dir", str(runs_dir)]) == 0
    compared = capsys.readouterr().out
    assert "step time" in compared and "What else differs between the runs: nothing recorded" in compared
    assert main(["runs", "diff", "1", "nope", "--runs-dir", str(runs_dir)]) == 2
    assert "'nope' is no run" in capsys.readouterr().err


@needs_torch
@pytest.mark.xdist_group("tried")
def test_try_records_the_variant_which_fails_half_way_is_kept_and_no_secret_is_kept(tried):
    runs_dir, (code, out, err) = tried
    (_, base), (variant_dir, variant) = runs.all_runs(runs_dir)
    # the failed run is kept, marked failed with its exit status and the trace it completed
    assert (variant.status, variant.exit_code, variant.steps_seen) == ("failed", 1, 5) and code == 1
    assert variant.traces == ["trace.pt.trace.json.gz"] and (variant_dir / "analysis.json").exists()
    assert "the script failed (exit status 1); kept" in err and "planted failure" not in err
    assert variant.tried == ["FAIL_AT=5"] and variant.baseline == base.id and "Compared with" in out
    assert variant.environment.variables["FAIL_AT"] == "5" and base.environment.variables["MY_API_TOKEN"] is None
    assert variant.command[-2:] == ["--api-key", "***"]
    for path in runs_dir.rglob("*"):
        if path.is_file():
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert SECRET.encode() not in data, path


def test_a_script_option_to_try_is_read_as_the_value_of_try():
    from traceagent.cli import _try_values_joined

    argv = ["profile", "--try", "--num-workers=4", "--try", "OMP_NUM_THREADS=2", "--", "python", "t.py", "--try", "-x"]
    assert _try_values_joined(argv) == ["profile", "--try=--num-workers=4", "--try", "OMP_NUM_THREADS=2", "--", "python",
                                        "t.py", "--try", "-x"]  # the user's command is left as it is


def test_commands_are_wrapped_so_the_script_runs_unchanged():
    launched = wrapped(["python3", "-u", "train.py", "--lr", "0.1"])
    assert launched.argv == ["python3", "-u", LAUNCHER, "train.py", "--lr", "0.1"] and launched.script == "train.py"
    assert wrapped(["python", "-m", "pkg.train", "-x"]).argv == ["python", LAUNCHER, "-m", "pkg.train", "-x"]
    run = wrapped(["torchrun", "--nnodes=1", "--nproc_per_node", "4", "-m", "pkg.train", "--bs", "8"])
    assert run.argv[1:6] == ["--nnodes=1", "--nproc_per_node", "4", "--no-python", run.python]
    assert run.argv[6:] == [LAUNCHER, "-m", "pkg.train", "--bs", "8"] and run.processes == 4
    module = wrapped([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "t.py"])
    assert module.argv == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "--no-python", sys.executable, LAUNCHER, "t.py"] and module.processes == 2
    for bad in ([], ["bash", "run.sh"], ["python", "-c", "print(1)"], ["torchrun", "--no-python", "app"]):
        with pytest.raises(ValueError):
            wrapped(bad)
    assert with_argument(["python", "t.py", "--workers", "0"], "--workers", "4") == ["python", "t.py", "--workers", "4"]
    assert with_argument(["python", "t.py", "--workers=0"], "--workers", "4") == ["python", "t.py", "--workers=4"]
    assert with_argument(["python", "t.py"], "--workers", "4") == ["python", "t.py", "--workers", "4"]
