"""Diagnoses that cite the right evidence, give the advice the evidence supports, and say what
fixing it would save. Traces are built by hand here; the comments give the expected numbers."""

from __future__ import annotations

import asyncio
import json

import pytest
from builder import TraceBuilder
from conftest import RESNET_NW0, RESNET_NW4, analyzed

import traceagent
from traceagent.agent.session import Session
from traceagent.agent.tools import AnalysisContext
from traceagent.cli import main
from traceagent.detect.analysis import analyze_trace
from traceagent.detect.detectors.streams import streams_sentence

HELPER = 200  # a thread that launches nothing (a progress bar's monitor, a tracing exporter)


def stalled_trace(tmp_path, *, loader: str | None = None, training: bool = True):
    """Two kernels with a 990 µs gap [110, 1100) between them. Over the gap the main thread is in
    train.py's main(), in tokenizer.encode for 900 µs of it, in a short aten op for 10 µs; helper
    threads run for the whole trace. Both kernels are launched by the main thread, inside main()."""
    b = TraceBuilder()
    b.python("train.py(10): <module>", 0, 2000)
    b.python("train.py(20): main", 1, 1998)
    if loader:
        b.op(loader, 150, 900, cat="user_annotation")
    else:
        b.python("tokenizer.py(5): encode", 150, 900)
    b.op("aten::copy_", 160, 10)
    if training:
        b.op("autograd::engine::evaluate_function: AddmmBackward0", 1300, 50)
    for tid in (HELPER, HELPER + 1):  # two helper threads with the same frame: never summed
        b.python("tqdm/_monitor.py(60): run", 0, 3000, tid=tid)
    b.kernel("gemm", 10, 100, launch_at=2)
    b.kernel("gemm", 1100, 100, launch_at=1095)
    return b


def test_evidence_is_the_launching_threads_innermost_frame(tmp_path):
    ra = analyze_trace(stalled_trace(tmp_path).load(tmp_path))
    (gap,) = [g for g in ra.findings.idle.top_gaps if g.dur_us == 990.0]
    ev = gap.evidence
    assert ev["thread"] == {"pid": 100, "tid": 100}
    # spanning at least half the gap, innermost first: encode (900 of 990 µs), main, <module>
    assert [h["name"] for h in ev["host"]] == ["tokenizer.py(5): encode", "train.py(20): main", "train.py(10): <module>"]
    assert ev["python"] == "tokenizer.py(5): encode"
    assert all(h["overlap_us"] <= gap.dur_us for h in ev["host"] + ev["other_threads"])
    # the helper threads are context, never the headline
    assert all("tqdm" not in h["name"] for h in ev["host"])
    assert {o["tid"] for o in ev["other_threads"]} <= {HELPER, HELPER + 1}
    assert ra.verdict.root_cause == "host_other" and "tokenizer.py(5): encode" in ra.verdict.hypothesis


@pytest.mark.parametrize("loader, kind, says, never", [
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "single_process", "num_workers=4", "prefetch_factor"),
    ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "multi_process", "prefetch_factor",
     "worker processes and pin it"),
])
def test_dataloader_advice_follows_the_iterator_in_use(tmp_path, loader, kind, says, never):
    ra = analyze_trace(stalled_trace(tmp_path, loader=loader).load(tmp_path))
    v = ra.verdict
    assert (v.root_cause, v.evidence["dataloader"]) == ("dataloader", kind)
    assert says in v.next_step and never not in v.next_step


def test_an_annotation_named_for_data_loading_makes_the_gap_data_loading(tmp_path):
    # a user's record_function("load_batch") (NVTX ranges arrive as the same kind of event)
    ra = analyze_trace(stalled_trace(tmp_path, loader="load_batch").load(tmp_path))
    assert ra.findings.idle.by_cause_us == {"dataloader": 990.0}
    assert ra.verdict.root_cause == "dataloader"


def test_inference_is_not_called_training(tmp_path):
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    training = analyze_trace(stalled_trace(tmp_path, loader=loader).load(tmp_path, "t.json"))
    inference = analyze_trace(stalled_trace(tmp_path, loader=loader, training=False).load(tmp_path, "i.json"))
    assert "training loop" in training.verdict.hypothesis
    assert "training" not in inference.verdict.hypothesis and inference.findings.workload.training is False


