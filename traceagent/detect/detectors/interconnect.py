"""The links copies cross: each copy kind's achieved bandwidth against its link's peak (HtoD and
DtoH: the GPU's host link, PCIe or NVLink-C2C; PtoP: the GPU-to-GPU link), and, where an Nsight
Systems export carries GPU metrics, what the hardware measured: PCIe and NVLink throughput during
the copies and the collectives, SM and tensor-core activity during the hot kernels.

A GPU metric sample is the unit's mean over its sampling period, which ends at its timestamp
(Nsight's convention); a window's figure is the samples' mean weighted by how much of each period
the window covers. PCIe RX is data the GPU receives (HtoD), TX what it sends (DtoH).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import percent, rate
from ...trace.model import GPU_METRICS, Trace
from ..core import intervals as iv
from ..core.bounds import Count, Percent
from ..core.links import Link, host_link, link_for
from ..core.view import device_time_ns, pct, us, views_of
from .base import Detector
from .kernels import short_name
from .memcpy import MemcpyResult

#: a copy kind → (the GPU metric of its link and direction, the words for it)
COPY_METRIC = {"HtoD": "pcie_rx_pct", "DtoH": "pcie_tx_pct", "PtoP": "nvlink_tx_pct"}
#: what each window reports, of GPU_METRICS
WINDOW_METRICS = {
    "copies": ("pcie_rx_pct", "pcie_tx_pct", "nvlink_rx_pct", "nvlink_tx_pct"),
    "collectives": ("nvlink_rx_pct", "nvlink_tx_pct", "pcie_rx_pct", "pcie_tx_pct", "sm_active_pct"),
    "kernel": ("sm_active_pct", "tensor_active_pct", "dram_read_pct", "dram_write_pct"),
    "trace": tuple(GPU_METRICS),
}


@dataclass(frozen=True)
class InterconnectParams:
    """slow_link_pct: copies under this share of their link's peak get a next step, if their
    exposed time is at least worth_pct of device time (a slow copy that costs nothing is not worth
    a change); hot_kernels: how many of a GPU's hottest kernels get their SM and tensor activity measured."""

    slow_link_pct: Percent = 25.0
    worth_pct: Percent = 1.0
    hot_kernels: Count = 3


@dataclass(frozen=True)
class CopyLink:
    """One kind of copy on the rank against the link it crosses."""

    kind: str  # HtoD, DtoH, PtoP
    count: int
    bytes: int
    gbps: float  # achieved: bytes over the copies' summed time (as in data movement)
    peak_pct: float  # of the link's peak, per direction
    link: int  # index into InterconnectResult.links
    pageable_pct: float  # of the bytes, to or from pageable host memory
    measured_pct: float | None  # the link's GPU metric in this direction during the copies; None without GPU metrics
    next_step: str | None


@dataclass(frozen=True)
class MetricWindow:
    """The GPU metrics over one kind of activity on one GPU."""

    device: int
    during: str  # "HtoD copies", "collectives", "kernel NAME", "the whole trace"
    covered_us: float  # time of the activity that sampled periods cover
    values: dict[str, float]  # GPU_METRICS key → time-weighted mean, % of the unit's peak


@dataclass(frozen=True)
class InterconnectResult:
    copies: list[CopyLink]
    links: list[Link]  # each with its source and the assumption that chose it
    windows: list[MetricWindow]  # empty without GPU metrics
    metric_samples: int  # GPU metric samples read (0: the trace has none)


def detect_interconnect(trace: Trace, copies: MemcpyResult,
                        params: InterconnectParams = InterconnectParams()) -> InterconnectResult | None:
    """None when the rank has no copies across a link and no GPU metrics."""
    crossing = {k: c for k, c in copies.by_kind.items() if k in COPY_METRIC}
    if not crossing and trace.metrics.empty:
        return None
    device_name = next(iter(trace.meta.devices.values()), "")
    links: list[Link] = []
    rows = []
    samples = _samples(trace)
    whole_us = us(device_time_ns(views_of(trace)))
    held = {kind: _copy_intervals(trace, kind) for kind in COPY_METRIC} if samples else {}  # read by both below
    for kind, c in crossing.items():
        link = host_link(device_name) if kind != "PtoP" else link_for(device_name, None, 2)
        if link not in links:
            links.append(link)
        share = pct(c.gbps, link.peak_gbps)
        pageable = pct(c.pageable_bytes, c.bytes)
        measured = _window_mean(samples, held[kind], COPY_METRIC[kind]) if samples else None
        step = None
        if share < params.slow_link_pct and pct(c.exposed_us, whole_us) >= params.worth_pct:
            step = ("pin the host memory (DataLoader(pin_memory=True), tensor.pin_memory()) and copy with "
                    "non_blocking=True: pageable copies are staged through a bounce buffer" if pageable >= 50.0 else
                    "copy fewer, larger buffers: small copies are dominated by their fixed cost")
        rows.append(CopyLink(kind, c.count, c.bytes, c.gbps, share, links.index(link), pageable,
                             measured[1] if measured else None, step))
    return InterconnectResult(rows, links, _windows(trace, samples, held, params) if samples else [],
                              len(trace.metrics))


