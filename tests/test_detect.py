"""Detectors on small hand-built traces, each planting one limiter. Every expected number is
worked out by hand in the test from the times it builds (all in µs)."""

from __future__ import annotations

import pytest
from builder import TraceBuilder
from conftest import DATA, NSYS_BEFORE, analyzed

from traceagent.cli import main
from traceagent.detect.analysis import analyze_trace
from traceagent.detect.core.encode import to_data
from traceagent.detect.detectors.breakdown import detect_breakdown
from traceagent.detect.detectors.comm import detect_comm
from traceagent.detect.detectors.idle import detect_idle
from traceagent.detect.detectors.kernels import detect_hot_kernels, distinct_labels, loosely, short_name
from traceagent.detect.detectors.memcpy import detect_memcpy
from traceagent.detect.verdict.diagnose import VerdictParams, _verdict_for
from traceagent.sentences import gpu_behind, slowest_step_sentence

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_overlapping_streams_are_not_double_counted(tmp_path):
    b = TraceBuilder()
    b.kernel("a", 0, 100, stream=7)
    b.kernel("b", 50, 100, stream=8)  # overlaps a by 50
    b.kernel("c", 200, 100, stream=7)
    trace = b.load(tmp_path)
    total = detect_breakdown(trace).total
    # busy = [0,150) + [200,300) = 250; span 300; idle 50
    assert (total.span_us, total.busy_us, total.idle_us) == (300, 250, 50)
    assert total.compute_us == 250 and total.idle_pct == pytest.approx(16.67)


def test_short_gaps_are_launch_latency(tmp_path):
    b = TraceBuilder()
    b.kernel("a", 0, 100, launch_at=-20)
    b.kernel("b", 105, 100, launch_at=-10)
    idle = detect_idle(b.load(tmp_path))
    assert idle.by_cause_us == {"launch_latency": 5}


def test_dataloader_gap(tmp_path):
    b = TraceBuilder()
    b.kernel("a", 0, 100, launch_at=-10)
    b.op(LOADER, 110, 790, cat="user_annotation")
    b.kernel("b", 1000, 100, launch_at=905)
    ra = analyze_trace(b.load(tmp_path))
    # gap [100, 1000) = 900; the loader covers 790 of it (88%)
    assert ra.findings.idle.by_cause_us == {"dataloader": 900}
    assert ra.findings.idle.idle_pct == pytest.approx(100 * 900 / 1100, abs=0.01)
    assert (ra.verdict.limiter, ra.verdict.root_cause) == ("idle", "dataloader")
    assert "num_workers" in ra.verdict.next_step
    assert ra.findings.idle.top_gaps[0].evidence["host"][0]["name"] == LOADER


def test_sync_gap_names_the_op_and_python_line(tmp_path):
    b = TraceBuilder()
    b.kernel("forward", 0, 500, launch_at=0)
    b.python("train.py(42): <module>", 400, 300)
    b.python("torch/_tensor.py(100): item", 405, 160)  # library frames are skipped
    b.op("aten::item", 410, 150)
    b.op("aten::_local_scalar_dense", 415, 140)
    b.runtime("cudaStreamSynchronize", 420, 85)  # returns at 505, just after the GPU drains
    b.op("log_metrics", 560, 240, cat="user_annotation")
    b.kernel("next", 810, 90, launch_at=800)
    ra = analyze_trace(b.load(tmp_path))
    idle = ra.findings.idle
    # gap [500, 810) = 310
    assert idle.by_cause_us == {"sync": 310}
    gap = idle.top_gaps[0]
    assert gap.evidence == {"sync_call": "cudaStreamSynchronize", "op": "aten::item",
                            "inner_op": "aten::_local_scalar_dense", "python": "train.py(42): <module>"}
    site = idle.sync_sites[0]
    assert (site.op, site.python, site.count, site.idle_us) == ("aten::item", "train.py(42): <module>", 1, 310)
    assert (ra.verdict.limiter, ra.verdict.root_cause) == ("idle", "sync")
    assert "train.py(42)" in ra.verdict.next_step


