"""The `traceagent` command: info · analyze · demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from importlib import resources
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Column, Table

from .detect.analysis import Analysis, analyze
from .errors import TraceError
from .format import duration, gap_evidence, percent, shorten, size
from .trace.load import load
from .trace.model import Job

EXAMPLE_TRACE = "resnet50_num_workers_0.pt.trace.json.gz"

out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str) -> None:
    """One line of prose on stdout, never hard-wrapped: paths stay whole and `grep` finds the line."""
    out.print(text, soft_wrap=True)


def example_trace() -> str:
    """Path of the bundled example: ResNet50 with num_workers=0 (a DataLoader stall), V100."""
    return str(resources.files("traceagent") / "data" / EXAMPLE_TRACE)


@contextmanager
def _progress_bar() -> Iterator:
    """A progress display on stderr for interactive use; silent when stderr is not a terminal."""
    if not err.is_terminal:
        yield None
        return
    columns = (SpinnerColumn(), TextColumn("Loading {task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        yield update


def load_job(path: str, use_cache: bool) -> Job:
    with _progress_bar() as progress:
        return load(path, use_cache=use_cache, progress=progress)


def info_dict(job: Job) -> dict:
    """What `info` reports, as plain data."""
    ranks = []
    for trace in job.traces:
        span = trace.span_ns()
        ranks.append({
            "rank": trace.meta.rank,
            "path": trace.meta.path,
            "devices": {str(k): v for k, v in trace.meta.devices.items()},
            "span_us": round((span[1] - span[0]) / 1000, 3) if span else 0.0,
            "has_device_activity": trace.has_device_activity,
            "counts": trace.counts(),
            "profiler": trace.meta.profiler,
            "warnings": trace.meta.warnings,
        })
    return {"path": job.path, "format": job.format, "ranks": len(job.traces),
            "world_size": job.traces[0].meta.world_size, "traces": ranks}


def cmd_info(args: argparse.Namespace) -> int:
    job = load_job(args.path, not args.no_cache)
    data = info_dict(job)
    if args.json:
        out.print_json(json.dumps(data))
        return 0
    say(f"[bold]{escape(job.path)}[/]  ({data['format']}, {data['traces'][0]['profiler']})")
    table = Table("rank", "devices", "span", "kernels", "memcpys", "memsets", "host calls", "steps",
                  title=f"{data['ranks']} rank(s)" + (f" of world size {data['world_size']}" if data['world_size'] else ""))
    for r in data["traces"]:
        c = r["counts"]
        devices = escape(", ".join(f"{k}: {v}" for k, v in r["devices"].items())) or "none"
        table.add_row(str(r["rank"]) if r["rank"] is not None else "-", devices,
                      duration(r["span_us"]) if r["has_device_activity"] else "-",
                      str(c["kernels"]), str(c["memcpys"]), str(c["memsets"]), str(c["runtime_calls"]),
                      str(c["steps"]))
    out.print(table)
    for r in data["traces"]:
        if not r["has_device_activity"]:
            say(f"[yellow]{escape(r['path'])}: no device activity (a CPU-only trace): there is no GPU time to analyze.[/]")
        for warning in r["warnings"]:
            say(f"[yellow]{escape(r['path'])}: {escape(warning)}[/]")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    job = load_job(args.path, not args.no_cache)
    result = analyze(job)
    if args.json:
        out.print_json(json.dumps(result.to_dict(), allow_nan=False))
        return 0
    print_analysis(result)
    return 0


def number_columns(*headers: str) -> list[Column]:
    """Right-justified columns: add_rows_keeping_numbers_whole keeps their cells whole."""
    return [Column(header, justify="right") for header in headers]


def add_rows_keeping_numbers_whole(table: Table, rows: list[list[str]]) -> None:
    """Add rows; the right-justified (number) columns never shrink below their widest cell, and the
    unwrapped text columns share what is left of the terminal, so at 80 columns the names are
    shortened with an ellipsis instead of a unit being cut off a number."""
    for row in rows:
        table.add_row(*row)
    for i, column in enumerate(table.columns):
        if column.justify == "right":
            column.min_width = max([len(str(column.header))] + [len(row[i]) for row in rows])
            column.no_wrap = True
    unwrapped = [c for c in table.columns if c.no_wrap and c.justify != "right"]
    if unwrapped:
        taken = sum(c.min_width for c in table.columns if c.justify == "right")
        taken += sum(max(len(row[i]) for row in rows) if rows else 0
                     for i, c in enumerate(table.columns) if not c.no_wrap)
        borders = 3 * len(table.columns) + 1  # a rule and a space either side per column
        for column in unwrapped:
            column.max_width = max(16, (out.width - taken - borders) // len(unwrapped))


def print_analysis(result: Analysis) -> None:
    """The analysis as Rich tables: verdict first, then the evidence per rank."""
    from rich.panel import Panel

    data = result.to_dict()
    v = data["verdict"]
    title = f"{v['limiter']} · {v['root_cause']}" if v["limiter"] else "no device activity"
    # the verdict quotes trace strings (kernel names, Python lines): escaped, never read as markup
    body = f"[bold]{escape(v['headline'])}[/]\n\n{escape(v['hypothesis'])}\n\n[bold]Next:[/] {escape(v['next_step'])}"
    for extra in v["other_losses"] + v["also"]:
        body += f"\n[dim]· {escape(extra)}[/]"
    say(f"[bold]{escape(data['trace']['path'])}[/]  {data['trace']['format']}, {data['trace']['ranks']} rank(s), "
              f"{escape(', '.join(data['trace']['devices'])) or 'no devices'}")
    for warning in data["trace"]["warnings"]:
        say(f"[yellow]warning: {escape(warning)}[/]")
    out.print(Panel(body, title=f"Verdict: {title}", title_align="left", border_style="cyan"))
    if not data["verdict"]["limiter"]:
        return

    # shares of each rank's span, and comm columns only where there is communication: ranks compare
    # at a glance and the table fits 80 columns unwrapped (the durations are in --json and the report)
    has_comm = any(r["breakdown"]["comm_us"] for r in data["ranks"])
    numbers = ["span", "idle", "compute", *(["comm", "exposed"] if has_comm else []), "memcpy"]
    table = Table("rank", *number_columns(*numbers), "root cause",
                  title="Where device time went (share of span)", pad_edge=False)
    rows = []
    for r in data["ranks"]:
        b = r["breakdown"]
        share = [b["compute_us"], *([b["comm_us"], b["exposed_comm_us"]] if has_comm else []), b["memcpy_us"]]
        rows.append([str(r["rank"]) if r["rank"] is not None else "-", duration(b["span_us"]),
                     f"{b['idle_pct']:.1f}%", *(percent(100 * us / b["span_us"]) for us in share),
                     r["verdict"]["root_cause"] or "-"])
    add_rows_keeping_numbers_whole(table, rows)
    out.print(table)

    first = data["ranks"][0]
    idle = first["idle"]
    causes = Table("cause", *number_columns("idle", "share of span", "gaps"),
                   title=f"Idle by cause (rank {first['rank']})" if len(data["ranks"]) > 1 else "Idle by cause")
    add_rows_keeping_numbers_whole(causes, [
        [cause, duration(us), percent(idle["by_cause_pct"][cause]), str(idle["by_cause_count"][cause])]
        for cause, us in sorted(idle["by_cause_us"].items(), key=lambda kv: -kv[1])])
    out.print(causes)
    gaps = Table(*number_columns("at", "gap"), "cause", "evidence", title="Largest gaps")
    add_rows_keeping_numbers_whole(gaps, [
        [duration(g["start_us"]), duration(g["dur_us"]), g["cause"], escape(gap_evidence(g, name_width=32))]
        for g in idle["top_gaps"][:5]])
    out.print(gaps)

    # the op that launched each kernel goes under its name: a column of its own left the names
    # too narrow to tell apart at 80 columns
    kernels = Table(Column("kernel [dim](and the op that launched it)[/]", no_wrap=True, overflow="ellipsis"),
                    *number_columns("count", "total", "% busy", "mean"), title="Hot kernels")
    add_rows_keeping_numbers_whole(kernels, [
        [escape(shorten(k["short_name"], 60)) + (f"\n[dim]  by {escape(shorten(k['op'], 57))}[/]" if k["op"] else ""),
         str(k["count"]), duration(k["total_us"]), f"{k['share_pct']:.1f}%", duration(k["mean_us"])]
        for k in first["hot_kernels"][:8]])
    out.print(kernels)

    copies = first["memcpy"]
    if copies["count"]:
        t = Table("copy", *number_columns("count", "bytes", "time", "GB/s", "pageable"),
                  title=f"Data movement ({copies['share_pct']:.1f}% of span)")
        add_rows_keeping_numbers_whole(t, [
            [kind, str(c["count"]), size(c["bytes"]), duration(c["us"]), f"{c['gbps']:.1f}", str(c["pageable_count"])]
            for kind, c in copies["by_kind"].items()])
        out.print(t)
    if data["comparison"] and data["comparison"]["waits_most"] is not None:
        c = data["comparison"]
        t = Table("rank", *number_columns("comm", "exposed", "compute"), title="Communication per rank")
        add_rows_keeping_numbers_whole(t, [
            [str(r["rank"]), duration(r["comm_us"]), duration(r["exposed_us"]), duration(r["compute_us"])]
            for r in c["ranks"]])
        out.print(t)
        say(f"Rank {c['waits_most']} waits longest in collectives; rank {c['slowest']} computes longest "
                  f"(comm time spread {c['comm_spread_pct']:.0f}%).")
    launch, steps = first["launch"], first["steps"]
    say(f"Launch: median launch-to-start {duration(launch['median_latency_us'])} (queueing included), "
              f"{launch['short_kernel_pct']:.0f}% of "
              f"kernels shorter than their launch call. Steps: {steps['count']}"
              + (f", mean {duration(steps['mean_us'])}, slowest {duration(steps['max_us'])} (step {steps['slowest']})" if steps["count"] else ""))


def cmd_report(args: argparse.Namespace) -> int:
    from .report.html import render_html
    from .report.markdown import render_markdown

    summary = None
    if args.llm:
        from .agent.llm import load_config

        config = load_config()
        if config is None:
            err.print("traceagent: error: --llm needs a model: set OPENAI_API_KEY, or OPENAI_BASE_URL for a local "
                      "server (the report without --llm needs none)", markup=False)
            return 2
    result = analyze(load_job(args.path, not args.no_cache))
    if args.llm:
        summary = llm_summary(result, config)
        if summary is None:
            return 1
    target = args.output
    if target and target.lower().endswith((".html", ".htm")):
        text = render_html(result, summary)
    else:
        text = render_markdown(result, summary)
    if not target:
        sys.stdout.write(text)
        return 0
    try:
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        err.print(f"traceagent: error: {target}: cannot write the report ({exc.strerror})", markup=False)
        return 2
    err.print(f"wrote {target}", markup=False)
    return 0


SUMMARY_REQUEST = ("Write the summary paragraph of a written diagnosis of this trace, for a pull request: what "
                   "limits the program, the evidence in numbers, and the next step. Call the tools you need first; "
                   "one paragraph of plain prose, no headings.")


def llm_summary(result: Analysis, config) -> str | None:
    """The report's summary paragraph, written by the model through the agent; numbers the tools
    did not return are marked. None (after one line on stderr) when the model fails."""
    import asyncio

    from .agent.llm import make_chat_model
    from .agent.session import Answer, Failure, Session
    from .agent.tools import AnalysisContext

    session = Session(AnalysisContext(result), make_chat_model(config), config)

    async def run() -> str | None:
        async for event in session.ask(SUMMARY_REQUEST):
            if isinstance(event, Failure) and event.kind in ("connection", "timeout", "rate_limit", "auth", "server"):
                err.print(f"traceagent: {event.message}", markup=False)
                return None
            if isinstance(event, Answer):
                text = event.text.strip()
                if event.unverified:
                    text += ("\n\n_Unverified numbers (in no tool result, check before quoting): "
                             + ", ".join(f"`{u}`" for u in event.unverified) + "_")
                return text + f"\n\n_Written by {config.model}; every other number in this report is a detector's._"
        return None

    return asyncio.run(run())


def cmd_diff(args: argparse.Namespace) -> int:
    from .detect.diff import diff
    from .report.markdown import render_diff_markdown

    before = analyze(load_job(args.before, not args.no_cache))
    after = analyze(load_job(args.after, not args.no_cache))
    result = diff(before, after)
    if args.json:
        out.print_json(json.dumps(result.to_dict(), allow_nan=False))
    else:
        from rich.markdown import Markdown
        out.print(Markdown(render_diff_markdown(result)))
    if args.fail_if_slower is not None and result.slower_pct > args.fail_if_slower:
        err.print(f"traceagent: after is {result.slower_pct:.1f}% slower than before "
                  f"(limit {args.fail_if_slower:g}%)", markup=False)
        return 1
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """One question, the answer on stdout; tool calls on stderr with -v."""
    import asyncio

    from .agent.llm import load_config, make_chat_model
    from .agent.session import Answer, Cancelled, Failure, Session, Token, ToolCall, ToolResult
    from .agent.tools import AnalysisContext

    config = load_config()
    analysis = analyze(load_job(args.path, not args.no_cache))
    other = analyze(load_job(args.compare, not args.no_cache)) if args.compare else None
    session = Session(AnalysisContext(analysis, other), make_chat_model(config) if config else None, config)
    if args.verbose:
        err.print(session.describe_model(), style="dim", markup=False)

    async def run() -> int:
        answered = False
        async for event in session.ask(args.question):
            if isinstance(event, Token):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, ToolCall) and args.verbose:
                err.print(f"tool: {event.name}({json.dumps(event.args)})", markup=False)
            elif isinstance(event, ToolResult) and args.verbose:
                err.print(f"  → {event.summary}", markup=False)
            elif isinstance(event, Failure):
                err.print(f"traceagent: {event.message}", markup=False)
            elif isinstance(event, Cancelled):
                err.print("traceagent: cancelled", markup=False)
            elif isinstance(event, Answer):
                answered = True
                sys.stdout.write("\n")
                if event.unverified:
                    err.print(f"traceagent: unverified numbers (in no tool result): {', '.join(event.unverified)}",
                              markup=False)
        return 0 if answered else 1

    return asyncio.run(run())


def cmd_chat(args: argparse.Namespace) -> int:
    """The chat app. Without a terminal (a pipe, CI) it prints the analysis instead."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        err.print("traceagent: not a terminal, so no chat: printing the analysis instead", markup=False)
        return cmd_analyze(args)
    from .agent.llm import load_config, make_chat_model
    from .tui.app import TraceAgentApp

    config = load_config()
    for path in (args.path, getattr(args, "compare", None)):
        if path and not os.path.exists(path):
            err.print(f"traceagent: error: {path}: no such file or directory", markup=False)
            return 2
    app = TraceAgentApp(args.path, compare=getattr(args, "compare", None),
                        model=make_chat_model(config) if config else None, config=config, use_cache=not args.no_cache)
    app.run()
    return app.return_code or 0


