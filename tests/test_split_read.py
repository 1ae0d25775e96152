"""A large plain trace is read by two processes at once: the second half in a forked child
(trace/forked.py, kineto._read_in_pieces). The reference is the whole-file reader: the split read
must equal it, and every way the child can fail (it dies, it hangs, its half is malformed, the
split falls inside a string) must end in the same trace, read here instead.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time

import numpy as np
import pytest
from conftest import B200, NCCL_A100, RESNET_NW0
from hypothesis import given, settings
from hypothesis import strategies as st
from test_chunked import _DAMAGE, _SMALL, ALEXNET, assert_same

from traceagent.trace import chunked, forked, kineto

PARENT = os.getpid()


@pytest.fixture
def split(monkeypatch, tmp_path):
    """Every plain file split, in small chunks; returns the file where each _columns_after call
    writes the pid it ran in (the child's, or this process's after a fallback)."""
    monkeypatch.setattr(kineto, "SPLIT_BYTES", 0)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(forked, "fork_is_safe", lambda: True)  # pytest's workers run threads of their own
    ran_in = tmp_path / "ran_in"
    original = kineto._columns_after

    def recorded(*args):
        with open(ran_in, "a") as f:  # the pid, and whether it read on from a gzip's second reader
            f.write(f"{os.getpid()} {len(args) > 4 and args[4] is not None}\n")
        return original(*args)

    monkeypatch.setattr(kineto, "_columns_after", recorded)
    return ran_in


def plain(tmp_path, source, name="trace.json") -> str:
    path = tmp_path / name
    path.write_bytes(gzip.decompress(source.read_bytes()))
    return str(path)


def whole(path: str):
    return kineto._trace(path, *kineto._read_whole(path))


def pids(ran_in) -> list[int]:
    return [int(line.split()[0]) for line in ran_in.read_text().splitlines()]


def read_on(ran_in) -> list[bool]:
    """For each second half read: whether it read on from the gzip's second reader (not from the start)."""
    return [line.split()[1] == "True" for line in ran_in.read_text().splitlines()]


@pytest.mark.parametrize("source", [RESNET_NW0, B200, NCCL_A100, ALEXNET], ids=lambda p: p.name[:24])
def test_a_split_read_equals_the_whole_file(source, split, tmp_path):
    path = plain(tmp_path, source)
    read = kineto._read_in_pieces(path)  # raises NotChunkable rather than fall back
    assert pids(split) != [PARENT] and len(pids(split)) == 1  # the second half was read in a child
    assert_same(kineto._trace(path, *read), whole(path))


def misbehave_in_the_child(monkeypatch, action) -> None:
    """_columns_after calls `action` first where it runs in the child (not after a fallback here)."""
    original = kineto._columns_after

    def patched(*args):
        if os.getpid() != PARENT:
            action()
        return original(*args)

    monkeypatch.setattr(kineto, "_columns_after", patched)


def test_a_child_that_dies_is_replaced_by_reading_here(split, tmp_path, monkeypatch):
    path = plain(tmp_path, ALEXNET)  # small: what matters is the child, not the size
    misbehave_in_the_child(monkeypatch, lambda: os._exit(3))
    assert_same(kineto._trace(path, *kineto._read_in_pieces(path)), whole(path))
    assert pids(split) == [PARENT]


def test_a_child_that_hangs_is_stopped_and_replaced(split, tmp_path, monkeypatch):
    path = plain(tmp_path, ALEXNET)  # small: what matters is the child, not the size
    misbehave_in_the_child(monkeypatch, lambda: time.sleep(60))
    monkeypatch.setattr(kineto, "CHILD_GRACE_S", 0.5)
    started = time.monotonic()
    assert_same(kineto._trace(path, *kineto._read_in_pieces(path)), whole(path))
    assert time.monotonic() - started < 30 and pids(split) == [PARENT]


