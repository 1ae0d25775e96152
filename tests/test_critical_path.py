"""The critical path: a hand-built step worked out by hand, the savings that use it, the annotate
track, and real traces whose path adds up."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from builder import TraceBuilder
from conftest import DATA, NSYS_BEFORE, RESNET_NW0
from hypothesis import given
from hypothesis import strategies as st

import traceagent
from traceagent.detect.verdict.critical_path import (
    KINDS,
    _previous,
    _walk,
    critical_path,
    critical_path_sentence,
    ended_last_before,
)
from traceagent.report.annotate import annotate


def one_step(tmp_path):
    """The host launches k1 (199 µs) on stream 7 at 0-5 µs, k2 (20 µs) on stream 8 at 10-15, does
    Python work, blocks in cudaDeviceSynchronize from 40 µs until k1 ends (205) and returns at 206,
    then launches k3 at 210-215, which runs 220-250 on stream 7.

    By hand, from k3's end back to the first device work (k1's start, 6 µs): k3 30 µs; a 5 µs wait
    after its launch returned (215-220); the launch 5 µs; host work 4 µs (206-210); the sync's last
    1 µs (205-206: it returned when k1 ended); k1 199 µs. 244 µs = 250 − 6. k2 ran beside k1: off the path."""
    b = TraceBuilder()
    b.kernel("k1", 6, 199, stream=7, launch_at=0, launch_dur=5)
    b.kernel("k2", 16, 20, stream=8, launch_at=10, launch_dur=5)
    b.python("train.py(3): forward", 15, 25)
    b.runtime("cudaDeviceSynchronize", 40, 166)
    b.kernel("k3", 220, 30, stream=7, launch_at=210, launch_dur=5)
    return b.write(tmp_path / "step.json")


def test_the_critical_path_of_a_step_worked_out_by_hand(tmp_path):
    r = traceagent.analyze(one_step(tmp_path), use_cache=False).focus
    path = r.findings.critical_path
    assert (path.length_us, path.device_us, path.host_call_us, path.host_work_us, path.wait_us) == (
        244.0, 199.0 + 30.0, 5.0 + 1.0, 4.0, 5.0)
    assert [(k.short_name, k.on_path_us) for k in path.kernels] == [("k1", 199.0), ("k3", 30.0)]
    assert path.off_path == ["k2"]
    segments = critical_path(r.trace)
    origin = r.trace.origin_ns()
    kinds = [KINDS[k] for k in segments.kind]
    assert sorted(zip(kinds, (segments.start - origin) // 1000, (segments.end - origin) // 1000)) == sorted([
        ("device", 220, 250), ("wait", 215, 220), ("host_call", 210, 215), ("host_work", 206, 210),
        ("host_call", 205, 206), ("device", 6, 205)])


def test_a_trace_of_the_devices_activity_alone(tmp_path):
    """No host events: on GPU 0, k1 0-100 then k2 110-150 on stream 7 and k3 120-160 on stream 8 (it
    started after k1 ended: k1 is its dependency); on GPU 1, k4 0-300. By hand, from k4's end (the
    last) back: k4 alone, 300 µs; in GPU 0's window (its last op, k3, ends at 160): k3 40, the wait
    after k1 20, k1 100."""
    b = TraceBuilder()
    b.kernel("k1", 0, 100)
    b.kernel("k2", 110, 40)
    b.kernel("k3", 120, 40, stream=8)
    b.kernel("k4", 0, 300, device=1)
    r = traceagent.analyze(b.write(tmp_path / "gpu_only.json"), use_cache=False).focus
    origin = r.trace.origin_ns()
    whole = critical_path(r.trace)
    assert [(KINDS[k], (s - origin) // 1000, (e - origin) // 1000) for k, s, e in zip(whole.kind, whole.start, whole.end)] \
        == [("device", 0, 300)]
    gpu0 = critical_path(r.trace, window=(origin, origin + 160_000))
    assert sorted((KINDS[k], (s - origin) // 1000, (e - origin) // 1000) for k, s, e in zip(gpu0.kind, gpu0.start, gpu0.end)) \
        == [("device", 0, 100), ("device", 120, 160), ("wait", 100, 120)]


def test_savings_count_only_time_on_the_critical_path(tmp_path):
    r = traceagent.analyze(one_step(tmp_path), use_cache=False).focus
    kernels = {s.finding: s for s in r.findings.savings if s.root_cause == "hot_kernel"}
    assert kernels["kernel k1 made 2× faster"].upper_bound_us == 99.5  # half its 199 µs on the path
    assert "kernel k2 made 2× faster" not in kernels  # other work hides it: faster, it saves nothing
    assert "critical path" in kernels["kernel k1 made 2× faster"].reasoning


def test_a_compute_verdicts_saving_is_its_own_kernels_not_every_hot_kernels(tmp_path):
    # k1 (199 µs on the path) and k3 (30 µs) each made 2× faster are two fixes: the verdict that
    # names k1 quotes k1's 99.5 µs, not the 114.5 µs of both with k1's reasoning
    r = traceagent.analyze(one_step(tmp_path), use_cache=False).focus
    assert (r.verdict.root_cause, r.verdict.evidence["kernel"]) == ("hot_kernel", "k1")
    assert r.verdict.saving is not None
    assert (r.verdict.saving.finding, r.verdict.saving.upper_bound_us) == ("kernel k1 made 2× faster", 99.5)
    assert "199 µs of its 199 µs" in r.verdict.saving.sentence


def test_a_kernel_off_the_path_sharing_the_short_name_of_one_on_it_is_another(tmp_path):
    # the one_step trace with k1 and k2 renamed to two instantiations of one template: k1's
    # (on the path) and k2's (beside it, off) both read "Kernel2"
    b = TraceBuilder()
    b.kernel("void cutlass::Kernel2<tile_256x128>(Params)", 6, 199, stream=7, launch_at=0, launch_dur=5)
    b.kernel("void cutlass::Kernel2<tile_64x64>(Params)", 16, 20, stream=8, launch_at=10, launch_dur=5)
    b.runtime("cudaDeviceSynchronize", 40, 166)
    b.kernel("k3", 220, 30, stream=7, launch_at=210, launch_dur=5)
    path = traceagent.analyze(b.write(tmp_path / "t.json"), use_cache=False).focus.findings.critical_path
    assert path.kernels[0].short_name == "Kernel2" and path.off_path == ["Kernel2"]
    assert "Kernel2 is on it" in critical_path_sentence(path)
    assert "not on it: another Kernel2 (other work hides them" in critical_path_sentence(path)


def test_the_sentence_names_a_kernel_to_80_characters(tmp_path):
    name = "Cijk_Alik_Bljk_BBS_BH_" + "_".join(f"OPT{i}" for i in range(100))  # a Tensile GEMM's name: 600 characters
    b = TraceBuilder()
    b.kernel(name, 10, 100, launch_at=0)
    path = traceagent.analyze(b.write(tmp_path / "t.json"), use_cache=False).focus.findings.critical_path
    assert path.kernels[0].name == name  # whole in the result
    assert f"; {name[:79]}… is on it" in critical_path_sentence(path)


def test_annotate_draws_the_path_as_a_track(tmp_path):
    source = one_step(tmp_path)
    out = tmp_path / "annotated.json"
    annotate(traceagent.analyze(source, use_cache=False), str(source), out)
    events = json.loads(out.read_text())["traceEvents"]
    track = next(e["tid"] for e in events if e.get("ph") == "M" and e["args"].get("name") == "critical path")
    drawn = [e for e in events if e.get("cat") == "traceagent" and e.get("tid") == track and e["ph"] == "X"]
    assert sorted(e["name"] for e in drawn) == sorted(["k3", "wait", "cudaLaunchKernel", "host_work",
                                                       "cudaDeviceSynchronize", "k1"])
    assert sum(e["dur"] for e in drawn) == pytest.approx(244.0)


@pytest.mark.parametrize("path", [RESNET_NW0, NSYS_BEFORE, DATA / "hta" / "nccl_data.json.gz"])
def test_on_real_traces_the_path_tiles_the_device_span(path):
    r = traceagent.analyze(path).focus
    result, segments = r.findings.critical_path, critical_path(r.trace)
    assert result.device_us + result.host_call_us + result.host_work_us + result.wait_us == pytest.approx(
        result.length_us, abs=0.01)
    # the path's segments never overlap, and end where the rank's last device work ends
    order = np.lexsort((segments.end, segments.start))  # zero-length segments before others at the same time
    assert (segments.start[order][1:] >= segments.end[order][:-1]).all()
    assert int(segments.end.max()) == r.trace.span_ns()[1]
    on_path = {k.name for k in result.kernels}
    assert on_path <= set(r.trace.gpu["name"].astype(str))


def test_a_path_kernel_is_timed_as_the_raw_trace_has_it():
    """The resnet trace's longest kernel on the path, against its durations read with gzip/json."""
    result = traceagent.analyze(RESNET_NW0).focus.findings.critical_path
    top = result.kernels[0]
    with gzip.open(RESNET_NW0) as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("cat") in ("Kernel", "kernel") and e["name"] == top.name]
    assert top.total_us == pytest.approx(sum(e["dur"] for e in raw), abs=0.01)
    assert 0 < top.on_path_us <= top.total_us


