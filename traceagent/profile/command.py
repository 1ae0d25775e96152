"""The user's command, rewritten so each Python process of it starts through the launcher
(_launch.py): `python [OPTIONS] script.py ARGS`, `python -m module ARGS`, `script.py ARGS` and
`torchrun [OPTIONS] [-m] script.py ARGS` (also `python -m torch.distributed.run`). The script and its
arguments are passed through unchanged."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = str(Path(__file__).with_name("_launch.py"))
_TORCHRUN_FLAGS = {"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
                   "--virtual-local-rank", "--virtual_local_rank", "-h", "--help"}
_PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}
_DISTRIBUTED_RUN = {"torch.distributed.run", "torch.distributed.launch"}


@dataclass(frozen=True)
class Launch:
    """The command to run, and what it says of the job."""

    argv: list[str]
    processes: int | None  # the ranks it starts, where the command says (torchrun's nproc × nnodes), else 1
    script: str  # the user's script or module: what the run is named after
    python: str  # the interpreter the launcher runs under


def wrapped(command: list[str]) -> Launch:
    """`command` with every Python process it starts going through the launcher; ValueError (what
    was expected) for a command that is not a Python script, a module or torchrun."""
    if not command:
        raise ValueError("no command: put it after --, e.g. traceagent profile -- python train.py")
    name = Path(command[0]).name
    if name == "torchrun":
        return _torchrun(command[:1], command[1:], _interpreter_of(command[0]))
    if re.fullmatch(r"python[0-9.]*", name):
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] not in ("-m", "-c", "-"):
            i += 2 if command[i] in _PYTHON_OPTIONS_WITH_VALUE else 1
        rest = command[i:]
        if not rest or rest[0] in ("-c", "-"):
            raise ValueError(f"{' '.join(command)!r}: traceagent profiles a script or a module (python train.py, "
                             "python -m package.train), not -c or stdin")
        if rest[0] == "-m" and len(rest) > 1 and rest[1] in _DISTRIBUTED_RUN:
            return _torchrun(command[:i] + rest[:2], rest[2:], command[0])
        if rest[0] == "-m" and len(rest) < 2:
            raise ValueError(f"{' '.join(command)!r}: -m needs a module")
        return Launch([*command[:i], LAUNCHER, *rest], 1, rest[1] if rest[0] == "-m" else rest[0], command[0])
    if name.endswith(".py"):
        return Launch([sys.executable, LAUNCHER, *command], 1, command[0], sys.executable)
    raise ValueError(f"{command[0]!r}: expected a Python command: python train.py ARGS, python -m module ARGS, "
                     "train.py ARGS or torchrun [OPTIONS] train.py ARGS")


def _torchrun(head: list[str], args: list[str], python: str) -> Launch:
    """torchrun's options, then --no-python and the launcher under the same interpreter."""
    options: list[str] = []
    values: dict[str, str] = {}
    module = False
    i = 0
    while i < len(args) and args[i].startswith("-"):
        option = args[i]
        if option in ("--no-python", "--no_python"):
            raise ValueError("torchrun --no-python runs an executable: traceagent profiles a Python script or module")
        if option in ("-m", "--module"):
            module, i = True, i + 1
            continue
        if option in _TORCHRUN_FLAGS or "=" in option:
            key, _, value = option.partition("=")
            values[key.replace("_", "-")] = value
            options.append(option)
            i += 1
            continue
        if i + 1 >= len(args):
            break
        values[option.replace("_", "-")] = args[i + 1]
        options += [option, args[i + 1]]
        i += 2
    rest = args[i:]
    if not rest:
        raise ValueError("torchrun: no training script after its options")
    processes = _count(values.get("--nproc-per-node")) * _count(values.get("--nnodes", "1"))
    target = ["-m", *rest] if module else rest
    return Launch([*head, *options, "--no-python", python, LAUNCHER, *target], processes or None, rest[0], python)


def with_argument(command: list[str], option: str, value: str) -> list[str]:
    """The command with a script option set: its value replaced where given (`--workers 2`,
    `--workers=2`), else the option appended."""
    out = list(command)
    for i, arg in enumerate(out):
        if arg == option and i + 1 < len(out):
            out[i + 1] = value
            return out
        if arg.startswith(option + "="):
            out[i] = f"{option}={value}"
            return out
    return [*out, option, value]


def _count(text: str | None) -> int:
    """An integer option's value; 0 where it is not one (`gpu`, `auto`, `1:4`)."""
    return int(text) if text and text.isdigit() else 0


def _interpreter_of(executable: str) -> str:
    """The Python a console script (torchrun) runs with: its #! line; else this one."""
    found = shutil.which(executable)
    try:
        first = Path(found).read_bytes()[:200].split(b"\n", 1)[0].decode() if found else ""
    except OSError:
        first = ""
    parts = first[2:].split() if first.startswith("#!") else []
    if parts and Path(parts[0]).name == "env":
        parts = [p for p in parts[1:] if not p.startswith("-")]
    return parts[0] if parts and "python" in Path(parts[0]).name else sys.executable