def test_launch_bound_loop(tmp_path):
    b = TraceBuilder()
    for i in range(20):  # a launch every 30 µs taking 20 µs; each kernel runs 2 µs
        b.kernel("tiny_add", 30 * i + 15, 2, launch_at=30 * i, launch_dur=20)
    ra = analyze_trace(b.load(tmp_path))
    # span [15, 587) = 572; busy 20 × 2 = 40; 19 gaps of 28 µs, each before a late, longer launch
    assert ra.breakdown.total.span_us == 572 and ra.breakdown.total.busy_us == 40
    assert ra.findings.idle.by_cause_us == {"launch_overhead": 532}
    assert ra.findings.launch.short_kernel_pct == 100.0
    assert ra.findings.launch.median_latency_us == 15
    assert (ra.verdict.limiter, ra.verdict.root_cause) == ("idle", "launch_overhead")


def test_host_work_and_nothing_on_the_host(tmp_path):
    b = TraceBuilder()
    b.kernel("a", 0, 100, launch_at=-10)
    b.op("my_preprocessing", 100, 500)
    b.kernel("b", 610, 500, launch_at=600)  # longer than its launch: not launch-bound
    idle = detect_idle(b.load(tmp_path, "busy_host.json"))
    assert idle.by_cause_us == {"host_other": 510}
    assert idle.top_gaps[0].evidence["host"][0]["name"] == "my_preprocessing"

    b = TraceBuilder()
    b.kernel("a", 0, 100, launch_at=-10)
    b.kernel("b", 610, 500, launch_at=600)
    idle = detect_idle(b.load(tmp_path, "quiet_host.json"))
    assert idle.by_cause_us == {"no_host_activity": 510}



def test_a_window_gives_each_gpus_busy_time_idle_and_top_ops_inside_it(tmp_path):
    """By hand: kernels a 0-100 and 150-300, b 400-500, a copy 520-600 (µs). The window [50, 450): busy
    50 + 150 + 50 = 250 µs, 62.5% of its 400 µs; the gaps 100-150 and 300-400 lie inside it (150 µs of idle);
    a has 200 µs in it over 2 runs, b 50 µs; the copy is outside."""
    from traceagent.detect.detectors.window import device_window

    b = TraceBuilder()
    b.kernel("a", 0, 100, launch_at=0)
    b.kernel("a", 150, 150, launch_at=140)
    b.kernel("b", 400, 100, launch_at=390)
    b.memcpy(520, 80, 1 << 20)
    ra = analyze_trace(b.load(tmp_path))
    origin = ra.trace.origin_ns()
    (gpu,) = device_window(ra.trace, ra.gaps, origin + 50_000, origin + 450_000)
    assert (gpu.busy_us, gpu.busy_pct, sum(gpu.idle_by_cause_us.values())) == (250.0, 62.5, 150.0)
    assert [(o.name, o.kind, o.count, o.time_us) for o in gpu.top] == [("a", "kernel", 2, 200.0), ("b", "kernel", 1, 50.0)]


def test_idle_by_line_puts_each_gap_at_the_launching_threads_line_and_a_syncs_at_the_line_that_waited(tmp_path):
    """By hand: kernels 0-100, 800-900, 1500-1550, 2000-2050. Gap 100-800 (700 µs): the thread is in
    train.py(12) at its middle (450). Gap 900-1500 (600 µs): in train.py(20) at 1200. Gap 1550-2000 (450 µs)
    follows a sync called at train.py(30) (1540-1555): the sync's line owns it, though the thread sits in
    train.py(31) at its middle. Library frames (torch/...) name no line."""
    b = TraceBuilder()
    b.python("train.py(10): <module>", 0, 2100)
    b.python("train.py(12): load", 100, 600)
    b.python("torch/utils/data.py(5): fetch", 120, 500)
    b.python("train.py(20): log", 1000, 450)
    b.python("train.py(30): step", 1535, 25)
    b.op("aten::item", 1538, 20)
    b.runtime("cudaStreamSynchronize", 1540, 15)
    b.python("train.py(31): report", 1560, 420)
    b.kernel("k1", 0, 100, launch_at=0, launch_dur=5)
    b.kernel("k2", 800, 100, launch_at=790, launch_dur=5)
    b.kernel("k3", 1500, 50, launch_at=1490, launch_dur=5)
    b.kernel("k4", 2000, 50, launch_at=1990, launch_dur=5)
    idle = analyze_trace(b.load(tmp_path)).findings.idle
    assert [(r.python, r.idle_us, r.gaps, r.cause) for r in idle.by_line] == [
        ("train.py(12): load", 700.0, 1, "host_other"), ("train.py(20): log", 600.0, 1, "host_other"),
        ("train.py(30): step", 450.0, 1, "sync")]

