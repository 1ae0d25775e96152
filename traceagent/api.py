"""The public entry points: `load` a trace, `analyze` a trace or a job.

A job is analysed rank file by rank file (`analyze_file`): in this process for small jobs, else as
Dask tasks that send back only each rank's results; the cross-rank step (`reduce_job`) runs here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from .detect.analysis import (
    Analysis,
    AnalysisParams,
    RankAnalysis,
    RankFailure,
    analyze_trace,
    joined_on,
    reduce_job,
)
from .detect.core.encode import to_data
from .detect.detectors.idle import IdleParams
from .detect.detectors.kernel_profiles import KernelProfilesResult, joined, profiles
from .detect.detectors.stragglers import StragglerParams
from .detect.verdict.diagnose import VerdictParams
from .errors import TraceError
from .request import AnalyzeRequest
from .tasks import Progress, run_per_file, scheduler_for
from .trace import cache, storage
from .trace.load import RankSource, file_key, load_file, load_file_keyed, numbered, resolve
from .trace.model import Job, Trace
from .trace.ncu import load_ncu
from .trace.normalize import as_analysed, capture_ops, split_ranks


def analyze(source: str | os.PathLike | Sequence[str | os.PathLike] | Job, *, idle: IdleParams | None = None,
            verdict: VerdictParams | None = None, stragglers: StragglerParams | None = None,
            settings: Sequence[str] = (), steps: str | re.Pattern | None = None, use_cache: bool = True,
            progress: Callable[[int, int, str], None] | None = None, scheduler: str | None = None,
            max_bytes: int | None = None, kernels: str | os.PathLike | None = None,
            graph_capture: str | os.PathLike | None = None) -> Analysis:
    """Analyze a trace file, a rank directory, a glob or list of rank files (paths or fsspec URLs),
    or an already loaded `Job`: every detector on every rank, and the job's verdict.

    `idle`, `verdict` and `stragglers` override the default thresholds, and `settings` any detector's
    one by one (`["idle.launch_gap_us=50", "host_pauses.min_idle_us=0"]`, as `--set` takes them;
    ValueError for an unknown one); `steps` is a regular expression naming
    the host ranges that are iterations (its first group, if any, the step number) instead of
    ProfilerStep#N. `scheduler` says where ranks are analysed: `auto` (the default, or
    $TRACEAGENT_SCHEDULER): a Dask LocalCluster for large multi-rank jobs, else this process;
    `local`; `none` (this process); or a Dask scheduler's address. A rank file that fails is
    reported in `Analysis.failed` and the others are analysed; a job of one file raises TraceError.
    `max_bytes` bounds the text of each trace file (default: the memory available where it is read).
    `kernels` is an Nsight Compute CSV export (`ncu --csv --page details` or `raw`): its kernels
    are read and joined to the trace's (`Analysis.kernel_profiles`). `graph_capture` is a trace of
    CUDA-graph capture (vLLM writes them apart): kernels replayed from graphs take its ops.
    The options are one AnalyzeRequest (traceagent.request), which `run` takes whole.
    """
    request = AnalyzeRequest.of(source, steps=steps, settings=settings, kernels=kernels, graph_capture=graph_capture,
                                max_bytes=max_bytes, scheduler=scheduler, use_cache=use_cache)
    params = AnalysisParams(idle=idle or IdleParams(), verdict=verdict or VerdictParams(),
                            stragglers=stragglers or StragglerParams())
    return run(request, progress=progress, params=params)


def run(request: AnalyzeRequest, progress: Callable[[int, int, str], None] | None = None,
        params: AnalysisParams | None = None) -> Analysis:
    """The analysis a request asks for (`analyze` with the options as one object). `params`: the
    thresholds before the request's settings are applied (default: every detector's defaults)."""
    profiled = read_kernel_profiles(request.kernels) if request.kernels is not None else None  # fails before the work
    captured = (capture_ops(load_file(request.graph_capture, request.use_cache, request.max_bytes))
                if request.graph_capture is not None else None)
    params = (params or AnalysisParams()).with_settings(list(request.settings))
    pattern = request.pattern
    if isinstance(request.source, Job):  # one kind of source: each rank analysed as a rank file's would be
        job = request.source
        each = [_analyze_loaded(trace, params, pattern, captured, contain=len(job.traces) > 1) for trace in job.traces]
        lost = [r for r in each if isinstance(r, RankFailure)]
        done = [r for r in each if not isinstance(r, RankFailure)]
        if not done:
            raise TraceError(job.path, f"no rank could be analysed; the first: {lost[0].error}")
        return _with_profiles(reduce_job(job.path, done, params, lost), profiled)
    sources = resolve(request.source)
    path, files, notes = sources.path, sources.files, sources.notes
    where = scheduler_for(request.scheduler, [storage.size_and_version(f)[0] for f in files])
    contain = len(files) > 1
    results = run_per_file(analyze_file, files, scheduler=where, progress=progress, name=storage.name, params=params,
                           lost=RankFailure if contain else None,
                           steps=pattern, use_cache=request.use_cache, keep_events=where is None, contain=contain,
                           max_bytes=request.max_bytes, captured=captured)
    failed = [*(RankFailure(f, why) for f, why in sources.unreadable), *(r for r in results if isinstance(r, RankFailure))]
    analysed = [(file, result) for file, result in zip(files, results) if not isinstance(result, RankFailure)]
    if not any(result for _, result in analysed):
        raise TraceError(path, f"no rank file could be analysed; the first: {failed[0].file}: {failed[0].error}")
    ranks = []
    for r, n in numbered(path, analysed, lambda r: r.meta):
        r.meta.warnings.extend(notes)
        ranks.append(r if r.rank == n else r.with_rank(n))
    return _with_profiles(reduce_job(path, ranks, params, failed), profiled)


def _analyze_loaded(trace: Trace, params: AnalysisParams, steps: re.Pattern | None, captured: dict[str, str] | None,
                    contain: bool) -> RankAnalysis | RankFailure:
    """One rank of a Job in memory; with `contain`, a rank that fails is a RankFailure, as a rank file's is."""
    try:
        return analyze_trace(as_analysed(trace, steps, captured), params)
    except Exception as exc:
        if not contain:
            raise
        return RankFailure(trace.meta.path or f"rank {trace.meta.rank}", f"{type(exc).__name__}: {exc}")


