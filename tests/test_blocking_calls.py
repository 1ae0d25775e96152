"""Every host call that waits for the GPU is a sync, on CUDA and ROCm alike, with the fix for what
blocked (vocabulary.BLOCKING_CALLS): a read-back, a synchronize, the caching allocator. Traces
are built here; the gaps and causes are worked out by hand in each test."""

from __future__ import annotations

import pytest
from builder import TraceBuilder

from traceagent import analyze
from traceagent.detect.core.vocabulary import BLOCKING, blocking


def test_a_rocm_item_through_hip_memcpy_with_stream_is_a_sync_with_its_line(tmp_path):
    # kernel 0-300 µs; `loss.item()` at train.py(42) calls hipMemcpyWithStream at 210, which returns
    # at 305 once the kernel and the 2 µs copy (300-302) are done; the next kernel is launched at
    # 700 and runs 710-800. The gap 302-710 (408 µs, 51% of the 800 µs span) follows the read-back
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    b.python("train.py(42): train_step", 0, 1000)
    b.kernel("Cijk_gemm", 0, 300, launch_at=1, call="hipLaunchKernel")
    b.op("aten::item", 200, 120)
    b.runtime("hipMemcpyWithStream", 210, 95)
    b._device("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 300, 2, 7, None, 0, "", bytes=4)
    b.kernel("Cijk_gemm", 710, 90, launch_at=700, call="hipLaunchKernel")
    analysis = analyze(b.write(tmp_path / "rocm_item.json"))
    idle = analysis.ranks[0].findings.idle
    assert idle.by_cause_us == {"sync": 408.0} and idle.idle_pct == 51.0
    site = idle.sync_sites[0]
    assert (site.call, site.op, site.python) == ("hipMemcpyWithStream", "aten::item", "train.py(42): train_step")
    v = analysis.verdict
    assert (v.limiter, v.root_cause, v.evidence["sync_kind"]) == ("idle", "sync", "copy")
    assert "keep values on the GPU" in v.next_step and "train.py(42)" in v.next_step


def test_a_caching_allocator_free_and_retry_is_a_sync_with_the_allocator_fix(tmp_path):
    # kernel A 0-100 µs; under memory pressure the allocator calls cudaFree at 25, which waits for
    # A and returns at 105, then cudaMalloc (106-150); the next kernel is launched at 170 and runs
    # 180-280. The gap 100-180 (80 µs, 28.6% of the 280 µs span) follows the free
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, launch_at=0, launch_dur=1)
    b.op("aten::empty_strided", 20, 140)
    b.runtime("cudaFree", 25, 80)
    b.runtime("cudaMalloc", 106, 44)
    b.kernel("gemm", 180, 100, launch_at=170)
    v = analyze(b.write(tmp_path / "free_retry.json")).verdict
    assert (v.limiter, v.root_cause, v.evidence["sync_call"], v.evidence["sync_kind"]) == (
        "idle", "sync", "cudaFree", "allocator")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in v.next_step
    # a fix that needs no code edit comes with the line that measures it against the run as it is
    assert "`traceagent profile --try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- python train.py`" in v.next_step
    assert "caching allocator" in v.hypothesis


def test_a_blocking_call_made_once_the_gpu_is_idle_did_not_cause_the_gap(tmp_path):
    # kernel 0-100; the host starts a pinned allocation at 150, after the GPU went idle (it waits
    # for nothing), then works until it launches the next kernel at 500 (510-600): host work
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, launch_at=0, launch_dur=1)
    b.op("cudnn_setup", 100, 400)
    b.runtime("cudaHostAlloc", 150, 10)
    b.kernel("gemm", 510, 90, launch_at=500)
    idle = analyze(b.write(tmp_path / "late_alloc.json")).ranks[0].findings.idle
    assert "sync" not in idle.by_cause_us and idle.by_cause_us["host_other"] == 410.0


@pytest.mark.parametrize("call, kind", [("cuMemcpyDtoH_v2", "copy"), ("cudaMemcpy_ptds", "copy"),
                                        ("hipDeviceSynchronize", "synchronize"), ("hipFree", "allocator"),
                                        ("cudaMallocHost", "allocator"), ("hipMemset", "memset")])
def test_names_as_runtimes_write_them_map_to_their_kind(call, kind):
    assert blocking(call).kind == kind and BLOCKING[kind].fix


def test_asynchronous_calls_are_not_blocking(tmp_path):
    # cudaMemcpyAsync returns at once: a gap after it is no sync (here: nothing on the host)
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, launch_at=0, launch_dur=1)
    b.runtime("cudaMemcpyAsync", 50, 55)
    b.kernel("gemm", 300, 100, launch_at=290)
    assert "sync" not in analyze(b.write(tmp_path / "async.json")).ranks[0].findings.idle.by_cause_us



