#!/usr/bin/env python3
"""Small PyTorch programs that each plant one limiter, recorded with torch.profiler.

    python tools/gpu_workloads.py --out traces/           # every workload, on CUDA when present
    python tools/gpu_workloads.py --out t/ --only sync_item --steps 4

Each workload writes `<name>.pt.trace.json.gz` and `<name>.truth.json`: the verdict traceagent
should reach (`expect`), or for a fix, the root cause it must no longer report (`expect_not`).
On a machine without CUDA the same programs run on the CPU and produce CPU-only traces, whose
truth is "no device activity".
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


@dataclass(frozen=True)
class Workload:
    name: str
    run: Callable[[Context], Callable[[], None]]  # set-up → one training step
    expect: dict | None = None  # limiter / root_cause on a GPU
    expect_not: dict | None = None  # for fixes: what must be gone
    fix_of: str | None = None


@dataclass(frozen=True)
class Context:
    device: torch.device
    scale: float  # 1.0 on a GPU; small on the CPU so tests stay quick

    def n(self, full: int, least: int = 1) -> int:
        return max(least, int(full * self.scale))


# -- the workloads -------------------------------------------------------------------------------

class SlowDataset(torch.utils.data.Dataset):
    """Each sample costs host time, as decoding and augmenting images does."""

    def __init__(self, size: int, features: int, delay_s: float) -> None:
        self.size, self.features, self.delay_s = size, features, delay_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)
        return torch.randn(self.features), torch.randint(0, 10, ())


def _model(ctx: Context, width: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10)).to(ctx.device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def _dataloader(ctx: Context, workers: int):
    # one batch costs 32 ms of host time to load and about 10 ms of GPU time to train on: loading
    # in the main process starves the GPU; 8 workers load a batch every 4 ms, faster than the GPU
    width = ctx.n(2048, 64)
    data = SlowDataset(size=10_000, features=width, delay_s=0.001)
    workers = min(workers, os.cpu_count() or 1)
    loader = torch.utils.data.DataLoader(data, batch_size=32, num_workers=workers, pin_memory=workers > 0,
                                         persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
    model, opt = _model(ctx, width)
    heavy = torch.randn(ctx.n(8192, 64), ctx.n(8192, 64), device=ctx.device)
    batches = iter(loader)

    def step() -> None:
        x, y = next(batches)
        x, y = x.to(ctx.device, non_blocking=True), y.to(ctx.device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        h = heavy
        for _ in range(8):  # the rest of a real model's forward and backward
            h = (h @ heavy) * 1e-4
    return step


def dataloader_slow(ctx: Context):
    return _dataloader(ctx, workers=0)


def dataloader_fixed(ctx: Context):
    return _dataloader(ctx, workers=8)


def _sync(ctx: Context, every: int):
    width = ctx.n(4096, 64)
    model, opt = _model(ctx, width)
    x = torch.randn(256, width, device=ctx.device)
    y = torch.randint(0, 10, (256,), device=ctx.device)
    state = {"i": 0, "total": torch.zeros((), device=ctx.device)}

    def step() -> None:
        for _ in range(4):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            state["total"] += loss.detach()
            state["i"] += 1
            if state["i"] % every == 0:
                value = state["total"].item()  # the hidden synchronization
                _host_bookkeeping(value)
    return step


def _host_bookkeeping(value: float) -> None:
    """Logging-like host work after reading a value from the GPU."""
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass


def sync_item(ctx: Context):
    return _sync(ctx, every=1)


def sync_item_fixed(ctx: Context):
    return _sync(ctx, every=1_000_000)


def _copy(ctx: Context, pinned: bool):
    rows = ctx.n(8192, 16)
    host = torch.randn(rows, 4096)  # 128 MiB of float32 on a GPU
    if pinned and ctx.device.type == "cuda":
        host = host.pin_memory()
    weight = torch.randn(4096, 256, device=ctx.device)

    def step() -> None:
        batch = host.to(ctx.device, non_blocking=pinned)
        (batch[:256] @ weight).sum()
    return step


def pageable_copy(ctx: Context):
    return _copy(ctx, pinned=False)


def pinned_copy(ctx: Context):
    return _copy(ctx, pinned=True)


def compute_matmul(ctx: Context):
    n = ctx.n(8192, 64)
    dtype = torch.bfloat16 if ctx.device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=ctx.device, dtype=dtype)
    b = torch.randn(n, n, device=ctx.device, dtype=dtype)

    def step() -> None:
        c = a
        for _ in range(10):
            c = (c @ b) * 0.001
    return step


def _tiny_ops(x: torch.Tensor) -> torch.Tensor:
    for _ in range(200):
        x = x * 1.0001 + 0.0001
    return x


# 4M floats: about 8 µs per elementwise kernel on a current GPU, shorter than eager PyTorch's
# launch interval (so eager is launch-bound) and far longer than a CUDA graph's (so the graph is not)
_TINY = 4 * 1024 * 1024


def launch_bound(ctx: Context):
    x = torch.randn(ctx.n(_TINY, 1024), device=ctx.device)

    def step() -> None:
        _tiny_ops(x)
    return step


def launch_bound_graph(ctx: Context):
    x = torch.randn(ctx.n(_TINY, 1024), device=ctx.device)
    if ctx.device.type != "cuda":
        return lambda: _tiny_ops(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up before capture, as torch.cuda.graphs asks
        for _ in range(3):
            _tiny_ops(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _tiny_ops(x)
    return graph.replay


WORKLOADS = [
    Workload("dataloader_slow", dataloader_slow, expect={"limiter": "idle", "root_cause": "dataloader"}),
    Workload("dataloader_fixed", dataloader_fixed, expect_not={"root_cause": "dataloader"}, fix_of="dataloader_slow"),
    Workload("sync_item", sync_item, expect={"limiter": "idle", "root_cause": "sync"}),
    Workload("sync_item_fixed", sync_item_fixed, expect_not={"root_cause": "sync"}, fix_of="sync_item"),
    Workload("pageable_copy", pageable_copy, expect={"limiter": "data_movement", "root_cause": "pageable_memcpy"}),
    Workload("pinned_copy", pinned_copy, expect_not={"root_cause": "pageable_memcpy"}, fix_of="pageable_copy"),
    Workload("compute_matmul", compute_matmul, expect={"limiter": "compute", "root_cause": "hot_kernel"}),
    Workload("launch_bound", launch_bound, expect={"limiter": "idle", "root_cause": "launch_overhead"}),
    Workload("launch_bound_graph", launch_bound_graph, expect_not={"root_cause": "launch_overhead"},
             fix_of="launch_bound"),
]


# -- recording -----------------------------------------------------------------------------------

def record(workload: Workload, ctx: Context, out: Path, steps: int) -> Path:
    """Profile `steps` active steps after one warm-up step; write the gzipped trace and truth."""
    step = workload.run(ctx)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"

        def ready(prof) -> None:
            prof.export_chrome_trace(str(raw))

        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                     on_trace_ready=ready, record_shapes=True, with_stack=True) as prof:
            for _ in range(steps + 1):
                step()  # no synchronize here: it would plant a sync stall in every workload
                prof.step()
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
        trace = out / f"{workload.name}.pt.trace.json.gz"
        with open(raw, "rb") as src, gzip.open(trace, "wb") as dst:
            shutil.copyfileobj(src, dst)
    on_gpu = ctx.device.type == "cuda"
    truth = {
        "workload": workload.name,
        "device": _device_description(ctx.device),
        "torch": torch.__version__,
        "fix_of": workload.fix_of,
        "expect": (workload.expect if on_gpu else {"limiter": None, "root_cause": None}),
        "expect_not": workload.expect_not if on_gpu else None,
    }
    (out / f"{workload.name}.truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    return trace


def _device_description(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"type": "cpu", "name": platform.processor() or platform.machine()}
    props = torch.cuda.get_device_properties(device)
    return {"type": "cuda", "name": props.name, "cuda": torch.version.cuda,
            "driver": _driver_version(), "capability": f"{props.major}.{props.minor}"}


def _driver_version() -> str | None:
    try:
        import subprocess
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 else None
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the traces and truth files")
    parser.add_argument("--only", nargs="*", help="workload names (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per workload")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--scale", type=float, default=None, help="size factor (default 1 on CUDA, 0.02 on CPU)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    ctx = Context(device, args.scale if args.scale is not None else (1.0 if device.type == "cuda" else 0.02))
    chosen = [w for w in WORKLOADS if not args.only or w.name in args.only]
    unknown = set(args.only or []) - {w.name for w in WORKLOADS}
    if unknown:
        print(f"gpu_workloads: unknown workload(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for workload in chosen:
        started = time.perf_counter()
        path = record(workload, ctx, args.out, args.steps)
        print(f"{workload.name}: {path} ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
