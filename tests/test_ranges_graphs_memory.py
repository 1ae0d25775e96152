"""Annotation ranges, CUDA graphs and memory: hand-built traces whose answers are worked out in
the test, and real traces against independent readings of the raw files."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest
from builder import TraceBuilder
from conftest import DATA, NSYS_BEFORE, RESNET_NW0, analyzed, offline_answer

import traceagent
from traceagent import analyze
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.detect.detectors.annotations import annotations_sentence
from traceagent.detect.detectors.memory import memory_sentence

H100_QWEN = DATA / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
GRAPHS = DATA / "hta" / "negative_queue_rank0.json.gz"


def raw_events(path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_graph_replays_by_hand(tmp_path):
    b = TraceBuilder()
    b.kernel("single", 0, 10, launch_at=0, launch_dur=4)  # an ordinary launch: the median launch call, 4 µs
    b.correlation += 1  # one cudaGraphLaunch, three kernels carrying its correlation
    b.runtime("cudaGraphLaunch", 20, 6, correlation=b.correlation)
    for i in range(3):
        b._x("kernel", f"graph_kernel_{i}", 30 + 10 * i, 10, pid=0, tid=7, device=0, stream=7, correlation=b.correlation)
    graphs = analyze(b.write(tmp_path / "g.json"), use_cache=False).ranks[0].findings.graphs
    assert (graphs.launches, graphs.kernels, graphs.kernels_per_launch, graphs.launch_calls_saved) == (1, 3, 3.0, 2)
    assert graphs.share_of_kernel_time_pct == 75.0  # 30 of 40 µs of kernel time
    assert graphs.saved_us == 2 * 4.0


def test_graph_captures_by_hand_and_on_a_real_trace(tmp_path):
    """By hand: a capture begun at 10 µs and ended at 50-52, instantiated 60-70; a second begun at 100
    that the trace cut before its end, the thread's last event ending at 180: 2 captures, 42 + 80 = 122 µs
    captured, 10 µs instantiating. vLLM's capture trace (TraceLens's MI300) read independently: its
    hipStreamBeginCapture calls counted, the instantiations' time added up."""
    b = TraceBuilder()
    b.kernel("warmup", 0, 5, launch_at=0, launch_dur=2)
    b.runtime("cudaStreamBeginCapture", 10, 2)
    b.runtime("cudaStreamEndCapture", 50, 2)
    b.runtime("cudaGraphInstantiate", 60, 10)
    b.runtime("cudaStreamBeginCapture", 100, 1)
    b.op("aten::mm", 150, 30)
    graphs = analyze(b.write(tmp_path / "c.json"), use_cache=False).ranks[0].findings.graphs
    assert (graphs.captures, graphs.capture_us, graphs.instantiate_us) == (2, 122.0, 10.0)
    capture = DATA / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_capture.json.gz"
    raw = raw_events(capture)
    graphs = analyzed(capture).ranks[0].findings.graphs
    assert graphs.captures == sum(e.get("name") == "hipStreamBeginCapture" for e in raw)
    assert graphs.instantiate_us == pytest.approx(
        sum(e["dur"] for e in raw if str(e.get("name", "")).startswith("hipGraphInstantiate")), abs=0.01)


