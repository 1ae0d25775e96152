"""One large JSON array inside a small document, decoded a piece at a time.

A profiler trace is a few keys around one array of millions of events. Reading the file whole
holds its bytes and a view per event at once (about 1.3× the file before any column exists);
read here, memory holds one chunk. Each chunk is cut at the last `}`, `{` pair with a comma
between, and the decoder proves the cut: a cut inside a string leaves it unterminated and a cut
inside a nested value leaves brackets open, so a piece that decodes is exactly whole elements.
A cut that does not decode is moved back to the previous candidate, a few times at most, and
else tried again after the next read; past MAX_PIECE_BYTES without a cut the file is read whole.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol, TypeVar

import msgspec

T = TypeVar("T")

#: bytes read at a time: about 11k Kineto events. 2 MB measured faster and leaner than 8 or 16 MB
#: (1.66 vs 1.77 and 1.98 s, 187 vs 248 and 320 MB peak for a 200 MB trace); below 1 MB the calls add up
CHUNK_BYTES = 2 << 20
#: the document's text before the array, and one element, may not exceed this (else: read whole)
MAX_PIECE_BYTES = 256 << 20
#: cuts tried after each read (a cut inside a string or a nested value does not decode)
RETRIES = 8

#: a cut whose `}`, blanks and comma straddle the end of what was read before is searched this far
#: back (a longer run of blanks between two events sends the file to the whole-file reader)
_OVERLAP = 1 << 16
BOUNDARY = re.compile(rb"\}\s*(,)\s*\{")
_BLANK = b" \t\r\n"


class Readable(Protocol):
    """What the reader reads from: a binary file, or trace/reading.TraceStream."""

    def read(self, n: int = -1, /) -> bytes: ...

    def tell(self) -> int: ...


class NotChunkable(Exception):
    """The file is not in the shape this reader handles (or not valid JSON): read it whole,
    where every repair and error message lives."""


def read_array(f: Readable, key: str, decode_piece: Callable[[bytes], T],
               decode_rest: Callable[[bytes], T], chunk_bytes: int | None = None,
               stop: int | None = None) -> tuple[bytes | None, bytes, Iterator[T]]:
    """(`{...document with the array emptied...}` or None for a bare array, the text that reopens
    the document (see read_rest), decoded pieces).

    `decode_piece` gets `[e1,...,en]`; the last piece goes to `decode_rest` as the document again
    (`{"key":[...last elements...], ...keys after the array...}`, or `[...]` for a bare array).
    Both raise msgspec.DecodeError for text that is not valid JSON of their shape. With `stop`
    (a boundary from `boundary_after`), reading ends at that byte of the file and the last piece
    goes to `decode_piece`: what follows is read_rest's.
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    buf, head, reopen = _opening(f, key, chunk_bytes)
    if stop is None:
        return head, reopen, _pieces(f.read, buf, decode_piece, lambda rest: decode_rest(b"".join((reopen, rest))),
                                     chunk_bytes)
    if f.tell() > stop:
        raise NotChunkable("the stop lies before the array")
    return head, reopen, _pieces(lambda n: f.read(min(n, stop - f.tell())), buf, decode_piece,
                                 lambda rest: decode_piece(b"".join((b"[", rest, b"]"))), chunk_bytes)


def read_rest(f: Readable, reopen: bytes, decode_piece: Callable[[bytes], T], decode_rest: Callable[[bytes], T],
              chunk_bytes: int | None = None, read: bytes = b"") -> Iterator[T]:
    """The pieces of an array's elements from just after a boundary to the end of the document, as
    read_array gives them: `read` is the text already read past the boundary, `f` is where it ends;
    `reopen` is what read_array returned."""
    return _pieces(f.read, read, decode_piece, lambda rest: decode_rest(b"".join((reopen, rest))),
                   chunk_bytes or CHUNK_BYTES)


def boundary_after(f: BinaryIO, offset: int, window: int = 1 << 20) -> int | None:
    """The file offset of the first comma between a `}` and a `{` at or after `offset`: where the
    file can be split between two readers. Only a candidate: the reader that ends there proves it
    (a comma inside a string or a nested value leaves that reader's last piece undecodable)."""
    text = os.pread(f.fileno(), window, offset)
    found = BOUNDARY.search(text)
    return offset + found.start(1) if found else None


def _opening(f: Readable, key: str, chunk_bytes: int) -> tuple[bytes, bytes | None, bytes]:
    """Read up to the array's `[`: (what follows it, the document before it closed empty, the
    text that reopens the document before the last piece)."""
    buf = f.read(chunk_bytes)
    if buf[:3] == b"\xef\xbb\xbf":
        buf = buf[3:]
    body = buf.lstrip(_BLANK)
    if body[:1] == b"[":
        return body[1:], None, b"["
    if body[:1] != b"{":
        raise NotChunkable("not a JSON object or array")
    opening = re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*\[')
    while (found := opening.search(body)) is None:
        more = f.read(chunk_bytes)
        if not more or len(body) > MAX_PIECE_BYTES:
            raise NotChunkable(f"no {key} array near the start")
        body += more
    # the key could sit in a nested object; the document then fails to decode and the caller reads whole
    head = body[:found.end()] + b"]}"
    return body[found.end():], head, b'{"' + key.encode() + b'":['


def _pieces(read: Callable[[int], bytes], rest: bytes, decode_piece: Callable[[bytes], T],
            decode_last: Callable[[bytearray], T], chunk_bytes: int) -> Iterator[T]:
    buf = bytearray(rest)  # grown in place, and cut from the front without moving what is left
    # buf[:floor] holds no cut that could decode: every one there was tried and failed, and a cut
    # that fails keeps failing however much follows (so a long element is not searched again
    # at every read: that was quadratic in its length)
    floor = 0
    while more := read(chunk_bytes):
        grown_from = len(buf)
        buf += more
        for attempt, cut in enumerate(_cuts(buf, floor)):
            if attempt == RETRIES:  # read on: the elements that come next bring new cuts
                break
            try:
                piece = decode_piece(b"".join((b"[", memoryview(buf)[:cut], b"]")))  # one copy
            except msgspec.DecodeError:
                continue
            del buf[:cut + 1]
            floor = 0
            yield piece
            break
        else:  # every cut failed: only one that starts near the old end or after it can be new
            floor = max(0, grown_from - _OVERLAP)
        if len(buf) > MAX_PIECE_BYTES:
            raise NotChunkable("no cut that decodes within the piece limit")
    try:
        yield decode_last(buf)
    except msgspec.DecodeError as exc:
        raise NotChunkable(str(exc)) from None


def _cuts(buf: bytes | bytearray, floor: int = 0) -> Iterator[int]:
    """Commas between a `}` and a `{` in buf[floor:], last first: searched in a window at the
    end, widened when it holds none (regex at C speed; no Python step per byte or per comma)."""
    window = 1 << 16
    end = len(buf)
    while True:
        start = max(floor, end - window)
        commas = [m.start(1) for m in BOUNDARY.finditer(buf, start, end)]
        yield from reversed(commas)
        if start == floor:
            return
        # the next, wider window ends before the cuts already tried; one straddling `start` falls inside it
        end = commas[0] if commas else end
        window *= 4
