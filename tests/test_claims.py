"""Answers whose numbers exist in a tool result but are bound to the wrong quantity, blame the
wrong cause, or draw the wrong before/after conclusion are marked; right ones are not. The
answers are the wrong ones small local models wrote, with their figures taken from the detectors
at test time (ResNet50, num_workers=0: idle mostly from data loading)."""

from __future__ import annotations

import asyncio
import re
from functools import cache

import pytest
from conftest import RESNET_NW0, RESNET_NW4, analyzed
from fakes import ScriptedChatModel, tool_call
from langchain_core.messages import AIMessage

from traceagent.agent.claims import ClaimCheck, blamed_causes, stated_conclusion
from traceagent.agent.events import Answer
from traceagent.agent.llm import LLMConfig
from traceagent.agent.session import Session
from traceagent.agent.tools import AnalysisContext


@cache
def idle():
    return analyzed(RESNET_NW0).ranks[0].findings.idle


def answered(text: str, *tools: str, other=None) -> Answer:
    """The session's checked answer after the model called `tools` (idle_gaps by default)."""
    ctx = AnalysisContext(analyzed(RESNET_NW0), analyzed(other) if other else None)
    calls = [tool_call(t, {"top": 5} if t == "idle_gaps" else {}, call_id=f"c{i}") for i, t in
             enumerate(tools or ("idle_gaps",))]
    model = ScriptedChatModel(received=[], responses=[*calls, AIMessage(content=text)])

    async def run():
        # the checks themselves: without a draft the marked answer is what comes back (test_draft.py: with one,
        # the detectors answer instead and the marks are the reason)
        return [e async for e in Session(ctx, model, LLMConfig(draft=False)).ask("why is my GPU idle?")]
    events = asyncio.run(run())
    assert isinstance(events[-1], Answer)
    return events[-1]


def largest_gap_us() -> float:
    gaps = analyzed(RESNET_NW0).ranks[0].gaps
    return float(gaps["dur"].max()) / 1000


def test_total_idle_quoted_as_the_largest_gap_is_marked():
    answer = answered(f"The largest gap is {idle().idle_us:.0f} µs.")
    assert answer.unverified == [f"{idle().idle_us:.0f} µs (as the largest gap)"]


def test_the_launch_gap_threshold_quoted_as_the_largest_gap_is_marked():
    threshold = analyzed(RESNET_NW0).ranks[0].params.idle.launch_gap_us
    assert answered(f"The largest gap is {threshold:.1f} µs.").unverified == [f"{threshold:.1f} µs (as the largest gap)"]


def test_all_gaps_counted_as_one_causes_gaps_is_marked():
    answer = answered(f"There are {idle().gaps} gaps of data loading.")
    assert answer.unverified == [f"{idle().gaps} (gaps of dataloader)"]


@pytest.mark.parametrize("text", [
    lambda: f"The largest gap is {largest_gap_us():,.0f} µs, waiting for data loading.",
    lambda: f"Longest gap: {largest_gap_us() / 1000:.1f} ms.",
    lambda: f"Total idle time is {idle().idle_us / 1000:.1f} ms ({idle().idle_pct:.1f}% of the span).",
    lambda: f"{idle().by_cause_count['dataloader']} data-loading gaps take {idle().by_cause_us['dataloader'] / 1000:.0f} ms.",
    lambda: f"The GPU has {idle().gaps} gaps in all, {idle().by_cause_count['sync']} of them after a sync.",
])
def test_right_quantities_pass(text):
    answer = answered(text())
    assert answer.unverified == [] and not [w for w in answer.warnings if "blames" in w]


def test_blaming_a_cause_the_verdict_does_not_name_is_marked():
    answer = answered("Most gaps are delayed by cudaStreamSynchronize calls; remove them.")
    warning = next(w for w in answer.warnings if "blames" in w)
    assert warning.startswith("the answer blames host synchronizations, but the detectors' verdict names data loading")