def test_a_sync_followed_by_a_few_small_kernels_is_still_a_sync(tmp_path):
    # torch.nonzero at train.py(7): kernel 0-100; the op copies the count back (100-102) and waits
    # in cudaStreamSynchronize (30-110); right after it the same thread launches two small kernels
    # (launches at 115 and 125; kernels 122-124 and 132-134), then the GPU drains until the next
    # launch at 400 (kernel 410-500). By hand: gaps 102-122 (20 µs: the sync returned inside it),
    # 124-132 (8 µs: launch latency) and 134-410 (276 µs: after the sync and its two trailing
    # kernels). The host between 134 and 400 is busy in the op, which would read as host work
    b = TraceBuilder()
    b.python("train.py(7): step", 0, 600)
    b.kernel("reduce_kernel", 0, 100, launch_at=0, launch_dur=1)
    b.op("aten::nonzero", 20, 380)
    b._device("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 100, 2, 7, None, 0, "", bytes=8)
    b.runtime("cudaStreamSynchronize", 30, 80)
    b.kernel("nonzero_kernel", 122, 2, launch_at=115, launch_dur=5)
    b.kernel("write_indices", 132, 2, launch_at=125, launch_dur=5)
    b.kernel("gemm", 410, 90, launch_at=400, launch_dur=5)
    r = analyze(b.write(tmp_path / "nonzero.json")).ranks[0]
    causes = sorted(zip(r.gaps["dur"] // 1000, r.gaps["cause"]))
    assert causes == [(8, "launch_latency"), (20, "sync"), (276, "sync")]
    site = r.findings.idle.sync_sites[0]
    assert (site.call, site.op, site.count, site.idle_us) == ("cudaStreamSynchronize", "aten::nonzero", 2, 296.0)


def test_kernels_another_thread_launched_after_a_sync_do_not_end_its_wait(tmp_path):
    # the same shape, but the two kernels after the sync come from another thread: launched once
    # the device was idle, they queue nothing, so the host is still behind and the 276 µs gap is
    # still the sync's (the drain ends only when work is queued again)
    b = TraceBuilder()
    b.kernel("reduce_kernel", 0, 100, launch_at=0, launch_dur=1)
    b.op("aten::nonzero", 20, 380)
    b.runtime("cudaStreamSynchronize", 30, 80)
    b.kernel("nonzero_kernel", 122, 2, launch_at=115, launch_dur=5)
    b.kernel("write_indices", 132, 2, launch_at=125, launch_dur=5)
    for event in b.events[-4:]:  # the two launches (and their kernels' records stay on the GPU)
        if event["cat"] == "cuda_runtime":
            event["tid"] = 999
    b.kernel("gemm", 410, 90, launch_at=400, launch_dur=5)
    r = analyze(b.write(tmp_path / "other_thread.json")).ranks[0]
    assert dict(zip(r.gaps["dur"] // 1000, r.gaps["cause"]))[276] == "sync"


def test_on_an_nsight_export_a_masked_select_sync_with_trailing_kernels_is_named_by_its_nvtx_range(tmp_path):
    # a real Nsight export (test-cuda/report1) with a masked_select added on its launching thread:
    # emit_nvtx's range `aten::masked_select, seq = 3, …` around a cudaStreamSynchronize that waits
    # for the first kernel and returns 5 µs after it ends; right after, the thread launches two 2 µs
    # kernels (launches at +10 and +20 µs, kernels at +15 and +25 µs). By hand: the gap from the
    # second one's end (+27 µs) to the export's next device work follows the sync through them
    import shutil
    import sqlite3

    from conftest import DATA

    copy = tmp_path / "masked_select.sqlite"
    shutil.copy(DATA / "test-cuda" / "report1.sqlite", copy)
    con = sqlite3.connect(copy)
    start, end, corr = con.execute(
        "SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()
    (thread,) = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
                            "ORDER BY COUNT(*) DESC LIMIT 1").fetchone()
    (sync_id,) = con.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()
    con.execute("INSERT INTO StringIds VALUES (?, 'cudaStreamSynchronize_v3020')", (sync_id,))
    (launch_id,) = con.execute("SELECT id FROM StringIds WHERE value = 'cudaLaunchKernel_v7000'").fetchone()
    runtime = ("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
               "returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)")
    con.execute(runtime, (start + 1000, end + 5000, thread, 900000, sync_id))
    returned = end + 5000
    for n, (launch_at, runs_at) in enumerate(((returned + 10_000, returned + 15_000),
                                              (returned + 20_000, returned + 25_000),
                                              (returned + 30_000, returned + 38_000))):
        con.execute(runtime, (launch_at, launch_at + 3000, thread, 900001 + n, launch_id))
        columns = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        copied = ", ".join("?" if c in ("start", "end", "correlationId") else c for c in columns)
        con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(columns)}) SELECT {copied} "
                    "FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = ?",
                    [{"start": runs_at, "end": runs_at + 2000, "correlationId": 900001 + n}[c]
                     for c in columns if c in ("start", "end", "correlationId")] + [corr])
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
                "textId INTEGER, globalTid INTEGER)")
    con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 'aten::masked_select, seq = 3, sizes = [[1024], [1024]]', "
                "NULL, ?)", (start, returned + 30_000, thread))
    con.commit()
    con.close()
    r = analyze(copy, use_cache=False).ranks[0]
    after = r.gaps[r.gaps["start"] == returned + 27_000].iloc[0]  # from the second trailing kernel's end
    assert after["cause"] == "sync" and after["dur"] == 11_000  # to the third, launched late too: still the wait's
    site = r.findings.idle.sync_sites[0]
    assert (site.call, site.op) == ("cudaStreamSynchronize", "aten::masked_select")


