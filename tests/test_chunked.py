"""Kineto traces read in pieces (trace/chunked.py) give exactly what reading the whole file gives.

The reference is the whole-file reader, which decodes the document at once; the pieces reader
must agree on every frame, warning and device, whatever the chunk size and however the text is
laid out, including strings that look like the boundaries it cuts at.
"""

from __future__ import annotations

import gzip
import io
import json
import os

import msgspec
import pandas as pd
import pytest
from conftest import B200, CPU_ONLY, NCCL_A100, RESNET_NW0
from hypothesis import given, settings
from hypothesis import strategies as st

from traceagent.trace import chunked, kineto

ALEXNET = RESNET_NW0.parent.parent / "hta" / "alexnet_critical_path.json.gz"


def whole_and_pieces(path, monkeypatch, chunk: int):
    """The trace from each reader, the pieces one with a small chunk so that it cuts often."""
    monkeypatch.setattr(chunked, "CHUNK_BYTES", chunk)
    whole = kineto._trace(str(path), *kineto._read_whole(str(path)))
    pieces = kineto._read_in_pieces(str(path))  # raises NotChunkable rather than fall back
    assert len(pieces[1]) > 1  # it did cut
    return whole, kineto._trace(str(path), *pieces)


def assert_same(a, b) -> None:
    for name in ("gpu", "cpu", "memory", "steps"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert (a.meta.devices, a.meta.rank, a.meta.world_size, a.meta.profiler, a.meta.has_flows, a.meta.warnings) == (
        b.meta.devices, b.meta.rank, b.meta.world_size, b.meta.profiler, b.meta.has_flows, b.meta.warnings)


@pytest.mark.parametrize("path", [RESNET_NW0, B200, NCCL_A100, CPU_ONLY], ids=lambda p: p.name[:24])
def test_real_traces_read_in_pieces_equal_the_whole_file(path, monkeypatch):
    assert_same(*whole_and_pieces(path, monkeypatch, chunk=64 << 10))


def _events_document(tmp_path, doc, name: str, **dump) -> str:
    path = tmp_path / name
    text = json.dumps(doc, **dump).encode()
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return str(path)


@pytest.mark.parametrize("layout", ["indented", "compact", "keys-after", "bare-array", "gzip"])
def test_layouts_and_names_that_look_like_cuts(layout, tmp_path, monkeypatch):
    # names holding `},{` and the array's key: a cut there leaves a string open, which does not
    # decode, so the cut moves back to a real boundary between events
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    for event in doc["traceEvents"][::5]:
        if isinstance(event.get("name"), str):
            event["name"] += ' },{"traceEvents": [ \\ },\n{'
    events = doc.pop("traceEvents")
    shaped = {"indented": ({**doc, "traceEvents": events}, {"indent": 2}),
              "compact": ({**doc, "traceEvents": events}, {"separators": (",", ":")}),
              "keys-after": ({"traceEvents": events, **doc}, {}),
              "bare-array": (events, {}),
              "gzip": ({**doc, "traceEvents": events}, {})}
    value, dump = shaped[layout]
    path = _events_document(tmp_path, value, "t.json.gz" if layout == "gzip" else "t.json", **dump)
    assert_same(*whole_and_pieces(path, monkeypatch, chunk=4 << 10))


def test_unusual_files_are_read_whole(tmp_path, monkeypatch):
    # what the pieces reader does not handle goes to the whole-file reader, with its repairs
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    text = json.dumps(doc).replace('"dur": 1,', '"dur": NaN,', 1)
    path = tmp_path / "nan.json"
    path.write_text(text)
    with pytest.raises(chunked.NotChunkable):
        kineto._read_in_pieces(str(path))
    trace = kineto.load_kineto(str(path))
    assert any("NaN" in w for w in trace.meta.warnings)


def test_a_file_cut_at_a_nested_key_is_read_whole(tmp_path):
    # "traceEvents" inside another object first: the document around it does not decode
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    path = _events_document(tmp_path, {"meta": {"traceEvents": []}, **doc}, "nested.json")
    with pytest.raises(chunked.NotChunkable):
        kineto._read_in_pieces(path)
    assert len(kineto.load_kineto(path).gpu) == len(kineto._trace(path, *kineto._read_whole(path)).gpu)


# any JSON text as names, arg values and nesting; chunks from a few bytes up
_TEXT = st.text(alphabet=st.sampled_from(list('ab{}[],:" \\\n\t\u00e9')), max_size=12)
_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "M", "f", "B"]), "cat": st.sampled_from(["kernel", "cpu_op", "ac2g"]),
     "name": _TEXT, "ts": st.integers(0, 10**6), "dur": st.integers(0, 1000), "pid": st.integers(0, 3),
     "tid": st.integers(0, 3)},
    optional={"args": st.dictionaries(_TEXT, st.recursive(_TEXT | st.integers(), lambda c: st.lists(c, max_size=3)
                                                          | st.dictionaries(_TEXT, c, max_size=3), max_leaves=6),
                                      max_size=3)})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(events=st.lists(_EVENT, min_size=1, max_size=40), chunk=st.integers(1, 300), indent=st.sampled_from([None, 1]),
       after=st.booleans())