@pytest.mark.parametrize(("returned_at", "event_recorded_at", "cause"),
                         [(115, None, "device_stall"), (520, None, "host_other"), (115, 590, "host_other")])
def test_work_queued_through_a_gap_is_a_stalled_device_not_the_hosts(tmp_path, returned_at, event_recorded_at, cause):
    # k1 ends at 100; the host works 100-600 (an op) and k2 starts at 610. Launched by a call that
    # returned at 115, k2 sat queued 495 µs of the 510 µs gap (over half, and over 100 µs): the GPU had
    # work and ran none, whatever the host did. Returned at 520, it was queued 90 µs: the host's work.
    # With an event the host records at 590, k2 may have waited for it (cudaStreamWaitEvent): the host's
    b = TraceBuilder()
    b.kernel("k1", 0, 100, launch_at=-10)
    b.op("my_preprocessing", 100, 500)
    b.kernel("k2", 610, 500, launch_at=returned_at - 5, launch_dur=5)
    if event_recorded_at is not None:
        b.runtime("cudaEventRecord", event_recorded_at, 3)
    ra = analyze_trace(b.load(tmp_path))
    idle = ra.findings.idle
    assert idle.by_cause_us == {cause: 510}
    if cause == "device_stall":
        assert (idle.top_gaps[0].evidence["queued_op"], idle.top_gaps[0].evidence["queued_us"]) == ("k2", 495)
        assert (ra.verdict.limiter, ra.verdict.root_cause) == ("idle", "device_stall")
        assert ra.verdict.evidence["queued_us"] == 495
        assert "k2 had been launched and sat queued for 495.0 µs of it" in ra.verdict.hypothesis


@pytest.mark.parametrize("src, root", [("Pageable", "pageable_memcpy"), ("Pinned", "memcpy")])
def test_copies_that_no_compute_hides(tmp_path, src, root):
    b = TraceBuilder()
    b.memcpy(0, 800, 8_000_000, src=src, launch_at=-10)
    b.kernel("k", 800, 200, launch_at=-5)
    ra = analyze_trace(b.load(tmp_path))
    copies = detect_memcpy(ra.trace)
    # 8 MB in 800 µs = 10 GB/s; exposed 800 of a 1000 µs span
    assert copies.by_kind["HtoD"].gbps == 10.0
    assert copies.exposed_pct == 80.0
    assert copies.pageable_count == (1 if src == "Pageable" else 0)
    assert (ra.verdict.limiter, ra.verdict.root_cause) == ("data_movement", root)


def test_exposed_communication(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, stream=7)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 50, 350, stream=20)
    ra = analyze_trace(b.load(tmp_path))
    comm = detect_comm(ra.trace)
    # comm [50, 400) = 350, compute hides [50, 100) = 50: exposed 300 of a 400 µs span
    assert (comm.comm_us, comm.exposed_us) == (350, 300)
    assert comm.exposed_pct == 75.0 and comm.exposed_of_comm_pct == pytest.approx(85.71)
    assert (ra.verdict.limiter, ra.verdict.root_cause) == ("communication", "communication")