@pytest.mark.parametrize("text", [
    "The GPU is mostly waiting for data loading; the sync calls matter less.",
    "Idle time comes from the DataLoader running in the main process.",
    "It is data-loading bound.",
])
def test_naming_the_verdicts_cause_is_not_marked(text):
    assert not [w for w in answered(text).warnings if "blames" in w]


def test_blamed_causes_are_read_from_the_words():
    assert blamed_causes("It is launch-bound, caused by tiny kernels, and delayed by .item() calls.") == \
        ["launch_overhead", "sync"]
    assert blamed_causes("Use CUDA graphs.") == []


def test_saying_a_change_helped_when_nothing_changed_is_marked():
    # the trace compared with itself: nothing changed
    answer = answered("Yes, the change helped: the GPU is less idle now.", "compare_traces", other=RESNET_NW0)
    warning = next(w for w in answer.warnings if "change" in w)
    result = ClaimCheck(AnalysisContext(analyzed(RESNET_NW0), analyzed(RESNET_NW0))).comparison
    assert warning.startswith(f"the answer says the change helped, but step time changed {result.slower_pct:+.1f}%")


def test_right_conclusions_pass():
    fixed = answered("Yes, the change helped: data loading no longer stalls the GPU.", "compare_traces",
                     other=RESNET_NW4)
    unchanged = answered("No, it did not help: the step time is unchanged.", "compare_traces", other=RESNET_NW0)
    assert not [w for w in fixed.warnings + unchanged.warnings if "change" in w]


def test_saying_a_real_fix_did_not_help_is_marked():
    answer = answered("No, the change did not help.", "compare_traces", other=RESNET_NW4)
    assert any(w.startswith("the answer says the change did not help, but") for w in answer.warnings)


def test_a_runaway_number_is_shown_cut():
    answer = answered("The kernel ran " + "9" * 2000 + " times.")
    assert answer.unverified == ["999999999999999999999999… (2000 characters)"]


def test_naming_the_compared_traces_cause_is_not_marked():
    after = analyzed(RESNET_NW4).verdict
    assert after.root_cause == "host_other" != analyzed(RESNET_NW0).verdict.root_cause
    answer = answered("After the change the GPU is mostly waiting on other host work.", "compare_traces",
                      other=RESNET_NW4)
    assert not [w for w in answer.warnings if "blames" in w]


def asked(question: str, text: str) -> Answer:
    """The session's checked answer to `question` after one verdict call."""
    ctx = AnalysisContext(analyzed(RESNET_NW0))
    model = ScriptedChatModel(received=[], responses=[tool_call("verdict", {}), AIMessage(content=text)])

    async def run():
        return [e async for e in Session(ctx, model, LLMConfig(draft=False)).ask(question)]
    return asyncio.run(run())[-1]


@pytest.mark.parametrize("question, text", [
    ("Which GPU is this?", "The trace ran on a Tesla V100 with CUDA 12.1, PyTorch 1.9."),
    ("Where is the sync?", "Look at resnet50_profiler_api.py(44), in step 7."),  # a step the trace has
    ("Is step 5 on rank 3 slow?", "Step 5 on rank 3 is not in this trace: it has rank 0 only."),  # the user's
    ("Why are steps 3 to 5 slower than step 8?", "Steps 3 to 5 and step 8 are not in this trace."),
    ("What batch size should I use?", "Keep a batch size of 64 and num_workers=4, on GPU 0."),
])
def test_answers_made_only_of_identifiers_are_not_marked(question, text):
    answer = asked(question, text)
    assert answer.unverified == [], answer.unverified


def test_a_rank_neither_the_trace_nor_the_question_has_is_still_marked():
    assert asked("Which rank is slow?", "Rank 3 is the slowest.").unverified == ["Rank 3"]