def _metrics_loop(b: TraceBuilder, t0: float, classes: int) -> float:
    """A per-class metrics loop after a forward pass, as `for c in classes: acc[c] = (pred == c).sum().item()`:
    per class, three 2 µs kernels launched 15 µs apart at metrics.py(13), then `.item()` at
    metrics.py(14) (cudaMemcpyAsync, its 2 µs copy, cudaStreamSynchronize), then 20 µs of Python
    at metrics.py(15). Returns when the loop ends."""
    t = t0
    for _ in range(classes):
        b.python("metrics.py(13): per_class", t, 45)
        for k in range(3):
            b.kernel("eq_sum_kernel", max(t + 15 * k + 10, b.busy_until), 2, launch_at=t + 15 * k, launch_dur=15)
            b.busy_until = max(t + 15 * k + 10, b.busy_until) + 2
        b.python("metrics.py(14): per_class", t + 45, 15)
        b.op("aten::item", t + 45, 15)
        copy_at = max(t + 55, b.busy_until)
        b._device("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", copy_at, 2, 7, t + 45, 5, "cudaMemcpyAsync", bytes=8)
        b.busy_until = copy_at + 2
        returned = max(t + 60, copy_at + 3)
        b.runtime("cudaStreamSynchronize", t + 50, returned - (t + 50))
        b.python("metrics.py(15): per_class", returned, 20)
        t = returned + 20
    return t


def test_a_per_class_item_loop_is_a_sync_not_launch_overhead_and_names_both_lines(tmp_path):
    # a 1000 µs forward kernel, then 6 classes; the first class's kernels queue behind the forward
    # pass and its copy ends at 1008, its wait returns at 1009. By hand, after each wait: the wait's
    # gap to the next class's first kernel (31 µs after the first wait: 1008-1039; 33 µs after the
    # others: the copy ends 3 µs before the wait returns, then 20 µs of Python and 10 µs of launch),
    # then 13 µs before each of its next two kernels and 13 µs before its copy (2 µs ops launched 15 µs
    # apart: launch-bound). After the last wait, 33 µs to the next step's kernel. Before this rule
    # the 13 µs gaps read as launch overhead (39 µs a class against the wait's 33): now every gap
    # until the host queues work again is the wait's: 70 + 4 × 72 + 33 = 391 µs.
    b = TraceBuilder()
    b.busy_until = 0.0
    b.op("ProfilerStep#1", 0, 2000)
    b.kernel("gemm", 0, 1000, launch_at=0)
    b.busy_until = 1000.0
    end = _metrics_loop(b, 100.0, 6)
    b.kernel("gemm", end + 10, 300, launch_at=end)  # the next step's work
    analysis = analyze(b.write(tmp_path / "metrics_loop.json"))
    idle = analysis.ranks[0].findings.idle
    gaps = analysis.ranks[0].gaps
    long = gaps[gaps["dur"] >= 10_000]
    assert set(long["cause"]) == {"sync"} and "launch_overhead" not in idle.by_cause_us
    assert idle.by_cause_us == {"sync": 391.0}
    v = analysis.verdict
    assert (v.limiter, v.root_cause) == ("idle", "sync")
    # the wait's line, and the host work it exposed that holds the most idle: the Python after each
    # `.item()` (line 15: 31 + 4 × 33 + 33 µs at the gaps' middles) over the launches (line 13: 2 × 13 a class)
    assert v.evidence["python"] == "metrics.py(14): per_class" and v.evidence["after"] == "metrics.py(15): per_class"
    assert "metrics.py(14)" in v.hypothesis and "metrics.py(15)" in v.hypothesis


