"""Shared fixtures: paths to the real traces in tests/data, the session's cache, an isolated cache
for the tests about caching, and each shared trace analyzed once per session."""

from __future__ import annotations

import gc
import gzip
import json
import os
from functools import cache
from pathlib import Path

import pytest

import traceagent

DATA = Path(__file__).parent / "data"
RESNET_NW0 = DATA / "kineto" / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
RESNET_NW0_B = DATA / "kineto" / "resnet50_num_workers_0_worker0.1623143566756.pt.trace.json.gz"
RESNET_NW4 = DATA / "kineto" / "resnet50_num_workers_4_worker0.1623212756351.pt.trace.json.gz"
RESNET_NW4_B = DATA / "kineto" / "resnet50_num_workers_4_worker0.1623213129365.pt.trace.json.gz"
DLRM_8RANK = DATA / "dlrm_8rank"
NSYS_BEFORE = DATA / "nsys-ai" / "mfu_2gpu_before.sqlite"
NSYS_AFTER = DATA / "nsys-ai" / "mfu_2gpu_after.sqlite"
B200 = DATA / "tracelens" / "b200_eager_trace.json.gz"
MI300 = DATA / "tracelens" / "mi300_resnet_act_checkpoint.json.gz"
NCCL_A100 = DATA / "hta" / "nccl_data.json.gz"
CPU_ONLY = DATA / "cpu" / "torch_cpu_only.pt.trace.json.gz"


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory) -> Path:
    """One cache for the whole run: pytest-xdist's workers share the directory above their own
    temporary roots, so a shared trace is parsed by the first worker that needs it and read back
    by the others (entries are written atomically, so workers never see half of one)."""
    root = tmp_path_factory.getbasetemp()
    shared = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "session-cache"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(autouse=True)
def session_cache(session_cache_dir, monkeypatch) -> Path:
    """Every test reads and writes the session's cache, never the user's: each shared trace is
    parsed once per run. Tests about caching itself take `isolated_cache` instead."""
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(session_cache_dir))
    return session_cache_dir


@pytest.fixture
def isolated_cache(tmp_path_factory, monkeypatch) -> Path:
    """An empty cache directory of this test's own."""
    path = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("TRACEAGENT_CACHE_DIR", str(path))
    return path


@cache
def analyzed(path: Path) -> traceagent.Analysis:
    """The analysis of a shared trace with default parameters, computed once per worker from the
    run's cache (tests only read it; test_cache checks a cached load equals a parse)."""
    return traceagent.analyze(path)


def offline_answer(analysis: traceagent.Analysis, question: str, other: traceagent.Analysis | None = None) -> str:
    """The offline analyst's answer to one question about an analysis, or two runs (its last event's text)."""
    import asyncio

    from traceagent.agent.offline import OfflineAnalyst
    from traceagent.agent.tools import AnalysisContext

    async def run() -> str:
        return [e async for e in OfflineAnalyst(AnalysisContext(analysis, other)).answer(question)][-1].text
    return asyncio.run(run())


def write_trace(path: Path, events: list[dict], compress: bool = False, **top) -> Path:
    """Write a Kineto-style trace file from a few hand-made events."""
    doc = {"schemaVersion": 1, **top, "traceEvents": events}
    text = json.dumps(doc, indent=None).replace('}, {"ph"', '},\n{"ph"').encode()
    if compress:
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path


if os.environ.get("PYTEST_XDIST_WORKER"):
    import atexit
    import sys

    @atexit.register  # registered first, so it runs last: every other exit handler has run
    def _exit_without_freeing_the_heap() -> None:
        """A test worker has sent its reports by now; freeing its heap (every analysis and frame the
        session kept) took it 3 s before the process ended, on the suite's critical path."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def pytest_collection_finish(session) -> None:
    """What collection imported (modules, classes, test items) lives for the whole run: frozen,
    it is left out of every later garbage collection. Collections then run less often than
    Python's default (every 700 allocations): the suite makes millions of short-lived pandas and
    Textual objects, and collecting them so often cost ~10% of the workers' CPU."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)


def pytest_sessionfinish(session, exitstatus) -> None:
    """The heap as the last test left it is frozen too: pytest's unraisable-exception cleanup
    then runs its five collections over nothing instead of 2-3 s over every analysis the run
    kept (each test's own unraisable exceptions are still reported at its teardown)."""
    gc.freeze()


# -- a model server for the agent tests -------------------------------------------------------

SECRET = "sk-test-secret-key-0123456789"


@pytest.fixture
def model_env(monkeypatch):
    def configure(url: str, retries: int = 0, timeout: float = 10, deadline: float = 120, draft: bool = True) -> None:
        """draft=False: the model answers without the detectors' draft (for tests of its own calls)."""
        monkeypatch.setenv("TRACEAGENT_DRAFT", "1" if draft else "0")
        monkeypatch.setenv("TRACEAGENT_DEADLINE", str(deadline))
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("TRACEAGENT_MODEL", "scripted")
        monkeypatch.setenv("TRACEAGENT_MAX_RETRIES", str(retries))
        monkeypatch.setenv("TRACEAGENT_TIMEOUT", str(timeout))
        monkeypatch.setenv("TRACEAGENT_CONFIG", "/nonexistent/config.toml")
    return configure


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A three-kernel trace: for the tests about the server, where the trace is beside the point."""
    from builder import TraceBuilder

    b = TraceBuilder()
    for i in range(3):
        b.kernel(f"kernel_{i}", i * 100, 50)
    return b.write(tmp_path_factory.mktemp("tiny") / "tiny.json")
