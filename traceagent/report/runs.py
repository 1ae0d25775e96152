"""`traceagent runs`: the recorded runs as a table, oldest first, and their step time as a chart."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ..format import duration
from ..profile.runs import RunRecord

_BARS = "▁▂▃▄▅▆▇█"


def step_chart(values: list[float | None]) -> str:
    """Step times as one line of bars, the tallest the slowest; a run without steps is a dot."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    scale = (high - low) or 1.0
    return "".join("·" if v is None else _BARS[round((v - low) / scale * (len(_BARS) - 1))] for v in values)


def print_runs(found: list[tuple[Path, RunRecord]], console: Console) -> int:
    if not found:
        console.print("No recorded runs here. Record one: traceagent profile -- python train.py", markup=False)
        return 0
    numbers = [Column(h, no_wrap=True) for h in ("step time", "root cause", "vs the run before", "predicted")]
    table = Table("#", Column("run", min_width=14, overflow="fold"), "status", *numbers,
                  title=f"{len(found)} run(s) in {escape(str(found[0][0].parent))}; `traceagent runs diff A B` "
                        "compares two (their # or id)")
    for i, (_, r) in enumerate(found, 1):
        faster = "-" if r.faster_pct is None else f"{r.faster_pct:+.1f}%" + (
            "" if r.root_cause_gone is None else ", cause gone" if r.root_cause_gone else ", cause stays")
        table.add_row(str(i), escape(r.label or r.script), r.status, duration(r.step_us) if r.step_us is not None else "-",
                      r.root_cause or "-", faster, "-" if r.predicted_pct is None else f"{r.predicted_pct:.1f}%")
    console.print(table)
    steps = [r.step_us for _, r in found]
    if sum(v is not None for v in steps) > 1:
        console.print(f"step time, run 1 → {len(found)}: {step_chart(steps)}", markup=False)
    return 0
