"""Handing freed memory back to the operating system while a large trace is built, keeping it
for reuse while the trace is analysed, and the page size large arrays get.

A trace is read as many small column pieces, then joined into large arrays. The pieces are freed
as they are joined, but glibc's allocator keeps small freed blocks for reuse instead of returning
them, while each large joined array gets fresh pages: without help the process holds both, and a
200 MB trace peaks at twice the memory its columns need. `malloc_trim` returns the freed pages
(what Dask's workers do for the same reason). Elsewhere (macOS, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

import numpy as np

#: freed bytes worth a trim: each trim walks the heap (a few ms), so not after every small piece
TRIM_EVERY_BYTES = 32 << 20


@functools.cache
def _libc(name: str):  # -> the C library's function of that name, or None where it has none (not glibc)
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def return_freed_memory() -> None:
    """Give the allocator's free pages back to the operating system, where the C library can."""
    if (trim := _libc("malloc_trim")) is not None:
        trim(0)


class FreedCounter:
    """Counts bytes let go and trims the heap each time TRIM_EVERY_BYTES more have gone."""

    def __init__(self) -> None:
        self._since = 0

    def freed(self, nbytes: int) -> None:
        self._since += nbytes
        if self._since >= TRIM_EVERY_BYTES:
            self._since = 0
            return_freed_memory()


#: NumPy reads it when imported; a value the user set is theirs and is never changed
PAGES_ENV = "NUMPY_MADVISE_HUGEPAGE"


def small_pages_for_arrays() -> None:
    """Stop NumPy asking Linux for huge pages for each array of 4 MiB or more (madvise), unless
    the user set NUMPY_MADVISE_HUGEPAGE. Where the kernel compacts memory to find a huge page at
    first touch (transparent_hugepage/defrag `madvise`, the default of many distributions), an
    array's first use can stall, and the analysis makes and frees large temporaries detector after
    detector, handing pages back between them (above): 1 M tiny kernels took 5.9-6.5 s with huge
    pages and 5.3 s without, 3 M 19 s and 15 s, the same at 200 MB (numpy/numpy#31590); at 10 M
    (3.3 GB) the small pages' own faults cost more (84 s against 77-80 s). Called by the command line and
    the chat app's loader (prepare_for_large_arrays; the Dask workers they start follow them:
    tasks._worker_environ), not on import: a program that imports traceagent keeps its own setting."""
    if PAGES_ENV not in os.environ and (setter := _numpy_switch("_set_madvise_hugepage")):
        setter(False)


#: glibc's allocator settings that keep an analysis's freed arrays for the next one (mallopt's
#: parameter, its value, and the environment variable that sets it in a process started afresh):
#: no array of its own mapping (each large one would be mapped, faulted in page by page and
#: unmapped again when freed), and freed memory at the heap's top kept up to 256 MiB
REUSE = [(-4, 0, "MALLOC_MMAP_MAX_"), (-1, 256 << 20, "MALLOC_TRIM_THRESHOLD_")]
_reusing: list[str] = []  # the variables of REUSE this process set with mallopt


def reuse_freed_arrays() -> None:
    """Have glibc serve large arrays from its heap and keep the memory they free for the next
    ones, unless the user set that variable. The analysis makes and frees temporaries of the
    trace's length detector after detector: on 10 million tiny kernels each was a fresh mapping,
    9 M page faults and 26 s of system time in a 41.5 s analysis; from the heap 1.5-2.5 M and
    20-22 s, at the same peak (3.3 GB). A 200 MB trace is unchanged (1.2-1.4 s, peak within 3%).
    The loader still trims the heap while it builds the trace (FreedCounter: malloc_trim returns
    the free pages inside it too), so the load's peak is as before. Not on import, as
    small_pages_for_arrays; elsewhere than glibc, nothing."""
    if (mallopt := _libc("mallopt")) is None:
        return
    for param, value, env in REUSE:
        if env not in os.environ and env not in _reusing and mallopt(param, value) == 1:
            _reusing.append(env)


def prepare_for_large_arrays() -> None:
    """The memory settings the command line and the chat app's loader analyse with (the Dask
    workers they start follow them: pages_environ): small pages, freed arrays reused."""
    small_pages_for_arrays()
    reuse_freed_arrays()


def pages_environ() -> dict[str, str]:
    """What a process started afresh (a spawned Dask worker) needs in its environment for its
    arrays to get the pages and the allocator this process's get: nothing where the user set
    PAGES_ENV (it inherits theirs) or NumPy's default holds here (a forked worker inherits the
    switch itself), and the allocator settings reuse_freed_arrays made here."""
    getter = _numpy_switch("_get_madvise_hugepage")
    small = getter is not None and not getter()
    reuse = {env: str(value) for _, value, env in REUSE if env in _reusing}
    return ({PAGES_ENV: "0"} if small and PAGES_ENV not in os.environ else {}) | reuse


def _numpy_switch(name: str):  # -> NumPy's function of that name, or None where this NumPy has none
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None) or getattr(np.core, "multiarray", None)
    return getattr(multiarray, name, None)
