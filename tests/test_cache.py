"""The cache is never wrong: damaged entries, rewritten files that keep their size and time, files
replaced while they are read, and concurrent runs all end in the same analysis as a fresh parse;
and it keeps to its size cap."""

from __future__ import annotations

import json
import os

import pytest
from builder import TraceBuilder
from conftest import RESNET_NW0

import traceagent


def _same(a, b) -> bool:
    return (a.gpu.equals(b.gpu) and a.cpu.equals(b.cpu) and a.steps.equals(b.steps) and a.memory.equals(b.memory)
            and a.meta == b.meta)


def test_a_trace_without_host_events_reads_back_from_the_cache(tmp_path, isolated_cache):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100)
    b.kernel("gemm", 200, 100)  # no launch calls, no ops: empty host columns, empty categoricals
    path = b.write(tmp_path / "device_only.json")
    first = traceagent.load(path).traces[0]
    second = traceagent.load(path).traces[0]  # from the cache
    assert _same(first, second) and traceagent.analyze(path).ranks[0].findings.idle.idle_us == 100.0


@pytest.mark.parametrize("damage", ["meta_list", "meta_extra_key", "devices_list", "frames_swapped",
                                    "frame_garbage", "meta_missing"])
def test_a_damaged_cache_entry_is_parsed_again(tmp_path, isolated_cache, damage):
    # a small trace with every frame filled (host events, steps, shapes, memory): the damage is what matters
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 500)
    b.op("aten::mm", 10, 100)["args"] |= {"Input Dims": [[8, 8], [8, 8]], "Input type": ["float", "float"]}
    b.kernel("gemm", 50, 100, launch_at=20)
    b.memory(30, 4096, allocated=4096, reserved=8192)
    path = b.write(tmp_path / "t.json")
    fresh = traceagent.load(path, use_cache=False).traces[0]
    traceagent.load(path)
    (entry,) = [p for p in isolated_cache.iterdir() if p.is_dir()]
    meta = json.loads((entry / "meta.json").read_text())
    if damage == "meta_list":
        (entry / "meta.json").write_text("[]")
    elif damage == "meta_extra_key":
        (entry / "meta.json").write_text(json.dumps(meta | {"surprise": 1}))
    elif damage == "devices_list":
        (entry / "meta.json").write_text(json.dumps(meta | {"devices": ["GPU"]}))
    elif damage == "frames_swapped":
        gpu, cpu = (entry / "gpu.frame").read_bytes(), (entry / "cpu.frame").read_bytes()
        (entry / "gpu.frame").write_bytes(cpu)
        (entry / "cpu.frame").write_bytes(gpu)
    elif damage == "frame_garbage":
        (entry / "steps.frame").write_bytes(b"not a frame file at all")
    else:
        (entry / "meta.json").unlink()
    assert _same(traceagent.load(path).traces[0], fresh)
    assert _same(traceagent.load(path).traces[0], fresh)  # rewritten, and read back right


def test_same_size_and_time_but_other_content_is_parsed_again(tmp_path, isolated_cache):
    b = TraceBuilder()
    b.kernel("gemm_a", 0, 100)
    path = b.write(tmp_path / "t.json")
    assert set(traceagent.load(path).traces[0].gpu["name"]) == {"gemm_a"}
    stat = path.stat()
    path.write_bytes(path.read_bytes().replace(b"gemm_a", b"gemm_b"))  # cp -p / touch -r keep these
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert set(traceagent.load(path).traces[0].gpu["name"]) == {"gemm_b"}


