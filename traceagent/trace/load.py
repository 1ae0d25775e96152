"""Open any trace path: sniff the format, dispatch to its loader, find a job's rank files (a
directory, a glob, a list; local or URLs), assign ranks, and use the cache."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from ..errors import TraceError
from . import cache, storage
from .kineto import load_kineto
from .model import Trace, TraceMeta
from .normalize import as_analysed, split_ranks
from .nsys import load_nsys

T = TypeVar("T")

_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".qdrep")
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def sniff(path: str) -> str:
    """'kineto', 'nsys' or 'nsys-rep', from the first bytes (extensions lie)."""
    with storage.open_binary(path) as f:
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


#: reads of a file that keeps changing while it is read, before the last one is taken as it is
READS_OF_A_CHANGING_FILE = 3


def load_file(path: str, use_cache: bool = True, max_bytes: int | None = None) -> Trace:
    """Load one trace file, local or a URL (cached when allowed). What the file is is taken
    before it is read; a file replaced or rewritten meanwhile is read again, so the Trace (and
    the cache entry) is of the file as it is now. `max_bytes`: see trace/reading.py."""
    return load_file_keyed(path, use_cache, max_bytes)[0]


def load_file_keyed(path: str, use_cache: bool = True, max_bytes: int | None = None,
                    key: cache.Key | None = None) -> tuple[Trace, cache.Key | None]:
    """load_file, and the cache key the Trace is stored under (None: not cached), for results
    computed from it (cache.write_results). `key`: the file's key, if the caller just took it."""
    path = storage.as_local(path)
    storage.check_file(path)  # a pipe or a device (a side input, a reloaded rank) is refused before it is opened
    with _readable(path):
        for attempt in range(READS_OF_A_CHANGING_FILE):
            if key is None or attempt:
                key = cache.key(path) if use_cache else None
            stamp = key.stamp if key is not None else storage.size_and_version(path)
            if key is not None and (cached := cache.read(key)) is not None:
                return cached, key
            trace = _parse(path, max_bytes)
            if storage.size_and_version(path) == stamp:
                return trace, key if key is not None and cache.write(key, trace) else None
        trace.meta.warnings.append(f"the file changed while it was read, {READS_OF_A_CHANGING_FILE} times: this "
                                   "analysis is of one of its versions (not cached); load it again once it is written")
        return trace, None


def file_key(path: str) -> cache.Key:
    """The file's cache key now (cache.key), a missing or unreadable file a TraceError."""
    path = storage.as_local(path)
    storage.check_file(path)
    with _readable(path):
        return cache.key(path)


