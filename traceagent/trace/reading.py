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
from typing import Any, BinaryIO

from ..errors import TraceError
from ..format import size
from . import storage

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
    """Bytes of memory this machine can give now (MemAvailable on Linux), else half its memory."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def default_max_bytes() -> int:
    """The most text one trace file may hold, unless the user says otherwise: the memory
    available where it is read (its columns take up to about the text's size)."""
    return available_memory()


class TraceStream:
    """A trace file's text (gunzipped if it is a gzip) as a binary stream with `read(n)`, checked
    as it is read: TraceError past `max_bytes`, past MAX_RATIO (a gzip, unless `max_bytes` was the
    user's), or at a run of NUL bytes. `cut_short` says whether a gzip ended early."""

    def __init__(self, f: BinaryIO, path: str, max_bytes: int | None = None, whole: bool = False) -> None:
        self._f, self.path, self._whole = f, path, whole
        self._explicit = max_bytes is not None
        # read whole, the text and its decoded events are held at once: half the budget each
        self.max_bytes = (max_bytes if max_bytes is not None else default_max_bytes()) // (2 if whole else 1)
        start = f.tell()  # a reader of a split file's second half starts mid-file, in plain text
        self.gzipped = start == 0 and f.read(2) == b"\x1f\x8b"
        f.seek(start)
        self.cut_short = False
        self.position = 0  # bytes of text handed out
        self.consumed = 0  # of a gzip: compressed bytes inflated so far
        self._inflater: Any = zlib.decompressobj(_GZIP) if self.gzipped else None  # None between two members
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
                    self._inflater = zlib.decompressobj(_GZIP)
                out = self._inflater.decompress(self._input, want)
                if self._inflater.eof:
                    self._input, self._inflater = self._inflater.unused_data, None
                else:
                    self._input = self._inflater.unconsumed_tail
                if out:
                    parts.append(out)
                    want -= len(out)
                self.consumed = self._f.tell() - len(self._input)
        except zlib.error as exc:
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
        whose = "the --max-bytes budget" if self._explicit else "the memory available to read it"
        if self._whole:
            whose = f"half {whose}: a file not in the usual shape is read whole, held twice"
        return TraceError(self.path, f"the trace holds over {size(self.max_bytes)} of text ({whose}; read "
                          f"{size(seen)} so far)", "Raise --max-bytes if the machine has the memory, or profile fewer "
                          "steps (torch.profiler's schedule with active=1-3).")


def read_text(path: str, max_bytes: int | None = None) -> tuple[bytes, list[str]]:
    """The file's whole text (gunzipped), within the budget; a gzip cut short yields what it
    holds, with a warning. The whole-file reader keeps the text and its decoded events at once,
    so it may take half the budget."""
    with storage.open_binary(path) as f:
        stream = TraceStream(f, path, max_bytes, whole=True)
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
