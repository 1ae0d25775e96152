"""Broken and hostile inputs, one regression test each: every case gives an analysis (with a
warning when something was repaired or dropped) or one clear error line and exit 2; never a
traceback, a hang or an impossible number; and no trace string reaches a terminal, a Markdown
or an HTML report as anything but text."""

from __future__ import annotations

import asyncio
import json
import os
import re

import pytest
from builder import TraceBuilder
from invariants import impossible

import traceagent
from traceagent.cli import main

BASE = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0, "dur": 50.0,
     "args": {"External id": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20.0, "dur": 30.0,
     "args": {"device": 0, "stream": 7, "correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100.0, "dur": 30.0,
     "args": {"device": 0, "stream": 7, "correlation": 2}}]}


def doc(change=None) -> dict:
    d = json.loads(json.dumps(BASE))
    if change:
        change(d)
    return d


def deep_event(text: str) -> str:
    event = '{"ph":"X","cat":"cpu_op","name":"deep","pid":1,"tid":1,"ts":1,"dur":1,"args":' + '{"a":' * 5000 + "1" \
            + "}" * 5000 + "}"
    return text[:-2] + ", " + event + "]}"


RAW = json.dumps(BASE).encode()
# name → (file bytes, a warning the analysis must carry, or an error it must end with)
CASES = {
    "bom": (b"\xef\xbb\xbf" + RAW, None, None),
    "non_object_events": (json.dumps(doc(lambda d: d["traceEvents"].extend([1, "x", None, []]))).encode(),
                          "skipped 4 entries of traceEvents that are not JSON objects", None),
    "ts_null": (json.dumps(doc(lambda d: d["traceEvents"][2].update(ts=None))).encode(), "dropped 1 events", None),
    "negative_duration": (json.dumps(doc(lambda d: d["traceEvents"][2].update(dur=-5))).encode(), "dropped 1 events",
                          None),
    "time_out_of_range": (json.dumps(doc(lambda d: d["traceEvents"][3].update(ts=1e300))).encode(),
                          "dropped 1 events", None),
    "negative_bytes": (json.dumps(doc(lambda d: d["traceEvents"].append(
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 60.0,
         "dur": 10.0, "args": {"device": 0, "stream": 7, "bytes": -100}}))).encode(), "dropped 1 events", None),
    "nan_infinity": (RAW.replace(b'"ts": 100.0', b'"ts": NaN'), "NaN/Infinity values (not JSON) were read as missing",
                     None),
    "invalid_utf8": (RAW.replace(b"gemm", b"ge\xffmm", 1), None, None),
    "string_device_id": (json.dumps(doc(lambda d: d["traceEvents"][2]["args"].update(device="0"))).encode(), None,
                         None),
    "device_properties_dict": (json.dumps(doc(lambda d: d.update(deviceProperties={"id": 0}))).encode(),
                               "deviceProperties is not a list", None),
    "distributed_info_list": (json.dumps(doc(lambda d: d.update(distributedInfo=[1, 2]))).encode(),
                              "distributedInfo is not an object", None),
    "autograd_profiler_export": (json.dumps([{"name": "aten::add", "ph": "X", "ts": 1.0, "dur": 2.0, "tid": 1,
                                              "pid": "CPU functions", "args": {}}]).encode(), None, None),
    "cut_short": (RAW[: int(len(RAW) * 0.83)], "the file ends mid-event (cut short after byte", None),
    # cut inside a number, which msgspec calls invalid rather than truncated
    "cut_after_decimal_point": (RAW[: RAW.index(b'"ts": 100.0') + len(b'"ts": 100.')],
                                "the file ends mid-event (cut short after byte", None),
    "cut_after_minus": (RAW[: RAW.index(b'"ts": 100.0') + len(b'"ts": ')] + b"-",
                        "the file ends mid-event (cut short after byte", None),
    "empty_event_list": (b'{"traceEvents": []}', None, "the trace holds no events"),
    "trace_events_not_a_list": (b'{"traceEvents": 5}', None, "Expected `array`, got `int` - at `$.traceEvents`"),
    "deep_nesting": (deep_event(json.dumps(BASE)).encode(), None, "JSON nested more deeply than Python can read"),
    "flipped_byte_in_syntax": (RAW.replace(b'"ph": "X", "cat": "kernel"', b'"ph": "X", "cat"? "kernel"', 1), None,
                               "malformed JSON at byte"),
}


