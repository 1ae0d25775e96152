"""PyTorch Profiler / Kineto Chrome-trace JSON (.json, .json.gz) → Trace.

The events are read a chunk of the file at a time (trace/chunked.py) and msgspec decodes each
piece straight into small typed structs, one kind per phase, that hold only the fields we use;
columns are then pulled out with C-level `map(attrgetter)`, never a Python loop per event. A file
that is not in the usual shape (malformed, cut short, oddly typed) is read whole instead, where
every repair lives.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_not, itemgetter
from types import GenericAlias
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceError
from . import chunked, forked, heap, reading, storage
from .model import MAX_COPY_BYTES, MAX_TIME_NS, SHAPED_OPS, Trace, TraceMeta, in_order_of_appearance
from .normalize import finish_trace

# lower-cased Kineto category → our kind. The 2021 schema capitalised them (Kernel, Runtime...).
GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
                  "gpu_memset": "memset", "memset": "memset", "cuda_sync": "sync"}
CPU_CATEGORIES = {"cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver",
                  "cpu_op": "op", "operator": "op", "python_function": "python", "python": "python",
                  "user_annotation": "annotation", "dataloader": "dataloader"}
#: the phases read, as codes (0: any other)
_PHASE_CODE = {"X": 1, "i": 2, "M": 3, "s": 4}
#: the kinds of complete events we read, as small codes while batches are read (a column of
#: objects cost 70 ms to join on a 200 MB trace); code 0 is neither device nor host work
_KINDS = (None, *dict.fromkeys(GPU_CATEGORIES.values()), *dict.fromkeys(CPU_CATEGORIES.values()))
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}
_LAST_GPU_KIND = len(set(GPU_CATEGORIES.values()))


class _KindCode(dict):
    """category → the code of its kind in _KINDS (0: neither device nor host work we read);
    each category (as written: Kineto's 2021 schema capitalised them) worked out once per batch."""

    def __missing__(self, category: str) -> int:
        lower = category.lower()
        self[category] = code = _KIND_CODE[GPU_CATEGORIES.get(lower) or CPU_CATEGORIES.get(lower)]
        return code

# (field, type, default, name in the JSON)
_ARG_FIELDS = [
    ("correlation", int, -1, "correlation"),
    ("blocks_per_sm", float, float("nan"), "blocks per SM"),  # a kernel's launch (model.GPU_COLUMNS)
    ("occupancy", float, float("nan"), "est. achieved occupancy %"),
    ("external_id", int, -1, "External id"),
    ("external_id_2021", int, -1, "external id"),
    ("device", int, -1, "device"),
    ("stream", int, -1, "stream"),
    ("bytes", int, 0, "bytes"),
    ("call_stack", str | None, None, "Call stack"),
    ("launched", str | None, None, "kernel"),  # a launch call's kernel (recent ROCm traces; capture traces need it)
    ("rank", int, -1, "rank"),  # merged multi-rank files (TraceLens' TraceFusion tags every event)
    ("label", str | None, None, "name"),  # process_name metadata: "rank 3" in merged files
    # record_shapes: kept as raw JSON (not decoded) and parsed only for SHAPED_OPS. Typed Raw, not
    # Raw | None: msgspec reads that union as "null only", which sent every batch of a trace
    # recorded with shapes down the slow untyped path (an absent field is the default, None)
    ("input_dims", msgspec.Raw, None, "Input Dims"),
    ("input_types", msgspec.Raw, None, "Input type"),
    ("concrete", msgspec.Raw, None, "Concrete Inputs"),
    # a collective's payload (NCCL/RCCL kernels in PyTorch >= 2.1): raw JSON, read for those kernels only
    ("coll_name", msgspec.Raw, None, "Collective name"),
    ("coll_in", msgspec.Raw, None, "In msg nelems"),
    ("coll_out", msgspec.Raw, None, "Out msg nelems"),
    ("coll_size", msgspec.Raw, None, "Group size"),
    ("coll_dtype", msgspec.Raw, None, "dtype"),
    ("coll_group", msgspec.Raw, None, "Process Group Name"),
    ("coll_ranks", msgspec.Raw, None, "Process Group Ranks"),
    # [memory] instant events
    ("device_type", int, -1, "Device Type"),
    ("device_id", int, -1, "Device Id"),
    ("mem_bytes", int | float, 0, "Bytes"),
    ("total_allocated", int | float, -1, "Total Allocated"),
    ("total_reserved", int | float, -1, "Total Reserved"),
]
_EVENT_FIELDS = [
    ("ph", str, "", "ph"),
    ("cat", str, "", "cat"),
    ("name", str, "", "name"),
    ("pid", int | str | None, None, "pid"),
    ("tid", int | str | None, None, "tid"),
    ("ts", float, 0.0, "ts"),
    ("dur", float, 0.0, "dur"),
]


def _args_type(strict: bool, names: tuple[str, ...] | None = None):
    """The args we read: all of them, or those named (in that order)."""
    kind = (lambda t: t) if strict else (lambda t: Any)
    chosen = [a for a in _ARG_FIELDS if names is None or a[0] in names]
    chosen.sort(key=lambda a: names.index(a[0]) if names else 0)
    # gc=False: millions of short-lived structs that hold no cycles need no garbage-collector
    # tracking, and the collector's passes over them were a good part of decoding time. Frozen: an
    # event without args shares one default (_no_args), not a struct of its own
    return msgspec.defstruct(
        "Args", [(f, kind(t), d) for f, t, d, _ in chosen], rename={f: j for f, _, _, j in chosen}, gc=False,
        frozen=True)


def _no_args(args: Any) -> Any:
    """The args field of an event type: one shared default instance (frozen), which every event
    without args holds, so a batch of such events is found in one C-level count (_ArgsOf)."""
    return msgspec.field(default=args())


def _event_type(strict: bool):
    """Typed structs for the fast path; `Any`-typed twins for traces that break the usual types."""
    kind = (lambda t: t) if strict else (lambda t: Any)
    args = _args_type(strict)
    return msgspec.defstruct(
        "Event", [(f, kind(t), d) for f, t, d, _ in _EVENT_FIELDS]
        + [("args", args, _no_args(args))], gc=False)


# msgspec types built at import (typed Any: the type checker sees variables, not classes)
_STRICT: Any = _event_type(strict=True)
_LOOSE: Any = _event_type(strict=False)
_LOOSE_TYPES = (_LOOSE, type(_LOOSE().args))  # events and args whose fields may hold any JSON

#: a collective kernel's payload args, in the order Kineto writes them (model.GPU_COLUMNS["collective"])
_COLLECTIVE_ARGS = ("coll_name", "coll_in", "coll_out", "coll_size", "coll_dtype", "coll_group", "coll_ranks")
_COLLECTIVE_KEYS = ("name", "in_nelems", "out_nelems", "group_size", "dtype", "group", "group_ranks")

#: phases whose events are read in full (complete events, instants for [memory], metadata for
#: labels), and the args each needs. In the order Kineto writes them: msgspec looks for the next
#: key where the last one matched, and every args key we do not read is a search of them all.
_READ_PHASES = {
    "X": ("external_id", "device", "stream", "correlation", "blocks_per_sm", "occupancy", *_COLLECTIVE_ARGS, "bytes",
          "input_dims", "input_types", "concrete", "external_id_2021", "call_stack", "rank", "launched"),
    "i": ("device_type", "device_id", "mem_bytes", "total_allocated", "total_reserved", "rank"),
    "M": ("label",),
}
#: every other Chrome-trace phase: only the phase is kept (flows mark `has_flows`), and msgspec
#: skips the rest of the event without building it. A third of a real trace is flow events.
_SKIMMED_PHASES = ("B", "E", "I", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "V", "v", "R", "c",
                   "S", "T", "p", "F", "(", ")")


def _phase_union():
    """One struct per phase, chosen by the "ph" tag: 2.4× faster than one struct for all on a
    real trace. Each exposes `ph` as a class attribute, as the untagged structs do as a field."""
    fields = [(f, t, d) for f, t, d, _ in _EVENT_FIELDS if f != "ph"]
    read = []
    for phase, names in _READ_PHASES.items():
        args = _args_type(strict=True, names=names)
        read.append(msgspec.defstruct(f"Event_{phase}", [*fields, ("args", args, _no_args(args))],
                                      tag_field="ph", tag=phase, namespace={"ph": phase}, gc=False))
    skimmed = [msgspec.defstruct(f"Skimmed_{i}", [], tag_field="ph", tag=p, namespace={"ph": p}, gc=False)
               for i, p in enumerate(_SKIMMED_PHASES)]
    return Union[tuple(read + skimmed)]  # noqa: UP007 (a runtime union of generated types)


_BY_PHASE: Any = _phase_union()


class _Document(msgspec.Struct):
    """The first pass: structure only. Events stay raw views into the file's bytes (48 bytes each)
    so that no event object exists until its batch is decoded."""

    traceEvents: list[msgspec.Raw] = msgspec.field(default_factory=list)
    deviceProperties: Any = None  # a list of dicts; anything else is ignored with a warning (_meta)
    distributedInfo: Any = None  # a dict; likewise
    schemaVersion: Any = None


class _LastPiece(_Document):
    """The document again around the last piece of events (read in pieces): events decoded
    straight into structs, and the keys written after the array."""

    traceEvents: list[_BY_PHASE] = msgspec.field(default_factory=list)


#: events decoded into structs at a time: peak memory holds one batch, not the whole trace.
#: 10k measured both leaner and faster than 100k on a 100 MB trace (253 vs 345 MB peak, 1.3 vs 1.7 s)
BATCH = 10_000


#: Python's json module writes these for non-finite floats; JSON has no such values.
_NON_FINITE = re.compile(rb"(?<=[:,\[])(\s*)(?:-?Infinity|NaN)(?=\s*[,}\]])")


def _first_byte(raw: bytes) -> bytes:
    """The first non-blank byte, without copying the buffer (lstrip would copy gigabytes)."""
    for i in range(min(len(raw), 4096)):
        if raw[i] not in b" \t\r\n":
            return raw[i:i + 1]
    return b""


def decode(raw: bytes, path: str) -> tuple[_Document, list[str]]:
    """Decode the document's structure. Repairs what is repairable (invalid UTF-8, NaN/Infinity
    values, a file cut short) with a warning; anything else is a TraceError saying where."""
    doc, _, warnings = repaired(raw, path)
    return doc, warnings


def repaired(raw: bytes, path: str) -> tuple[_Document, bytes, list[str]]:
    """(the document's structure, the text it was decoded from, a warning per repair): the text
    is valid JSON (what `annotate` writes back), the file's own bytes where nothing was repaired."""
    if _first_byte(raw) not in (b"{", b"["):
        raise TraceError(path, "not a JSON trace file",
                         "Expected PyTorch Profiler JSON (.json/.json.gz) or an Nsight Systems .sqlite export.")
    warnings: list[str] = []
    for _ in range(3):  # each repair at most once: UTF-8, then non-finite numbers
        try:
            return _decode_document(raw), raw, warnings
        except msgspec.ValidationError as exc:  # valid JSON of the wrong shape: say which part
            raise TraceError(path, f"not a PyTorch Profiler trace: {exc}", "Expected {\"traceEvents\": [...]}.") from None
        except RecursionError:
            raise TraceError(path, "JSON nested more deeply than Python can read (thousands of levels)",
                             "No profiler writes this; check where the file came from.") from None
        except msgspec.DecodeError as exc:
            message = str(exc)
            if "UTF-8" in message and not any("UTF-8" in w for w in warnings):
                raw = raw.decode("utf-8", errors="replace").encode("utf-8")
                warnings.append("invalid UTF-8 in the file was replaced with \ufffd")
            elif "malformed" in message and not any("NaN" in w for w in warnings) and _NON_FINITE.search(raw):
                raw = _NON_FINITE.sub(rb"\1null", raw)
                warnings.append("NaN/Infinity values (not JSON) were read as missing")
            elif "truncated" in message or _fails_at_end(raw, message):
                recovered = _recover_truncated(raw)
                if recovered is None:
                    break
                doc, text, kept = recovered
                return doc, text, [*warnings, f"the file ends mid-event (cut short after byte {len(raw):,}): loaded the "
                                        f"{len(doc.traceEvents):,} complete events in its first {kept:,} bytes; "
                                        "anything recorded after the cut is missing"]
            else:
                raise TraceError(path, f"malformed JSON {_where(raw, message)}",
                                 "Re-export the trace, or fix the file at that place.") from None
    raise TraceError(path, "malformed JSON that could not be recovered", "Re-export the trace.")


def _fails_at_end(raw: bytes, message: str) -> bool:
    """An error at the file's last byte: cut inside a number (`12.`, `-`, `1e`), which msgspec
    calls an invalid number rather than truncated input."""
    found = re.search(r"\(byte (\d+)\)", message)
    return found is not None and int(found.group(1)) >= len(raw.rstrip()) - 1


def _where(raw: bytes, message: str) -> str:
    """'at byte 1,234 (line 5, column 17): invalid character' from msgspec's message."""
    found = re.search(r"\(byte (\d+)\)", message)
    reason = re.sub(r"^JSON is malformed: |\s*\(byte \d+\)", "", message)
    if not found:
        return f"({reason})"
    at = int(found.group(1))
    line = raw.count(b"\n", 0, at) + 1
    column = at - (raw.rfind(b"\n", 0, at) + 1) + 1
    return f"at byte {at:,} (line {line}, column {column}): {reason}"


def _decode_document(raw: bytes) -> _Document:
    if _first_byte(raw) == b"[":  # the bare-array form of the Chrome trace format
        return _Document(traceEvents=msgspec.json.decode(raw, type=list[msgspec.Raw]))
    return msgspec.json.decode(raw, type=_Document)


def _recover_truncated(raw: bytes, attempts: int = 64):
    """Cut after the last complete event and close the brackets. A cut inside nested args fails
    and we step back to the previous closing brace."""
    is_array = _first_byte(raw) == b"["
    start = raw.find(b"[")
    if start < 0:
        return None
    limit = len(raw)
    for _ in range(attempts):
        cut = raw.rfind(b"}", start, limit)
        if cut < 0:
            return None
        text = raw[: cut + 1] + (b"]" if is_array else b"]}")
        try:
            doc = _decode_document(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            limit = cut
            continue
        if not doc.traceEvents:
            return None
        return doc, text, cut + 1
    return None


def _list_of(kind: Any) -> Any:
    """`list[kind]` for a struct type built at run time."""
    return GenericAlias(list, (kind,))


def _decode_events(batch: list, typed: tuple = (_BY_PHASE, _STRICT)) -> tuple[list, int]:
    """Raw events, one batch at a time: typed structs (the `typed` kinds not already tried), or
    Any-typed ones for odd traces (all of a batch one or the other, which _texts relies on);
    events that are not objects at all are skipped (and counted)."""
    text = b"[" + b",".join(batch) + b"]"
    for kind in typed:
        try:
            return msgspec.json.decode(text, type=_list_of(kind)), 0
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
    try:
        return msgspec.json.decode(text, type=_list_of(_LOOSE)), 0
    except (msgspec.ValidationError, msgspec.DecodeError):  # one by one, only on such traces
        events = []
        for item in batch:
            try:
                events.append(msgspec.json.decode(item, type=_LOOSE))
            except msgspec.DecodeError as exc:
                if "UTF-8" in str(exc):  # a name with invalid UTF-8: keep the event, mark the bytes
                    events.append(msgspec.json.decode(bytes(item).decode("utf-8", "replace").encode(), type=_LOOSE))
            except msgspec.ValidationError:  # not an object: skipped and counted
                pass
        return events, len(batch) - len(events)


def _select(items: list, index: np.ndarray) -> list:
    """items[index] for sorted distinct positions: `items` itself when they are all of it (most
    batches: every event complete, every one device work), never to be written to."""
    if len(index) == len(items):
        return items
    if len(index) == 0:
        return []
    picked = itemgetter(*index.tolist())(items)  # Python ints: numpy's index each item 1.5× slower
    return [picked] if len(index) == 1 else list(picked)


def _numeric(items: list, attr: str, default: int | float) -> np.ndarray:
    dtype = np.float64 if isinstance(default, float) else np.int64
    try:  # straight from the structs: no list in between
        return np.fromiter(map(attrgetter(attr), items), dtype=dtype, count=len(items))
    except (TypeError, ValueError, OverflowError):  # loose path: strings, nulls
        values = list(map(attrgetter(attr), items))
        series = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
        return series.fillna(default).to_numpy(dtype=dtype)


def _texts(items: list, attr: str, missing: str | None = "") -> list:
    """A string field of every event. The typed decoder guarantees strings; the loose one (odd
    traces) lets lists, numbers or objects through, which are written out as text."""
    values = list(map(attrgetter(attr), items))
    if not values or type(items[0]) not in _LOOSE_TYPES:  # a batch is decoded all typed or all loose
        return values
    types = set(map(type, values))  # at C speed: the typed decoder's strings (and None where allowed)
    if types <= {str} or (missing is None and types <= {str, type(None)}):
        return values
    return [v if type(v) is str else missing if v is None else json.dumps(v, default=str)[:1000] for v in values]


def _ids(items: list, attr: str) -> np.ndarray:
    """pid/tid: ints, or strings like "stream 7" / "25738"; the trailing number when there is one."""
    try:  # all numbers: the usual case, at C speed
        return np.fromiter(map(attrgetter(attr), items), dtype=np.int64, count=len(items))
    except (TypeError, ValueError, OverflowError):
        pass
    values = pd.Series(list(map(attrgetter(attr), items)), dtype=object)
    as_num = pd.to_numeric(values, errors="coerce")
    if as_num.isna().any():
        digits = values.astype(str).str.extract(r"(-?\d+)\s*$", expand=False)
        as_num = as_num.fillna(pd.to_numeric(digits, errors="coerce"))
    return as_num.fillna(-1).to_numpy(dtype=np.int64)


def _ns(us: np.ndarray) -> np.ndarray:
    """µs floats → integer ns, each exactly from its own value: the whole µs (exact in a float
    below 2**53) and the fraction (exact too) are scaled apart. One subtracted base per batch
    lost up to 64 ns on every event of a batch that held one far-off timestamp."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


class _Strings:
    """One string → code dictionary for a column of the whole trace. A batch's strings become
    int32 codes as the batch is read, so its string objects die with it and no per-batch
    categorical is merged later; categories come out in order of first appearance, as
    pd.factorize gives them. None is missing (code -1)."""

    def __init__(self) -> None:
        self._code: dict[str | None, int] = {None: -1}
        self._flags: dict[re.Pattern, list[bool]] = {}

    def codes(self, values: list) -> np.ndarray:
        if values.count(None) == len(values):  # a column most traces leave empty (call stacks)
            return np.full(len(values), -1, dtype=np.int32)
        code = self._code
        for value in dict.fromkeys(values):  # the batch's distinct values, in order
            if value not in code:
                code[value] = len(code) - 1
        return np.fromiter(map(code.__getitem__, values), dtype=np.int32, count=len(values))

    def matching(self, codes: np.ndarray, pattern: re.Pattern) -> np.ndarray:
        """Which rows' strings match (re.search); each distinct string tested once per trace."""
        known = self._flags.setdefault(pattern, [])
        known += [bool(pattern.search(v)) for v in self.values()[len(known):]]
        return np.array([*known, False], dtype=bool)[codes]

    def values(self) -> list[str]:
        """The strings, in code order (None, code -1, is the first key)."""
        return [v for v in self._code if v is not None]

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=pd.Index(self.values(), dtype=object))


#: the string columns coded as they are read: (table, column)
_CODED = (("gpu", "name"), ("gpu", "collective"), ("cpu", "name"), ("cpu", "stack"), ("cpu", "shapes"),
          ("cpu", "kernel"))


def load_kineto(path: str, max_bytes: int | None = None) -> Trace:
    """Read one Kineto trace file into a Trace; TraceError past `max_bytes` of text (default: the
    memory available), at a decompression bomb or a run of NUL bytes (trace/reading.py)."""
    with _collector_paused():  # while events are decoded; frames that follow do make cycles
        try:
            read = _read_in_pieces(path, max_bytes)
        except (chunked.NotChunkable, OSError, RecursionError):
            # anything unusual (a cut-short gzip, malformed or too deep JSON, no events): the
            # whole-file reader, which owns every repair and error message
            read = _read_whole(path, max_bytes)
    trace = _trace(path, *read)
    del read
    heap.return_freed_memory()  # the pieces and structs decoded on the way: the analysis starts without them
    return trace


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Loading allocates millions of objects and frees them with no reference cycles; the cyclic
    garbage collector's passes over them cost about 5% of a 200 MB load. Back on afterwards, as it was."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _trace(path: str, doc: _Document, parts: list[tuple], strings: dict[tuple[str, str], _Strings], skipped: int,
           warnings: list[str]) -> Trace:
    """The batches' columns joined into one Trace."""
    gpu, cpu, has_flows, labelled, dropped, memory = _joined(parts)
    if skipped:
        warnings.append(f"skipped {skipped:,} entries of traceEvents that are not JSON objects")
    if dropped:
        warnings.append(f"dropped {dropped:,} events with impossible values (a missing or non-numeric time, a "
                        "negative duration, a time out of range, or a byte count negative or out of range)")
    for columns in (gpu, cpu):
        columns["kind"] = in_order_of_appearance(np.asarray(columns["kind"], np.int8) - 1, _KINDS[1:])
    for table, column in _CODED:
        columns = {"gpu": gpu, "cpu": cpu}[table]
        if column in columns:
            columns[column] = strings[table, column].categorical(columns[column])
    for columns in (gpu, cpu, memory):
        columns["rank"] = _ranks(columns.pop("rank_arg", np.zeros(0, np.int64)), columns.pop("pid_raw", None), labelled)
    meta = _meta(doc, path, warnings, has_flows=has_flows)
    meta.has_python_frames = bool(np.asarray(cpu["kind"] == "python").any()) or bool(
        len(cpu.get("stack", [])) and pd.Series(cpu["stack"]).notna().any())
    return finish_trace(gpu, cpu, meta, memory)