#: (device, metric) → (period starts, period ends, values), sorted by time
_Samples = dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _samples(trace: Trace) -> _Samples:
    out: _Samples = {}
    for (device, metric), rows in trace.metrics.groupby(["device", "metric"], observed=True, sort=True):
        ends = rows["time"].to_numpy(np.int64)
        if len(ends) < 2:
            continue
        # each sample covers the period since the one before; the first, a period as long as the next
        starts = np.concatenate([[ends[0] - (ends[1] - ends[0])], ends[:-1]])
        out[int(device), str(metric)] = (starts, ends, rows["value"].to_numpy(np.float64))
    return out


def _copy_intervals(trace: Trace, kind: str) -> dict[int, iv.Intervals]:
    """Each device's copies of one kind, as an interval union."""
    rows = trace.gpu[(trace.gpu["kind"] == "memcpy").to_numpy() & (trace.gpu["copy_kind"] == kind).to_numpy()]
    return {int(d): iv.union(r["start"].to_numpy(np.int64), r["end"].to_numpy(np.int64))
            for d, r in rows.groupby("device", sort=True)}


def _window_mean(samples: _Samples, held: dict[int, iv.Intervals], metric: str) -> tuple[float, float] | None:
    """(covered ns, the metric's weighted mean) over intervals on each device, or None when no
    sample period covers them."""
    weight = total = 0.0
    for device, union in held.items():
        if (found := samples.get((device, metric))) is None:
            continue
        starts, ends, values = found
        covered = iv.covered(union, starts, ends).astype(np.float64)
        weight += covered.sum()
        total += float((covered * values).sum())
    return (float(weight), round(float(total / weight), 2)) if weight else None


def _windows(trace: Trace, samples: _Samples, copies: dict[str, dict[int, iv.Intervals]],
             params: InterconnectParams) -> list[MetricWindow]:
    out = []
    for view in views_of(trace):
        device = view.device
        kernels = view.work[(view.work["kind"] == "kernel").to_numpy() & ~view.work["is_comm"].to_numpy()]
        hot = (kernels.assign(dur=kernels["end"] - kernels["start"]).groupby("name", observed=True)["dur"].sum()
               .nlargest(params.hot_kernels).index)
        activity: list[tuple[str, str, iv.Intervals]] = [
            *((f"{kind} copies", "copies", copies[kind][device]) for kind in COPY_METRIC if device in copies[kind]),
            ("collectives", "collectives", view.comm),
            *((f"kernel {short_name(str(name))}", "kernel", _of(kernels[kernels["name"] == name])) for name in hot),
            ("the whole trace", "trace", iv.union(np.array([view.span[0]]), np.array([view.span[1]]))),
        ]
        for during, what, held in activity:
            values = {}
            covered = 0.0
            for metric in WINDOW_METRICS[what]:
                if (found := _window_mean(samples, {device: held}, metric)) is not None:
                    covered = max(covered, found[0])
                    values[metric] = found[1]
            if values:
                out.append(MetricWindow(device, during, us(covered), values))
    return out


def _of(rows: pd.DataFrame) -> iv.Intervals:
    return iv.union(rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64))


def interconnect_sentence(result: InterconnectResult) -> str | None:
    """'HtoD copies ran at 3.1 GB/s, 9.8% of PCIe Gen4 x16's 31.5 GB/s (assumed: …), 92% of their
    bytes pageable; PCIe RX measured 11% during them. Next: pin…'"""
    parts = []
    for c in result.copies:
        link = result.links[c.link]
        measured = (f"; {GPU_METRICS[COPY_METRIC[c.kind]]} measured {percent(c.measured_pct)} of peak during them"
                    if c.measured_pct is not None else "")
        parts.append(f"{c.kind} copies ran at {rate(c.gbps)}, {percent(c.peak_pct)} of {link.kind}'s "
                     f"{link.peak_gbps:g} GB/s (assumed: {link.assumption}), {percent(c.pageable_pct)} of their bytes "
                     f"pageable{measured}" + (f". Next: {c.next_step}" if c.next_step else ""))
    for w in result.windows:
        if w.during == "collectives" or w.during.startswith("kernel "):
            shown = ", ".join(f"{GPU_METRICS[k]} {percent(v)}" for k, v in w.values.items())
            parts.append(f"During {w.during} on GPU {w.device} the GPU metrics read: {shown}")
    return ". ".join(parts) + "." if parts else None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("interconnect", "Links", "Each copy kind's achieved bandwidth against its link's peak (HtoD/DtoH: the "
                    "host link, PCIe or NVLink-C2C; PtoP: NVLink), with the assumption; and, from Nsight Systems GPU "
                    "metrics, PCIe and NVLink throughput measured during copies and collectives and SM and tensor-core "
                    "activity during the hot kernels, per GPU.",
                    InterconnectParams(), InterconnectResult, lambda i, p: detect_interconnect(i.trace, i["memcpy"], p),
                    lambda r, p: interconnect_sentence(r), reads=("memcpy",), since="1.4",
                    needs=("the trace has no copies between host and device or between GPUs, and no GPU metrics",
                           "for link utilisation, profile with nsys --gpu-metrics-devices=all and export to SQLite"))
