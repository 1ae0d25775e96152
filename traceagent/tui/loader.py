"""Load and analyze a trace in a child process for the chat app, and hand the result back.

Parsing holds the GIL for long stretches: done in the app's own interpreter it freezes key
handling for seconds on large traces. A plain child process (not multiprocessing, which cannot
start while Textual owns stderr) writes the pickled result, or the pickled TraceError, to stdout:
for a 100 MB trace that is 18 MB, unpickled in a few milliseconds.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections.abc import Sequence

from ..api import analyze
from ..errors import TraceError
from .widgets.timeline import timeline_data


def load_and_analyze(path: str, compare: str | None, use_cache: bool, steps: str | None = None,
                     max_bytes: int | None = None, settings: Sequence[str] = (), kernels: str | None = None,
                     graph_capture: str | None = None):
    """(analysis, analysis of the trace to compare or None, the timeline's data or None); `kernels`:
    an Nsight Compute export joined to the first, `graph_capture` a trace of its CUDA-graph capture."""
    def one(source: str, profiled: str | None = None, captured: str | None = None):
        return analyze(source, use_cache=use_cache, steps=steps, max_bytes=max_bytes, settings=settings,
                       kernels=profiled, graph_capture=captured)

    analysis = one(path, kernels, graph_capture)
    other = one(compare) if compare else None
    return analysis, other, timeline_data(analysis.focus)


def load_in_child(path: str, compare: str | None, use_cache: bool, steps: str | None = None,
                  max_bytes: int | None = None, settings: Sequence[str] = (), kernels: str | None = None,
                  graph_capture: str | None = None):
    """load_and_analyze in a child process; in this process if the child itself fails."""
    command = [sys.executable, "-m", "traceagent.tui.loader", path, compare or "", "1" if use_cache else "0",
               steps or "", str(max_bytes or ""), json.dumps(list(settings)), kernels or "", graph_capture or ""]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True)
    if done.returncode == 0 and done.stdout:
        result = pickle.loads(done.stdout)  # our own child's output
        if isinstance(result, TraceError):
            raise result
        return result
    return load_and_analyze(path, compare, use_cache, steps, max_bytes, settings, kernels, graph_capture)


def main() -> int:
    path, compare, use_cache, steps = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "1", sys.argv[4] or None
    max_bytes = int(sys.argv[5]) if sys.argv[5] else None
    try:
        result = load_and_analyze(path, compare, use_cache, steps, max_bytes, json.loads(sys.argv[6]),
                                  sys.argv[7] or None, sys.argv[8] or None)
    except TraceError as exc:
        result = exc
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