#: what a reader gives: the document's keys, each batch's columns, the string dictionaries,
#: entries skipped for not being events, warnings
_Read = tuple[_Document, list[tuple], dict[tuple[str, str], _Strings], int, list[str]]


def _read_in_pieces(path: str, max_bytes: int | None = None) -> _Read:
    """Columns of the events read a chunk at a time (the usual case): memory holds one chunk and
    its structs, not the file. A large plain file is read by two processes at once (the second
    half in a forked child) where that is safe. Raises chunked.NotChunkable for anything it does
    not handle."""
    with storage.open_binary(path) as f, ExitStack() as split_files:
        stream = reading.TraceStream(f, path, max_bytes)
        gzip_split = _gzip_split(path, f, max_bytes, split_files) if stream.gzipped else None
        stop = gzip_split.stop if gzip_split is not None else None if stream.gzipped else _split_point(f)
        head, reopen, pieces = chunked.read_array(stream, "traceEvents", _decode_piece, _decode_last_piece, stop=stop)
        try:
            doc = msgspec.json.decode(head, type=_Document) if head is not None else _Document()
        except msgspec.DecodeError:  # "traceEvents" was not the top-level key
            raise chunked.NotChunkable("traceEvents is not a top-level key") from None
        strings: dict[tuple[str, str], _Strings] = defaultdict(_Strings)
        reading_on = (gzip_split.stream, gzip_split.read) if gzip_split is not None else None
        tail = forked.Forked(_columns_after, path, stop + 1, reopen, max_bytes, reading_on) if stop is not None else None
        split_files.close()  # the child has its own copy of the gzip's second reader
        try:
            started = time.monotonic()
            parts, skipped, events, after = _columns(pieces, strings)
            if tail is not None and stop is not None:
                try:  # a child that has not answered by then never will (a lock held at the fork)
                    more = tail.result(timeout=CHILD_GRACE_S + 3 * (time.monotonic() - started))
                except forked.ChildFailed:
                    more = _columns_after(path, stop + 1, reopen, max_bytes)
                more_parts, their_strings, more_skipped, more_events, after = more
                parts += _with_codes_of(strings, more_parts, their_strings)
                skipped, events = skipped + more_skipped, events + more_events
        finally:
            if tail is not None:
                tail.close()
    if stream.cut_short:  # the whole-file reader recovers what it holds, with its warning
        raise chunked.NotChunkable("the gzip ends early")
    for key, value in after.items():  # keys written after the array
        setattr(doc, key, value)
    if not events:  # the whole-file reader says why
        raise chunked.NotChunkable("no events")
    return doc, parts, strings, skipped, []


