"""What small local models do, through the real openai client against a scripted server on
127.0.0.1: tool calls written as text, dozens of calls in one reply, requests over the context,
keep-alive-only streams, and answers with no tool behind them. The scripted replies take their
numbers from the detectors at test time. Most tests here are of the model's own calls, so they
turn the detectors' draft off (test_draft.py has it on)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from conftest import DLRM_8RANK, NSYS_BEFORE, RESNET_NW0, RESNET_NW4, analyzed
from fakes import FakeOpenAIServer, Reply
from test_ask_server import ask, said

from traceagent.agent import session as session_module
from traceagent.agent.session import MAX_CALLS_PER_ROUND, Session
from traceagent.agent.tools import AnalysisContext

CALL = {"name": "idle_gaps", "arguments": {"cause": "dataloader", "top": 2}}


def tool_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("written", [
    f"```json\n{json.dumps(CALL)}\n```",
    json.dumps(CALL),
    f"<tool_call>\n{json.dumps(CALL)}\n</tool_call>",
    f"[TOOL_CALLS][{json.dumps(CALL)}]",
    '{"type": "function", "function": {"name": "idle_gaps", "parameters": "{\\"cause\\": \\"dataloader\\", \\"top\\": 2}"}}',
    "<function=idle_gaps>\n<parameter=cause>dataloader</parameter>\n<parameter=top>2</parameter>\n</function>",
    'functions.idle_gaps(cause="dataloader", top=2)',
    'I will look at the gaps.\nidle_gaps({"cause": "dataloader", "top": 2})',
])
def test_a_tool_call_written_as_text_is_run_as_a_call(model_env, capsys, written):
    answer = f"Data loading: {said('loader_pct')} of the span."
    with FakeOpenAIServer([Reply.text(written), Reply.text(answer)]) as server:
        model_env(server.url, draft=False)
        code, out, err = ask(capsys, "why is my GPU idle?", "-v")
    assert code == 0 and out.strip().endswith(answer)
    if not written.startswith("I will"):  # a reply that starts as a call is held back, not shown as an answer
        assert out.strip() == answer
    assert "tool: idle_gaps(" in err and "wrote 1 tool call as text" in err and "warning" not in err
    result = json.loads(tool_messages(server.requests[1])[0]["content"])
    assert result["matching_gaps"] == analyzed(RESNET_NW0).ranks[0].findings.idle.by_cause_count["dataloader"]


def test_an_answer_that_quotes_a_call_is_an_answer(model_env, capsys):
    prose = (f"The GPU waits for data loading: {said('loader_time')}, {said('loader_pct')} of the span. "
             "To see the gaps yourself, the tool call is " + json.dumps(CALL) + ". "
             + " ".join(f"Worker {i} loads its own batches." for i in range(12)))
    with FakeOpenAIServer([Reply.tool("verdict", {}), Reply.text(prose)]) as server:
        model_env(server.url)
        code, out, err = ask(capsys)
    assert code == 0 and len(server.requests) == 2 and "as text" not in err
    assert "idle_gaps" in out


def test_sixty_identical_calls_run_once(model_env, capsys):
    calls = [("idle_gaps", {"top": 3})] * 60
    with FakeOpenAIServer([Reply.tools(calls), Reply.text(f"Idle {said('idle_pct')}.")]) as server:
        model_env(server.url, draft=False)
        code, _, err = ask(capsys, "why?", "-v")
    assert code == 0 and err.count("tool: idle_gaps(") == 1
    assert "the model sent 60 tool calls in one reply: 59 identical to another were dropped" in err
    second = server.requests[1]
    assert len(tool_messages(second)) == 1 and len(second["messages"][-2]["tool_calls"]) == 1


def test_calls_in_one_reply_are_capped_and_a_repeat_in_a_later_round_is_not_run(model_env, capsys):
    distinct = [("hot_kernels", {"top": n}) for n in range(1, 21)]
    replies = [Reply.tools(distinct * 3), Reply.tools([("hot_kernels", {"top": 1})]), Reply.text("Done.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url, draft=False)
        code, _, err = ask(capsys, "why?", "-v")
    assert code == 0
    assert err.count("tool: hot_kernels(") == MAX_CALLS_PER_ROUND
    assert f"40 identical to another were dropped; 12 over the limit of {MAX_CALLS_PER_ROUND} per reply" in err
    assert len(tool_messages(server.requests[1])) == MAX_CALLS_PER_ROUND
    repeat = tool_messages(server.requests[2])[-1]
    assert "the same call ran before as call_0" in json.loads(repeat["content"])["note"]


def test_a_round_over_the_context_has_its_results_cut(model_env, capsys, monkeypatch):
    session = Session(AnalysisContext(analyzed(RESNET_NW0)), model=None)
    # room for the fixed part (system prompt, tools) and the question, not for 25 gaps with their host stacks
    tokens = 512 + (session.fixed_chars + 2500) // session_module.CHARS_PER_TOKEN
    monkeypatch.setenv("TRACEAGENT_CONTEXT_TOKENS", str(tokens))
    monkeypatch.setenv("TRACEAGENT_MAX_TOKENS", "512")
    with FakeOpenAIServer([Reply.tool("idle_gaps", {"top": 25}), Reply.text(f"Idle {said('idle_pct')}.")]) as server:
        model_env(server.url, draft=False)
        code, out, err = ask(capsys)
    assert code == 0 and f"Idle {said('idle_pct')}." in out
    limit = int(re.search(rf"tool results cut to (\d+) characters each to fit the model's context \({tokens} tokens",
                          err).group(1))
    cut = json.loads(tool_messages(server.requests[1])[0]["content"])
    assert "trimmed" in cut and cut["idle_pct"] == analyzed(RESNET_NW0).ranks[0].findings.idle.idle_pct
    assert len(json.dumps(cut)) <= limit
    sent = sum(len(json.dumps(m)) for m in server.requests[1]["messages"]) + len(json.dumps(server.requests[1]["tools"]))
    assert sent <= (tokens - 512) * session_module.CHARS_PER_TOKEN * 1.05  # within the budget (JSON quoting aside)


def test_a_context_too_small_for_the_tools_answers_from_the_detectors(model_env, capsys, monkeypatch):
    monkeypatch.setenv("TRACEAGENT_CONTEXT_TOKENS", "1024")
    monkeypatch.setenv("TRACEAGENT_MAX_TOKENS", "512")
    with FakeOpenAIServer([Reply.text("never asked")]) as server:
        model_env(server.url)
        code, out, err = ask(capsys, "why is my GPU idle?")
    assert code == 0 and not server.requests
    assert "do not fit the model's context (1024 tokens, TRACEAGENT_CONTEXT_TOKENS): answering from the detectors" in err
    assert said("loader_pct") in out  # the offline analyst's answer


def test_a_keep_alive_only_stream_is_stopped_at_the_deadline(model_env, capsys, tiny):
    with FakeOpenAIServer([Reply.keepalive(20, then=Reply.text("too late"))]) as server:
        model_env(server.url, timeout=0.5, deadline=1.0)  # keep-alives reset the 0.5 s read timeout
        started = time.monotonic()
        code, out, err = ask(capsys, trace=tiny)
        stopped_after = time.monotonic() - started
    assert stopped_after < 10  # the server would have kept the stream open for 20 s
    assert "the answer took longer than the 1 s deadline (TRACEAGENT_DEADLINE): answering from the detectors" in err
    assert "Traceback" not in err and "StreamChunkTimeout" not in err and "too late" not in out
    assert code == 0 and "The model did not answer" in out
    assert "unverified" not in err  # "the 1 s deadline" in the note is ours, not a claim to check


def test_long_waits_and_long_call_streams_show_progress(model_env, capsys, monkeypatch):
    monkeypatch.setattr(session_module, "PROGRESS_EVERY_S", 0.05)
    replies = [Reply.keepalive(0.3, then=Reply.tools([("hot_kernels", {"top": n}) for n in range(1, 6)], drip_s=0.08)),
               Reply.text("Done.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url)
        code, _, err = ask(capsys, "why?", "-v")
    assert code == 0
    assert "note: waiting for the model's first words" in err
    assert "note: the model is writing tool calls (" in err


def test_an_answer_with_no_tool_behind_it_is_held_back_and_the_model_asked_again(model_env, capsys):
    ungrounded = "Your MFU is low: use bf16 and larger batches."
    replies = [Reply.text(ungrounded), Reply.tool("verdict", {}), Reply.text(f"Data loading: {said('loader_pct')}.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url, draft=False)
        code, out, err = ask(capsys, "why is my GPU idle?")
    assert code == 0 and out.strip() == f"Data loading: {said('loader_pct')}." and ungrounded not in out
    assert "note: the model answered without calling any tool: asked it once more" in err and "warning" not in err
    nudge = server.requests[1]["messages"][-1]
    assert nudge["role"] == "user" and '{"name": "verdict", "arguments": {}}' in nudge["content"]


@pytest.mark.parametrize("answer", ["Your MFU is low: use bf16 and larger batches.", "It looks fine to me."])
def test_a_model_that_never_calls_a_tool_gets_the_detectors_answer(model_env, capsys, answer):
    with FakeOpenAIServer([Reply.text(answer), Reply.text(answer)]) as server:
        model_env(server.url, draft=False)
        code, out, err = ask(capsys, "why is my GPU idle?")
    assert code == 0 and answer not in out and len(server.requests) == 2
    assert "the model answered twice without calling any tool: answering from the detectors" in err
    assert said("loader_pct") in out and "The model did not answer" in out


def test_a_turn_stopped_during_its_tool_calls_is_in_the_transcript(model_env, tiny):
    import asyncio

    from traceagent.agent.events import ToolCall
    from traceagent.agent.llm import load_config, make_chat_model

    with FakeOpenAIServer([Reply.tool("verdict", {}), Reply.slow(5, Reply.text("late"))]) as server:
        model_env(server.url)
        config = load_config()
        session = Session(AnalysisContext(analyzed(tiny)), make_chat_model(config), config)

        async def stop_after_the_first_tool():
            events = session.ask("why?")
            async for event in events:
                if isinstance(event, ToolCall):
                    break
            await events.aclose()

        asyncio.run(stop_after_the_first_tool())
    markdown = session.transcript_markdown()
    assert "## You\n\nwhy?" in markdown and "> tool: `verdict({})`" in markdown
    assert "stopped before any answer" in markdown


def test_without_a_model_name_the_servers_own_model_is_used(model_env, capsys, monkeypatch, tiny):
    with FakeOpenAIServer([Reply.text("It is idle.")], served="qwen2.5-coder-1.5b-instruct-q4_k_m") as server:
        model_env(server.url)
        monkeypatch.delenv("TRACEAGENT_MODEL")
        _, _, err = ask(capsys, "why?", "-v", trace=tiny)
    assert server.requests[0]["model"] == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert err.startswith("qwen2.5-coder-1.5b-instruct-q4_k_m at http://127.0.0.1:") and "gpt-4o-mini" not in err


def test_the_eval_scores_each_answer_against_the_detectors(model_env, capsys, monkeypatch):
    """Six scripted answers, four right and two wrong (a wrong quantity, and no tool called): the
    eval's verdict on each follows from the detectors' figures, not from the script."""
    from traceagent.cli import main

    idle = analyzed(RESNET_NW0).ranks[0].findings.idle
    replies = [
        Reply.tool("verdict", {}), Reply.text(f"The GPU waits for data loading ({said('loader_pct')} of the span)."),
        Reply.tool("idle_gaps", {}), Reply.text(f"The GPU is idle {idle.idle_pct:.1f}% of the time."),
        Reply.tool("idle_gaps", {"top": 1}), Reply.text(f"The largest gap is {idle.idle_us:.0f} µs."),
        Reply.tool("idle_gaps", {"cause": "dataloader"}),
        Reply.text(f"{idle.by_cause_count['dataloader']} gaps come from data loading."),
        Reply.text("The top kernel is probably a convolution."), Reply.text("It is a convolution."),
        Reply.tool("compare_traces", {}), Reply.text("No, it did not help: the step time is unchanged."),
    ]
    with FakeOpenAIServer(replies) as server:
        model_env("http://unused.invalid/v1", draft=False)  # --base-url wins; the other settings are read as `ask` reads them
        monkeypatch.delenv("TRACEAGENT_MODEL")
        monkeypatch.setenv("TRACEAGENT_MAX_TOKENS", "321")
        assert main(["eval", str(RESNET_NW0), "--base-url", server.url, "--json"]) == 0
    assert {r["max_tokens"] for r in server.requests} == {321}
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == server.served
    rows = report["results"]
    assert [r["agrees"] for r in rows[:6]] == [True, True, False, True, True, True]
    # the ResNet trace has one rank of one GPU: those questions are skipped, each with its reason
    skipped = {r["question"]: r["why"] for r in rows if r["answered_by"] == "skipped"}
    assert skipped == {"Which rank is the straggler?": "does not apply: no straggler: one rank, or none late",
                       "How idle is the second GPU?": "does not apply: no rank has a second GPU"}
    assert [r["answered_by"] for r in rows[:6]] == ["model"] * 4 + ["detectors", "model"]  # the 5th: the offline analyst
    assert rows[0]["tools"] == ["verdict"] and rows[0]["rounds"] == 2 and rows[4]["tools"] == []
    assert f"{idle.idle_us:.0f} µs (as the largest gap)" in rows[2]["flagged"]
    # why the detectors answered is said apart: it is no mark on the answer the user got
    assert "without calling any tool" in rows[4]["replaced_because"] and rows[4]["flagged"] == []
    assert rows[3]["question"] == "How many idle gaps come from data loading?"


def test_a_report_summary_the_model_did_not_write_is_not_signed_with_its_name(model_env, capsys, tmp_path):
    from traceagent.cli import main

    with FakeOpenAIServer([Reply.text("A summary from nowhere."), Reply.text("Still nothing.")]) as server:
        model_env(server.url, draft=False)
        out = tmp_path / "r.md"
        assert main(["report", str(RESNET_NW0), "--llm", "-o", str(out)]) == 1
    assert "the model wrote no summary: the model answered twice without calling any tool; no report written" in \
        capsys.readouterr().err
    assert not out.exists()


def test_wrong_quantity_and_wrong_cause_are_marked_through_the_server(model_env, capsys):
    idle = analyzed(RESNET_NW0).ranks[0].findings.idle
    replies = [Reply.tool("idle_gaps", {"top": 3}),
               Reply.text(f"The largest gap is {idle.idle_us:.0f} µs, delayed by cudaStreamSynchronize.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url, draft=False)
        code, _, err = ask(capsys)
    assert code == 0
    assert f"unverified numbers (in no tool result): {idle.idle_us:.0f} µs (as the largest gap)" in err
    assert "warning: the answer blames host synchronizations, but the detectors' verdict names data loading" in err


def test_eval_without_a_server_is_one_line_and_exit_2(monkeypatch, capsys):
    from traceagent.cli import main

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    assert main(["eval"]) == 2
    assert capsys.readouterr().err == ("traceagent: error: eval needs a model server: --base-url URL (or OPENAI_BASE_URL "
                                       "/ OPENAI_API_KEY)\n")


def test_the_eval_table_counts_the_models_answers_apart_from_the_detectors(model_env, capsys, monkeypatch):
    """A model that never calls a tool: every question is answered from the detectors."""
    from traceagent.cli import main

    with FakeOpenAIServer([Reply.text("No idea.")] * 20) as server:
        model_env(server.url, draft=False)
        assert main(["eval", str(RESNET_NW0)]) == 0
    out = capsys.readouterr().out  # piped: a Markdown table, one line per question, nothing folded
    assert out.splitlines()[0] == ("scripted: 0 of the 0 answers the model wrote agree with the detectors; 8 of 8 "
                                   "answered from the detectors; 2 skipped")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "question |" not in line
            and not line.startswith("| ---")]
    assert len(rows) == 10 and sum("| detectors | yes (" in row for row in rows) == 8
    assert sum("| skipped | - (does not apply" in row for row in rows) == 2


def test_eval_against_a_server_that_never_finishes_costs_one_deadline_not_six(model_env, capsys):
    import time

    from traceagent.cli import main

    replies = [Reply.keepalive(30)] * 6  # keep-alive comments only: never a word
    with FakeOpenAIServer(replies) as server:
        model_env(server.url, deadline=1)
        started = time.monotonic()
        assert main(["eval", str(RESNET_NW0), "--json"]) == 0
        seconds = time.monotonic() - started
    rows = json.loads(capsys.readouterr().out)["results"]
    assert len(server.requests) == 1 and seconds < 6  # one deadline of 1 s, then the detectors alone
    asked = [r for r in rows if r["answered_by"] != "skipped"]
    assert [r["answered_by"] for r in asked] == ["detectors"] * 8 and all(r["agrees"] for r in asked)
    assert all("the server sent nothing within the deadline" in r["replaced_because"] for r in asked[1:])


@pytest.mark.parametrize("trace, asked", [(DLRM_8RANK, "Which rank is the straggler?"),
                                          (NSYS_BEFORE, "How idle is GPU 1 of rank 0?")],
                         ids=["straggler", "second_gpu"])
def test_the_per_rank_and_per_gpu_questions_are_asked_where_they_apply_and_the_detectors_answer_them(
        model_env, capsys, trace, asked):
    from traceagent.cli import main

    with FakeOpenAIServer([Reply.text("No idea.")] * 24) as server:  # never a tool: the detectors answer
        model_env(server.url, draft=False)
        assert main(["eval", str(trace), "--json"]) == 0
    rows = {r["question"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert rows[asked]["answered_by"] == "detectors" and rows[asked]["agrees"], rows[asked]
    assert rows["How much would fixing the top cause save?"]["agrees"], rows["How much would fixing the top cause save?"]
    assert rows["What should I profile next?"]["agrees"]


def test_the_gap_count_question_is_skipped_where_the_root_cause_is_no_cause_of_gaps():
    from traceagent.agent.evaluate import run_eval
    from traceagent.agent.session import Session

    analysis = analyzed(NSYS_BEFORE)  # a hot kernel: no gaps come from it
    assert analysis.verdict.root_cause == "hot_kernel"
    results = asyncio.run(run_eval(analysis, lambda ctx: Session(ctx, None, None)))
    row = next(r for r in results if r.question.startswith("How many idle gaps come from"))
    assert (row.answered_by, row.why) == ("skipped", "does not apply: the root cause (hot_kernel) is not a cause of gaps")


def test_eval_with_a_second_trace_asks_the_comparison_both_ways():
    """ResNet50 num_workers 0 → 4 helped, so 4 → 0 got slower: a model that always says "yes, it
    helped" agrees one way only, and is marked the other way (and on the trace against itself)."""
    from fakes import ScriptedChatModel
    from langchain_core.messages import AIMessage

    from traceagent.agent.evaluate import QUESTIONS, run_eval

    before, after = analyzed(RESNET_NW0), analyzed(RESNET_NW4)
    comparisons = [q for q in QUESTIONS if q.compare]

    def yes(ctx):
        return Session(ctx, ScriptedChatModel(received=[], responses=[AIMessage("Yes, the change made the step faster.")]))
    rows = asyncio.run(run_eval(before, yes, comparisons, other=after))
    assert [(r.question.split("? ")[-1], r.answered_by) for r in rows] == [
        ("Did my change make the step faster?", "detectors"), ("(this trace → --compare)", "model"),
        ("(--compare → this trace)", "detectors")]
    assert all(r.agrees for r in rows)  # the detectors' answers agree with themselves; the model's was right
    # where it is wrong the detectors answer instead, and why is said: the mark
    wrong = [r for r in rows if r.answered_by == "detectors"]
    assert [r.question for r in wrong] == [rows[0].question, rows[2].question]
    assert all("the answer says the change helped, but" in (r.replaced_because or "") for r in wrong)
    # without a second trace, only the trace against itself is asked
    assert len(asyncio.run(run_eval(before, yes, comparisons))) == 1


