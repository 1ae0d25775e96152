"""A trace's bytes, read with a budget: gzip inflated as a stream, never past `max_bytes` of
text, never past a ratio no profiler's JSON reaches, and never through a run of NUL bytes.

A 10 MB gzip can inflate to 10 GiB and a sparse file can hold gigabytes of zeros after a valid
start: read naively, either takes every byte of memory before anything says no. Here each is one
clear error (exit 2) after at most a few megabytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, BinaryIO

from ..errors import TraceError
from ..format import size
from . import storage
from .chunked import MAX_PIECE_BYTES

_inflating: ModuleType
try:  # ISA-L inflates about 3× faster than zlib, with zlib's interface
    from isal import isal_zlib as _inflating
except ImportError:  # a platform without its wheel
    _inflating = zlib
#: what a corrupt gzip raises, either way
_INFLATE_ERRORS: tuple[type[BaseException], ...] = (zlib.error, _inflating.error)

#: compressed bytes read at a time (as gzip.GzipFile reads them)
_INPUT_BLOCK = 128 << 10
_GZIP = 16 + zlib.MAX_WBITS
#: a gzip that inflates more than this many times its size is refused (real Kineto traces: 12-31×;
#: a bomb of zeros: ~1000×), once past RATIO_FLOOR of text, unless the user set --max-bytes
MAX_RATIO = 200
RATIO_FLOOR = 64 << 20
#: a run this long of NUL bytes is never JSON (which has no raw NUL at all): a sparse or
#: pre-allocated file the profiler never finished, or not a trace
NUL_RUN = b"\0" * 16


def available_memory() -> int:
    """Bytes of memory this process can still take: the least of what the machine has free
    (MemAvailable), what its cgroup allows (v2 memory.max, v1 memory.limit_in_bytes, less what the
    group uses: containers, Slurm) and what its rlimits leave (RLIMIT_AS less the address space in
    use: `ulimit -v`; RLIMIT_DATA likewise). Half the machine's memory where none can be read."""
    rooms = [room for room in (_meminfo_available(), _cgroup_room(), _rlimit_room()) if room is not None]
    if not rooms:
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        except (ValueError, OSError, AttributeError):
            return 8 << 30
    return max(0, min(rooms))


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    return _kib_field(path, b"MemAvailable:")


def _kib_field(path: str, name: bytes) -> int | None:
    """A `Name:  N kB` line of a /proc file, in bytes."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(name):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _rlimit_room(status: str = "/proc/self/status") -> int | None:
    """What RLIMIT_AS and RLIMIT_DATA leave beyond the address space and data this process uses."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    rooms = []
    for limit, used in ((resource.RLIMIT_AS, b"VmSize:"), (resource.RLIMIT_DATA, b"VmData:")):
        soft, _ = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY:
            rooms.append(soft - (_kib_field(status, used) or 0))
    return min(rooms) if rooms else None


def _cgroup_room(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The memory this process's cgroup may still take: its limit (or an ancestor's, the least)
    less its usage; None without a limit. cgroup v2 (`0::/path`) and v1 (`N:memory:/path`); in a
    cgroup namespace the group is the mount's root."""
    try:
        with open(proc) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _, controllers, group = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "":
            rooms.append(_group_room(root, group, "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            rooms.append(_group_room(os.path.join(root, "memory"), group, "memory.limit_in_bytes",
                                     "memory.usage_in_bytes"))
    found = [r for r in rooms if r is not None]
    return min(found) if found else None


