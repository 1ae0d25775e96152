"""One analysis as it was asked for: what to read and every option, built once by each interface
(the command line from its flags, MCP from open_trace's arguments, the chat app from what it was
started with) and passed whole: to `api.run`, and pickled to the chat app's loader child.

An option added here reaches every interface that builds a request; none threads it by hand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from .trace.model import Job

#: what a job is read from: a trace file, a rank directory or a glob (a path or URL), a list of
#: rank files, or a Job already in memory (its traces analysed as they are, nothing read or cached)
Source = str | tuple[str, ...] | Job


@dataclass(frozen=True)
class AnalyzeRequest:
    """Everything an analysis depends on besides the code.

    `steps`: a regular expression naming the host ranges that are iterations (its first group the
    step number), instead of ProfilerStep#N. `settings`: detector thresholds as `NAME.PARAM=VALUE`
    (`--set`). `kernels`: an Nsight Compute CSV export joined to the trace's kernels. `graph_capture`:
    a trace of the CUDA-graph capture whose ops replayed kernels take. `max_bytes`: the most text
    one trace file may hold. `scheduler`: where ranks are analysed (api.run). `use_cache`: read and
    write the cache of parsed traces and analyses.
    """

    source: Source
    steps: str | None = None
    settings: tuple[str, ...] = ()
    kernels: str | None = None
    graph_capture: str | None = None
    max_bytes: int | None = None
    scheduler: str | None = None
    use_cache: bool = True

    def __post_init__(self) -> None:
        self.pattern  # noqa: B018  (compiled at once: a bad pattern is the caller's error, before anything is read)

    @classmethod
    def of(cls, source: str | os.PathLike | Sequence[str | os.PathLike] | Job, *,
           steps: str | re.Pattern | None = None, settings: Sequence[str] = (),
           kernels: str | os.PathLike | None = None, graph_capture: str | os.PathLike | None = None,
           max_bytes: int | None = None, scheduler: str | None = None, use_cache: bool = True) -> AnalyzeRequest:
        """A request from the loose types callers have (paths, a compiled pattern, lists)."""
        if isinstance(source, Job):
            sources: Source = source
        elif isinstance(source, (str, os.PathLike)):
            sources = os.fspath(source)
        else:
            sources = tuple(os.fspath(s) for s in source)
        return cls(sources, steps=steps.pattern if isinstance(steps, re.Pattern) else steps, settings=tuple(settings),
                   kernels=os.fspath(kernels) if kernels is not None else None,
                   graph_capture=os.fspath(graph_capture) if graph_capture is not None else None,
                   max_bytes=max_bytes, scheduler=scheduler, use_cache=use_cache)

    @cached_property
    def pattern(self) -> re.Pattern | None:
        """`steps`, compiled."""
        return re.compile(self.steps) if self.steps is not None else None

    def of_other(self, source: Source) -> AnalyzeRequest:
        """The same options for another trace (the one to compare with): its own side inputs none,
        since an Nsight Compute export or a graph capture belongs to the trace it was given with."""
        return replace(self, source=source, kernels=None, graph_capture=None)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The side inputs it reads besides its traces: no output may replace them."""
        return tuple(f for f in (self.kernels, self.graph_capture) if f is not None)