#: a plain local file at least this large is split between this process and a forked child, where
#: forking is safe (forked.fork_is_safe). Forking and sending the columns back cost ~15 ms: a real
#: 20 MB trace loaded in 0.116 s split, 0.133 s not; 40 MB in 0.20 s against 0.29 s.
SPLIT_BYTES = 16 << 20
#: the child's half takes about as long as this one's: it is given three times as long, and this more
CHILD_GRACE_S = 10.0


def _split_point(f) -> int | None:
    """The byte where a large plain file is split between two readers, or None."""
    try:
        size = os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError):  # not a local file (fsspec's remote files)
        return None
    if size < SPLIT_BYTES or not forked.fork_is_safe():
        return None
    # the child's half a little smaller: it also sends its columns back (~4% of its time)
    return chunked.boundary_after(f, int(size * 0.52))


@dataclass(frozen=True)
class _GzipSplit:
    """Where a gzip is split between two readers, and the second reader, already there."""

    stop: int  # the byte of text where the first reader stops (a boundary's comma)
    stream: reading.TraceStream  # the second reader, inflated past the boundary: the child reads on from it
    read: bytes  # the text it read past the boundary


def _gzip_split(path: str, f, max_bytes: int | None, files: ExitStack) -> _GzipSplit | None:
    """Where a large local gzip is split between two readers, or None. The second reader inflates
    up to the split here to find it (ISA-L: a few tens of ms), and the forked child reads on from
    it, not from the start again; the first half is inflated by the first reader. Its text size is
    the gzip's own record of it (ISIZE, the length mod 4 GiB of its last member: only where the split
    falls). The second reader's file stays open in `files` until the child is forked."""
    try:
        compressed = os.fstat(f.fileno()).st_size
        isize = int.from_bytes(os.pread(f.fileno(), 4, compressed - 4), "little")
    except (AttributeError, OSError, ValueError):  # not a local file
        return None
    text = isize if isize > compressed else compressed * 12  # a wrapped ISIZE: a typical ratio instead
    if text < SPLIT_BYTES or not forked.fork_is_safe():
        return None
    stream = reading.TraceStream(files.enter_context(storage.open_binary(path)), path, max_bytes)
    at = int(text * 0.52)
    if reading.skip(stream, at) < at:
        return None
    window = stream.read(1 << 20)
    found = chunked.BOUNDARY.search(window)
    return _GzipSplit(at + found.start(1), stream, window[found.start(1) + 1:]) if found else None