@pytest.mark.parametrize("tid", [100, -1220540864])  # Kineto writes pthread ids cut to int32: negative too
def test_the_host_ops_on_the_path_are_named(tmp_path, tid):
    # one thread: aten::empty 0-80 (host work, no launch), aten::relu 80-100 launching at 85-95 a
    # kernel that runs 100-110; then aten::empty 110-190, aten::relu 190-210 launching at 195-205 a
    # kernel 210-220. The path, walked back from the last kernel to the first device work (100):
    # that kernel, its launch 195-205 (inside relu: 10 µs), and the host work since the path's start
    # 100-195. Read at 8 points (each 95/8 µs): 105.9 is in no op, the other 7 in aten::empty.
    b = TraceBuilder()
    for t in (0, 110):
        b.op("aten::empty", t, 80)
        b.op("aten::relu", t + 80, 20)
        b.kernel("relu_kernel", t + 100, 10, launch_at=t + 85, launch_dur=10)
    for event in b.events:
        event["tid"] = tid if event["tid"] == 100 else event["tid"]  # the host thread's; the kernels' is their stream
    path = traceagent.analyze(b.write(tmp_path / "host_ops.json")).ranks[0].findings.critical_path
    assert [(h.name, h.on_path_us) for h in path.host_ops] == [("aten::empty", 7 * 95 / 8), ("aten::relu", 10.0)]
    assert path.host_ops[0].share_of_host_pct == round(100 * 7 * 95 / 8 / 105, 2)
    assert "its host time is in aten::empty" in critical_path_sentence(path)