def test_communication_by_kind_each_with_its_exposed_part(tmp_path):
    """By hand: an all-reduce [0, 200) and [300, 400) µs, an all-to-all that NCCL runs as a SendRecv
    kernel under nccl:all_to_all [500, 600), a broadcast kernel [650, 700); compute [100, 350) and
    [550, 600). All-reduce 300 µs, exposed [0, 100) + [350, 400) = 150 (50%); all-to-all 100 µs, exposed
    [500, 550) = 50 (50%): the op's word, not the kernel's SendRecv; broadcast 50 µs, all exposed."""
    b = TraceBuilder()
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 200, stream=20)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 300, 100, stream=20)
    b.op("nccl:all_to_all", 480, 10)
    b.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 500, 100, stream=20, launch_at=481)
    b.kernel("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 650, 50, stream=20)
    b.kernel("gemm", 100, 250, stream=7)
    b.kernel("gemm", 550, 50, stream=7)
    comm = detect_comm(b.load(tmp_path))
    assert [(k.kind, k.kernels, k.time_us, k.exposed_us, k.exposed_pct) for k in comm.kinds] == [
        ("all_reduce", 2, 300.0, 150.0, 50.0), ("all_to_all", 1, 100.0, 50.0, 50.0), ("broadcast", 1, 50.0, 50.0, 100.0)]
    # collectives 300 + 100 + 50 = 450 µs against compute 250 + 50 = 300 µs: 1.5×
    assert (comm.comm_us, comm.compute_us, comm.comm_to_compute_x) == (450.0, 300.0, 1.5)


def test_communication_to_computation_counts_overlapping_compute_once_and_is_none_without_compute(tmp_path):
    """By hand: compute kernels [0, 100) and [50, 150) on two streams (150 µs together, not 200), an
    all-reduce [100, 160) and one [300, 340) (100 µs): 100 / 150 = 0.667×. Collectives alone: no ratio."""
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, stream=7)
    b.kernel("gemm", 50, 100, stream=8)
    for start, dur in ((100, 60), (300, 40)):
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", start, dur, stream=20)
    comm = detect_comm(b.load(tmp_path, "both.json"))
    assert (comm.comm_us, comm.compute_us, comm.comm_to_compute_x) == (100.0, 150.0, 0.667)
    alone = TraceBuilder()
    alone.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 50, stream=20)
    comm = detect_comm(alone.load(tmp_path, "alone.json"))
    assert (comm.comm_us, comm.compute_us, comm.comm_to_compute_x) == (50.0, 0.0, None)


def test_a_second_limiter_over_its_threshold_is_named_too(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, stream=7)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 100, 400, stream=20)
    b.kernel("gemm", 1000, 100, stream=7)
    ra = analyze_trace(b.load(tmp_path))
    # span 1100 µs: idle [500, 1000) = 45.5%, comm [100, 500) runs alone = 36.4% exposed
    assert ra.verdict.limiter == "idle"
    (other,) = ra.verdict.other_losses  # with its own cause and next step
    assert other.startswith("Exposed communication also costs 36.4% of the span: ")  # not "from exposed communication"
    assert other.endswith(_verdict_for("communication", ra.findings, VerdictParams(), []).next_step)
    assert not any("also costs" in note for note in ra.verdict.also)  # also says what would sharpen it


def test_kernel_launched_under_a_c10d_op_is_communication(tmp_path):
    b = TraceBuilder()
    b.op("c10d::allreduce_", 0, 50)
    b.op("record_param_comms", 5, 40)
    b.kernel("some_custom_collective", 60, 100, launch_at=10)
    b.op("aten::mm", 60, 20)
    b.kernel("gemm", 200, 100, launch_at=65)
    trace = b.load(tmp_path)
    flags = dict(zip(trace.gpu["name"].astype(str), trace.gpu["is_comm"]))
    assert flags == {"some_custom_collective": True, "gemm": False}


def test_compute_bound_names_the_hot_kernel(tmp_path):
    b = TraceBuilder()
    gemm = ("void cutlass::Kernel<cutlass_80_tensorop_s16816gemm_128x128_32x3_nn_align8>"
            "(cutlass_80_tensorop_s16816gemm_128x128_32x3_nn_align8::Params)")
    b.op("aten::mm", 0, 10)
    b.kernel(gemm, 0, 450, launch_at=1)
    b.kernel(gemm, 450, 450, launch_at=2)
    b.kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)", 900, 100)
    ra = analyze_trace(b.load(tmp_path))
    top = detect_hot_kernels(ra.trace).top[0]
    assert (top.short_name, top.count, top.total_us, top.share_of_busy_pct, top.op) == ("Kernel", 2, 900, 90.0, "aten::mm")
    assert (ra.verdict.limiter, ra.verdict.root_cause) == ("compute", "hot_kernel")
    assert "`traceagent profile --ncu 'Kernel' -- python train.py`" in ra.verdict.next_step


