"""A function run in a forked child process while this one works on, its result sent back.

For reading one large file on two cores: the child inherits everything imported (it starts in
milliseconds) and sends its result's numpy arrays as raw bytes beside the pickle (protocol 5,
out of band), not copied into it. Forking is kept to where it is safe: Linux, a second core, and
no other Python thread in this process that could hold a lock the child needs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


class ChildFailed(Exception):
    """The child died, or did not answer in time: do its work here instead."""


def fork_is_safe() -> bool:
    """Whether a child may be forked now to work beside this process. Not in a daemonic process
    (a multiprocessing.Pool's workers), which multiprocessing forbids to have children."""
    return (sys.platform == "linux" and threading.active_count() == 1 and len(os.sched_getaffinity(0)) > 1
            and not multiprocessing.current_process().daemon)


class Forked:
    """`func(*args)` running in a forked child; `result()` waits for it."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        with contextlib.suppress(ImportError, OSError, AttributeError):  # 1 MB, not 64 kB, at a time (Linux)
            import fcntl

            fcntl.fcntl(send.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        self._child = context.Process(target=_run, args=(send, func, args), daemon=True)
        self._not_started: str | None = None
        try:
            self._child.start()
        except (OSError, AssertionError) as exc:  # out of processes or memory, or a daemon: result() says so
            self._not_started = f"could not fork ({exc})"
        send.close()  # this end lives in the child now; the pipe closes when the child exits

    def result(self, timeout: float) -> Any:
        """The function's value; its exception re-raised; ChildFailed if the child did not
        start, died, or sent nothing within `timeout` seconds (a deadlock: it is stopped)."""
        try:
            if self._not_started:
                raise ChildFailed(self._not_started)
            if not self._receive.poll(timeout):
                raise ChildFailed(f"no answer in {timeout:.0f} s")
            status, payload = self._receive.recv()
            if status == "error":
                raise payload
            blocks = [bytearray(size) for size in payload]  # the pickle, then each array's bytes
            deadline = time.monotonic() + timeout
            for block in blocks:
                _read_into(self._receive.fileno(), memoryview(block), deadline)
        except (EOFError, OSError) as exc:
            raise ChildFailed(f"the child process ended early ({exc!r})") from None
        finally:
            self.close()
        return pickle.loads(blocks[0], buffers=blocks[1:])  # arrays over the blocks: no further copy

    def close(self) -> None:
        """Stop the child if it still runs, and reap it."""
        if not self._not_started:
            if self._child.is_alive():
                self._child.kill()
            self._child.join()
        self._receive.close()


def _run(send, func: Callable[..., Any], args: tuple) -> None:
    try:
        value = func(*args)
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except BaseException as exc:  # everything goes back to the parent, which decides
        try:
            send.send(("error", exc))
        except Exception:  # an exception that does not pickle
            send.send(("error", RuntimeError(repr(exc))))
        return
    blocks = [memoryview(data), *(buffer.raw() for buffer in buffers)]
    send.send(("ok", [block.nbytes for block in blocks]))
    for block in blocks:  # raw, after the header: Connection.send_bytes would copy each twice more
        while block.nbytes:
            block = block[os.write(send.fileno(), block):]


def _read_into(fd: int, view: memoryview, deadline: float) -> None:
    while view.nbytes:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise EOFError("the child stopped sending")
        got = os.readv(fd, [view])
        if not got:
            raise EOFError("the pipe closed")
        view = view[got:]
