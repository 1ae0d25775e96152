"""Per-file work across a job's rank files: in this process for small jobs, else as tasks on Dask
(a LocalCluster of processes sized to the machine, or an existing cluster by address).

Each task's function runs where the file is read and returns only what the caller keeps, so the
memory of this process grows with the number of ranks, not with the size of their traces.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .errors import SchedulerError

#: the environment variable that gives the default for --scheduler
SCHEDULER_ENV = "TRACEAGENT_SCHEDULER"
#: how long to try reaching a scheduler given by address
CONNECT_TIMEOUT_S = 10
#: below this many bytes of trace files, starting worker processes costs more than it saves
SMALL_JOB_BYTES = 64 << 20

#: progress(done, total, what): called as files finish
Progress = Callable[[int, int, str], None]


def scheduler_for(scheduler: str | None, sizes: Sequence[int]) -> str | None:
    """Where the tasks run: None for this process, "local" for a new LocalCluster, or a
    scheduler's address. `scheduler` is what the user asked for (`auto` when unset: a
    LocalCluster for several files totalling SMALL_JOB_BYTES or more, else this process)."""
    choice = (scheduler or os.environ.get(SCHEDULER_ENV) or "auto").strip()
    if choice in ("none", "process", "in-process"):
        return None
    if choice == "auto":
        several = len(sizes) > 1 and (os.cpu_count() or 1) > 1
        return "local" if several and sum(sizes) >= SMALL_JOB_BYTES else None
    return choice


def run_per_file(func: Callable[..., Any], files: Sequence[str], *, scheduler: str | None,
                 progress: Progress | None = None, name: Callable[[str], str] = os.path.basename,
                 **kwargs: Any) -> list[Any]:
    """[func(file, **kwargs) for file in files], in file order, run where `scheduler` says
    (see scheduler_for); progress is called as each file finishes."""
    total = len(files)
    if progress:
        progress(0, total, name(files[0]) if files else "")
    if scheduler is None:
        results = []
        for done, file in enumerate(files, 1):
            results.append(func(file, **kwargs))
            if progress:
                progress(done, total, name(file))
        return results
    with _client(scheduler, total) as client:
        from distributed import as_completed

        futures = client.map(func, list(files), pure=False, **kwargs)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * total
        for done, (future, result) in enumerate(as_completed(futures, loop=client.loop, with_results=True), 1):
            i = index[future.key]
            results[i] = result
            future.release()  # the worker may drop it now: only this process holds it
            if progress:
                progress(done, total, name(files[i]))
        return results


@contextmanager
def _client(scheduler: str, tasks: int) -> Iterator:
    """A Client on a new LocalCluster ("local"), closed with it afterwards, or on the scheduler at
    an address."""
    from distributed import Client, LocalCluster

    if scheduler == "local":
        workers = max(1, min(tasks, os.cpu_count() or 1))
        # one thread per worker: parsing holds the GIL, so threads would take turns. Port 0: any
        # free one (the scheduler's HTTP server binds 8787 even without a dashboard, and warns if taken)
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=logging.ERROR) as cluster, Client(cluster, set_as_default=False) as client:
            yield client
        return
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler at {scheduler} ({exc}). Check --scheduler or "
                             f"${SCHEDULER_ENV}: an address such as tcp://host:8786, `local` for a cluster on this "
                             "machine, or `none` to work in this process") from None
    with client:
        yield client