def test_an_amd_gpus_hot_kernel_is_profiled_with_rocm_compute_profiler_not_nsight(tmp_path):
    """Nsight Compute does not run on AMD GPUs: the same compute-bound trace on an MI300X is told AMD's profiler."""
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    b.op("aten::mm", 0, 10)
    b.kernel("Cijk_Alik_Bljk_BBS_BH_MT256x32x64", 0, 900, launch_at=1)
    b.kernel("elementwise_kernel", 900, 100)
    ra = analyze_trace(b.load(tmp_path))
    assert ra.trace.meta.amd and (ra.verdict.limiter, ra.verdict.root_cause) == ("compute", "hot_kernel")
    step = ra.verdict.next_step
    assert "`rocprof-compute profile -n hot_kernel -k 'Cijk_Alik_Bljk_BBS_BH_MT256x32x64' -- python train.py`" in step
    assert "ncu" not in step and "Nsight" not in step


def test_short_kernel_names():
    assert short_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                      "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)") \
        == "vectorized_elementwise_kernel"
    assert short_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_SendRecv"
    assert short_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == \
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def test_kernels_sharing_a_short_name_are_told_apart_by_the_argument_that_differs():
    cutlass = [f"void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_{tile}_tn_align8>"
               f"(cutlass_80_tensorop_bf16_s16816gemm_bf16_{tile}_tn_align8::Params)"
               for tile in ("64x64_64x6", "256x128_64x3")]
    # Kineto's spelling: the vector width is the same, the functor tells them apart
    kineto = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
              "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
              "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
              "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
              "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, float)"]
    # Nsight's: the wrapper is unwrapped to its lambdas, and kept where only it tells two apart
    nsight = ["void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::native::"
              f"direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::"
              f"[lambda() (instance {n})]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, "
              "const T1 &)::[lambda(int) (instance 1)]>(int, T3)" for n in (7, 12)]
    assert distinct_labels([*cutlass, "flash_fwd_kernel", *kineto, *nsight]) == [
        # past 60 characters the middle goes: the tile sizes at the end stay
        "Kernel2<cutlass_80_tensorop_bf16_s168…gemm_bf16_64x64_64x6_tn_align8>",
        "Kernel2<cutlass_80_tensorop_bf16_s168…mm_bf16_256x128_64x3_tn_align8>",
        "flash_fwd_kernel",
        "vectorized_elementwise_kernel<CUDAFunctor_add<BFloat16>>",
        "vectorized_elementwise_kernel<GeluCUDAKernelImpl::{lambda#2}::{lambda#4}::{lambda#1}>",
        "elementwise_kernel<direct_copy_kernel_cuda::{lambda#3}::{lambda#7}::{lambda#1}>",
        "elementwise_kernel<direct_copy_kernel_cuda::{lambda#3}::{lambda#12}::{lambda#1}>"]


