"""Per-file work across a job's rank files: in this process for small jobs, else as tasks on Dask
(a LocalCluster of processes sized to the machine, or an existing cluster by address).

Each task's function runs where the file is read and returns only what the caller keeps, so the
memory of this process grows with the number of ranks, not with the size of their traces.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from .errors import SchedulerError

log = logging.getLogger(__name__)

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
                 lost: Callable[[str, str], Any] | None = None, **kwargs: Any) -> list[Any]:
    """[func(file, **kwargs) for file in files], in file order, run where `scheduler` says
    (see scheduler_for); progress is called as each file finishes. With `lost`, a task that
    Dask could not finish (its worker died each time it ran it: KilledWorker) gives
    `lost(file, why)` as its result instead of ending the job."""
    if scheduler is None:
        return _in_process(func, files, progress, name, kwargs)
    try:
        client, cluster = _connect(scheduler, len(files))
    except _NoLocalCluster as exc:
        log.warning("traceagent: could not start a local Dask cluster (%s); analysing the ranks in this process "
                    "(--scheduler none says so without trying)", exc)
        return _in_process(func, files, progress, name, kwargs)
    with client, (cluster or nullcontext()):
        from distributed import as_completed

        if progress:  # only now: a progress display's thread would keep the workers from being forked
            progress(0, len(files), name(files[0]) if files else "")

        futures = client.map(func, list(files), pure=False, **kwargs)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(files)
        killed: list[int] = []
        done = 0
        for future in as_completed(futures, loop=client.loop):
            i = index[future.key]
            try:
                results[i] = _result(future, lost)
            except _Killed:
                killed.append(i)
                continue
            finally:
                future.release()  # the worker may drop it now: only this process holds it
            done += 1
            if progress:
                progress(done, len(files), name(files[i]))
        # a worker that dies takes the blame for every task it held: each such task again, alone on
        # the cluster, so that only the one that kills its worker each time is lost (tasks are
        # _Killed only where the caller gave `lost`)
        for i in sorted(killed):
            results[i] = _alone(client, func, files[i], lost, kwargs)
            done += 1
            if progress:
                progress(done, len(files), name(files[i]))
        return results


class _Killed(Exception):
    """A task Dask gave up on because the workers that ran it died (KilledWorker)."""

    def __init__(self, error: BaseException) -> None:
        tries = getattr(error, "allowed_failures", None)
        tried = ("once" if tries == 0 else f"{tries + 1} times") if isinstance(tries, int) else "each time"
        super().__init__(f"the Dask worker analysing it died, {tried} (killed: out of memory, or a crash)")


def _alone(client, func: Callable[..., Any], file: str, lost: Callable[[str, str], Any] | None,
           kwargs: dict) -> Any:
    """One task run again with nothing beside it on the cluster: its value, or `lost`'s account
    when it still kills its worker each time (tasks are _Killed only where `lost` is given)."""
    alone = client.submit(func, file, pure=False, **kwargs)
    try:
        return _result(alone, lost)
    except _Killed as exc:
        if lost is None:
            raise
        return lost(file, str(exc))
    finally:
        alone.release()


def _result(future, lost: Callable[[str, str], Any] | None) -> Any:
    """A finished task's value; _Killed where its workers died (KilledWorker) and the caller
    accounts for lost tasks (`lost`), else the task's error."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as exc:
        if lost is None:
            raise
        raise _Killed(exc) from None


def _in_process(func: Callable[..., Any], files: Sequence[str], progress: Progress | None,
                name: Callable[[str], str], kwargs: dict) -> list[Any]:
    if progress:
        progress(0, len(files), name(files[0]) if files else "")
    results = []
    for done, file in enumerate(files, 1):
        results.append(func(file, **kwargs))
        if progress:
            progress(done, len(files), name(file))
    return results


class _NoLocalCluster(Exception):
    """Worker processes would not start: spawned workers import the caller's main module, which
    fails for a script read from stdin and for one without an `if __name__ == "__main__"` guard."""


