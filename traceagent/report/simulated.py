"""`traceagent whatif -o`: the replayed rank written as a Kineto-style trace, so the prediction can
be looked at in Perfetto UI and read back by traceagent (`traceagent diff before.json
simulated.json`). Host calls and device ops take their replayed times; every other host event (ops,
annotations, Python frames, the steps) moves with its thread's timeline."""

from __future__ import annotations

import gzip
import os
from typing import Any

import msgspec
import numpy as np

from ..detect.verdict.whatif import Simulation
from ..outputs import write_atomically
from ..trace.model import Trace, among

_DEVICE_CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
_HOST_CATEGORY = {"runtime": "cuda_runtime", "driver": "cuda_driver", "op": "cpu_op", "annotation": "user_annotation",
                  "python": "python_function", "dataloader": "user_annotation"}


def simulated_events(trace: Trace, simulation: Simulation) -> list[dict[str, Any]]:
    """The rank's events at their replayed times (one event per row: writing is per event by nature)."""
    timeline = simulation.timeline
    g, r = timeline.graph, timeline.replayed
    events: list[dict[str, Any]] = []
    ops = g.ops
    for row, start, end in zip(ops.itertuples(), (r.d_start + g.origin).tolist(), (r.d_end + g.origin).tolist()):
        name = str(row.name)
        if row.kind == "memcpy":
            name = f"Memcpy {row.copy_kind} ({str(row.src_kind).capitalize()} -> {str(row.dst_kind).capitalize()})"
        args: dict[str, Any] = {"device": int(row.device), "stream": int(row.stream), "correlation": int(row.correlation)}
        if row.kind != "kernel":
            args["bytes"] = int(row.bytes)
        if row.external_id >= 0:
            args["External id"] = int(row.external_id)
        events.append({"ph": "X", "cat": _DEVICE_CATEGORY.get(str(row.kind), "kernel"), "name": name,
                       "pid": int(row.device), "tid": int(row.stream), "ts": start / 1000, "dur": (end - start) / 1000,
                       "args": args})
    calls = g.calls
    for row, start, end in zip(calls.itertuples(), (r.c_start + g.origin).tolist(), (r.c_end + g.origin).tolist()):
        events.append({"ph": "X", "cat": _HOST_CATEGORY[str(row.kind)], "name": str(row.name), "pid": int(row.pid),
                       "tid": int(row.tid), "ts": start / 1000, "dur": (end - start) / 1000,
                       "args": {"correlation": int(row.correlation)} if row.correlation >= 0 else {}})
    host = trace.cpu[~among(trace.cpu["kind"], ["runtime", "driver"])]
    pid, tid = host["pid"].to_numpy(np.int64), host["tid"].to_numpy(np.int64)
    starts = timeline.host_times(pid, tid, host["start"].to_numpy(np.int64))
    ends = np.maximum(timeline.host_times(pid, tid, host["end"].to_numpy(np.int64)), starts)
    for row, start, end in zip(host.itertuples(), starts.tolist(), ends.tolist()):
        events.append({"ph": "X", "cat": _HOST_CATEGORY.get(str(row.kind), "cpu_op"), "name": str(row.name),
                       "pid": int(row.pid), "tid": int(row.tid), "ts": start / 1000, "dur": (end - start) / 1000,
                       "args": {"External id": int(row.external_id)} if row.external_id >= 0 else {}})
    return events


def write_simulated(trace: Trace, simulation: Simulation, out: str | os.PathLike[str]) -> int:
    """Write the replayed rank to `out` (.json, or .json.gz), whole or not at all; returns its events."""
    events = simulated_events(trace, simulation)
    result = simulation.result
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events,
                           "deviceProperties": [{"id": d, "name": n} for d, n in trace.meta.devices.items()],
                           "traceagent": {"simulated": [c.spec for c in result.changes]}}
    if trace.meta.rank is not None:
        doc["distributedInfo"] = {"rank": trace.meta.rank, "world_size": trace.meta.world_size or 1}
    text = msgspec.json.encode(doc)
    write_atomically(out, gzip.compress(text, compresslevel=6) if os.fspath(out).endswith(".gz") else text)
    return len(events)