def copy_trace(tmp_path, kind: str, src: str, dst: str, stream: int = 7):
    # 2 copies of 400 µs and a 100 µs kernel: copies are 800 of 1000 µs, none hidden by compute
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, launch_at=0)
    b.memcpy(100, 400, 4_000_000, kind=kind, src=src, dst=dst, stream=stream, launch_at=99)
    b.memcpy(500, 400, 4_000_000, kind=kind, src=src, dst=dst, stream=stream, launch_at=499)
    b.kernel("gemm", 900, 100, launch_at=899)
    return analyze_trace(b.load(tmp_path))


def test_pageable_copies_to_the_host_point_at_reading_values_back(tmp_path):
    v = copy_trace(tmp_path, "DtoH", "Device", "Pageable").verdict
    assert v.root_cause == "pageable_memcpy" and ".item()" in v.next_step and "pin_memory=True" not in v.next_step


def test_pageable_copies_to_the_device_point_at_pinning(tmp_path):
    v = copy_trace(tmp_path, "HtoD", "Pageable", "Device").verdict
    assert v.root_cause == "pageable_memcpy" and "pin_memory=True" in v.next_step


def test_copies_already_on_a_side_stream_are_not_told_to_use_one(tmp_path):
    ra = copy_trace(tmp_path, "HtoD", "Pinned", "Device", stream=30)
    v = ra.verdict
    assert v.root_cause == "memcpy" and ra.findings.memcpy.side_stream_bytes == 8_000_000
    assert "already run on a side stream" in v.hypothesis and "overlap the rest with compute on a side" not in v.next_step


def launch_bound_trace(tmp_path, op: str, call: str):
    # 50 kernels of 2 µs, each launched 20 µs after the last one ended: launch-bound gaps
    b = TraceBuilder()
    t = 0.0
    for _ in range(50):
        b.op(op, t, 22)
        b.kernel("small_kernel", t + 20, 2, launch_at=t, launch_dur=19, call=call)
        t += 22
    return analyze_trace(b.load(tmp_path))


def test_a_launch_bound_optimizer_is_told_to_fuse(tmp_path):
    v = launch_bound_trace(tmp_path, "Optimizer.step#AdamW.step", "cudaLaunchKernel").verdict
    assert v.root_cause == "launch_overhead" and "fused=True" in v.next_step
    assert "Optimizer.step#AdamW.step" in v.hypothesis


def test_a_triton_decode_loop_is_told_to_use_cuda_graphs(tmp_path):
    ra = launch_bound_trace(tmp_path, "triton_decode_step", "cuLaunchKernel")
    v = ra.verdict
    assert v.root_cause == "launch_overhead" and "CUDA graph" in v.next_step
    assert "50 of 50 kernels launch through cuLaunchKernel" in v.hypothesis


def test_a_trace_with_api_calls_but_no_device_records_says_so(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 100)
    for i in range(3):
        b.runtime("cudaLaunchKernel", 10 + i, 1, correlation=i + 1)
    v = analyze_trace(b.load(tmp_path)).verdict
    assert v.headline == "No kernel or copy records in this trace (3 CUDA API calls were recorded)"


# -- steps --------------------------------------------------------------------------------------

def step_trace(names: list[str]) -> TraceBuilder:
    """Iterations as a user's ranges (no ProfilerStep): each 1000 µs, a data stall of 400 µs and a
    600 µs kernel; the stall comes before the step's first kernel."""
    b = TraceBuilder()
    for i, name in enumerate(names):
        t = i * 1000.0
        b.op(name, t, 1000, cat="user_annotation")
        b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 400, cat="user_annotation")
        b.kernel("gemm", t + 400, 600, launch_at=t + 395)
    return b


@pytest.mark.parametrize("names, numbers", [(["train_step"] * 4, [0, 1, 2, 3]),
                                            ([f"iteration_{n}" for n in (7, 8, 9, 10)], [7, 8, 9, 10])])
def test_record_function_and_nvtx_iterations_are_steps(tmp_path, names, numbers):
    ra = analyze_trace(step_trace(names).load(tmp_path))
    steps = ra.findings.steps
    assert [s.step for s in steps.steps] == numbers
    # every idle nanosecond of a step is its own: the 400 µs stall before each step's kernel
    # (the first step's is before the device's first work, outside the span)
    assert [s.idle_us for s in steps.steps] == [0.0, 400.0, 400.0, 400.0]
    assert sum(s.idle_us for s in steps.steps) == ra.findings.idle.idle_us