def test_on_real_traces_every_hot_kernel_shows_a_name_of_its_own(capsys):
    for path in (DATA / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz", NSYS_BEFORE):
        top = analyzed(path).ranks[0].findings.kernels.top
        assert len({k.label for k in top}) == len(top) > len({k.short_name for k in top})
    path = DATA / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    assert main(["analyze", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index(next(line for line in lines if "Hot kernels" in line)) + 4:]
    cells = [line.split(" │")[0] for line in table[:16] if line.startswith("│ ") and not line.startswith("│   by")]
    assert len(cells) == 8 and len(set(cells)) == 8  # at 80 columns each row still names a kernel of its own


def test_nested_host_events_get_depths(tmp_path):
    b = TraceBuilder()
    b.op("outer", 0, 100)
    b.op("inner", 10, 40)
    b.runtime("cudaLaunchKernel", 20, 10)
    b.op("sibling", 60, 30)
    b.op("other_thread", 20, 10, tid=7)
    b.op("next", 100, 10)  # starts exactly where outer ends: a sibling, not a child
    b.op("instant", 105, 0)  # zero length, inside next
    trace = b.load(tmp_path)
    depth = dict(zip(trace.cpu["name"].astype(str), trace.cpu["depth"]))
    assert depth == {"outer": 0, "inner": 1, "cudaLaunchKernel": 2, "sibling": 1, "other_thread": 0,
                     "next": 0, "instant": 1}


def test_steps_and_the_slowest_step(tmp_path):
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 1000)
    b.kernel("k", 10, 500, launch_at=5)
    b.op("ProfilerStep#2", 1000, 2000)
    b.kernel("k", 1010, 500, launch_at=1005)
    b.op(LOADER, 1520, 1400, cat="user_annotation")  # step 2 waits on data
    b.kernel("k", 2990, 5, launch_at=2985)
    ra = analyze_trace(b.load(tmp_path))
    steps = ra.findings.steps
    assert (steps.count, steps.slowest, steps.max_us, steps.mean_us) == (2, 2, 2000, 1500)
    # step 2's device range [1010, 2995): busy 505, idle gap [1510, 2990) = 1480 from the loader
    step2 = next(s for s in steps.steps if s.step == 2)
    assert step2.idle_by_cause_us["dataloader"] == 1480 and step2.device_us == 1985
    # worked by hand: the median of two steps is their mean; step 2 is 500 µs longer than that; its 1480 µs
    # of loader idle is 740 µs more than the median's (0 and 1480), and the 500 µs gap before its first
    # kernel [510, 1010), other host work, 250 µs more: together more than half its extra time (its device
    # span, 1985 µs against 500, is 742.5 µs over their median)
    assert steps.slowest_vs_median == {"host_us": 500, "device_us": 742.5, "idle_us": 990,
                                       "idle_dataloader_us": 740, "idle_host_other_us": 250}
    assert slowest_step_sentence(steps) == ("The slowest step spent more than the median step on: waiting for data "
                                            "loading idle +740.0 µs, other host work idle +250.0 µs.")


def test_a_slowest_step_whose_idle_did_not_grow_is_not_explained_by_it(tmp_path):
    # three steps of one 500 µs kernel each, 10 µs in; the host's third step runs 400 µs longer, and
    # every step after the first owns the 500 µs gap before its kernel: no idle and no device span grew
    b = TraceBuilder()
    for n, length in enumerate((1000, 1000, 1400)):
        b.op(f"ProfilerStep#{n + 1}", n * 1000, length)
        b.kernel("k", n * 1000 + 10, 500, launch_at=n * 1000 + 5)
    steps = analyze_trace(b.load(tmp_path)).findings.steps
    assert (steps.slowest, steps.slowest_vs_median) == (3, {"host_us": 400})
    # the tail by hand, interpolated between the closest steps (1000, 1000, 1400 µs): 1000 + 0.8 × 400 and 0.98 × 400
    assert (steps.p90_us, steps.p99_us) == (1320.0, 1392.0)
    assert slowest_step_sentence(steps) == (
        "The slowest step took 400.0 µs more than the median step; no cause of idle grew, nor did its device work "
        "span longer. The rest is time on the host that did not leave the GPU idle longer.")


def test_a_steps_kernels_are_those_inside_its_device_work(tmp_path):
    """Built by hand: step 1 launches three kernels, step 2 one that runs after the host's step 2 ended
    (still its work: launched inside it), and a copy and a kernel launched outside any step count in none.
    So 3 and 1 kernels, 2 a step; the copy is no kernel. Of GPU 1, which runs one of step 1's: 1 and 0."""
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": "Test GPU"}, {"id": 1, "name": "Test GPU"}])
    b.op("ProfilerStep#1", 0, 1000)
    for start, device in ((100, 0), (300, 1), (500, 0)):
        b.kernel("k", start, 100, launch_at=start - 50, device=device)
    b.memcpy(700, 50, 1 << 10, launch_at=650)
    b.op("ProfilerStep#2", 1000, 1000)
    b.kernel("late", 2100, 100, launch_at=1900)
    b.kernel("outside", 2600, 100, launch_at=2500)
    rank = analyze_trace(b.load(tmp_path))
    steps, gpu1 = rank.findings.steps, rank.steps(1)
    assert [s.kernels for s in steps.steps] == [3, 1] and steps.kernels_per_step == 2.0
    assert [s.kernels for s in gpu1.steps] == [1, 0] and gpu1.kernels_per_step == 0.5


def test_a_gpu_behind_the_host_sets_the_step_time(tmp_path):
    """The host queues each step's work in 1 ms and moves on; the GPU takes 2.5 ms a step, then a
    1 ms copy no compute hides. Worked by hand: the steps' GPU work ends at 8,510 µs, 5,510 after
    the last step (more than a step: the GPU runs behind), so a step takes 8510/3 =
    2,836.667 µs a step (the host's mean is 1,000); the copy saves 1000/3 µs a step, 11.75% of it
    (it was 33.3% of the host's step, and capped at 100% where more was exposed)."""
    b = TraceBuilder()
    for i in range(3):
        b.op(f"ProfilerStep#{i + 1}", i * 1000, 1000)
        b.kernel("k", 10 + 2500 * i, 2500, launch_at=i * 1000 + 5)
    b.memcpy(7510, 1000, 1 << 20, kind="DtoH", src="Device", dst="Pinned", stream=9, launch_at=2600)
    ra = analyze_trace(b.load(tmp_path))
    steps = ra.findings.steps
    assert (steps.mean_us, steps.step_time_us) == (1000, pytest.approx(8510 / 3, abs=1e-3))
    assert steps.steps_per_s == round(3 / 8510e-6, 3)  # the loop's rate: three steps in 8,510 µs
    copies = next(s for s in ra.findings.savings if s.root_cause == "memcpy")
    assert copies.per_step_us == pytest.approx(1000 / 3, abs=1e-3) and copies.step_pct == 11.75
    assert "the steps take 2.84 ms each" in gpu_behind(steps)
    # the last step's GPU work ending 400 µs after it (less than a step) is a tail, not a GPU behind
    b = TraceBuilder()
    for i in range(3):
        b.op(f"ProfilerStep#{i + 1}", i * 1000, 1000)
        b.kernel("k", i * 1000 + 500, 900, launch_at=i * 1000 + 5)
    steps = analyze_trace(b.load(tmp_path, "tail.json")).findings.steps
    assert steps.step_time_us == steps.mean_us == 1000 and gpu_behind(steps) == "" and steps.steps_per_s == 1000.0


def test_trace_without_steps_says_what_is_missing(tmp_path):
    b = TraceBuilder()
    b.kernel("k", 0, 100)
    ra = analyze_trace(b.load(tmp_path))
    assert ra.findings.steps is None
    assert to_data(ra.record())["steps"] == {"count": 0, "mean_us": None, "max_us": None}
    assert any("no steps" in line for line in ra.verdict.also)
    assert any("`traceagent profile -- python train.py` (it records them)" in line for line in ra.verdict.also)


def test_cpu_only_trace_gets_a_verdict_that_says_so(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 100)
    ra = analyze_trace(b.load(tmp_path))
    assert ra.verdict.limiter is None and "CPU-only" in ra.verdict.headline


@pytest.mark.parametrize("window", [(0, 1), (0.25, 0.5), (0.9, 0.95)])
def test_host_overlaps_per_thread_match_a_pandas_groupby(window):
    # the reference is the plain pandas filtering and grouping by name strings that the arrays replaced
    import numpy as np
    import pandas as pd
    from conftest import RESNET_NW0

    from traceagent.detect.core.host import _host_columns
    from traceagent.trace.load import load_file

    trace = load_file(str(RESNET_NW0))
    first, last = int(trace.cpu["start"].min()), int(trace.cpu["end"].max())
    lo, hi = first + int(window[0] * (last - first)), first + int(window[1] * (last - first))
    cpu = trace.cpu
    events = cpu[(cpu["start"] < hi) & (cpu["end"] > lo) & ~cpu["name"].astype(str).str.match(r"ProfilerStep#\d+$")]
    columns = _host_columns(trace)
    inside = columns.window(lo, hi)
    assert list(cpu.index[inside]) == list(events.index)
    got = pd.DataFrame(columns.overlaps(inside, lo, hi).__dict__)
    table = pd.DataFrame({"name": events["name"].astype(str).to_numpy(), "kind": events["kind"].astype(str).to_numpy(),
                          "pid": events["pid"].to_numpy(), "tid": events["tid"].to_numpy(),
                          "depth": events["depth"].to_numpy(),
                          "overlap": (np.minimum(events["end"], hi) - np.maximum(events["start"], lo)).to_numpy()})
    want = table.groupby(["name", "kind", "pid", "tid"]).agg(overlap=("overlap", "sum"), depth=("depth", "max")).reset_index()
    want["overlap"] = np.minimum(want["overlap"], hi - lo)
    assert len(got) > 0
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)