def load(source: str | os.PathLike | Sequence[str | os.PathLike], use_cache: bool = True,
         progress: Progress | None = None, scheduler: str | None = None, max_bytes: int | None = None) -> Job:
    """Load a trace file, a directory of per-rank traces, a glob or a list of files into a Job
    (one Trace per rank), every rank in this process's memory. `traceagent.analyze` does not need
    this: it analyses rank by rank and keeps only the results."""
    sources = resolve(source)
    path, files = sources.path, sources.files
    notes = [*sources.notes, *(f"{storage.name(f)}: {why} (skipped)" for f, why in sources.unreadable)]
    loaded = _load_files(files, use_cache, progress, scheduler, max_bytes)
    # a merged multi-rank file becomes its ranks (each already knows its rank)
    traces = []
    for trace, rank in numbered(path, [(file, split_ranks(trace)) for file, trace in zip(files, loaded)],
                                lambda t: t.meta):
        trace.meta.warnings.extend(notes)
        trace.meta.rank = rank
        traces.append(trace)
    return Job(path=path, traces=sorted(traces, key=lambda t: t.meta.rank if t.meta.rank is not None else -1))


def _load_files(files: list[str], use_cache: bool, progress: Progress | None, scheduler: str | None,
                max_bytes: int | None) -> list[Trace]:
    """Cached files are read here (frame files are fast, and pickling frames back from a worker would
    cost more than reading them); the rest are parsed where `scheduler` says (tasks.scheduler_for)."""
    traces: list[Trace | None] = [cache.read(cache.key(f)) if use_cache else None for f in files]
    missing = [f for f, t in zip(files, traces) if t is None]
    where = scheduler_for(scheduler, [storage.size_and_version(f)[0] for f in missing])
    parsed = iter(run_per_file(load_file, missing, scheduler=where, progress=progress, name=storage.name,
                               lost=_worker_died, use_cache=use_cache, max_bytes=max_bytes))
    return [t if t is not None else next(parsed) for t in traces]


