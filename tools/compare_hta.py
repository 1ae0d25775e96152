#!/usr/bin/env python3
"""Run Holistic Trace Analysis and traceagent side by side on Kineto traces and print both.

    pip install holistictraceanalysis   # in the same environment as traceagent
    python tools/compare_hta.py tests/data/kineto/*.json.gz

For each trace three columns: HTA's temporal breakdown; traceagent on exactly the device events
HTA kept ("matched": the definitions agree, so the numbers must too); and traceagent's own
numbers, with the reason for each difference from HTA.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import traceagent
from traceagent.detect.core import intervals as iv
from traceagent.detect.detectors.breakdown import detect_breakdown


def run_hta(path: str) -> dict:
    """HTA's temporal breakdown, kernel-type totals and the correlation ids of the GPU events it used."""
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")  # HTA's own pandas deprecation noise
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        os.symlink(os.path.abspath(path), os.path.join(folder, os.path.basename(path)))
        analysis = TraceAnalysis(trace_dir=folder)
        temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
        kernel_types = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
        rank = next(iter(analysis.t.traces))
        df = analysis.t.get_trace(rank)
    gpu = df[df["stream"].ne(-1)]
    symbols = analysis.t.symbol_table.get_sym_table()
    categories = gpu["cat"].map(lambda i: symbols[i])
    return {
        "span_us": float(temporal["kernel_time(us)"]),
        "idle_us": float(temporal["idle_time(us)"]),
        "compute_us": float(temporal["compute_time(us)"]),
        "non_compute_us": float(temporal["non_compute_time(us)"]),
        "kernel_types": dict(zip(kernel_types["kernel_type"], kernel_types["sum"])),
        "correlations": set(gpu["correlation"].astype("int64")),
        "events": len(gpu),
        # HTA takes any event with a `stream` argument for device work; Triton's launch ops
        # (cat cpu_op) record one
        "host_ops_as_device": int(categories.isin(["cpu_op", "user_annotation", "python_function"]).sum()),
    }


def traceagent_numbers(trace, keep: np.ndarray | None = None, truncate_to_us: bool = False) -> dict:
    """Span, idle, compute and non-compute in HTA's terms, from our frames (optionally the subset
    HTA kept; optionally rounded to whole µs as HTA's parser does for ns-resolution traces: the
    start up, the end down, so each event shrinks to the microseconds inside it)."""
    work = trace.gpu[trace.gpu["kind"] != "sync"]
    if keep is not None:
        work = work[work["correlation"].isin(keep)]
    start, end = work["start"].to_numpy(), work["end"].to_numpy()
    if truncate_to_us:
        start, end = -(-start // 1000) * 1000, (end // 1000) * 1000
        end = np.maximum(end, start)
    busy = iv.union(start, end)
    if not len(busy[0]):
        return {"span_us": 0.0, "idle_us": 0.0, "compute_us": 0.0, "non_compute_us": 0.0, "events": 0}
    span = busy[1][-1] - busy[0][0]
    compute_rows = (work["kind"] == "kernel").to_numpy() & ~work["is_comm"].to_numpy()
    compute = iv.union(start[compute_rows], end[compute_rows])
    idle = span - iv.length(busy)
    return {"span_us": span / 1000, "idle_us": idle / 1000, "compute_us": iv.length(compute) / 1000,
            "non_compute_us": (span - idle - iv.length(compute)) / 1000, "events": len(work)}


def compare(path: str) -> pd.DataFrame:
    hta = run_hta(path)
    trace = traceagent.load(path).traces[0]
    keep = np.array(sorted(hta["correlations"]))
    matched = traceagent_numbers(trace, keep=keep)
    truncated = traceagent_numbers(trace, keep=keep, truncate_to_us=True)
    ours = traceagent_numbers(trace)
    own = detect_breakdown(trace).total
    rows = {}
    for key in ("span_us", "idle_us", "compute_us", "non_compute_us", "events"):
        rows[key] = {"HTA": hta[key], "traceagent (HTA's events)": matched[key],
                     "same, µs-rounded like HTA": truncated[key], "traceagent": ours[key]}
        if hta[key]:
            rows[key]["matched vs HTA"] = f"{100 * (matched[key] - hta[key]) / hta[key]:+.2f}%"
            rows[key]["rounded vs HTA"] = f"{100 * (truncated[key] - hta[key]) / hta[key]:+.2f}%"
    table = pd.DataFrame(rows).T
    table.attrs["why"] = _differences(trace, hta, ours, own)
    table.attrs["kernel_types"] = hta["kernel_types"]
    return table


def _differences(trace, hta: dict, ours: dict, own) -> list[str]:
    """Why traceagent's own numbers differ from HTA's, as far as this trace shows."""
    why = []
    steps = len(trace.steps)
    if steps >= 2:
        why.append(f"HTA drops device work launched in the last of the {steps} ProfilerSteps and work it cannot "
                   "link to a launch call; traceagent keeps all recorded device work, because the last step's "
                   "kernels ran on the GPU and its idle time is as real as any other.")
    syncs = int((trace.gpu["kind"] == "sync").sum())
    if syncs and hta["events"] > ours["events"]:
        why.append(f"HTA counts the trace's {syncs} cuda_sync records (host waits stamped on a stream) as device "
                   "work, which can stretch its span; traceagent does not: no kernel or copy ran then.")
    if hta["host_ops_as_device"]:
        why.append(f"HTA counts {hta['host_ops_as_device']} host op(s) that carry a `stream` argument (Triton "
                   "launches record one) as device compute; traceagent keeps them on the host, where they ran.")
    unlinked = ours["events"] - hta["events"]
    if steps < 2 and unlinked > 0:
        why.append(f"{unlinked} device events have no launch call in the trace; HTA leaves them out.")
    if (trace.gpu["start"] % 1000 != 0).any():
        why.append("Timestamps have nanosecond resolution; HTA rounds each event inward to whole microseconds "
                   "(start up, end down: 'Rounding down ns resolution events'), so each short kernel loses up to "
                   "2 µs of busy time in HTA. The 'rounded like HTA' column applies the same rounding to our "
                   "numbers; traceagent itself keeps nanoseconds.")
    if own.exposed_comm_us:
        why.append("HTA's non-compute time lumps communication and copies; traceagent splits them and reports "
                   "exposed communication separately.")
    return why


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    try:
        import hta  # noqa: F401
    except ImportError:
        print("compare_hta: Holistic Trace Analysis is not installed: pip install holistictraceanalysis", file=sys.stderr)
        return 2
    pd.set_option("display.width", 160)
    pd.set_option("display.float_format", lambda x: f"{x:,.1f}")
    for path in args.traces:
        print(f"\n== {path}")
        try:
            table = compare(path)
        except Exception as exc:  # HTA has assertions that real traces trip
            print(f"HTA failed on this trace: {type(exc).__name__}: {exc}".rstrip(": "))
            b = detect_breakdown(traceagent.load(path).traces[0]).total
            print(f"traceagent: span {b.span_us:,.1f} µs, idle {b.idle_us:,.1f} µs, compute {b.compute_us:,.1f} µs")
            continue
        print(table.to_string())
        print("HTA kernel types (µs):", {k: round(float(v), 1) for k, v in table.attrs["kernel_types"].items()})
        for line in table.attrs["why"]:
            print("  -", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