def test_steps_named_by_the_user(tmp_path, capsys):
    path = step_trace(["fwd_bwd"] * 3).write(tmp_path / "t.json")
    assert analyze_trace(traceagent.load(path).traces[0]).findings.steps is None  # not a name we know
    assert main(["analyze", str(path), "--json", "--steps", "^fwd_bwd$"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["steps"]["count"] == 3
    with pytest.raises(SystemExit):
        main(["analyze", str(path), "--steps", "(unclosed"])
    assert "not a regular expression" in capsys.readouterr().err


# -- what fixing it would save ------------------------------------------------------------------

def test_every_finding_carries_its_saving(capsys):
    assert main(["analyze", str(RESNET_NW0), "--json"]) == 0
    rank = json.loads(capsys.readouterr().out)["ranks"][0]
    from traceagent.detect.core.vocabulary import GAP_CAUSES, GAP_ROOT

    for cause, idle_us in rank["idle"]["by_cause_us"].items():  # a gap removed saves at most its length
        (mine,) = [s for s in rank["savings"] if s["finding"] == GAP_CAUSES[cause].finding]
        assert (mine["upper_bound_us"], mine["root_cause"]) == (idle_us, GAP_ROOT[cause])
    assert any(s["upper_bound_us"] == rank["memcpy"]["exposed_us"] for s in rank["savings"])  # exposed copies
    assert all(k["saving_2x_us"] == round(k["total_us"] / 2, 3) for k in rank["hot_kernels"])
    saving = rank["verdict"]["saving"]
    steps = rank["steps"]
    # the data-loading stalls per step, over the mean step: 285,214 µs / 6 steps / 174,830 µs
    assert saving["upper_bound_us"] == rank["idle"]["by_cause_us"]["dataloader"]
    assert saving["step_pct"] == pytest.approx(100 * saving["upper_bound_us"] / steps["count"] / steps["mean_us"], abs=0.01)
    assert "upper bound" in saving["sentence"]


def test_diff_checks_the_prediction_against_the_measured_change(capsys):
    before, after = analyzed(RESNET_NW0), analyzed(RESNET_NW4)
    assert main(["diff", str(RESNET_NW0), str(RESNET_NW4), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    predicted, measured = d["prediction"]["predicted_up_to_pct"], d["prediction"]["measured_pct"]
    assert predicted == before.verdict.saving.step_pct
    assert measured == pytest.approx(-d["slower_pct"], abs=0.01) and measured > 0
    assert d["prediction"]["within_estimate"] == (measured <= predicted)
    # the replay's prediction beside the bound and the measurement
    simulated = d["prediction"]["simulated_pct"]
    assert simulated == before.verdict.saving.simulated_pct and d["prediction"]["change"] == "dataloader=0"
    assert main(["diff", str(RESNET_NW0), str(RESNET_NW4)]) == 0
    assert (f"predicted {simulated:.1f}% of step time (simulated with `dataloader=0`; at most {predicted:.1f}%), "
            f"measured {measured:.1f}%") in " ".join(capsys.readouterr().out.split())
    assert after.verdict.root_cause != "dataloader"


def test_the_html_report_opens_with_its_title_and_verdict():
    from traceagent.report.html import render_html

    page = render_html(analyzed(RESNET_NW0))
    assert page.index("<h1>") < page.index("Verdict") < page.index("<figure>")
    assert page.count("<figure>") == page.count("<figcaption>")  # every chart titled


def test_an_nvtx_range_named_for_data_loading_in_an_nsight_export(tmp_path):
    import shutil
    import sqlite3

    from conftest import DATA

    source = DATA / "test-cuda" / "report1.sqlite"
    before = analyzed(source).ranks[0]
    gap = before.gaps.nlargest(1, "dur").iloc[0]
    assert gap["cause"] != "dataloader"
    copy = tmp_path / "with_nvtx.sqlite"
    shutil.copy(source, copy)
    con = sqlite3.connect(copy)
    (thread,) = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
                            "ORDER BY COUNT(*) DESC LIMIT 1").fetchone()
    # nvtx.range_push("load_batch") on the launching thread, over the largest gap (a push/pop range)
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
                "textId INTEGER, globalTid INTEGER)")
    con.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 'load_batch', NULL, ?)",
                (int(gap["start"]), int(gap["end"]), thread))
    con.commit()
    con.close()
    after = traceagent.analyze(copy, use_cache=False).ranks[0]
    assert after.gaps.nlargest(1, "dur").iloc[0]["cause"] == "dataloader"
    assert after.findings.idle.by_cause_us["dataloader"] >= round(gap["dur"] / 1000, 3)