@pytest.mark.parametrize("name", CASES)
def test_hostile_kineto_inputs(name, tmp_path, capsys):
    content, warning, error = CASES[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(content)
    code = main(["analyze", str(path), "--json", "--no-cache"])
    out, err = capsys.readouterr()
    if error:
        assert code == 2 and err.count("\n") == 1 and str(path) in err and error in err
        return
    assert code == 0, err
    data = json.loads(out)
    assert impossible(data) == []
    if warning:
        assert any(warning in w for w in data["trace"]["warnings"]), data["trace"]["warnings"]


def test_a_syntax_error_says_where(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"traceEvents": [\n  {"ph": "X",\n   "cat"? 1}]}')
    assert main(["info", str(path)]) == 2
    # line 1 is 17 characters and a newline (bytes 0-17), line 2 13 and a newline (18-31): line 3
    # starts at byte 32, and its "?" is its 9th character, byte 40
    assert "malformed JSON at byte 40 (line 3, column 9): expected ':'" in capsys.readouterr().err


def test_a_fifo_is_refused_before_it_is_opened(tmp_path, capsys):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert main(["info", str(fifo)]) == 2  # opening it would block until a writer came
    assert "not a regular file (a pipe, socket or device)" in capsys.readouterr().err


def test_a_kernel_on_two_streams_at_once_is_never_over_100_percent_busy(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100, stream=7, launch_at=0)
    b.kernel("gemm", 0, 100, stream=8, launch_at=1)
    (kernel,) = traceagent.analyze(b.write(tmp_path / "t.json")).ranks[0].findings.kernels.top
    assert (kernel.total_us, kernel.share_of_busy_pct) == (200.0, 100.0)  # 200 µs of kernel time in 100 µs


# -- trace strings as text, everywhere ----------------------------------------------------------

EVIL = "evil[/]\x1b[2J\x1b]8;;http://x\x07[@click=app.quit]x[/]<script>![i](http://e/x.png)`]|"


def evil_trace(tmp_path):
    b = TraceBuilder(device_name="GPU\x1b[31m")
    for i in range(4):
        b.python(f"train.py({i}): {EVIL}", i * 1000, 900)
        b.op(EVIL, i * 1000 + 100, 700)
        b.kernel(EVIL, i * 1000 + 900, 100, launch_at=i * 1000 + 890)
    return b.write(tmp_path / "evil.json")


@pytest.mark.parametrize("command", [["analyze"], ["analyze", "--json"], ["report"], ["info"],
                                     ["ask", "what are the hot kernels?"], ["ask", "why is my GPU idle?"]])
def test_no_raw_escape_byte_from_a_trace_reaches_the_output(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    path = evil_trace(tmp_path)
    assert main([command[0], str(path), *command[1:]]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b" in out  # shown, not dropped: nothing lost


def test_the_reports_cannot_be_hijacked_by_a_trace_string(tmp_path):
    from traceagent.report.html import render_html
    from traceagent.report.markdown import render_markdown

    analysis = traceagent.analyze(evil_trace(tmp_path))
    md = render_markdown(analysis, summary="The model says ![x](http://e/y.png) and <b>bold</b>\n```python\nunclosed")
    prose = re.sub(r"(`+).*?\1", "", md)  # code spans show their text literally in any Markdown renderer
    assert "<script>" not in prose and "![i](" not in prose and "![x](" not in prose and "<b>" not in prose
    page = render_html(analysis, summary="The model says ![x](http://e/y.png) and <b>bold</b>\n```python\nunclosed")
    assert not re.search(r"<(script|img|a|link|iframe)\b", page, re.IGNORECASE)
    assert not re.search(r"(src|href)=", page)
    assert "## Where device time went" in md.split("```python")[-1]  # the open fence did not swallow the rest
    assert "Where device time went</h2>" in page


def test_the_chat_app_stays_up_with_markup_and_escapes_in_names(tmp_path):
    from textual.widgets import OptionList

    from traceagent.tui.app import TraceAgentApp

    path = evil_trace(tmp_path)

    async def run():
        app = TraceAgentApp(str(path))
        async with app.run_test(size=(120, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            findings = app.query_one("#findings", OptionList)
            labels = [str(o.prompt) for o in findings.options]
            await pilot.click("#findings")  # clicking a finding whose name holds [@click=app.quit] asks about it
            findings.highlighted = len(labels) - 1
            await pilot.press("enter")
            await app.workers.wait_for_complete()
            await pilot.pause()
            return labels, app.is_running, app.return_code

    labels, running, code = asyncio.run(run())
    assert running and code is None
    assert any("evil[/]" in label for label in labels)  # shown as text: as markup "[/]" would vanish
    assert all("\x1b" not in label for label in labels)


# -- secrets and transcripts -------------------------------------------------------------------

SECRET_URL = "http://alice:sk-urlsecret-0123456789@127.0.0.1:9/v1?api_key=querysecret"


def test_credentials_in_the_server_url_are_never_shown_or_saved(capsys, monkeypatch):
    from conftest import RESNET_NW0, analyzed

    from traceagent.agent.llm import load_config
    from traceagent.agent.session import Session
    from traceagent.agent.tools import AnalysisContext

    config = load_config({"OPENAI_BASE_URL": SECRET_URL, "TRACEAGENT_CONFIG": "/nonexistent"})
    assert config.describe() == "gpt-4o-mini at http://[credentials]@127.0.0.1:9/v1?api_key=[key]"
    session = Session(AnalysisContext(analyzed(RESNET_NW0)), None, config)
    assert "alice" not in session.transcript_markdown() and "querysecret" not in session.transcript_markdown()
    # the chat's failure messages and `ask -v` (which prints the model and server) on a server that is down
    monkeypatch.setenv("OPENAI_BASE_URL", SECRET_URL)
    monkeypatch.setenv("TRACEAGENT_MAX_RETRIES", "0")
    monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    assert main(["ask", str(RESNET_NW0), "why?", "-v"]) == 1
    out, err = capsys.readouterr()
    assert "cannot reach the model server at http://[credentials]@127.0.0.1:9/v1" in err
    for secret in ("alice", "sk-urlsecret", "querysecret"):
        assert secret not in out + err


def test_a_stopped_answer_is_saved_with_what_was_said(tmp_path):
    from conftest import RESNET_NW0, analyzed
    from fakes import ScriptedChatModel, tool_call
    from langchain_core.messages import AIMessage

    from traceagent.agent.events import Token
    from traceagent.agent.session import Session
    from traceagent.agent.tools import AnalysisContext

    model = ScriptedChatModel(received=[], responses=[tool_call("verdict"),
                                                      AIMessage(content=" ".join(f"word{i}" for i in range(50)))])
    session = Session(AnalysisContext(analyzed(RESNET_NW0)), model)

    async def run():
        seen = 0
        async for event in session.ask("tell me everything"):
            if isinstance(event, Token):
                seen += 1
                if seen == 5:
                    session.cancel()  # Escape

    asyncio.run(run())
    text = session.transcript_markdown()
    assert "word0 word1 word2 word3 word4" in text and "_(stopped: the answer was cut off here)_" in text
    assert "word49" not in text


def test_malformed_shapes_and_memory_events_are_unknowns_not_errors(tmp_path):
    from builder import TraceBuilder

    b = TraceBuilder()
    b.kernel("k", 0, 10, launch_at=0)
    b.op("aten::mm", 0, 20)["args"] |= {"Input Dims": "garbage", "Input type": 5}
    b.op("aten::addmm", 30, 20)["args"] |= {"Input Dims": [[1, "x"], None], "Input type": [None, {"x": 1}]}
    for args in [{"Bytes": "x", "Device Type": 1, "Device Id": 0}, {"Device Type": 1, "Device Id": 0, "Bytes": 1e30},
                 {"Device Type": 1, "Device Id": 0, "Bytes": 64, "Total Allocated": float("inf")},
                 {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 512}]:
        b.events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5, "args": args})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": b.events}).replace("Infinity", "1e999"))
    r = traceagent.analyze(path, use_cache=False).ranks[0]
    assert r.findings.flops.counted_ops == 0 and "could not be read" in r.findings.flops.note
    (gpu,) = r.findings.memory.devices  # the events with impossible sizes are dropped, the sane ones kept
    assert gpu.peak_allocated_bytes == 512 and gpu.net_bytes >= 0


@pytest.mark.parametrize("setting", ["verdict.idle_pct=NaN", "verdict.idle_pct=nan", "idle.launch_gap_us=inf",
                                     "idle.launch_gap_us=-inf", "idle.sync_slack_us=-5", "verdict.idle_pct=150",
                                     "idle.top=0", "idle.top=-3", "collectives.gpus_per_node=0",
                                     "idle.launch_bound_max_us=1e300", "stragglers.cause_cover=-0.1", "idle.loader_cover=3"])
def test_a_setting_outside_its_range_is_one_line_and_exit_2(capsys, setting):
    with pytest.raises(SystemExit) as usage:  # a usage error, before anything is loaded
        main(["analyze", "any.json", "--set", setting])
    err = capsys.readouterr().err.strip()
    assert usage.value.code == 2 and "\n" not in err and repr(setting) in err and "takes a" in err


def test_every_parameter_declares_its_range_and_its_default_is_inside_it():
    from dataclasses import fields

    from traceagent.detect.analysis import AnalysisParams
    from traceagent.detect.core.bounds import field_range, out_of_range

    params = AnalysisParams()
    groups = [params.idle, params.verdict, params.stragglers, *params.detectors.values()]
    for group in groups:
        for f in fields(group):
            value = getattr(group, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert field_range(type(group), f.name) is not None, f"{type(group).__name__}.{f.name} has no range"
                assert out_of_range(type(group), f.name, value) is None


def test_a_setting_inside_its_range_still_changes_the_analysis(tmp_path):
    b = TraceBuilder()
    b.kernel("gemm", 0, 100)
    b.kernel("gemm", 130, 100)  # a 30 µs gap: launch latency only under a 50 µs launch_gap_us
    path = b.write(tmp_path / "t.json")
    causes = traceagent.analyze(path, settings=["idle.launch_gap_us=50"]).ranks[0].findings.idle.by_cause_us
    assert causes == {"launch_latency": 30.0} != traceagent.analyze(path).ranks[0].findings.idle.by_cause_us


def test_a_step_number_beyond_64_bits_is_a_step_without_a_number(tmp_path):
    b = TraceBuilder()
    b.op("ProfilerStep#99999999999999999999999", 0, 300)
    b.op("ProfilerStep#99999999999999999999998", 300, 300)
    b.kernel("gemm", 50, 100, launch_at=10)
    b.kernel("gemm", 350, 100, launch_at=310)
    steps = traceagent.analyze(b.write(tmp_path / "t.json")).ranks[0].findings.steps
    assert [s.step for s in steps.steps] == [0, 1]  # numbered in order of their start, as unnumbered ranges are


def test_thousands_of_zero_length_launches_and_kernels_at_one_instant_analyse(tmp_path, capsys):
    events = []
    for i in range(2000):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5,
                       "dur": 0, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 0,
                       "args": {"correlation": i + 1, "device": 0, "stream": 7}})
    path = tmp_path / "zero.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert main(["analyze", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"][0]["critical_path"] is None and impossible(data) == []


def test_an_nsight_export_with_bytes_overwritten_inside_a_name_loads(tmp_path):
    from conftest import NSYS_BEFORE

    damaged = tmp_path / "damaged.sqlite"
    data = bytearray(NSYS_BEFORE.read_bytes())
    at = data.find(b"nvjet_tst")  # a kernel name in StringIds
    data[at:at + 50] = b"\xff" * 50  # no longer UTF-8
    damaged.write_bytes(bytes(data))
    names = set(traceagent.load(damaged).traces[0].gpu["name"])
    assert any("\ufffd" in n for n in names)  # the damaged name, as replacement characters
    assert len(names) == len(set(traceagent.load(NSYS_BEFORE).traces[0].gpu["name"]))


def test_steps_give_their_start_from_the_traces_first_event_like_every_other_time(tmp_path, capsys):
    b = TraceBuilder()
    epoch = 1_600_000_000_000_000.0  # Kineto's ts: µs since the epoch
    b.op("ProfilerStep#1", epoch + 100, 300)
    b.kernel("gemm", epoch + 150, 100, launch_at=epoch + 110)
    b.op("ProfilerStep#2", epoch + 400, 300)
    b.kernel("gemm", epoch + 450, 100, launch_at=epoch + 410)
    path = b.write(tmp_path / "t.json")
    assert main(["analyze", str(path), "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["ranks"][0]["steps"]["steps"]
    assert [s["start_us"] for s in steps] == [0.0, 300.0]  # the first step starts the trace
    assert [s["ts_us"] for s in steps] == [epoch + 100, epoch + 400]  # and on the trace's clock, for a viewer
