"""The public entry points: `load` a trace, `analyze` a trace or a job."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace

from .detect.analysis import Analysis, AnalysisParams, analyze_job
from .detect.diagnose import VerdictParams
from .detect.idle import IdleParams
from .trace.load import load
from .trace.model import Job
from .trace.normalize import derive_steps


def analyze(source: str | os.PathLike | Job, *, idle: IdleParams | None = None,
            verdict: VerdictParams | None = None, steps: str | re.Pattern | None = None, use_cache: bool = True,
            progress: Callable[[int, int, str], None] | None = None) -> Analysis:
    """Analyze a trace file, a rank directory or an already loaded `Job`: every detector on every
    rank, and the job's verdict. `idle` and `verdict` override the default thresholds; `steps` is
    a regular expression naming the host ranges that are iterations (its first group, if any, the
    step number) instead of ProfilerStep#N."""
    job = source if isinstance(source, Job) else load(os.fspath(source), use_cache=use_cache, progress=progress)
    if steps is not None:
        job = with_steps(job, re.compile(steps) if isinstance(steps, str) else steps)
    return analyze_job(job, AnalysisParams(idle=idle or IdleParams(), verdict=verdict or VerdictParams()))


def with_steps(job: Job, pattern: re.Pattern) -> Job:
    """The job with steps taken from the host ranges whose names match `pattern`."""
    return replace(job, traces=[replace(t, steps=derive_steps(t.gpu, t.cpu, pattern)) for t in job.traces])
