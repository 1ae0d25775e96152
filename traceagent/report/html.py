"""The diagnosis as one self-contained HTML file: inline SVG charts (timeline with gaps coloured
by cause, time breakdown, hot kernels, ranks side by side) above the Markdown report. No script,
no font or stylesheet from the network."""

from __future__ import annotations

import html
import secrets

from markdown_it import MarkdownIt

from ..detect.analysis import Analysis
from ..detect.core.peaks import peak_for
from ..detect.core.vocabulary import GAP_CAUSES, WORK
from ..detect.detectors.timeline import STREAM_BINS, DeviceTimeline
from ..format import duration, percent, shorten, size
from .markdown import FULL_NAMES_FOLD, render_markdown

CAUSE_COLORS = {w.name: w.color for w in GAP_CAUSES.values()}
WORK_COLORS = {w.name: w.color for w in WORK.values()}
WIDTH = 960
LABEL_W = 110  # room for "GPU 1 stream 13"


def render_html(analysis: Analysis, summary: str | None = None) -> str:
    markdown = markdown_renderer()
    # the report's own fold of kernel names: markers no trace or model can guess, then real tags
    # (raw HTML stays off, so anything else that looks like a tag is shown as text)
    nonce = secrets.token_hex(16)
    markers = (f"traceagent-fold-open-{nonce}", f"traceagent-fold-close-{nonce}")
    body = markdown.render(render_markdown(analysis, summary, fold=markers))
    for marker, tag in zip(markers, FULL_NAMES_FOLD):
        body = body.replace(f"<p>{marker}</p>", tag)
    charts = _charts(analysis) if analysis.verdict.limiter else ""
    # the title and the verdict first, then the charts, then the evidence sections
    first_h2, second_h2 = body.find("<h2>"), body.find("<h2>", body.find("<h2>") + 1)
    head, rest = (body[:second_h2], body[second_h2:]) if first_h2 >= 0 and second_h2 >= 0 else (body, "")
    return page(f"traceagent diagnosis: {analysis.path}", f"{head}\n{charts}\n{rest}")


def page(title: str, body: str) -> str:
    """A self-contained HTML page: `body` (HTML) under `title` (text), with the reports' styles."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 15px/1.5 system-ui, sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: .5em 0; font-size: 13px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; }}
code {{ font-size: 12px; background: #f4f4f4; padding: 0 3px; }}
figure {{ margin: 1.5em 0; }} figcaption {{ font-weight: 600; margin-bottom: .3em; }}
.legend span {{ display: inline-block; margin-right: 1em; font-size: 12px; }}
.legend i {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
</style></head><body>
{body}
</body></html>
"""


def markdown_renderer() -> MarkdownIt:
    """Markdown to HTML with raw HTML, links and images off: none of traceagent's own Markdown uses
    them, so none can come from a trace string or a model's text."""
    return MarkdownIt("commonmark", {"html": False}).enable("table").disable(["link", "image", "autolink"])


def _legend(colors: dict[str, str]) -> str:
    items = "".join(f'<span><i style="background:{c}"></i>{html.escape(n)}</span>' for n, c in colors.items())
    return f'<div class="legend">{items}</div>'


def _charts(analysis: Analysis) -> str:
    parts = [_timeline(analysis), _breakdown(analysis), _kernels(analysis), _flops(analysis), _memory(analysis)]
    if len(analysis.ranks) > 1:
        parts.append(_ranks(analysis))
    return "\n".join(p for p in parts if p)


def _timeline(analysis: Analysis) -> str:
    """The verdict's rank: for each of its GPUs (on one time axis), busy share per time bin for
    each stream, idle gaps coloured by cause; step boundaries across all of them."""
    rank = analysis.focus
    pictures = rank.pictures
    if pictures.span is None:
        return ""
    lo, hi = pictures.span
    rows, y = [], 0
    for device in pictures.devices:
        section, y = _device_rows(device, lo, hi, y, several=len(pictures.devices) > 1)
        rows.append(section)
    scale = (WIDTH - LABEL_W) / max(hi - lo, 1)
    marks = ""
    for step, s in pictures.step_starts:
        x = LABEL_W + (s - lo) * scale
        if LABEL_W <= x <= WIDTH:
            marks += (f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{y}" stroke="#444" stroke-dasharray="2,2"/>'
                      f'<text x="{x + 2:.1f}" y="{y + 10}" font-size="10">step {step}</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y + 16}" role="img" '
           f'aria-label="device timeline">{"".join(rows)}{marks}</svg>')
    gpus = ", ".join(str(d.device) for d in pictures.devices)
    caption = (f"Rank {rank.rank}, GPU{'s' if len(pictures.devices) > 1 else ''} {gpus}, over "
               f"{duration((hi - lo) / 1000)}: darker is busier; gaps coloured by cause")
    return f"<figure><figcaption>{html.escape(caption)}</figcaption>{svg}{_legend(CAUSE_COLORS)}</figure>"