def _worker_died(file: str, why: str) -> Trace:
    """A Job holds every rank: one whose worker died ends the load (traceagent.analyze goes on without it)."""
    raise TraceError(file, why, "Analyse the job with traceagent.analyze, which reports the rank and goes on, or "
                     "load this file on its own to see what ends its worker.")


def read_kernel_profiles(path: str | os.PathLike) -> KernelProfilesResult:
    """An Nsight Compute CSV export on its own: each kernel's speed of light, occupancy and stalls,
    classified (`traceagent kernels ncu.csv`); TraceError for a file that is not one."""
    return joined(str(path), profiles(load_ncu(str(path))))


def _with_profiles(analysis: Analysis, profiled: KernelProfilesResult | None) -> Analysis:
    """The analysis with an ncu export's kernels joined to its own (the verdict's rank)."""
    if profiled is None:
        return analysis
    return replace(analysis, kernel_profiles=joined_on(profiled, analysis.focus))


def analyze_file(file: str, *, params: AnalysisParams, steps: re.Pattern | None, use_cache: bool,
                 keep_events: bool, contain: bool, max_bytes: int | None = None,
                 captured: dict[str, str] | None = None) -> list[RankAnalysis] | RankFailure:
    """Load one rank file and analyse each rank in it (a merged file holds several). Runs on a
    worker: with `keep_events` false only the results travel back. With `contain`, a file that
    fails becomes a RankFailure instead of an exception, so one bad rank does not stop the job.
    With `use_cache`, the results are stored beside the file's cached frames and read back while
    the file, the parameters and the code are the same (results_tag)."""
    try:
        key = file_key(file) if use_cache else None
        tag = results_tag(params, steps, captured) if key is not None else ""
        source = partial(RankSource, file, steps=steps, use_cache=use_cache, max_bytes=max_bytes,
                         captured=tuple(sorted((captured or {}).items())))
        if key is not None and isinstance(stored := cache.read_results(key, tag), list):
            return [_as_asked(r, file, source(part)) for part, r in enumerate(stored)]
        trace_file, key = load_file_keyed(file, use_cache, max_bytes, key)
        ranks = []
        for part, trace in enumerate(split_ranks(trace_file)):
            ranks.append(analyze_trace(as_analysed(trace, steps, captured), params, source(part)))
        results = [r.without_events() for r in ranks]
        if key is not None:
            cache.write_results(key, tag, results)
        return ranks if keep_events else results
    except TraceError as exc:
        if not contain:
            raise
        return RankFailure(file, f"{exc.problem}. {exc.hint}" if exc.hint else exc.problem)
    except MemoryError:
        if not contain:
            raise
        return RankFailure(file, "out of memory while it was analysed (the machine's free memory, the cgroup's limit "
                           "and `ulimit -v` count); analyse it where more memory is free")
    except Exception as exc:  # a bug, not bad input: say so, and analyse the other ranks
        if not contain:
            raise
        return RankFailure(file, f"{type(exc).__name__}: {exc} (an error in traceagent; please report it)")


def results_tag(params: AnalysisParams, steps: re.Pattern | None, captured: dict[str, str] | None = None) -> str:
    """What an analysis's results depend on besides the file: its parameters, the step pattern,
    a graph capture's ops and the code (cache.results_version)."""
    text = json.dumps([to_data(params), steps.pattern if steps is not None else None,
                       steps.flags if steps is not None else None, cache.results_version(), captured or {}],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _as_asked(rank: RankAnalysis, file: str, source: RankSource) -> RankAnalysis:
    """Stored results as this run asked for them: the file's path as given, events from `source`."""
    return replace(rank, meta=replace(rank.meta, path=file), source=source)
