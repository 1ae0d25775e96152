"""Host time by op (a registered detector): each host event's self time, the stretches of its
thread's time in which it is the innermost open event. Traces are built here with the figures
worked out by hand; random ones are checked against a brute-force reader, real ones against each
thread's time in events read independently."""

from __future__ import annotations

import gzip
import json

import numpy as np
from builder import TraceBuilder
from conftest import DATA, analyzed, offline_answer
from hypothesis import given, settings
from hypothesis import strategies as st

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.cli import main
from traceagent.detect.detectors.host_ops import _dense, _self_ns

BERT = DATA / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"


def crossing_trace(tmp_path):
    """Thread 100: op A 0-100 holds B 10-40 (holding the launch call L 20-25) and C 50-60; the
    annotation X 30-80 crosses B's end. Innermost over each stretch: A 0-10, B 10-20, L 20-25,
    B 25-30, X 30-50, C 50-60, X 60-80, A 80-100: A 30, B 15, L 5, X 40, C 10 (100 µs, none twice).
    Thread 200: op D 0-50 holding a 0.5 µs launch at 1: D 49.5. A step marker over everything and an
    instant op count nothing; thread 300, which launches nothing (a monitor waiting), is left out."""
    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 100, cat="user_annotation")
    b.op("aten::A", 0, 100)
    b.op("aten::B", 10, 30)
    b.kernel("gemm", 30, 10, launch_at=20, launch_dur=5)
    b.op("X", 30, 50, cat="user_annotation")
    b.op("aten::C", 50, 10)
    b.op("aten::instant", 85, 0)
    b.op("aten::D", 0, 50, tid=200)
    b.kernel("gemm", 0, 10, launch_at=1, launch_dur=0.5, launch_tid=200)
    b.python("threading.py(359): wait", 0, 1000, tid=300)
    return b.write(tmp_path / "crossing.json")


def test_self_times_of_nested_and_crossing_events_are_worked_out_by_hand(tmp_path):
    result = analyze(crossing_trace(tmp_path)).ranks[0].results["host_ops"]
    assert (result.threads, result.launching_only, result.host_time_us) == (2, True, 150.0)  # 100 µs and 50
    got = {o.name: (o.calls, o.self_us, o.share_pct) for o in result.top}
    assert got == {"aten::D": (1, 49.5, 33.0), "X": (1, 40.0, 26.67), "aten::A": (1, 30.0, 20.0),
                   "aten::B": (1, 15.0, 10.0), "aten::C": (1, 10.0, 6.67), "cudaLaunchKernel": (2, 5.5, 3.67)}
    assert [o.name for o in result.top][:2] == ["aten::D", "X"]  # by self time, not by total
    # by kind, the same self times added up: ops A 30, B 15, C 10, D 49.5; the annotation X 40; the launches 5.5
    assert result.self_by_kind_us == {"op": 104.5, "annotation": 40.0, "runtime": 5.5}
    assert next(o for o in result.top if o.name == "aten::A").total_us == 100.0


def test_the_calls_that_wait_for_the_gpu_are_counted_by_hand(tmp_path):
    """On the launching thread: two stream syncs, a synchronous cudaMemcpy and a cudaFree wait (4); a launch and
    an async copy do not. A stream sync on a thread that launches nothing is left out with that thread."""
    b = TraceBuilder()
    b.kernel("gemm", 10, 5, launch_at=1, launch_dur=1)
    for at in (20, 40):
        b.runtime("cudaStreamSynchronize", at, 2)
    b.runtime("cudaMemcpy", 50, 3)
    b.runtime("cudaFree_v2", 60, 1)
    b.runtime("cudaMemcpyAsync", 70, 1)
    b.runtime("cudaStreamSynchronize", 80, 1, tid=300)
    analysis = analyze(b.write(tmp_path / "waits.json"))
    assert analysis.ranks[0].results["host_ops"].waits_for_gpu == 4
    said = offline_answer(analysis, "How many syncs are there?")
    assert ("**4 calls that wait for the GPU** on the thread that launches GPU work: `cudaStreamSynchronize` 2 calls "
            "(4.0 µs on the host); `cudaMemcpy` 1 call (3.0 µs on the host); `cudaFree_v2` 1 call (1.0 µs on the host)."
            in said)  # most host time first


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.integers(1, 20)), min_size=1, max_size=25))
def test_self_times_match_a_brute_force_reader(events):
    """Crossing events as well as nested ones (the stretches' path), against the brute-force reader."""
    tid = np.array([t for t, _, _ in events])
    start = np.array([s for _, s, _ in events], dtype=np.int64)
    end = start + np.array([d for _, _, d in events], dtype=np.int64)
    expected = _brute_force_self_ns(tid, start, end)
    assert _self_ns(tid, start, end).tolist() == expected.tolist()