def _device_rows(device: DeviceTimeline, lo: int, hi: int, y: int, several: bool) -> tuple[str, int]:
    """One GPU's rows of the timeline from height y: its busiest streams, then its idle gaps."""
    bin_w = (WIDTH - LABEL_W) / STREAM_BINS
    who = f"GPU {device.device} " if several else ""
    rows = []
    for stream, share in device.streams.items():
        rects = "".join(f'<rect x="{LABEL_W + i * bin_w:.1f}" y="{y}" width="{bin_w + 0.3:.1f}" height="14" '
                        f'fill="{WORK_COLORS["compute"]}" fill-opacity="{min(s, 1):.2f}"/>'
                        for i, s in enumerate(share) if s > 0.005)
        rows.append(f'<text x="0" y="{y + 11}" font-size="11">{who}stream {stream}</text>{rects}')
        y += 18
    gaps = device.gaps
    gaps = gaps[gaps["dur"] >= (hi - lo) / (STREAM_BINS * 4)].nlargest(2000, "dur")
    scale = (WIDTH - LABEL_W) / max(hi - lo, 1)
    gap_rects = "".join(
        f'<rect x="{LABEL_W + (s - lo) * scale:.1f}" y="{y}" width="{max((e - s) * scale, 0.8):.1f}" height="14" '
        f'fill="{CAUSE_COLORS.get(c, "#999")}"><title>{html.escape(c)}: {duration((e - s) / 1000)}</title></rect>'
        for s, e, c in zip(gaps["start"], gaps["end"], gaps["cause"]))
    rows.append(f'<text x="0" y="{y + 11}" font-size="11">{who}idle</text>{gap_rects}')
    return "".join(rows), y + 24


def _bar(segments: list[tuple[str, float, str]], total: float, y: int = 0, height: int = 26) -> str:
    x, out = 0.0, []
    for name, value, color in segments:
        w = WIDTH * value / total if total else 0
        if w <= 0:
            continue
        out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{height}" fill="{color}">'
                   f'<title>{html.escape(name)}: {duration(value)} ({percent(100 * value / total)})</title></rect>')
        if w > 60:
            out.append(f'<text x="{x + 4:.1f}" y="{y + height / 2 + 4}" font-size="11" fill="#fff">'
                       f'{html.escape(shorten(name, int(w / 7)))}</text>')
        x += w
    return "".join(out)


def _exclusive_split(analysis: Analysis) -> list[tuple[str, float, str]]:
    """Device time split so the parts add up (the analysis's exclusive breakdown), then idle by cause."""
    totals = {name: sum(r.breakdown.exclusive_us[name] for r in analysis.ranks) for name in WORK}
    segments = [(n, t, WORK_COLORS[n]) for n, t in totals.items()]
    causes: dict[str, float] = {}
    for rank in analysis.ranks:
        for c, us in rank.findings.idle.by_cause_us.items():
            causes[c] = causes.get(c, 0.0) + us
    segments += [(f"idle: {c}", us, CAUSE_COLORS.get(c, "#999")) for c, us in sorted(causes.items(), key=lambda kv: -kv[1])]
    return segments


def _breakdown(analysis: Analysis) -> str:
    segments = _exclusive_split(analysis)
    total = sum(s[1] for s in segments)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="28" role="img" '
           f'aria-label="time breakdown">{_bar(segments, total)}</svg>')
    return (f"<figure><figcaption>Where device time went (all devices)</figcaption>{svg}"
            f"{_legend({**WORK_COLORS, **CAUSE_COLORS})}</figure>")


def _kernels(analysis: Analysis) -> str:
    top = analysis.focus.findings.kernels.top[:10]
    if not top:
        return ""
    label_w, row = 260, 20
    biggest = max(k.share_of_busy_pct for k in top) or 1
    bars = "".join(
        f'<text x="0" y="{i * row + 13}" font-size="11">{html.escape(k.shown(38))}</text>'
        f'<rect x="{label_w}" y="{i * row + 2}" width="{(WIDTH - label_w - 80) * k.share_of_busy_pct / biggest:.1f}" '
        f'height="{row - 6}" fill="{WORK_COLORS["communication" if k.is_comm else "compute"]}">'
        f'<title>{html.escape(shorten(k.name, 300))}</title></rect>'
        f'<text x="{label_w + (WIDTH - label_w - 80) * k.share_of_busy_pct / biggest + 4:.1f}" y="{i * row + 13}" '
        f'font-size="11">{percent(k.share_of_busy_pct)}</text>'
        for i, k in enumerate(top))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{len(top) * row}" role="img" '
           f'aria-label="hot kernels">{bars}</svg>')
    return (f"<figure><figcaption>Hot kernels of rank {analysis.focus.rank} by share of its busy time</figcaption>"
            f"{svg}</figure>")


