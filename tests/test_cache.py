"""The Parquet cache is never wrong: damaged entries, rewritten files that keep their size and
time, and concurrent runs all end in the same analysis as a fresh parse."""

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
    (entry,) = list(isolated_cache.iterdir())
    meta = json.loads((entry / "meta.json").read_text())
    if damage == "meta_list":
        (entry / "meta.json").write_text("[]")
    elif damage == "meta_extra_key":
        (entry / "meta.json").write_text(json.dumps(meta | {"surprise": 1}))
    elif damage == "devices_list":
        (entry / "meta.json").write_text(json.dumps(meta | {"devices": ["GPU"]}))
    elif damage == "frames_swapped":
        gpu, cpu = (entry / "gpu.arrow").read_bytes(), (entry / "cpu.arrow").read_bytes()
        (entry / "gpu.arrow").write_bytes(cpu)
        (entry / "cpu.arrow").write_bytes(gpu)
    elif damage == "frame_garbage":
        (entry / "steps.arrow").write_bytes(b"not an Arrow file at all")
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
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    outputs = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert all(run.returncode == 0 for run in runs)
    expected = json.loads(json.dumps(traceagent.analyze(RESNET_NW0, use_cache=False).to_dict()))
    assert all(out == expected for out in outputs)
    again = subprocess.run(command, capture_output=True, env=env, timeout=120)  # now from the cache
    assert json.loads(again.stdout) == expected