def test_a_cpu_copy_then_milliseconds_of_bookkeeping_is_a_sync_with_both_lines(tmp_path):
    # predictions 0-500 µs; `.cpu()` at eval.py(30) copies them (500-520) and returns at 525; then
    # 3 ms of Python bookkeeping at eval.py(31), which sends a small tensor to the GPU at 1500
    # (copy 1510-1512); the next kernel is launched at 3530 (3540-4000). By hand: gaps 520-1510
    # (990 µs: the wait returned inside it) and 1512-3540 (2028 µs: the host never queued work
    # again since the wait, so it is the wait's too, not "other host work")
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 4000)
    b.kernel("logits_gemm", 0, 500, launch_at=0)
    b.python("eval.py(30): evaluate", 480, 46)
    b.op("aten::_to_copy", 485, 40)
    b.runtime("cudaMemcpyAsync", 486, 4)
    b._device("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 500, 20, 7, None, 0, "", bytes=4 << 20)
    b.runtime("cudaStreamSynchronize", 490, 35)
    b.python("eval.py(31): evaluate", 526, 3000)
    b.runtime("cudaMemcpyAsync", 1500, 6, correlation=None)
    b._device("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1510, 2, 7, 1500, 6, "cudaMemcpyAsync", bytes=64)
    b.kernel("next_step_gemm", 3540, 460, launch_at=3530)
    analysis = analyze(b.write(tmp_path / "cpu_then_bookkeeping.json"))
    idle = analysis.ranks[0].findings.idle
    assert idle.by_cause_us == {"sync": 990.0 + 2028.0}
    v = analysis.verdict
    assert (v.limiter, v.root_cause) == ("idle", "sync")
    assert v.evidence["python"] == "eval.py(30): evaluate" and v.evidence["after"] == "eval.py(31): evaluate"
    top = idle.top_gaps[0]
    assert top.cause == "sync" and top.evidence["after"] == "eval.py(31): evaluate"


def _item_then_python(python_us: float, steps: int = 4) -> TraceBuilder:
    """Each step: a 100 µs kernel launched at 0 (runs 10-110); `.item()` at train.py(41) waits in
    cudaStreamSynchronize from 7 until 111, 1 µs after the kernel ends; then `python_us` of Python
    at train.py(42) from 112; the next step starts 20 µs after the Python began plus its length."""
    b = TraceBuilder()
    t, step = 0.0, python_us + 120
    for i in range(steps):
        b.op(f"ProfilerStep#{i + 1}", t, step)
        b.kernel("gemm", t + 10, 100, launch_at=t)
        b.python("train.py(41): train_step", t + 6, 106)
        b.op("aten::item", t + 6, 105)
        b.runtime("cudaStreamSynchronize", t + 7, 104)
        b.python("train.py(42): train_step", t + 112, python_us)
        t += step
    return b


def test_a_wait_whose_removal_the_replay_finds_worth_little_points_at_the_host_work_first(tmp_path):
    # 1 ms of Python after each wait, 1120 µs steps. By hand: the gap from a kernel's end (110) to the
    # next step's kernel (1130) is 1020 µs, a sync's: 3 of them over 4 steps, 765 µs a step, 68.3% of
    # it (the bound). Without the wait the call keeps only its 1 µs after the kernel, so the host runs
    # 103 µs earlier each step and the step is 103 / 1120 = 9.2% shorter: under a quarter of the
    # bound. The host's 1 ms of Python, not the wait, paces the step.
    analysis = analyze(_item_then_python(1000).write(tmp_path / "host_paced.json"), use_cache=False)
    v = analysis.verdict
    assert (v.limiter, v.root_cause) == ("idle", "sync")
    assert (v.saving.step_pct, v.saving.simulated_pct) == (68.3, 9.2)
    assert "the wait does not set the pace" in v.hypothesis and "9.2% shorter" in v.hypothesis
    assert v.next_step.startswith("Cut the host's work at train.py(42): train_step first")
    assert "Then remove the wait at train.py(41): train_step" in v.next_step
    # where the share asked for is smaller, a 9.2% prediction is enough: the wait first, as usual
    asked = analyze(tmp_path / "host_paced.json", use_cache=False, settings=["verdict.replayed_share=0.1"]).verdict
    assert asked.next_step.startswith("Remove the wait at train.py(41): train_step")


def test_a_wait_whose_removal_the_replay_finds_worth_its_bound_is_the_first_fix(tmp_path):
    # 100 µs of Python after each wait, 220 µs steps: gaps of 120 µs, 3 over 4 steps, 40.9% of a step
    # (the bound); without the wait the host again runs 103 µs earlier: 103 / 220 = 46.8% (the last
    # step's wait counts in the replay, not in the gaps before a next step: above the bound)
    analysis = analyze(_item_then_python(100).write(tmp_path / "wait_paced.json"), use_cache=False)
    v = analysis.verdict
    assert (v.saving.step_pct, v.saving.simulated_pct) == (40.91, 46.82)
    assert v.next_step.startswith("Remove the wait at train.py(41): train_step")
    assert "the wait does not set the pace" not in v.hypothesis
