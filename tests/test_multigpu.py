"""Several GPUs and several ranks: every number on its rank and GPU, the same in every command,
and the straggler found by its collectives. Expected numbers are computed by hand from traces
built here (the comments show the arithmetic), or read from the raw files by tests/rawtrace.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import rawtrace
from builder import TraceBuilder
from conftest import DATA, DLRM_8RANK, NSYS_BEFORE, analyzed

import traceagent
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.format import duration

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def run(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


# -- one rank, two GPUs ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory) -> Path:
    # GPU 0: kernels [0, 100) and [200, 300) µs: span 300, busy 200, idle 100
    # GPU 1: kernels [50, 150) and [250, 450) µs: span 400, busy 300, idle 100
    # the rank: wall span 0..450 = 450 µs; device time 300 + 400 = 700 µs; idle 200 / 700 = 28.57%
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, device=0, launch_at=0)
    b.kernel("gemm", 200, 100, device=0, launch_at=190)
    b.kernel("gemm", 50, 100, device=1, launch_at=45)
    b.kernel("gemm", 250, 200, device=1, launch_at=240)
    b.top["deviceProperties"] = [{"id": 0, "name": "Test GPU"}, {"id": 1, "name": "Test GPU"}]
    return b.write(tmp_path_factory.mktemp("two") / "two_gpus.json")


def test_each_gpu_has_its_own_span_and_the_rank_its_wall_span(two_gpus):
    rank = traceagent.analyze(two_gpus).ranks[0]
    devices = rank.breakdown.devices
    assert (devices[0].span_us, devices[0].idle_us) == (300.0, 100.0)
    assert (devices[1].span_us, devices[1].idle_us) == (400.0, 100.0)
    total = rank.breakdown.total
    assert (total.span_us, total.device_time_us, total.idle_us, total.idle_pct) == (450.0, 700.0, 200.0, 28.57)
    idle = rank.findings.idle
    assert (idle.span_us, idle.device_time_us, idle.idle_pct) == (450.0, 700.0, 28.57)


def test_info_analyze_report_and_ask_agree_on_each_gpu(two_gpus, capsys):
    info = json.loads(run(capsys, "info", str(two_gpus), "--json"))["traces"][0]
    assert info["device_spans_us"] == {"0": 300.0, "1": 400.0} and info["span_us"] == 450.0
    analysis = json.loads(run(capsys, "analyze", str(two_gpus), "--json"))["ranks"][0]
    assert {d: b["span_us"] for d, b in analysis["breakdown"]["devices"].items()} == {"0": 300.0, "1": 400.0}
    assert analysis["breakdown"]["span_us"] == 450.0
    report = run(capsys, "report", str(two_gpus))
    assert "| 0 | 0 | 300.0 µs |" in report and "| 0 | 1 | 400.0 µs |" in report
    answer = run(capsys, "ask", str(two_gpus), "summarize this trace")
    assert "rank 0, GPU 0: span 300.0 µs" in answer and "rank 0, GPU 1: span 400.0 µs" in answer
    assert "28.6% of device time (2 GPUs)" in run(capsys, "analyze", str(two_gpus))


def test_the_nsight_pair_says_the_same_span_everywhere(capsys):
    info = json.loads(run(capsys, "info", str(NSYS_BEFORE), "--json"))["traces"][0]
    rank = json.loads(run(capsys, "analyze", str(NSYS_BEFORE), "--json"))["ranks"][0]
    spans = {d: b["span_us"] for d, b in rank["breakdown"]["devices"].items()}
    assert info["device_spans_us"] == spans and set(spans) == {"0", "1"}
    assert all(290_000 < s < 310_000 for s in spans.values())  # each GPU ran about 300 ms
    # the job's span is the wall span, not the sum (which would be about 600 ms)
    assert info["span_us"] == rank["breakdown"]["span_us"] < 310_000
    report = run(capsys, "report", str(NSYS_BEFORE))
    answer = run(capsys, "ask", str(NSYS_BEFORE), "summarize this trace")
    for device, span in spans.items():
        assert f"| 0 | {device} | {duration(span)} |" in report
        assert f"rank 0, GPU {device}: span {duration(span)}" in answer


def test_every_tool_takes_a_rank_and_a_gpu(two_gpus):
    tools = {t.name: t for t in build_tools(AnalysisContext(traceagent.analyze(two_gpus)))}
    one = json.loads(tools["idle_gaps"].invoke({"rank": 0, "device": 1}))
    assert one["scope"] == {"rank": 0, "device": 1, "devices": [0, 1]}
    assert (one["span_us"], one["idle_us"], one["gaps"]) == (400.0, 100.0, 1)
    # one GPU's idle is over its own span: no device time or share of it, left out rather than null
    assert "device_time_us" not in one and "by_cause_pct" not in one and None not in one.values()
    for name, schema in ((t.name, t.args) for t in tools.values() if t.name not in ("calc", "scaling")):
        assert {"rank", "device"} <= set(schema), name
    bad = tools["hot_kernels"]
    from traceagent.agent.tools import ToolInputError
    with pytest.raises(ToolInputError, match="no GPU 5"):
        bad.invoke({"device": 5})


def test_a_single_rank_trace_is_rank_0_for_the_tools():
    from conftest import RESNET_NW0

    tools = {t.name: t for t in build_tools(AnalysisContext(analyzed(RESNET_NW0)))}
    result = json.loads(tools["idle_gaps"].invoke({"rank": 0}))
    assert result["scope"]["rank"] == 0 and result["idle_us"] > 0


# -- several ranks: who waits for whom ---------------------------------------------------------

STEP, COMPUTE, COMM, STEPS, RANKS = 5000.0, 1000.0, 200.0, 5, 4


def write_job(folder: Path, late_rank: int | None = None, delay: float = 2000.0, how: str = "dataloader",
              overlapped: bool = False, ranks: int = RANKS, late_ranks: list[int] | None = None) -> Path:
    """`ranks` ranks, STEPS steps of one compute kernel then one all-reduce; each rank's clock is
    offset by a different amount (as on different hosts). The late rank (`late_ranks`: each step's), by `how`:
    - "dataloader": its host loads data for `delay` µs before launching its compute;
    - "host_work": its host runs other work (an op that launches nothing) for `delay` µs first;
    - "slow_kernel": its compute kernel runs `delay` µs longer;
    - "sync_then_host": it runs a short kernel, waits for it (cudaStreamSynchronize), then runs other host work for
      the rest of `delay` before launching its compute: idle after a sync, which the host's work paces.
    Every other rank enters the all-reduce on time and sits in it until the late rank arrives."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        clock = 1_000_000.0 * (rank + 1)  # a different clock per rank
        b = TraceBuilder(distributedInfo={"rank": rank, "world_size": ranks})
        for k in range(STEPS):
            t = clock + k * STEP
            late = rank == (late_ranks[k] if late_ranks else late_rank)
            host_first = late and how in ("dataloader", "host_work", "sync_then_host")
            start = t + (delay if host_first else 0)
            if host_first and how == "sync_then_host":
                b.kernel("fill_kernel", t, 20, launch_at=t - 5)
                b.runtime("cudaStreamSynchronize", t + 2, 20)
                b.op("aten::copy_checkpoint_to_disk", t + 25, delay - 30, cat="cpu_op")
            elif host_first:
                b.op(LOADER if how == "dataloader" else "aten::copy_checkpoint_to_disk", t, delay,
                     cat="user_annotation" if how == "dataloader" else "cpu_op")
            dur = COMPUTE + (delay if late and how == "slow_kernel" else 0)
            b.kernel("volta_sgemm_128x64_nn", start, dur, launch_at=start - 5)
            # everyone is in by the late rank's entry; the collective ends COMM after that
            last_entry = t + COMPUTE + (delay if late_rank is not None or late_ranks else 0)
            if overlapped:  # on a side stream, under the compute kernel, all ranks together
                b.kernel(ALLREDUCE, t + 100, COMM, stream=20, launch_at=t + 95)
            else:
                entry = start + dur
                b.kernel(ALLREDUCE, entry, last_entry + COMM - entry, launch_at=entry - 5)
        b.write(folder / f"rank{rank}.json")
    return folder


def test_a_straggler_late_after_syncs_its_host_work_paces_is_told_to_cut_that_work(tmp_path):
    """Rank 2 waits on a 20 µs kernel, then works on its host for the rest of 2000 µs before its compute: idle after a
    sync makes it late, yet its own replay without the waits is hardly shorter (the host's work paces it), so the
    job's next step is that work (its own verdict's), not removing the sync."""
    analysis = traceagent.analyze(write_job(tmp_path / "job", late_rank=2, how="sync_then_host"))
    assert (analysis.comparison.straggler, analysis.comparison.straggler_cause) == (2, "sync")
    replayed = next(s for s in analysis.rank(2).findings.savings if s.root_cause == "sync").simulated_pct
    assert replayed is not None and replayed < 5
    v = analysis.verdict
    assert f"replayed without the waits (`sync=0`), the step is only {replayed:.1f}% shorter" in v.hypothesis
    assert v.next_step == f"Look at rank 2 first (`traceagent analyze` on its trace). {analysis.rank(2).verdict.next_step}"
    assert v.next_step.split(". ", 1)[1].startswith("Cut the host's work")


@pytest.mark.parametrize("how, cause, words", [("dataloader", "dataloader", "data loading"),
                                               ("host_work", "host_other", "other host work")])
def test_a_rank_late_from_host_work_is_the_straggler(tmp_path, how, cause, words):
    analysis = traceagent.analyze(write_job(tmp_path / "job", late_rank=2, how=how))
    c = analysis.comparison
    assert (c.matched, c.straggler, c.straggler_last_pct, c.straggler_cause) == (STEPS, 2, 100.0, cause)
    rows = {r.rank: r for r in c.ranks}
    # each on-time rank waits `delay` per step: 5 × 2000 µs; its communication proper is 5 × 200 µs
    for rank in (0, 1, 3):
        assert (rows[rank].waiting_us, rows[rank].communication_us, rows[rank].last_count) == (10_000.0, 1000.0, 0)
    assert (rows[2].waiting_us, rows[2].last_count) == (0.0, STEPS)
    assert c.others_waiting_us == 30_000.0
    # device time of an on-time rank: first kernel at t=0, last all-reduce ends 4×5000 + 3200 = 23200 µs
    assert c.others_exposed_waiting_pct == round(100 * 30_000 / (3 * 23_200), 2)
    v = analysis.verdict
    assert (v.limiter, v.root_cause, v.rank) == ("idle", "straggler", 2)
    assert v.headline.startswith("Rank 2 is the straggler") and words in v.headline
    assert v.evidence["others_waiting_us"] == 30_000.0


def test_fixing_the_straggler_saves_the_waiting_it_causes_not_the_waiting_others_cause(tmp_path):
    # rank 1 is late by 2000 µs in steps 0-2, rank 2 in steps 3-4: the three others wait each time, so
    # rank 1 causes 3 × 3 × 2000 = 18,000 µs of waiting and rank 2 12,000 µs; ranks 0, 2 and 3 wait
    # 10,000 + 6,000 + 10,000 = 26,000 µs in all, none of it hidden by compute. Rank 1 is the straggler
    # (60% of the waiting): fixing it removes the 18,000 µs it causes, not the 26,000 µs its peers wait
    analysis = traceagent.analyze(write_job(tmp_path / "job", late_ranks=[1, 1, 1, 2, 2], how="host_work"))
    c = analysis.comparison
    assert (c.straggler, c.caused_waiting_pct, c.others_waiting_us) == (1, 60.0, 26_000.0)
    assert {r.rank: r.caused_waiting_us for r in c.ranks} == {0: 0.0, 1: 18_000.0, 2: 12_000.0, 3: 0.0}
    saving = analysis.verdict.saving
    assert saving.upper_bound_us == 18_000.0
    # over the others' device time: each on-time rank's runs from 0 to 4 × 5000 + 3200 µs (rank 2's too: it
    # is late in its own steps' host work, not at either end)
    assert saving.pct == round(100 * 18_000 / (3 * 23_200), 2)


def test_a_rank_with_slower_kernels_is_the_straggler(tmp_path):
    analysis = traceagent.analyze(write_job(tmp_path / "job", late_rank=1, delay=1500.0, how="slow_kernel"))
    c = analysis.comparison
    assert (c.straggler, c.straggler_cause) == (1, "hot_kernel")
    assert {r.rank: r.waiting_us for r in c.ranks} == {0: 7500.0, 1: 0.0, 2: 7500.0, 3: 7500.0}  # 5 × 1500
    v = analysis.verdict
    assert (v.limiter, v.root_cause, v.rank) == ("compute", "straggler", 1)
    assert "longer compute" in v.headline and "uneven work" in v.next_step


def test_well_overlapped_communication_is_not_blamed(tmp_path):
    analysis = traceagent.analyze(write_job(tmp_path / "job", overlapped=True))
    c = analysis.comparison
    assert c.matched == STEPS and c.straggler is None
    assert all(r.waiting_us == 0.0 for r in c.ranks)
    assert analysis.verdict.root_cause not in ("straggler", "communication")
    assert all(r.findings.comm.exposed_pct == 0.0 for r in analysis.ranks)


def test_dlrm_waiting_matches_a_hand_computation():
    # tests/rawtrace.py matches NCCL kernels by name and order and aligns clocks by end times, in
    # plain Python over the raw JSON files
    expected = rawtrace.collective_waiting({int(p.name[len("worker")]): p for p in DLRM_8RANK.glob("worker*.json.gz")})
    c = analyzed(DLRM_8RANK).comparison
    assert c.matched == expected["matched"]
    for row in c.ranks:
        assert row.waiting_us == pytest.approx(expected["waiting_us"][row.rank], abs=0.01)
        assert row.last_count == expected["last"][row.rank]
        assert row.caused_waiting_us == pytest.approx(expected["caused_us"][row.rank], abs=0.01)
    # the rank that causes the most waiting (a third of it or more) is the straggler: rank 7, also last most often
    assert c.straggler == max(expected["caused_us"], key=expected["caused_us"].get) == 7


def test_the_waiting_a_rank_causes_is_the_waiting_the_others_report(tmp_path):
    # HTA's two sampled ranks: after the clocks are aligned, entries lie further apart than the early
    # rank's kernel lasted, so its waiting is cut at the kernel's length; what the late rank causes
    # is cut the same way (tests/rawtrace.py in plain Python), and with two ranks each causes exactly
    # what the other waits
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        shutil.copy(DATA / "hta" / f"sampled_rank-{rank}.json.gz", job)
    expected = rawtrace.collective_waiting({rank: job / f"sampled_rank-{rank}.json.gz" for rank in (0, 1)})
    rows = {r.rank: r for r in traceagent.analyze(job).comparison.ranks}
    for rank, other in ((0, 1), (1, 0)):
        assert rows[rank].waiting_us == pytest.approx(expected["waiting_us"][rank], abs=0.01)
        assert rows[rank].caused_waiting_us == pytest.approx(expected["caused_us"][rank], abs=0.01)
        assert rows[rank].caused_waiting_us == pytest.approx(rows[other].waiting_us, abs=0.01)


# -- loading multi-rank data ---------------------------------------------------------------------

def test_a_merged_multi_rank_file_loads_as_its_ranks(tmp_path):
    # as TraceLens' TraceFusion writes it: every event tagged args.rank, pids and correlation ids
    # offset by rank so the processes stay apart (the rank files are the straggler job above)
    job = write_job(tmp_path / "job", late_rank=2)
    merged = []
    for rank in range(RANKS):
        doc = json.loads((job / f"rank{rank}.json").read_text())
        for event in doc["traceEvents"]:
            event["args"]["rank"] = rank
            event["pid"] = event["pid"] + rank * 1000
            if "correlation" in event["args"]:
                event["args"]["correlation"] += rank * 100_000
            merged.append(event)
    path = tmp_path / "merged_trace.json"
    path.write_text(json.dumps({"traceEvents": merged}))
    loaded = traceagent.load(path)
    assert [t.meta.rank for t in loaded.traces] == list(range(RANKS))
    assert all(list(t.meta.devices) == [0] for t in loaded.traces)  # one GPU each, not four on one rank
    analysis = traceagent.analyze(loaded)
    assert (analysis.comparison.straggler, analysis.verdict.root_cause) == (2, "straggler")


def test_ranks_named_by_process_labels_split_too(tmp_path):
    # other mergers label each process "rank N" in process_name metadata instead
    events = []
    for rank in range(2):
        pid = 500 + rank
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"Rank {rank}"}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": 1, "ts": 10.0, "dur": 50.0,
                       "args": {}})
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": pid, "tid": 7, "ts": 20.0 + rank, "dur": 30.0,
                       "args": {"device": 0, "stream": 7}})
    path = tmp_path / "labelled.json"
    path.write_text(json.dumps({"traceEvents": events}))
    traces = traceagent.load(path).traces
    assert [(t.meta.rank, len(t.gpu), len(t.cpu)) for t in traces] == [(0, 1, 1), (1, 1, 1)]


