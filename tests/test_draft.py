"""The detectors draft, the model explains: each question reaches the model with the offline
analyst's answer and the tool results behind it, and the model ends its turn with a structured
answer (final_answer) whose claims are checked by value, whatever the wording. Through the real
openai client against a scripted server on 127.0.0.1; every expected figure is computed from the
analysis at test time (ResNet50, num_workers=0: idle mostly from data loading)."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import RESNET_NW0, analyzed
from fakes import FakeOpenAIServer, Reply
from langchain_core.messages import AIMessage
from test_ask_server import ask

from traceagent.agent.events import Answer
from traceagent.agent.offline import OfflineAnalyst
from traceagent.agent.tools import AnalysisContext


def facts() -> dict:
    """What the detectors say about the ResNet trace, read straight from the analysis."""
    rank = analyzed(RESNET_NW0).ranks[0]
    idle = rank.findings.idle
    return {"idle_pct": idle.idle_pct, "idle_ms": idle.idle_us / 1000, "gaps": idle.gaps,
            "loader_gaps": idle.by_cause_count["dataloader"], "largest_ms": float(rank.gaps["dur"].max()) / 1e6,
            "sync_gaps": idle.by_cause_count["sync"], "mean_step_ms": rank.findings.steps.mean_us / 1000}


def right_answer() -> dict:
    f = facts()
    return {"text": f"The GPU is idle {f['idle_pct']:.1f}% of the span, mostly waiting for data loading: "
                    f"{f['loader_gaps']} gaps, the largest {f['largest_ms']:.1f} ms.",
            "root_cause": "dataloader",
            "quantities": [{"kind": "idle_share", "value": round(f["idle_pct"], 1), "unit": "%"},
                           {"kind": "gap_count", "value": f["loader_gaps"], "cause": "dataloader"},
                           {"kind": "largest_gap", "value": round(f["largest_ms"], 1), "unit": "ms"}]}


def finish(claims: dict) -> Reply:
    return Reply.tool("final_answer", claims)


def warnings(err: str) -> list[str]:
    return [line.split("warning: ", 1)[1] for line in err.splitlines() if "warning: " in line]


def replaced(err: str) -> str:
    """Why the detectors answered instead ("" when the model's answer stood): a marked answer is
    replaced by the draft, its marks the reason."""
    return next((line for line in err.splitlines() if "answering from the detectors instead" in line), "")


def test_the_model_starts_from_the_detectors_draft(model_env, capsys):
    with FakeOpenAIServer([finish(right_answer())]) as server:
        model_env(server.url)
        code, out, err = ask(capsys, "Why is my GPU idle?", "-v")
    assert code == 0 and out.strip() == right_answer()["text"] and not warnings(err)
    first = server.requests[0]
    assert "final_answer" in [t["function"]["name"] for t in first["tools"]]
    # the question, then the draft's calls as made, each answered, the draft last, and the question again
    messages = first["messages"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "tool", "tool", "tool", "user"]
    assert [c["function"]["name"] for c in messages[2]["tool_calls"]] == ["verdict", "idle_gaps", "draft_answer"]
    assert messages[-1]["content"].startswith("My question was: Why is my GPU idle?")
    draft = json.loads(messages[-2]["content"])
    # the offline analyst's answer to the same question, run here on its own
    ctx = AnalysisContext(analyzed(RESNET_NW0))

    async def offline() -> str:
        return [e async for e in OfflineAnalyst(ctx).answer("Why is my GPU idle?", note="")][-1].text.strip()
    assert draft["draft"] == asyncio.run(offline())
    assert draft["root_cause"] == analyzed(RESNET_NW0).verdict.root_cause == "dataloader"
    f = facts()
    claimed = {(q["kind"], q.get("cause")): q["value"] for q in draft["quantities"]}
    assert claimed[("idle_share", None)] == round(f["idle_pct"], 1)
    assert claimed[("largest_gap", None)] == pytest.approx(f["largest_ms"], abs=0.005)
    assert claimed[("gap_count", "dataloader")] == f["loader_gaps"]
    assert "draft_answer" in messages[0]["content"]  # the system prompt says how to use it


def test_without_the_draft_the_model_starts_from_the_question(model_env, capsys):
    with FakeOpenAIServer([Reply.tool("verdict", {}), finish(right_answer())]) as server:
        model_env(server.url, draft=False)
        code, out, _ = ask(capsys)
    assert code == 0 and out.strip() == right_answer()["text"]
    assert [m["role"] for m in server.requests[0]["messages"]] == ["system", "user"]
    assert "draft_answer" not in server.requests[0]["messages"][0]["content"]


def _wrong(field: str) -> tuple[dict, str]:
    """The right answer with one claim wrong (text and structure alike), and the start of its mark."""
    f, claims = facts(), right_answer()
    quantities = claims["quantities"]
    if field == "root_cause":
        return claims | {"root_cause": "sync"}, "the answer blames host synchronizations, but the detectors' verdict"
    if field == "largest_gap":  # total idle quoted as the largest gap
        quantities[2]["value"] = round(f["idle_ms"], 1)
        claims["text"] = claims["text"].replace(f"{f['largest_ms']:.1f} ms", f"{f['idle_ms']:.1f} ms")
        return claims, f"the answer says largest gap is {round(f['idle_ms'], 1):g} ms, but the detectors say"
    if field == "gap_count":  # every gap counted as data loading's
        quantities[1]["value"] = f["gaps"]
        claims["text"] = claims["text"].replace(f"{f['loader_gaps']} gaps", f"{f['gaps']} gaps")
        return claims, f"the answer says gap count (dataloader) is {f['gaps']}, but the detectors say"
    if field == "idle_share":  # the share of one cause quoted as all idle
        share = round(analyzed(RESNET_NW0).ranks[0].findings.idle.cause_pct("dataloader"), 1)
        quantities[0]["value"] = share
        claims["text"] = claims["text"].replace(f"{f['idle_pct']:.1f}%", f"{share:.1f}%")
        return claims, f"the answer says idle share is {share:g} %, but the detectors say"
    if field == "scope":  # a rank the trace does not have
        quantities[0]["rank"] = 3
        return claims, "the answer gives idle share on rank 3, but"
    raise AssertionError(field)


@pytest.mark.parametrize("field", ["root_cause", "largest_gap", "gap_count", "idle_share", "scope"])
def test_each_wrong_claim_in_a_structured_answer_is_marked(model_env, capsys, field):
    claims, mark = _wrong(field)
    with FakeOpenAIServer([finish(claims)]) as server:
        model_env(server.url)
        code, out, err = ask(capsys)
    # checked before it shows: the user gets the detectors' answer, the mark is why
    assert code == 0 and claims["text"] not in out and "The model did not answer" in out
    assert mark in replaced(err), err


def test_saying_a_change_helped_is_checked_in_the_structure(model_env, capsys):
    claims = {"text": "Yes: the step is quicker now.", "helped": True}  # no word the prose check knows
    with FakeOpenAIServer([finish(claims), finish(claims | {"helped": False, "text": "It did not."})]) as server:
        model_env(server.url)
        _, _, err = ask(capsys, "Did my change make the step faster?", "--compare", str(RESNET_NW0))
        assert "the answer says the change helped, but" in replaced(err), err
        _, _, err = ask(capsys, "Did my change make the step faster?", "--compare", str(RESNET_NW0))
    assert not warnings(err) and not replaced(err)  # the same trace twice: it did not help


def test_the_text_may_state_nothing_beyond_its_claims(model_env, capsys):
    claims = right_answer()
    claims["text"] += " Syncs are the real bottleneck, and 77 ms more is lost elsewhere."
    with FakeOpenAIServer([finish(claims)]) as server:
        model_env(server.url)
        _, _, err = ask(capsys)
    said = replaced(err)
    assert "the text states 77 ms, which is none of the figures its answer claims" in said
    assert "the text blames host synchronizations, but its answer names data loading" in said


@pytest.mark.parametrize("text", [
    lambda f: f"Idle: {f['idle_pct']:.1f}%. Largest gap: {f['largest_ms']:.1f} ms ({f['loader_gaps']} data-loading gaps).",
    lambda f: f"Data loading is why: {f['loader_gaps']} of its gaps, one of {f['largest_ms']:.1f} ms; "
              f"the GPU waits {f['idle_pct']:.1f}% of the time.",
    lambda f: f"{f['idle_pct']:.1f}% idle, mainly the input pipeline (longest stall {f['largest_ms']:.1f} ms, "
              f"{f['loader_gaps']} stalls from the DataLoader) on the Tesla V100, rank 0, step 7.",
])
def test_right_structured_answers_in_other_words_are_not_marked(model_env, capsys, text):
    claims = right_answer() | {"text": text(facts())}
    with FakeOpenAIServer([finish(claims)]) as server:
        model_env(server.url)
        code, _, err = ask(capsys)
    assert code == 0 and not warnings(err) and not replaced(err) and "unverified" not in err, err


def test_a_server_without_tool_calls_may_send_the_structure_as_json(model_env, capsys):
    claims, _ = _wrong("gap_count")
    with FakeOpenAIServer([Reply.text("```json\n" + json.dumps(claims) + "\n```")]) as server:
        model_env(server.url)
        code, out, err = ask(capsys)
    assert code == 0 and "{" not in out.split("\n\n")[0]  # never the JSON
    assert "the answer says gap count (dataloader)" in replaced(err)


def test_a_final_answer_without_text_is_sent_back(model_env, capsys):
    with FakeOpenAIServer([finish({"root_cause": "dataloader"}), finish(right_answer())]) as server:
        model_env(server.url)
        code, out, _ = ask(capsys)
    assert code == 0 and out.strip() == right_answer()["text"] and len(server.requests) == 2
    error = json.loads(server.requests[1]["messages"][-1]["content"])["error"]
    assert "text" in error


@pytest.mark.parametrize("text, mark", [
    ("The GPU is idle because the host is blocking on the GPU (.item(), .cpu(), a synchronize).",
     "the answer blames host synchronizations"),
    ("The `host_other` cause is the main reason.", "the answer blames other host work"),
    ("The number of idle gaps that come from data loading is {gaps}.", "(gaps of dataloader) is in no tool result"),
    ("The largest idle gap is {idle_us} µs.", "(as the largest gap) is in no tool result"),
])
def test_the_small_models_wrong_prose_answers_are_marked_through_the_server(model_env, capsys, text, mark):
    f = facts()
    reply = text.format(gaps=f["gaps"], idle_us=f"{f['idle_ms'] * 1000:.1f}")
    with FakeOpenAIServer([Reply.text(reply)]) as server:
        model_env(server.url)
        code, out, err = ask(capsys)
    # it streamed, so it stays, apart; the detectors' answer follows, the mark is why
    assert code == 0 and out.startswith(reply) and mark in replaced(err), err


def test_a_prose_yes_to_an_unchanged_trace_is_marked_through_the_server(model_env, capsys):
    with FakeOpenAIServer([Reply.text("Yes, your change made the step faster.")]) as server:
        model_env(server.url)
        _, _, err = ask(capsys, "Did my change make the step faster?", "--compare", str(RESNET_NW0))
    assert "the answer says the change helped, but" in replaced(err), err


def test_the_answer_events_carry_the_structured_marks():
    """The same check in the session's own events (what the chat app and `eval` read)."""
    from fakes import ScriptedChatModel, tool_call

    from traceagent.agent.session import Session

    claims, mark = _wrong("largest_gap")
    model = ScriptedChatModel(received=[], responses=[tool_call("final_answer", claims)])

    async def run():
        return [e async for e in Session(AnalysisContext(analyzed(RESNET_NW0)), model).ask("why is my GPU idle?")]
    answer = asyncio.run(run())[-1]
    assert isinstance(answer, Answer) and claims["text"] not in answer.text
    assert any(mark in w for w in answer.warnings)


@pytest.mark.parametrize("reply", [Reply.text("I hope this helps! Let me know if you have other questions."),
                                   Reply.tool("final_answer", {"text": "Happy to help with your trace."})])
def test_an_answer_that_claims_nothing_is_replaced_by_the_draft(model_env, capsys, reply):
    # a model too small to use what it was given: no figure, no cause, no conclusion
    with FakeOpenAIServer([reply]) as server:
        model_env(server.url)
        code, out, err = ask(capsys)
    assert code == 0 and "makes no claim the checks can read (no figure, no cause, no conclusion): answering from the " \
        "detectors" in err
    # what streamed stays, apart; the answer is the offline analyst's, after it
    answer = out.split("\n\n", 1)[1] if "I hope this helps" in out else out
    assert "Happy to help" not in answer and "I hope this helps" not in answer
    assert "waiting for data loading" in answer and "The model did not answer" in answer


def test_the_question_said_back_is_no_claim_though_it_has_a_word_the_tools_wrote(model_env, capsys):
    # SmolLM2-135M on the trace against itself; "step" is a value in compare_traces' JSON (its
    # time basis), not a name quoted from the trace, so the answer claims nothing and is replaced
    with FakeOpenAIServer([Reply.text("Yes, my answer was: Did my change make the step faster?")]) as server:
        model_env(server.url)
        code, out, err = ask(capsys, "Did my change make the step faster?", "--compare", str(RESNET_NW0))
    assert code == 0 and "makes no claim the checks can read" in err and "no measurable change" in out


def test_a_terse_right_answer_naming_the_kernel_stands(model_env, capsys):
    top = analyzed(RESNET_NW0).ranks[0].findings.kernels.top[0].short_name
    with FakeOpenAIServer([Reply.text(f"`{top}`.")]) as server:
        model_env(server.url)
        code, out, err = ask(capsys, "Which kernel takes the most GPU time?")
    assert code == 0 and out.strip() == f"`{top}`." and "answering from the detectors" not in err


def test_the_cause_a_question_is_about_may_be_named_back():
    """On TraceLens's MI300 trace (exposed communication), the largest gap is other host work: an
    answer about that gap names it without blaming the program; blaming it for the idle is marked."""
    from conftest import MI300
    from fakes import ScriptedChatModel

    from traceagent.agent.session import Session

    ctx = AnalysisContext(analyzed(MI300))
    assert ctx.analysis.verdict.root_cause == "communication"
    largest = float(ctx.analysis.ranks[0].gaps["dur"].max()) / 1e6

    def reply(question: str, text: str) -> Answer:
        model = ScriptedChatModel(received=[], responses=[AIMessage(content=text)])

        async def run():
            return [e async for e in Session(AnalysisContext(analyzed(MI300)), model).ask(question)]
        return asyncio.run(run())[-1]
    about_gap = reply("How long is the largest idle gap?", f"The longest gap lasts {largest:.2f} ms. The other host "
                                                            "work refers to the time the host spends while the GPU is idle.")
    blamed = reply("Why is my GPU idle?", "The GPU is idle because of other host work.")
    assert not [w for w in about_gap.warnings if "blames" in w]
    assert any("the answer blames other host work, but" in w for w in blamed.warnings)