def test_the_wrong_answers_a_small_model_gave_are_marked_whatever_their_wording():
    # the table, each against the ResNet trace (data loading; 5 data-loading gaps of 8285)
    idle_ = idle()
    blamed_sync = answered("The GPU is idle because the host is blocking on the GPU (.item(), .cpu(), a synchronize).")
    assert any("blames host synchronizations" in w for w in blamed_sync.warnings)
    blamed_host = answered("The `host_other` cause is the main reason.")
    assert any("blames other host work" in w for w in blamed_host.warnings)
    counted = answered(f"The number of idle gaps that come from data loading is {idle_.gaps}.")
    assert counted.unverified == [f"{idle_.gaps} (gaps of dataloader)"]
    helped = answered("Yes, your change made the step faster.", "compare_traces", other=RESNET_NW0)
    assert any("says the change helped" in w for w in helped.warnings)


@pytest.mark.parametrize("text", [
    "Data loading is the main reason the GPU waits.",
    "The GPU is idle because the DataLoader runs in the main process.",
    "It waits for data loading most of the time.",
    "The bottleneck is the input pipeline.",
    "Most idle time comes from data loading; syncs are minor.",
    "The root cause: data loading.",
    "Idle time is dominated by the DataLoader.",
    "The training loop is input-bound: the dataloader cannot keep up.",
    "The GPU sits idle while the host fetches batches, mainly in the dataloader.",
    "Data loading, not launch overhead, is the main cause.",
])
def test_right_causes_in_ten_phrasings_pass(text):
    answer = answered(text)
    assert not any("blames" in w for w in answer.warnings), answer.warnings


@pytest.mark.parametrize("text, blamed", [
    ("What keeps the GPU idle is the host blocking on the GPU.", "sync"),
    ("Host synchronizations leave the GPU idle between steps.", "sync"),
    ("Launch overhead is what limits this loop.", "launch_overhead"),
    ("Idle time here: the host waits for the device to finish every iteration.", "sync"),
])
def test_a_diagnosis_in_other_words_is_read_from_the_vocabulary(text, blamed):
    # no blaming frame ("because", "due to"): the one cause a diagnosing sentence names
    assert blamed_causes(text) == [blamed]
    assert any("blames" in w for w in answered(text).warnings)


@pytest.mark.parametrize("text", [
    "Syncs are minor here; the GPU is idle while data loading runs.",
    "It is not launch overhead that keeps the GPU idle: the DataLoader is.",
    "If syncs were the problem, the gaps would follow .item() calls; they follow the DataLoader instead.",
    "The GPU is idle 39% of the time: data loading 29%, other host work 5%, launch overhead 4%.",
])
def test_discounted_or_listed_causes_are_not_blamed(text):
    assert not [c for c in blamed_causes(text) if c != "dataloader"], blamed_causes(text)


def test_the_savings_of_other_findings_listed_are_not_blamed():
    # Qwen2.5-Coder-1.5B on the MI300 trace listed the other findings' savings as the draft does;
    # a sentence that says what a fix would save diagnoses nothing (a blaming frame still counts)
    listed = ("Fixing exposed communication would save up to 64.2% of step time. "
              "Fixing idle time other host work would save up to 2.7% of step time. "
              "Fixing idle time launch latency (short gaps between kernels) would save up to 0.3%.")
    assert blamed_causes(listed) == []
    assert blamed_causes("Removing the syncs would save 5%, because the GPU waits on loss.item().") == ["sync"]



RESTATED = ("To determine if your change made the step faster, I compared the before and after traces. "
            "The step time remained the same, within the 2% run-to-run noise.")


def test_a_question_restated_is_no_conclusion():
    # Qwen2.5-Coder-1.5B's answer on the trace against itself: right, and not marked
    assert not [w for w in answered(RESTATED, "compare_traces", other=RESNET_NW0).warnings if "change" in w]
    # the same words where the change did help are marked
    helped = answered(RESTATED, "compare_traces", other=RESNET_NW4)
    assert any(w.startswith("the answer says the change did not help, but") for w in helped.warnings)