def test_concurrent_runs_into_one_cache_agree(tmp_path, isolated_cache):
    import subprocess
    import sys

    env = {**os.environ, "TRACEAGENT_CACHE_DIR": str(isolated_cache)}
    command = [sys.executable, "-m", "traceagent", "analyze", str(RESNET_NW0), "--json"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    outputs = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert all(run.returncode == 0 for run in runs)
    expected = json.loads(json.dumps(traceagent.analyze(RESNET_NW0, use_cache=False).to_dict()))
    assert all(out == expected for out in outputs)
    again = subprocess.run(command, capture_output=True, env=env, timeout=120)  # now from the cache
    assert json.loads(again.stdout) == expected




def _kernel_trace(path, name: str):
    b = TraceBuilder()
    b.kernel(name, 0, 100)
    return b.write(path)


def _names(path, **options) -> set[str]:
    return set(traceagent.load(path, **options).traces[0].gpu["name"])


def test_a_file_replaced_while_it_is_parsed_gives_the_new_files_analysis(tmp_path, isolated_cache, monkeypatch):
    from traceagent.trace import load

    path = _kernel_trace(tmp_path / "t.json", "old_kernel")
    replacement = _kernel_trace(tmp_path / "new.json", "new_kernel")
    parse = load._parse
    calls = []

    def parse_then_replace(file, max_bytes):
        trace = parse(file, max_bytes)
        calls.append(set(trace.gpu["name"]))
        if len(calls) == 1:  # `mv new.json t.json` lands while the old file is being read
            os.replace(replacement, path)
        return trace

    monkeypatch.setattr(load, "_parse", parse_then_replace)
    assert _names(path) == {"new_kernel"}  # read again, as it is now
    assert calls == [{"old_kernel"}, {"new_kernel"}]
    monkeypatch.setattr(load, "_parse", parse)
    assert _names(path) == {"new_kernel"}  # and the cache holds the new file's frames under its key
    assert len([e for e in os.listdir(isolated_cache) if e != "CACHEDIR.TAG"]) == 1


def test_a_file_that_keeps_changing_is_not_cached_and_says_so(tmp_path, isolated_cache, monkeypatch):
    from traceagent.trace import load

    path = _kernel_trace(tmp_path / "t.json", "k")
    parse = load._parse

    def parse_then_touch(file, max_bytes):
        trace = parse(file, max_bytes)
        os.utime(path)  # a profiler still writing it
        return trace

    monkeypatch.setattr(load, "_parse", parse_then_touch)
    trace = traceagent.load(path).traces[0]
    assert any("changed while it was read" in w for w in trace.meta.warnings)
    assert [e for e in os.listdir(isolated_cache) if e != "CACHEDIR.TAG"] == []


@pytest.mark.parametrize("spelling", ["path", "file_url"])
def test_an_in_place_edit_past_the_whole_file_hash_with_its_mtime_restored_is_not_served_stale(
        tmp_path, isolated_cache, monkeypatch, spelling):
    from traceagent.trace import cache

    # past WHOLE_FILE_HASH only the first, middle and last MiB are hashed: the edit lands outside
    # them, as an edit of a >64 MiB trace would (shown at that size for the key just below)
    monkeypatch.setattr(cache, "WHOLE_FILE_HASH", 256)
    monkeypatch.setattr(cache, "_SAMPLE", 64)
    b = TraceBuilder()
    for i in range(20):
        b.kernel(f"kernel_{i:02d}", i * 200, 100)
    written = b.write(tmp_path / "t.json")
    path = written if spelling == "path" else written.as_uri()  # file:///…/t.json: the same local file and key
    text = written.read_bytes()
    assert b"kernel_05" in text[64:len(text) // 2] and _names(path) >= {"kernel_05"}
    if spelling == "file_url":
        assert cache.key(str(written)).entry == cache.key(str(path)).entry
    stat = written.stat()
    with open(written, "r+b") as f:  # same size, same mtime: only the content and the ctime differ
        f.seek(text.index(b"kernel_05"))
        f.write(b"edited_05")
    os.utime(written, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert written.stat().st_size == stat.st_size and written.stat().st_mtime_ns == stat.st_mtime_ns
    assert "edited_05" in _names(path) and "kernel_05" not in _names(path)


def test_the_key_of_a_large_file_changes_with_an_in_place_edit_whose_mtime_is_restored(tmp_path, isolated_cache):
    from traceagent.trace import cache

    path = tmp_path / "large.json"
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": []}')
        f.truncate(cache.WHOLE_FILE_HASH + (8 << 20))  # sparse: no disk, no time
    before, stat = cache.key(str(path)), path.stat()
    sampled = cache.fingerprint(str(path), stat.st_size)
    with open(path, "r+b") as f:
        f.seek(10 << 20)  # far from the sampled first, middle and last MiB
        f.write(b"x")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert cache.fingerprint(str(path), stat.st_size) == sampled  # the sampled hash alone misses it;
    assert cache.key(str(path)).entry != before.entry  # the ctime in the key does not


def test_the_cache_keeps_to_its_cap_least_recently_used_first(tmp_path, isolated_cache, monkeypatch):
    from traceagent.trace import cache

    paths = [_kernel_trace(tmp_path / f"t{i}.json", f"k{i}") for i in range(3)]
    traceagent.load(paths[0])
    (entry,) = cache.entries()
    monkeypatch.setenv("TRACEAGENT_CACHE_MAX", str(int(entry.bytes * 2.5)))  # room for two entries
    traceagent.load(paths[1])
    os.utime(entry.path, (1, 1))  # the first entry's last use: long ago...
    traceagent.load(paths[1])  # (a hit touches its entry)
    traceagent.load(paths[2])  # ...so it is the one that goes
    kept = {e.path for e in cache.entries()}
    assert len(kept) == 2 and entry.path not in kept
    assert {cache.key(str(p)).entry for p in paths[1:]} == kept


def test_temporary_entries_of_killed_runs_are_removed_and_live_ones_kept(tmp_path, isolated_cache):
    import socket
    import subprocess
    import sys


    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    killed = isolated_cache / f"{'a' * 24}.tmp-{host}-{int(dead.stdout)}"  # as a SIGKILL mid-write leaves it
    live = isolated_cache / f"{'b' * 24}.tmp-{host}-{os.getpid()}"  # this process, writing now
    for d in (killed, live):
        d.mkdir()
        (d / "gpu.frame").write_bytes(b"x" * 100)
    traceagent.load(_kernel_trace(tmp_path / "t.json", "k"))  # a write tidies up
    assert not killed.exists() and live.exists()


def test_cache_info_and_clear(tmp_path, isolated_cache, capsys):
    from traceagent.cli import main
    from traceagent.trace import cache

    traceagent.load(_kernel_trace(tmp_path / "t.json", "k"))
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["directory"] == str(isolated_cache) and info["entries"] == 1 and info["bytes"] > 0
    assert info["max_bytes"] == 2_000_000_000
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out and os.listdir(isolated_cache) == [cache.MARKER]


def test_a_cache_hit_names_the_file_as_asked_now(tmp_path, isolated_cache, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _kernel_trace(first / "t.json", "kernel_in_a")
    _kernel_trace(second / "t.json", "kernel_in_b")
    monkeypatch.chdir(first)
    traceagent.load("t.json")  # cached with the path typed here
    monkeypatch.chdir(second)
    trace = traceagent.load("../a/t.json").traces[0]  # the same file, from the cache
    assert trace.meta.path == "../a/t.json" and set(trace.gpu["name"]) == {"kernel_in_a"}


def _loader_stall_trace(tmp_path, gap_us: int):
    # two steps, and a DataLoader call over a gap of `gap_us` between their kernels
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 400)
    b.kernel("gemm", 10, 300, launch_at=5)
    b.op("ProfilerStep#2", 400, 400 + gap_us + 400)
    b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 405, gap_us)
    b.kernel("gemm", 410 + gap_us, 300, launch_at=405 + gap_us)
    return b.write(tmp_path / "job.json")


def test_an_analysis_is_read_back_while_the_file_parameters_and_code_are_the_same(tmp_path, isolated_cache,
                                                                                 monkeypatch):
    from traceagent import api

    path = _loader_stall_trace(tmp_path, 2000)
    first = traceagent.analyze(path)
    entries = list(isolated_cache.glob("*/results-*.pickle"))
    assert len(entries) == 1  # stored beside the trace's frames, evicted with them

    def no_detectors(*args, **kwargs):
        raise AssertionError("the stored results were not used")

    monkeypatch.setattr(api, "analyze_trace", no_detectors)
    again = traceagent.analyze(path)
    assert again.to_dict() == first.to_dict()
    # events come back from the trace's own cache entry when a query needs them
    assert again.ranks[0].gaps["dur"].sum() / 1000 == first.ranks[0].findings.idle.idle_us
    assert again.ranks[0].gaps is again.ranks[0].gaps  # classified once, not at every query
    # other parameters are other results: computed, not read
    with pytest.raises(AssertionError, match="not used"):
        traceagent.analyze(path, settings=["idle.launch_gap_us=5"])
    # and without the cache nothing is read
    with pytest.raises(AssertionError, match="not used"):
        traceagent.analyze(path, use_cache=False)


def test_a_changed_file_or_a_damaged_results_file_is_analysed_again(tmp_path, isolated_cache):
    # the gap runs from the first kernel's end (310) to the second's start (410 + the stall)
    path = _loader_stall_trace(tmp_path, 2000)
    assert traceagent.analyze(path).ranks[0].findings.idle.by_cause_us["dataloader"] == 2100
    _loader_stall_trace(tmp_path, 3000)  # rewritten: another key
    assert traceagent.analyze(path).ranks[0].findings.idle.by_cause_us["dataloader"] == 3100
    for stored in isolated_cache.glob("*/results-*.pickle"):
        stored.write_bytes(b"\x80\x05 not a pickle")
    assert traceagent.analyze(path).ranks[0].findings.idle.by_cause_us["dataloader"] == 3100
