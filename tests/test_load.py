"""Loading real traces into the Trace model.

Expected counts were taken with an independent reader: a plain `orjson` pass over the raw JSON
(counting ph=X events by category and summing args.bytes per memcpy name) and `sqlite3` queries
on the Nsight exports, cross-checked with the origin repositories' own descriptions (SOURCE.md).
"""

from __future__ import annotations

import json
import os
import re
import typing

import numpy as np
import pytest
from builder import TraceBuilder
from conftest import B200, DATA, DLRM_8RANK, MI300, NCCL_A100, NSYS_AFTER, NSYS_BEFORE, RESNET_NW0, write_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from rawtrace import events

import traceagent
from traceagent.trace import cache
from traceagent.trace.load import load_file

ALL_TRACES = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json.gz", ".sqlite")))


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_shared_trace_loads_with_consistent_frames(path):
    trace = load_file(str(path))  # parsed once per run, by whichever test asks first (test_cache: cached == parsed)
    assert (trace.gpu["end"] >= trace.gpu["start"]).all()
    assert (trace.cpu["end"] >= trace.cpu["start"]).all()
    assert trace.gpu["start"].is_monotonic_increasing
    assert set(trace.gpu["kind"].dropna().unique()) <= {"kernel", "memcpy", "memset", "sync"}
    copies = trace.gpu[trace.gpu["kind"] == "memcpy"]
    assert copies["copy_kind"].notna().all(), "every copy has a copy kind"
    # names are stored once, not per event
    assert str(trace.gpu["name"].dtype) == "category" and str(trace.cpu["name"].dtype) == "category"


def _copies(trace):
    copies = trace.gpu[trace.gpu["kind"] == "memcpy"]
    grouped = copies.groupby(["copy_kind", "src_kind", "dst_kind"], observed=True)["bytes"].agg(["size", "sum"])
    return {key: (int(n), int(b)) for key, (n, b) in grouped.iterrows()}


def test_resnet50_2021_schema():
    trace = traceagent.load(RESNET_NW0).traces[0]
    counts = trace.counts()
    assert (counts["kernels"], counts["memcpys"], counts["memsets"], counts["steps"]) == (8772, 12, 312, 6)
    assert _copies(trace) == {("HtoD", "pageable", "device"): (12, 115_607_040)}
    assert list(trace.steps["step"]) == [5, 6, 7, 8, 9, 10]
    assert trace.meta.devices == {0: "Tesla V100-DGXS-32GB"}
    assert trace.meta.rank == 0  # no distributedInfo: a single trace is rank 0
    # every kernel is linked to the op that launched it
    assert trace.gpu.loc[trace.gpu["kind"] == "kernel", "op"].notna().all()
    assert (trace.cpu["kind"] == "dataloader").sum() == 6


def test_a100_nccl_trace_flags_collectives_and_steps():
    trace = traceagent.load(NCCL_A100).traces[0]
    assert trace.counts()["kernels"] == 2700
    assert int(trace.gpu["is_comm"].sum()) == 21
    assert _copies(trace) == {("DtoD", "device", "device"): (960, 307_323_096)}
    assert list(trace.steps["step"]) == [4, 5, 6]
    assert (trace.meta.rank, trace.meta.world_size) == (0, 2)
    assert trace.meta.devices == {0: "NVIDIA A100-PG509-200"}
    # device range of a step: the work its host range launched, which starts after the step does
    steps = trace.steps
    assert (steps["gpu_start"] >= steps["start"]).all()


def test_b200_current_schema_with_pageable_and_pinned_copies():
    trace = traceagent.load(B200).traces[0]
    assert trace.counts()["kernels"] == 768
    assert _copies(trace) == {
        ("DtoD", "device", "device"): (146, 771_323_904),
        ("HtoD", "pageable", "device"): (2, 16),
        ("HtoD", "pinned", "device"): (13, 33_093),
    }
    # ncclDevKernel_AllGather (the current NCCL name) and 73 multimem_all_reduce_kernel (NVLink
    # SHARP all-reduce): 74 kernels in the raw JSON are named one or the other
    assert int(trace.gpu["is_comm"].sum()) == 74
    # one vLLM step (execute_context_1(888_…)_generation_0(0)): a prefill of 888 tokens, as the raw JSON names it
    [raw] = [e["name"] for e in events(B200) if e.get("cat") == "user_annotation" and
             e.get("name", "").startswith("execute_context_")]
    assert raw.startswith("execute_context_1(888_") and raw.endswith("_generation_0(0)")
    assert list(trace.steps[["phase", "tokens"]].itertuples(index=False, name=None)) == [("prefill", 888)]
    assert (trace.meta.rank, trace.meta.world_size) == (0, 8)