def _flops(analysis: Analysis) -> str:
    """Achieved TFLOP/s per op next to the GPU's peak for its dtype (recorded shapes only)."""
    flops = analysis.focus.findings.flops
    if flops is None:
        return ""
    rows = [(o, o.achieved_tflops) for o in flops.by_op if o.achieved_tflops]
    if not rows:
        return ""
    peak = peak_for(flops.gpu) if flops.gpu else None
    peaks = {o.dtype: peak.tflops[o.dtype] for o, _ in rows if peak and o.dtype in peak.tflops}
    scale = max([achieved for _, achieved in rows] + list(peaks.values()))
    label_w, row, bar_w = 260, 20, WIDTH - 260 - 150
    bars = []
    for i, (o, achieved) in enumerate(rows[:8]):
        y = i * row
        width = bar_w * achieved / scale
        bars.append(f'<text x="0" y="{y + 13}" font-size="11">{html.escape(shorten(o.name, 30))} ({o.dtype})</text>'
                    f'<rect x="{label_w}" y="{y + 2}" width="{width:.1f}" height="{row - 6}" fill="{WORK_COLORS["compute"]}"/>')
        if o.dtype in peaks:  # the peak as a tick: how far from the hardware
            x = label_w + bar_w * peaks[o.dtype] / scale
            bars.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + row - 2}" stroke="#333" stroke-width="2"/>')
        bars.append(f'<text x="{label_w + width + 4:.1f}" y="{y + 13}" font-size="11">{achieved:g} TFLOP/s'
                    + (f" · {percent(o.mfu_pct)} of peak" if o.mfu_pct is not None else "") + "</text>")
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{len(rows[:8]) * row}" role="img" '
           f'aria-label="achieved throughput">{"".join(bars)}</svg>')
    ticks = f" (ticks: the {html.escape(flops.peak_family)} peak per dtype)" if flops.peak_family else ""
    return f"<figure><figcaption>Achieved TFLOP/s per op over its kernels{ticks}</figcaption>{svg}</figure>"


def _memory(analysis: Analysis) -> str:
    """Allocated GPU memory over time (the allocator's totals, or bytes from the trace's start)."""
    pictures = analysis.focus.pictures
    if not pictures.memory or pictures.memory_span is None:
        return ""
    height, lines = 120, []
    lo, hi = pictures.memory_span
    hi = hi or 1
    for line in pictures.memory:
        xs = (line.times - lo) / max(hi - lo, 1) * (WIDTH - 80)
        ys = height - line.level / line.peak * (height - 10)
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
        lines.append(f'<polyline points="{points}" fill="none" stroke="{WORK_COLORS["copies"]}" stroke-width="1.5">'
                     f'<title>GPU {line.device}: up to {size(line.peak)}</title></polyline>'
                     f'<text x="{WIDTH - 76}" y="14" font-size="11">{size(line.peak)}</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img" '
           f'aria-label="memory over time">{"".join(lines)}</svg>')
    return f"<figure><figcaption>GPU memory allocated over time, rank {analysis.focus.rank}</figcaption>{svg}</figure>"


def _ranks(analysis: Analysis) -> str:
    rows, row = [], 22
    span = max(r.breakdown.total.span_us for r in analysis.ranks) or 1
    for i, r in enumerate(analysis.ranks):
        b = r.breakdown.total
        segments = [("compute", b.compute_us, WORK_COLORS["compute"]),
                    ("exposed communication", b.exposed_comm_us, WORK_COLORS["communication"]),
                    ("idle", b.idle_us, CAUSE_COLORS["no_host_activity"])]
        rows.append(f'<text x="0" y="{i * row + 15}" font-size="11">rank {r.rank}</text>'
                    f'<g transform="translate(60,0)">{_bar(segments, span * WIDTH / (WIDTH - 60), i * row + 2, row - 6)}</g>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{len(rows) * row}" role="img" '
           f'aria-label="ranks compared">{"".join(rows)}</svg>')
    return f"<figure><figcaption>Ranks side by side: compute, exposed communication, idle</figcaption>{svg}</figure>"
