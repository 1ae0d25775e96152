"""Which numbers of `analyze --json` changed between two checkouts of traceagent, on every trace
in tests/data: for a change that should leave outputs alone except where a definition moved.

    python tools/compare_outputs.py OLD_CHECKOUT [--traces tests/data] [--show 5]

Each checkout runs in its own process (`python -m traceagent analyze PATH --json --no-cache`);
the output lists, per JSON path (list indices folded to []), how many values differ and a few
before → after examples.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


def analyze(checkout: Path, trace: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "TRACEAGENT_CACHE_DIR": str(checkout / ".compare-cache")}
    done = subprocess.run([sys.executable, "-m", "traceagent", "analyze", str(trace), "--json", "--no-cache"],
                          capture_output=True, text=True, env=env, cwd=checkout)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    return json.loads(done.stdout)


def flatten(value, path: str = "", out: dict | None = None) -> dict:
    out = {} if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{path}[{i}]", out)
    else:
        out[path] = value
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a checkout of the version to compare with")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "data")
    parser.add_argument("--show", type=int, default=3)
    args = parser.parse_args()
    changed: dict[str, list[str]] = defaultdict(list)
    traces = sorted(p for p in args.traces.rglob("*") if p.name.endswith((".json.gz", ".sqlite")))
    for trace in traces:
        before, after = flatten(analyze(args.old, trace)), flatten(analyze(args.new, trace))
        for key in sorted(set(before) | set(after)):
            if before.get(key, "(absent)") != after.get(key, "(absent)"):
                folded = re.sub(r"\[\d+\]", "[]", key)
                changed[folded].append(f"{trace.name}: {before.get(key, '(absent)')} → {after.get(key, '(absent)')}")
    for key, examples in sorted(changed.items()):
        print(f"{key}: {len(examples)} changed")
        for example in examples[:args.show]:
            print(f"    {example}")
    if not changed:
        print(f"every value of analyze --json is the same on all {len(traces)} traces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
