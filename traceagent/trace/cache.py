"""Cache of normalized traces (each frame's columns as raw arrays, frame_file), so the second load
of a trace skips parsing. The price is disk, about a quarter of the trace's size.

Entries live in one cache directory (not beside the trace: trace folders are often read-only),
keyed by the trace as it was before it was read (`key`): its absolute path (or URL), size,
identity and change time (storage.size_and_version), a content fingerprint, and the loader's
version. A parse is stored only if the file still has that identity afterwards, so a file
replaced or rewritten while it was read never lends its key to the other's frames. Writes are
atomic (a directory renamed into place); reads are checked against the model. The directory is
kept under a size cap (`TRACEAGENT_CACHE_MAX`, 2 GB): the least recently used entries go first.

Only what traceagent wrote is ever read or removed. The directory is marked as ours when it is
created (a CACHEDIR.TAG naming traceagent, which backup tools also honour); a directory without
the mark that holds anything but our entries (a home directory, a cache other tools share) is
never written, read, evicted or cleared. An entry is ours by its name (24 hex digits, or that and
a temporary suffix) and its contents (our file names only, no sub-directory), and is removed file
by file, never with a recursive delete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pickle
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from . import storage
from .frame_file import read_frame, write_frame
from .model import CPU_COLUMNS, GPU_COLUMNS, MEMORY_COLUMNS, METRIC_COLUMNS, STEP_COLUMNS, Trace, TraceMeta


def _fingerprint(sources: list[Path]) -> str:
    """A hash of source files: any change to what they produce retires old entries, without
    anyone having to remember to bump a version."""
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


MODEL_VERSION = _fingerprint(list(Path(__file__).parent.glob("*.py")))  # the loader's


@functools.cache
def results_version() -> str:
    """Every module of the package: an analysis is stored for the code that computed it (hashed
    when first asked, not at every start-up)."""
    return _fingerprint(list(Path(__file__).parents[1].rglob("*.py")))


def cache_dir() -> Path:
    """`$TRACEAGENT_CACHE_DIR`, else `$XDG_CACHE_HOME/traceagent`, else `~/.cache/traceagent`."""
    if env := os.environ.get("TRACEAGENT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "traceagent"


#: the mark of a directory traceagent made: the Cache Directory Tagging signature, and our name
MARKER = "CACHEDIR.TAG"
_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
_MARKER_TEXT = (f"{_SIGNATURE}\n"
                "# This file is a cache directory tag created by traceagent (parsed traces).\n"
                "# traceagent removes only its own entries here. See https://bford.info/cachedir/\n")
#: an entry's name (key), or a temporary entry's (`<key>.tmp-<host>-<pid>`)
_ENTRY_NAME = re.compile(r"^[0-9a-f]{24}(?:\.tmp-.+-\d+)?$")
#: the files an entry may hold: the frames, meta.json, results and their temporaries
_ENTRY_FILE = re.compile(r"^(?:(?:gpu|cpu|steps|memory|metrics)\.frame|meta\.json|results-[0-9a-f]{24}\.pickle"
                         r"|\.results-[0-9a-f]{24}\.pickle\.tmp-.+-\d+)$")


class NotOurCache(Exception):
    """The cache directory is not one traceagent made: nothing in it is read, written or removed."""

    def __init__(self, directory: Path, why: str) -> None:
        super().__init__(str(directory), why)
        self.directory, self.why = directory, why

    def __str__(self) -> str:
        return f"{self.directory}: {self.why}"


def owned(directory: Path | None = None) -> bool:
    """Whether `directory` (default: the cache's) carries the mark traceagent writes when it makes one."""
    try:
        with open((directory or cache_dir()) / MARKER, "rb") as f:
            text = f.read(4096)
    except OSError:
        return False
    return text.startswith(_SIGNATURE.encode()) and b"traceagent" in text


def claim(directory: Path | None = None) -> Path:
    """The cache directory, made and marked as ours if it is new, empty, or holds only our entries
    (a cache from before the mark); NotOurCache if it holds anything else."""
    directory = directory or cache_dir()
    if owned(directory):
        return directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
        strangers = [item.name for item in os.scandir(directory) if not _is_entry(item)]
    except OSError as exc:
        raise NotOurCache(directory, f"cannot be used as the cache ({exc.strerror or exc})") from None
    if strangers:
        shown = ", ".join(sorted(strangers)[:3]) + (", …" if len(strangers) > 3 else "")
        raise NotOurCache(directory, f"is not traceagent's cache: it holds other files ({shown}) and no {MARKER} "
                          "written by traceagent, so nothing in it is read, written or removed")
    try:
        fd = os.open(directory / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another process marked it meanwhile (or wrote a mark not ours)
        if owned(directory):
            return directory
        raise NotOurCache(directory, f"holds a {MARKER} that traceagent did not write") from None
    except OSError as exc:
        raise NotOurCache(directory, f"cannot be marked as the cache ({exc.strerror or exc})") from None
    with os.fdopen(fd, "w") as f:
        f.write(_MARKER_TEXT)
    return directory


def _is_entry(item: os.DirEntry) -> bool:
    """An entry traceagent wrote: its name, a real directory (not a link), and only our files in it."""
    if not _ENTRY_NAME.match(item.name):
        return False
    try:
        if not item.is_dir(follow_symlinks=False):
            return False
        return all(f.is_file(follow_symlinks=False) and _ENTRY_FILE.match(f.name) for f in os.scandir(item.path))
    except OSError:
        return False


def _remove_entry(path: Path) -> None:
    """Remove one of our entries file by file (only our file names), then the empty directory: never
    a recursive delete, so a directory that is not ours, or became not ours meanwhile, stays."""
    with contextlib.suppress(OSError):
        for f in os.scandir(path):
            if _ENTRY_FILE.match(f.name) and f.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(f.path)
        os.rmdir(path)


#: files up to this size are hashed whole for the cache key; larger ones in samples
WHOLE_FILE_HASH = 64 << 20
_SAMPLE = 1 << 20


def fingerprint(path: str, size: int) -> str:
    """The file's content as the cache sees it: a copy with the same size and modification time
    (`cp -p`, `touch -r`) but other bytes gets another key. Whole files up to 64 MiB (BLAKE2 reads
    about 1 GB/s); larger ones by their first, middle and last MiB. `size` is the file's, as the
    caller already read it (for a URL, asking again is another request)."""
    digest = hashlib.blake2b(digest_size=16)
    with storage.open_binary(path) as f:
        if size <= WHOLE_FILE_HASH:
            # at most `size` bytes: a file that is not what its size says (/dev/zero reads forever) ends here
            left = size
            while left > 0 and (block := f.read(min(_SAMPLE, left))):
                digest.update(block)
                left -= len(block)
        else:
            for offset in (0, size // 2, size - _SAMPLE):
                f.seek(offset)
                digest.update(f.read(_SAMPLE))
    return digest.hexdigest()


@dataclass(frozen=True)
class Key:
    """A cache entry's name for a file as it is now (taken before reading it), and what the file
    must still be for a parse of it to be stored under that name."""

    path: str
    stamp: tuple[int, str]  # storage.size_and_version
    entry: Path


def key(path: str, stamp: tuple[int, str] | None = None) -> Key:
    """The key of `path` now; `stamp`, if the caller already took it, is storage.size_and_version's."""
    path = storage.as_local(path)  # a file:// URL is keyed as the local file it names, ctime included
    size, version = stamp = stamp or storage.size_and_version(path)
    text = f"{storage.absolute(path)}\0{size}\0{version}\0{fingerprint(path, size)}\0{MODEL_VERSION}"
    return Key(path, stamp, cache_dir() / hashlib.sha256(text.encode()).hexdigest()[:24])


_FRAMES = {"gpu": GPU_COLUMNS, "cpu": CPU_COLUMNS, "steps": STEP_COLUMNS, "memory": MEMORY_COLUMNS,
           "metrics": METRIC_COLUMNS}
_META_TYPES = {f.name: f.type for f in dataclasses.fields(TraceMeta)}


def read(key: Key) -> Trace | None:
    """The cached Trace for the file as `key` saw it, or None. Whatever is wrong with an entry
    (unreadable, another schema, swapped or damaged files), it is removed and the trace is parsed
    again: the cache can be slow, never wrong, never an error."""
    entry = key.entry
    if not entry.exists() or not owned(entry.parent):  # results are pickles: only ever from our own cache
        return None
    try:
        meta = _meta(json.loads((entry / "meta.json").read_text()))
        frames = {name: read_frame(entry / f"{name}.frame", schema) for name, schema in _FRAMES.items()}
    except Exception:  # any damage at all means: parse the file again
        _remove_entry(entry)
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)  # used now: the last to be evicted
    meta.path = key.path  # the path as asked now (another directory's relative path was stored)
    return Trace(meta=meta, **frames)


def _meta(raw) -> TraceMeta:
    """TraceMeta from meta.json, checked field by field."""
    if not isinstance(raw, dict) or set(raw) != set(_META_TYPES):
        raise ValueError("meta.json does not have the TraceMeta fields")
    if not isinstance(raw["devices"], dict) or not all(isinstance(v, str) for v in raw["devices"].values()):
        raise ValueError("devices is not a mapping of names")
    raw["devices"] = {int(k): v for k, v in raw["devices"].items()}
    for key in ("format", "path", "profiler"):
        if not isinstance(raw[key], str):
            raise ValueError(key)
    for key in ("device_properties", "warnings"):
        if not isinstance(raw[key], list):
            raise ValueError(key)
    for key in ("rank", "world_size"):
        if raw[key] is not None and not isinstance(raw[key], int):
            raise ValueError(key)
    return TraceMeta(**raw)


def write(key: Key, trace: Trace) -> bool:
    """Store the Trace parsed from the file `key` was taken of. The caller (load.load_file) has
    checked the file is still that one after the parse; should it change after that check, the
    frames are still the ones of the file `key` names. A cache that cannot be written is skipped,
    never an error."""
    entry = key.entry
    try:
        claim(entry.parent)
    except NotOurCache:
        return False  # `cache info` says why; the analysis goes on uncached
    tmp = entry.with_name(f"{entry.name}{_TMP}{socket.gethostname()}-{os.getpid()}")
    try:
        tmp.mkdir(exist_ok=True)
        for name in _FRAMES:
            write_frame(tmp / f"{name}.frame", getattr(trace, name))
        (tmp / "meta.json").write_text(json.dumps(dataclasses.asdict(trace.meta), default=str))
        if entry.exists():
            return True  # another process got there first
        tmp.rename(entry)  # atomic: readers never see half an entry
    except (OSError, TypeError):  # TypeError: a column type frame_file does not know (tests catch it; users go on)
        return False
    finally:
        _remove_entry(tmp)
    housekeep(keep=entry)
    return True


def read_results(key: Key, tag: str) -> object | None:
    """What was stored beside the file's frames under `tag` (write_results), or None. A results
    file that does not load is removed: the caller computes the results again."""
    path = key.entry / f"results-{tag}.pickle"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        # our own entry in the user's own cache directory (whoever can write there can change
        # the installed code too), keyed by the file's content and the package's code
        value = pickle.loads(data)
    except Exception:
        path.unlink(missing_ok=True)
        return None
    with contextlib.suppress(OSError):
        os.utime(key.entry)
    return value


def write_results(key: Key, tag: str, value: object) -> None:
    """Store results computed from the Trace cached under `key` (one file per `tag`: parameters
    and code version), in its entry: they are evicted with it. Only beside a cached Trace, and a
    cache that cannot be written is skipped."""
    if not key.entry.is_dir() or not owned(key.entry.parent):
        return
    target = key.entry / f"results-{tag}.pickle"
    tmp = key.entry / f".{target.name}{_TMP}{socket.gethostname()}-{os.getpid()}"
    try:
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.rename(target)  # atomic: a reader sees all of it or none
    except OSError:
        return
    finally:
        tmp.unlink(missing_ok=True)
    housekeep(keep=key.entry)


#: an entry being written is named `<entry>.tmp-<host>-<pid>`
_TMP = ".tmp-"
#: a temporary entry of another host, or of no running process, is left alone this long
_TMP_GRACE_S = 3600
DEFAULT_MAX_BYTES = 2_000_000_000


def max_bytes() -> int:
    """The cache's size cap: `$TRACEAGENT_CACHE_MAX` (bytes, or 500MB, 2GB, 1GiB; 0 stores nothing), else 2 GB."""
    from .reading import parse_size

    text = os.environ.get("TRACEAGENT_CACHE_MAX", "").strip()
    try:
        return parse_size(text) if text else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Entry:
    path: Path
    bytes: int
    used: float  # when last read or written (the directory's mtime)
    temporary: bool


def entries(directory: Path | None = None) -> list[Entry]:
    """The cache's entries and temporary entries (ours by name and contents, nothing else in the
    directory), least recently used first."""
    directory = directory or cache_dir()
    found = []
    with contextlib.suppress(OSError):
        for item in os.scandir(directory):
            try:
                if not _is_entry(item):
                    continue
                total = sum(f.stat(follow_symlinks=False).st_size for f in os.scandir(item.path))
                found.append(Entry(Path(item.path), total, item.stat(follow_symlinks=False).st_mtime, _TMP in item.name))
            except OSError:  # removed meanwhile by another process
                continue
    return sorted(found, key=lambda e: e.used)


def housekeep(keep: Path | None = None) -> list[Entry]:
    """Remove temporary entries left by killed processes, then the least recently used entries
    until the cache fits its cap (`keep`, the entry just written, last of all). What was removed."""
    now, host, cap = time.time(), socket.gethostname(), max_bytes()
    directory = keep.parent if keep else cache_dir()
    if not owned(directory):
        return []
    removed = []
    current = []
    for e in entries(directory):
        if not e.temporary:
            current.append(e)
        elif _stale(e, now, host):
            _remove_entry(e.path)
            removed.append(e)
    current.sort(key=lambda e: (e.path == keep, e.used))
    total = sum(e.bytes for e in current)
    for e in current:
        if total <= cap:
            break
        _remove_entry(e.path)
        total -= e.bytes
        removed.append(e)
    return removed


def _stale(e: Entry, now: float, host: str) -> bool:
    """A temporary entry no process is writing: its process on this host is gone, or it is old."""
    return _abandoned(e.path.name, host) or now - e.used > _TMP_GRACE_S


def _abandoned(name: str, host: str) -> bool:
    """A temporary entry of this host whose process no longer runs."""
    owner = name.rsplit(_TMP, 1)[-1]
    owner_host, _, pid = owner.rpartition("-")
    return owner_host == host and storage.writer_gone(pid)


def clear() -> list[Entry]:
    """Remove every entry (and temporary entries no running process of this host is writing), and
    nothing else. NotOurCache for a directory traceagent did not make (a missing one is empty)."""
    now, host, directory = time.time(), socket.gethostname(), cache_dir()
    if not directory.exists():
        return []
    if not owned(directory):
        claim(directory)  # a cache from before the mark is marked; anything else raises
    removed = []
    for e in entries(directory):
        if e.temporary and not _stale(e, now, host):
            continue
        _remove_entry(e.path)
        removed.append(e)
    return removed
