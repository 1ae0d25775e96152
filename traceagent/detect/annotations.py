"""User annotations (record_function, NVTX ranges): how much GPU work each named range launched."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .host import calls_by_correlation
from .view import on_device


def launched_gpu_ns(trace: Trace, ranges: pd.DataFrame, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each host range (rows with tid, start, end): the device ns and the number of the
    kernels whose launch call lies inside it on its thread (on every GPU, or one)."""
    gpu_ns = np.zeros(len(ranges))
    count = np.zeros(len(ranges))
    if ranges.empty:
        return gpu_ns, count
    calls = calls_by_correlation(trace).reset_index()
    kernels = on_device(trace.gpu[trace.gpu["kind"] == "kernel"], device)
    launched = kernels[["correlation", "start", "end"]].merge(calls[["correlation", "start", "tid"]],
                                                               on="correlation", suffixes=("", "_call"))
    for tid, group in launched.groupby("tid"):  # one pass per launching thread, not per range
        order = np.argsort(group["start_call"].to_numpy())
        at = group["start_call"].to_numpy()[order]
        cum = np.concatenate([[0], np.cumsum((group["end"] - group["start"]).to_numpy()[order])])
        mine = (ranges["tid"] == tid).to_numpy()
        lo = np.searchsorted(at, ranges["start"].to_numpy()[mine], side="left")
        hi = np.searchsorted(at, ranges["end"].to_numpy()[mine], side="right")
        gpu_ns[mine] += cum[hi] - cum[lo]
        count[mine] += hi - lo
    return gpu_ns, count


def annotation_table(trace: Trace, device: int | None = None) -> pd.DataFrame:
    """Per annotation name: instances, host ns, and the GPU µs and count of the kernels launched
    inside it on its thread (on every GPU, or one)."""
    cpu = trace.cpu
    ranges = cpu[cpu["kind"] == "annotation"]
    columns = ["name", "count", "host_ns", "gpu_us", "kernels"]
    if ranges.empty:
        return pd.DataFrame(columns=columns)
    gpu_ns, count = launched_gpu_ns(trace, ranges, device)
    frame = pd.DataFrame({"name": ranges["name"].astype(str).to_numpy(),
                          "host_ns": (ranges["end"] - ranges["start"]).to_numpy(), "gpu_ns": gpu_ns, "kernels": count})
    grouped = frame.groupby("name").agg(count=("host_ns", "size"), host_ns=("host_ns", "sum"), gpu_ns=("gpu_ns", "sum"),
                                        kernels=("kernels", "sum")).reset_index()
    return grouped.assign(gpu_us=grouped["gpu_ns"] / 1000.0)[columns]
