"""Load and analyze a trace in a child process for the chat app, and hand the result back.

Parsing holds the GIL for long stretches: done in the app's own interpreter it freezes key
handling for seconds on large traces. A plain child process (not multiprocessing, which cannot
start while Textual owns stderr) reads the pickled AnalyzeRequest(s) on stdin and writes the
pickled result, or the pickled TraceError, to stdout: for a 100 MB trace that is 18 MB, unpickled
in a few milliseconds.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

from ..api import run
from ..errors import TraceError
from ..request import AnalyzeRequest
from ..trace.heap import prepare_for_large_arrays


def load_and_analyze(request: AnalyzeRequest, compare: AnalyzeRequest | None = None):
    """(analysis, analysis of the trace to compare or None)."""
    return run(request), run(compare) if compare is not None else None


def load_in_child(request: AnalyzeRequest, compare: AnalyzeRequest | None = None):
    """load_and_analyze in a child process; in this process if the child itself fails."""
    command = [sys.executable, "-m", "traceagent.tui.loader"]
    done = subprocess.run(command, input=pickle.dumps((request, compare), protocol=pickle.HIGHEST_PROTOCOL),
                          capture_output=True)
    if done.returncode == 0 and done.stdout:
        result = pickle.loads(done.stdout)  # our own child's output
        if isinstance(result, TraceError):
            raise result
        return result
    return load_and_analyze(request, compare)


def main() -> int:
    request, compare = pickle.loads(sys.stdin.buffer.read())  # our own parent's request
    prepare_for_large_arrays()  # as the command line has them
    try:
        result = load_and_analyze(request, compare)
    except TraceError as exc:
        result = exc
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