def _columns(pieces: Iterator[tuple], strings: dict[tuple[str, str], _Strings]) -> tuple[list, int, int, dict]:
    """Each piece's columns: (batches' columns, entries that are not objects, entries, the
    document's keys after the array where the last piece had them)."""
    parts, skipped, events, after = [], 0, 0, {}
    for decoded, not_objects, last in pieces:
        parts.append(_batch_columns(decoded, strings))
        skipped += not_objects
        events += len(decoded) + not_objects
        if last is not None:
            after = {key: getattr(last, key) for key in _Document.__struct_fields__
                     if key != "traceEvents" and getattr(last, key) is not None}
    return parts, skipped, events, after


def _columns_after(path: str, offset: int, reopen: bytes, max_bytes: int | None = None,
                   reading_on: tuple[reading.TraceStream, bytes] | None = None
                   ) -> tuple[list, dict[tuple[str, str], list], int, int, dict]:
    """The columns of the events from byte `offset` of the text (just after a boundary) to the end,
    with their own string dictionaries (as lists, in code order); the rest as _columns gives it.
    The second half of a split file: in the child, or here if it failed. A gzip is read on from
    `reading_on` (its second reader past the boundary, and the text it read beyond it: the child's
    copy), else inflated from its start; either way with every check of the stream reader (budget,
    bomb ratio, NUL runs)."""
    strings: dict[tuple[str, str], _Strings] = defaultdict(_Strings)
    with ExitStack() as files:
        if reading_on is not None:
            stream, read = reading_on
        elif (f := files.enter_context(storage.open_binary(path))).read(2) == b"\x1f\x8b":
            f.seek(0)
            stream, read = reading.TraceStream(f, path, max_bytes), b""
            reading.skip(stream, offset)
        else:
            f.seek(offset)
            stream, read = reading.TraceStream(f, path, max_bytes=1 << 62), b""  # the size was checked before the split
        parts, skipped, events, after = _columns(
            chunked.read_rest(stream, reopen, _decode_piece, _decode_last_piece, read=read), strings)
    return parts, {key: known.values() for key, known in strings.items()}, skipped, events, after


