"""The detectors: every `Detector` defined at the top of a module of detect/detectors/ or
detect/verdict/ (detectors/base.py says what one declares). `run_all` runs them all on a rank, each
after the detectors it reads; `analyze --json`, its JSON Schema, the reports, the chat app's side
panel, the agent's tools and the offline analyst's answers iterate over DETECTORS. Adding a detector
is its module and its test."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import partial
from typing import Any

from ..trace.heap import return_freed_memory
from ..trace.model import Trace
from .core.timing import timed
from .detectors.base import Detector, Inputs, Key

__all__ = ["DETECTORS", "Detector", "Inputs", "Key", "run_all"]


def _version(detector: Detector) -> tuple[int, ...]:
    return tuple(map(int, detector.since.split(".")))


def _discovered() -> tuple[Detector, ...]:
    """Each Detector defined in a module of detectors/ or verdict/, by place, the schema version
    that added it, then name."""
    from . import detectors, verdict

    found: dict[str, Detector] = {}
    for package in (detectors, verdict):
        for module in pkgutil.iter_modules(package.__path__):
            loaded = importlib.import_module(f"{package.__name__}.{module.name}")
            for value in vars(loaded).values():
                if isinstance(value, Detector) and found.setdefault(value.name, value) is not value:
                    raise TypeError(f"two detectors are named {value.name!r}: names are keys, one each")
    return tuple(sorted(found.values(), key=lambda d: (d.place, _version(d), d.name)))


def _in_order(detectors: tuple[Detector, ...]) -> tuple[Detector, ...]:
    """The detectors ordered so that each runs after those it reads, otherwise as listed; TypeError
    naming a read nothing provides, or a cycle."""
    names = {d.name for d in detectors}
    for d in detectors:
        if unknown := [r for r in d.reads if r not in names]:
            raise TypeError(f"detector {d.name!r} reads {', '.join(map(repr, unknown))}, which no detector provides")
    done: list[Detector] = []
    ran: set[str] = set()
    waiting = list(detectors)
    while waiting:
        ready = next((d for d in waiting if ran.issuperset(d.reads)), None)
        if ready is None:
            raise TypeError(f"detectors read each other in a cycle: {', '.join(d.name for d in waiting)}")
        done.append(ready)
        ran.add(ready.name)
        waiting.remove(ready)
    return tuple(done)


DETECTORS: tuple[Detector, ...] = _discovered()
RUN_ORDER: tuple[Detector, ...] = _in_order(DETECTORS)


def run_all(trace: Trace, params_of: Callable[[Detector], Any]) -> dict[str, Any]:
    """Every detector's result on one rank (None where the trace cannot say), by name, each run
    after those it reads with the parameters `params_of` gives it."""
    results: dict[str, Any] = {}
    for d in RUN_ORDER:
        inputs = Inputs(trace, {name: results[name] for name in d.reads}, d.name)
        results[d.name] = timed(d.name, partial(d.run, inputs, params_of(d)))
        if d.frees:
            return_freed_memory()  # what its work freed is room the next one needs
    return results
