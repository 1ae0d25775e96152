"""Each detector's time, for the benchmark (tools/bench.py --detectors): off unless asked for, so
the analysis itself carries no clock readings and stays the same run after run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

_collected: dict[str, float] | None = None  # seconds by detector, while collect() runs


@contextmanager
def collect() -> Iterator[dict[str, float]]:
    """Seconds spent in each detector during the block, by name (summed over ranks and GPUs)."""
    global _collected
    outer, _collected = _collected, {}
    try:
        yield _collected
    finally:
        _collected = outer


def timed(name: str, run: Callable[[], T]) -> T:
    """`run()`, its time added to `name`'s while collect() is on."""
    if _collected is None:
        return run()
    started = time.perf_counter()
    try:
        return run()
    finally:
        _collected[name] = _collected.get(name, 0.0) + time.perf_counter() - started