def test_a_reply_that_repeats_itself_is_stopped_where_the_repetition_began(model_env, capsys):
    # Qwen2.5-Coder-1.5B on the MI300 trace: one paragraph again and again to its token limit, which
    # cost the answer (cut, then replaced) and 100 s; the stream is stopped at the second copy
    lead = f"The GPU waits for data loading: {said('loader_pct')} of the span."
    loop = f"The trace shows that data loading is {said('loader_pct')} of the span. It is the root cause."
    with FakeOpenAIServer([Reply.tool("verdict", {}), Reply.text(lead + "\n\n" + (loop + "\n\n") * 30)]) as server:
        model_env(server.url, draft=False)
        code, out, err = ask(capsys)
    assert code == 0 and "began repeating itself" in err and "incomplete" not in err.lower()
    assert out.strip() == f"{lead}\n\n{loop}"


@pytest.mark.parametrize("text, cut", [
    ("A first paragraph that says something.\n\n" + "The same paragraph, said over and over again.\n\n" * 3,
     "A first paragraph that says something.\n\nThe same paragraph, said over and over again.\n\n"),
    ("Idle 39% of the span. It waits for the DataLoader to load. " * 3, "Idle 39% of the span. It waits for the "
                                                                       "DataLoader to load. "),
    ("The answer is: " * 6, "The answer is: "),
    ("It lasts for **2.16 ms** on GPU 2. " * 3, "It lasts for **2.16 ms** on GPU 2. "),  # not cut inside "2.16"
    ("| kernel | time |\n|-----|-----|-----|-----|-----|", None),  # a table's rule is no loop
    ("The GPU is idle 39.4% of the span.\n\nThe GPU is idle 39.4% of the span", None),  # the second still streaming
    ("Data loading: 28.6%. Data loading: 28.6%. Syncs: 0.3%.", None),  # short and twice: emphasis, not a loop
])
def test_where_a_reply_began_repeating_itself(text, cut):
    from traceagent.agent.looping import repetition_start

    at = repetition_start(text)
    assert (text[:at] if at is not None else None) == cut


def test_what_may_be_a_repetitions_start_is_held_back_until_it_differs():
    from traceagent.agent.looping import settled

    said = "The GPU waits for data loading most of the time.\n\n"
    assert settled(said + "The GPU waits for da") == len(said)  # copies the paragraph so far: held
    assert settled(said + "The GPU waits for the host") == len(said) + len("The GPU waits for the host")  # differs