def _with_codes_of(strings: dict[tuple[str, str], _Strings], parts: list[tuple],
                   values: dict[tuple[str, str], list]) -> list[tuple]:
    """Batches coded with other dictionaries (`values`: each one's strings in code order),
    recoded with `strings`: their new strings are added in their order, as reading on would add them."""
    for (table, column), known in values.items():
        code = np.append(strings[table, column].codes(known), np.int32(-1))  # code -1 (missing) stays -1
        for part in parts:
            columns = part[0] if table == "gpu" else part[1]
            columns[column] = code[columns[column]]
    return parts


def _decode_piece(text: bytes) -> tuple[list, int, None]:
    """`[...events...]`: straight into structs; a piece that breaks the usual types goes event
    by event as the whole-file reader does. msgspec.DecodeError: not whole events (a bad cut)."""
    try:
        return msgspec.json.decode(text, type=_list_of(_BY_PHASE)), 0, None
    except msgspec.ValidationError:
        pass
    return (*_decode_events(msgspec.json.decode(text, type=list[msgspec.Raw]), typed=(_STRICT,)), None)


def _decode_last_piece(text: bytes) -> tuple[list, int, _Document | None]:
    """The last events and the keys after the array (the document reopened around them)."""
    if text[:1] == b"[":  # a bare array
        return _decode_piece(text)
    if text.count(b'"traceEvents"') > 1:  # a second traceEvents key: JSON keeps the last, read whole
        raise chunked.NotChunkable("traceEvents twice")
    try:
        last = msgspec.json.decode(text, type=_LastPiece)
        return last.traceEvents, 0, last
    except msgspec.ValidationError:
        pass
    doc = msgspec.json.decode(text, type=_Document)
    return (*_decode_events(doc.traceEvents, typed=(_STRICT,)), doc)


