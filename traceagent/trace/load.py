"""Open any trace path: sniff the format, dispatch to its loader, load rank directories in
parallel processes, and use the Parquet cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..errors import TraceError
from . import cache
from .kineto import load_kineto
from .model import Job, Trace
from .normalize import split_ranks
from .nsys import load_nsys

#: progress(done, total, what): called as files finish loading
Progress = Callable[[int, int, str], None]

_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".qdrep")
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def sniff(path: str) -> str:
    """'kineto', 'nsys' or 'nsys-rep', from the first bytes (extensions lie)."""
    with open(path, "rb") as f:
        head = f.read(16)
    head = head[3:] if head[:3] == b"\xef\xbb\xbf" else head  # a UTF-8 byte-order mark
    if head.startswith(b"SQLite format 3\0"):
        return "nsys"
    if head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if path.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    if not head:
        raise TraceError(path, "the file is empty", "Check that the profiler finished writing it.")
    raise TraceError(path, "not a trace file",
                     "Expected PyTorch Profiler JSON (.json/.json.gz) or an Nsight Systems .sqlite export.")


def load_file(path: str, use_cache: bool = True) -> Trace:
    """Load one trace file (cached when allowed)."""
    if use_cache and (cached := cache.read(path)) is not None:
        return cached
    fmt = sniff(path)
    if fmt == "nsys-rep":
        path_sqlite = _export_nsys_rep(path)
        trace = load_nsys(path_sqlite)
    elif fmt == "nsys":
        trace = load_nsys(path)
    else:
        trace = load_kineto(path)
    if use_cache:
        cache.write(path, trace)
    return trace


def _export_nsys_rep(path: str) -> str:
    out = str(Path(path).with_suffix(".sqlite"))
    command = ["nsys", "export", "--type", "sqlite", "--output", out, path]
    if shutil.which("nsys") is None:
        raise TraceError(path, "an Nsight Systems report, and nsys is not on PATH to export it",
                         f"Run `{' '.join(command)}` where nsys is installed, then open the .sqlite file.")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(out):
        raise TraceError(path, f"`nsys export` failed: {done.stderr.strip()[:200]}", f"Run `{' '.join(command)}` by hand.")
    return out


def trace_files(directory: str) -> list[str]:
    """The trace files directly inside a directory, in name order (regular files only: a FIFO
    there would block the load)."""
    return sorted(str(p) for p in Path(directory).iterdir()
                  if p.is_file() and p.name.endswith(_TRACE_SUFFIXES) and not p.name.startswith("."))


def rank_files(directory: str) -> tuple[list[str], list[str]]:
    """(files, notes): the trace files directly inside, or else one per sub-directory (`run/rank0/`,
    `run/rank1/`...): the last in name order where a sub-directory holds several (profiler file
    names end in a timestamp), with a note saying which was taken."""
    files = trace_files(directory)
    if files:
        return files, []
    notes = []
    for sub in sorted(p for p in Path(directory).iterdir() if p.is_dir() and not p.name.startswith(".")):
        found = trace_files(str(sub))
        if found:
            files.append(found[-1])
            if len(found) > 1:
                notes.append(f"{sub.name}/ holds {len(found)} trace files; took {Path(found[-1]).name}")
    return files, notes

def load(path: str | os.PathLike, use_cache: bool = True, progress: Progress | None = None,
         workers: int | None = None) -> Job:
    """Load a trace file, or a directory of per-rank traces, into a Job (one Trace per rank)."""
    path = str(path)
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    notes: list[str] = []
    if os.path.isdir(path):
        files, notes = rank_files(path)
        if not files:
            raise TraceError(path, "a directory with no trace files in it (nor in its sub-directories)",
                             f"Expected files ending in {', '.join(_TRACE_SUFFIXES)}.")
    elif not os.path.isfile(path):  # a FIFO, socket or device: reading it could block forever
        raise TraceError(path, "not a regular file (a pipe, socket or device)", "Save the trace to a file first.")
    else:
        files = [path]
    loaded = _load_files(files, use_cache, progress, workers)
    # a merged multi-rank file becomes its ranks (each already knows its rank)
    traces, origins = [], []
    for file, trace in zip(files, loaded):
        parts = split_ranks(trace)
        traces += parts
        origins += [file] * len(parts)
    for trace in traces:
        trace.meta.warnings.extend(notes)
    return Job(path=path, traces=_assign_ranks(path, origins, traces))


def _load_files(files: list[str], use_cache: bool, progress: Progress | None, workers: int | None) -> list[Trace]:
    """Cached files are read here (Parquet is fast, and pickling frames back from a worker would
    cost more than reading them); the rest are parsed in parallel processes."""
    total = len(files)
    traces: list[Trace | None] = [cache.read(f) if use_cache else None for f in files]
    missing = [i for i, t in enumerate(traces) if t is None]
    done = total - len(missing)
    if progress:
        progress(done, total, os.path.basename(files[missing[0]] if missing else files[-1]))
    if len(missing) <= 1 or (workers or os.cpu_count() or 1) == 1:
        for i in missing:
            traces[i] = load_file(files[i], use_cache)
            done += 1
            if progress:
                progress(done, total, os.path.basename(files[i]))
        return traces  # type: ignore[return-value]
    with ProcessPoolExecutor(max_workers=workers or min(len(missing), os.cpu_count() or 1)) as pool:
        futures = {i: pool.submit(load_file, files[i], use_cache) for i in missing}
        for i, future in futures.items():
            traces[i] = future.result()  # a TraceError names its own file
            done += 1
            if progress:
                progress(done, total, os.path.basename(files[i]))
    return traces  # type: ignore[return-value]


def _assign_ranks(path: str, files: list[str], traces: list[Trace]) -> list[Trace]:
    """Rank from the trace's distributedInfo, else from the file name (rank3, worker3); a single
    trace with neither is rank 0 (never "no rank": tools and sentences address ranks by number)."""
    if len(traces) == 1:
        if traces[0].meta.rank is None:
            traces[0].meta.rank = 0
        return traces
    for file, trace in zip(files, traces):
        # the file's name (worker3.json), else its directory's (rank3/trace.json)
        named = _RANK_IN_NAME.search(Path(file).name) or _RANK_IN_NAME.search(Path(file).parent.name)
        if trace.meta.rank is None and named:
            trace.meta.rank = int(named.group(1))
    if any(t.meta.rank is None for t in traces):
        for i, trace in enumerate(traces):  # no rank anywhere: number them in file order
            trace.meta.rank = i
            trace.meta.warnings.append("no rank in the trace or its name; numbered in file-name order")
    seen: dict[int, str] = {}
    for file, trace in zip(files, traces):
        rank = trace.meta.rank
        if rank in seen:
            raise TraceError(path, f"two files claim rank {rank}: {Path(seen[rank]).name} and {Path(file).name}",
                             "Put one trace per rank in the directory.")
        seen[rank] = file
    return sorted(traces, key=lambda t: t.meta.rank)