def test_a_decode_whose_launch_overhead_and_latency_outweigh_host_work_is_launch_bound(tmp_path):
    # a compiled decode of 5 µs kernels (cuLaunchKernel). By hand: 20 gaps of 8 µs between kernels
    # (launch latency: 160 µs), 10 gaps of 15 µs whose kernel's 12 µs launch starts inside the gap
    # (launch-bound: 150 µs), and 2 gaps of 100 µs in Python post-processing (other host work:
    # 200 µs). Host work is the largest single cause, but launch overhead and latency are one root
    # cause: 310 µs against 200
    b = TraceBuilder()
    b.python("decode.py(30): generate", 0, 2000)
    t = 100.0
    b.kernel("triton_poi_fused", t, 5, launch_at=t - 10, launch_dur=5, call="cuLaunchKernel")
    for kind in ["latency"] * 20 + ["overhead"] * 10 + ["host"] * 2:
        end = t + 5
        if kind == "latency":
            t, launch_at, launch_dur = end + 8, end - 4, 3.0
        elif kind == "overhead":
            t, launch_at, launch_dur = end + 15, end + 1, 12.0
        else:
            b.python("decode.py(41): postprocess", end, 98)
            t, launch_at, launch_dur = end + 100, end + 98, 1.0
        b.kernel("triton_poi_fused", t, 5, launch_at=launch_at, launch_dur=launch_dur, call="cuLaunchKernel")
    analysis = traceagent.analyze(b.write(tmp_path / "decode.json"))
    idle = analysis.ranks[0].findings.idle
    assert idle.by_cause_us == {"launch_latency": 160.0, "launch_overhead": 150.0, "host_other": 200.0}
    v = analysis.verdict
    assert (v.limiter, v.root_cause) == ("idle", "launch_overhead")
    span = idle.span_us
    assert v.evidence["cause_us"] == 310.0 and v.evidence["cause_pct"] == round(
        round(100 * 160 / span, 2) + round(100 * 150 / span, 2), 2)
    assert set(v.evidence["gap_causes"]) == {"launch_latency", "launch_overhead"}
    assert "launch-bound gaps and launch latency" in v.headline


def test_host_work_names_the_users_own_line_not_the_librarys(tmp_path):
    # the launching thread spends 100-600 µs in the user's tokenize_batch, which calls a tokenizer
    # from site-packages (the profiler writes it as `transformers/…`, its prefix cut); the GPU
    # idles from 100 to 610. The evidence and the verdict start at the user's frame
    b = TraceBuilder()
    b.python("train.py(10): <module>", 0, 2000)
    b.kernel("gemm", 0, 100, launch_at=0, launch_dur=1)
    b.python("data.py(20): tokenize_batch", 100, 500)
    b.python("transformers/tokenization_utils_fast.py(500): _batch_encode_plus", 110, 480)
    b.kernel("gemm", 610, 90, launch_at=600)
    analysis = traceagent.analyze(b.write(tmp_path / "tokenizer.json"))
    gap = analysis.ranks[0].findings.idle.top_gaps[0]
    assert gap.cause == "host_other" and gap.evidence["python"] == "data.py(20): tokenize_batch"
    assert gap.evidence["host"][0]["name"].startswith("transformers/")  # the innermost frame, as context
    v = analysis.verdict
    assert v.root_cause == "host_other" and v.evidence["python"] == "data.py(20): tokenize_batch"
    assert "in the largest gap: data.py(20): tokenize_batch, inside transformers/tokenization_utils_fast.py" \
        in v.hypothesis
    assert v.next_step.startswith("Start at data.py(20): tokenize_batch")


