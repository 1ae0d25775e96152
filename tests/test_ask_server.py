"""`traceagent ask` against a scripted OpenAI-compatible server on 127.0.0.1, through the real
openai client (OPENAI_BASE_URL): a full tool-calling turn, and each failure a user will meet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RESNET_NW0, SECRET, analyzed
from fakes import FakeOpenAIServer, Reply
from langchain_core.utils.function_calling import convert_to_openai_tool

import traceagent
from traceagent.agent.answers import plain
from traceagent.agent.structured import final_answer_tool
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.format import duration


def said(what: str) -> str:
    """A figure of the ResNet50 nw0 analysis as a model would quote it (the scripted replies take
    their numbers from the detectors at test time, never from literals)."""
    idle = analyzed(RESNET_NW0).ranks[0].findings.idle
    return {"idle_pct": f"{idle.idle_pct:.1f}%", "loader_pct": f"{idle.cause_pct('dataloader'):.1f}%",
            "loader_time": duration(idle.by_cause_us["dataloader"])}[what]


def ask(capsys, question: str = "Why is my GPU idle?", *extra: str, trace: Path = RESNET_NW0) -> tuple[int, str, str]:
    code = main(["ask", str(trace), question, *extra])
    out = capsys.readouterr()
    assert SECRET not in out.out and SECRET not in out.err, "the key never reaches the user's screen"
    return code, out.out, out.err


def test_full_turn_through_the_openai_client(model_env, capsys):
    replies = [Reply.tool("idle_gaps", {"cause": "dataloader", "top": 2}),
               Reply.text(f"The GPU waits for data loading: {said('loader_time')}, {said('loader_pct')} of the span. "
                          "Use more workers.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url)
        code, out, err = ask(capsys, "Why is my GPU idle?", "-v")
    assert code == 0
    assert f"The GPU waits for data loading: {said('loader_time')}, {said('loader_pct')} of the span." in out
    assert "tool: idle_gaps" in err and "unverified" not in err
    first, second = server.requests
    assert first["stream"] is True and first["model"] == "scripted"
    assert {t["function"]["name"] for t in first["tools"]} >= {"idle_gaps", "hot_kernels", "data_movement", "verdict"}
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert json.loads(tool_message["content"])["by_cause_us"]["dataloader"] > 0


def test_invented_numbers_are_flagged(model_env, capsys):
    replies = [Reply.tool("verdict", {}), Reply.text(f"Idle is {said('idle_pct')} of the time, and 12.5 ms is lost to magic.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url, draft=False)
        code, _, err = ask(capsys)
    assert code == 0 and "unverified numbers (in no tool result): 12.5 ms" in err


def test_server_down(model_env, capsys, tiny):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model_env(f"http://127.0.0.1:{port}/v1")
    code, _, err = ask(capsys, trace=tiny)
    assert code == 1
    where = f"http://127.0.0.1:{port}/v1"
    assert err.strip() == f"traceagent: cannot reach the model server at {where}: is it running? (OPENAI_BASE_URL)"


def test_server_too_slow(model_env, capsys, tiny):
    with FakeOpenAIServer([Reply.slow(3, Reply.text("late"))]) as server:
        model_env(server.url, timeout=0.5)
        code, _, err = ask(capsys, trace=tiny)
    assert code == 1 and "did not answer within 0.5 s; raise TRACEAGENT_TIMEOUT" in err


def test_rate_limit_is_retried_with_backoff(model_env, capsys, tiny):
    limited = Reply.error(429, "slow down", {"retry-after-ms": "10"})
    with FakeOpenAIServer([limited, limited, Reply.tool("verdict", {}), Reply.text(f"Fine now: idle {said('idle_pct')}.")]) \
            as server:
        model_env(server.url, retries=2)
        code, out, _ = ask(capsys, trace=tiny)
    assert code == 0 and "Fine now" in out and len(server.requests) == 4


def test_rate_limit_that_does_not_end(model_env, capsys, tiny):
    limited = Reply.error(429, "slow down", {"retry-after-ms": "10"})
    with FakeOpenAIServer([limited] * 3) as server:
        model_env(server.url, retries=2)
        code, _, err = ask(capsys, trace=tiny)
    assert code == 1 and "is rate limiting (429) and retries ran out" in err


def test_bad_key(model_env, capsys, tiny):
    with FakeOpenAIServer([Reply.error(401, f"Incorrect API key provided: {SECRET}")]) as server:
        model_env(server.url)
        code, _, err = ask(capsys, trace=tiny)
    assert code == 1 and "rejected the API key (401): check OPENAI_API_KEY" in err


@pytest.mark.parametrize("bad_call, message", [
    (Reply.tool("idle_gaps", "{not json at all"), "could not be parsed"),
    (Reply.tool("format_disk", {}), "tool 'format_disk': unknown tool"),
    (Reply.tool("hot_kernels", {"top": "many"}), "tool 'hot_kernels': bad arguments"),
])
def test_broken_tool_calls_are_reported_and_the_turn_continues(model_env, capsys, bad_call, message, tiny):
    replies = [bad_call, Reply.tool("verdict", {}, call_id="c2"), Reply.text(f"Recovered: idle {said('idle_pct')}.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url)
        code, out, err = ask(capsys, trace=tiny)
    assert code == 0 and "Recovered" in out
    assert message in err
    # the model was told what went wrong, in a tool message
    assert server.requests[1]["messages"][-1]["role"] == "tool"
    assert "error" in json.loads(server.requests[1]["messages"][-1]["content"])


def test_console_script_end_to_end(tmp_path):
    replies = [Reply.tool("verdict", {}), Reply.text(f"Data loading: {said('loader_pct')} of the span.")]
    with FakeOpenAIServer(replies) as server:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENAI_BASE_URL": server.url,
               "TRACEAGENT_MAX_RETRIES": "0", "TRACEAGENT_CACHE_DIR": os.environ["TRACEAGENT_CACHE_DIR"]}  # the run's
        done = subprocess.run([sys.executable, "-m", "traceagent", "ask", str(RESNET_NW0), "why?"],
                              capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Data loading: {said('loader_pct')} of the span."


def test_offline_ask_without_configuration(monkeypatch, capsys):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    code = main(["ask", str(RESNET_NW0), "why is my GPU idle?"])
    out = capsys.readouterr().out
    assert code == 0
    assert "waiting for data loading" in out and "% of the span" in out and "num_workers" in out
    assert "no LLM is configured" in out


def test_report_summary_written_by_the_model(model_env, capsys, tmp_path):
    replies = [Reply.tool("verdict", {}),
               Reply.text(f"The GPU is idle {said('idle_pct')} of the time, mostly waiting for data loading "
                          f"({said('loader_pct')} of the span); it also loses 17.5 ms somewhere.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url)
        out = tmp_path / "d.md"
        assert main(["report", str(RESNET_NW0), "--llm", "-o", str(out)]) == 0
    text = out.read_text()
    summary = text[text.index("## Summary"):text.index("## What would sharpen")]
    assert f"idle {said('idle_pct')} of the time" in summary
    assert "Unverified numbers" in summary and "`17.5 ms`" in summary
    assert "Written by scripted" in summary and SECRET not in text
    assert text.index("## Verdict") < text.index("## Summary")


def test_report_llm_without_a_model_says_how(monkeypatch, capsys):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    assert main(["report", str(RESNET_NW0), "--llm"]) == 2
    assert "--llm needs a model" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["ask", str(RESNET_NW0), "why?"], ["report", str(RESNET_NW0), "--llm"]])
def test_unreadable_config_file_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, command):
    bad = tmp_path / "config.toml"
    bad.write_text("[llm\nbroken")
    monkeypatch.setenv("TRACEAGENT_CONFIG", str(bad))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"traceagent: error: {bad}: cannot read the config file" in err


# -- what real servers do (llama.cpp's llama-server, llama-cpp-python, vLLM, Ollama) -------------------

def test_tools_are_offered_with_tool_choice_and_a_token_limit(model_env, capsys, tiny):
    with FakeOpenAIServer([Reply.text(f"Idle {said('idle_pct')}.")] * 2) as server:
        model_env(server.url)
        ask(capsys, trace=tiny)
        ask(capsys, trace=tiny)  # a second session: its schemas come from the first's, the same
    request = server.requests[0]
    assert request["tool_choice"] == "auto" and request["tools"]  # without it llama-cpp-python offers no tools
    assert request["max_tokens"] == request["max_completion_tokens"] == 2048  # each server reads one of them
    # what LangChain makes of each tool, made here anew
    made = [convert_to_openai_tool(t) for t in [*build_tools(AnalysisContext(traceagent.analyze(tiny))),
                                                final_answer_tool()]]
    assert server.requests[0]["tools"] == server.requests[-1]["tools"] == json.loads(json.dumps(made))


@pytest.mark.parametrize("reply, why", [
    (Reply.text("The GPU is idle because the", finish="length"), "the model reached its limit of 2048 tokens"),
    (Reply.text("The GPU is idle because the", finish=None), "the stream ended without a finish reason"),
    (Reply.text(""), "the model sent an empty answer"),
])
def test_an_incomplete_answer_is_shown_as_such_and_exits_1(model_env, capsys, reply, why, tiny):
    with FakeOpenAIServer([Reply.tool("verdict", {}), reply]) as server:
        model_env(server.url, draft=False)
        code, out, err = ask(capsys, trace=tiny)
    assert code == 1
    assert f"traceagent: incomplete answer: {why}" in err and "Traceback" not in err
    assert out.strip() == reply["content"].strip()  # what came is shown, not hidden


def test_a_report_whose_summary_was_cut_off_is_not_written(model_env, capsys, tmp_path, tiny):
    with FakeOpenAIServer([Reply.tool("verdict", {}), Reply.text("The GPU is idle because", finish="length")]) as server:
        model_env(server.url)
        out = tmp_path / "r.md"
        assert main(["report", str(tiny), "--llm", "-o", str(out)]) == 1
    assert "the model's summary is incomplete: the model reached its limit" in capsys.readouterr().err
    assert not out.exists()


def test_a_tool_name_repeated_in_every_chunk_is_one_call(model_env, capsys):
    replies = [Reply.tool("idle_gaps", {"cause": "dataloader", "top": 2}, repeat_name=True),
               Reply.text(f"Data loading: {said('loader_pct')} of the span.")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url)
        code, _, err = ask(capsys, "why?", "-v")
    assert code == 0 and "tool: idle_gaps(" in err and "unknown tool" not in err
    assert json.loads(server.requests[1]["messages"][-1]["content"])["matching_gaps"] > 0


@pytest.mark.parametrize("reply, message", [
    (Reply.error(500, body="llama_decode: failed to decode,\n  KV cache is full (n_ctx = 2048)"),
     "answered with an error (500): llama_decode: failed to decode, KV cache is full (n_ctx = 2048)"),
    (Reply.error(500, "the model crashed while loading"), "answered with an error (500): the model crashed while loading"),
    (Reply.raw(b'data: {"id": "x", "choices": [{"delta": {"content": "Hi\n\n'), "sent a malformed stream"),
    (Reply.raw(b"data: [DONE]\n\n"), "closed the stream without sending anything"),
])
def test_server_failures_are_one_line_with_the_servers_words(model_env, capsys, reply, message, tiny):
    with FakeOpenAIServer([reply]) as server:
        model_env(server.url)
        code, _, err = ask(capsys, trace=tiny)
    assert code == 1 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err and "JSONDecodeError" not in err


def test_an_endless_tool_loop_stops(model_env, capsys, tiny):
    with FakeOpenAIServer([Reply.tool("verdict", {}, call_id=f"c{i}") for i in range(10)]) as server:
        model_env(server.url)
        code, out, err = ask(capsys, trace=tiny)
    assert code == 0 and "the model was still calling tools after 6 rounds: answering from the detectors" in err
    assert len(server.requests) == 6
    assert "The model did not answer" in out and "still calling tools after 6 rounds" in out


def test_a_slow_drip_past_the_deadline_is_stopped(model_env, capsys, tiny):
    # each word arrives well within the per-chunk timeout, but the answer as a whole is too slow
    with FakeOpenAIServer([Reply.tool("verdict", {}), Reply.text("word " * 40, drip_s=0.05)]) as server:
        model_env(server.url, timeout=5, deadline=0.5)
        code, out, err = ask(capsys, trace=tiny)
    assert code == 1 and "the answer took longer than the 0.5 s deadline (TRACEAGENT_DEADLINE)" in err
    assert 0 < out.count("word") < 40


def test_tool_markup_left_in_an_answer_is_warned_about(model_env, capsys, tiny):
    replies = [Reply.tool("verdict", {}), Reply.text("Use CUDA graphs: <tool_response>use CUDA graphs</tool_response>")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url, draft=False)
        code, _, err = ask(capsys, trace=tiny)
    assert code == 0
    assert "warning: the answer contains tool-call markup (<tool_response>)" in err


def test_a_report_summary_cut_inside_a_code_fence_keeps_every_section(model_env, tmp_path):
    from markdown_it import MarkdownIt

    replies = [Reply.tool("verdict", {}), Reply.text(f"Idle {said('idle_pct')}. Try:\n```python\nloader = DataLoader(")]
    with FakeOpenAIServer(replies) as server:
        model_env(server.url)
        out = tmp_path / "r.md"
        assert main(["report", str(RESNET_NW0), "--llm", "-o", str(out)]) == 0
    without_summary = tmp_path / "plain.md"
    assert main(["report", str(RESNET_NW0), "-o", str(without_summary)]) == 0

    def headings(path):
        tokens = MarkdownIt().parse(path.read_text())
        return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]

    assert headings(out) == [*headings(without_summary)[:2], "Summary", *headings(without_summary)[2:]]


def test_a_second_turn_may_quote_the_first_turns_tools_and_calc_but_not_a_kernel_name(tmp_path):
    """Through the real openai client: history keeps tool results, `calc` results verify, and a
    number found only inside a kernel name verifies nothing. Replies quote the tools at test time."""
    import asyncio

    from builder import TraceBuilder

    from traceagent.agent.llm import LLMConfig, make_chat_model
    from traceagent.agent.session import Session
    from traceagent.agent.tools import AnalysisContext, hot_kernels
    from traceagent.api import analyze

    b = TraceBuilder()
    b.kernel("void fused_kernel<731>(float*)", 0, 900)
    b.kernel("relu_kernel", 1000, 300)
    ctx = AnalysisContext(analyze(b.write(tmp_path / "t.json"), use_cache=False))
    top, second = plain(hot_kernels(ctx, full_names=True))["top"][:2]
    ratio = top["total_us"] / second["total_us"]
    replies = [Reply.tool("hot_kernels", {"full_names": True}),
               Reply.text(f"The top kernel takes {top['share_of_busy_pct']:.1f}% of busy time."),
               Reply.tool("calc", {"expression": f"{top['total_us']:g} / {second['total_us']:g}", "unit": "x"}),
               Reply.text(f"Again: {top['share_of_busy_pct']:.1f}% of busy time, {ratio:.1f}× the next kernel, "
                          "and each call lasts 731 µs.")]
    with FakeOpenAIServer(replies) as server:
        # the model's own marked answer is what this checks: without a draft, it stays
        config = LLMConfig(model="scripted", base_url=server.url, api_key="local", max_retries=0, draft=False)
        session = Session(ctx, make_chat_model(config), config)

        async def turn(question):
            return [e async for e in session.ask(question)]

        first = asyncio.run(turn("What are the hot kernels?"))
        second_turn = asyncio.run(turn("And compared with the next one?"))
    assert first[-1].unverified == []
    assert second_turn[-1].unverified == ["731 µs"]  # only the kernel name has 731
    calc_result = next(e for e in second_turn if type(e).__name__ == "ToolResult")
    assert json.loads(calc_result.content)["result_x"] == pytest.approx(ratio, abs=1e-6)
    earlier = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert earlier and "fused_kernel" in earlier[0]["content"], "turn 2 is sent turn 1's tool result"


def test_an_error_body_that_echoes_the_credentials_is_shown_redacted(model_env, capsys, tiny):
    import base64

    echo = Reply.error(502, body="bad gateway; you sent {request_headers} and Authorization: Basic "
                                 + base64.b64encode(b"alice:s3cret-pass").decode())
    with FakeOpenAIServer([echo]) as server:
        model_env(server.url.replace("http://", "http://alice:s3cret-pass@"))
        code, _, err = ask(capsys, trace=tiny)
    assert code == 1 and "answered with an error (502)" in err and "bad gateway" in err
    assert "[credentials]" in err
    for secret in ("s3cret-pass", base64.b64encode(b"alice:s3cret-pass").decode(), SECRET):
        assert secret not in err


def test_a_server_echoing_credentials_as_its_model_name_or_in_its_answer_never_shows_them(monkeypatch, capsys, tiny):
    password, key = "pw-secret-4321", "sk-test-echoedkey-0123456789"
    replies = [Reply.tool("verdict", {}), Reply.text(f"Your key is {key} and the header was Bearer {key}.")]
    with FakeOpenAIServer(replies, served="echo {authorization}", require_key=key) as server:
        url = server.url.replace("http://", f"http://alice:{password}@")
        for name in ("TRACEAGENT_MODEL", "TRACEAGENT_CONFIG"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", key)
        main(["ask", str(tiny), "why?", "-v"])
        out, err = capsys.readouterr()
        assert {k.lower(): v for k, v in server.model_requests[0].items()}["authorization"] == f"Bearer {key}"
        main(["eval", str(tiny), "--json"])
        eval_out, eval_err = capsys.readouterr()
    shown = out + err + eval_out + eval_err
    assert "echo Bearer [key]" in err and json.loads(eval_out)["model"] == "echo Bearer [key]"  # the server's name, redacted
    assert "Your key is [key]" in out
    for secret in (key, password, "alice:"):
        assert secret not in shown