def _read_whole(path: str, max_bytes: int | None = None) -> _Read:
    """The file's bytes at once, with every repair: invalid UTF-8, NaN, a file cut short."""
    raw, warnings = reading.read_text(path, max_bytes)
    if not raw or raw.isspace():
        raise TraceError(path, "the file is empty", "Check that the profiler finished writing it.")
    doc, more = decode(raw, path)
    warnings += more
    if not doc.traceEvents and b'"traceEvents"' not in raw and _first_byte(raw) != b"[":
        raise TraceError(path, "JSON without a traceEvents list", "This does not look like a PyTorch Profiler trace.")
    if not doc.traceEvents:
        raise TraceError(path, "the trace holds no events",
                         "Check that the profiler ran past its warm-up (a schedule that never reaches an active step "
                         "writes an empty trace).")
    raw_events = doc.traceEvents
    del raw
    doc.traceEvents = []
    strings: dict[tuple[str, str], _Strings] = defaultdict(_Strings)
    parts, skipped = [], 0
    for i in range(0, len(raw_events), BATCH):
        events, not_objects = _decode_events(raw_events[i:i + BATCH])
        parts.append(_batch_columns(events, strings))
        skipped += not_objects
    return doc, parts, strings, skipped, warnings


_RANK_LABEL = re.compile(r"\brank\s*[:#=]?\s*(\d+)", re.IGNORECASE)


def _ranks(arg: np.ndarray, pid: np.ndarray | None, labelled: dict[int, int]) -> np.ndarray:
    """Each event's rank in a merged file: its `rank` arg, else its process's label; -1 if neither."""
    if pid is None or not labelled:
        return arg
    by_label = pd.Series(pid).map(labelled).fillna(-1).to_numpy(np.int64)
    return np.where(arg >= 0, arg, by_label)


def _process_ranks(events: list, phases: np.ndarray) -> dict[int, int]:
    """pid → rank from process_name metadata that names a rank ("rank 3", "Rank: 3")."""
    meta = _select(events, np.flatnonzero(phases == _PHASE_CODE["M"]))
    named = [e for e in meta if e.name == "process_name" and isinstance(e.args.label, str)]
    pids = _ids(named, "pid") if named else np.zeros(0, np.int64)
    return {int(pid): int(m.group(1)) for pid, e in zip(pids, named) if (m := _RANK_LABEL.search(e.args.label))}


#: |ts| and dur must stay below this (µs) so that ns fit in int64 with room to add them.
_MAX_US = MAX_TIME_NS / 1000.0  # the model's bound, in the µs Kineto writes