def _brute_force_self_ns(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each ns of a thread to the open event started last (a tie: the shorter, then the later written)."""
    expected = np.zeros(len(start), dtype=np.int64)
    for thread in set(tid.tolist()):
        for t in range(int(end.max()) + 1):
            open_ = [i for i in range(len(start)) if tid[i] == thread and start[i] <= t < end[i]]
            if open_:
                expected[max(open_, key=lambda i: (start[i], start[i] - end[i], i))] += 1
    return expected


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_self_times_of_events_that_all_nest_match_the_brute_force_reader(random):
    """Ops inside ops, as a profiler records them (the nested path: an event's time less its children's),
    duplicates and shared starts and ends among them, on two threads written in any order."""
    events: list[tuple[int, int, int]] = []

    def inside(thread: int, lo: int, hi: int, depth: int) -> None:
        at = lo
        while at < hi and len(events) < 40:
            a = random.randint(at, hi - 1)
            b = random.randint(a + 1, hi)
            events.extend([(thread, a, b)] * random.choice([1, 1, 1, 2]))
            if depth < 4 and b - a > 2 and random.random() < 0.7:
                inside(thread, a, b, depth + 1)
            at = b

    inside(0, 0, 60, 0)
    inside(1, 0, 60, 0)
    random.shuffle(events)
    tid = np.array([t for t, _, _ in events])
    start = np.array([a for _, a, _ in events], dtype=np.int64)
    end = np.array([b for _, _, b in events], dtype=np.int64)
    got = _self_ns(tid, start, end)
    assert got.tolist() == _brute_force_self_ns(tid, start, end).tolist()


def _threads_time_in_events(path) -> float:
    """An independent reader: the host events (step markers aside) of each thread that launches a
    kernel, merged, in µs."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    by_thread: dict = {}
    launching = set()
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "python_function", "user_annotation", "cuda_runtime",
                                                   "cuda_driver") and not str(e["name"]).startswith("ProfilerStep#"):
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e.get("dur", 0)))
            if e["name"] in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"):
                launching.add((e["pid"], e["tid"]))
    total = 0.0
    for spans in (spans for thread, spans in by_thread.items() if thread in launching):
        reach = None
        for s, e in sorted(spans):
            if reach is None or s > reach:
                total += e - s
                reach = e
            elif e > reach:
                total += e - reach
                reach = e
    return total


def test_on_a_real_trace_self_times_add_up_to_the_threads_time_in_events():
    result = analyzed(BERT).ranks[0].results["host_ops"]
    assert abs(result.host_time_us - _threads_time_in_events(BERT)) < 0.01
    # every kind's own time, added up, is that time too (each µs rounded once per kind)
    assert abs(sum(result.self_by_kind_us.values()) - _threads_time_in_events(BERT)) < 0.01 * len(result.self_by_kind_us)
    assert result.self_by_kind_us["python"] > 0  # the BERT trace records Python frames


def test_the_question_the_report_and_a_trace_without_host_events(tmp_path):
    analysis = analyzed(BERT)
    ctx = AnalysisContext(analysis)
    for question in ("Which op is the slowest on the CPU?", "Where does the host spend its time?",
                     "What takes the most CPU time?", "Which ops have the most self time?", "Why is the host slow?",
                     "Why is the CPU so busy?"):
        assert understand(question, ctx).intent == "detector:host_ops", question
    for question in ("Is it CPU-bound?", "What was the host doing during the longest gap?",
                     "What does the CPU do while the GPU is idle?"):
        assert understand(question, ctx).intent != "detector:host_ops", question
    top = analysis.ranks[0].results["host_ops"].top[0]
    assert f"({top.kind})" in offline_answer(analysis, "Which op is the slowest on the CPU?")
    assert main(["report", str(BERT), "-o", str(tmp_path / "report.md")]) == 0
    assert "## Host time by op" in (tmp_path / "report.md").read_text()
    b = TraceBuilder()
    b.kernel("gemm", 0, 10)  # device work, no host event
    assert analyze(b.write(tmp_path / "bare.json")).ranks[0].results["host_ops"] is None


