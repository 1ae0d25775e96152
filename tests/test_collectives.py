"""Collective bandwidth: bytes, algbw and busbw per nccl-tests, the assumed link, and the
bandwidth- vs latency-bound call, on real traces and on traces built by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest
from builder import TraceBuilder

import traceagent
from traceagent.detect.compare.diff import diff
from traceagent.detect.core.encode import to_data
from traceagent.detect.detectors.collectives import CollectivesParams, detect_collectives
from traceagent.format import rate
from traceagent.report.markdown import render_diff_markdown, render_markdown
from traceagent.schema import SCHEMAS

DATA = Path(__file__).parent / "data"
H100 = "NVIDIA H100 80GB HBM3"


def independent_reading(path: Path) -> dict[tuple[str, str], tuple[int, float, float]]:
    """(collective, group) → (bytes, busbw GB/s, kernel µs), read from the raw JSON with the json
    module and nccl-tests' PERFORMANCE.md: S = the whole buffer (the larger of the in and out
    message), busbw = S/t × 2(n-1)/n for all-reduce, (n-1)/n for all-gather, 1 for broadcast."""
    element = {"Float": 4, "BFloat16": 2, "Long": 8, "Half": 2}
    factor = {"allreduce": lambda n: 2 * (n - 1) / n, "_allgather_base": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0}
    kind = {"allreduce": "all_reduce", "_allgather_base": "all_gather", "broadcast": "broadcast"}
    sums: dict[tuple[str, str], list[float]] = {}
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    for e in events:
        args = e.get("args", {})
        if e.get("cat") != "kernel" or "Collective name" not in args:
            continue
        n = args["Group size"]
        nbytes = max(args["In msg nelems"], args["Out msg nelems"]) * element[args["dtype"]]
        row = sums.setdefault((kind[args["Collective name"]], args["Process Group Name"]), [0, 0.0, 0.0])
        row[0] += nbytes
        row[1] += nbytes * factor[args["Collective name"]](n)
        row[2] += e["dur"]
    return {key: (int(b), moved / (us * 1000), us) for key, (b, moved, us) in sums.items()}


@pytest.mark.parametrize("name", ["tracelens/b200_eager_trace.json.gz", "tracelens/mi300_resnet_act_checkpoint.json.gz",
                                  "hta/nccl_data.json.gz"])
def test_bytes_and_bus_bandwidth_match_an_independent_reading(name):
    path = DATA / name
    result = detect_collectives(traceagent.load(path).traces[0])
    expected = independent_reading(path)
    assert {(r.collective, r.group) for r in result.rows} == set(expected)
    for row in result.rows:
        nbytes, busbw, time_us = expected[row.collective, row.group]
        assert row.bytes == nbytes
        assert row.busbw_gbps == pytest.approx(busbw, rel=1e-3)
        assert row.time_us == pytest.approx(time_us, abs=0.01)
        link = result.links[row.link]
        assert row.peak_pct == pytest.approx(100 * busbw / link.peak_gbps, abs=0.01)


def test_every_bandwidth_share_says_the_link_it_assumed():
    a = traceagent.analyze(DATA / "tracelens/b200_eager_trace.json.gz")
    result = a.focus.results["collectives"]
    link = result.links[0]
    assert (link.kind, link.peak_gbps) == ("NVLink 5", 900.0)  # B200, ranks 0-7 in one node
    assert "ranks 0-7 in one node" in link.assumption and "8 GPUs per node assumed" in link.assumption
    report = render_markdown(a)
    lines = report.splitlines()
    notes = {line.split("]")[0] + "]": line for line in lines if line.startswith("[")}  # a table's link notes

    def says_assumption(line: str) -> bool:
        return "assumed" in line or any(mark in line and "assumed" in note for mark, note in notes.items())

    shares = [line for line in lines if "of NVLink 5" in line]
    assert len(shares) == 2 and all(says_assumption(line) for line in shares)  # the table's row and the sentence


def test_a_16_rank_two_node_all_reduce_is_measured_against_one_gpus_share_of_the_nics(tmp_path):
    b = TraceBuilder(H100)
    b.collective(0, 40_000, 500_000_000, ranks=list(range(16)))  # 1 GB of bf16 in 40 ms, 16 ranks on 2 nodes
    result = detect_collectives(b.load(tmp_path))
    (row,), link = result.rows, result.links[0]
    # by hand: algbw = 1e9 B / 40 ms = 25 GB/s; busbw = 25 × 2(16-1)/16 = 46.875 GB/s; one GPU's
    # share of its node's NICs (8 GPUs, one 400 Gb/s NIC each) is 400 / 8 = 50 GB/s: 93.75% of peak
    assert (row.algbw_gbps, row.busbw_gbps) == (pytest.approx(25.0), pytest.approx(46.875))
    assert link.kind.startswith("network") and link.peak_gbps == 50.0 and row.peak_pct == pytest.approx(93.75)
    assert "across 2 nodes" in link.assumption and "8 NICs per node (one per GPU assumed)" in link.assumption
    assert result.bound == "bandwidth" and result.peak_pct == pytest.approx(93.75)
    # the NICs per node and their rate are separate settings, and both are said
    params = CollectivesParams(nics_per_node=4, nic_gbps=800)
    link = detect_collectives(b.load(tmp_path, "again.json"), params).links[0]
    assert link.peak_gbps == 50.0 and "4 NICs per node (given)" in link.assumption and "800 Gb/s each (given)" in \
        link.assumption


def test_kernels_without_a_payload_are_counted_not_guessed(tmp_path):
    from traceagent.detect.detectors.collectives import collectives_sentence

    b = TraceBuilder(H100)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 0, 50)  # an NCCL kernel, no payload recorded
    assert detect_collectives(b.load(tmp_path)) is None
    b.collective(100, 20, 1024, dtype="SomeNewType")  # a dtype of unknown size: not counted either
    b.collective(200, 20, 1024)
    result = detect_collectives(b.load(tmp_path, "two.json"))
    assert (result.calls, result.without_payload, result.bytes) == (1, 2, 2048)
    assert collectives_sentence(result).startswith(
        "1 collective (and 2 collective kernels without a recorded payload, not counted) moved 2.05 kB")


def one_large_or_many_small(tmp_path: Path, small: bool) -> Path:
    """The same all-reduce volume, 100 MiB of bf16 over 8 H100s in one node (NVLink 4, 450 GB/s),
    as one collective or as 200 of 0.5 MiB, in one step.
    - large: busbw = 100 MiB × 2·7/8 / 600 µs = 305.8 GB/s, 68% of 450: bandwidth-bound.
    - small: busbw = 0.5 MiB × 1.75 / 30 µs = 30.6 GB/s (6.8%); each would take 2.0 µs at peak,
      under the 10 µs latency: small, all of the time: latency-bound."""
    b = TraceBuilder(H100)
    b.op("ProfilerStep#1", 0, 10_000)
    b.kernel("gemm", 0, 100)
    if small:
        for i in range(200):
            b.collective(200 + 40 * i, 30, 1 << 18)
    else:
        b.collective(200, 600, 50 << 20)
    return b.write(tmp_path / f"{'small' if small else 'large'}.json")


def test_one_large_collective_is_bandwidth_bound_and_many_small_ones_latency_bound(tmp_path):
    large = traceagent.analyze(one_large_or_many_small(tmp_path, small=False), use_cache=False)
    small = traceagent.analyze(one_large_or_many_small(tmp_path, small=True), use_cache=False)
    big, tiny = large.focus.results["collectives"], small.focus.results["collectives"]
    assert big.bytes == tiny.bytes == 100 << 20
    assert big.busbw_gbps == pytest.approx((100 << 20) * 1.75 / 600_000, rel=1e-3)
    assert tiny.busbw_gbps == pytest.approx((1 << 19) * 1.75 / 30_000, rel=1e-3)
    assert (big.bound, tiny.bound) == ("bandwidth", "latency")
    assert tiny.small_time_pct == 100.0 and big.small_time_pct == 0.0
    assert [s.calls for s in tiny.sizes] == [200] and tiny.sizes[0].size == "64 KiB - 1 MiB"
    assert "bucket_cap_mb" in tiny.next_steps[0]

    change = diff(small, large).collectives
    assert change["before"]["calls_per_step"] == 200 and change["after"]["calls_per_step"] == 1
    assert "latency-bound → bandwidth-bound" in change["sentence"]
    assert f"bus bandwidth {rate(tiny.busbw_gbps)} → {rate(big.busbw_gbps)}," in change["sentence"]  # each side alike
    assert change["sentence"] in render_diff_markdown(diff(small, large))
    jsonschema.Draft202012Validator(SCHEMAS["diff"]()).validate(json.loads(json.dumps(to_data(diff(small, large)))))
    jsonschema.Draft202012Validator(SCHEMAS["analyze"]()).validate(json.loads(json.dumps(small.to_dict())))


def test_collectives_that_take_little_of_the_device_time_get_no_next_step(tmp_path):
    from traceagent.detect.detectors.collectives import collectives_sentence

    # one 22 µs all-reduce beside 10 ms of compute: 0.2% of the span, under worth_pct (1%): a fact, no advice
    b = TraceBuilder(H100)
    b.kernel("gemm", 0, 10_000)
    b.collective(10_000, 22, 1 << 10)
    result = traceagent.analyze(b.write(tmp_path / "t.json"), use_cache=False).focus.results["collectives"]
    assert result.bound == "latency" and result.next_steps == []
    assert "Next:" not in collectives_sentence(result)


def test_across_ranks_the_wait_for_the_last_rank_is_taken_out_of_the_bus_bandwidth(tmp_path):
    """Two ranks, one 100 MiB bf16 all-reduce (bus factor 2·1/2 = 1): rank 0 enters at 0, rank 1 at
    800 µs, both end at 1000 µs. Over kernel time: 2 × 100 MiB / 1200 µs = 174.8 GB/s; after the
    last rank entered (200 µs on each): 2 × 100 MiB / 400 µs = 524.3 GB/s."""
    for rank, start in ((0, 0), (1, 800)):
        b = TraceBuilder(H100, distributedInfo={"rank": rank, "world_size": 2})
        b.collective(start, 1000 - start, 50 << 20, ranks=[0, 1])
        b.write(tmp_path / f"rank{rank}.json")
    c = traceagent.analyze(tmp_path, use_cache=False, scheduler="none").comparison
    assert c.payload_matched == 1
    assert c.busbw_gbps == round(2 * (100 << 20) / 1_200_000, 3)
    assert c.busbw_without_waiting_gbps == round(2 * (100 << 20) / 400_000, 3)
