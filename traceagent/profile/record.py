"""`traceagent profile`: run the user's command under torch.profiler (command.wrapped, _launch.py),
keep the run (runs.py), analyse its traces and compare it with the previous run of the same
script: did the root cause go away, and the measured saving beside the one predicted."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from .. import api
from ..detect.analysis import Analysis
from ..detect.compare.diff import DiffResult, diff
from ..detect.core.encode import to_json
from ..errors import TraceError
from ..outputs import write_atomically
from . import runs
from ._launch import CONFIG_VARIABLE
from .command import wrapped

NSIGHT = {"nsys": "Systems", "ncu": "Compute"}  # each tool's product
INTERRUPT_GRACE_S = 30  # how long an interrupted script gets to write what it recorded


class ProfileError(Exception):
    """What stops a run before it starts (a missing tool, a command that is not Python): one line."""


@dataclass(frozen=True)
class ProfileOptions:
    """What to run and what to record (the defaults skip warm-up and compilation, then record a few steps)."""

    command: list[str]
    label: str | None = None
    steps: int = 3  # steps recorded
    skip: int = 3  # steps run first, unrecorded (warm-up, compilation, the first batches)
    steps_on: str | None = None  # `module:qualname`: each return of it is a step (no optimizer)
    window: float | None = None  # seconds to record, from `delay` after the start (no steps at all)
    delay: float = 0.0
    runs_dir: Path = runs.RUNS_DIR
    max_mb: int = 2048  # a trace larger than this is not kept
    public: dict[str, str] = field(default_factory=dict)  # environment values the record may keep (--env)
    tried: dict[str, str] = field(default_factory=dict)  # environment variables set for this run (--try)
    tried_args: list[str] = field(default_factory=list)  # script options changed for this run (--try)
    timeout: float | None = None  # seconds the command may run; then it is interrupted, what it recorded kept
    quiet: bool = False  # the command's output to nowhere (the chat app re-profiling: the screen is its own)
    nsys: bool = False  # record under Nsight Systems instead of torch.profiler
    ncu: str | None = None  # then Nsight Compute on the kernels matching this regex ("": the last run's hot kernels)


@dataclass(frozen=True)
class Recorded:
    folder: Path
    record: runs.RunRecord
    analysis: Analysis | None
    comparison: DiffResult | None


def record_run(options: ProfileOptions, say: Callable[[str], None] = lambda line: None) -> Recorded:
    """Run the command once, keep the run, analyse it and compare it with the previous run."""
    launch = wrapped(options.command)
    for tool, wanted in (("nsys", options.nsys), ("ncu", options.ncu is not None)):
        if wanted and shutil.which(tool) is None:
            product = NSIGHT[tool]
            raise ProfileError(f"{tool} is not on PATH: install NVIDIA Nsight {product} (https://developer.nvidia.com/"
                               f"nsight-{product.lower()}) or add its bin folder to PATH")
    if not options.nsys:
        _require_torch(launch.python)
    kernels = _hot_kernels(options, launch.script) if options.ncu is not None else None
    try:
        folder = runs.create(options.runs_dir, options.label, launch.script)
    except OSError as exc:
        raise ProfileError(f"{options.runs_dir}: cannot make a run folder there ({exc.strerror or exc}): "
                           "choose another --runs-dir") from None
    traces = folder / "traces"
    record = runs.RunRecord(
        id=folder.name, label=options.label, command=runs.redacted(options.command), script=launch.script,
        started=datetime.now().astimezone().isoformat(timespec="milliseconds"), seconds=0.0, status="running", exit_code=None,
        environment=runs.environment(options.public, options.tried, {}),
        tried=[*(f"{k}={v}" for k, v in options.tried.items()), *options.tried_args], skip=options.skip,
        steps=options.steps, steps_on=options.steps_on, window=options.window, delay=options.delay)
    runs.save(folder, record)
    say(f"recording {launch.script} into {folder} ({_what(options)})")
    config = {"out": str(traces.resolve()), "status": str((folder / "status").resolve()), "skip": options.skip,
              "steps": options.steps,
              "mode": "window" if options.window else "function" if options.steps_on else "steps",
              "window": options.window, "delay": options.delay, "steps_on": options.steps_on}
    env = {**os.environ, **options.tried}  # the launcher's config only where the launcher runs
    started = time.monotonic()
    if options.nsys:
        exit_code, interrupted = _run(nsys_command(folder, options.command), env, options.timeout, options.quiet)
        if (report := folder / "nsys.sqlite").exists():
            report.replace(traces / "nsys.sqlite")
    else:
        exit_code, interrupted = _run(launch.argv, env | {CONFIG_VARIABLE: json.dumps(config)}, options.timeout,
                                      options.quiet)
    if kernels is not None and not interrupted:
        say(f"running it again under Nsight Compute for the kernels matching {kernels!r}")
        _run(ncu_command(folder, options.command, kernels), env, options.timeout, options.quiet)
    statuses = [json.loads(p.read_text()) for p in sorted((folder / "status").glob("*.json"))]
    oversize = _over_limit(traces, options.max_mb)
    files = [p.name for p in _trace_files(traces)]
    launched = statuses[0] if statuses else {}
    record = replace(record, seconds=round(time.monotonic() - started, 3), exit_code=exit_code, traces=files,
                     steps_seen=max((s.get("steps_seen", 0) for s in statuses), default=0),
                     notes=oversize or _notes(options, launch.processes, statuses, files)
                     + (["Nsight Compute wrote no kernels: check the regex against the trace's kernel names"]
                        if kernels is not None and not (folder / NCU_CSV).exists() else []),
                     environment=runs.environment(options.public, options.tried, launched),
                     status="interrupted" if interrupted else "failed" if exit_code else "ok" if files else "no trace")
    return conclude(folder, record, options.runs_dir)


def conclude(folder: Path, record: runs.RunRecord, runs_dir: Path) -> Recorded:
    """Analyse a run's traces, compare it with the newest earlier run of the same script, and save
    what was found in its record (run.json), the analysis (analysis.json) and the comparison
    (comparison.json)."""
    analysis = comparison = None
    if record.traces:
        profiled = folder / NCU_CSV
        try:
            analysis = api.analyze(str(folder / "traces"),
                                   kernels=profiled if profiled.exists() else None)
        except TraceError as exc:
            record = replace(record, notes=[*record.notes, f"the traces could not be analysed: {exc}"])
    if analysis is not None:
        write_atomically(folder / "analysis.json", to_json(analysis.record()))
        steps = [r.findings.steps.step_time_us for r in analysis.ranks if r.findings.steps and r.findings.steps.step_time_us]
        v = analysis.verdict
        record = replace(record, step_us=round(sum(steps) / len(steps), 3) if steps else None, limiter=v.limiter,
                         root_cause=v.root_cause, headline=v.headline)
        if (base := runs.newest(runs_dir, record.script, before=record.started)) is not None:
            comparison = _compare(base, analysis)
            if comparison is not None:
                write_atomically(folder / "comparison.json", to_json(comparison))
                predicted = comparison.prediction
                record = replace(record, baseline=base[1].id, comparison=comparison.headline,
                                 faster_pct=round(-comparison.slower_pct, 2) + 0.0,
                                 predicted_pct=None if predicted is None else (
                                     predicted["simulated_pct"] if predicted["simulated_pct"] is not None
                                     else predicted["predicted_up_to_pct"]),
                                 root_cause_gone=comparison.root_cause["gone"] if comparison.root_cause["cause"] else None)
    runs.save(folder, record)
    return Recorded(folder, record, analysis, comparison)


NCU_CSV = "ncu.csv"
NCU_LAUNCHES = 3  # launches of each matching kernel Nsight Compute replays: each costs seconds


def nsys_command(folder: Path, command: list[str]) -> list[str]:
    """The command under Nsight Systems: CUDA, NVTX and OS runtime calls, CPU and Python sampling,
    the PyTorch ranges and GPU metrics where this nsys has them; exported to SQLite beside the report."""
    known = subprocess.run(["nsys", "profile", "--help"], capture_output=True, text=True, timeout=60).stdout
    extra = [flag for option, flag in (("--python-sampling", "--python-sampling=true"),
                                      ("--pytorch", "--pytorch=autograd-shapes-nvtx"),
                                      ("--cuda-memory-usage", "--cuda-memory-usage=true")) if option in known]
    return ["nsys", "profile", "--trace=cuda,nvtx,osrt,cublas,cudnn", "--sample=cpu", *extra,
            f"--output={folder / 'nsys'}", "--export=sqlite", "--force-overwrite=true", *command]


def ncu_command(folder: Path, command: list[str], kernels: str) -> list[str]:
    """The command under Nsight Compute, on a few launches of the kernels matching `kernels`, as the
    CSV `analyze --kernels` joins to the trace's kernels."""
    return ["ncu", "--kernel-name", f"regex:{kernels}", "--launch-count", str(NCU_LAUNCHES), "--set", "detailed",
            "--csv", "--page", "details", "--log-file", str(folder / NCU_CSV), *command]