def test_untagged_device_events_make_no_rank_of_their_own(tmp_path):
    # host events tagged with two ranks, device events with none (-1): two ranks, not a third "-1"
    events = []
    for rank in range(2):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 500 + rank, "tid": 1, "ts": 10.0,
                       "dur": 50.0, "args": {"rank": rank}})
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20.0, "dur": 30.0,
                   "args": {"device": 0, "stream": 7}})
    path = tmp_path / "half_tagged.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert [(t.meta.rank, len(t.cpu)) for t in traceagent.load(path).traces] == [(0, 1), (1, 1)]


def test_nested_rank_directories_load_and_say_which_files(tmp_path):
    src = sorted(DLRM_8RANK.glob("worker*.json.gz"))[:2]
    for i, file in enumerate(src):
        (tmp_path / f"rank{i}").mkdir()
        (tmp_path / f"rank{i}" / "trace.json.gz").write_bytes(file.read_bytes())
    (tmp_path / "rank1" / "older.json.gz").write_bytes(src[1].read_bytes())  # two files: the last in name order
    job = traceagent.load(tmp_path)
    assert [t.meta.rank for t in job.traces] == [0, 1]
    assert any("rank1/ holds 2 trace files; took trace.json.gz" in w for w in job.traces[0].meta.warnings)


