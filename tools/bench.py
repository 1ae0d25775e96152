#!/usr/bin/env python3
"""Benchmark traceagent against the JSON floor and against Holistic Trace Analysis.

    pip install orjson holistictraceanalysis    # optional: HTA may want its own venv (--hta-python)
    python tools/bench.py --sizes 10MB 100MB 1GB --ranks-case 8x100MB --runs 3
    python tools/bench.py --real tests/data/param/resnet_kineto.json.gz --sizes 200MB 1GB --ranks-case ''
    python tools/bench.py --dask-ranks 32 64 256 --rank-size 20MB --runs 1
    python tools/bench.py --sizes --ranks-case '' --tiny-kernels 10000000 --bare-kernels 10000000 --runs 1

With --real, the traces are a real trace tiled to each size instead of synthetic ones: copies
one after another in time, with fresh correlation, external and flow ids, so every copy links as
the original does. Real traces are heavier than synthetic ones (many python_function and cpu_op
events, deep nesting, long names, flows). A second floor, `msgspec.json.decode` into plain
objects, is measured beside orjson's.

For each synthetic trace (tools/synth_trace.py) every measurement runs in a fresh process and
reports wall time and peak RSS (median of --runs): (a) orjson.loads of the file, the floor for
any Python reader that builds objects; (b) traceagent load without cache; (c) load from cache;
(d) the full `analyze --json`; (e) HTA loading the trace and computing its temporal, idle-time
and kernel breakdowns. Then the ratios: ours/floor, HTA/ours, cached/uncached, RSS/file size.
A large plain file is read by traceagent in two processes (the second half in a forked child):
peak memory is then the larger of this process's peak RSS and, sampled every 20 ms, its RSS plus
its children's private memory (pages a child shares with its parent are counted once).

With --dask-ranks, jobs of that many synthetic ranks (a planted straggler among them) are analysed
on a LocalCluster: wall time against the sum of the ranks' orjson.loads floors over the worker
count, the driver's peak RSS and the largest worker's, and whether the straggler was found.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from synth_trace import parse_size, synthesize, tiny_kernels  # noqa: E402

# Each snippet runs in its own interpreter: imports first (not timed), then the timed work; it
# prints wall seconds and peak RSS. PATH is the trace file or directory.
_PRELUDE = "import json, resource, sys, time, os\nPATH = sys.argv[1]\n"
_REPORT = ("\nprint(json.dumps({'wall_s': time.perf_counter() - t0, "
           "'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "
           "'worker_rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "
           "'found': globals().get('FOUND')}))\n")
#: the floor: every file decoded by a JSON library alone (`{decode}`); a gzipped one is inflated
#: with the standard library's gzip, as a plain script would
_FLOOR = ("import gzip, {module}\n"
          "files = [os.path.join(PATH, f) for f in sorted(os.listdir(PATH))] if os.path.isdir(PATH) else [PATH]\n"
          "t0 = time.perf_counter()\nfor f in files:\n    raw = open(f, 'rb').read()\n"
          "    data = {decode}(gzip.decompress(raw) if raw[:2] == b'\\x1f\\x8b' else raw)\n    del data, raw")
#: traceagent as its command line runs it: arrays on small pages, freed ones reused (trace/heap.prepare_for_large_arrays)
_AS_CLI = "import traceagent\nfrom traceagent.trace.heap import prepare_for_large_arrays\nprepare_for_large_arrays()\n"
CASES = {
    "floor": _FLOOR.format(module="orjson", decode="orjson.loads"),
    "floor_msgspec": _FLOOR.format(module="msgspec", decode="msgspec.json.decode"),
    "load": (_AS_CLI + "t0 = time.perf_counter()\njob = traceagent.load(PATH, use_cache=False)"),
    "warm": (_AS_CLI + "t0 = time.perf_counter()\ntraceagent.load(PATH)"),
    "load_cached": (_AS_CLI + "t0 = time.perf_counter()\njob = traceagent.load(PATH)"),
    "analyze": (_AS_CLI + "from traceagent import analyze\nt0 = time.perf_counter()\n"
                "out = json.dumps(analyze(traceagent.load(PATH, use_cache=False)).to_dict())"),
    # the same floor on every core at once: what this machine's cores give in parallel
    "floor_parallel": ("import orjson, multiprocessing\n"
                       "def one(f):\n    data = orjson.loads(open(f, 'rb').read())\n    return len(data)\n"
                       "files = [os.path.join(PATH, f) for f in sorted(os.listdir(PATH))]\n"
                       "pool = multiprocessing.get_context('fork').Pool(os.cpu_count())\npool.map(one, files[:2])\n"
                       "t0 = time.perf_counter()\npool.map(one, files, chunksize=1)"),
    # a rank directory on a LocalCluster: the driver's RSS is RUSAGE_SELF, the largest worker's
    # RUSAGE_CHILDREN (the workers are this process's children, reaped when the cluster closes)
    "dask": (_AS_CLI + "t0 = time.perf_counter()\n"
             "a = traceagent.analyze(PATH, use_cache=False, scheduler='local')\nout = json.dumps(a.to_dict())\n"
             "FOUND = {'ranks': len(a.ranks), 'straggler': a.comparison.straggler}"),
    "hta": ("import logging, warnings\nlogging.disable(logging.WARNING)\nwarnings.simplefilter('ignore')\n"
            "from hta.trace_analysis import TraceAnalysis\nimport tempfile\n"
            "t0 = time.perf_counter()\nfolder = PATH\n"
            "if not os.path.isdir(PATH):\n    folder = tempfile.mkdtemp()\n"
            "    name = 'rank-0.json.gz' if PATH.endswith('.gz') else 'rank-0.json'\n"
            "    os.symlink(os.path.abspath(PATH), os.path.join(folder, name))\n"
            "a = TraceAnalysis(trace_dir=folder)\na.get_temporal_breakdown(visualize=False)\n"
            "a.get_idle_time_breakdown(visualize=False)\na.get_gpu_kernel_breakdown(visualize=False)"),
}


def measure(case: str, path: Path, python: str, runs: int, timeout: int, cache_dir: str) -> dict | None:
    """Median wall and peak RSS over fresh-process runs; None when the case cannot run here."""
    results = []
    env = dict(os.environ, TRACEAGENT_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
    for _ in range(runs):
        code = _PRELUDE + CASES[case] + _REPORT
        process = subprocess.Popen([python, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env)
        peak, done = [0.0], threading.Event()
        sampler = threading.Thread(target=_sample_tree, args=(process.pid, peak, done), daemon=True)
        sampler.start()
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return {"error": f"over {timeout} s"}
        finally:
            done.set()
            sampler.join()
        if process.returncode != 0:
            last = (stderr.strip().splitlines() or ["failed"])[-1]
            return {"error": last[:120]}
        results.append(json.loads(stdout.strip().splitlines()[-1]))
        # a forked child's pages shared with its parent are counted once: the peak is the parent's
        # own peak, or the sampled sum when that is higher
        results[-1]["tree_mb"] = max(results[-1]["rss_mb"], peak[0])
    return {"wall_s": statistics.median(r["wall_s"] for r in results),
            "rss_mb": statistics.median(r["rss_mb"] for r in results),
            # this process and its children together: its RSS plus their private memory, sampled
            "tree_mb": statistics.median(r["tree_mb"] for r in results),
            # parallel loads: the largest worker process's peak (RUSAGE_CHILDREN)
            "worker_rss_mb": statistics.median(r["worker_rss_mb"] for r in results),
            "found": results[-1].get("found")}


def _sample_tree(pid: int, peak: list[float], done: threading.Event) -> None:
    """The largest sum, every 20 ms until `done`, of the process's RSS and its descendants'
    private memory (Linux /proc; elsewhere nothing is sampled)."""
    while not done.wait(0.02):
        total = _statm_mb(pid) + sum(_private_mb(child) for child in _descendants(pid))
        peak[0] = max(peak[0], total)


def _statm_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def _private_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty")) / 1024
    except (OSError, KeyError, ValueError):
        return 0.0


def _descendants(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []
    return children + [d for c in children for d in _descendants(c)]


_ID_KEYS = ("correlation", "External id", "external id", "Record function id", "Ev Idx")


def tile(source: Path, out: Path, size: int) -> None:
    """`source` (a real Kineto trace) repeated until `out` reaches `size` bytes: each copy shifted
    past the previous one in time, its ids (correlation, external, flow) made unique."""
    import gzip

    raw = source.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - start + 1000.0
    ids = max([int(v) for e in events for k, v in (e.get("args") or {}).items()
               if k in _ID_KEYS and isinstance(v, (int, float))] + [int(e["id"]) for e in events
                                                                       if isinstance(e.get("id"), int)] + [0]) + 1
    once = len(json.dumps(events, separators=(",", ":")))
    copies = max(1, round(size / once))
    with open(out, "w") as f:
        f.write(json.dumps({k: v for k, v in doc.items() if k != "traceEvents"})[:-1] + ', "traceEvents": [')
        for i in range(copies):
            for j, e in enumerate(events):
                if i:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = e["ts"] + i * span
                    if isinstance(e.get("id"), int):
                        e["id"] = e["id"] + i * ids
                    args = e.get("args")
                    if isinstance(args, dict) and any(k in args for k in _ID_KEYS):
                        e["args"] = {k: (v + i * ids if k in _ID_KEYS and isinstance(v, int) else v)
                                     for k, v in args.items()}
                f.write(("," if i or j else "") + json.dumps(e, separators=(",", ":")))
        f.write("]}")


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size


def text_size(path: Path) -> int:
    """The JSON text's size: a gzip's own record of it (ISIZE, mod 4 GiB), else the file's size."""
    if path.is_file() and path.name.endswith(".gz"):
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    return size_of(path)


