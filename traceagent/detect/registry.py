"""The registered detectors: every module of detect/detectors/ that defines a `DETECTOR`
(detectors/base.py says what one declares). analyze_trace runs them all; the JSON, the JSON
Schema, the reports' further findings, the chat app's side panel, the agent's tools and the offline
analyst's answers iterate over DETECTORS. Adding a detector is its module and its tests. The
detectors the verdict is drawn from (idle, copies, communication, kernels, launches, steps), and
FLOPs, memory, graphs and annotations, are still wired in analysis.py.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import partial
from typing import Any

from .core.timing import timed
from .detectors.base import Detector, Inputs

__all__ = ["DETECTORS", "Detector", "Inputs", "run_all"]


def _discovered() -> tuple[Detector, ...]:
    """Each detectors/ module's DETECTOR, by the schema version that added it, then by name."""
    from . import detectors

    found = []
    for module in pkgutil.iter_modules(detectors.__path__):
        detector = getattr(importlib.import_module(f"{detectors.__name__}.{module.name}"), "DETECTOR", None)
        if isinstance(detector, Detector):
            found.append(detector)
    return tuple(sorted(found, key=lambda d: (tuple(map(int, d.since.split("."))), d.name)))


DETECTORS: tuple[Detector, ...] = _discovered()


def run_all(inputs: Inputs, params: dict[str, Any]) -> dict[str, Any]:
    """Every registered detector's result (None where the trace cannot say), by name; `params`
    holds each one's parameters by name (the default where absent)."""
    return {d.name: timed(d.name, partial(d.run, inputs, params.get(d.name, d.params))) for d in DETECTORS}