def test_graph_replays_on_a_real_trace():
    raw = raw_events(GRAPHS)
    launches = {e["args"]["correlation"] for e in raw if e.get("name") == "cudaGraphLaunch"}
    inside = [e for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") in launches]
    graphs = analyzed(GRAPHS).ranks[0].findings.graphs
    assert (graphs.launches, graphs.kernels) == (len(launches), len(inside))


def test_memory_that_grows_every_step_is_a_leak(tmp_path):
    b = TraceBuilder()
    for step in range(3):
        t0 = step * 1000
        b.op(f"ProfilerStep#{step}", t0, 900)
        b.kernel("work", t0 + 10, 500, launch_at=t0 + 5)
        b.memory(t0 + 20, 4096, allocated=1_000_000 + 4096 * (step + 1), reserved=2_000_000)  # kept
        b.memory(t0 + 30, 1024, allocated=1_000_000 + 4096 * (step + 1) + 1024, reserved=2_000_000)
        b.memory(t0 + 40, -1024, allocated=1_000_000 + 4096 * (step + 1), reserved=2_000_000)  # freed
    b.runtime("cudaFree", 600, 300)  # a synchronizing free across the idle gap 510..1010 of step 0
    memory = analyze(b.write(tmp_path / "m.json"), use_cache=False).ranks[0].findings.memory
    (gpu,) = memory.devices
    assert gpu.step_net_bytes == [4096, 4096, 4096] and gpu.leak
    assert gpu.peak_allocated_bytes == 1_000_000 + 3 * 4096 + 1024 and gpu.peak_reserved_bytes == 2_000_000
    assert gpu.allocations == 6 and gpu.allocations_per_step == 2.0
    assert memory.allocator_calls == 1 and memory.allocator_idle_us == 300.0  # the call lies inside the gap


def test_the_peak_is_a_share_of_the_gpus_memory_from_its_device_properties(tmp_path):
    """By hand: the allocator holds 2,000,000 B reserved at its peak on a GPU of 8,000,000 B (deviceProperties'
    totalGlobalMem): 25.0%. "Am I running out of memory?" is answered no with that share, first."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "Test GPU", "totalGlobalMem": 8_000_000}])
    b.kernel("work", 10, 500, launch_at=5)
    b.memory(20, 4096, allocated=1_000_000, reserved=2_000_000)
    b.memory(40, -4096, allocated=995_904, reserved=2_000_000)
    analysis = analyze(b.write(tmp_path / "m.json"), use_cache=False)
    (gpu,) = analysis.ranks[0].findings.memory.devices
    assert (gpu.total_bytes, gpu.peak_share_pct) == (8_000_000, 25.0)
    assert offline_answer(analysis, "Am I running out of memory?").startswith(
        "**No: at its peak the allocator holds 25.0% of GPU 0's 8.00 MB**.")
    assert offline_answer(analysis, "Is there enough GPU memory?").startswith("**Yes: at its peak")


def test_a_gpus_memory_is_read_by_the_ids_its_work_uses():
    from traceagent.trace.model import TraceMeta

    listed = [{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 205_822_885_888}]
    # an AMD trace: one device listed as 0, its work on GPU 9 (the same GPU, as its name is read)
    assert TraceMeta("kineto", "t", devices={9: "AMD Instinct MI300X"}, device_properties=listed).memory_bytes == {
        9: 205_822_885_888}
    # a total the trace left out or wrote oddly gives none, not an error
    odd = [{"id": 0, "name": "a"}, {"id": "x", "totalGlobalMem": 5}, {"id": 1, "totalGlobalMem": "many"}]
    assert TraceMeta("kineto", "t", devices={0: "a", 1: "b"}, device_properties=odd).memory_bytes == {}


def test_memory_on_a_real_trace():
    raw = [e for e in raw_events(H100_QWEN) if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    (gpu,) = analyzed(H100_QWEN).ranks[0].findings.memory.devices
    assert gpu.events == len(raw)
    assert gpu.peak_allocated_bytes == max(e["args"]["Total Allocated"] for e in raw)
    assert gpu.peak_reserved_bytes == max(e["args"]["Total Reserved"] for e in raw)
    assert gpu.net_bytes == sum(e["args"]["Bytes"] for e in raw)
    # the GPU's memory, as the file's deviceProperties gives it
    with gzip.open(H100_QWEN) as f:
        (props,) = json.load(f)["deviceProperties"]
    assert gpu.total_bytes == props["totalGlobalMem"] and gpu.peak_share_pct == round(
        100 * gpu.peak_reserved_bytes / props["totalGlobalMem"], 2)


def test_an_old_trace_without_totals_gets_its_peak_reconstructed_from_the_bytes():
    """2021 [memory] events carry only signed Bytes: the peak is their running sum in time order
    (ties in file order), from the least start that keeps it from going negative."""
    raw = sorted((e for e in raw_events(RESNET_NW0) if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1),
                 key=lambda e: e["ts"])
    running, lowest, highest = 0, 0, 0
    for e in raw:
        running += e["args"]["Bytes"]
        lowest, highest = min(lowest, running), max(highest, running)
    (gpu,) = analyzed(RESNET_NW0).ranks[0].findings.memory.devices
    assert "Total Allocated" not in raw[0]["args"] and gpu.reconstructed
    assert gpu.peak_allocated_bytes == highest - lowest and gpu.peak_allocated_bytes > 0
    assert gpu.peak_reserved_bytes is None
    assert "reconstructed" in memory_sentence(analyzed(RESNET_NW0).ranks[0].findings.memory)


def test_a_running_sum_that_dips_below_zero_starts_from_what_the_frees_imply(tmp_path):
    b = TraceBuilder()
    b.kernel("k", 0, 10)
    for ts, nbytes in ((1, -300), (2, 1000), (3, -200)):  # a free of 300 bytes allocated before the trace
        b.memory(ts, nbytes)
    (gpu,) = analyze(b.write(tmp_path / "t.json"), use_cache=False).ranks[0].findings.memory.devices
    assert gpu.reconstructed and gpu.peak_allocated_bytes == 300 - 300 + 1000  # held 300 at the start


def test_nvtx_ranges_on_an_nsight_export():
    with sqlite3.connect(NSYS_BEFORE) as db:
        rows = db.execute("SELECT COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)), end - start "
                          "FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NOT NULL").fetchall()
    # PyTorch's emit_nvtx appends ", seq = N, op_id = M" to each op's range: the name is before it
    flash = [dur for text, dur in rows if text and text.split(", seq = ")[0] == "FlashAttnFunc"]
    tools = {t.name: t for t in build_tools(AnalysisContext(analyzed(NSYS_BEFORE)))}
    ranges = json.loads(tools["annotations"].invoke({"name_filter": "FlashAttnFunc"}))["ranges"]
    row = next(r for r in ranges if r["name"] == "FlashAttnFunc")
    assert (row["count"], row["host_us"]) == (len(flash), pytest.approx(sum(flash) / 1000, abs=0.01))
    assert 0 < row["share_of_busy_pct"] <= 100 and 0 <= row["idle_pct"] <= 100


def test_a_range_by_hand(tmp_path):
    b = TraceBuilder()
    b.op("phase_a", 0, 100, cat="user_annotation")
    b.kernel("inside", 20, 30, launch_at=10)  # launched inside phase_a: its 30 µs count for it
    b.kernel("outside", 200, 50, launch_at=150)
    r = analyze(b.write(tmp_path / "r.json"), use_cache=False).ranks[0]
    (phase,) = r.findings.annotations.ranges
    assert (phase.name, phase.count, phase.host_us, phase.gpu_us, phase.kernels) == ("phase_a", 1, 100.0, 30.0, 1)
    assert phase.share_of_busy_pct == 100 * 30 / 80  # busy: the two kernels, 80 µs
    assert phase.idle_pct == 50.0  # the gap 50..200 µs after "inside" covers half of 0..100 (the span starts at 20)


@pytest.mark.parametrize("name", ["h100_Qwen", "b200", "mi300", "resnet50"])
def test_mfu_is_never_given_without_its_gpu_dtype_and_peak(name):
    path = next(p for p in DATA.rglob("*.json.gz") if name in p.name)
    flops = analyzed(path).ranks[0].findings.flops
    if flops.mfu_pct is not None:
        assert flops.gpu and flops.dtype and flops.peak_tflops and flops.peak_source
    for op in flops.by_op:
        assert op.mfu_pct is None or (op.dtype and flops.peak_family)


def test_each_steps_top_ranges(tmp_path):
    b = TraceBuilder()
    for step in range(2):
        t0 = step * 1000
        b.op(f"ProfilerStep#{step}", t0, 900)
        b.op("forward", t0 + 10, 300, cat="user_annotation")
        b.kernel("fwd", t0 + 20, 100 + 50 * step, launch_at=t0 + 15)
        b.op("backward", t0 + 400, 300, cat="user_annotation")
        b.kernel("bwd", t0 + 410, 200, launch_at=t0 + 405)
    per_step = analyze(b.write(tmp_path / "s.json"), use_cache=False).ranks[0].findings.annotations.per_step
    assert per_step == [{"step": 0, "ranges": [{"name": "backward", "gpu_us": 200.0}, {"name": "forward", "gpu_us": 100.0}]},
                        {"step": 1, "ranges": [{"name": "backward", "gpu_us": 200.0}, {"name": "forward", "gpu_us": 150.0}]}]


def test_memory_events_with_impossible_sizes_are_dropped_and_counted(tmp_path):
    b = TraceBuilder()
    b.op("ProfilerStep#0", 0, 900)
    b.kernel("work", 10, 500, launch_at=5)
    b.memory(20, 4096, allocated=4096, reserved=2_000_000)
    b.memory(30, 2**60, allocated=2**60, reserved=2**60)  # past the model's bound on a byte count
    trace = traceagent.load(b.write(tmp_path / "m.json"), use_cache=False).traces[0]
    assert trace.memory["bytes"].tolist() == [4096]
    assert any(w.startswith("dropped 1 events") for w in trace.meta.warnings)


def test_a_range_with_no_gpu_work_where_the_gpu_waits_is_a_finding_too(tmp_path):
    # twelve layer ranges each launch a 60 µs kernel (layer_i at i*100: kernel i*100+20 .. +80);
    # then `postprocess` runs 1,200-1,700 with no GPU work, and the next kernel starts at 1,720.
    # By hand: idle is 11 gaps of 40 µs between layers and 540 µs after the last one: 980 µs;
    # postprocess spans 500 µs of it (51.02%); each layer i >= 1 spans 20 µs of the gap before it
    b = TraceBuilder()
    for i in range(12):
        b.op(f"layer_{i}", i * 100, 50, cat="user_annotation")
        b.kernel(f"kernel_{i}", i * 100 + 20, 60, launch_at=i * 100 + 10, launch_dur=2)
    b.op("postprocess", 1200, 500, cat="user_annotation")
    b.kernel("kernel_next", 1720, 60, launch_at=1710, launch_dur=2)
    r = analyze(b.write(tmp_path / "ranges.json")).ranks[0]
    assert r.findings.idle.idle_us == 980.0
    found = r.findings.annotations
    assert found.distinct == 13 and "postprocess" not in [x.name for x in found.ranges]  # no GPU time
    idle = found.idle_ranges[0]
    assert (idle.name, idle.gpu_us, idle.idle_us, idle.share_of_idle_pct) == ("postprocess", 0.0, 500.0, 51.02)
    assert [x.idle_us for x in found.idle_ranges[1:]] == [20.0] * 9  # the top ten by idle
    assert "The GPU sat idle under ranges that launched nothing: postprocess 500.0 µs (51.0% of idle)" in \
        annotations_sentence(found)
    # and the offline analyst, asked about ranges, lists it apart
    import asyncio

    from traceagent.agent.session import Session

    async def ask():
        session = Session(AnalysisContext(analyze(b.write(tmp_path / "ranges.json"))))
        return [e async for e in session.ask("which annotated ranges take the most time?")][-1].text

    assert "Ranges that launched no GPU work while the GPU sat idle:\n- `postprocess`: 500.0 µs of idle GPU time " \
           "(51.0% of the idle time), once" in asyncio.run(ask())


def test_a_range_nested_in_one_of_its_name_counts_its_time_once(tmp_path):
    """`forward` runs 0-1,000 µs and, inside it on the same thread, `forward` again 100-900 (a module
    called within itself). Kernel a (50 µs) is launched at 150 inside both, b (50 µs) at 950 inside the
    outer one only; the GPU runs a 160-210 and b 960-1,010. By hand, per name: host time 1,000 µs
    (the union, not 1,800), GPU time 100 µs of the 100 µs busy (not 150: a once), idle while it ran
    750 µs (210-960) of the rank's 750 (not the 750 + 690 that summing the two instances gives: 192%)."""
    b = TraceBuilder()
    b.op("forward", 0, 1000, cat="user_annotation")
    b.op("forward", 100, 800, cat="user_annotation")
    b.kernel("a", 160, 50, launch_at=150, launch_dur=5)
    b.kernel("b", 960, 50, launch_at=950, launch_dur=5)
    r = analyze(b.write(tmp_path / "nested.json"), use_cache=False).ranks[0]
    assert r.findings.idle.idle_us == 750.0
    (forward,) = r.findings.annotations.ranges
    assert (forward.count, forward.host_us, forward.gpu_us, forward.kernels) == (2, 1000.0, 100.0, 2)
    assert (forward.share_of_busy_pct, forward.idle_us, forward.share_of_idle_pct) == (100.0, 750.0, 100.0)
