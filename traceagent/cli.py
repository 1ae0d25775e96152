"""The `traceagent` command: argument parsing and dispatch.

info · analyze · kernels · report · diff · annotate · ask · chat · demo · mcp · schema · cache
(`traceagent COMMAND --help` for each).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich_argparse import RichHelpFormatter

from . import __version__, api
from .api import read_kernel_profiles
from .detect.analysis import Analysis
from .detect.core.encode import to_data
from .detect.verdict.whatif import CHANGES
from .errors import SchedulerError, TraceError
from .format import duration
from .profile.record import ProfileOptions, Recorded
from .profile.runs import RUNS_DIR
from .report.terminal import print_analysis
from .request import AnalyzeRequest
from .trace import storage
from .trace.heap import prepare_for_large_arrays
from .trace.load import resolve

EXAMPLE_TRACE = "resnet50_num_workers_0.pt.trace.json.gz"

out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """A result (or plain data) as JSON on stdout (encode.to_data): highlighted on a terminal; plain
    text for a pipe or a file, where Rich's rendering cost a second on an 8-rank job and bought nothing."""
    text = json.dumps(to_data(value), indent=2, ensure_ascii=False, allow_nan=False)
    if out.is_terminal:
        out.print_json(text)
    else:
        sys.stdout.write(text + "\n")


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
    bar = Progress(*columns, console=err, transient=True)
    task = bar.add_task("", total=None)

    def update(done: int, total: int, what: str) -> None:
        bar.update(task, completed=done, total=total, description=what, refresh=total == 1 and bar.live.is_started)
        if not bar.live.is_started:  # from the first update: its refresh thread would stop workers being forked
            # one file: drawn at each update only, with no refresh thread, so that a large file may be
            # read by two processes (trace/forked.py forks only where no other thread runs)
            bar.live.auto_refresh = total > 1
            bar.start()

    try:
        yield update
    finally:
        bar.stop()


def request_of(args: argparse.Namespace, path: str | None = None) -> AnalyzeRequest:
    """The one AnalyzeRequest a command's flags ask for (of `path`, default the command's trace):
    the only place the command line names an analysis option."""
    steps = getattr(args, "steps", None)
    return AnalyzeRequest(path or args.path, steps=steps.pattern if steps is not None else None,
                          settings=tuple(args.settings or ()), kernels=getattr(args, "kernels", None),
                          graph_capture=getattr(args, "graph_capture", None), max_bytes=args.max_bytes,
                          scheduler=args.scheduler, use_cache=not args.no_cache)


def run_request(request: AnalyzeRequest) -> Analysis:
    """Analyze with a progress bar on a terminal; a line on stderr for each rank file that failed,
    and one when the cache directory is not traceagent's (traces are then not cached)."""
    from .trace import cache

    with _progress_bar() as progress:
        result = api.run(request, progress=progress)
    if request.use_cache:
        try:
            cache.claim()
        except cache.NotOurCache as exc:
            err.print(f"traceagent: note: {exc}: traces are not cached (TRACEAGENT_CACHE_DIR)", markup=False)
    for failure in result.failed:
        err.print(f"traceagent: warning: {failure.file}: {failure.error} (skipped; the other ranks were analysed)",
                  markup=False)
    return result


def byte_size(text: str) -> int:
    """`--max-bytes SIZE`: 500MB, 20GB, 1GiB or a number of bytes."""
    from .trace.reading import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def at_least(low: float, kind: type = int):
    """An argparse type: a number of `kind` no smaller than `low` (a usage error otherwise)."""
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a {'whole ' if kind is int else ''}number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: expected at least {low:g}")
        return value
    return convert