def run(label: str, path: Path, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
        return _run(label, path, args, cache_dir)


def _run(label: str, path: Path, args, cache_dir: str) -> dict:
    row = {"case": label, "mb": size_of(path) / 1e6, "text_mb": text_size(path) / 1e6}
    measure("warm", path, sys.executable, 1, args.timeout, cache_dir)  # fill the cache, in its own process
    for case in ("floor", "floor_msgspec", "load", "load_cached", "analyze"):
        row[case] = measure(case, path, sys.executable, args.runs, args.timeout, cache_dir)
        print(f"  {label} {case}: {row[case]}", file=sys.stderr, flush=True)
    if args.hta_python and not args.skip_hta:
        row["hta"] = measure("hta", path, args.hta_python, max(1, args.runs if row["mb"] < 500 else 1), args.timeout, cache_dir)
        print(f"  {label} hta: {row['hta']}", file=sys.stderr, flush=True)
    return row


def _wall(row: dict, case: str) -> float | None:
    value = row.get(case)
    return value.get("wall_s") if isinstance(value, dict) else None


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def table(rows: list[dict]) -> str:
    head = ("| trace | MB | floor s | load s | cached s | analyze s | HTA s | analyze/floor | HTA/analyze "
            "| cached/load | peak RSS/size of the JSON text (analyze; children's own memory added) | largest child RSS MiB |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        def cell(case: str, r: dict = r) -> str:
            v = r.get(case)
            if not isinstance(v, dict):
                return "-"
            return v["error"] if "error" in v else f"{v['wall_s']:.2f}"

        analyze = r.get("analyze") if isinstance(r.get("analyze"), dict) else {}
        # RSS is measured in MiB (ru_maxrss / 1024) and sizes in MB: the ratio compares bytes with bytes
        rss = f"{analyze['tree_mb'] * 2**20 / 1e6 / r.get('text_mb', r['mb']):.2f}" if "tree_mb" in analyze else "-"
        worker = f"{analyze['worker_rss_mb']:.0f}" if "worker_rss_mb" in analyze else "-"
        lines.append(f"| {r['case']} | {r['mb']:.0f} | {cell('floor')} | {cell('load')} | {cell('load_cached')} | "
                     f"{cell('analyze')} | {cell('hta')} | {ratio(_wall(r, 'analyze'), _wall(r, 'floor'))} | "
                     f"{ratio(_wall(r, 'hta'), _wall(r, 'analyze'))} | {ratio(_wall(r, 'load_cached'), _wall(r, 'load'))} | "
                     f"{rss} | {worker} |")
    return "\n".join(lines)


def dask_rows(counts: list[int], rank_size: int, args) -> list[dict]:
    """Rank directories of synthetic ranks with a planted straggler, analysed on a LocalCluster:
    wall time against the floor (the sum of each rank's orjson.loads, over the worker count; like
    every figure here, the median of --runs),
    the driver's and the largest worker's peak RSS."""
    workers = os.cpu_count() or 1
    rows = []
    for n in counts:
        folder = args.workdir / f"dask-{n}x{rank_size // 10**6}MB"
        straggler = (2 * n) // 3
        if not folder.exists():
            started = time.perf_counter()
            tmp = folder.with_name(folder.name + ".tmp")
            tmp.mkdir(exist_ok=True)
            for rank in range(n):
                synthesize(tmp / f"rank-{rank}.json", rank_size, rank=rank, world=n, straggler=straggler)
            tmp.rename(folder)
            print(f"wrote {folder} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
            floor = measure("floor", folder, sys.executable, args.runs, args.timeout, cache_dir)
            parallel = measure("floor_parallel", folder, sys.executable, args.runs, args.timeout, cache_dir)
            ours = measure("dask", folder, sys.executable, args.runs, args.timeout, cache_dir)
        row = {"ranks": n, "mb": size_of(folder) / 1e6, "workers": workers, "planted": straggler,
               "floor_sum_s": floor.get("wall_s"), "floor_parallel_s": parallel.get("wall_s"), "dask": ours}
        print(f"  {n} ranks: {row}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def dask_table(rows: list[dict]) -> str:
    lines = ["| ranks | MB | workers | floor sum s | floor/workers s | floor on all cores s | wall s | wall/floor ratio "
             "| wall/floor on all cores | driver RSS MB | largest worker RSS MB | straggler found (planted) |",
             "|" + "---|" * 12]
    for r in rows:
        d, per, par = r["dask"], r["floor_sum_s"] / r["workers"], r["floor_parallel_s"]
        head = f"| {r['ranks']} | {r['mb']:.0f} | {r['workers']} | {r['floor_sum_s']:.1f} | {per:.1f} | {par:.1f} | "
        if "error" in d:
            lines.append(head + f"{d['error']} | - | - | - | - | - |")
            continue
        lines.append(head + f"{d['wall_s']:.1f} | {d['wall_s'] / per:.2f} | {d['wall_s'] / par:.2f} | {d['rss_mb']:.0f} | "
                     f"{d['worker_rss_mb']:.0f} | {d['found']['straggler']} ({r['planted']}) |")
    return "\n".join(lines)


def detector_shares(path: Path, profile: bool = False) -> str:
    """Where one rank's load and analysis spend time and memory, in a fresh process: each detector's
    time, share of the analysis and how far it raised the process's peak memory
    (traceagent.detect.core.timing); with `profile`, cProfile's busiest functions of each."""
    code = (_AS_CLI + "import cProfile, io, json, pstats, sys, time\nfrom traceagent.detect.analysis import analyze_trace\n"
            "from traceagent.detect.core.timing import collect, peak_rss_mb\nfrom traceagent.trace.load import load_file\n"
            "PROFILE = sys.argv[2] == '1'\n"
            "def top(run):\n    if not PROFILE:\n        return run(), ''\n    p = cProfile.Profile(); value = p.runcall(run)\n"
            "    out = io.StringIO(); pstats.Stats(p, stream=out).sort_stats('tottime').print_stats(15)\n"
            "    return value, out.getvalue()\n"
            "base = peak_rss_mb(); t0 = time.perf_counter()\n"
            "trace, load_profile = top(lambda: load_file(sys.argv[1], use_cache=False))\n"
            "load_s, loaded = time.perf_counter() - t0, peak_rss_mb()\n"
            "with collect() as costs:\n    t0 = time.perf_counter()\n"
            "    _, analysis_profile = top(lambda: analyze_trace(trace))\n    total = time.perf_counter() - t0\n"
            "print(json.dumps({'base': base, 'load_s': load_s, 'loaded': loaded, 'total': total, 'peak': peak_rss_mb(),\n"
            "                  'seconds': costs.seconds, 'raised': costs.raised_peak_mb,\n"
            "                  'profiles': [load_profile, analysis_profile]}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(path), "1" if profile else "0"], capture_output=True,
                          text=True, check=True)
    r = json.loads(done.stdout)
    size = path.stat().st_size / 2**20
    under = " (times under cProfile)" if profile else ""
    rows = [f"{path.name} ({size:.0f} MiB){under}: imports {r['base']:.0f} MiB; load {r['load_s']:.2f} s in this process "
            f"(its forked child's memory not counted), peak {r['loaded']:.0f} MiB ({r['loaded'] / size:.2f}× the file); "
            f"analysis {r['total']:.3f} s, peak {r['peak']:.0f} MiB ({r['peak'] / size:.2f}× the file)",
            f"{'detector':<16} {'seconds':>8} {'share':>7} {'raised the peak by':>19}"]
    for name, seconds in sorted(r["seconds"].items(), key=lambda kv: -kv[1]):
        raised = r["raised"].get(name, 0.0)
        rows.append(f"{name:<16} {seconds:>8.3f} {100 * seconds / r['total']:>6.1f}% {raised:>15.0f} MiB")
    rows.append(f"{'(verdict, glue)':<16} {r['total'] - sum(r['seconds'].values()):>8.3f}")
    if profile:
        rows += ["", "load, cProfile by own time:", r["profiles"][0], "analysis, cProfile by own time:", r["profiles"][1]]
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="*", default=["10MB", "100MB", "1GB"])
    parser.add_argument("--ranks-case", default="8x100MB", help="RANKSxSIZE, or '' to skip")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "traceagent-bench")
    parser.add_argument("--hta-python", default=sys.executable,
                        help="the interpreter that has holistictraceanalysis (default: this one)")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--real", type=Path, help="tile this real Kineto trace to each size instead of synthesizing")
    parser.add_argument("--dask-ranks", type=int, nargs="*", default=[],
                        help="rank counts of synthetic jobs with a planted straggler to analyse on a LocalCluster "
                             "(32 64 256); only these run when given")
    parser.add_argument("--rank-size", default="20MB", help="each rank's size in the --dask-ranks jobs")
    parser.add_argument("--tiny-kernels", type=int, nargs="*", default=[], metavar="COUNT",
                        help="also bench traces of COUNT tiny kernels each with its launch (10000000): the "
                             "launch-bound shape, where per-event costs decide speed and memory")
    parser.add_argument("--bare-kernels", type=int, nargs="*", default=[], metavar="COUNT",
                        help="also bench traces of COUNT tiny kernels alone, no launches and no args (10000000): a "
                             "GPU-only trace, about 85 bytes an event")
    parser.add_argument("--detectors", type=Path, help="print where the load and the analysis of this trace spend time "
                                                       "and memory, detector by detector, and stop")
    parser.add_argument("--profile", action="store_true", help="with each detector table, cProfile's busiest functions")
    parser.add_argument("--gzip", action="store_true", help="also time each real-shaped trace gzipped (level 6), beside "
                                                           "the plain file")
    args = parser.parse_args()
    if args.detectors:
        print(detector_shares(args.detectors, args.profile))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    check = subprocess.run([args.hta_python, "-c", "import hta"], capture_output=True)
    if check.returncode != 0:
        print(f"bench: holistictraceanalysis is not importable by {args.hta_python}: HTA column skipped",
              file=sys.stderr)
        args.skip_hta = True
    if args.dask_ranks:
        rows = dask_rows(args.dask_ranks, parse_size(args.rank_size), args)
        print(f"\n{os.cpu_count()} cores; wall is the median of {args.runs} fresh-process runs\n")
        print(dask_table(rows))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
        return 0
    rows, files = [], []
    for text in args.sizes:
        size = parse_size(text)
        path = args.workdir / (f"real-{args.real.name.split('.')[0]}-{text}.json" if args.real else f"synth-{text}.json")
        if not path.exists():
            started = time.perf_counter()
            tile(args.real, path, size) if args.real else synthesize(path, size)
            print(f"wrote {path} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        label = f"{'real ' if args.real else ''}{text}"
        rows.append(run(label, path, args))
        files.append(path)
        if args.gzip:
            packed = path.with_name(path.name + ".gz")
            if not packed.exists():
                gzipped(path, packed)
            rows.append(run(f"{label} gzipped", packed, args))
            rows[-1]["plain_analyze_s"] = _wall(rows[-2], "analyze")
    for count, launches in [*((c, True) for c in args.tiny_kernels), *((c, False) for c in args.bare_kernels)]:
        shape = "tiny-kernels" if launches else "bare-kernels"
        path = args.workdir / f"{shape}-{count}.json"
        if not path.exists():
            started = time.perf_counter()
            tiny_kernels(path, count, launches=launches)
            print(f"wrote {path} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        rows.append(run(f"{count:,} {shape.replace('-', ' ')}", path, args))
        files.append(path)
    if args.ranks_case:
        ranks, size_text = args.ranks_case.lower().split("x")
        folder = args.workdir / f"synth-{args.ranks_case}"
        if not folder.exists():
            folder.mkdir()
            for rank in range(int(ranks)):
                synthesize(folder / f"rank-{rank}.json", parse_size(size_text), rank=rank, world=int(ranks))
        rows.append(run(args.ranks_case, folder, args))
    print(f"\n{os.cpu_count()} cores; times are medians of {args.runs} fresh-process runs\n")
    print(table(rows))
    for row in rows:
        if "plain_analyze_s" in row:
            print(f"{row['case']}: analyze {ratio(_wall(row, 'analyze'), row['plain_analyze_s'])}× the plain file's time")
    for path in files:  # where each single file's analysis goes, detector by detector
        print("\n" + detector_shares(path, args.profile))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def gzipped(plain: Path, packed: Path) -> None:
    """`plain` gzipped at level 6 (gzip's default, what torch.profiler's .json.gz export uses)."""
    import gzip
    import shutil

    started = time.perf_counter()
    with open(plain, "rb") as source, gzip.open(packed.with_name(packed.name + ".tmp"), "wb", compresslevel=6) as out:
        shutil.copyfileobj(source, out, 1 << 22)
    packed.with_name(packed.name + ".tmp").rename(packed)
    print(f"wrote {packed} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