def test_offset_amd_device_ids_take_the_listed_gpu_name(tmp_path):
    # deviceProperties lists id 0; the kernels carry the GPU's system index, 9
    b = TraceBuilder(device_name="AMD Instinct MI300X")
    b.kernel("gemm", 0, 100, device=9, launch_at=0)
    trace = b.load(tmp_path)
    assert trace.meta.devices == {9: "AMD Instinct MI300X"}


@pytest.mark.parametrize("device", [0, 2])
def test_a_gpu_listed_with_an_empty_name_is_named_by_its_id(tmp_path, device):
    # as TraceLens' vLLM graph-execution trace on MI300 lists it: {"id": 0, "name": ""}, work on GPU 2
    b = TraceBuilder(device_name="")
    b.kernel("gemm", 0, 100, device=device, launch_at=0)
    trace = b.load(tmp_path)
    assert trace.meta.devices == {device: f"GPU {device}"}


MI300X = {"warpSize": 64, "computeMajor": 9, "computeMinor": 4, "numSms": 304, "totalGlobalMem": 206141652992}


@pytest.mark.parametrize(("properties", "named"), [
    (MI300X, "AMD Instinct MI300X (by its properties)"),  # TraceLens' vLLM trace's: 192 GiB
    (MI300X | {"totalGlobalMem": 256 * 10**9}, "AMD Instinct MI325X (by its properties)"),
    ({"warpSize": 32, "computeMajor": 9, "computeMinor": 0, "numSms": 132, "totalGlobalMem": 85 * 10**9},
     "NVIDIA H100 SXM (by its properties)"),
    (MI300X | {"numSms": 999}, "AMD GPU"),  # an AMD GPU the table does not know: AMD's, by its 64-wide wavefront
    ({"warpSize": 32, "computeMajor": 12, "computeMinor": 0, "numSms": 1}, "GPU 0"),  # nothing known: its id
])
def test_a_gpu_listed_without_a_name_is_named_by_its_properties(tmp_path, properties, named):
    b = TraceBuilder(deviceProperties=[{"id": 0, "name": ""} | properties])
    b.kernel("gemm", 0, 100, launch_at=0)
    trace = b.load(tmp_path)
    assert trace.meta.devices == {0: named} and trace.meta.amd == named.startswith("AMD")


