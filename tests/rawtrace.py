"""An independent reader of Kineto JSON for checking detectors: the standard `json` module and
plain Python over the raw events, sharing no code with traceagent. Slow, simple, and small
traces only; it states each definition the way DESIGN.md does."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import re
from pathlib import Path

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
DATALOADER = re.compile(r"^enumerate\((DataLoader|DataPipe)\)")


def events(path: Path) -> list[dict]:
    """The file's complete events ("X"), read once per version of the file (callers only read them)."""
    stat = path.stat()
    return _events(path, stat.st_size, stat.st_mtime_ns)


@functools.cache
def _events(path: Path, size: int, mtime_ns: int) -> list[dict]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return [e for e in json.loads(raw)["traceEvents"] if e.get("ph") == "X"]


def _ns(us: float) -> int:
    return round(us * 1000)


def device_intervals(path: Path) -> dict[int, list[tuple[int, int]]]:
    """Kernel, copy and memset intervals in ns, per device."""
    out: dict[int, list[tuple[int, int]]] = {}
    for e in events(path):
        if e.get("cat") in DEVICE_CATS:
            device = int(e.get("args", {}).get("device", 0))
            out.setdefault(device, []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    return out


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def gaps(busy: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(a[1], b[0]) for a, b in itertools.pairwise(busy) if b[0] > a[1]]


def covered(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def dataloader_idle_ns(path: Path, launch_gap_us: float = 10.0, loader_cover: float = 0.5) -> int:
    """Idle time put down to data loading: gaps of at least launch_gap_us that the host's
    `enumerate(DataLoader)…` events cover for at least loader_cover of their length (the first
    rule of the cause precedence). One device."""
    (device,) = device_intervals(path).values()
    loader = union([(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events(path)
                    if DATALOADER.match(e.get("name", "")) and e.get("cat") not in DEVICE_CATS])
    total = 0
    for lo, hi in gaps(union(device)):
        if hi - lo >= launch_gap_us * 1000 and covered(loader, lo, hi) >= loader_cover * (hi - lo):
            total += hi - lo
    return total


def collective_ns(path: Path) -> int:
    """Union of NCCL kernel time over the trace's devices (per device, then summed)."""
    per_device: dict[int, list[tuple[int, int]]] = {}
    for e in events(path):
        if e.get("cat") in DEVICE_CATS and e.get("name", "").startswith("nccl"):
            device = int(e.get("args", {}).get("device", 0))
            per_device.setdefault(device, []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    return sum(length(union(v)) for v in per_device.values())


def collective_waiting(files: dict[int, Path], tolerance_ns: int = 5000) -> dict:
    """Waiting inside matched collectives, per rank: the k-th NCCL kernel of each name on every
    rank is one collective; each rank's clock is shifted by the median difference of its end times
    from the first rank's; a rank waits from its entry until the last rank's entry (at most the
    kernel's length); a rank is last when it enters more than `tolerance_ns` after the next."""
    per_rank = {}
    for rank, path in files.items():
        kernels = sorted((e for e in events(path) if e.get("cat") in DEVICE_CATS and e.get("name", "").startswith("nccl")),
                         key=lambda e: e["ts"])
        seen: dict[str, int] = {}
        table = {}
        for e in kernels:
            nth = seen.get(e["name"], 0)
            seen[e["name"]] = nth + 1
            table[(e["name"], nth)] = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        per_rank[rank] = table
    ranks = sorted(per_rank)
    keys = sorted(set.intersection(*(set(t) for t in per_rank.values())))
    first = ranks[0]
    offset = {}
    for rank in ranks:
        diffs = sorted(per_rank[rank][k][1] - per_rank[first][k][1] for k in keys)
        mid = len(diffs) // 2
        offset[rank] = int(diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2)
    waiting = {rank: 0 for rank in ranks}
    last = {rank: 0 for rank in ranks}
    caused = {rank: 0.0 for rank in ranks}
    for k in keys:
        entry = {rank: per_rank[rank][k][0] - offset[rank] for rank in ranks}
        latest = max(entry.values())
        waited = {}
        for rank in ranks:
            start, end = per_rank[rank][k]
            waited[rank] = min(max(latest - entry[rank], 0), end - start)
            waiting[rank] += waited[rank]
        ordered = sorted(entry.values())
        if ordered[-1] - ordered[-2] > tolerance_ns:
            last[max(entry, key=entry.get)] += 1
        # the waiting each rank causes: each stretch between two entries, waited by the ranks already
        # in, shared equally by the ranks not yet in; scaled to the waiting the ranks report (cut at
        # their kernels' lengths)
        apart = sum(latest - entry[rank] for rank in ranks)
        scale = sum(waited.values()) / apart if apart else 0.0
        arrivals = sorted(ranks, key=lambda r: entry[r])
        for k in range(1, len(arrivals)):
            stretch = entry[arrivals[k]] - entry[arrivals[k - 1]]
            for late in arrivals[k:]:
                caused[late] += k * stretch / (len(arrivals) - k) * scale
    return {"matched": len(keys), "waiting_us": {r: w / 1000 for r, w in waiting.items()}, "last": last,
            "caused_us": {r: c / 1000 for r, c in caused.items()}}
