"""`traceagent mcp` as a coding agent meets it: a subprocess driven by the `mcp` SDK's stdio
client. Its tools are the chat's (same names, schemas and JSON), plus open_trace/list_traces."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from conftest import RESNET_NW0, analyzed
from langchain_core.utils.function_calling import convert_to_openai_tool

import traceagent
from traceagent.agent.tools import AnalysisContext, build_tools

NCU = Path(__file__).parent / "data" / "ncu" / "superbench_cublaslt_b200.ncu.csv"
EXECUTION = Path(__file__).parent / "data" / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_execution.json.gz"
CAPTURE = Path(__file__).parent / "data" / "tracelens" / "mi300_vllm_prefilldecode_piecewise_graph_capture.json.gz"


def test_a_coding_agent_opens_a_trace_and_gets_the_chats_numbers(tmp_path):
    from mcp import ClientSession, StdioServerParameters  # here: only the worker that runs these imports it
    from mcp.client.stdio import stdio_client

    # the run's cache (conftest): the server reads the shared trace's parse and analysis from it
    server = StdioServerParameters(command=sys.executable, args=["-m", "traceagent", "mcp"], env=dict(os.environ))

    async def drive():
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = (await session.list_tools()).tools
            before = await session.call_tool("verdict", {})
            bad = await session.call_tool("open_trace", {"path": str(tmp_path / "missing.json")})
            opened = await session.call_tool("open_trace", {"path": str(RESNET_NW0)})
            verdict = await session.call_tool("verdict", {})
            idle = await session.call_tool("idle_gaps", {"cause": "dataloader", "top": 3})
            typo = await session.call_tool("idle_gaps", {"cause": "dataloadr"})
            traces = await session.call_tool("list_traces", {})
            await session.call_tool("open_trace", {"path": str(RESNET_NW0), "kernels": str(NCU)})
            profiled = await session.call_tool("kernel_profiles", {})
            await session.call_tool("open_trace", {"path": str(EXECUTION), "graph_capture": str(CAPTURE)})
            replayed = await session.call_tool("hot_kernels", {"top": 10})
            return listed, before, bad, opened, verdict, idle, typo, traces, profiled, replayed

    listed, before, bad, opened, verdict, idle, typo, traces, profiled, replayed = asyncio.run(drive())
    chat = {t.name: t for t in build_tools(AnalysisContext(analyzed(RESNET_NW0)))}
    names = {t.name for t in listed}
    assert {"open_trace", "list_traces"} | set(chat) <= names
    idle_spec = next(t for t in listed if t.name == "idle_gaps")
    assert idle_spec.input_schema == convert_to_openai_tool(chat["idle_gaps"])["function"]["parameters"]
    assert before.is_error and "call open_trace" in before.content[0].text
    assert bad.is_error and "missing.json" in json.loads(bad.content[0].text)["error"]
    assert not opened.is_error and json.loads(opened.content[0].text)["verdict"]["root_cause"] == "dataloader"
    assert json.loads(verdict.content[0].text) == json.loads(chat["verdict"].invoke({}))
    assert json.loads(idle.content[0].text) == json.loads(chat["idle_gaps"].invoke({"cause": "dataloader", "top": 3}))
    assert typo.is_error and "bad arguments" in typo.content[0].text
    assert json.loads(traces.content[0].text)["current"] == str(RESNET_NW0)
    with_ncu = build_tools(AnalysisContext(traceagent.analyze(RESNET_NW0, kernels=NCU)))
    assert json.loads(profiled.content[0].text) == json.loads(next(t for t in with_ncu if t.name == "kernel_profiles")
                                                            .invoke({}))
    assert json.loads(profiled.content[0].text)["kernels"][0]["bound"] == "latency"
    captured = build_tools(AnalysisContext(traceagent.analyze(EXECUTION, graph_capture=CAPTURE)))
    assert json.loads(replayed.content[0].text) == json.loads(next(t for t in captured if t.name == "hot_kernels")
                                                            .invoke({"top": 10}))
    assert "capture" in replayed.content[0].text  # replayed kernels named by their capture's ops


def test_the_server_refuses_urls_by_default_and_survives_hostile_traces(tmp_path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from test_bounded_reads import GiB, gzip_bomb

    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb, 2 * GiB, b"\0")
    # the run's cache (conftest): the server reads the shared trace's parse and analysis from it
    server = StdioServerParameters(command=sys.executable, args=["-m", "traceagent", "mcp"], env=dict(os.environ))
    errlog = (tmp_path / "stderr.txt").open("w")

    async def drive():
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            calls = [("open_trace", {"path": "ftp://example.com/trace.json"}),
                     ("open_trace", {"path": str(RESNET_NW0), "compare": "github://owner:repo@/t.json"}),
                     ("open_trace", {"path": str(bomb)}),
                     ("open_trace", {"path": str(RESNET_NW0), "steps": "("}),
                     ("open_trace", {"path": str(RESNET_NW0)})]
            return [await session.call_tool(name, args) for name, args in calls]

    ftp, github, bombed, bad_regex, good = asyncio.run(drive())
    errlog.close()
    for refused in (ftp, github):
        assert refused.is_error and "local paths only" in refused.content[0].text
        assert "--allow-remote" in refused.content[0].text
    assert bombed.is_error and "NUL bytes" in json.loads(bombed.content[0].text)["error"]
    assert bad_regex.is_error and "not a regular expression" in bad_regex.content[0].text
    assert not good.is_error  # the same server, still serving
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


def test_malformed_lines_get_json_rpc_errors_and_a_huge_path_is_echoed_within_bounds(tmp_path):
    import subprocess

    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    huge = "/tmp/" + "x" * 1_000_000 + ".json"
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "open_trace",
                                                                         "arguments": {"path": huge}}}
    lines = ["this is not json", '{"jsonrpc": "2.0", "method": 7}', json.dumps(initialize),
             json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), json.dumps(call)]
    server = subprocess.Popen([sys.executable, "-m", "traceagent", "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server.stdin.write("\n".join(lines) + "\n")
        server.stdin.flush()
        answers = [json.loads(server.stdout.readline()) for _ in range(4)]
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    parse, invalid, initialized, opened = answers
    assert parse["error"]["code"] == -32700 and parse["id"] is None
    assert invalid["error"]["code"] == -32600 and invalid["id"] is None
    assert initialized["id"] == 1 and "result" in initialized
    assert opened["id"] == 2 and opened["result"]["isError"]
    message = json.loads(opened["result"]["content"][0]["text"])["error"]
    assert len(message) < 1000 and "1,000,010 characters" in message and "longer than any file system allows" in message
    assert "Traceback" not in server.stderr.read()