@pytest.mark.parametrize("text", ["Did it help? Yes: the step is 20% faster.", "It got faster: 20% less step time.",
                                  "The step is quicker now; the change sped it up."])
def test_a_yes_after_a_question_or_in_other_words_is_read(text):
    assert any("says the change helped" in w for w in answered(text, "compare_traces", other=RESNET_NW0).warnings)


def test_a_figure_of_our_prose_copied_without_its_unit_is_no_new_number():
    # Qwen2.5-Coder-1.5B copied "1951.77" from a saving's reasoning ("on the critical path for
    # 1951.77 µs of its 2970.95 µs"): a figure the verdict tool wrote, not one it made up
    reasoning = next(s.reasoning for s in analyzed(RESNET_NW0).ranks[0].findings.savings if "critical path" in s.reasoning)
    on_path, of_all = re.findall(r"(\d+(?:\.\d+)?) µs", reasoning)[:2]
    assert asked("How much would a faster kernel save?",
                 f"It is on the critical path for {on_path} of its {of_all}.").unverified == []


def test_a_gaps_start_said_as_the_largest_idling_gap_is_marked():
    # SmolLM2-135M: "The largest idling gap is 717.50 ms": the largest gap's start, not its length
    gap = idle().top_gaps[0]
    start = f"{gap.start_us / 1000:.2f} ms"
    assert answered(f"The largest idling gap is {start}.").unverified == [f"{start} (as the largest gap)"]
    assert answered(f"The longest GPU idle gap is {gap.dur_us / 1000:.2f} ms.").unverified == []


def test_a_gap_count_is_not_bound_to_the_cause_the_next_sentence_names():
    # Qwen2.5-Coder-1.5B: "The other host work is 2.34 ms, which is 13 gaps. The launch latency is
    # …": the 13 are other host work's, not launch latency's
    other = idle().by_cause_count["host_other"]
    answer = answered(f"Other host work is {other} gaps. Data loading is the main cause of the idle time.")
    assert answer.unverified == []
    assert answered(f"There are {other} gaps of data loading.").unverified == [f"{other} (gaps of dataloader)"]


def test_a_yes_beside_the_figures_that_deny_it_is_marked():
    # Qwen2.5-Coder-1.5B on the MI300 trace against itself: "Yes" and "made the step faster", then
    # "0.0% faster"; where nothing changed, the sentences that say it helped are wrong whatever follows
    mixed = ("**Yes:** my change made the step faster. The step time decreased from 16.21 ms to 16.21 ms, which "
             "is a 0.0% improvement, measured 0.0% faster.")
    # and its next try, a bold "Yes" (no word before it) over figures that say nothing changed
    bold = "**Yes:** the step time is 28.87 ms before and 28.87 ms after the change, which is a 0% increase."
    for text in (mixed, bold):
        assert stated_conclusion(text)[0]
        assert any("says the change helped" in w for w in answered(text, "compare_traces", other=RESNET_NW0).warnings)
    assert stated_conclusion(mixed) == (True, True)
    # where the change did help, an answer that also says what it did not fix is weighed, not marked
    weighed = "Yes, it helped: the step is faster. It did not fix every gap: other host work remains."
    assert stated_conclusion(weighed) == (True, True)
    assert not [w for w in answered(weighed, "compare_traces", other=RESNET_NW4).warnings if "change" in w]


def test_one_causes_share_said_as_the_idle_share_is_marked():
    # 28.6% is data loading's share of the span (in the tool result), not the GPU's idle share
    share = idle().cause_pct("dataloader")
    assert answered(f"The GPU is idle {share:.1f}% of the span.").unverified == [f"{share:.1f}% (as the total idle)"]
    assert answered(f"The GPU is {idle().idle_pct:.1f}% idle.").unverified == []