@pytest.mark.parametrize("generated", ["/tmp/torchinductor_root/od/cod4x.py(232): call",
                                       "<eval_with_key>.12(5): forward"])
def test_code_torch_compile_generated_is_not_the_users_line(tmp_path, generated):
    # the user's step calls a compiled function: Inductor's generated file (or an FX graph module)
    # is torch's, not a line to edit; the verdict starts at the user's frame above it
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, launch_at=0, launch_dur=1)
    b.python("train.py(30): step", 100, 500)
    b.python(generated, 110, 480)
    b.kernel("gemm", 610, 90, launch_at=600)
    v = traceagent.analyze(b.write(tmp_path / "compiled.json"), use_cache=False).verdict
    assert v.evidence["python"] == "train.py(30): step" and v.next_step.startswith("Start at train.py(30): step")


def test_a_launch_bound_optimizer_is_named_by_its_range_and_told_to_fuse(tmp_path):
    # an unfused AdamW: inside `Optimizer.step#AdamW.step` the host launches one 3 µs kernel per
    # parameter from aten::add_ (the op names no optimizer), each launch taking 15 µs: 30 gaps of
    # 15 µs, launch-bound, all under the optimizer's range
    b = TraceBuilder()
    b.op("Optimizer.step#AdamW.step", 0, 2000, cat="user_annotation")
    t = 10.0
    for _ in range(31):
        b.op("aten::add_", t - 16, 16)
        b.kernel("vectorized_elementwise_kernel", t, 3, launch_at=t - 15, launch_dur=14)
        t += 3 + 15
    analysis = traceagent.analyze(b.write(tmp_path / "adamw.json"))
    top = analysis.ranks[0].findings.idle.launch_bound[0]
    assert (top["op"], top["range"], top["gaps"]) == ("aten::add_", "Optimizer.step#AdamW.step", 30)
    v = analysis.verdict
    assert v.root_cause == "launch_overhead" and "fused=True" in v.next_step
    assert "in `Optimizer.step#AdamW.step`" in v.hypothesis


def test_a_trace_without_launch_calls_is_not_called_launch_bound_on_numbers_it_lacks(tmp_path, capsys):
    """Only the GPU recorded (no CUDA runtime, no host events): 40 kernels of 2 µs, 0.5 µs apart.
    By hand: span 40 × 2.5 − 0.5 = 99.5 µs, 39 gaps of 0.5 µs idle = 19.5 µs (19.6%), launch
    latency by the gaps' length alone. No kernel has a launch call, so no launch cost is quoted
    (once: "median 0.0 µs against their launch cost (median 0.0 µs)")."""
    b = TraceBuilder()
    for i in range(40):
        b.kernel("k", 2.5 * i, 2.0)
    path = b.write(tmp_path / "device_only.json")
    r = traceagent.analyze(path, use_cache=False).focus
    assert r.findings.launch.kernels == 0 and r.findings.idle.by_cause_us == {"launch_latency": 19.5}
    v = r.verdict
    assert v.root_cause == "launch_overhead" and "no launch calls in the trace" in v.headline
    assert "cannot launch kernels fast enough" not in v.headline and "median" not in v.hypothesis
    assert "ProfilerActivity.CPU" in v.next_step
    (stream,) = r.results["streams"].rows  # its idle is before ops with no launch call: why, unknown
    assert (stream.idle_us, stream.other_wait_us, stream.unlaunched_wait_us, stream.host_wait_us) == (19.5, 19.5, 19.5, 0)
    assert "19.5 µs is before ops whose launch call is not in the trace" in streams_sentence(r.results["streams"])
    assert main(["analyze", str(path), "--no-cache"]) == 0
    assert "launch cost cannot be measured" in capsys.readouterr().out
    assert main(["report", str(path), "--no-cache", "-o", str(tmp_path / "r.md")]) == 0
    report = (tmp_path / "r.md").read_text()
    assert "launch cost cannot be measured" in report and "start a median" not in report
    ctx = AnalysisContext(traceagent.analyze(path, use_cache=False))
    said = asyncio.run(_offline_answer(ctx, "What's the kernel launch overhead?"))
    assert "launch cost cannot be measured" in said.text and "0 kernels" not in said.text and not said.unverified


async def _offline_answer(ctx, question):
    return [e async for e in Session(ctx).ask(question)][-1]