@contextlib.contextmanager
def _readable(path: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:  # gone, unreadable, a disk error: bad input to the user, not a bug
        raise TraceError(path, f"cannot be read ({exc.strerror or exc})",
                         "Check that the file exists and that you may read it.") from None


def _parse(path: str, max_bytes: int | None) -> Trace:
    fmt = sniff(path)
    if fmt == "nsys-rep":
        return load_nsys(_export_nsys_rep(path))
    if fmt == "nsys" and storage.is_url(path):
        return _load_remote_sqlite(path)
    if fmt == "nsys":
        return load_nsys(path)
    return load_kineto(path, max_bytes)


def _load_remote_sqlite(url: str) -> Trace:
    """SQLite reads files, not streams: a local copy for the load."""
    with tempfile.TemporaryDirectory(prefix="traceagent-") as tmp:
        local = os.path.join(tmp, storage.name(url))
        with storage.open_binary(url) as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        trace = load_nsys(local)
    trace.meta.path = url
    return trace


def _export_nsys_rep(path: str) -> str:
    if storage.is_url(path):
        raise TraceError(path, "an Nsight Systems report at a URL", "Export it to .sqlite first (`nsys export "
                         "--type sqlite`), then open the .sqlite file.")
    out = str(Path(path).with_suffix(".sqlite"))
    command = ["nsys", "export", "--type", "sqlite", "--output", out, path]
    if shutil.which("nsys") is None:
        raise TraceError(path, "an Nsight Systems report, and nsys is not on PATH to export it",
                         f"Run `{' '.join(command)}` where nsys is installed, then open the .sqlite file.")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(out):
        raise TraceError(path, f"`nsys export` failed: {done.stderr.strip()[:200]}", f"Run `{' '.join(command)}` by hand.")
    return out


def is_trace_name(path: str) -> bool:
    name = storage.name(path)
    return name.endswith(_TRACE_SUFFIXES) and not name.startswith(".")


#: (an entry of a rank directory or a glob's match, why it cannot be read)
Unreadable = tuple[str, str]


def trace_files(directory: str) -> tuple[list[str], list[Unreadable]]:
    """(the trace files directly inside a directory, in name order; entries with a trace file's
    name that are no file to read: a link to nothing, a link that loops, a pipe)."""
    files, _, others = storage.listing(directory)
    return [f for f in files if is_trace_name(f)], [(f, why) for f, why in others if is_trace_name(f)]


def rank_files(directory: str) -> tuple[list[str], list[str], list[Unreadable]]:
    """(files, notes, unreadable entries): the trace files directly inside, or else one per
    sub-directory (`run/rank0/`, `run/rank1/`...): the last in name order where a sub-directory
    holds several (profiler file names end in a timestamp), with a note saying which was taken."""
    files, unreadable = trace_files(directory)
    if files or unreadable:
        return files, [], unreadable
    notes = []
    _, subs, others = storage.listing(directory)
    unreadable = [(f, why) for f, why in others if not storage.name(f).startswith(".")]  # a rank directory that loops
    for sub in subs:
        if storage.name(sub).startswith("."):
            continue
        found, bad = trace_files(sub)
        unreadable += bad
        if found:
            files.append(found[-1])
            if len(found) > 1:
                notes.append(f"{storage.name(sub)}/ holds {len(found)} trace files; took {storage.name(found[-1])}")
    return files, notes, unreadable


@dataclass(frozen=True)
class Sources:
    """What a job is read from: its name (the path given), its trace files, notes for every rank,
    and entries that looked like rank files but cannot be read (failed ranks, with the reason)."""

    path: str
    files: list[str]
    notes: list[str]
    unreadable: list[Unreadable]


def resolve(source: str | os.PathLike | Sequence[str | os.PathLike]) -> Sources:
    """The trace files of a file, a rank directory, a glob pattern or a list of files; each may
    be a URL. Raises TraceError when there is nothing to load."""
    if not isinstance(source, (str, os.PathLike)):
        files = [storage.as_local(os.fspath(f)) for f in source]
        if not files:
            raise TraceError("(no files)", "an empty list of trace files")
        for file in files:
            storage.check_file(file)
        return Sources(files[0] if len(files) == 1 else f"{len(files)} files from {files[0]}", files, [], [])
    path = storage.as_local(os.fspath(source))
    if storage.has_glob(path) and not storage.exists(path):
        matched, others = storage.glob(path)
        files = [f for f in matched if is_trace_name(f)]
        unreadable = [(f, why) for f, why in others if is_trace_name(f)]
        if not files:
            raise TraceError(path, "no trace files match this pattern" + _unreadable_text(unreadable),
                             f"Expected files ending in {', '.join(_TRACE_SUFFIXES)}.")
        return Sources(path, files, [], unreadable)
    if not storage.exists(path):
        raise TraceError(path, "no such file or directory")
    if storage.is_dir(path):
        files, notes, unreadable = rank_files(path)
        if not files:
            raise TraceError(path, "a directory with no trace files in it (nor in its sub-directories)"
                             + _unreadable_text(unreadable), f"Expected files ending in {', '.join(_TRACE_SUFFIXES)}.")
        return Sources(path, files, notes, unreadable)
    storage.check_file(path)
    return Sources(path, [path], [], [])


def _unreadable_text(unreadable: list[Unreadable]) -> str:
    """'; rank0.json: a symbolic link that loops' (the first three) for an error message."""
    shown = "; ".join(f"{storage.name(f)}: {why}" for f, why in unreadable[:3])
    return f" that can be read ({len(unreadable)} cannot: {shown})" if unreadable else ""


def numbered(path: str, per_file: list[tuple[str, list[T]]], meta: Callable[[T], TraceMeta]) -> list[tuple[T, int]]:
    """Each rank of each file (a Trace, or its analysis) with its rank number in the job
    (assign_ranks): the one rule `load` and `traceagent.analyze` share."""
    ranks = [(file, rank) for file, found in per_file for rank in found]
    return list(zip([rank for _, rank in ranks],
                    assign_ranks(path, [file for file, _ in ranks], [meta(rank) for _, rank in ranks])))


@dataclass(frozen=True)
class RankSource:
    """Where one rank's events come from, to load them again where an analysis kept only its
    results (a rank analysed on a Dask worker): the file, the rank's place among the ranks of a
    merged file, the step pattern and the graph capture's ops the analysis used."""

    file: str
    part: int = 0
    steps: re.Pattern | None = None
    use_cache: bool = True
    max_bytes: int | None = None
    captured: tuple[tuple[str, str], ...] = ()  # normalize.capture_ops, as pairs (the source is compared and hashed)

    def load(self, meta: TraceMeta) -> Trace:
        """The rank's Trace, with the metadata the analysis settled on (its rank). The same object
        for the same rank while it is among the last two asked for, so what detectors compute
        per Trace (device views, classified gaps) is computed once, not at every query."""
        for i, (source, kept) in enumerate(_RELOADED):
            if source == self and kept.meta is meta:
                _RELOADED.append(_RELOADED.pop(i))
                return kept
        trace = as_analysed(split_ranks(load_file(self.file, self.use_cache, self.max_bytes))[self.part], self.steps,
                         dict(self.captured))
        _RELOADED.append((self, replace(trace, meta=meta)))
        del _RELOADED[:-2]  # the rank a conversation is about, and one more: never the whole job
        return _RELOADED[-1][1]


_RELOADED: list[tuple[RankSource, Trace]] = []  # most recently used last


def assign_ranks(path: str, files: list[str], metas: list[TraceMeta]) -> list[int]:
    """Each trace's rank: from its distributedInfo, else from the file name (rank3, worker3); a single
    trace with neither is rank 0 (never "no rank": tools and sentences address ranks by number).
    Where some have none, every trace is numbered in file order, with a warning."""
    if len(metas) == 1:
        return [metas[0].rank if metas[0].rank is not None else 0]
    found: list[int | None] = []
    for file, meta in zip(files, metas):
        # the file's name (worker3.json), else its directory's (rank3/trace.json)
        named = _RANK_IN_NAME.search(storage.name(file)) or _RANK_IN_NAME.search(storage.parent_name(file))
        found.append(meta.rank if meta.rank is not None else int(named.group(1)) if named else None)
    ranks = [r for r in found if r is not None]
    if len(ranks) < len(found):
        for meta in metas:
            meta.warnings.append("no rank in the trace or its name; numbered in file-name order")
        return list(range(len(metas)))
    seen: dict[int, str] = {}
    for file, rank in zip(files, ranks):
        if rank in seen:
            raise TraceError(path, f"two files claim rank {rank}: {storage.name(seen[rank])} and {storage.name(file)}",
                             "Put one trace per rank in the directory.")
        seen[rank] = file
    return ranks