def again(record: runs.RunRecord, runs_dir: Path, **changes) -> ProfileOptions:
    """The options to record a run again as it was recorded (what an older record lacks: the defaults)."""
    kept = {name: getattr(record, name) for name in ("steps", "skip", "steps_on", "window", "delay")}
    return ProfileOptions(command=record.command, runs_dir=runs_dir,
                          **{name: value for name, value in kept.items() if value is not None}, **changes)


def _trace_files(traces: Path) -> list[Path]:
    """The traces a run's folder holds: torch.profiler's per rank, or an Nsight Systems export."""
    return sorted((*traces.glob("*.pt.trace.json.gz"), *traces.glob("*.sqlite")))


def _hot_kernels(options: ProfileOptions, script: str) -> str:
    """The --ncu regex: the one given, else the hot kernels of the newest run of the same script."""
    if options.ncu:
        return options.ncu
    last = runs.newest(options.runs_dir, script)
    if last is None:
        raise ProfileError("--ncu without a regex profiles the last run's hot kernels, and there is no run of "
                           f"{script} yet: record one first, or name the kernels (--ncu 'gemm|attention')")
    analysis = api.analyze(str(last[0] / "traces"))
    names = [k.name for k in analysis.focus.findings.kernels.top[:3]]
    if not names:
        raise ProfileError(f"run {last[1].id} has no kernels: name the kernels (--ncu 'gemm')")
    return "|".join(re.escape(n) for n in names)


