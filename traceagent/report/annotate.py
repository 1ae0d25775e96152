"""`traceagent annotate`: the findings written back onto the timeline, for Perfetto UI and
chrome://tracing.

A Kineto trace is copied whole, plus one "traceagent findings" process per rank whose tracks hold
every classified gap (a slice named by its cause), the steps, exposed communication, the hot
kernels' longest instances and the verdict (an instant at the start), all on the trace's own
clock. An Nsight Systems export becomes a Chrome-trace JSON of its device activity with the same
tracks. traceagent reads the findings' category ("traceagent") as nothing, so an annotated trace
analyzes exactly like the original.
"""

from __future__ import annotations

import gzip
import os
from typing import Any

import msgspec

from ..detect.analysis import Analysis, RankAnalysis
from ..detect.core.encode import to_data
from ..detect.core.view import views_of
from ..detect.detectors.idle import gap_host_activity
from ..detect.verdict.critical_path import KINDS, critical_path
from ..errors import TraceError
from ..outputs import write_atomically
from ..trace import kineto, reading
from ..trace.model import Trace

CATEGORY = "traceagent"
FINDINGS_PID = 10_000_000  # above any real pid: the findings' own process
EVIDENCE_GAPS = 50  # the largest gaps carry what the launching thread was doing (it costs a lookup each)
# track ids inside the findings process
VERDICT, STEPS, CRITICAL_PATH, GAPS, EXPOSED_COMM, HOT = 0, 1, 2, 100, 200, 300


def annotate(analysis: Analysis, source: str, out: str | os.PathLike[str], max_bytes: int | None = None) -> int:
    """Write the trace file `source` (the one `analysis` is of) with the findings added to `out`,
    whole or not at all; returns how many finding events it added. A Kineto trace's own events
    pass through as they are, repaired where the analysis repaired them (a file cut short, NaN)."""
    ranks = analysis.ranks
    if len({r.meta.path for r in ranks}) > 1:
        raise TraceError(analysis.path, "annotate takes one trace file, not a directory of ranks",
                         "Annotate each rank's file on its own.")
    findings = [e for i, r in enumerate(ranks) for e in finding_events(r, FINDINGS_PID + i)]
    if analysis.format == "kineto":
        text = _with_events(source, findings, max_bytes)
    else:  # Nsight: its device activity as Chrome-trace events
        doc = {"schemaVersion": 1, "traceEvents": [e for r in ranks for e in device_events(r.trace)] + findings,
               "deviceProperties": [{"id": d, "name": n} for d, n in ranks[0].meta.devices.items()]}
        text = msgspec.json.encode(doc)
    write_atomically(out, gzip.compress(text, compresslevel=6) if os.fspath(out).endswith(".gz") else text)
    return len(findings)


def _with_events(source: str, events: list[dict[str, Any]], max_bytes: int | None) -> bytes:
    """The trace's JSON with `events` appended to its traceEvents: every other key and event kept
    as raw text (nothing is decoded into Python objects, and nothing is re-encoded differently)."""
    raw, _ = reading.read_text(source, max_bytes)
    _, text, _ = kineto.repaired(raw, source)
    del raw
    if text.lstrip()[:1] == b"[":  # the bare-array form
        return msgspec.json.encode([*msgspec.json.decode(text, type=list[msgspec.Raw]), *events])
    top: dict[str, Any] = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    top["traceEvents"] = [*msgspec.json.decode(top.get("traceEvents", b"[]"), type=list[msgspec.Raw]), *events]
    return msgspec.json.encode(top)