def setting(text: str) -> str:
    """`--set NAME.PARAM=VALUE`, checked against the detectors' parameters before any loading."""
    from .detect.analysis import AnalysisParams

    try:
        AnalysisParams().with_settings([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def step_pattern(text: str) -> re.Pattern:
    """`--steps REGEX`, checked before any loading starts."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc})") from None


def info_dict(analysis: Analysis) -> dict:
    """What `info` reports, as plain data: read from the analysis, so each GPU's span is the
    number `analyze` gives, and a job's ranks are read where they are analysed (Dask for large ones)."""
    ranks = []
    for r in analysis.ranks:
        b = r.breakdown
        ranks.append({
            "rank": r.rank,
            "path": r.meta.path,
            "devices": {str(k): v for k, v in r.meta.devices.items()},
            "span_us": b.total.span_us if b.devices else 0.0,
            "device_spans_us": {str(d): part.span_us for d, part in b.devices.items()},
            "has_device_activity": r.findings.has_device_activity,
            "counts": r.counts,
            "profiler": r.meta.profiler,
            "warnings": r.meta.warnings,
        })
    return {"path": analysis.path, "format": analysis.format, "ranks": len(analysis.ranks),
            "world_size": analysis.ranks[0].meta.world_size, "traces": ranks,
            "failed_ranks": analysis.failed}


def cmd_info(args: argparse.Namespace) -> int:
    analysis = run_request(request_of(args))
    if args.json:
        print_json(info_dict(analysis))
        return 0
    say(f"[bold]{escape(analysis.path)}[/]  ({analysis.format}, {analysis.ranks[0].meta.profiler})")
    world = analysis.world_size
    table = Table("rank", "GPU", "span", "kernels", "memcpys", "memsets", "host calls", "steps",
                  title=f"{len(analysis.ranks)} rank(s)" + (f" of world size {world}" if world else "")
                  + "; each GPU over its own span")
    for r in analysis.ranks:
        c = r.counts
        # counts are per rank: on its first row
        counts = [str(c[k]) for k in ("kernels", "memcpys", "memsets", "runtime_calls", "steps")]
        if not r.breakdown.devices:
            table.add_row(str(r.rank), "none", "-", *counts)
        for i, (device, part) in enumerate(r.breakdown.devices.items()):
            named = r.meta.devices.get(device, f"GPU {device}")
            name = escape(str(device) if named == f"GPU {device}" else f"{device}: {named}")  # not "0: GPU 0"
            table.add_row(str(r.rank) if i == 0 else "", name, duration(part.span_us), *(counts if i == 0 else [""] * 5))
    out.print(table)
    for r in analysis.ranks:
        if not r.findings.has_device_activity:
            say(f"[yellow]{escape(r.meta.path)}: no device activity (a CPU-only trace): there is no GPU time to analyze.[/]")
        for warning in r.meta.warnings:
            say(f"[yellow]{escape(r.meta.path)}: {escape(warning)}[/]")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    result = run_request(request_of(args))
    if getattr(args, "json", False):
        print_json(result.record())
    else:
        print_analysis(result, out)
    return failed_gates(result, getattr(args, "fail_on", None) or [])


def failed_gates(result: Analysis, gates: list[tuple[str, float | None]]) -> int:
    """1 (after a line per gate) when a --fail-on gate is crossed: NAME:PCT when its share of the
    job's device time passes PCT; NAME alone when the verdict names it."""
    from .detect.compare.diff import job_share

    crossed = 0
    v = result.verdict
    for name, limit in gates:
        if limit is None:
            if name in (v.limiter, v.root_cause):
                err.print(f"traceagent: the verdict is {name}: {v.headline}", markup=False)
                crossed = 1
            continue
        share = job_share(result, name)
        if share > limit:
            err.print(f"traceagent: {name} is {share:.1f}% of the job's device time (limit {limit:g}%)", markup=False)
            crossed = 1
    return crossed


def range_gate(text: str) -> tuple[re.Pattern, float]:
    """--gate REGEX:PCT (the last colon splits: a regex may hold colons, as in aten::mm)."""
    pattern, _, limit = text.rpartition(":")
    try:
        return re.compile(pattern), float(limit)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{pattern!r} is not a regular expression ({exc})") from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected REGEX:PCT, e.g. 'forward:10', not {text!r}") from None


def fail_gate(text: str) -> tuple[str, float | None]:
    """--fail-on NAME[:PCT]: a limiter, root cause or gap cause, and a percentage."""
    from .detect.core.vocabulary import GAP_CAUSES, LIMITERS, ROOT_CAUSES

    name, _, limit = text.partition(":")
    names = list(dict.fromkeys([*LIMITERS, *ROOT_CAUSES, *GAP_CAUSES]))
    if name not in names:
        raise argparse.ArgumentTypeError(f"{name!r} is not one of: {', '.join(names)}")
    try:
        return name, float(limit) if limit else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{limit!r} is not a percentage") from None


def cmd_report(args: argparse.Namespace) -> int:
    from .outputs import check_output, write_atomically
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
    target, request = args.output, request_of(args)
    if target:
        check_output(target, args.path, side_inputs=request.inputs)
    result = run_request(request)
    if args.llm:
        summary = llm_summary(result, config)
        if summary is None:
            return 1
    if target and target.lower().endswith((".html", ".htm")):
        text = render_html(result, summary)
    else:
        text = render_markdown(result, summary)
    if not target:
        sys.stdout.write(text)
        return 0
    try:
        write_atomically(target, text)
    except OSError as exc:
        err.print(f"traceagent: error: {target}: cannot write the report ({exc.strerror})", markup=False)
        return 2
    err.print(f"wrote {target}", markup=False)
    return 0


def llm_summary(result: Analysis, config) -> str | None:
    """The report's summary paragraph, written by the model through the agent; numbers the tools
    did not return are marked. None (after one line on stderr) when the model fails."""
    import asyncio

    from .agent.events import Answer, Failure, Notice
    from .agent.llm import make_chat_model
    from .agent.prompts import report_request
    from .agent.session import Session
    from .agent.tools import AnalysisContext

    session = Session(AnalysisContext(result), make_chat_model(config), config)
    session.replace_marked = False  # the summary keeps its marks (its unverified numbers are listed under it)

    async def run() -> str | None:
        async for event in session.ask(report_request()):
            if isinstance(event, Failure) and event.kind in ("connection", "timeout", "rate_limit", "auth", "server"):
                err.print(f"traceagent: {event.message}", markup=False)
                return None
            if isinstance(event, Notice) and event.replaced_because:
                # a summary the model did not write must not be signed with its name
                err.print(f"traceagent: the model wrote no summary: {event.replaced_because}; no report written",
                          markup=False)
                return None
            if isinstance(event, Answer):
                if event.incomplete:  # a cut summary in a report would read as a finished one
                    err.print(f"traceagent: the model's summary is incomplete: {event.incomplete}; no report written",
                              markup=False)
                    return None
                text = event.text.strip()
                if event.unverified:
                    text += ("\n\n_Unverified numbers (in no tool result, check before quoting): "
                             + ", ".join(f"`{u}`" for u in event.unverified) + "_")
                return text + f"\n\n_Written by {config.model}; every other number in this report is a detector's._"
        return None

    return asyncio.run(run())


def cmd_kernels(args: argparse.Namespace) -> int:
    from .report.terminal import print_kernel_profiles

    result = read_kernel_profiles(args.ncu_csv)
    if args.json:
        print_json(result)
    else:
        print_kernel_profiles(result, out)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from .detect.compare.diff import diff, ranges_over
    from .report.markdown import render_diff_markdown

    before = run_request(request_of(args, args.before))
    after = run_request(request_of(args, args.after))
    result = diff(before, after)
    if args.json:
        print_json(result)
    else:
        from rich.markdown import Markdown
        out.print(Markdown(render_diff_markdown(result)))
    crossed = 0
    if args.fail_if_slower is not None and result.slower_pct > args.fail_if_slower:
        err.print(f"traceagent: after is {result.slower_pct:.1f}% slower than before "
                  f"(limit {args.fail_if_slower:g}%)", markup=False)
        crossed = 1
    for line in ranges_over(result, args.gate or []):
        err.print(f"traceagent: {line}", markup=False)
        crossed = 1
    return crossed


def cmd_profile(args: argparse.Namespace) -> int:
    """Record the command under torch.profiler, keep the run, analyse it, compare it with the last."""
    from dataclasses import replace

    from .profile.command import with_argument
    from .profile.record import ProfileError, record_run

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else list(args.cmd)
    tries = [pair(t, "--try") for t in args.tries or []]
    try:
        options = ProfileOptions(command=command, label=args.label, steps=args.steps, skip=args.skip,
                                 steps_on=args.steps_on, window=args.window, delay=args.delay,
                                 runs_dir=Path(args.runs_dir), max_mb=args.max_mb,
                                 public=dict(pair(e, "--env") for e in args.env or []), nsys=args.nsys, ncu=args.ncu,
                                 timeout=args.timeout)
        say_line = lambda line: err.print(f"traceagent: {line}", markup=False)  # noqa: E731
        if not tries:
            return _report_run(record_run(options, say_line))
        baseline = record_run(replace(options, label=args.label or "baseline"), say_line)
        if (code := _report_run(baseline)) != 0:
            return code
        changed = command
        for name, value in tries:
            if name.startswith("-"):
                changed = with_argument(changed, name, value)
        variant = replace(options, command=changed, label=", ".join(f"{n}={v}" for n, v in tries),
                          tried={n: v for n, v in tries if not n.startswith("-")},
                          tried_args=[f"{n}={v}" for n, v in tries if n.startswith("-")])
        return _report_run(record_run(variant, say_line))
    except (ProfileError, ValueError) as exc:
        err.print(f"traceagent: error: {exc}", markup=False, soft_wrap=True)
        return 2


def pair(text: str, option: str) -> tuple[str, str]:
    """NAME=VALUE, as --env and --try take it; ValueError saying what was expected."""
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise ValueError(f"{option} {text!r}: expected NAME=VALUE (an environment variable, or a script option "
                         "such as --num-workers=4)")
    return name, value


def _report_run(recorded: Recorded) -> int:
    """What a profile run found: the analysis as `analyze` prints it, then the run and its comparison."""
    r = recorded.record
    if recorded.analysis is not None:
        print_analysis(recorded.analysis, out)
    for note in r.notes:
        err.print(f"traceagent: note: {note}", markup=False, soft_wrap=True)
    state = {"ok": "recorded", "failed": f"the script failed (exit status {r.exit_code}); kept",
             "interrupted": "interrupted; kept", "no trace": "the script finished without a trace; kept"}[r.status]
    err.print(f"traceagent: {state}: {recorded.folder} ({len(r.traces)} trace(s), {r.steps_seen} steps seen)",
              markup=False, soft_wrap=True)
    if r.comparison:
        out.print(f"Compared with {r.baseline}: {r.comparison}", markup=False, soft_wrap=True)
    if r.status in ("failed", "interrupted"):
        return r.exit_code or 1
    return 0 if r.traces else 1


def cmd_runs(args: argparse.Namespace) -> int:
    """The recorded runs, or two of them compared."""
    from .profile import runs
    from .report.runs import print_runs

    folder = Path(args.runs_dir)
    if args.action == "list":
        if args.output:
            from .outputs import write_atomically
            from .report.runs import render_runs_html

            try:
                write_atomically(args.output, render_runs_html(runs.all_runs(folder)))
            except OSError as exc:
                err.print(f"traceagent: error: {args.output}: cannot write it ({exc.strerror})", markup=False)
                return 2
            err.print(f"wrote {args.output}", markup=False)
        if args.json:
            print_json([record for _, record in runs.all_runs(folder)])
            return 0
        return print_runs(runs.all_runs(folder), out)
    if len(args.names) != 2:
        err.print("traceagent: error: runs diff takes two runs: their ids (or a unique start), or positions "
                  "(1 the oldest, -1 the newest)", markup=False)
        return 2
    try:
        (a_dir, a), (b_dir, b) = (runs.find(folder, name) for name in args.names)
    except ValueError as exc:
        err.print(f"traceagent: error: {exc}", markup=False, soft_wrap=True)
        return 2
    from .detect.compare.diff import diff
    from .report.markdown import render_diff_markdown

    for run in (a, b):
        if not run.traces:
            err.print(f"traceagent: error: run {run.id} has no trace ({run.status}); nothing to compare", markup=False)
            return 2
    result = diff(api.analyze(str(a_dir / "traces")), api.analyze(str(b_dir / "traces")))
    if args.json:
        print_json({"before": a, "after": b, "differences": runs.differences(a, b), "diff": result})
        return 0
    from rich.markdown import Markdown

    out.print(Markdown(render_diff_markdown(result)))
    others = runs.differences(a, b)
    out.print("What else differs between the runs: " + ("; ".join(others) if others else "nothing recorded (same "
              "command, commit, versions, GPUs and environment)"), markup=False, soft_wrap=True)
    return 0


def cmd_scaling(args: argparse.Namespace) -> int:
    """How the job scales across runs of different sizes."""
    from .detect.compare.scaling import scaling, world_size
    from .report.scaling import print_scaling

    measured = []
    runs = [run.rpartition("@")[::2] if "@" in run else (run, "") for run in args.runs]  # (path, N or "")
    if args.output:
        from .outputs import check_output

        for path, _ in runs:  # never one of the runs it reads
            check_output(args.output, path)
    for path, size in runs:
        if Path(path, "run.json").is_file():  # a `traceagent profile` run: its traces
            path = str(Path(path, "traces"))
        analysis = run_request(request_of(args, path))
        world = int(size) if size.isdigit() else world_size(analysis)
        if world is None:
            err.print(f"traceagent: error: {path}: its world size is not in the trace (one rank, no distributedInfo): "
                      f"say it as {path}@N", markup=False)
            return 2
        measured.append((analysis, world))
    try:
        result = scaling(measured, mode="strong" if args.strong else "weak" if args.weak else None,
                         project=args.project, gpus_per_node=args.gpus_per_node, force=args.force)
    except ValueError as exc:
        err.print(f"traceagent: error: {exc}", markup=False, soft_wrap=True)
        return 2
    if args.output:
        from .outputs import write_atomically
        from .report.scaling import render_scaling_html, render_scaling_markdown

        render = render_scaling_html if args.output.lower().endswith((".html", ".htm")) else render_scaling_markdown
        try:
            write_atomically(args.output, render(result))
        except OSError as exc:
            err.print(f"traceagent: error: {args.output}: cannot write the report ({exc.strerror})", markup=False)
            return 2
        err.print(f"wrote {args.output}", markup=False)
    if args.json:
        print_json(result)
    else:
        print_scaling(result, out)
    gate = args.fail_below_efficiency
    if gate is not None and result.runs[-1].efficiency_pct < gate:
        err.print(f"traceagent: efficiency {result.runs[-1].efficiency_pct:.1f}% at {result.runs[-1].world_size} GPUs is "
                  f"below {gate:g}%", markup=False)
        return 1
    return 0


def sizes(text: str) -> list[int]:
    """--project 64,128"""
    try:
        found = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected world sizes such as 64,128") from None
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected world sizes such as 64,128")
    return found


def cmd_whatif(args: argparse.Namespace) -> int:
    """What the changes would buy, replayed on the rank's dependency graph."""
    from .detect.verdict.whatif import parse_change, simulate_replay, whatif_sentence

    try:  # before the trace is read: a typo costs nothing
        changes = [parse_change(spec) for spec in args.change]
    except ValueError as exc:
        err.print(f"traceagent: error: {exc}", markup=False)
        return 2
    if args.output:
        from .outputs import check_output

        check_output(args.output, args.path)  # never the trace it reads
    analysis = run_request(request_of(args))
    try:
        rank = analysis.rank(args.rank)
    except KeyError:
        err.print(f"traceagent: error: {args.path}: no rank {args.rank}; the ranks are "
                  f"{', '.join(str(r.rank) for r in analysis.ranks)}", markup=False)
        return 2
    try:
        simulation = simulate_replay(rank.trace, changes)
    except ValueError as exc:
        err.print(f"traceagent: error: {args.path}: {exc}", markup=False)
        return 2
    if simulation is None:
        err.print(f"traceagent: error: {args.path}: rank {rank.rank} has no device work to replay", markup=False)
        return 2
    result = simulation.result
    if args.output:
        from .report.simulated import write_simulated

        try:
            written = write_simulated(rank.trace, simulation, args.output)
        except OSError as exc:
            err.print(f"traceagent: error: {args.output}: cannot write the simulated trace ({exc.strerror})", markup=False)
            return 2
        err.print(f"wrote {args.output}: rank {result.rank} replayed with {', '.join(args.change)} ({written} events; "
                  "open it in https://ui.perfetto.dev, or compare: traceagent diff TRACE SIMULATED)", markup=False)
    if args.json:
        print_json(result)
        return 0
    out.print(escape(whatif_sentence(result)))
    out.print(f"rank {result.rank}: measured {result.basis} {duration(result.measured_us)}, unchanged replay "
              f"{duration(result.replayed_us)}, predicted {duration(result.predicted_us)}", markup=False)
    for applied in result.changes:
        out.print(f"- {applied.spec}: {applied.matched} changed; {applied.assumption}", markup=False)
    for assumption in result.assumptions[len(result.changes):]:
        out.print(f"- assumed: {assumption}", markup=False)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """One question, the answer on stdout; tool calls on stderr with -v."""
    import asyncio

    from .agent.events import Answer, Cancelled, Failure, Notice, Token, ToolCall, ToolResult
    from .agent.llm import load_config, make_chat_model
    from .agent.session import Session
    from .agent.tools import AnalysisContext

    config = load_config()
    request = request_of(args)
    analysis = run_request(request)
    other = run_request(request.of_other(args.compare)) if args.compare else None
    session = Session(AnalysisContext(analysis, other), make_chat_model(config) if config else None, config)
    if args.verbose:
        err.print(session.describe_model(), style="dim", markup=False)

    async def run() -> int:
        answered = streamed = False
        async for event in session.ask(args.question):
            if isinstance(event, Token):
                sys.stdout.write(event.text)
                sys.stdout.flush()
                streamed = True
            elif isinstance(event, Notice) and event.replaced_because and streamed:
                sys.stdout.write("\n\n")  # the detectors' answer follows what streamed, apart (the note says why)
                streamed = False
                err.print(f"traceagent: note: {event.message}", markup=False)
            elif isinstance(event, ToolCall) and args.verbose:
                err.print(f"tool: {event.name}({json.dumps(event.args)})", markup=False)
            elif isinstance(event, ToolResult) and args.verbose:
                err.print(f"  → {event.summary}", markup=False)
            elif isinstance(event, Failure):
                err.print(f"traceagent: {event.message}", markup=False)
            elif isinstance(event, Notice) and (args.verbose or not event.progress):
                err.print(f"traceagent: note: {event.message}", markup=False)
            elif isinstance(event, Cancelled):
                err.print("traceagent: cancelled", markup=False)
            elif isinstance(event, Answer):
                answered = not event.incomplete
                sys.stdout.write("\n")
                if event.incomplete:
                    err.print(f"traceagent: incomplete answer: {event.incomplete}", markup=False)
                if event.unverified:
                    err.print(f"traceagent: unverified numbers (in no tool result): {', '.join(event.unverified)}",
                              markup=False)
                for warning in event.warnings:
                    err.print(f"traceagent: warning: {warning}", markup=False)
        return 0 if answered else 1

    return asyncio.run(run())


def cmd_eval(args: argparse.Namespace) -> int:
    """The eval questions against a model server; a table (or JSON) of how each answer fared."""
    import asyncio

    from rich.table import Table

    from .agent.evaluate import Result, as_dicts, run_eval
    from .agent.llm import load_config, make_chat_model
    from .agent.session import Session

    env = dict(os.environ)  # the flags win over the environment; every other setting is read as `ask` reads it
    env |= {"OPENAI_BASE_URL": args.base_url} if args.base_url else {}
    env |= {"TRACEAGENT_MODEL": args.model} if args.model else {}
    config = load_config(env)
    if config is None:
        err.print("traceagent: error: eval needs a model server: --base-url URL (or OPENAI_BASE_URL / OPENAI_API_KEY)",
                  markup=False)
        return 2
    request = request_of(args, args.path or example_trace())
    analysis = run_request(request)
    other = run_request(request.of_other(args.compare)) if args.compare else None
    err.print(f"traceagent eval: {config.describe()} on {analysis.path}", markup=False)
    done: list[Result] = []
    status = err.status("") if args.verbose and err.is_terminal else None

    def shown(r: Result) -> None:
        done.append(r)
        line = (f"{len(done)} done · {'skipped' if r.answered_by == 'skipped' else 'agrees' if r.agrees else 'differs'}"
                f" · {r.seconds:g} s · {r.question}")
        if status is not None:  # -v on a terminal: one line, updated as each answer comes
            status.update(line)
        else:
            err.print(f"  {line}", markup=False)

    if status is not None:
        status.start()
    try:
        results = asyncio.run(run_eval(analysis, lambda ctx: Session(ctx, make_chat_model(config), config),
                                       on_result=shown, other=other))
    finally:
        if status is not None:
            status.stop()
    if args.json:
        print_json({"model": config.model, "server": config.shown_url, "results": as_dicts(results)})
        return 0
    asked = [r for r in results if r.answered_by != "skipped"]
    by_model = [r for r in asked if r.answered_by == "model"]
    title = (f"{config.model}: {sum(r.agrees for r in by_model)} of the {len(by_model)} answers the model wrote agree "
             f"with the detectors; {len(asked) - len(by_model)} of {len(asked)} answered from the detectors"
             + (f"; {len(results) - len(asked)} skipped" if len(asked) < len(results) else ""))
    columns = ("question", "tools called", "rounds", "time", "flagged", "answered by", "agrees")
    rows = [[r.question, ", ".join(r.tools) or "none", str(r.rounds), f"{r.seconds:g} s", str(len(r.flagged)),
             r.answered_by, ("yes" if r.agrees else "-" if r.answered_by == "skipped" else "no") + f" ({r.why})"]
            for r in results]
    if not out.is_terminal:  # piped: a Markdown table, whole, whatever the width (Rich would fold it to 80 columns)
        sys.stdout.write("\n".join([title, "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns),
                                     *("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows)])
                         + "\n")
        return 0
    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*row)
    out.print(table)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """The chat app. Without a terminal (a pipe, CI) it prints the analysis instead."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        err.print("traceagent: not a terminal, so no chat: printing the analysis instead", markup=False)
        return cmd_analyze(args)
    from .agent.llm import load_config, make_chat_model
    from .tui.app import TraceAgentApp

    config = load_config()
    request = request_of(args)
    compare = request.of_other(args.compare) if getattr(args, "compare", None) else None
    for path in (args.path, getattr(args, "compare", None), request.graph_capture):
        if path:
            resolve(path)  # a missing path is one line and exit 2 here, not an error inside the app
    if request.kernels:
        read_kernel_profiles(request.kernels)  # likewise a bad Nsight Compute export
    app = TraceAgentApp(request, compare=compare, model=make_chat_model(config) if config else None, config=config)
    app.run()
    return app.return_code or 0


def cmd_demo(args: argparse.Namespace) -> int:
    args.path = example_trace()
    args.compare = None
    err.print("traceagent demo: the bundled ResNet50 trace (PyTorch Profiler, V100, DataLoader with num_workers=0)",
              markup=False)
    return cmd_chat(args)


def cmd_annotate(args: argparse.Namespace) -> int:
    """The trace with its findings on extra tracks, for Perfetto UI or chrome://tracing."""
    from .outputs import check_output
    from .report.annotate import annotate

    files = check_output(args.output, args.path).files
    result = run_request(request_of(args))
    try:
        added = annotate(result, storage.absolute(files[0]), args.output, args.max_bytes)
    except OSError as exc:
        err.print(f"traceagent: error: {args.output}: cannot write the annotated trace ({exc.strerror})", markup=False)
        return 2
    err.print(f"wrote {args.output}: {added} finding events on the \"traceagent findings\" tracks "
              "(open it in https://ui.perfetto.dev or chrome://tracing)", markup=False)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """The JSON Schema of analyze --json or diff --json (both without an argument)."""
    from .schema import SCHEMAS

    schema = SCHEMAS[args.which]() if args.which else {name: make() for name, make in SCHEMAS.items()}
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """`cache info`: where the cache is, what it holds, its cap; `cache clear`: empty it."""
    from .format import size
    from .trace import cache

    if args.action == "clear":
        try:
            removed = cache.clear()
        except cache.NotOurCache as exc:
            err.print(f"traceagent: error: {exc}; nothing was removed. Point TRACEAGENT_CACHE_DIR at a directory of "
                      "its own (the default is ~/.cache/traceagent).", markup=False, soft_wrap=True)
            return 2
        say(f"removed {len(removed)} entries ({escape(size(sum(e.bytes for e in removed)))}) from "
            f"{escape(str(cache.cache_dir()))}")
        return 0
    directory = cache.cache_dir()
    try:
        if directory.exists():
            cache.claim(directory)  # a cache from before the mark is marked; anything else is said
    except cache.NotOurCache as exc:
        if args.json:
            print_json({"directory": str(directory), "ours": False, "why": exc.why})
        else:
            say(f"{escape(str(exc))}: traces are not cached. Point TRACEAGENT_CACHE_DIR at a directory of its own.")
        return 0
    found = cache.entries()
    kept = [e for e in found if not e.temporary]
    temporary = [e for e in found if e.temporary]
    held, cap = sum(e.bytes for e in kept), cache.max_bytes()
    if args.json:
        print_json({"directory": str(directory), "ours": True, "entries": len(kept), "bytes": held, "max_bytes": cap,
                    "temporary_entries": len(temporary), "temporary_bytes": sum(e.bytes for e in temporary)})
        return 0
    say(f"{escape(str(directory))}: {len(kept)} entries, {size(held)} of {size(cap)} "
        "($TRACEAGENT_CACHE_MAX; the least recently used go first)"
        + (f"; {len(temporary)} being written or left by a killed run ({size(sum(e.bytes for e in temporary))})"
           if temporary else ""))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """The MCP server: stdout carries the protocol, so nothing else is printed there."""
    import asyncio

    from .mcp_server import serve

    asyncio.run(serve(allow_remote=args.allow_remote))
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (what is wrong, where to read more), exit 2: the usage block
    above it would bury the line that says what to fix."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` for usage)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="traceagent", description="Find what limits a GPU program from its profiler trace.",
                                     formatter_class=RichHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func, help: str, path: bool = True, json: bool = False) -> argparse.ArgumentParser:
        """A command; `json` only where the command prints data (elsewhere --json is a usage error)."""
        p = sub.add_parser(name, help=help, description=help, formatter_class=RichHelpFormatter)
        if path:
            p.add_argument("path", help="trace file (.json, .json.gz, .sqlite), a directory of per-rank traces, or a "
                                        "quoted glob of rank files ('run/rank*.json'); local, or a URL (s3://…) "
                                        "where its fsspec package is installed")
        p.add_argument("--no-cache", action="store_true", help="parse the trace again instead of reading the cache")
        p.add_argument("--max-bytes", type=byte_size, metavar="SIZE",
                       help="the most text one trace file may hold once gunzipped (e.g. 20GB; default: the memory "
                            "available); with it set, a gzip may also inflate more than 200×")
        p.add_argument("--scheduler", metavar="WHERE", default=None,
                       help="where the ranks of a job are analysed: auto (default, or $TRACEAGENT_SCHEDULER): a "
                            "Dask cluster on this machine for large multi-rank jobs; local; none (this process); "
                            "or a Dask scheduler's address (tcp://host:8786)")
        p.add_argument("--set", dest="settings", type=setting, action="append", metavar="NAME.PARAM=VALUE",
                       help="a detector's threshold (idle.launch_gap_us=50, verdict.idle_pct=20, "
                            "host_pauses.min_idle_us=0; `traceagent analyze --json` lists them under params); "
                            "repeatable")
        if name != "info":
            p.add_argument("--steps", type=step_pattern, metavar="REGEX",
                           help="host ranges (record_function / NVTX) whose names match REGEX are the iterations "
                                "(default: ProfilerStep#N, else ranges named like step_N or train_step)")
        if name in ("analyze", "report", "ask", "chat"):
            p.add_argument("--kernels", metavar="NCU_CSV",
                           help="an Nsight Compute export (ncu --csv --page details or raw): why each profiled "
                                "kernel is slow, joined to the trace's kernels of the same name")
        if name in ("analyze", "report", "ask", "chat"):
            p.add_argument("--graph-capture", metavar="TRACE",
                           help="a trace of the CUDA-graph capture (vLLM writes them apart): kernels replayed from "
                                "graphs take the ops around their launches in it")
        if json:
            p.add_argument("--json", action="store_true", help="print JSON instead of tables")
        p.set_defaults(func=func)
        return p

    add("info", cmd_info, "what a trace holds: format, ranks, devices, span, event counts", json=True)
    analyze = add("analyze", cmd_analyze, "find what limits the program: idle gaps and causes, copies, communication, "
                  "hot kernels, and the verdict", json=True)
    analyze.add_argument("--fail-on", type=fail_gate, action="append", metavar="NAME[:PCT]",
                         help="exit 1 when NAME (a limiter, root cause or idle cause: idle, dataloader, sync, "
                              "communication, straggler…) passes PCT%% of the job's device time, or without PCT "
                              "when the verdict names it; repeatable")
    report = add("report", cmd_report, "write the diagnosis: Markdown, or self-contained HTML with charts")
    report.add_argument("-o", "--output", help="diagnosis.md or diagnosis.html (default: Markdown on stdout)")
    report.add_argument("--llm", action="store_true", help="add a summary paragraph written by the configured model "
                        "(its numbers checked against the detectors)")
    compare = add("diff", cmd_diff, "compare a trace before and after a change", path=False, json=True)
    compare.add_argument("before", help="trace (or rank directory) before the change")
    compare.add_argument("after", help="trace (or rank directory) after the change")
    compare.add_argument("--fail-if-slower", type=float, metavar="PCT",
                         help="exit 1 when the step time (or span) grew by more than PCT percent")
    compare.add_argument("--gate", type=range_gate, action="append", metavar="REGEX:PCT",
                         help="exit 1 when a record_function / NVTX range whose name matches REGEX grew by more than "
                              "PCT percent of its host time per step; repeatable")
    whatif = add("whatif", cmd_whatif, "predict what a change would buy by replaying the trace's dependency graph",
                 json=True)
    whatif.add_argument("--change", action="append", required=True, metavar="SPEC",
                        help=f"{', '.join(CHANGES)}; repeatable (the changes are made together)")
    whatif.add_argument("--rank", type=int, default=None, help="the rank to replay (default: the verdict's)")
    whatif.add_argument("-o", "--output", help="also write the replayed rank as a trace: simulated.json(.gz), for "
                                               "Perfetto or `traceagent diff TRACE simulated.json.gz`")
    profile = sub.add_parser("profile", help="run a script under torch.profiler, keep the run, analyse it and compare "
                             "it with the last run", description="traceagent profile [OPTIONS] -- python train.py ARGS "
                             "(or -m module, or torchrun …): the script runs unchanged; each optimizer step is a step. "
                             "The run is kept under --runs-dir.", formatter_class=RichHelpFormatter)
    profile.add_argument("--label", help="what this run tries (shown by `traceagent runs`)")
    profile.add_argument("--steps", type=at_least(1), default=ProfileOptions.steps,
                         help=f"steps to record (default {ProfileOptions.steps})")
    profile.add_argument("--skip", type=at_least(0), default=ProfileOptions.skip, help="steps to run first without "
                         f"recording (default {ProfileOptions.skip}): warm-up and compilation")
    profile.add_argument("--steps-on", metavar="MODULE:FUNCTION", help="without an optimizer (inference): each return "
                         "of this function is a step, e.g. mymodel.generate:decode_step")
    profile.add_argument("--window", type=at_least(0.001, float), metavar="SECONDS",
                         help="record this many seconds instead of steps")
    profile.add_argument("--delay", type=at_least(0.0, float), default=0.0, metavar="SECONDS",
                         help="with --window: start recording this long after the start")
    profile.add_argument("--try", dest="tries", action="append", metavar="NAME=VALUE",
                         help="record the command as it is, then with this environment variable set (or script option "
                              "changed: --num-workers=4), and compare; repeatable")
    profile.add_argument("--env", action="append", metavar="NAME=VALUE",
                         help="an environment variable whose value the run record may keep (others: name only)")
    profile.add_argument("--runs-dir", default=str(RUNS_DIR), help=f"where runs are kept (default {RUNS_DIR})")
    profile.add_argument("--timeout", type=at_least(0.001, float), metavar="SECONDS",
                         help="interrupt the command after this long (as Ctrl+C would) and keep what it recorded")
    profile.add_argument("--max-mb", type=at_least(0), default=2048, help="the largest trace kept, in MB (default 2048)")
    profile.add_argument("--nsys", action="store_true", help="record under Nsight Systems (CUDA, NVTX, OS runtime, "
                                                             "Python sampling) instead of torch.profiler")
    profile.add_argument("--ncu", nargs="?", const="", metavar="REGEX",
                         help="then run it under Nsight Compute on the kernels matching REGEX (default: the last run's "
                              "hot kernels) and join why each is slow to the trace")
    profile.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="python train.py ARGS, python -m "
                                                                                      "module ARGS, or torchrun …")
    profile.set_defaults(func=cmd_profile)
    runs_cmd = sub.add_parser("runs", help="the recorded runs (list), or two of them compared (diff A B)",
                              description="Runs recorded by `traceagent profile`: step time, limiter and root cause "
                                          "of each; `runs diff A B` compares two and says what else differed.",
                              formatter_class=RichHelpFormatter)
    runs_cmd.add_argument("action", nargs="?", choices=["list", "diff"], default="list")
    runs_cmd.add_argument("names", nargs="*", metavar="RUN", help="with diff: two runs (id, a unique start of one, "
                                                                  "or a position: 1 the oldest, -1 the newest)")
    runs_cmd.add_argument("--runs-dir", default=str(RUNS_DIR), help=f"where runs are kept (default {RUNS_DIR})")
    runs_cmd.add_argument("--json", action="store_true", help="print JSON instead of tables")
    runs_cmd.add_argument("-o", "--output", metavar="RUNS.HTML", help="also write the runs as a page with the chart of "
                                                                       "step time run by run")
    runs_cmd.set_defaults(func=cmd_runs)
    scale = add("scaling", cmd_scaling, "how the job scales across runs of different sizes: efficiency, where it was "
                "lost, the communication model, and what more GPUs would buy", path=False, json=True)
    scale.add_argument("runs", nargs="+", metavar="RUN", help="a trace, a rank directory or a `traceagent profile` run; "
                                                              "RUN@N gives its world size where the trace does not")
    kind = scale.add_mutually_exclusive_group()
    kind.add_argument("--strong", action="store_true", help="the same total work at every size")
    kind.add_argument("--weak", action="store_true", help="the same work per GPU at every size")
    scale.add_argument("--project", type=sizes, metavar="N,N", help="predict the step time at these world sizes")
    scale.add_argument("--gpus-per-node", type=at_least(1), default=8, help="groups larger than this cross nodes (default 8)")
    scale.add_argument("-o", "--output", help="also write the report: scaling.md, or scaling.html with the chart of "
                                               "step time by world size")
    scale.add_argument("--force", action="store_true", help="compare runs that run other kernels (another model, "
                                                            "precision or code) all the same")
    scale.add_argument("--fail-below-efficiency", type=float, metavar="PCT",
                       help="exit 1 when the largest run's parallel efficiency is below PCT percent")
    ask = add("ask", cmd_ask, "ask one question about a trace (an LLM if configured, else the offline analyst)")
    ask.add_argument("question")
    ask.add_argument("--compare", metavar="OTHER", help="a second trace (after a change) to compare with")
    ask.add_argument("-v", "--verbose", action="store_true", help="show the model and its tool calls on stderr")
    chat = add("chat", cmd_chat, "talk about a trace in the terminal app (an LLM if configured, else the offline analyst)")
    chat.add_argument("--compare", metavar="OTHER", help="a second trace (after a change) to compare with")
    add("demo", cmd_demo, "open the chat app on the bundled example trace (no setup needed)", path=False)
    evaluate = add("eval", cmd_eval, "ask a model server a fixed set of questions about a trace and score each answer "
                   "against the detectors", path=False, json=True)
    evaluate.add_argument("path", nargs="?", help="the trace (default: the bundled example)")
    evaluate.add_argument("--compare", metavar="OTHER", help="a trace after a change: adds the comparison question "
                                                             "both ways (one of them got slower)")
    evaluate.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 "
                                             "(default: OPENAI_BASE_URL)")
    evaluate.add_argument("-v", "--verbose", action="store_true",
                          help="progress as one updating line on a terminal (a line per answer otherwise)")
    evaluate.add_argument("--model", help="the model name to send (default: TRACEAGENT_MODEL, else the server's "
                                          "first model at /v1/models)")
    annotate = add("annotate", cmd_annotate, "write the trace with the findings on extra timeline tracks "
                   "(gaps by cause, steps, exposed communication, hot kernels, the verdict)")
    annotate.add_argument("-o", "--output", required=True, help="annotated.json or annotated.json.gz")
    kernels = sub.add_parser("kernels", help="why each kernel in an Nsight Compute CSV export is slow",
                             description="Read `ncu --csv --page details` (or `--page raw`) output: each kernel's "
                                         "compute and memory throughput (% of peak), occupancy and its limiter, warp "
                                         "stalls, classified memory-, compute- or latency-bound, with the next step. "
                                         "With a trace, use `traceagent analyze TRACE --kernels NCU_CSV`.",
                             formatter_class=RichHelpFormatter)
    kernels.add_argument("ncu_csv", help="the export (.csv, or .csv.gz)")
    kernels.add_argument("--json", action="store_true", help="print JSON instead of a table")
    kernels.set_defaults(func=cmd_kernels)
    schema = sub.add_parser("schema", help="print the JSON Schema of analyze, diff and scaling --json",
                            description="The JSON Schemas of traceagent's JSON output (schema_version in each).",
                            formatter_class=RichHelpFormatter)
    schema.add_argument("which", nargs="?", choices=["analyze", "diff", "scaling"], help="one of them (default: all)")
    schema.set_defaults(func=cmd_schema)
    cache = sub.add_parser("cache", help="what the cache of parsed traces holds (info), or empty it (clear)",
                           description="Parsed traces are cached in $TRACEAGENT_CACHE_DIR (default "
                                       "~/.cache/traceagent), up to $TRACEAGENT_CACHE_MAX (default 2GB).",
                           formatter_class=RichHelpFormatter)
    cache.add_argument("action", choices=["info", "clear"])
    cache.add_argument("--json", action="store_true", help="info as JSON")
    cache.set_defaults(func=cmd_cache)
    mcp = sub.add_parser("mcp", help="serve the detector tools to coding agents over MCP (stdio)",
                         description="A Model Context Protocol server on stdin/stdout for Claude Code, Cursor, VS Code: "
                                     "open_trace, list_traces and the chat's detector tools.",
                         formatter_class=RichHelpFormatter)
    mcp.add_argument("--allow-remote", action="store_true",
                     help="let open_trace read URLs (s3://, gs://, any fsspec scheme): the server then connects to "
                          "hosts the client names; local paths only without it")
    mcp.set_defaults(func=cmd_mcp)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so that what it was writing is cleaned up as for Ctrl+C."""


@contextmanager
def _terminate_like_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM (a job scheduler's stop, `kill`) unwinds like SIGINT:
    temporary files are removed and the exit status is 143. The previous handler comes back after."""
    import signal
    import threading

    def terminated(signum, frame) -> NoReturn:
        raise Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _try_values_joined(argv: list[str]) -> list[str]:
    """`--try --num-workers=4` as `--try=--num-workers=4`: argparse would read a value that starts
    with a dash as another option. Only before `--` (the user's command is theirs)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] == "--try" and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] != "--":
            out.append(f"--try={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    from .agent.llm import ConfigError

    args = build_parser().parse_args(_try_values_joined(sys.argv[1:] if argv is None else argv))
    prepare_for_large_arrays()
    # where tools run through LangChain
    if args.command in ("ask", "chat", "demo", "mcp", "eval") or getattr(args, "llm", False):
        from .agent.llm import tracing_notice

        if notice := tracing_notice(dict(os.environ)):
            err.print(f"traceagent: note: {notice}", markup=False)
    try:
        with _terminate_like_interrupt():
            return args.func(args)
    except (TraceError, ConfigError, SchedulerError) as exc:
        err.print(f"traceagent: error: {exc}", markup=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("traceagent: interrupted")
        return 130
    except Terminated:
        err.print("traceagent: terminated", markup=False)
        return 143
    except MemoryError:
        from .format import size
        from .trace.reading import available_memory

        err.print(f"traceagent: error: out of memory (this process may take {size(available_memory())} more now: the "
                  "machine's free memory, its cgroup and `ulimit -v` all count). Read the trace where more memory is "
                  "free, or profile fewer steps.", markup=False, soft_wrap=True)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