def _batch_columns(events: list, strings: dict[tuple[str, str], _Strings]) -> tuple[dict, dict, bool, dict, int, dict]:
    """Columns of one batch of events: (device activity, host events, whether it has flows,
    pid → rank from process labels, events dropped for impossible values, memory events). Each
    field is read once for the device and host events together, then split; device-only and
    host-only fields are read for those events alone. String columns are codes into `strings`."""
    phases = np.fromiter(map(_PHASE_CODE.get, _texts(events, "ph"), repeat(0)), np.int8, count=len(events))
    complete = _select(events, np.flatnonzero(phases == _PHASE_CODE["X"]))
    kind = np.fromiter(map(_KindCode().__getitem__, _texts(complete, "cat")), np.int8, count=len(complete))
    has_flows = bool((phases == _PHASE_CODE["s"]).any())  # flow events: `s` starts each flow

    index = np.flatnonzero(kind)
    items = _select(complete, index)
    kind = kind[index]
    args = _ArgsOf.of(items)
    on_gpu = kind <= _LAST_GPU_KIND
    at_gpu = np.flatnonzero(on_gpu)
    gpu_args = args.select(at_gpu)
    ts, dur = _numeric(items, "ts", float("nan")), _numeric(items, "dur", 0.0)
    nbytes = gpu_args.numeric("bytes")
    # times (and a copy's byte count) that can be real; the rest are dropped and counted
    ok = np.isfinite(ts) & np.isfinite(dur) & (np.abs(ts) < _MAX_US) & (dur >= 0) & (dur < _MAX_US)
    ok[at_gpu] &= (nbytes >= 0) & (nbytes < MAX_COPY_BYTES)
    start = _ns(ts[ok])
    external = args.numeric("external_id")
    older = np.flatnonzero(external < 0)  # Kineto's 2021 schema's key, read only where the current one is absent
    if len(older):
        external = external.copy() if not external.flags.writeable else external  # the loose path's may be a view
        external[older] = args.select(older).numeric("external_id_2021")
    pid, tid = _ids(items, "pid")[ok], _ids(items, "tid")[ok]
    common = {"start": start, "end": start + np.rint(np.maximum(dur[ok], 0.0) * 1000.0).astype(np.int64),
              "correlation": args.numeric("correlation")[ok], "external_id": external[ok],
              "rank_arg": args.numeric("rank")[ok], "pid_raw": pid}
    names = _texts(items, "name")
    g, c = on_gpu[ok], ~on_gpu[ok]
    gpu_ok = ok[at_gpu]

    gpu = {key: values[g] for key, values in common.items()}
    gpu["name"] = strings["gpu", "name"].codes(_select(names, at_gpu[gpu_ok]))
    kind = kind[ok]
    gpu["kind"] = kind[g]
    device = gpu_args.numeric("device")[gpu_ok]
    gpu["device"] = np.where(device >= 0, device, pid[g])
    stream = gpu_args.numeric("stream")[gpu_ok]
    gpu["stream"] = np.where(stream >= 0, stream, tid[g])
    gpu["bytes"] = nbytes[gpu_ok]
    gpu["blocks_per_sm"] = gpu_args.numeric("blocks_per_sm")[gpu_ok].astype(np.float32)
    gpu["occupancy"] = gpu_args.numeric("occupancy")[gpu_ok].astype(np.float32)
    gpu["collective"] = strings["gpu", "collective"].codes(_collectives(gpu_args.select(np.flatnonzero(gpu_ok))))

    cpu = {key: values[c] for key, values in common.items()}
    cpu_at = np.flatnonzero(~on_gpu & ok)
    cpu["name"] = strings["cpu", "name"].codes(_select(names, cpu_at))
    cpu["kind"] = kind[c]
    cpu["pid"], cpu["tid"] = pid[c], tid[c]
    cpu_args = args.select(cpu_at)
    cpu["stack"] = strings["cpu", "stack"].codes(cpu_args.texts("call_stack"))
    cpu["kernel"] = strings["cpu", "kernel"].codes(cpu_args.texts("launched"))
    shaped = np.flatnonzero(strings["cpu", "name"].matching(cpu["name"], SHAPED_OPS))
    cpu["shapes"] = np.full(len(cpu_at), -1, dtype=np.int32)
    cpu["shapes"][shaped] = strings["cpu", "shapes"].codes(_shapes(args.select(cpu_at[shaped])))
    memory, memory_dropped = _memory(events, phases)
    return gpu, cpu, has_flows, _process_ranks(events, phases), int((~ok).sum()) + memory_dropped, memory


@dataclass(frozen=True)
class _ArgsOf:
    """The args of a batch's events, or only their count where none of them has any (a GPU-only
    trace's kernels: each holds its type's one default, _no_args): then every field is its
    default, and no pass over the events reads it."""

    items: list | None  # None: every event without args
    count: int

    @classmethod
    def of(cls, events: list) -> _ArgsOf:
        args = list(map(attrgetter("args"), events))
        bare = bool(args) and args.count(type(events[0])().args) == len(args)  # equal to it: all defaults too
        return cls(None if bare else args, len(args))

    def select(self, index: np.ndarray) -> _ArgsOf:
        return _ArgsOf(None if self.items is None else _select(self.items, index), len(index))

    def numeric(self, field: str) -> np.ndarray:
        """A numeric field of each event (its default where absent)."""
        default = _ARG_DEFAULTS[field]
        if self.items is None:
            return np.full(self.count, default, dtype=np.float64 if isinstance(default, float) else np.int64)
        return _numeric(self.items, field, default)

    def texts(self, field: str) -> list:
        """A text field of each event (None where absent)."""
        return [None] * self.count if self.items is None else _texts(self.items, field, missing=None)


_ARG_DEFAULTS: dict[str, Any] = {f: d for f, _, d, _ in _ARG_FIELDS}


def _memory(events: list, phases: np.ndarray) -> tuple[dict, int]:
    """The allocator's [memory] instant events: device (-1 for host), time, bytes (+ allocated,
    − freed), and the totals after each when the trace has them; and how many were dropped."""
    index = np.flatnonzero(phases == _PHASE_CODE["i"])
    items = [e for e in _select(events, index) if e.name == "[memory]"]
    ts = _numeric(items, "ts", float("nan"))
    sizes = [_numeric(items, f"args.{f}", -1.0) for f in ("mem_bytes", "total_allocated", "total_reserved")]
    ok = np.isfinite(ts) & (np.abs(ts) < _MAX_US)
    for values in sizes:  # byte counts past the model's bound are damage, not data
        ok &= np.isfinite(values) & (np.abs(values) < MAX_COPY_BYTES)
    items = [e for e, keep in zip(items, ok) if keep]
    gpu = _numeric(items, "args.device_type", -1) == 1  # c10::DeviceType: 0 CPU, 1 CUDA (ROCm reports CUDA too)
    nbytes, allocated, reserved = (v[ok].astype(np.int64) for v in sizes)
    return {"device": np.where(gpu, _numeric(items, "args.device_id", -1), -1), "time": _ns(ts[ok]),
            "bytes": np.where(nbytes == -1, 0, nbytes), "allocated": allocated, "reserved": reserved,
            "rank_arg": _numeric(items, "args.rank", -1),
            "pid_raw": _ids(items, "pid") if items else np.zeros(0, np.int64)}, int((~ok).sum())


def _shapes(args: _ArgsOf) -> list[str | None]:
    """[dims, types, concrete inputs] as JSON text, or None where the op has no dims. Called for
    the ops the FLOPs detector reads only: other events' shapes are never decoded."""
    if args.items is None:
        return [None] * args.count
    out: list[str | None] = []
    for arg in args.items:
        dims, types, concrete = arg.input_dims, arg.input_types, arg.concrete
        if type(dims) is msgspec.Raw and type(types) is msgspec.Raw and type(concrete) in (msgspec.Raw, type(None)):
            # the typed decoder's raw bytes: an op repeats its shapes every step, so each distinct
            # text is formatted once (the per-event work is three byte copies and a lookup)
            out.append(_shape_text(bytes(dims), bytes(types), bytes(concrete) if concrete is not None else b"null"))
            continue
        parts = [_raw_text(getattr(arg, f)) for f in ("input_dims", "input_types", "concrete")]
        out.append(f"[{parts[0]},{parts[1]},{parts[2]}]" if parts[0] != "null" else None)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _shape_text(dims: bytes, types: bytes, concrete: bytes) -> str | None:
    parts = [_raw_text(msgspec.Raw(p)) if p != b"null" else "null" for p in (dims, types, concrete)]
    return f"[{parts[0]},{parts[1]},{parts[2]}]" if parts[0] != "null" else None


