"""The GPU-workload script's CPU path: on this machine (CPU build of PyTorch) every workload runs
and writes a CPU-only trace and its truth file, and traceagent says there is no device activity."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import traceagent
from traceagent import analyze

# the script runs in a child: this process only checks PyTorch is there (importing it costs
# each test worker seconds)
pytestmark = [pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="could not import 'torch'"),
              pytest.mark.xdist_group("torch")]
SCRIPT = Path(__file__).parents[1] / "tools" / "gpu_workloads.py"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("workloads")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--steps", "2", "--device", "cpu"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_workload_writes_a_trace_and_its_truth(recorded):
    sys.path.insert(0, str(SCRIPT.parent))
    from gpu_workloads import WORKLOADS
    for workload in WORKLOADS:
        assert (recorded / f"{workload.name}.pt.trace.json.gz").stat().st_size > 0
        truth = json.loads((recorded / f"{workload.name}.truth.json").read_text())
        assert truth["workload"] == workload.name and truth["device"]["type"] == "cpu"
        assert truth["expect"] == {"limiter": None, "root_cause": None}
    # each fix names the workload it fixes
    assert {w.fix_of for w in WORKLOADS if w.fix_of} <= {w.name for w in WORKLOADS}


def test_cpu_traces_load_as_cpu_only_with_steps(recorded, isolated_cache):
    for trace_file in sorted(recorded.glob("*.pt.trace.json.gz")):
        job = traceagent.load(trace_file)
        trace = job.traces[0]
        assert not trace.has_device_activity
        assert len(trace.steps) == 2  # the two active ProfilerSteps
        assert trace.meta.has_python_frames  # with_stack=True
        assert analyze(job).verdict.limiter is None


def test_the_planted_sync_is_visible_on_the_host(recorded):
    trace = traceagent.load(recorded / "sync_item.pt.trace.json.gz").traces[0]
    names = set(trace.cpu["name"].astype(str))
    assert "aten::item" in names
    fixed = traceagent.load(recorded / "sync_item_fixed.pt.trace.json.gz").traces[0]
    assert "aten::item" not in set(fixed.cpu["name"].astype(str))