def cmd_demo(args: argparse.Namespace) -> int:
    args.path = example_trace()
    args.compare = None
    err.print("traceagent demo: the bundled ResNet50 trace (PyTorch Profiler, V100, DataLoader with num_workers=0)",
              markup=False)
    return cmd_chat(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="traceagent", description="Find what limits a GPU program from its profiler trace.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func, help: str, path: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if path:
            p.add_argument("path", help="trace file (.json, .json.gz, .sqlite) or a directory of per-rank traces")
        p.add_argument("--no-cache", action="store_true", help="parse the trace again instead of reading the cache")
        p.add_argument("--json", action="store_true", help="print JSON instead of tables")
        p.set_defaults(func=func)
        return p

    add("info", cmd_info, "what a trace holds: format, ranks, devices, span, event counts")
    add("analyze", cmd_analyze, "find what limits the program: idle gaps and causes, copies, communication, "
        "hot kernels, and the verdict")
    report = add("report", cmd_report, "write the diagnosis: Markdown, or self-contained HTML with charts")
    report.add_argument("-o", "--output", help="diagnosis.md or diagnosis.html (default: Markdown on stdout)")
    report.add_argument("--llm", action="store_true", help="add a summary paragraph written by the configured model "
                        "(its numbers checked against the detectors)")
    compare = add("diff", cmd_diff, "compare a trace before and after a change", path=False)
    compare.add_argument("before", help="trace (or rank directory) before the change")
    compare.add_argument("after", help="trace (or rank directory) after the change")
    compare.add_argument("--fail-if-slower", type=float, metavar="PCT",
                         help="exit 1 when the step time (or span) grew by more than PCT percent")
    ask = add("ask", cmd_ask, "ask one question about a trace (an LLM if configured, else the offline analyst)")
    ask.add_argument("question")
    ask.add_argument("--compare", metavar="OTHER", help="a second trace (after a change) to compare with")
    ask.add_argument("-v", "--verbose", action="store_true", help="show the model and its tool calls on stderr")
    chat = add("chat", cmd_chat, "talk about a trace in the terminal app (an LLM if configured, else the offline analyst)")
    chat.add_argument("--compare", metavar="OTHER", help="a second trace (after a change) to compare with")
    add("demo", cmd_demo, "open the chat app on the bundled example trace (no setup needed)", path=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .agent.llm import ConfigError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (TraceError, ConfigError) as exc:
        err.print(f"traceagent: error: {exc}", markup=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("traceagent: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
