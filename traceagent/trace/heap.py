"""Handing freed memory back to the operating system while a large trace is built, and the
page size large arrays get.

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
def _malloc_trim():  # -> the C function, or None where the C library has none
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def return_freed_memory() -> None:
    """Give the allocator's free pages back to the operating system, where the C library can."""
    if (trim := _malloc_trim()) is not None:
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
    the chat app's loader (the Dask workers they start follow them: tasks._worker_environ), not on
    import: a program that imports traceagent keeps its own setting."""
    if PAGES_ENV not in os.environ and (setter := _numpy_switch("_set_madvise_hugepage")):
        setter(False)


def pages_environ() -> dict[str, str]:
    """What a process started afresh (a spawned Dask worker) needs in its environment for its
    arrays to get the pages this process's get: nothing where the user set PAGES_ENV (it inherits
    theirs) or NumPy's default holds here (a forked worker inherits the switch itself)."""
    getter = _numpy_switch("_get_madvise_hugepage")
    small = getter is not None and not getter()
    return {PAGES_ENV: "0"} if small and PAGES_ENV not in os.environ else {}


def _numpy_switch(name: str):  # -> NumPy's function of that name, or None where this NumPy has none
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None) or getattr(np.core, "multiarray", None)
    return getattr(multiarray, name, None)
