"""`traceagent scaling` in the terminal: the verdict in a sentence, the runs, where efficiency went,
the communication model and the projections."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ..detect.compare.scaling import PARTS, ScalingResult
from ..format import duration


def print_scaling(result: ScalingResult, console: Console) -> None:
    console.print(f"[bold]{escape(result.sentence)}[/]")
    console.print(f"{result.mode.capitalize()} scaling: {escape(result.mode_reason)}.", markup=False)
    runs = Table("GPUs", "run", *(Column(h, justify="right") for h in ("step", "speedup", "efficiency")),
                 *(Column(PARTS[p].split(" (")[0], justify="right") for p in PARTS),
                 title="Per run, per step (mean over ranks)")
    for r in result.runs:
        runs.add_row(str(r.world_size), escape(r.path), duration(r.step_us), f"{r.speedup_x:.2f}×",
                     f"{r.efficiency_pct:.1f}%", *(duration(r.parts_us[p]) for p in PARTS))
    console.print(runs)
    lost = Table("GPUs", *(Column(PARTS[p].split(" (")[0], justify="right") for p in PARTS),
                 title=f"Efficiency lost against {result.runs[0].world_size} GPU(s): points (µs per step)")
    for r in result.runs[1:]:
        by_part = {loss.part: loss for loss in r.losses}
        lost.add_row(str(r.world_size), *(f"{by_part[p].points:+.1f} ({by_part[p].per_step_us:+.0f})" for p in PARTS))
    console.print(lost)
    if result.fits:
        fits = Table("collective", "link", *(Column(h, justify="right") for h in
                                            ("latency", "bus bandwidth", "error", "calls", "latency-bound below")),
                     title="Communication model: time = latency + bus bytes / bandwidth")
        for f in result.fits:
            fits.add_row(f.kind, f.link, duration(f.latency_us), f"{f.busbw_gbps:.1f} GB/s", f"{f.error_pct:.1f}%",
                         str(f.calls), f"{f.crossover_bytes / 1e6:.2f} MB")
        console.print(fits)
    if result.projections:
        table = Table("GPUs", *(Column(h, justify="right") for h in ("step", "range", "speedup", "efficiency",
                                                                     "communication")), title="Projected")
        for p in result.projections:
            table.add_row(str(p.world_size), duration(p.step_us), f"{duration(p.low_us)} – {duration(p.high_us)}",
                          f"{p.speedup_x:.2f}×", f"{p.efficiency_pct:.1f}%", f"{p.communication_share_pct:.0f}%")
        console.print(table)
    for note in result.assumptions:
        console.print(f"Assumed: {escape(note)}", markup=False)
