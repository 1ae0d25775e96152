"""The one error type users see: what file, what is wrong, what to do."""

from __future__ import annotations


class TraceError(Exception):
    """A trace could not be read. The CLI prints it as one line and exits 2."""

    def __init__(self, path: str, problem: str, hint: str = "") -> None:
        super().__init__(str(path), problem, hint)  # args round-trip, so it pickles across processes
        self.path, self.problem, self.hint = str(path), problem, hint

    def __str__(self) -> str:
        text = f"{self.path}: {self.problem}"
        return f"{text}. {self.hint}" if self.hint else text


class SchedulerError(Exception):
    """The Dask scheduler named by --scheduler cannot be used. The CLI prints it as one line and exits 2."""
