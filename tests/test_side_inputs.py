"""Every file a command or tool reads is protected and checked like the trace itself: an output
may not replace a side input (an Nsight Compute export, a graph capture), and a pipe or a device
given as one is refused at once, on the command line and over MCP, never read for ever."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import DATA
from test_safe_outputs import small_trace

from traceagent.cli import main

NCU = DATA / "ncu" / "superbench_cublaslt_b200.ncu.csv"
SIDE_INPUTS = ["--kernels", "--graph-capture"]


def _side_input(tmp_path, flag: str):
    """A copy of a real side input for `flag`: the ncu export, or a trace as the capture."""
    if flag == "--kernels":
        copy = tmp_path / "ncu.csv"
        copy.write_bytes(NCU.read_bytes())
        return copy
    return small_trace(tmp_path / "cap.json")


@pytest.mark.parametrize("flag", SIDE_INPUTS)
def test_a_report_written_onto_a_side_input_is_refused_and_the_input_survives(tmp_path, capsys, flag):
    trace = small_trace(tmp_path / "t.json")
    side = _side_input(tmp_path, flag)
    before = side.read_bytes()
    assert main(["report", str(trace), flag, str(side), "-o", str(side)]) == 2
    err = capsys.readouterr().err.strip()
    assert "an input of this command" in err and "\n" not in err and "Traceback" not in err
    assert side.read_bytes() == before


def _cli(args: list[str], cache) -> tuple[int, str, float]:
    """(exit code, stderr, seconds) of `traceagent ARGS` in a child that is killed after 20 s."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "traceagent", *args], capture_output=True, text=True, timeout=20,
                          env={**os.environ, "TRACEAGENT_CACHE_DIR": str(cache)}, stdin=subprocess.DEVNULL)
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.mark.parametrize("flag", SIDE_INPUTS)
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_pipe_or_a_device_as_a_side_input_is_refused_at_once(tmp_path, flag, kind):
    trace = small_trace(tmp_path / "t.json")
    if kind == "fifo":
        special = tmp_path / "side.fifo"
        os.mkfifo(special)  # nobody ever writes to it: opening it to read would block for ever
    else:
        special = "/dev/zero"  # size 0, and it reads for ever
    code, stderr, seconds = _cli(["analyze", str(trace), flag, str(special)], tmp_path / "cache")
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
    assert "not a regular file" in stderr and str(special) in stderr
    assert seconds < 15


def test_pipes_and_devices_as_side_inputs_over_mcp_are_tool_errors_and_the_server_serves_on(tmp_path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    trace = small_trace(tmp_path / "t.json")
    fifo = tmp_path / "side.fifo"
    os.mkfifo(fifo)
    server = StdioServerParameters(command=sys.executable, args=["-m", "traceagent", "mcp"], env=dict(os.environ))
    errlog = (tmp_path / "stderr.txt").open("w")
    calls = [("open_trace", {"path": str(trace), side: str(special)})
             for side in ("kernels", "graph_capture") for special in (fifo, "/dev/zero")]

    async def drive():
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            answers = [await asyncio.wait_for(session.call_tool(name, args), 15) for name, args in calls]
            return answers, await session.call_tool("open_trace", {"path": str(trace)})

    answers, good = asyncio.run(drive())
    errlog.close()
    for answer in answers:
        assert answer.is_error and "not a regular file" in json.loads(answer.content[0].text)["error"]
    assert not good.is_error
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text()


def test_the_cache_fingerprint_reads_no_more_than_the_size_it_was_given(tmp_path):
    from traceagent.trace import cache

    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    assert cache.fingerprint(str(path), 10) == cache.fingerprint(str(tmp_path / "f"), 10)
    (tmp_path / "g").write_bytes(b"x" * 10)
    assert cache.fingerprint(str(path), 10) == cache.fingerprint(str(tmp_path / "g"), 10)
