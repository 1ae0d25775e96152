"""The analysis as Rich tables for the terminal: verdict first, then the evidence per rank.
Tables fit 80 columns: numbers are never cut, long names are shortened instead."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Column, Table

from ..detect.analysis import Analysis, RankAnalysis
from ..detect.detectors.kernel_profiles import KernelProfilesResult, profile_sentence
from ..detect.detectors.kernels import short_name
from ..detect.detectors.launch import NO_LAUNCHES, latency_note
from ..format import duration, of_span, percent, shorten, size
from ..sentences import further_findings, gap_evidence, gpu_behind, straggler_sentence


def say(console: Console, text: str) -> None:
    """One line of prose, never hard-wrapped: paths stay whole and `grep` finds the line."""
    console.print(text, soft_wrap=True)


def number_columns(*headers: str) -> list[Column]:
    """Right-justified columns: add_rows_keeping_numbers_whole keeps their cells whole."""
    return [Column(header, justify="right") for header in headers]


def add_rows_keeping_numbers_whole(table: Table, width: int, rows: list[list[str]]) -> None:
    """Add rows; the right-justified (number) columns never shrink below their widest cell, and the
    unwrapped text columns share what is left of the terminal, so at 80 columns the names are
    shortened with an ellipsis instead of a unit being cut off a number."""
    for row in rows:
        table.add_row(*row)
    for i, column in enumerate(table.columns):
        if column.justify == "right":
            column.min_width = max([len(str(column.header))] + [len(row[i]) for row in rows])
            column.no_wrap = True
    for column in (c for c in table.columns if c.no_wrap and c.justify != "right"):
        column.max_width = text_width(table, width, rows)


def text_width(table: Table, width: int, rows: list[list[str]]) -> int:
    """The width each unwrapped text column of the table gets beside its whole numbers (what
    add_rows_keeping_numbers_whole gives them), for cells that shorten themselves to it."""
    numbers = sum(max([len(str(c.header))] + [len(row[i]) for row in rows])
                  for i, c in enumerate(table.columns) if c.justify == "right")
    wrapped = sum(max(len(row[i]) for row in rows) if rows else 0
                  for i, c in enumerate(table.columns) if not c.no_wrap and c.justify != "right")
    unwrapped = sum(1 for c in table.columns if c.no_wrap and c.justify != "right") or 1
    borders = 3 * len(table.columns) + 1  # a rule and a space either side per column
    return max(16, (width - numbers - wrapped - borders) // unwrapped)


def _scope_column(ranks: list[RankAnalysis]) -> tuple[str, Callable[[int | None, int], str]]:
    """(header, label(rank, device)) naming each GPU row by what tells rows apart: the rank when
    every rank has one GPU, the GPU for one rank, both ("3:1") otherwise."""
    several_devices = any(len(r.breakdown.devices) > 1 for r in ranks)
    if not several_devices:
        return "rank", lambda rank, device: str(rank)
    if len(ranks) == 1:
        return "GPU", lambda rank, device: str(device)
    return "rank:GPU", lambda rank, device: f"{rank}:{device}"


def print_analysis(result: Analysis, out: Console) -> None:
    """The analysis as Rich tables on `out`: verdict first, then the evidence per rank."""
    v = result.verdict
    title = f"{v.limiter} · {v.root_cause}" if v.limiter else "no device activity"
    # the verdict quotes trace strings (kernel names, Python lines): escaped, never read as markup
    body = f"[bold]{escape(v.headline)}[/]\n\n{escape(v.hypothesis)}\n\n[bold]Next:[/] {escape(v.next_step)}"
    if v.saving:
        body += f"\n[bold]Saving:[/] {escape(v.saving.sentence)}"
    for extra in v.other_losses + v.also:
        body += f"\n[dim]· {escape(extra)}[/]"
    say(out, f"[bold]{escape(result.path)}[/]  {result.format}, {len(result.ranks)} rank(s), "
              f"{escape(', '.join(result.devices)) or 'no devices'}")
    for warning in result.warnings:
        say(out, f"[yellow]warning: {escape(warning)}[/]")
    out.print(Panel(body, title=f"Verdict: {title}", title_align="left", border_style="cyan"))
    if not v.limiter:
        return

    # one row per GPU, each over its own span; comm columns only where there is communication:
    # devices compare at a glance and the table fits 80 columns (the durations are in --json)
    has_comm = any(r.breakdown.total.comm_us for r in result.ranks)
    numbers = ["span", "idle", "compute", *(["comm", "exposed"] if has_comm else []), "memcpy"]
    header, label = _scope_column(result.ranks)
    table = Table(header, *number_columns(*numbers), "root cause",
                  title="Where device time went (share of each GPU's span)", pad_edge=False)
    rows = []
    for r in result.ranks:
        for device, b in r.breakdown.devices.items():
            share = [b.compute_us, *([b.comm_us, b.exposed_comm_us] if has_comm else []), b.memcpy_us]
            rows.append([label(r.rank, device), duration(b.span_us), f"{b.idle_pct:.1f}%",
                         *(percent(100 * us / b.span_us) for us in share), r.verdict.root_cause or "-"])
    add_rows_keeping_numbers_whole(table, out.width, rows)
    out.print(table)

    # the detail tables are about the rank the verdict names, and say so
    first = result.focus
    f = first.findings
    idle = f.idle
    who = f" (rank {first.rank})" if len(result.ranks) > 1 else ""
    causes = Table("cause", *number_columns("idle", f"share {of_span(len(idle.devices))}", "gaps"),
                   title=f"Idle by cause{who}")
    add_rows_keeping_numbers_whole(causes, out.width, [
        [cause, duration(us), percent(idle.by_cause_pct[cause]), str(idle.by_cause_count[cause])]
        for cause, us in sorted(idle.by_cause_us.items(), key=lambda kv: -kv[1])])
    out.print(causes)
    gaps = Table(*number_columns("at", "gap"), "cause", "evidence", title=f"Largest gaps{who}")
    add_rows_keeping_numbers_whole(gaps, out.width, [
        [duration(g.start_us), duration(g.dur_us), g.cause, escape(gap_evidence(g, name_width=32))]
        for g in idle.top_gaps[:5]])
    out.print(gaps)

    # the op that launched each kernel goes under its name: a column of its own left the names
    # too narrow to tell apart at 80 columns
    kernels = Table(Column("kernel [dim](and the op that launched it)[/]", no_wrap=True, overflow="ellipsis"),
                    *number_columns("count", "total", "% busy", "mean"), title=f"Hot kernels{who}")
    figures = [[str(k.count), duration(k.total_us), f"{k.share_of_busy_pct:.1f}%", duration(k.mean_us)]
               for k in f.kernels.top[:8]]
    fits = min(60, text_width(kernels, out.width, [["", *n] for n in figures]))  # labels cut themselves to it
    add_rows_keeping_numbers_whole(kernels, out.width, [
        [escape(k.shown(fits)) + (f"\n[dim]  by {escape(shorten(k.op, 57))}"
                                  f"{' (graph capture)' if k.op_from == 'capture' else ''}[/]" if k.op else ""), *n]
        for k, n in zip(f.kernels.top[:8], figures)])
    out.print(kernels)
    for _, line in further_findings(first):
        say(out, escape(line))

    copies = f.memcpy
    if copies.count:
        t = Table("copy", *number_columns("count", "bytes", "time", "GB/s", "pageable"),
                  title=f"Data movement{who} ({copies.share_pct:.1f}% {of_span(len(idle.devices))})")
        add_rows_keeping_numbers_whole(t, out.width, [
            [kind, str(c.count), size(c.bytes), duration(c.us), f"{c.gbps:.1f}", str(c.pageable_count)]
            for kind, c in copies.by_kind.items()])
        out.print(t)
    c = result.comparison
    if c and c.matched:
        t = Table("rank", *number_columns("in collectives", "waiting", "comm proper", "last", "compute"),
                  title=f"Ranks in {c.matched} matched collectives")
        add_rows_keeping_numbers_whole(t, out.width, [
            [str(r.rank), duration(r.comm_us), duration(r.waiting_us), duration(r.communication_us),
             str(r.last_count), duration(r.compute_us)]
            for r in c.ranks])
        out.print(t)
        say(out, straggler_sentence(c))
    if result.kernel_profiles:
        print_kernel_profiles(result.kernel_profiles, out)
    launch, steps = f.launch, f.steps
    launches = (f"Launch: {NO_LAUNCHES}" if not launch.kernels else
                f"Launch: median launch-to-start {duration(launch.median_latency_us)} (queueing included), "
                f"{launch.short_kernel_pct:.0f}% of kernels shorter than their launch call."
                + (f" {note}" if (note := latency_note(launch)) else ""))
    say(out, f"{launches} Steps: {steps.count if steps else 0}"
              + (f", mean {duration(steps.mean_us)}, slowest {duration(steps.max_us)} (step {steps.slowest})."
                 + gpu_behind(steps) if steps and steps.count else ""))


def print_kernel_profiles(result: KernelProfilesResult, out: Console) -> None:
    """Nsight Compute's reading of each profiled kernel: speed of light, occupancy, the class and
    the next step, with its time in the trace where it matched one of the trace's kernels."""
    where = f" joined to rank {result.rank}'s kernels" if result.rank is not None else ""
    t = Table(Column("kernel", no_wrap=True, overflow="ellipsis"), "bound",
              *number_columns("compute", "memory", "occupancy", "in trace"),
              title=f"Nsight Compute: {escape(result.path)}{where}")
    add_rows_keeping_numbers_whole(t, out.width, [
        [escape(shorten(short_name(k.name), 48)), k.bound, percent(k.compute_pct), percent(k.memory_pct),
         percent(k.achieved_occupancy_pct), duration(k.trace_total_us) if k.trace_total_us is not None else "-"]
        for k in result.kernels])
    out.print(t)
    for k in result.kernels[:3]:
        say(out, escape(profile_sentence(k)))
    if result.unmatched and result.rank is not None:
        say(out, f"[dim]{len(result.unmatched)} profiled kernel(s) have no kernel of the same name in the trace.[/]")
