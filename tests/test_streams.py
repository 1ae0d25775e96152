"""Per stream: each stream's idle split into host wait, kernel wait and other wait (as HTA's
idle-time breakdown), and streams where collectives and compute take turns (nsys-ai's rule),
said in the verdict with the fix. Traces built here; every number worked out by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from builder import TraceBuilder
from conftest import offline_answer

from traceagent import analyze
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.detect.detectors.streams import detect_streams, streams_sentence

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def test_each_streams_idle_split_into_host_kernel_and_other_wait_by_hand(tmp_path):
    # stream 7: gemm 10-110 (launched at 0); gemm 110-310 (queued at 5, no stretch); then the stream
    # empties: gemm launched at 400 runs 410-510 (host wait 310-410: 100 µs); gemm queued at 420
    # runs 515-600 (5 µs, under kernel_wait_us: kernel wait); gemm queued at 430 runs 650-700
    # (queued but 50 µs: other wait). Span 10-700 = 690 µs, busy 535 µs, idle 155 µs.
    # stream 9: one kernel 200-250: busy all its span.
    b = TraceBuilder()
    for launch, start, dur in ((0, 10, 100), (5, 110, 200), (400, 410, 100), (420, 515, 85), (430, 650, 50)):
        b.kernel("gemm", start, dur, launch_at=launch)
    b.kernel("side_kernel", 200, 50, stream=9, launch_at=150)
    result = detect_streams(b.load(tmp_path))
    seven = next(r for r in result.rows if r.stream == 7)
    assert (seven.ops, seven.span_us, seven.busy_us, seven.idle_us) == (5, 690.0, 535.0, 155.0)
    assert (seven.host_wait_us, seven.kernel_wait_us, seven.other_wait_us) == (100.0, 5.0, 50.0)
    nine = next(r for r in result.rows if r.stream == 9)
    assert (nine.busy_us, nine.idle_us, nine.busy_of_span_pct) == (50.0, 0.0, 100.0)
    assert result.shared == [] and (result.host_wait_us, result.kernel_wait_us, result.other_wait_us) == (100.0, 5.0, 50.0)
    assert "most waits for the host (host wait): 100.0 µs" in streams_sentence(result)


def test_nccl_on_the_compute_stream_is_said_with_the_fix(tmp_path):
    # stream 7 runs gemm 0-100, all-reduce 100-400, gemm 400-500, all-reduce 500-800, all queued:
    # 600 µs of communication no compute can hide (75% of the span), because both share the stream
    b = TraceBuilder()
    for k, (name, start, dur) in enumerate(((("gemm", 0, 100)), (ALLREDUCE, 100, 300), ("gemm", 400, 100),
                                            (ALLREDUCE, 500, 300))):
        b.kernel(name, start, dur, launch_at=k)
    analysis = analyze(b.write(tmp_path / "shared.json"))
    (shared,) = analysis.ranks[0].findings.comm.shared_streams
    assert (shared.device, shared.stream, shared.collectives, shared.compute_kernels, shared.comm_us) == (0, 7, 2, 2, 600.0)
    v = analysis.verdict
    assert (v.limiter, v.root_cause) == ("communication", "communication")
    assert "stream 7 runs both collectives and compute" in v.headline and "stream of their own" in v.next_step
    assert v.evidence["shared_stream"]["stream"] == 7
    tool = {t.name: t for t in build_tools(AnalysisContext(analysis))}["streams"]
    assert json.loads(tool.invoke({}))["shared"][0]["stream"] == 7


def test_collectives_on_their_own_stream_are_not_shared(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, launch_at=0)
    b.kernel(ALLREDUCE, 20, 300, stream=20, launch_at=1)
    assert analyze(b.write(tmp_path / "own.json")).ranks[0].findings.comm.shared_streams == []


# at 0, and at Kineto's µs since the epoch, which pass 2**53 as ns (a float holds them to 256 ns)
@pytest.mark.parametrize("origin", [0, 1_694_128_201_426_674], ids=["zero", "epoch"])
def test_a_full_launch_queue_blocks_the_host_by_hand(tmp_path, origin):
    from traceagent.detect.detectors.launch_queue import (
        LaunchQueueParams,
        detect_launch_queue,
        launch_queue_lead,
        launch_queue_sentence,
    )

    # 12 kernels of 100 µs back to back (kernel i runs 100·i to 100·(i+1)) and a queue that holds 5.
    # One host thread launches them: launches 0-4 at t = 0..4, 1 µs each (queued at 1..5); launch 5
    # is called at 5 with 5 queued and blocks until kernel 0 ends at 100 (95 µs); launch i ≥ 6 is
    # called at 100·(i-5) with 5 queued and blocks until 100·(i-4) (100 µs each). By hand: at most
    # 5 queued, and 95 + 6 × 100 = 695 µs blocked on a full queue.
    b = TraceBuilder()
    for i in range(12):
        call = i if i < 6 else 100 * (i - 5)
        returns = call + 1 if i < 5 else 100 * (i - 4)
        b.kernel("gemm", origin + 100 * i, 100, launch_at=origin + call, launch_dur=returns - call)
    b.kernel("unlaunched", origin + 1300, 10, stream=9)  # its launch call is not in the trace
    result = detect_launch_queue(b.load(tmp_path), LaunchQueueParams(full_at=5))
    (stream,) = result.streams
    assert (stream.launches, stream.max_queue) == (12, 5)
    assert stream.blocked_us == 695.0 and result.blocked_us == 695.0
    # the curve from the first kernel's start (the first event) to the last one's end, 1200 µs later
    assert len(stream.curve) == 64 and stream.curve[0] == (0.0, 1) and stream.curve[-1] == (1200.0, 0)
    assert "blocked in launch calls on a full queue" in launch_queue_sentence(result)
    # "is the launch queue full?": yes, and for how long the host blocked on it (the detector's lead)
    assert launch_queue_lead(result, "Is the launch queue full?") == (
        "**Yes:** the host blocked 695.0 µs in launch calls on a full queue (at most 5 ops waited).")
    assert launch_queue_lead(replace(result, blocked_us=0.0), "Is the queue ever full?").startswith("**No:**")
    assert launch_queue_lead(result, "How deep is the launch queue?") is None


def test_the_time_two_or_more_streams_of_a_gpu_run_at_once_by_hand(tmp_path):
    # GPU 0: stream 7 runs 0-100 and 100-200 (touching: one stretch) and 300-400; stream 9 runs 150-350;
    # stream 11 runs 180-320. Streams busy at once: 1 over 0-150, 2 over 150-180, 3 over 180-200, 2 over
    # 200-300, 3 over 300-320, 2 over 320-350, 1 over 350-400: busy 400 µs, two or more 200 µs.
    # GPU 1: stream 7 runs 0-50 and stream 8 50-100: they touch, never overlap: busy 100 µs, at once 0.
    b = TraceBuilder()
    for start, stream in ((0, 7), (100, 7), (300, 7)):
        b.kernel("gemm", start, 100, stream=stream)
    b.kernel("side", 150, 200, stream=9)
    b.kernel("other_side", 180, 140, stream=11)
    b.kernel("gemm", 0, 50, device=1)
    b.kernel("gemm", 50, 50, stream=8, device=1)
    result = detect_streams(b.load(tmp_path))
    assert (result.busy_us, result.concurrent_us, result.concurrent_pct) == (500.0, 200.0, 40.0)
    assert "Two or more streams of a GPU run at once for 200.0 µs, 40.0% of the time the GPUs are busy." in \
        streams_sentence(result)
    # asked, the offline analyst's answer leads with it
    said = offline_answer(analyze(b.write(tmp_path / "at_once.json")), "Do kernels overlap across streams?")
    assert said.startswith("**Yes: two or more streams of a GPU run at once for 200.0 µs**, 40.0% of the 500.0 µs")


def test_streams_that_take_turns_never_run_at_once(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100)
    b.kernel("side", 100, 100, stream=9)  # starts as the other ends
    result = detect_streams(b.load(tmp_path))
    assert (result.busy_us, result.concurrent_us, result.concurrent_pct) == (200.0, 0.0, 0.0)
    said = offline_answer(analyze(b.write(tmp_path / "turns.json")), "Do kernels run in parallel on different streams?")
    assert said.startswith("**No:** the 2 streams never run at once on a GPU: they take turns.")


def test_streams_at_once_on_real_ranks_against_a_nanosecond_count():
    """Each DLRM rank runs its work on four streams; expected: every nanosecond of each GPU marked busy
    per stream, then counted (an independent reader of the same rows)."""
    import numpy as np
    from conftest import DLRM_8RANK, analyzed

    for rank in analyzed(DLRM_8RANK).ranks[:2]:
        gpu = rank.trace.gpu
        ops = gpu[gpu["kind"] != "sync"]
        origin = int(ops["start"].min())
        busy = at_once = 0
        for _, on_device in ops.groupby("device", observed=True):
            length = int(on_device["end"].max()) - origin
            streams_busy = np.zeros(length, dtype=np.int8)
            for _, on_stream in on_device.groupby("stream", observed=True):
                marked = np.zeros(length, dtype=bool)
                for start, end in zip(on_stream["start"] - origin, on_stream["end"] - origin):
                    marked[start:end] = True
                streams_busy += marked
            busy += int((streams_busy >= 1).sum())
            at_once += int((streams_busy >= 2).sum())
        result = rank.results["streams"]
        assert at_once > 0 and (result.busy_us, result.concurrent_us) == (busy / 1000, at_once / 1000)