def test_pieces_hold_exactly_the_elements(events, chunk, indent, after):
    doc = {"traceEvents": events, "schemaVersion": 1} if after else {"schemaVersion": 1, "traceEvents": events}
    text = json.dumps(doc, indent=indent).encode()
    decode = lambda t: msgspec.json.decode(t)  # noqa: E731
    head, _, pieces = chunked.read_array(io.BytesIO(text), "traceEvents", decode, decode, chunk_bytes=chunk)
    got = []
    *middle, last = list(pieces)
    for piece in middle:
        got += piece
    got += last["traceEvents"]
    assert got == events
    assert {**(json.loads(head) if head else {}), **{k: v for k, v in last.items() if k != "traceEvents"}} == {
        "schemaVersion": 1, "traceEvents": []}


def test_oddly_typed_events_read_in_pieces_equal_the_whole_file(tmp_path, monkeypatch):
    # names that are lists or numbers, pids that are strings: such pieces are decoded loosely,
    # each whole, and give what the whole-file reader gives
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    for i, event in enumerate(doc["traceEvents"][::40]):
        event["name"] = [i, "x"] if i % 2 else 7.5
        event["pid"] = f"process {i}"
    path = _events_document(tmp_path, doc, "odd.json")
    whole, pieces = whole_and_pieces(path, monkeypatch, chunk=16 << 10)
    assert_same(whole, pieces)
    assert '[1, "x"]' in set(pieces.cpu["name"].astype(str)) | set(pieces.gpu["name"].astype(str))


def test_a_second_traceevents_key_reads_as_the_whole_file_does(tmp_path, monkeypatch):
    # JSON keeps a repeated key's last value; the pieces reader must not join the two arrays
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    events = doc.pop("traceEvents")
    text = json.dumps({**doc, "traceEvents": events})[:-1] + ', "traceEvents": ' + json.dumps(events[:50]) + "}"
    path = tmp_path / "twice.json"
    path.write_text(text)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 16 << 10)
    with pytest.raises(chunked.NotChunkable):
        kineto._read_in_pieces(str(path))
    assert_same(kineto.load_kineto(str(path)), kineto._trace(str(path), *kineto._read_whole(str(path))))


_ALEXNET_DOC = json.loads(gzip.decompress(ALEXNET.read_bytes()))
_SMALL = json.dumps({**_ALEXNET_DOC, "traceEvents": _ALEXNET_DOC["traceEvents"][:250]}, indent=1).encode()


_DAMAGE = st.sampled_from([b"", b"}", b",", b"]", b'"', b"{", b"\\", b"x", b" ", b"0"])


@settings(max_examples=int(os.environ.get("TRACEAGENT_FUZZ_EXAMPLES", "40")), deadline=None, derandomize=True)
@given(edits=st.lists(st.tuples(st.integers(0, len(_SMALL) - 1), _DAMAGE), min_size=1, max_size=4))
def test_damaged_bytes_read_in_pieces_as_the_whole_file_reads_them(edits, tmp_path_factory):
    # whatever the damage, the pieces reader either gives exactly what the whole-file reader
    # gives, or hands the file to it
    from traceagent.errors import TraceError

    text = bytearray(_SMALL)
    for at, replacement in edits:
        text[at:at + 1] = replacement
    path = tmp_path_factory.mktemp("damaged") / "t.json"
    path.write_bytes(bytes(text))
    chunked_chunk, chunked.CHUNK_BYTES = chunked.CHUNK_BYTES, 4 << 10
    try:
        try:
            whole = kineto._trace(str(path), *kineto._read_whole(str(path)))
        except TraceError as exc:
            with pytest.raises(TraceError) as raised:
                kineto.load_kineto(str(path))
            assert str(raised.value) == str(exc)
            return
        assert_same(kineto.load_kineto(str(path)), whole)
    finally:
        chunked.CHUNK_BYTES = chunked_chunk