def test_a_split_inside_a_string_reads_as_the_whole_file(split, tmp_path, monkeypatch):
    # the split's candidate comma sits inside a name: this process's last piece does not decode,
    # and the file is read whole instead
    doc = json.loads(gzip.decompress(ALEXNET.read_bytes()))
    middle = doc["traceEvents"][len(doc["traceEvents"]) // 2]
    middle["name"] = 'looks like a boundary: {"a": 1}, {"b": 2}'
    path = tmp_path / "trap.json"
    text = json.dumps(doc).encode()
    path.write_bytes(text)
    monkeypatch.setattr(chunked, "boundary_after", lambda f, offset: text.index(b'1}, {\\"b\\"') + 2)
    with pytest.raises(chunked.NotChunkable):
        kineto._read_in_pieces(str(path))
    assert_same(kineto.load_kineto(str(path)), whole(str(path)))


def test_a_malformed_second_half_reads_as_the_whole_file(split, tmp_path):
    # the child's error comes back here, and the whole-file reader gives its message
    from traceagent.errors import TraceError

    text = gzip.decompress(ALEXNET.read_bytes())
    at = text.index(b'"ts"', len(text) * 3 // 4)
    path = tmp_path / "broken.json"
    path.write_bytes(text[:at] + b"@" + text[at + 1:])
    with pytest.raises(TraceError, match="malformed JSON at byte"):
        kineto.load_kineto(str(path))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(edits=st.lists(st.tuples(st.integers(0, len(_SMALL) - 1), _DAMAGE), min_size=1, max_size=4))
def test_damaged_bytes_split_read_as_the_whole_file_reads_them(edits, tmp_path_factory):
    # either half may hold the damage: the result, or the error, is the whole-file reader's
    from traceagent.errors import TraceError

    text = bytearray(_SMALL)
    for at, replacement in edits:
        text[at:at + 1] = replacement
    path = str(tmp_path_factory.mktemp("damaged") / "t.json")
    with open(path, "wb") as f:
        f.write(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kineto, "SPLIT_BYTES", 0)
        patch.setattr(chunked, "CHUNK_BYTES", 4 << 10)
        patch.setattr(forked, "fork_is_safe", lambda: True)
        try:
            expected = whole(path)
        except TraceError as exc:
            with pytest.raises(TraceError) as raised:
                kineto.load_kineto(path)
            assert str(raised.value) == str(exc)
            return
        assert_same(kineto.load_kineto(path), expected)


def test_forked_sends_arrays_back_and_raises_what_the_child_raised():
    values = np.arange(100_000, dtype=np.int64)
    got = forked.Forked(lambda: {"values": values * 2, "text": ["a", "b"]}).result(timeout=30)
    np.testing.assert_array_equal(got["values"], values * 2)
    assert got["text"] == ["a", "b"]
    with pytest.raises(KeyError, match="missing"):
        forked.Forked(lambda: {}["missing"]).result(timeout=30)


def test_forked_gives_up_on_a_silent_child():
    child = forked.Forked(time.sleep, 60)
    started = time.monotonic()
    with pytest.raises(forked.ChildFailed, match="no answer"):
        child.result(timeout=0.3)
    assert time.monotonic() - started < 10 and not child._child.is_alive()


def test_no_fork_while_another_thread_runs():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not forked.fork_is_safe()
    finally:
        stop.set()
        other.join()


def _fork_allowed_here() -> bool:
    return forked.fork_is_safe()


def test_no_fork_in_a_daemonic_process():
    # a multiprocessing.Pool's workers are daemons, which multiprocessing forbids to have children
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_fork_allowed_here) is False


def test_a_fresh_process_may_fork_where_it_has_a_second_core():
    # importing traceagent starts no thread: else no file would ever be split
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import traceagent, traceagent.api\n"
                          "from traceagent.trace import forked\nprint(forked.fork_is_safe())"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(sys.platform == "linux" and len(os.sched_getaffinity(0)) > 1)


def test_a_fork_that_fails_is_replaced_by_reading_here(split, tmp_path, monkeypatch):
    import multiprocessing.process

    def no_more_processes(self):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", no_more_processes)
    path = plain(tmp_path, ALEXNET)  # small: what matters is the child, not the size
    assert_same(kineto._trace(path, *kineto._read_in_pieces(path)), whole(path))
    assert pids(split) == [PARENT]


@pytest.mark.parametrize("source", [RESNET_NW0, B200, NCCL_A100], ids=lambda p: p.name[:24])
def test_a_gzip_is_split_between_two_readers_each_inflating_its_half_and_equals_the_whole_file(source, split,
                                                                                                tmp_path):
    # the shared traces are gzips themselves: the parent inflates a second reader up to the boundary it
    # finds from the gzip's own text size (ISIZE), and the child reads on from its copy of that reader
    read = kineto._read_in_pieces(str(source))
    assert pids(split) != [PARENT] and len(pids(split)) == 1 and read_on(split) == [True]
    assert_same(kineto._trace(str(source), *read), whole(plain(tmp_path, source)))


def test_a_gzip_whose_child_dies_is_read_here_from_the_start(split, tmp_path, monkeypatch):
    misbehave_in_the_child(monkeypatch, lambda: os._exit(3))
    read = kineto._read_in_pieces(str(NCCL_A100))
    assert pids(split) == [PARENT] and read_on(split) == [False]  # its copy of the second reader died with it
    assert_same(kineto._trace(str(NCCL_A100), *read), whole(plain(tmp_path, NCCL_A100)))


def test_a_bomb_is_refused_in_the_gzips_second_half_too(split, tmp_path):
    from test_bounded_reads import GiB, gzip_bomb

    from traceagent.errors import TraceError

    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb, 2 * GiB, b" ", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}, ')
    with pytest.raises((TraceError, chunked.NotChunkable)):
        kineto._read_in_pieces(str(bomb))
