"""The `traceagent` command: info · analyze · demo."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from importlib import resources
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import TraceError
from .trace.load import load
from .trace.model import Job

EXAMPLE_TRACE = "resnet50_num_workers_0.pt.trace.json.gz"

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


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


def _fmt_ns(ns: int | float) -> str:
    us = ns / 1000
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


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
    out.print(f"[bold]{job.path}[/]  ({data['format']}, {data['traces'][0]['profiler']})")
    table = Table("rank", "devices", "span", "kernels", "memcpys", "memsets", "host calls", "steps",
                  title=f"{data['ranks']} rank(s)" + (f" of world size {data['world_size']}" if data['world_size'] else ""))
    for r in data["traces"]:
        c = r["counts"]
        devices = ", ".join(f"{k}: {v}" for k, v in r["devices"].items()) or "none"
        table.add_row(str(r["rank"]) if r["rank"] is not None else "-", devices,
                      _fmt_ns(r["span_us"] * 1000) if r["has_device_activity"] else "-",
                      str(c["kernels"]), str(c["memcpys"]), str(c["memsets"]), str(c["runtime_calls"]),
                      str(c["steps"]))
    out.print(table)
    for r in data["traces"]:
        if not r["has_device_activity"]:
            out.print(f"[yellow]{r['path']}: no device activity (a CPU-only trace): there is no GPU time to analyze.[/]")
        for warning in r["warnings"]:
            out.print(f"[yellow]{r['path']}: {warning}[/]")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    args.path = example_trace()
    out.print("[dim]traceagent demo: the bundled ResNet50 trace (PyTorch Profiler, V100, DataLoader with num_workers=0)[/]")
    return cmd_info(args)


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
    add("demo", cmd_demo, "run on the bundled example trace (no setup needed)", path=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TraceError as exc:
        err.print(f"traceagent: error: {exc}", markup=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("traceagent: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