def test_a_kernel_as_long_as_its_launch_is_not_launch_bound_at_epoch_timestamps(tmp_path):
    # Kineto's µs since the epoch pass 2**53 as ns, where a float holds 256 ns steps: read through
    # floats (as they were where some kernel after a gap had no launch call), this 6 µs launch
    # measured 6.144 µs, and the 6 µs kernel after it was "shorter than its launch"
    origin = 1_694_128_201_426_674
    b = TraceBuilder()
    b.kernel("first", origin, 100, launch_at=origin - 10)
    b.kernel("as_long", origin + 112, 6, launch_at=origin + 105, launch_dur=6)  # gap [100, 112): 12 µs
    b.kernel("shorter", origin + 130, 5, launch_at=origin + 120, launch_dur=6)  # gap [118, 130): 12 µs
    b.kernel("unlaunched", origin + 200, 5)  # gap [135, 200); its launch call is not in the trace
    idle = detect_idle(b.load(tmp_path))
    # a gap ends in launch overhead when its kernel's launch came after the gap began and took longer
    # than the kernel: only the second
    assert idle.by_cause_us.get("launch_overhead") == 12 and idle.by_cause_count["launch_overhead"] == 1


@pytest.mark.parametrize("wanted, name, found", [
    ("allreduce", "ncclKernel_AllReduce_RING_LL_Sum_float", True), ("allreduce", "multimem_all_reduce_kernel", True),
    ("all_reduce", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", True), ("all_to_all", "c10d::alltoall_base_", True),
    ("allreduce", "ncclDevKernel_AllGather_RING_LL", False), ("Kernel2", "void cutlass::Kernel2<x>(int)", True),
])
def test_a_kernel_filter_finds_its_text_case_and_underscores_aside(wanted, name, found):
    assert bool(loosely(wanted).search(name)) is found


def test_launch_times_that_are_a_queue_or_a_clock_offset_are_said_so(tmp_path):
    from traceagent.detect.detectors.launch import detect_launch, latency_note

    # by hand: three kernels launched at 0, 10 and 20 µs start at 20,000, 20,100 and 20,200 µs (behind work
    # the trace does not hold): 20,000, 20,090 and 20,180 µs after their launches, so the GPU never caught up
    b = TraceBuilder()
    for i in range(3):
        b.kernel("k", 20_000 + 100 * i, 50, launch_at=10 * i, launch_dur=5)
    queued = detect_launch(b.load(tmp_path, "queued.json"))
    assert queued.min_latency_us == 20_000.0
    assert latency_note(queued).startswith("No kernel started sooner than 20.00 ms after its launch call")
    # one kernel of two starts before its launch call: the clocks disagree
    b = TraceBuilder()
    b.kernel("k", 100, 50, launch_at=90)
    b.kernel("k", 300, 50, launch_at=310)
    skewed = detect_launch(b.load(tmp_path, "skewed.json"))
    assert skewed.before_launch_pct == 50.0 and latency_note(skewed).startswith("50.0% of kernels start before")
    # a GPU that waits for its launches: nothing to say
    b = TraceBuilder()
    b.kernel("k", 100, 50, launch_at=90)
    assert latency_note(detect_launch(b.load(tmp_path, "plain.json"))) is None