def _connect(scheduler: str, tasks: int):
    """(Client, the LocalCluster it runs on or None): a new LocalCluster for "local", else the
    scheduler at an address."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler == "local":
        method = worker_start_method()
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        if method != "fork" and main is not None and not os.path.exists(main):  # a script read from stdin: no file to re-import
            raise _NoLocalCluster(f"its worker processes would import the main script, and {main} is not a file")
        workers = max(1, min(tasks, os.cpu_count() or 1))
        try:
            # one thread per worker: parsing holds the GIL, so threads would take turns. Port 0: any
            # free one (the scheduler's HTTP server binds 8787 even without a dashboard, and warns if taken)
            settings = {_WORKER_ENVIRON: _worker_environ(), _START_METHOD: method}
            with dask.config.set(settings), _without_dasks_trim_setting(), _frozen_heap(method):
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.CRITICAL)
        except (RuntimeError, OSError) as exc:
            raise _NoLocalCluster(str(exc)) from None
        return Client(cluster, set_as_default=False), cluster
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler at {scheduler} ({exc}). Check --scheduler or "
                             f"${SCHEDULER_ENV}: an address such as tcp://host:8786, `local` for a cluster on this "
                             "machine, or `none` to work in this process") from None


_WORKER_ENVIRON = "distributed.nanny.pre-spawn-environ"
_START_METHOD = "distributed.worker.multiprocessing-method"


def worker_start_method() -> str:
    """How a new LocalCluster starts its workers: forked from this process on Linux when no other
    thread runs here, else as Dask is configured (spawn unless set otherwise).

    A spawned worker starts a new interpreter and imports distributed, then pandas and traceagent
    for its first task: 0.8 s before it reads a trace, which is a quarter of a 32-rank job on two
    cores. A forked one has them already (0.1 s), and needs no `__main__` guard. Forking is only
    safe where no other thread might hold a lock the child needs (stderr's, a logging handler's),
    so it is kept to a process that runs nothing else yet: our CLI, a plain script. Dask's own
    threads start with the cluster. A method set in Dask's config files or DASK_ environment
    variables (DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD=spawn) is kept."""
    import dask

    configured = dask.config.get(_START_METHOD, "spawn")  # Dask's default, before distributed is imported
    chosen = dask.config.get(_START_METHOD, None, config=dask.config.collect())
    if chosen is not None or configured != "spawn" or sys.platform != "linux" or threading.active_count() > 1:
        return configured
    return "fork"


@contextmanager
def _frozen_heap(method: str) -> Iterator[None]:
    """While workers are forked: this process's objects kept out of garbage collection, in the
    children for good (their collector would otherwise touch every inherited object, copying its
    memory page and costing time) and here until the workers have started."""
    if method != "fork":
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _worker_environ() -> dict:
    """Dask's environment for new workers, less MALLOC_TRIM_THRESHOLD_: setting it turns off
    glibc's adaptive mmap threshold, so each large array a load builds and frees is a fresh
    mapping and its page faults. A 20 MB rank took 10% longer with it (0.242 vs 0.219 s CPU),
    and the largest worker's peak RSS was 205 MB without it, 200 MB with it. Plus, where this
    process keeps NumPy off huge pages, the setting that keeps a spawned worker's NumPy off them."""
    import dask

    from .trace.heap import pages_environ

    return {**{k: v for k, v in dask.config.get(_WORKER_ENVIRON, {}).items() if k != _TRIM}, **pages_environ()}


_TRIM = "MALLOC_TRIM_THRESHOLD_"
#: whether the user set it themselves: Dask writes it into this process's environment when it
#: starts workers, so a value seen later may be Dask's, left over from another cluster
_TRIM_SET_BY_USER = _TRIM in os.environ


@contextmanager
def _without_dasks_trim_setting() -> Iterator[None]:
    """Our workers inherit this process's environment: without the trim setting Dask left in it
    (a user's own is kept). Put back afterwards, for whatever else uses Dask here."""
    leftover = None if _TRIM_SET_BY_USER else os.environ.pop(_TRIM, None)
    try:
        yield
    finally:
        if leftover is not None:
            os.environ[_TRIM] = leftover