@pytest.mark.parametrize("name", ["multimem_all_reduce_kernel<bf16>", "ncclDevKernel_Generic",
                                  "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
                                  "two_shot_all_reduce_kernel"])
def test_collective_kernels_old_and_new_are_communication(tmp_path, name):
    b = TraceBuilder()
    b.kernel(name, 0, 100, launch_at=0)
    b.kernel("gemm", 200, 100, launch_at=190)
    trace = b.load(tmp_path)
    assert trace.gpu.set_index("name")["is_comm"].to_dict() == {name: True, "gemm": False}


def test_the_straggler_verdict_names_the_users_code_that_held_the_late_rank(tmp_path):
    # rank 2's host work before each step runs in the user's preprocess.py, which calls numpy (a
    # library frame inside it): the verdict names the user's line as gap evidence would
    job = write_job(tmp_path / "job", late_rank=2, how="host_work")
    doc = json.loads((job / "rank2.json").read_text())
    for event in [e for e in doc["traceEvents"] if e.get("name") == "aten::copy_checkpoint_to_disk"]:
        for name, inset in (("preprocess.py(12): augment", 0), ("numpy/core/fromnumeric.py(57): _wrapfunc", 10)):
            doc["traceEvents"].append({"ph": "X", "cat": "python_function", "name": name, "pid": event["pid"],
                                       "tid": event["tid"], "ts": event["ts"] + inset, "dur": event["dur"] - 2 * inset})
    (job / "rank2.json").write_text(json.dumps(doc))
    v = traceagent.analyze(job).verdict
    assert (v.root_cause, v.evidence["straggler_rank"], v.evidence["straggler_cause"]) == ("straggler", 2, "host_other")
    assert v.evidence["python"] == "preprocess.py(12): augment"
    assert "delayed by other host work (at preprocess.py(12): augment)" in v.headline