def _group_room(mount: str, group: str, limit_file: str, usage_file: str) -> int | None:
    """The least (limit - usage) over the group's directory and its ancestors under `mount`."""
    rooms = []
    parts = [p for p in group.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        directory = os.path.join(mount, *parts[:depth])
        limit, usage = _number(os.path.join(directory, limit_file)), _number(os.path.join(directory, usage_file))
        if limit is not None and limit < 1 << 60:  # "max", or v1's page-rounded 2**63: no limit
            rooms.append(limit - (usage or 0))
    return min(rooms) if rooms else None


def _number(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def default_max_bytes() -> int:
    """The most text one trace file may hold, unless the user says otherwise: the memory
    available to this process where it is read (its columns take up to about the text's size)."""
    return available_memory()


class TraceStream:
    """A trace file's text (gunzipped if it is a gzip) as a binary stream with `read(n)`, checked
    as it is read: TraceError past `max_bytes`, past MAX_RATIO (a gzip, unless `max_bytes` was the
    user's), or at a run of NUL bytes. `cut_short` says whether a gzip ended early."""

    def __init__(self, f: BinaryIO, path: str, max_bytes: int | None = None, whole: bool = False,
                 too_large: Callable[[int, int], TraceError] | None = None) -> None:
        self._f, self.path, self._whole, self._too_large = f, path, whole, too_large
        self._explicit = max_bytes is not None
        self.max_bytes = max_bytes if max_bytes is not None else default_max_bytes()
        if whole:
            # read whole, the text and its decoded events are held at once: half of what memory
            # allows, whatever the budget (a budget lifts the stream's checks, not the machine's limit)
            self.max_bytes = min(self.max_bytes, available_memory()) // 2
        start = f.tell()  # a reader of a split file's second half starts mid-file, in plain text
        self.gzipped = start == 0 and f.read(2) == b"\x1f\x8b"
        f.seek(start)
        self.cut_short = False
        self.position = 0  # bytes of text handed out
        self.consumed = 0  # of a gzip: compressed bytes inflated so far
        self._inflater: Any = _inflating.decompressobj(_GZIP) if self.gzipped else None  # None between two members
        self._input = b""  # compressed bytes read but not yet inflated
        self._ended = False
        if not self.gzipped:
            # fsspec's remote files have no descriptor: their size is not checked up front
            with contextlib.suppress(AttributeError, OSError, ValueError, io.UnsupportedOperation):
                on_disk = os.fstat(f.fileno()).st_size
                if on_disk > self.max_bytes:
                    raise self._over_budget(on_disk)

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:  # the rest, a checked block at a time
            return b"".join(iter(lambda: self.read(_INPUT_BLOCK * 32), b""))
        data = self._inflate(n) if self.gzipped else self._f.read(n)
        self._check(data)
        return data

    def tell(self) -> int:
        return self.position if self.gzipped else self._f.tell()

    def _inflate(self, n: int) -> bytes:
        """Up to `n` bytes of text, inflated as asked: a bomb never holds more than that at once.
        Members follow one another (`cat a.gz b.gz`); a stream that ends inside one sets
        cut_short and ends with what it held."""
        parts: list[bytes] = []
        want = n
        try:
            while not self._ended and want > 0:
                if not self._input:
                    self._input = self._f.read(_INPUT_BLOCK)
                    if not self._input:
                        self._ended = True
                        if self._inflater is not None:  # the file ended inside a member
                            parts.append(self._inflater.flush())
                            self.cut_short = True
                        break
                if self._inflater is None:
                    if len(self._input) < 2:  # the next member's magic may straddle two reads
                        self._input += self._f.read(_INPUT_BLOCK)
                    if self._input[:2] != b"\x1f\x8b":
                        self._ended = True  # gzip(1) too ignores what follows the last member
                        break
                    self._inflater = _inflating.decompressobj(_GZIP)
                out = self._inflater.decompress(self._input, want)
                if self._inflater.eof:
                    self._input, self._inflater = self._inflater.unused_data, None
                else:
                    self._input = self._inflater.unconsumed_tail
                if out:
                    parts.append(out)
                    want -= len(out)
                self.consumed = self._f.tell() - len(self._input)
        except _INFLATE_ERRORS as exc:
            raise TraceError(self.path, f"corrupt gzip file ({exc})", "Re-copy or re-export the trace.") from None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _check(self, data: bytes) -> None:
        start = self.position
        self.position += len(data)
        if b"\0" in data and (at := data.find(NUL_RUN)) >= 0:
            raise TraceError(self.path, f"a run of NUL bytes at byte {start + at:,} of its text: not JSON (a file the "
                             "profiler did not finish writing, a pre-allocated or sparse file, or not a trace)",
                             "Re-export the trace; if the events before that byte are what you need, cut the file there "
                             "and close the JSON.")
        if self.position > self.max_bytes:
            raise self._over_budget(self.position)
        if (self.gzipped and not self._explicit and self.position > RATIO_FLOOR
                and self.position > MAX_RATIO * max(self.consumed, 1)):
            raise TraceError(self.path, f"the gzip inflates more than {MAX_RATIO}× its size (past {size(self.position)} "
                             f"from {size(self.consumed)}; traces compress about 10-30×): a decompression bomb, or "
                             "not a trace", "If it is a real trace, give a budget with --max-bytes (e.g. --max-bytes 20GB).")

    def _over_budget(self, seen: int) -> TraceError:
        if self._too_large is not None:  # a file that is not a trace says what it is
            return self._too_large(self.max_bytes, seen)
        if self._whole:
            return TraceError(self.path, f"the file is not in the usual shape (damaged JSON, or no event "
                              f"boundary within {size(MAX_PIECE_BYTES)}), so it is read whole and held twice, and "
                              f"its text passes {size(self.max_bytes)}, half the memory this process may still take "
                              f"(read {size(seen)} so far)", "If it is a real trace, re-export it or read it on a machine "
                              "(or under a limit) with more memory; a gzip bomb or a giant string is not a trace.")
        whose = "the --max-bytes budget" if self._explicit else "the memory this process may still take"
        return TraceError(self.path, f"the trace holds over {size(self.max_bytes)} of text ({whose}; read "
                          f"{size(seen)} so far)", "Give --max-bytes if the machine has the memory, or profile fewer "
                          "steps (torch.profiler's schedule with active=1-3).")


def skip(stream: TraceStream, n: int) -> int:
    """Read and drop the next `n` bytes of text (checked as any read is): where a second reader of
    a gzip starts. The bytes skipped, fewer at the end of the text."""
    skipped = 0
    while skipped < n and (block := stream.read(min(8 << 20, n - skipped))):
        skipped += len(block)
    return skipped


def read_text(path: str, max_bytes: int | None = None,
              too_large: Callable[[int, int], TraceError] | None = None) -> tuple[bytes, list[str]]:
    """The file's whole text (gunzipped), within the budget; a gzip cut short yields what it
    holds, with a warning. The whole-file reader keeps the text and its decoded events at once,
    so it may take half the budget. `too_large(limit, read)`: the error for a file past it, where
    the file is not a trace (the default speaks of traces and their flags)."""
    with storage.open_binary(path) as f:
        stream = TraceStream(f, path, max_bytes, whole=True, too_large=too_large)
        parts = []
        while block := stream.read(_INPUT_BLOCK * 32):
            parts.append(block)
        data = b"".join(parts)
        del parts
    data = data[3:] if data[:3] == b"\xef\xbb\xbf" else data  # a UTF-8 byte-order mark
    return data, ["the gzip stream ends early (the file was cut short)"] if stream.cut_short else []


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from `2000000`, `500MB`, `20GB`, `1.5GiB`, `64k` (k, M, G, T: powers of 1000; Ki, Mi,
    Gi, Ti: of 1024). ValueError for anything else."""
    found = _SIZE.match(text)
    if not found:
        raise ValueError(f"{text!r} is not a size (e.g. 500MB, 20GB, 1GiB, or bytes)")
    number, unit = float(found.group(1)), (found.group(2) or "").lower()
    scale = 1024 if unit.endswith("i") else 1000
    return int(number * scale ** (" kmgt".index(unit[:1]) if unit else 0))
