"""The registry is the only path from a trace to its results: every detector (the verdict, the
savings and the critical path too) declares what it reads and runs after it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from traceagent import analyze
from traceagent.agent.question import understand
from traceagent.agent.tools import AnalysisContext
from traceagent.detect import registry
from traceagent.detect.analysis import analyze_trace
from traceagent.detect.detectors.base import Detector, Inputs, Key
from traceagent.detect.verdict.diagnose import diagnose
from traceagent.trace.load import load_file

DATA = Path(__file__).parent / "data"
TRACE = DATA / "kineto" / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"


def _detector(name: str, *reads: str) -> Detector:
    return Detector(name, name, "", None, object, lambda i, p: [i[r] for r in reads], reads=reads, tool=False)


def test_each_detector_runs_after_the_detectors_it_reads():
    position = {d.name: i for i, d in enumerate(registry.RUN_ORDER)}
    assert set(position) == {d.name for d in registry.DETECTORS}
    for d in registry.RUN_ORDER:
        assert all(position[read] < position[d.name] for read in d.reads), d.name
    # the verdict is a consumer like any other: it reads the savings, which read the critical path
    assert position["critical_path"] < position["savings"] < position["verdict"]


def test_a_read_no_detector_provides_or_a_cycle_is_refused_by_name():
    with pytest.raises(TypeError, match="'b' reads 'nothing'"):
        registry._in_order((_detector("a"), _detector("b", "nothing")))
    with pytest.raises(TypeError, match="cycle: a, b"):
        registry._in_order((_detector("a", "b"), _detector("b", "a")))
    # listed order is kept where reads allow it
    ordered = registry._in_order((_detector("late", "early"), _detector("early"), _detector("other")))
    assert [d.name for d in ordered] == ["early", "late", "other"]


def test_the_analysis_holds_every_detectors_result_and_the_verdict_is_drawn_from_them():
    trace = load_file(str(TRACE), use_cache=False)
    rank = analyze_trace(trace)
    assert set(rank.results) == {d.name for d in registry.DETECTORS} - {"gaps"}
    assert rank.kept_gaps is not None  # the gap table is kept beside the results, not in them
    f = rank.findings
    assert f.idle is rank.results["idle"] and f.savings is rank.results["savings"]
    assert rank.verdict == replace(diagnose(f, rank.params.verdict), rank=trace.meta.rank)
    # every key of a rank's JSON comes from a detector's declared keys
    record = rank.record()
    assert record.hot_kernels == rank.results["kernels"].top
    assert record.kernels.count == rank.results["kernels"].kernels


def test_a_new_detector_reads_another_detectors_result_and_its_parameters(monkeypatch):
    """A detector of kernels shorter than 2 µs, reading the kernels detector's result and the gap
    table; its parameter comes from the analysis. Expected: counted here from the trace's rows."""
    seen = {}

    def short_kernels(inputs: Inputs, under_us: float) -> int:
        seen["kernels"], seen["gaps"] = inputs["kernels"], inputs["gaps"]
        gpu = inputs.trace.gpu
        kernels = gpu[gpu["kind"] == "kernel"]
        return int(((kernels["end"] - kernels["start"]) < under_us * 1000).sum())

    short = Detector("tiny_kernels", "Tiny kernels", "", 2.0, int, short_kernels, reads=("kernels", "gaps"),
                     keys=(Key("tiny_kernels", int),))
    monkeypatch.setattr(registry, "RUN_ORDER", registry._in_order((short, *registry.DETECTORS)))
    trace = load_file(str(TRACE), use_cache=False)
    rank = analyze_trace(trace)
    assert seen["kernels"] is rank.results["kernels"] and seen["gaps"] is rank.kept_gaps
    kernels = trace.gpu[trace.gpu["kind"] == "kernel"]
    assert rank.results["tiny_kernels"] == int(((kernels["end"] - kernels["start"]) < 2000).sum()) > 0


def test_a_detector_reads_only_what_it_declares(monkeypatch):
    # the kernels detector runs before this one, but this one does not name it in its reads
    sneaky = Detector("sneaky", "Sneaky", "", None, object, lambda i, p: i["kernels"], reads=("gaps",), tool=False)
    monkeypatch.setattr(registry, "RUN_ORDER", registry._in_order((*registry.DETECTORS, sneaky)))
    with pytest.raises(KeyError, match="detector 'sneaky' reads 'kernels': name it in its Detector's reads"):
        analyze_trace(load_file(str(TRACE), use_cache=False))


def test_each_side_panel_finding_of_a_registered_detector_asks_a_question_it_answers():
    """A click on a detector's finding in the chat app's side panel asks its question: the offline
    analyst must read it as that detector's, on every rank of a real trace."""
    analysis = analyze(TRACE)
    ctx = AnalysisContext(analysis)
    asked = [(d.name, question) for r in analysis.ranks for d in registry.DETECTORS if d.asks and d.tool
             for _, question in d.panel(r.results.get(d.name), " on rank 0")]
    assert len(asked) >= 4  # the registered detectors this trace has results for
    for name, question in asked:
        assert understand(question, ctx).intent == f"detector:{name}", question


#: a question each detector with a lead hook answers with a lead of its own
LED = {"precision": "Are tensor cores used?", "host_ops": "How many threads launch work?",
       "modules": "How many layers does the model have?", "grid_fill": "What is the achieved occupancy?",
       "time_by_class": "How much time does convolution take?", "libraries": "How much time is in cuDNN?",
       "training_phases": "How long does the optimizer take?", "op_time": "Which op launches the most kernels?",
       "streams": "Do kernels overlap across streams?", "layout": "Am I using channels_last?",
       "launch_queue": "Is the launch queue full?"}


@pytest.mark.parametrize("name", sorted(LED))
def test_a_detectors_lead_hook_starts_the_offline_answer_to_what_was_asked_of_it(name):
    """The offline analyst answers a registered detector's questions with what its `lead` hook says of the
    result first, then its sentence: no plan of its own. Expected: the hook called here on the same result."""
    from conftest import B200, RESNET_NW0, analyzed, offline_answer

    detector = next(d for d in registry.DETECTORS if d.name == name)
    question = LED[name]
    led = [(a, first) for a in map(analyzed, (RESNET_NW0, B200))
           if (first := detector.lead_for(a.focus.results.get(name), question)) is not None]
    assert led, f"no trace here gives {name}'s lead for {question!r}"
    analysis, first = led[0]
    assert understand(question, AnalysisContext(analysis)).intent == f"detector:{name}"
    said = offline_answer(analysis, question)
    assert said.startswith(f"{first}\n\n**{detector.title}.**")


def test_every_detector_with_a_lead_names_the_questions_it_answers():
    # a lead is what the offline analyst's answer to its questions starts with: without questions it never runs
    assert {d.name for d in registry.DETECTORS if d.lead is not None} == set(LED)
    assert all(d.asks and d.tool for d in registry.DETECTORS if d.lead is not None)