def test_a_blocking_call_waits_only_for_its_own_processs_gpus():
    """nsys-ai's two-process export: each process drives its own GPU. A sync edge of the path (a
    blocking call after the device op it waited for) joins a call to an op on a device its own
    process launched work on; before, 6 of the 16 joined the other process's GPU."""
    from conftest import analyzed

    trace = analyzed(NSYS_BEFORE).ranks[0].trace
    path = critical_path(trace)
    nodes = int((path.event >= 0).sum())
    calls = trace.cpu[trace.cpu["kind"].isin(["runtime", "driver"]).to_numpy()]
    launcher = dict(zip(calls["correlation"].tolist(), calls["pid"].tolist()))
    gpu = path.device_ops
    own = {(launcher[c], d) for c, d in zip(gpu["correlation"].tolist(), gpu["device"].tolist()) if c in launcher}
    assert len({d for _, d in own}) == 2 and len({p for p, _ in own}) == 2  # two processes, two GPUs
    thread = path.threads(np.arange(len(path.kind)))
    assert (thread[path.kind == 0] == -1).all() and (thread[path.kind == 1] >= 0).all()
    edges = [(int(thread[i]) >> 32, int(gpu["device"].iloc[int(path.event[i + 1])])) for i in range(nodes - 1)
             if path.kind[i] == 1 and path.kind[i + 1] == 0]
    assert len(edges) >= 10 and all(edge in own for edge in edges)


def test_the_path_of_one_step(tmp_path):
    """Two steps, one kernel each. By hand: step 2's path is its kernel (205-305) after its launch
    call (200-205) after the host work from the step's start (150): 155 µs, two events; the whole
    trace's path is the same two events after host work from the first device work (5): 300 µs."""
    from conftest import analyzed

    from traceagent.agent.tools import AnalysisContext, ToolInputError, build_tools

    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 150)
    b.kernel("a", 5, 100, launch_at=0)
    b.op("ProfilerStep#2", 150, 200)
    b.kernel("b", 205, 100, launch_at=200)
    tool = {t.name: t for t in build_tools(AnalysisContext(analyzed(b.write(tmp_path / "two.json"))))}["critical_path"]
    step = json.loads(tool.invoke({"step": 2}))
    whole = json.loads(tool.invoke({}))
    assert (step["length_us"], step["events"], step["scope"]["window"]) == (155, 2, "step 2")
    assert (whole["length_us"], whole["events"]) == (300, 2) and [k["name"] for k in step["kernels"]] == ["b"]
    with pytest.raises(ToolInputError, match="no step 3; the steps are 1, 2"):
        tool.invoke({"step": 3})


def test_a_ranges_window_runs_to_the_end_of_the_device_work_launched_inside_it(tmp_path):
    from traceagent.detect.verdict.critical_path import range_window

    b = TraceBuilder()
    b.op("fwd", 0, 20, cat="user_annotation")
    b.kernel("a", 15, 100, launch_at=5)  # launched inside the first fwd, ends at 115
    b.op("fwd", 200, 20, cat="user_annotation")  # launches nothing
    b.op("other", 300, 10, cat="user_annotation")
    trace = b.load(tmp_path)
    # by hand: the first instance from 0 µs to its kernel's end, the second its own 200-220 µs
    assert range_window(trace, "fwd") == (0, 115_000) and range_window(trace, "fwd", 2) == (200_000, 220_000)
    with pytest.raises(KeyError, match="no instance 3 of a range named 'fwd' \\(2 in the trace\\)"):
        range_window(trace, "fwd", 3)
    with pytest.raises(KeyError, match="no instance 1 of a range named 'missing' \\(0 in the trace\\)"):
        range_window(trace, "missing")