def _over_limit(traces: Path, max_mb: int) -> list[str]:
    """Remove the traces larger than `max_mb` (the schedule is the first cap; this one is for what
    it let through), saying which and what to change."""
    notes = []
    for path in _trace_files(traces):
        size = path.stat().st_size
        if size > max_mb * 2**20:
            path.unlink()
            notes.append(f"{path.name} was {size / 2**20:.1f} MB, over the {max_mb} MB limit, and is not kept: "
                         "record fewer steps (--steps) or a shorter window, or raise --max-mb")
    return notes


def _compare(base: tuple[Path, runs.RunRecord], after: Analysis) -> DiffResult | None:
    try:
        before = api.analyze(str(base[0] / "traces"))  # cached since its own run
    except TraceError:
        return None
    return diff(before, after)


@contextmanager
def _interruptible_children() -> Iterator[None]:
    """Children started here get SIGINT at its default. A shell that starts us in the background
    (`traceagent profile … &` in a script, nohup) ignores SIGINT, a child inherits that, and the
    timeout's interrupt would never reach the script (killed after the grace, its trace unwritten);
    a handler, unlike an ignored signal, is reset to the default in the child when it starts."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run(argv: list[str], env: dict[str, str], timeout: float | None = None, quiet: bool = False) -> tuple[int, bool]:
    """The command's exit status, and whether it was interrupted (Ctrl+C reaches the script too:
    it shares the terminal; the script then gets INTERRUPT_GRACE_S to write what it recorded). Past
    `timeout` seconds it is interrupted as Ctrl+C would (its process group), then killed."""
    try:
        output = subprocess.DEVNULL if quiet else None
        with _interruptible_children():
            child = subprocess.Popen(argv, env=env, start_new_session=timeout is not None or quiet, stdout=output,
                                     stderr=output, stdin=output)
    except OSError as exc:
        raise ProfileError(f"{argv[0]}: cannot start it ({exc.strerror})") from None
    try:
        return child.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGINT)
        try:
            return child.wait(timeout=INTERRUPT_GRACE_S), True
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            return child.wait(), True
    except KeyboardInterrupt:
        try:
            return child.wait(timeout=INTERRUPT_GRACE_S), True
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            child.send_signal(signal.SIGKILL)
            return child.wait(), True


def _require_torch(python: str) -> None:
    if shutil.which(python) is None and not Path(python).exists():
        raise ProfileError(f"{python}: no such interpreter")
    probe = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"],
                           capture_output=True, timeout=60)
    if probe.returncode != 0:
        raise ProfileError(f"{python} cannot import torch: install PyTorch for it (pip install torch), "
                           "or record under Nsight Systems (--nsys)")


def _what(options: ProfileOptions) -> str:
    if options.window:
        return f"{options.window:g} s from {options.delay:g} s after the start"
    step = f"each return of {options.steps_on}" if options.steps_on else "each optimizer step"
    return f"{options.steps} steps after skipping {options.skip}; a step is {step}"


def _notes(options: ProfileOptions, processes: int | None, statuses: list[dict], files: list[str]) -> list[str]:
    """Why a run has fewer traces than it should, in words the engineer can act on."""
    notes = [s["note"] for s in statuses if s.get("note")]
    if options.nsys:  # Nsight Systems records the whole process tree: no launcher, no status files
        return notes if files else [*notes, "Nsight Systems wrote no report (its own output above says why)"]
    if not statuses:
        notes.append("no process of the command reached the profiler (did the script start?)")
    elif not files and not options.window:
        seen = max(s.get("steps_seen", 0) for s in statuses)
        if seen == 0 and not options.steps_on:
            notes.append("no optimizer stepped: for a script without one, mark steps with --steps-on MODULE:FUNCTION "
                         "or record a time window with --window SECONDS")
        elif seen <= options.skip:
            notes.append(f"the script made {seen} steps, and the first {options.skip} are skipped: "
                         f"use --skip {max(seen - 1, 0)} --steps 1, or run it longer")
    if processes and statuses and len(files) < processes:
        notes.append(f"{len(files)} of {processes} processes wrote a trace")
    return list(dict.fromkeys(notes))
