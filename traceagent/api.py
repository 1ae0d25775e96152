"""The public entry points: `load` a trace, `analyze` a trace or a job."""

from __future__ import annotations

import os
from collections.abc import Callable

from .detect.analysis import Analysis, AnalysisParams, analyze_job
from .detect.diagnose import VerdictParams
from .detect.idle import IdleParams
from .trace.load import load
from .trace.model import Job


def analyze(source: str | os.PathLike | Job, *, idle: IdleParams | None = None,
            verdict: VerdictParams | None = None, use_cache: bool = True,
            progress: Callable[[int, int, str], None] | None = None) -> Analysis:
    """Analyze a trace file, a rank directory or an already loaded `Job`: every detector on every
    rank, and the job's verdict. `idle` and `verdict` override the default thresholds."""
    job = source if isinstance(source, Job) else load(os.fspath(source), use_cache=use_cache, progress=progress)
    return analyze_job(job, AnalysisParams(idle=idle or IdleParams(), verdict=verdict or VerdictParams()))
