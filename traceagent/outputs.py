"""Files traceagent writes (reports, annotated traces, transcripts): never over a trace it reads,
never half-written.

Every output goes to a temporary file in its own directory, which is renamed over the target
only once it is whole: a full disk or a killed process leaves the old file as it was. An output
path that is one of the job's trace files (by any path, link or hard link), or a trace file in a
rank directory being read, is refused before anything runs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import TraceError
from .trace import storage

if TYPE_CHECKING:
    from .trace.load import Sources


def check_output(output: str | os.PathLike, source: str | os.PathLike | Sequence[str | os.PathLike],
                 side_inputs: Sequence[str | os.PathLike | None] = ()) -> Sources:
    """TraceError (exit 2) if writing `output` would replace what the command reads: one of the
    job's trace files, a side input (an Nsight Compute export, a graph capture), or a file in one
    of its rank directories with a trace file's name (it would be read as a rank next time). The
    job's files as resolved for the check, for the caller."""
    from .trace.load import is_trace_name, resolve

    target = os.path.realpath(output)
    sources = resolve(source)
    files = sources.files
    read = [(f, "the trace being read") for f in files]
    read += [(storage.as_local(os.fspath(f)), "an input of this command") for f in side_inputs if f is not None]
    for file, what in read:
        if storage.is_url(file):
            continue
        if target == os.path.realpath(file) or _same_file(target, file):
            raise TraceError(str(output), f"is {what} ({file}); writing it would destroy it",
                             "Choose another output path.")
    if not (isinstance(source, (str, os.PathLike)) and not storage.is_url(os.fspath(source))
            and os.path.isdir(source)):
        return sources  # beside a single file, a glob's or a list's files, any other name is safe
    directories = {os.path.realpath(os.path.dirname(f)) for f in files}  # the directory, or its rank sub-directories
    if os.path.dirname(target) in directories and is_trace_name(target):
        raise TraceError(str(output), "is a trace file's name inside a rank directory being read: it would be read "
                         "as a rank next time", "Write it outside the directory, or give it another suffix.")
    return sources


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): not the same
        return False


def write_atomically(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` (str as UTF-8) to `path` whole or not at all: a temporary file in the same
    directory, flushed to disk, then renamed over it. A link is followed (its target is
    replaced). OSError as the system gave it; the temporary file is then removed."""
    target = Path(os.path.realpath(path))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _remove_stale_temporaries(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=_temporary_prefix(target), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


#: a temporary output of another host, whose process cannot be asked, is stale after this long
_TMP_GRACE_S = 24 * 3600


def _temporary_prefix(target: Path) -> str:
    """`.<name>.tmp-<host>-<pid>-`: hidden, and naming the process that writes it, so a later write
    to the same output can tell a killed writer's leftover from a live one."""
    return f".{target.name}.tmp-{socket.gethostname()}-{os.getpid()}-"


def _remove_stale_temporaries(target: Path) -> None:
    """Remove temporaries of `target` left by a writer that was killed (SIGKILL, power loss):
    only files of our own naming, of this host's dead processes, or a day old from another host."""
    prefix, host, now = f".{target.name}.tmp-", socket.gethostname(), time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
                continue
            owner = entry.name[len(prefix):-len(".tmp")]
            owner_host, pid = _owner(owner)
            with contextlib.suppress(OSError):
                if not entry.is_file(follow_symlinks=False):
                    continue
                if (storage.writer_gone(pid) if owner_host == host
                        else now - entry.stat(follow_symlinks=False).st_mtime > _TMP_GRACE_S):
                    os.unlink(entry.path)


def _owner(owner: str) -> tuple[str, str]:
    """(host, pid) from `<host>-<pid>-<random>` (a host name may hold dashes; the random part none)."""
    rest, _, _random = owner.rpartition("-")
    host, _, pid = rest.rpartition("-")
    return host, pid


def _mode_for(target: Path) -> int:
    """The permissions an ordinary write would give: the old file's, else 0666 less the umask."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read without changing it where Linux says it (threads may be running)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