def test_an_op_of_no_duration_does_not_end_the_path(tmp_path):
    """Kineto's microsecond clock records a short memset as 0 µs. k1 runs 6-100 µs, the memset at
    106 (0 µs), k2 106-156, all on stream 7, launched at 0, 10 and 20. By hand, from k2's end: k2
    50 µs, the memset 0, 6 µs waiting on the stream after k1, k1 94: the whole 150 µs of device
    work. (The memset once read as ended before itself, the latest of its dependencies, and the
    path stopped at it: 50 µs.)"""
    b = TraceBuilder()
    b.kernel("k1", 6, 94, launch_at=0)
    b._device("gpu_memset", "Memset (Device)", 106, 0, 7, 10, 5.0, "cudaMemsetAsync")
    b.kernel("k2", 106, 50, launch_at=20)
    path = traceagent.analyze(b.write(tmp_path / "memset.json"), use_cache=False).focus.findings.critical_path
    assert (path.length_us, path.device_us, path.wait_us, path.events) == (150.0, 144.0, 6.0, 3)


def test_ops_of_no_duration_at_the_ends_leave_the_path_within_the_span(tmp_path):
    """A 0 µs memset at 2 µs, kernel k 6-106 µs, another 0 µs memset at 150. The devices' span is
    their busy time's, 6-106 (an op of no duration is no busy time): by hand the path is k alone,
    100 µs, not the 148 µs from the first memset to the last."""
    b = TraceBuilder()
    b._device("gpu_memset", "Memset (Device)", 2, 0, 7, 0, 1.0, "cudaMemsetAsync")
    b.kernel("k", 6, 100, launch_at=3, launch_dur=2)
    b._device("gpu_memset", "Memset (Device)", 150, 0, 7, 140, 1.0, "cudaMemsetAsync")
    r = traceagent.analyze(b.write(tmp_path / "edges.json"), use_cache=False).focus
    path = r.findings.critical_path
    assert (path.length_us, path.device_us, path.events) == (100.0, 100.0, 1) == (r.breakdown.total.span_us, 100.0, 1)


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.booleans()), max_size=14))
def test_the_op_that_ended_last_before_each_started_against_brute_force(events):
    # (start, length, zero): about half the ops of no duration, many sharing a start or an end
    start = np.sort(np.array([s for s, _, _ in events], dtype=np.int64))
    end = start + np.array([0 if zero else n for _, n, zero in events], dtype=np.int64)
    found = ended_last_before(start, end)
    for i in range(len(start)):
        ended = [j for j in range(i) if end[j] <= start[i]]  # before it in start order, and ended by its start
        if not ended:
            assert found[i] == -1
        else:
            assert found[i] in ended and end[found[i]] == max(end[j] for j in ended)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), max_size=20), st.booleans())
def test_the_event_before_each_in_its_group_against_brute_force(events, in_time_order):
    # (group, time), in time order as a device's ops are loaded or not (a thread's calls may not be): the
    # event before each in its group is the latest earlier one, of equal times the one before it in position
    pairs = sorted(events, key=lambda e: e[1]) if in_time_order else events
    group = np.array([g * 1000 for g, _ in pairs], dtype=np.int64)
    t = np.array([t for _, t in pairs], dtype=np.int64)
    found = _previous(group, t, np.int32)
    for i in range(len(t)):
        before = [j for j in range(len(t)) if group[j] == group[i] and (t[j], j) < (t[i], i)]
        assert found[i] == (max(before, key=lambda j: (t[j], j)) if before else -1)


@given(st.lists(st.tuples(st.integers(-1, 30), st.integers(0, 5)), min_size=1, max_size=30),
       st.integers(0, 29), st.integers(0, 4), st.integers(1, 4))
def test_the_walk_takes_runs_whole_and_follows_what_one_step_at_a_time_follows(links, node, floor, whole_from):
    # each event: its dependency (-1: none; a later one or itself: a damaged trace's cycle; often the one just
    # before, so that runs form) and its end. The walk, one event at a time, as it was written first:
    pred = np.array([i - 1 if p % 3 == 0 else min(p, len(links) - 1) for i, (p, _) in enumerate(links)], dtype=np.int64)
    end = np.array([e for _, e in links], dtype=np.int64)
    node = min(node, len(links) - 1)
    expected, seen = [], set()
    at = node
    while at >= 0 and at not in seen and end[at] > floor:
        seen.add(at)
        expected.append(at)
        at = int(pred[at])
    assert _walk(pred, end, node, floor, whole_from).tolist() == expected