def test_amd_mi300_hip_and_rccl():
    trace = traceagent.load(MI300).traces[0]
    assert trace.counts()["kernels"] == 2995
    assert _copies(trace) == {("DtoD", "device", "device"): (550, 70_195_152)}
    assert int(trace.gpu["is_comm"].sum()) == 17  # ncclDevKernel_Generic (RCCL)
    assert trace.meta.devices == {2: "AMD Instinct MI300X"}
    assert list(trace.steps["step"]) == [15, 16, 17]  # host steps only, not the gpu_user_annotation copies
    assert "hipLaunchKernel" in set(trace.cpu.loc[trace.cpu["kind"] == "runtime", "name"])


def test_old_trace_links_kernels_to_ops_through_nesting():
    # In this trace the launch call's "External id" is its correlation id, not an op's id.
    trace = traceagent.load(DATA / "hta" / "df_index_resolver.json.gz").traces[0]
    kernels = trace.gpu[trace.gpu["kind"] == "kernel"]
    assert kernels["op"].notna().mean() > 0.99
    assert int(kernels["is_comm"].sum()) == 2020
    assert trace.meta.rank == 1


def test_dlrm_directory_loads_eight_ranks():
    job = traceagent.load(DLRM_8RANK)
    assert job.ranks == list(range(8))
    assert [t.counts()["kernels"] for t in job.traces] == [245, 310, 246, 315, 251, 245, 246, 246]
    assert all(t.counts()["memcpys"] == 16 for t in job.traces)
    assert all(t.meta.devices[t.meta.rank] == "Tesla V100-SXM2-32GB" for t in job.traces)
    assert all(t.gpu["is_comm"].any() for t in job.traces)


@pytest.mark.parametrize("path, kernels, nccl, copies", [
    (NSYS_BEFORE, 4010, 66, 1020),
    (NSYS_AFTER, 3587, 62, 904),
])
def test_two_gpu_nsight_exports(path, kernels, nccl, copies):
    trace = traceagent.load(path).traces[0]
    assert trace.meta.format == "nsys"
    assert sorted(trace.meta.devices) == [0, 1]
    c = trace.counts()
    assert (c["kernels"], c["memcpys"]) == (kernels, copies)
    assert int(trace.gpu["is_comm"].sum()) == nccl
    # the NCCL kernels run on both devices
    assert set(trace.gpu.loc[trace.gpu["is_comm"], "device"]) == {0, 1}
    # runtime names lose their _vNNNN suffix; NVTX op ranges lose their per-call ids
    names = set(trace.cpu["name"])
    assert {"cudaLaunchKernel", "cudaStreamGetCaptureInfo_v2", "aten::empty", "record_param_comms"} <= names
    assert not any(re.search(r"_v\d{4}$|op_id = ", n) for n in names)


def test_nsight_export_with_enum_tables_and_gpu_info():
    trace = traceagent.load(DATA / "test-cuda" / "report1.sqlite").traces[0]
    assert trace.meta.devices == {0: "NVIDIA GeForce RTX 4060 Ti"}
    assert trace.counts()["kernels"] == 4
    assert _copies(trace) == {("DtoH", "device", "pinned"): (4, 400_000_000),
                              ("HtoD", "pinned", "device"): (8, 800_000_000)}
    assert (trace.gpu["kind"] == "sync").sum() == 1  # the cudaEventSynchronize record
    assert not trace.gpu.loc[trace.gpu["kind"] == "kernel", "correlation"].duplicated().any()