def _collectives(batch: _ArgsOf) -> list[str | None]:
    """Each collective kernel's payload as one JSON object text ({"name", "in_nelems", ...}, the
    values as the trace wrote them); None for every other event, whose payload is never decoded."""
    out: list[str | None] = [None] * batch.count
    if batch.items is None:
        return out
    args = batch.items
    names = list(map(attrgetter("coll_name"), args))
    if names.count(None) == len(names):
        return out
    for i in np.flatnonzero(np.fromiter(map(is_not, names, repeat(None)), bool, count=len(names))):  # collectives only
        out[i] = "{" + ",".join(f'"{key}":{_raw_text(getattr(args[i], field))}'
                                for key, field in zip(_COLLECTIVE_KEYS, _COLLECTIVE_ARGS)) + "}"
    return out


def _raw_text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, msgspec.Raw):  # one line, spaced as json.dumps spaces: the same text either way
        return msgspec.json.format(bytes(value), indent=0).decode("utf-8", "replace") or "null"
    return json.dumps(value, default=str)  # the loose decoder hands over lists


def _joined(parts: list[tuple]) -> tuple:
    """The batches' columns as one batch (as _batch_columns gives one)."""
    return (_concat([p[0] for p in parts]), _concat([p[1] for p in parts]), any(p[2] for p in parts),
            {pid: rank for p in parts for pid, rank in p[3].items()}, sum(p[4] for p in parts),
            _concat([p[5] for p in parts]))


def _concat(parts: list[dict]) -> dict:
    """One column set from the batches'. Each batch's column is let go once joined, so memory
    holds the batches and one column more."""
    if not parts:
        return {"name": [], "kind": []}
    joined, counter = {}, heap.FreedCounter()
    for key in list(parts[0]):
        pieces = [p.pop(key) for p in parts]
        joined[key] = np.concatenate(pieces)
        del pieces
        counter.freed(joined[key].nbytes)  # as much as the pieces just let go
    return joined


_MAX_PROPERTIES_CHARS = 1 << 16


#: GPUs known by their properties, for a trace that lists them without a name (some ROCm traces write ""): (warp
#: size, compute capability or gfx major and minor, SMs or CUs) → the name, and the memory (GiB) above which it is
#: the larger sibling
_BY_PROPERTIES: dict[tuple[int, int, int, int], tuple[str, float, str]] = {
    (64, 9, 4, 304): ("AMD Instinct MI300X", 200, "AMD Instinct MI325X"),  # gfx942: 192 GiB, or 256 GB
    (64, 9, 0, 110): ("AMD Instinct MI250X", 0, ""),  # gfx90a, one of its two dies
    (32, 9, 0, 132): ("NVIDIA H100 SXM", 100, "NVIDIA H200"),  # 80 GB, or 141 GB
    (32, 9, 0, 114): ("NVIDIA H100 PCIe", 0, ""),
    (32, 8, 0, 108): ("NVIDIA A100 40GB", 45, "NVIDIA A100 80GB"),
    (32, 10, 0, 148): ("NVIDIA B200", 0, ""),
    (32, 7, 0, 80): ("Tesla V100", 0, ""),
}


def named_by_properties(p: dict[str, Any]) -> str | None:
    """A GPU's name from its properties where the trace gives none, said as inferred; an AMD GPU (a 64-wide
    wavefront) the table does not know is named AMD (its kernels are profiled with AMD's tools); else None."""
    try:
        key = (int(p["warpSize"]), int(p["computeMajor"]), int(p["computeMinor"]), int(p["numSms"]))
        gib = int(p.get("totalGlobalMem") or 0) / 2**30
    except (KeyError, TypeError, ValueError):
        return None
    if key in _BY_PROPERTIES:
        name, above_gib, larger = _BY_PROPERTIES[key]
        return f"{larger if above_gib and gib > above_gib else name} (by its properties)"
    return "AMD GPU" if key[0] == 64 else None


def _meta(doc, path: str, warnings: list[str], has_flows: bool) -> TraceMeta:
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    if doc.distributedInfo is not None and not dist:
        warnings.append("distributedInfo is not an object; ignored (rank from the file name, else 0)")
    listed = doc.deviceProperties if isinstance(doc.deviceProperties, list) else []
    if doc.deviceProperties is not None and not isinstance(doc.deviceProperties, list):
        warnings.append("deviceProperties is not a list; ignored (GPUs are named by their id)")
    # each device's properties are a few hundred bytes: a larger entry is damage (or hostile), kept out of the cache
    props = [p for p in listed if isinstance(p, dict) and len(json.dumps(p, default=str)) <= _MAX_PROPERTIES_CHARS]
    # no name: by its properties, else "" (named by the id it ran work on: normalize.device_names)
    devices = {int(p["id"]): str(p.get("name") or named_by_properties(p) or "") for p in props
               if isinstance(p.get("id"), int) and not isinstance(p.get("id"), bool)}
    rank = dist.get("rank")
    world = dist.get("world_size")
    return TraceMeta(
        format="kineto",
        path=str(path),
        rank=int(rank) if isinstance(rank, int) else None,
        world_size=int(world) if isinstance(world, int) else None,
        devices=devices,
        device_properties=props,
        profiler=f"PyTorch Profiler (Kineto schema {doc.schemaVersion})" if doc.schemaVersion is not None
        else "PyTorch Profiler (Kineto)",
        has_flows=has_flows,
        warnings=warnings,
    )
