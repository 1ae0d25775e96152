"""Recorded runs: each `traceagent profile` run is a folder of its own under the runs directory
(`.traceagent/runs/` by default), never reused: `run.json` (what ran, where, how it ended, what
the analysis found), `traces/` (a trace per rank and nothing else: it is read as the job),
`status/` (what each process's launcher saw), `analysis.json` (`analyze --json`) and, where an
earlier run was compared with it, `comparison.json` (`diff --json`).

Environment variables are kept by name only, with the values of those named public (`--env`) or
tried (`--try`); a command-line value that looks like a secret is replaced by `***`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..detect.core.encode import to_json
from ..outputs import write_atomically

RUNS_DIR = Path(".traceagent") / "runs"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
_SECRET_OPTION = re.compile(r"^--?[\w-]*(key|token|secret|password|passwd|credential|auth)[\w-]*$", re.IGNORECASE)


@dataclass(frozen=True)
class Environment:
    """Where a run ran: what makes two runs comparable, or not."""

    python: str
    torch: str | None
    accelerator: str | None  # CUDA or HIP version torch was built with
    gpus: list[str]
    git_commit: str | None
    git_dirty: bool | None
    variables: dict[str, str | None]  # every variable by name; a value only where named public or tried


@dataclass(frozen=True)
class RunRecord:
    """One recorded run, as run.json keeps it."""

    id: str  # its folder's name
    label: str | None
    command: list[str]  # as typed, secret-looking values replaced
    script: str  # the script or module it ran: runs of the same script are compared
    started: str  # local time, ISO 8601 to the millisecond: runs are ordered by it
    seconds: float
    status: str  # running, ok, failed (the script's exit status), interrupted, no trace
    exit_code: int | None
    environment: Environment
    tried: list[str] = field(default_factory=list)  # NAME=VALUE this run set against its baseline
    traces: list[str] = field(default_factory=list)  # under traces/
    steps_seen: int = 0  # the most any rank saw
    notes: list[str] = field(default_factory=list)
    step_us: float | None = None  # the job's mean step (over ranks), else None
    limiter: str | None = None
    root_cause: str | None = None
    headline: str | None = None
    baseline: str | None = None  # the run this one was compared with
    comparison: str | None = None  # that comparison's headline, with the prediction against the measurement
    faster_pct: float | None = None  # than the baseline, in step time (or span); negative: slower
    predicted_pct: float | None = None  # what the baseline's verdict predicted fixing its root cause would save
    root_cause_gone: bool | None = None  # the baseline's root cause, in this run
    # what was recorded (to record it again the same way)
    skip: int | None = None
    steps: int | None = None
    steps_on: str | None = None
    window: float | None = None
    delay: float = 0.0


def create(runs_dir: Path, label: str | None, script: str) -> Path:
    """A new, empty folder for a run: `<time>-<label or script>`, never one that exists."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9._=-]+", "-", label or Path(script).stem).strip("-")[:60] or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        folder = runs_dir / (f"{stamp}-{slug}" if n == 1 else f"{stamp}-{slug}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        (folder / "traces").mkdir()
        return folder
    raise FileExistsError(f"{runs_dir}: no free run folder for {stamp}-{slug}")


def save(folder: Path, record: RunRecord) -> None:
    write_atomically(folder / "run.json", to_json(record))


def load(folder: Path) -> RunRecord:
    """A run's record; ValueError naming the file when it is not one."""
    path = folder / "run.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=RunRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"{path}: not a traceagent run record ({exc})") from None


def run_of(path: str | Path) -> tuple[Path, RunRecord] | None:
    """The recorded run a trace path belongs to (its folder or its traces/), else None."""
    for folder in (Path(path), Path(path).parent):
        if (folder / "run.json").is_file():
            try:
                return folder, load(folder)
            except ValueError:
                return None
    return None


def all_runs(runs_dir: Path) -> list[tuple[Path, RunRecord]]:
    """Every readable run, oldest first (folders that are not runs are left alone)."""
    found = []
    for folder in (p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []:
        try:
            found.append((folder, load(folder)))
        except ValueError:
            continue
    return sorted(found, key=lambda run: (run[1].started, run[1].id))


def find(runs_dir: Path, name: str) -> tuple[Path, RunRecord]:
    """A run by its id, a unique start of it, or its position (1 the oldest, -1 the newest);
    ValueError listing what there is."""
    runs = all_runs(runs_dir)
    if not runs:
        raise ValueError(f"{runs_dir}: no recorded runs (record one: traceagent profile -- python train.py)")
    if re.fullmatch(r"-?\d+", name) and len(name) < 6:
        index = int(name)
        if 1 <= abs(index) <= len(runs) and index:
            return runs[index - 1 if index > 0 else index]
    matches = [r for r in runs if r[1].id == name] or [r for r in runs if r[1].id.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    what = "matches several runs" if matches else "is no run"
    raise ValueError(f"{name!r} {what} in {runs_dir}; the runs are: {', '.join(r[1].id for r in runs[-10:])}")


def newest(runs_dir: Path, script: str, before: str | None = None) -> tuple[Path, RunRecord] | None:
    """The newest run of `script` with traces (started before `before`, an ISO time, if given): what
    a new run is compared with, and whose hot kernels `--ncu` profiles."""
    earlier = [r for r in all_runs(runs_dir)
               if r[1].script == script and r[1].traces and (before is None or r[1].started < before)]
    return earlier[-1] if earlier else None


def redacted(command: list[str]) -> list[str]:
    """The command with values that look like secrets replaced: `--api-key X`, `--token=X`, and
    any value of a secret-named environment variable."""
    secrets = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 6}
    out: list[str] = []
    hide_next = False
    for arg in command:
        option, eq, _ = arg.partition("=")
        if hide_next:
            out.append("***")
        elif eq and _SECRET_OPTION.match(option):
            out.append(f"{option}=***")
        else:
            out.append("***" if arg in secrets else arg)
        hide_next = bool(_SECRET_OPTION.match(arg)) and not eq
    return out


def environment(public: dict[str, str], tried: dict[str, str], launched: dict) -> Environment:
    """This machine and checkout, with what the launcher saw of torch and the GPUs."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    shown = {**public, **tried}
    variables = {name: shown.get(name) for name in sorted({*os.environ, *shown})}
    return Environment(python=sys.version.split()[0], torch=launched.get("torch"),
                       accelerator=launched.get("accelerator"), gpus=launched.get("gpus", []), git_commit=commit,
                       git_dirty=bool(status) if status is not None else None, variables=variables)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def differences(a: RunRecord, b: RunRecord) -> list[str]:
    """What differs between two runs besides the change measured: whether the comparison is fair."""
    out = []
    if a.command != b.command:
        out.append(f"command: {' '.join(a.command)} → {' '.join(b.command)}")
    ea, eb = a.environment, b.environment
    if ea.git_commit != eb.git_commit:
        out.append(f"commit: {(ea.git_commit or 'none')[:12]} → {(eb.git_commit or 'none')[:12]}")
    if ea.git_dirty or eb.git_dirty:
        out.append("uncommitted changes in " + " and ".join(r.id for r, e in ((a, ea), (b, eb)) if e.git_dirty))
    for what in ("python", "torch", "accelerator"):
        if getattr(ea, what) != getattr(eb, what):
            out.append(f"{what}: {getattr(ea, what)} → {getattr(eb, what)}")
    if ea.gpus != eb.gpus:
        out.append(f"GPUs: {', '.join(ea.gpus) or 'none'} → {', '.join(eb.gpus) or 'none'}")
    added = sorted(set(eb.variables) - set(ea.variables))
    removed = sorted(set(ea.variables) - set(eb.variables))
    changed = sorted(k for k in set(ea.variables) & set(eb.variables) if ea.variables[k] != eb.variables[k])
    if added:
        out.append(f"environment variables set only in {b.id}: {', '.join(added[:10])}")
    if removed:
        out.append(f"environment variables set only in {a.id}: {', '.join(removed[:10])}")
    if changed:
        out.append("environment variables with other values: "
                   + ", ".join(f"{k}={ea.variables[k]} → {eb.variables[k]}" for k in changed[:10]))
    if a.tried != b.tried:
        out.append(f"tried: {', '.join(a.tried) or 'nothing'} → {', '.join(b.tried) or 'nothing'}")
    return out