def test_nsight_export_without_enum_tables_uses_builtin_values(tmp_path):
    # Older exports have no ENUM tables: copy the export and drop them
    import shutil
    import sqlite3
    old = tmp_path / "old.sqlite"
    shutil.copy(DATA / "test-cuda" / "report1.sqlite", old)
    con = sqlite3.connect(old)
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'ENUM_%'").fetchall():
        con.execute(f"DROP TABLE {table}")
    con.execute("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
    con.commit()
    con.close()
    trace = traceagent.load(old).traces[0]
    assert _copies(trace) == {("DtoH", "device", "pinned"): (4, 400_000_000),
                              ("HtoD", "pinned", "device"): (8, 800_000_000)}
    assert trace.meta.profiler.startswith("Nsight Systems 2026")


def test_cache_second_load_reads_the_cache(isolated_cache):
    first = traceagent.load(RESNET_NW0)
    entries = cache.entries()
    assert len(entries) == 1 and (entries[0].path / "gpu.frame").exists()
    second = traceagent.load(RESNET_NW0)
    a, b = first.traces[0], second.traces[0]
    assert a.gpu.equals(b.gpu) and a.cpu.equals(b.cpu) and a.steps.equals(b.steps)
    assert a.meta == b.meta


def test_cache_is_keyed_by_mtime(tmp_path, isolated_cache):
    copy = tmp_path / "t.json.gz"
    copy.write_bytes(RESNET_NW0.read_bytes())
    traceagent.load(copy)
    import os
    os.utime(copy, ns=(0, 0))
    traceagent.load(copy)
    assert len(cache.entries()) == 2


def test_no_cache_writes_nothing(isolated_cache):
    traceagent.load(RESNET_NW0, use_cache=False)
    assert not cache.cache_dir().exists() or not any(p.name != cache.MARKER for p in cache.cache_dir().iterdir())


def test_frames_have_no_python_objects_per_event():
    trace = traceagent.load(RESNET_NW0).traces[0]
    for frame in (trace.gpu, trace.cpu):
        assert not any(dtype == np.dtype(object) for dtype in frame.dtypes), frame.dtypes


def test_a_trace_recorded_with_shapes_decodes_on_the_typed_path():
    # the untyped path is for odd traces; record_shapes=True (Input Dims, Input type, Concrete
    # Inputs) is an ordinary one, and went there while the shape fields were typed Raw | None
    from traceagent.trace import kineto, reading

    raw, _ = reading.read_text(str(B200))
    events = kineto.decode(raw, str(B200))[0].traceEvents
    shaped = [e for e in events if b'"Input Dims"' in bytes(e)][:100]
    assert shaped  # the trace has shapes
    typed = typing.get_args(kineto._BY_PHASE)  # one struct per phase: the fast path
    decoded, skipped = kineto._decode_events(shaped)
    assert skipped == 0 and all(type(e) in typed for e in decoded)
    piece, skipped, _ = kineto._decode_piece(b"[" + b",".join(shaped) + b"]")  # read in pieces: likewise
    assert skipped == 0 and all(type(e) in typed for e in piece)
    # the kept text is what json.dumps writes for the same value, whichever path read it
    dims = decoded[0].args.input_dims
    assert kineto._raw_text(dims) == json.dumps(json.loads(bytes(dims)))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(us=st.lists(st.floats(-2.0**51, 2.0**51, allow_nan=False), min_size=1, max_size=20))
def test_microseconds_become_the_nearest_nanosecond_each_on_its_own(us):
    # each float's exact value × 1000, rounded: whatever else is in the batch (a far-off timestamp
    # once cost its batch's other events up to 64 ns)
    from fractions import Fraction

    from traceagent.trace.kineto import _ns

    expected = [round(Fraction(u) * 1000) for u in us]
    assert _ns(np.array(us)).tolist() == expected
    assert [int(_ns(np.array([u]))[0]) for u in us] == expected


def test_steps_device_ranges_are_exact_nanoseconds_at_epoch_timestamps(tmp_path):
    # Kineto's µs since the epoch pass 2**53 as ns, where floats hold 256 ns steps: a step without
    # device work, or a device op without a launch call, once made every step's range floats
    origin = 1_694_128_201_426_674
    b = TraceBuilder()
    b.op("ProfilerStep#1", origin, 50)
    b.kernel("k", origin + 5, 10, launch_at=origin + 1)
    b.op("ProfilerStep#2", origin + 60, 50)  # launches nothing
    b.kernel("unlaunched", origin + 120, 5)  # its launch call is not in the trace
    steps = b.load(tmp_path).steps
    assert steps["gpu_start"].tolist()[0] == (origin + 5) * 1000 and steps["gpu_end"].tolist()[0] == (origin + 15) * 1000
    assert steps["gpu_start"].isna().tolist() == [False, True]


def test_unreadable_entries_of_a_rank_directory_are_failed_ranks_with_the_reason(tmp_path, capsys):
    from traceagent.cli import main

    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        b = TraceBuilder(distributedInfo={"rank": rank, "world_size": 2})
        b.kernel("gemm", 0, 100)
        b.write(run / f"rank{rank}.json")
    (run / "rank2.json").symlink_to(tmp_path / "gone.json")  # a link to nothing
    (run / "rank3.json").symlink_to(run / "rank3.json")  # a link to itself
    os.mkfifo(run / "rank4.json")  # a pipe: reading it would block forever
    (run / "notes.txt").symlink_to(tmp_path / "gone.txt")  # not a trace name: not a rank
    analysis = traceagent.analyze(run)
    assert [r.rank for r in analysis.ranks] == [0, 1]
    why = {os.path.basename(f.file): f.error for f in analysis.failed}
    assert set(why) == {"rank2.json", "rank3.json", "rank4.json"}
    assert "symbolic link to nothing" in why["rank2.json"] and "gone.json does not exist" in why["rank2.json"]
    assert why["rank3.json"] == "a symbolic link that loops" and "named pipe" in why["rank4.json"]
    assert main(["info", str(run)]) == 0
    assert capsys.readouterr().err.count("(skipped; the other ranks were analysed)") == 3


def test_a_directory_of_only_unreadable_entries_says_why(tmp_path, capsys):
    from traceagent.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.json").symlink_to(run / "rank0.json")
    assert main(["analyze", str(run)]) == 2
    err = capsys.readouterr().err
    assert "1 cannot: rank0.json: a symbolic link that loops" in err and "Traceback" not in err


@pytest.mark.parametrize("with_args", [False, True], ids=["gpu_only", "beside_kernels_with_args"])
def test_kernels_without_args_take_device_and_stream_from_pid_and_tid(tmp_path, with_args):
    # a GPU-only trace writes kernels with no args (or empty ones): every args field is its default,
    # the device and stream then come from pid and tid. By hand: 3 such kernels on pid 2, tid 9.
    bare = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 2, "tid": 9, "ts": 10 * i, "dur": 1.5}
            for i in range(3)]
    bare[1]["args"] = {}
    given = [{"ph": "X", "cat": "kernel", "name": "g", "pid": 0, "tid": 0, "ts": 50, "dur": 2,
              "args": {"device": 1, "stream": 7, "correlation": 5, "External id": 11}}] if with_args else []
    gpu = traceagent.load(write_trace(tmp_path / "t.json", bare + given), use_cache=False).traces[0].gpu
    gpu = gpu.sort_values("start").reset_index(drop=True)
    assert gpu["name"].astype(str).tolist() == ["k0", "k1", "k2", *(["g"] if with_args else [])]
    assert gpu["device"].tolist()[:3] == [2, 2, 2] and gpu["stream"].tolist()[:3] == [9, 9, 9]
    assert gpu["correlation"].tolist()[:3] == [-1, -1, -1] and gpu["external_id"].tolist()[:3] == [-1, -1, -1]
    assert gpu["bytes"].tolist()[:3] == [0, 0, 0] and gpu["collective"].isna().all()
    assert (gpu["end"] - gpu["start"]).tolist()[:3] == [1500, 1500, 1500]
    if with_args:
        assert gpu.iloc[3][["device", "stream", "correlation", "external_id"]].tolist() == [1, 7, 5, 11]