def finding_events(r: RankAnalysis, pid: int) -> list[dict[str, Any]]:
    """The findings of one rank as Chrome-trace events (ts and dur in µs on the trace clock)."""
    trace = r.trace
    name = "traceagent findings" + (f" ({len(trace.meta.devices)} GPUs)" if len(trace.meta.devices) > 1 else "")
    events = [_meta(pid, "process_name", name), _meta(pid, "process_sort_index", -1, key="sort_index")]
    tracks = {VERDICT: "verdict", STEPS: "steps"}
    span = trace.span_ns()
    origin = span[0] if span else trace.origin_ns()
    v = r.verdict
    events.append({"ph": "i", "s": "p", "cat": CATEGORY, "name": f"verdict: {v.headline}", "pid": pid, "tid": VERDICT,
                   "ts": origin / 1000, "args": {"limiter": v.limiter, "root_cause": v.root_cause,
                                                 "next_step": v.next_step}})
    gaps = r.gaps
    if len(gaps):
        largest = set(gaps.nlargest(EVIDENCE_GAPS, "dur").index)
        for g in gaps.itertuples():
            args = {"cause": g.cause, "device": int(g.device), "gap_us": g.dur / 1000}
            if g.Index in largest and g.cause != "launch_latency":
                args |= to_data(gap_host_activity(trace, g))
            events.append(_slice(pid, GAPS + int(g.device), g.cause, int(g.start), int(g.dur), args))
            tracks[GAPS + int(g.device)] = f"idle gaps · GPU {int(g.device)}"
    for s in trace.steps.dropna(subset=["gpu_start"]).itertuples():
        events.append(_slice(pid, STEPS, f"step {s.step}", int(s.gpu_start), int(s.gpu_end - s.gpu_start),
                             {"step": int(s.step), "host_us": (s.end - s.start) / 1000}))
    for view in views_of(trace):
        starts, ends = view.exposed_comm
        if len(starts):
            tracks[EXPOSED_COMM + view.device] = f"exposed communication · GPU {view.device}"
        events += [_slice(pid, EXPOSED_COMM + view.device, "exposed communication", int(a), int(b - a), {})
                   for a, b in zip(starts, ends)]
    kernels = trace.gpu[trace.gpu["kind"] == "kernel"]
    for rank_in_top, k in enumerate(r.findings.kernels.top[:5]):
        mine = kernels[kernels["name"] == k.name]
        longest = mine.assign(dur=mine["end"] - mine["start"]).nlargest(3, "dur")
        for row in longest.itertuples():
            tracks[HOT + int(row.device)] = f"hot kernels' longest · GPU {int(row.device)}"
            events.append(_slice(pid, HOT + int(row.device), k.short_name, int(row.start), int(row.dur),
                                 {"kernel": k.name, "rank_by_time": rank_in_top + 1, "total_us": k.total_us,
                                  "share_of_busy_pct": k.share_of_busy_pct}))
    path = critical_path(trace)
    if path is not None:  # the chain that sets the rank's length: device work, host calls, host work, waits
        tracks[CRITICAL_PATH] = "critical path"
        events += [_slice(pid, CRITICAL_PATH, name or KINDS[kind], int(a), int(b - a), {"kind": KINDS[kind]})
                   for kind, a, b, name in zip(path.kind.tolist(), path.start.tolist(), path.end.tolist(),
                                               path.names()) if b > a]
    events += [_meta(pid, "thread_name", label, tid=tid) for tid, label in tracks.items()]
    return events


def device_events(trace: Trace) -> list[dict[str, Any]]:
    """Device activity as Kineto-style events (what an Nsight export holds on the GPU)."""
    gpu = trace.gpu[trace.gpu["kind"] != "sync"]
    cats = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
    events = []
    for g in gpu.itertuples():
        name = str(g.name)
        if g.kind == "memcpy":
            name = f"Memcpy {g.copy_kind} ({str(g.src_kind).capitalize()} -> {str(g.dst_kind).capitalize()})"
        args = {"device": int(g.device), "stream": int(g.stream), "correlation": int(g.correlation)}
        if g.kind != "kernel":
            args["bytes"] = int(g.bytes)
        events.append({"ph": "X", "cat": cats[str(g.kind)], "name": name, "pid": int(g.device),
                       "tid": f"stream {int(g.stream)}", "ts": int(g.start) / 1000, "dur": int(g.end - g.start) / 1000,
                       "args": args})
    return events


def _slice(pid: int, tid: int, name: str, start_ns: int, dur_ns: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": CATEGORY, "name": name, "pid": pid, "tid": tid, "ts": start_ns / 1000,
            "dur": dur_ns / 1000, "args": to_data(args)}


def _meta(pid: int, what: str, value, tid: int = 0, key: str = "name") -> dict[str, Any]:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {key: value}}