def test_a_recursive_frame_is_open_once_for_its_total(tmp_path):
    """Frame f 0-100 holds f 10-60 (a module's _call_impl inside another's), which holds aten::x
    20-30; a launch at 70-75. Self: f 10 + 10 + 30 + 10 + 25 = 85, x 10, the launch 5 (100 in all);
    f's total is the 100 µs it was open, not its two calls' 150."""
    b = TraceBuilder()
    b.python("module.py(1743): _call_impl", 0, 100)
    b.python("module.py(1743): _call_impl", 10, 50)
    b.op("aten::x", 20, 10)
    b.kernel("gemm", 80, 5, launch_at=70, launch_dur=5)
    result = analyze(b.write(tmp_path / "recursive.json")).ranks[0].results["host_ops"]
    got = {o.name: (o.calls, o.self_us, o.total_us) for o in result.top}
    assert got == {"module.py(1743): _call_impl": (2, 85.0, 100.0), "aten::x": (1, 10.0, 10.0),
                   "cudaLaunchKernel": (1, 5.0, 5.0)}
    assert result.host_time_us == 100.0


def test_runtime_calls_are_each_listed_with_their_calls_and_self_time_and_a_question_naming_one_leads_with_it(tmp_path):
    """By hand: aten::copy_ 0-100 holds cudaMemcpyAsync 10-50 and 60-70 (50 µs of self time in 2
    calls); a launch 80-85 inside it; cudaMalloc 120-150 alone (30 µs). Host time in events: 100 + 30
    = 130 µs. The runtime calls, by self time: cudaMemcpyAsync 50 (38.46%), cudaMalloc 30, the launch 5."""
    b = TraceBuilder()
    b.op("aten::copy_", 0, 100)
    b.runtime("cudaMemcpyAsync", 10, 40)
    b.runtime("cudaMemcpyAsync", 60, 10)
    b.kernel("gemm", 90, 10, launch_at=80, launch_dur=5)
    b.runtime("cudaMalloc", 120, 30)
    analysis = analyze(b.write(tmp_path / "calls.json"))
    result = analysis.ranks[0].results["host_ops"]
    assert [(c.name, c.kind, c.calls, c.self_us, c.share_pct) for c in result.runtime_calls] == [
        ("cudaMemcpyAsync", "runtime", 2, 50.0, 38.46), ("cudaMalloc", "runtime", 1, 30.0, 23.08),
        ("cudaLaunchKernel", "runtime", 1, 5.0, 3.85)]
    ctx = AnalysisContext(analysis)
    assert understand("How much time is spent in cudaMalloc?", ctx).intent == "detector:host_ops"
    text = offline_answer(analysis, "How much time is spent in cudaMalloc?")
    assert text.startswith("**`cudaMalloc`: 1 call, 30.0 µs on the host** (23.1% of the time in host events on the "
                           "thread that launches GPU work).")
    assert offline_answer(analysis, "Is hipMalloc slow?").startswith("**No `hipMalloc` calls**")
    assert understand("Is cudaStreamSynchronize slow?", ctx).intent == "sync"  # a sync's answer is its own
    # a launch or copy API's time asked: that answer, led by the API's host time (the same figures as above)
    assert understand("How much time is spent in cudaMemcpyAsync?", ctx).intent == "copies"
    assert offline_answer(analysis, "How much time is spent in cudaMemcpyAsync?").startswith(
        "**`cudaMemcpyAsync`: 2 calls, 50.0 µs on the host** (38.5% of the time in host events")
    launches = offline_answer(analysis, "How long do the cudaLaunchKernel calls take?")
    assert launches.startswith("**`cudaLaunchKernel`: 1 call, 5.0 µs on the host**")
    assert "**1 `cudaLaunchKernel` call** launched kernels the trace records" in launches


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=200))
def test_dense_codes_are_numpys_unique_with_its_inverse(codes):
    """The (name, kind) groups numbered by a table over the codes' range (or by sorting, where the range is wider
    than the codes): the same groups and the same numbering as np.unique gives, the independent reader here."""
    code = np.array(codes, dtype=np.int64)
    found, inverse = _dense(code)
    want_found, want_inverse = np.unique(code, return_inverse=True)
    assert found.tolist() == want_found.tolist() and inverse.tolist() == want_inverse.tolist()
