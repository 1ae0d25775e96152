"""Each detector's time and memory, for the benchmark (tools/bench.py): off unless asked for, so
the analysis itself carries no clock readings and stays the same run after run."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Costs:
    """By detector (summed over ranks and GPUs): seconds spent in it, and how far it raised the
    process's peak memory (MB; 0 for a detector that stayed under the peak set before it)."""

    seconds: dict[str, float] = field(default_factory=dict)
    raised_peak_mb: dict[str, float] = field(default_factory=dict)


_collected: Costs | None = None  # while collect() runs


@contextmanager
def collect() -> Iterator[Costs]:
    """The costs of each detector run during the block."""
    global _collected
    outer, _collected = _collected, Costs()
    try:
        yield _collected
    finally:
        _collected = outer


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MB (Linux reports KiB, macOS bytes; Windows,
    which has no `resource`, 0)."""
    try:
        import resource
    except ImportError:
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def timed(name: str, run: Callable[[], T]) -> T:
    """`run()`, its time and its rise of the peak memory added to `name`'s while collect() is on."""
    costs = _collected
    if costs is None:
        return run()
    started, peak_before = time.perf_counter(), peak_rss_mb()
    try:
        return run()
    finally:
        costs.seconds[name] = costs.seconds.get(name, 0.0) + time.perf_counter() - started
        costs.raised_peak_mb[name] = costs.raised_peak_mb.get(name, 0.0) + peak_rss_mb() - peak_before
