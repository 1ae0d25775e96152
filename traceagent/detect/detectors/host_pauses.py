"""Host pauses: idle GPU time while the host was in Python's garbage collector or importing modules.

Both hold the GIL, so whichever Python thread runs them, the thread that launches GPU work waits:
a `gc.collect()` in the loop, or a module imported lazily on the first step (or every step, when
an import sits inside a function), shows up as idle device time whose innermost frame is the
collector or importlib. Read from Python frames (`with_stack=True`); a trace without them cannot
say, and the result is None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import counted
from ...trace.model import Trace, matches
from ..core import intervals as iv
from ..core.bounds import Micros
from ..core.view import pct, us
from .base import Detector

#: what each pause looks like in the Python frames PyTorch's profiler records
PAUSES = {
    "gc": re.compile(r"^<built-in function collect>$|\bgc\.collect\b"),
    "import": re.compile(r"^<frozen importlib\._bootstrap(?:_external)?>\(\d+\): _(?:find_and_load|load_unlocked)\b"
                         r"|importlib/__init__\.py\(\d+\): import_module\b"),
}
ADVICE = {
    "gc": "call gc.freeze() once the model is built, and gc.collect() between epochs rather than in the step "
          "(or gc.disable() around the step loop)",
    "import": "import the module once at start-up, not inside a function the step calls",
}


@dataclass(frozen=True)
class HostPausesParams:
    """min_idle_us: a kind of pause is reported when the idle device time under it reaches this."""

    min_idle_us: Micros = 100.0


@dataclass(frozen=True)
class HostPause:
    kind: str  # gc, import
    pauses: int  # separate stretches of host time in it (nested calls count once)
    host_us: float  # host time in it, any thread
    idle_us: float  # idle device time under it, every device of the rank added up
    share_of_idle_pct: float  # of the rank's idle time (launch latency included)
    next_step: str


@dataclass(frozen=True)
class HostPausesResult:
    pauses: list[HostPause]  # the kinds over min_idle_us, most idle first
    idle_us: float  # under any of them


def detect_host_pauses(trace: Trace, gaps: pd.DataFrame,
                       params: HostPausesParams = HostPausesParams()) -> HostPausesResult | None:
    """None when the trace has no Python frames; else the pauses under idle device time."""
    if not trace.meta.has_python_frames:
        return None
    cpu = trace.cpu
    starts, ends = cpu["start"].to_numpy(np.int64), cpu["end"].to_numpy(np.int64)
    gap_start, gap_end = gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64)
    idle_total = int(gaps["dur"].sum())
    found, under_any = [], []
    for kind, pattern in PAUSES.items():
        rows = matches(cpu["name"], pattern)
        held = iv.union(starts[rows], ends[rows])
        idle = int(iv.covered(held, gap_start, gap_end).sum())
        under_any.append(held)
        if idle and us(idle) >= params.min_idle_us:
            found.append(HostPause(kind, len(held[0]), us(iv.length(held)), us(idle), pct(idle, idle_total),
                                   ADVICE[kind]))
    either = iv.union(np.concatenate([h[0] for h in under_any]), np.concatenate([h[1] for h in under_any]))
    return HostPausesResult(sorted(found, key=lambda p: -p.idle_us),
                            us(iv.covered(either, gap_start, gap_end).sum()))


def host_pauses_sentence(result: HostPausesResult) -> str | None:
    """'the GPU sat idle 12.0 ms (4.1% of idle) while Python collected garbage (3 pauses)…', or None."""
    words = {"gc": "Python collected garbage", "import": "modules were imported"}
    parts = [f"{p.idle_us / 1000:.1f} ms ({p.share_of_idle_pct:.1f}% of idle) while {words[p.kind]} "
             f"({counted(p.pauses, 'pause')}): {p.next_step}"
             for p in result.pauses]
    return f"The GPU sat idle {'; and '.join(parts)}." if parts else None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("host_pauses", "Host pauses", "Idle GPU time while the host was in Python's garbage collector "
                    "(gc.collect) or importing modules: the calls, their host time and the device idle time under them.",
                    HostPausesParams(), HostPausesResult, lambda i, p: detect_host_pauses(i.trace, i["gaps"], p),
                    lambda r, p: host_pauses_sentence(r), reads=("gaps",), since="1.2",
                    needs=("the trace has no Python frames", "profile with torch.profiler.profile(with_stack=True)"))
