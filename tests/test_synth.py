"""tools/synth_trace.py: a synthesized trace loads, and its analysis finds the bottleneck it was
asked to plant (small sizes; no timing here, timing is tools/bench.py's job)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import traceagent
from traceagent import analyze

sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))
from synth_trace import parse_size, synthesize

EXPECTED = {
    "dataloader": ("idle", "dataloader"),
    "sync": ("idle", "sync"),
    "launch": ("idle", "launch_overhead"),
    "pageable": ("data_movement", "pageable_memcpy"),
    "comm": ("communication", "communication"),
    "compute": ("compute", "hot_kernel"),
}


@pytest.mark.parametrize("plant", sorted(EXPECTED))
def test_the_planted_bottleneck_is_found(tmp_path, plant):
    path = synthesize(tmp_path / f"{plant}.json", parse_size("2MB"), plant=plant, seed=1)
    assert path.stat().st_size >= 2e6
    result = analyze(traceagent.load(path))
    v = result.verdict
    assert (v.limiter, v.root_cause) == EXPECTED[plant], v.headline
    trace = result.ranks[0].trace
    assert trace.counts()["steps"] >= 1 and trace.meta.has_flows and trace.meta.has_python_frames


def test_same_seed_same_bytes_and_gzip(tmp_path):
    a = synthesize(tmp_path / "a.json", parse_size("300kB"), seed=7)
    b = synthesize(tmp_path / "b.json", parse_size("300kB"), seed=7)
    assert a.read_bytes() == b.read_bytes()
    gz = synthesize(tmp_path / "c.json.gz", parse_size("300kB"), seed=7)
    assert traceagent.load(gz).traces[0].counts() == traceagent.load(a).traces[0].counts()


def test_several_ranks(tmp_path):
    for rank in range(3):
        synthesize(tmp_path / f"rank-{rank}.json", parse_size("300kB"), rank=rank, world=3)
    job = traceagent.load(tmp_path)
    assert job.ranks == [0, 1, 2] and all(t.meta.world_size == 3 for t in job.traces)
    assert analyze(job).comparison is not None


def test_sizes_parse():
    assert [parse_size(s) for s in ("10MB", "1GB", "300kB", "512")] == [10_000_000, 1_000_000_000, 300_000, 512]