def test_a_rank_late_into_one_collective_per_step_is_the_straggler_by_the_waiting_it_causes(tmp_path):
    # 8 ranks, 6 steps of 14 all-reduces (84); rank 3 enters each step's first all-reduce 1.5 ms
    # late; in the others one rank, in turn, is 20 µs last. Rank 3 is last in 6 + 2 of 84 (under
    # half), yet by hand it causes 6 × 7 × 1500 µs = 63 ms of waiting (plus its turns' 20 µs).
    ranks, steps, per_step, lag, jitter = 8, 6, 14, 1500.0, 20.0
    job = tmp_path / "job"
    job.mkdir()
    for rank in range(ranks):
        b = TraceBuilder(distributedInfo={"rank": rank, "world_size": ranks})
        t = 0.0
        for step in range(steps):
            for k in range(per_step):
                n = step * per_step + k
                late = (lag if rank == 3 and k == 0 else 0.0) + (jitter if k and n % ranks == rank else 0.0)
                everyone_in = t + (lag if k == 0 else jitter)
                b.kernel("volta_sgemm_128x64_nn", t, 50, launch_at=t - 5)  # compute before each
                entry = t + 50 + late
                b.kernel(ALLREDUCE, entry, everyone_in + 50 + COMM - entry, launch_at=entry - 5)
                t = everyone_in + 50 + COMM + 10
        b.write(job / f"rank{rank}.json")
    c = traceagent.analyze(job).comparison
    rows = {r.rank: r for r in c.ranks}
    assert c.matched == steps * per_step and rows[3].last_count < c.matched / 2
    assert c.straggler == 3
    turns = sum(1 for n in range(steps * per_step) if n % per_step and n % ranks == 3)
    assert rows[3].caused_waiting_us == pytest.approx(steps * 7 * lag + turns * 7 * jitter, abs=0.01)
    others = sum(r.caused_waiting_us for rank, r in rows.items() if rank != 3)
    assert c.caused_waiting_pct == pytest.approx(100 * rows[3].caused_waiting_us / (rows[3].caused_waiting_us + others),
                                                 abs=0.01)
