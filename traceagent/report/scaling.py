"""`traceagent scaling`'s report, for the terminal, Markdown and HTML: the verdict in a sentence, the
runs, where efficiency went, the communication model and the projections."""

from __future__ import annotations

import html

from rich.console import Console
from rich.markdown import Markdown

from ..detect.compare.scaling import PARTS, ScalingResult
from ..format import duration, rate
from ..text import md_literal
from .html import markdown_renderer, page


def print_scaling(result: ScalingResult, console: Console) -> None:
    """The report, rendered for the terminal (as `diff` prints its own)."""
    console.print(Markdown(render_scaling_markdown(result)))


#: a colour per part of the step, in PARTS' order (the report's stacked bars)
PART_COLORS = {"compute": "#4c78a8", "transfer": "#f58518", "waiting": "#e45756", "host_idle": "#b279a2",
               "other": "#bab0ac"}


def render_scaling_markdown(result: ScalingResult) -> str:
    """The scaling report as Markdown: the sentence, the runs, the losses, the model, the projections."""
    out = ["# traceagent scaling", "", f"**{md_literal(result.sentence)}**", "",
           f"{result.mode.capitalize()} scaling: {md_literal(result.mode_reason)}.", "", "## Runs", "",
           "| GPUs | run | step | speedup | efficiency | " + " | ".join(PARTS[p] for p in PARTS) + " |",
           "|" + " --- |" * (5 + len(PARTS))]
    for r in result.runs:
        out.append(f"| {r.world_size} | {md_literal(r.path)} | {duration(r.step_us)} | {r.speedup_x:.2f}× | "
                   f"{r.efficiency_pct:.1f}% | " + " | ".join(duration(r.parts_us[p]) for p in PARTS) + " |")
    if any(r.tflops_per_gpu is not None for r in result.runs):  # from recorded shapes
        out += ["", "Per GPU: " + "; ".join(
            f"{r.world_size} GPUs {r.tflops_per_gpu:.1f} TFLOP/s" + (f", MFU {r.mfu_pct:.1f}%" if r.mfu_pct is not None else "")
            for r in result.runs if r.tflops_per_gpu is not None) + "."]
    out += ["", f"## Efficiency lost against {result.runs[0].world_size} GPU(s), points (µs per step)", "",
            "| GPUs | " + " | ".join(PARTS[p] for p in PARTS) + " |", "|" + " --- |" * (1 + len(PARTS))]
    for r in result.runs[1:]:
        by_part = {loss.part: loss for loss in r.losses}
        out.append(f"| {r.world_size} | " + " | ".join(f"{by_part[p].points:+.1f} ({by_part[p].per_step_us:+.0f})"
                                                       for p in PARTS) + " |")
    if result.fits:
        out += ["", "## Communication model: time = latency + bus bytes / bandwidth", "",
                "| collective | link | latency | bus bandwidth | error | calls | latency-bound below |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        out += [f"| {f.kind} | {f.link} | {duration(f.latency_us)} | {rate(f.busbw_gbps)} | {f.error_pct:.1f}% | "
                f"{f.calls} | {f.crossover_bytes / 1e6:.2f} MB |" for f in result.fits]
        out += ["", *(f"- {f.kind}, the median message of each run: " + "; ".join(
            f"{md_literal(run)} {size / 1e6:.2f} MB ({'bandwidth' if size >= f.crossover_bytes else 'latency'}-bound)"
            for run, size in f.median_bus_bytes_by_run.items()) for f in result.fits)]
    if result.projections:
        out += ["", "## Projected", "", "| GPUs | step | range | speedup | efficiency | communication |",
                "| --- | --- | --- | --- | --- | --- |"]
        out += [f"| {p.world_size} | {duration(p.step_us)} | {duration(p.low_us)} – {duration(p.high_us)} | "
                f"{p.speedup_x:.2f}× | {p.efficiency_pct:.1f}% | {p.communication_share_pct:.0f}% |"
                for p in result.projections]
    if result.assumptions:
        out += ["", "## Assumptions", "", *(f"- {md_literal(a)}" for a in result.assumptions)]
    return "\n".join(out) + "\n"


def render_scaling_html(result: ScalingResult) -> str:
    """The Markdown report with a chart above it: each run's step split into its parts (bars, one
    per world size, measured then projected) and its efficiency."""
    body = markdown_renderer().render(render_scaling_markdown(result))
    rows = [(str(r.world_size), r.parts_us, r.efficiency_pct, False) for r in result.runs]
    rows += [(str(p.world_size), {"projected": p.step_us}, p.efficiency_pct, True) for p in result.projections]
    longest = max((sum(parts.values()) for _, parts, _, _ in rows), default=0.0) or 1.0
    height, bars = 28, []
    for i, (label, parts, efficiency, projected) in enumerate(rows):
        y, x = i * (height + 6), 60.0
        bars.append(f'<text x="0" y="{y + 18}" font-size="12">{html.escape(label)} GPUs</text>')
        for part, value in parts.items():
            w = 700 * max(value, 0.0) / longest
            color = "#ddd" if projected else PART_COLORS[part]
            name = "projected" if projected else PARTS[part]
            bars.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{height}" fill="{color}">'
                        f'<title>{html.escape(name)}: {duration(value)}</title></rect>')
            x += w
        bars.append(f'<text x="{x + 6:.1f}" y="{y + 18}" font-size="12">{duration(sum(parts.values()))}, '
                    f'{efficiency:.0f}% efficiency</text>')
    legend = "".join(f'<span><i style="background:{PART_COLORS[p]}"></i>{html.escape(PARTS[p])}</span>' for p in PARTS)
    chart = (f'<figure><figcaption>Step time by world size, split into its parts</figcaption>'
             f'<div class="legend">{legend}</div><svg width="960" height="{len(rows) * (height + 6)}" '
             f'xmlns="http://www.w3.org/2000/svg">{"".join(bars)}</svg></figure>')
    return page("traceagent scaling", f"{chart}\n{body}")
