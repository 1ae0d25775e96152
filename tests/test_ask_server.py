"""`traceagent ask` against a scripted OpenAI-compatible server on 127.0.0.1, through the real
openai client (OPENAI_BASE_URL): a full tool-calling turn, and each failure a user will meet."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from conftest import RESNET_NW0, analyzed
from fakes import FakeOpenAIServer, Reply

from traceagent.cli import main
from traceagent.format import duration

SECRET = "sk-test-secret-key-0123456789"


def said(what: str) -> str:
    """A figure of the ResNet50 nw0 analysis as a model would quote it (the scripted replies take
    their numbers from the detectors at test time, never from literals)."""
    idle = analyzed(RESNET_NW0).ranks[0].findings.idle
    return {"idle_pct": f"{idle.idle_pct:.1f}%", "loader_pct": f"{idle.cause_pct('dataloader'):.1f}%",
            "loader_time": duration(idle.by_cause_us["dataloader"])}[what]


@pytest.fixture
def model_env(monkeypatch):
    def configure(url: str, retries: int = 0, timeout: float = 10) -> None:
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("TRACEAGENT_MODEL", "scripted")
        monkeypatch.setenv("TRACEAGENT_MAX_RETRIES", str(retries))
        monkeypatch.setenv("TRACEAGENT_TIMEOUT", str(timeout))
        monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    return configure


def ask(capsys, question: str = "Why is my GPU idle?", *extra: str) -> tuple[int, str, str]:
    code = main(["ask", str(RESNET_NW0), question, *extra])
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
        model_env(server.url)
        code, _, err = ask(capsys)
    assert code == 0 and "unverified numbers (in no tool result): 12.5 ms" in err


def test_server_down(model_env, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model_env(f"http://127.0.0.1:{port}/v1")
    code, _, err = ask(capsys)
    assert code == 1
    where = f"http://127.0.0.1:{port}/v1"
    assert err.strip() == f"traceagent: cannot reach the model server at {where}: is it running? (OPENAI_BASE_URL)"


def test_server_too_slow(model_env, capsys):
    with FakeOpenAIServer([Reply.slow(3, Reply.text("late"))]) as server:
        model_env(server.url, timeout=0.5)
        code, _, err = ask(capsys)
    assert code == 1 and "did not answer within 0.5 s; raise TRACEAGENT_TIMEOUT" in err


def test_rate_limit_is_retried_with_backoff(model_env, capsys):
    limited = Reply.error(429, "slow down", {"retry-after-ms": "10"})
    with FakeOpenAIServer([limited, limited, Reply.text(f"Fine now: idle {said('idle_pct')}.")]) as server:
        model_env(server.url, retries=2)
        code, out, _ = ask(capsys)
    assert code == 0 and "Fine now" in out and len(server.requests) == 3


def test_rate_limit_that_does_not_end(model_env, capsys):
    limited = Reply.error(429, "slow down", {"retry-after-ms": "10"})
    with FakeOpenAIServer([limited] * 3) as server:
        model_env(server.url, retries=2)
        code, _, err = ask(capsys)
    assert code == 1 and "is rate limiting (429) and retries ran out" in err


def test_bad_key(model_env, capsys):
    with FakeOpenAIServer([Reply.error(401, f"Incorrect API key provided: {SECRET}")]) as server:
        model_env(server.url)
        code, _, err = ask(capsys)
    assert code == 1 and "rejected the API key (401): check OPENAI_API_KEY" in err


@pytest.mark.parametrize("bad_call, message", [
    (Reply.tool("idle_gaps", "{not json at all"), "could not be parsed"),
    (Reply.tool("format_disk", {}), "tool 'format_disk': unknown tool"),
    (Reply.tool("hot_kernels", {"top": "many"}), "tool 'hot_kernels': bad arguments"),
])
def test_broken_tool_calls_are_reported_and_the_turn_continues(model_env, capsys, bad_call, message):
    with FakeOpenAIServer([bad_call, Reply.text(f"Recovered: idle {said('idle_pct')}.")]) as server:
        model_env(server.url)
        code, out, err = ask(capsys)
    assert code == 0 and "Recovered" in out
    assert message in err
    # the model was told what went wrong, in a tool message
    assert server.requests[1]["messages"][-1]["role"] == "tool"
    assert "error" in json.loads(server.requests[1]["messages"][-1]["content"])


def test_console_script_end_to_end(tmp_path):
    replies = [Reply.text(f"Data loading: {said('loader_pct')} of the span.")]
    with FakeOpenAIServer(replies) as server:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENAI_BASE_URL": server.url,
               "TRACEAGENT_MAX_RETRIES": "0", "TRACEAGENT_CACHE_DIR": str(tmp_path / "cache")}
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
