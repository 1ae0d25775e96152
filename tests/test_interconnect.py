"""Links: copies against their link's peak, and Nsight Systems GPU metrics (PCIe, NVLink, SM and
tensor activity) read over the copies, collectives and hot kernels they sampled."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from rawtrace import union  # the independent reader's interval union

import traceagent
from traceagent.detect.core.links import host_link
from traceagent.report.markdown import render_markdown

DATA = Path(__file__).parent / "data"
REPORT1 = DATA / "test-cuda" / "report1.sqlite"  # a real export: RTX 4060 Ti, 8 HtoD and 4 DtoH pinned copies
PERIOD = 100_000  # ns between samples
TYPE_ID = 0x1000100000000  # its low byte: the GPU's pwGpuId (0 in this export)
METRICS = {1: "PCIe RX Throughput [Throughput %]", 2: "PCIe TX Throughput [Throughput %]",
           3: "NVLink RX Requests User Data [Throughput %]", 4: "NVLink RX Responses User Data [Throughput %]",
           5: "SMs Active [Throughput %]", 6: "GPC Clock Frequency [MHz]"}


def value(metric: int, i: int) -> int:
    return (i * (31 + 7 * metric)) % 101


def with_gpu_metrics(tmp_path: Path) -> tuple[Path, list[int]]:
    """The real export with GPU metric tables added, in the schema nsys writes (its SQLite schema
    reference): TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName) and
    GPU_METRICS(rawTimestamp, timestamp, typeId, metricId, value), sampled every 100 µs."""
    path = tmp_path / "with_metrics.sqlite"
    shutil.copy(REPORT1, path)
    with sqlite3.connect(path) as db:
        lo, hi = db.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
        db.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL, "
                   "typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL)")
        db.execute("CREATE TABLE GPU_METRICS (rawTimestamp INTEGER NOT NULL, timestamp INTEGER NOT NULL, "
                   "typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, value INTEGER NOT NULL)")
        db.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, 'General Metrics for NVIDIA AD10x', ?, ?)",
                       [(TYPE_ID, TYPE_ID, i, name) for i, name in METRICS.items()])
        times = list(range(lo - PERIOD, hi + 2 * PERIOD, PERIOD))
        db.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?, ?)",
                       [(t, t, TYPE_ID, m, value(m, i)) for i, t in enumerate(times) for m in METRICS])
    return path, times


def weighted_mean(times: list[int], values: list[float], over: list[tuple[int, int]]) -> float:
    """Each sample covers the period since the previous one (the first: one period before it),
    weighted by how much of that period `over` covers: computed here with plain loops."""
    total = weight = 0.0
    for i, t in enumerate(times):
        start = times[i - 1] if i else t - (times[1] - times[0])
        w = sum(max(0, min(t, e) - max(start, s)) for s, e in over)
        total += w * values[i]
        weight += w
    return total / weight


def test_pcie_and_nvlink_utilisation_during_copies_match_sums_done_here(tmp_path):
    path, times = with_gpu_metrics(tmp_path)
    result = traceagent.analyze(path, use_cache=False).focus.results["interconnect"]
    # five metrics read (not the clock), NVLink RX requests and responses added into one: 4 per sample time
    assert result.metric_samples == len(times) * 4
    with sqlite3.connect(path) as db:
        copies = {kind: union(db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ?",
                                          (code,)).fetchall()) for kind, code in (("HtoD", 1), ("DtoH", 2))}
    by_kind = {c.kind: c for c in result.copies}
    for kind, metric in (("HtoD", 1), ("DtoH", 2)):  # PCIe RX is what the GPU receives: HtoD
        expected = weighted_mean(times, [value(metric, i) for i in range(len(times))], copies[kind])
        assert by_kind[kind].measured_pct == pytest.approx(expected, abs=0.005)
        window = next(w for w in result.windows if w.during == f"{kind} copies")
        assert window.values["pcie_rx_pct" if kind == "HtoD" else "pcie_tx_pct"] == pytest.approx(expected, abs=0.005)
    # NVLink RX: requests and responses of user data, added into one direction
    whole = next(w for w in result.windows if w.during == "the whole trace")
    with sqlite3.connect(path) as db:  # the GPU's span: first to last device work (this export has no memsets)
        span = [db.execute("SELECT min(s), max(e) FROM (SELECT start s, end e FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
                           "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL)").fetchone()]
    nvlink = [value(3, i) + value(4, i) for i in range(len(times))]
    assert whole.values["nvlink_rx_pct"] == pytest.approx(weighted_mean(times, nvlink, span), abs=0.005)


def test_copies_are_measured_against_the_host_link_with_the_assumption_said(tmp_path):
    a = traceagent.analyze(REPORT1)
    result = a.focus.results["interconnect"]
    copies, memcpy = {c.kind: c for c in result.copies}, a.focus.findings.memcpy.by_kind
    link = result.links[copies["HtoD"].link]
    # the RTX 4060 Ti is built with eight PCIe 4.0 lanes, whatever the slot: 16 GT/s × 8, 128b/130b
    assert (link.kind, link.peak_gbps) == ("PCIe Gen4 x8", 15.75)
    assert copies["HtoD"].gbps == memcpy["HtoD"].gbps  # the same figure as data movement's
    assert copies["HtoD"].peak_pct == pytest.approx(100 * memcpy["HtoD"].gbps / 15.75, abs=0.01)
    assert copies["HtoD"].measured_pct is None and result.windows == []  # this export has no GPU metrics
    line = next(line for line in render_markdown(a).splitlines() if line.startswith("**Links.**"))
    assert "of PCIe Gen4 x8's 15.75 GB/s (assumed: NVIDIA GeForce RTX 4060 Ti" in line and "own eight lanes" in line


@pytest.mark.parametrize("gpu, kind", [("NVIDIA GeForce RTX 4090", "PCIe Gen4 x16"),
                                       ("NVIDIA GeForce RTX 4060", "PCIe Gen4 x8"),
                                       ("NVIDIA GeForce RTX 5060 Ti", "PCIe Gen5 x8"),
                                       ("NVIDIA GeForce RTX 5090", "PCIe Gen5 x16")])
def test_cards_built_with_eight_lanes_are_measured_against_eight(gpu, kind):
    assert host_link(gpu).kind == kind


def test_a_one_byte_copy_is_quoted_at_its_rate_not_rounded_to_zero(tmp_path):
    from builder import TraceBuilder

    b = TraceBuilder("NVIDIA H100 80GB HBM3")
    b.kernel("gemm", 0, 100, launch_at=0)
    b.memcpy(110, 2.368, 1, kind="DtoH", src="Device", dst="Pinned", launch_at=100)
    a = traceagent.analyze(b.write(tmp_path / "t.json"), use_cache=False)
    # by hand: 1 byte in 2368 ns is 1 / 2368 GB/s, 422.3 kB/s (rounded to the MB/s it read 0.0)
    assert a.focus.findings.memcpy.by_kind["DtoH"].gbps == pytest.approx(1 / 2368, rel=1e-3)
    line = next(line for line in render_markdown(a).splitlines() if line.startswith("**Links.**"))
    assert "DtoH copies ran at 422.3 kB/s" in line


@pytest.mark.parametrize(("copy_us", "advised"), [(100.0, True), (2.0, False)])
def test_slow_copies_get_a_next_step_only_where_they_cost_time(tmp_path, copy_us, advised):
    # 8 pageable bytes after a 1000 µs kernel: exposed 100 µs is 9.1% of the 1100 µs span (worth
    # pinning), 2 µs is 0.2% (under the 1% worth_pct: a slow link that costs nothing)
    from builder import TraceBuilder

    b = TraceBuilder("NVIDIA H100 80GB HBM3")
    b.kernel("gemm", 0, 1000, launch_at=0)
    b.memcpy(1000, copy_us, 8, kind="HtoD", launch_at=990)
    copy = traceagent.analyze(b.write(tmp_path / "t.json"), use_cache=False).focus.results["interconnect"].copies[0]
    assert copy.peak_pct < 25.0 and copy.pageable_pct == 100.0
    assert (copy.next_step is not None) == advised
    if advised:
        assert copy.next_step.startswith("pin the host memory")
