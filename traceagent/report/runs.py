"""`traceagent runs`: the recorded runs as a table, oldest first, and their step time as a chart."""

from __future__ import annotations

import html
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ..format import duration
from ..profile.runs import RunRecord
from ..text import md_literal
from .html import markdown_renderer, page

_BARS = "▁▂▃▄▅▆▇█"


def step_chart(values: list[float | None]) -> str:
    """Step times as one line of bars, the tallest the slowest; a run without steps is a dot."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    scale = (high - low) or 1.0
    return "".join("·" if v is None else _BARS[round((v - low) / scale * (len(_BARS) - 1))] for v in values)


COLUMNS = ("#", "run", "status", "step time", "root cause", "vs the run before", "predicted")


def _cells(i: int, r: RunRecord) -> list[str]:
    """One run's row, as text (the terminal and the page escape it each their way)."""
    faster = "-" if r.faster_pct is None else f"{r.faster_pct:+.1f}%" + (
        "" if r.root_cause_gone is None else ", cause gone" if r.root_cause_gone else ", cause stays")
    return [str(i), r.label or r.script, r.status, duration(r.step_us) if r.step_us is not None else "-",
            r.root_cause or "-", faster, "-" if r.predicted_pct is None else f"{r.predicted_pct:.1f}%"]


def print_runs(found: list[tuple[Path, RunRecord]], console: Console) -> int:
    if not found:
        console.print("No recorded runs here. Record one: traceagent profile -- python train.py", markup=False)
        return 0
    numbers = [Column(h, no_wrap=True) for h in COLUMNS[3:]]
    table = Table(COLUMNS[0], Column(COLUMNS[1], min_width=14, overflow="fold"), COLUMNS[2], *numbers,
                  title=f"{len(found)} run(s) in {escape(str(found[0][0].parent))}; `traceagent runs diff A B` "
                        "compares two (their # or id)")
    for i, (_, r) in enumerate(found, 1):
        table.add_row(*(escape(cell) for cell in _cells(i, r)))
    console.print(table)
    steps = [r.step_us for _, r in found]
    if sum(v is not None for v in steps) > 1:
        console.print(f"step time, run 1 → {len(found)}: {step_chart(steps)}", markup=False)
    return 0


def render_runs_html(found: list[tuple[Path, RunRecord]]) -> str:
    """The runs as a page: a bar of step time per run (its root cause in the tooltip), then the table."""
    known = [r.step_us for _, r in found if r.step_us is not None]
    longest = max(known, default=0.0) or 1.0
    height, bars = 22, []
    for i, (_, r) in enumerate(found):
        y = i * (height + 6)
        label = f"{i + 1}. {r.label or r.script}"
        bars.append(f'<text x="0" y="{y + 15}" font-size="12">{html.escape(label[:40])}</text>')
        if r.step_us is not None:
            w = 600 * r.step_us / longest
            tip = f"{r.id}: {duration(r.step_us)} a step; {r.root_cause or 'no root cause'}"
            bars.append(f'<rect x="280" y="{y}" width="{w:.1f}" height="{height}" fill="#4c78a8">'
                        f'<title>{html.escape(tip)}</title></rect>'
                        f'<text x="{286 + w:.1f}" y="{y + 15}" font-size="12">{duration(r.step_us)}</text>')
    chart = (f'<figure><figcaption>Step time, run by run</figcaption><svg width="960" '
             f'height="{len(found) * (height + 6)}" xmlns="http://www.w3.org/2000/svg">{"".join(bars)}</svg></figure>')
    rows = ["| " + " | ".join((*COLUMNS, "what it tried")) + " |", "|" + " --- |" * (len(COLUMNS) + 1)]
    rows += ["| " + " | ".join(md_literal(cell) for cell in (*_cells(i, r), ", ".join(r.tried) or "-")) + " |"
             for i, (_, r) in enumerate(found, 1)]
    body = markdown_renderer().render("# traceagent runs\n\n" + "\n".join(rows) + "\n")
    return page("traceagent runs", f"{chart}\n{body}")
