"""Run a user's script unmodified under torch.profiler: `traceagent profile` starts each process of
the job as `python _launch.py SCRIPT ARGS…` (or `-m MODULE ARGS…`), with what to record in
$TRACEAGENT_PROFILE (JSON). Run as a file, not as part of the package: the user's process imports
nothing of traceagent's (no pandas, no Rich), only the standard library and torch.

Steps are found without code changes: by default each step of the first optimizer that steps
(torch.optim's global post-hook); with `steps_on`, each return of a named function
(`module:qualname`); with `window`, a time window from the start (SIGALRM on the main thread).
Each process writes `rank<R>.pt.trace.json.gz` (or `trace.pt.trace.json.gz` without a rank) and,
in another folder, a status file the parent reads: steps seen, whether a trace was written, and why not.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import runpy
import signal
import sys
from pathlib import Path

CONFIG_VARIABLE = "TRACEAGENT_PROFILE"
_SCRIPT_GLOBALS: list[dict] = []


class _Recorder:
    """The profiler and its schedule, advanced by whatever marks a step."""

    def __init__(self, config: dict) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self.out = Path(config["out"])
        self.status_dir = Path(config["status"])  # beside the traces, never among them: they are read as a job
        rank = os.environ.get("RANK")
        self.name = f"rank{rank}" if rank is not None else "trace"
        self.trace_path = self.out / f"{self.name}.pt.trace.json.gz"
        self.status: dict = {"rank": int(rank) if rank is not None else None, "steps_seen": 0, "trace": None,
                             "recorded_steps": 0, "note": None, "mode": config["mode"]}
        cuda = torch.cuda.is_available()
        self.status |= {"torch": torch.__version__, "gpus": [torch.cuda.get_device_name(i) for i in
                                                              range(torch.cuda.device_count())] if cuda else [],
                        "accelerator": (f"CUDA {torch.version.cuda}" if torch.version.cuda else
                                        f"HIP {torch.version.hip}" if getattr(torch.version, "hip", None) else None)}
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        elif getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
            activities.append(ProfilerActivity.XPU)
        kwargs: dict = {"activities": activities, "record_shapes": True, "with_stack": True, "profile_memory": True,
                        "on_trace_ready": self._write}
        if torch.cuda.is_available():  # the syncs' device and stream: what the critical path and what-if read
            try:
                from torch._C._profiler import _ExperimentalConfig

                kwargs["experimental_config"] = _ExperimentalConfig(enable_cuda_sync_events=True)
            except (ImportError, TypeError):
                self.status["note"] = "this torch records no CUDA sync events"
        self.skip, self.steps = int(config.get("skip", 0)), int(config.get("steps", 0))
        if config["mode"] != "window":  # steps from the optimizer, or from a function
            kwargs["schedule"] = schedule(wait=max(self.skip - 1, 0), warmup=1 if self.skip else 0, active=self.steps,
                                          repeat=1)
        self.profiler = profile(**kwargs)
        self.active = False

    def start(self) -> None:
        self.profiler.start()
        self.active = True

    def step(self) -> None:
        self.status["steps_seen"] += 1
        if self.active:
            self.profiler.step()

    def stop(self) -> None:
        if self.active:
            self.active = False
            self.profiler.stop()

    def _write(self, prof) -> None:
        """Write the trace whole or not at all (a temporary name, then renamed)."""
        partial = self.trace_path.with_name(f"{self.name}.partial.json.gz")  # its suffix makes torch gzip it
        prof.export_chrome_trace(str(partial))
        partial.replace(self.trace_path)
        self.status["trace"] = self.trace_path.name
        self.status["recorded_steps"] = (min(max(self.status["steps_seen"] - self.skip, 0), self.steps)
                                         if self.status["mode"] != "window" else None)

    def save_status(self, exit_code: int) -> None:
        self.status["exit_code"] = exit_code
        self.status_dir.mkdir(exist_ok=True)
        (self.status_dir / f"{self.name}.json").write_text(json.dumps(self.status))


def _on_first_optimizer(recorder: _Recorder) -> None:
    """Each step of the first optimizer that steps is a step (a job with two optimizers steps both once)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    pacer: list[int] = []

    def hook(optimizer, args, kwargs) -> None:
        if not pacer:
            pacer.append(id(optimizer))
        if id(optimizer) == pacer[0]:
            recorder.step()

    register_optimizer_step_post_hook(hook)


def _on_function(recorder: _Recorder, target: str) -> None:
    """Each return of `module:qualname` is a step: the function is wrapped where it is defined."""
    module_name, _, qualname = target.partition(":")
    owner = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    function = getattr(owner, name)

    @functools.wraps(function)
    def stepped(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            recorder.step()

    setattr(owner, name, stepped)


def _in_window(recorder: _Recorder, delay: float, seconds: float) -> None:
    """Record from `delay` to `delay + seconds` after the start, on the main thread (SIGALRM)."""

    def begin(signum, frame) -> None:
        recorder.start()
        signal.signal(signal.SIGALRM, end)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def end(signum, frame) -> None:
        recorder.stop()

    signal.signal(signal.SIGALRM, begin)
    signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-3))


def main(argv: list[str]) -> int:
    config = json.loads(os.environ[CONFIG_VARIABLE])
    recorder = _Recorder(config)
    if config["mode"] == "window":
        _in_window(recorder, float(config.get("delay", 0.0)), float(config["window"]))
    else:
        if config["mode"] == "function":
            _on_function(recorder, config["steps_on"])
        else:
            _on_first_optimizer(recorder)
        recorder.start()
    code = 0

    def finish() -> None:  # also when the script calls sys.exit or os._exit is not used
        recorder.stop()
        recorder.save_status(code)

    atexit.register(finish)
    try:
        # the script's globals are kept until the interpreter exits, as `python script.py` keeps them:
        # dropped here, a DistributedDataParallel's process group would be torn down on this thread
        # while it holds the GIL, and deadlock with the gloo thread that waits for it
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            _SCRIPT_GLOBALS.append(runpy.run_module(argv[1], run_name="__main__", alter_sys=True))
        else:
            sys.argv = list(argv)
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))
            _SCRIPT_GLOBALS.append(runpy.run_path(argv[0], run_name="__main__"))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    except BaseException:
        code = 1
        raise
    return 0


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the user's script must not import its neighbours
    sys.exit(main(sys.argv[1:]))
