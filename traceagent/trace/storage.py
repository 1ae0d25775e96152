"""Where trace files live: local paths through the operating system, URLs (`s3://`, `gs://`,
`memory://`…) through fsspec, wherever the matching fsspec package is installed.

Local paths keep the plain `os` calls: they are the common case and fsspec adds nothing there.
"""

from __future__ import annotations

import errno
import glob as globbing
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from ..errors import TraceError

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]+://")
_GLOB = re.compile(r"[*?\[]")


def is_url(path: str) -> bool:
    """A path with a scheme (`s3://bucket/run/`), read through fsspec. `file://` is a local path
    (as_local): callers turn it into one first."""
    return bool(_URL.match(path))


def as_local(path: str) -> str:
    """`file:///run/t.json` (or `file://localhost/...`) as the local path it names, so that it is
    checked, keyed and cached as that path; anything else as it is."""
    if not path[:7].lower() == "file://":
        return path
    parsed = urlsplit(path)
    if parsed.netloc not in ("", "localhost"):
        raise TraceError(path, f"a file:// URL on another host ({parsed.netloc})", "Give a local path.")
    return unquote(parsed.path)


def has_glob(path: str) -> bool:
    return bool(_GLOB.search(path))


def _fs(url: str):
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:  # no package for the scheme, or a malformed URL
        raise TraceError(url, f"cannot open this URL ({exc})",
                         "Install the fsspec package for its scheme (s3fs for s3://, gcsfs for gs://).") from None


def _ask(path: str, local: Callable[[str], bool], remote: str) -> bool:
    """A yes/no question about a path: `local` for a local path, the fsspec method `remote` for a URL."""
    if not is_url(path):
        return local(path)
    fs, root = _fs(path)
    return bool(getattr(fs, remote)(root))


def exists(path: str) -> bool:
    return _ask(path, os.path.exists, "exists")


def is_dir(path: str) -> bool:
    return _ask(path, os.path.isdir, "isdir")


def is_regular_file(path: str) -> bool:
    """A plain file: a FIFO, socket or device could block a read forever."""
    return _ask(path, os.path.isfile, "isfile")


def name(path: str) -> str:
    """The last part of a path or URL."""
    return PurePosixPath(path.rstrip("/")).name if is_url(path) else Path(path).name


def parent_name(path: str) -> str:
    return PurePosixPath(path.rstrip("/")).parent.name if is_url(path) else Path(path).parent.name


def listing(directory: str) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(regular files, sub-directories, (entry, why it is neither) for the rest: links to
    nothing, links that loop, pipes...) directly inside a directory, each sorted by name."""
    if not is_url(directory):
        files, dirs, others = [], [], []
        for entry in sorted(str(p) for p in Path(directory).iterdir()):
            if os.path.isfile(entry):
                files.append(entry)
            elif os.path.isdir(entry):
                dirs.append(entry)
            else:
                others.append((entry, not_a_file(entry)))
        return files, dirs, others
    fs, root = _fs(directory)
    entries = fs.ls(root, detail=True)
    files = sorted(fs.unstrip_protocol(e["name"]) for e in entries if e["type"] == "file")
    dirs = sorted(fs.unstrip_protocol(e["name"]) for e in entries if e["type"] == "directory")
    return files, dirs, []


def glob(pattern: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(the regular files matching a glob pattern, (match, why it is not one) for the rest), sorted."""
    if not is_url(pattern):
        matches = sorted(globbing.glob(pattern))
        return ([p for p in matches if os.path.isfile(p)],
                [(p, not_a_file(p)) for p in matches if not os.path.isfile(p) and not os.path.isdir(p)])
    fs, root = _fs(pattern)
    return sorted(fs.unstrip_protocol(p) for p in fs.glob(root) if fs.isfile(p)), []


def not_a_file(path: str) -> str:
    """Why a local path that exists in its directory is not a regular file to read."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            try:
                target_mode = os.stat(path).st_mode
            except FileNotFoundError:
                return f"a symbolic link to nothing ({os.readlink(path)} does not exist)"
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return "a symbolic link that loops"
                return f"a symbolic link that cannot be followed ({exc.strerror})"
            return f"a symbolic link to {_kind(target_mode)}"
        return _kind(mode)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a file: reading it could block forever"
    if stat.S_ISSOCK(mode):
        return "a socket, not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a file"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def open_binary(path: str) -> BinaryIO:
    """The file for reading. A local one is opened without blocking and must be a regular file:
    a pipe or device put in its place after any check is refused, never read for ever."""
    if not is_url(path):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TraceError(path, "not a regular file (a pipe, socket or device)", "Save it to a file first.")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return open(fd, "rb")
    fs, root = _fs(path)
    return fs.open(root, "rb")


def size_and_version(path: str) -> tuple[int, str]:
    """The file's size and what changes when it is rewritten or replaced. Locally: its device and
    inode (a file moved into its place is another file), mtime, and ctime, which the kernel sets
    on every change, a restored mtime (`touch -r`, `cp -p` onto it) included. For a URL: its
    mtime, else an ETag or checksum."""
    if not is_url(path):
        st = os.stat(path)
        return st.st_size, f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    fs, root = _fs(path)
    info = fs.info(root)
    version = next((str(info[k]) for k in ("mtime", "LastModified", "updated", "ETag", "etag", "created")
                    if info.get(k) is not None), "")
    return int(info.get("size") or 0), version


def absolute(path: str) -> str:
    return path if is_url(path) else os.path.abspath(path)


def check_file(path: str) -> None:
    """TraceError unless `path` is a regular file: what every file any command or tool reads (a
    trace, a rank, a graph capture, an Nsight Compute export) is checked with before it is opened."""
    if not exists(path):
        raise TraceError(path, "no such file or directory")
    if not is_regular_file(path):  # a FIFO, socket or device: reading it could block forever
        raise TraceError(path, "not a regular file (a pipe, socket or device)", "Save it to a file first.")


def writer_gone(pid: str) -> bool:
    """Whether the process `pid` of this host, which named a temporary file after itself, no
    longer runs (another user's live process counts as running)."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process
        return False
    return False
