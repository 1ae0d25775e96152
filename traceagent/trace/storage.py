"""Where trace files live: local paths through the operating system, URLs (`s3://`, `gs://`,
`memory://`…) through fsspec, wherever the matching fsspec package is installed.

Local paths keep the plain `os` calls: they are the common case and fsspec adds nothing there.
"""

from __future__ import annotations

import glob as globbing
import os
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ..errors import TraceError

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]+://")
_GLOB = re.compile(r"[*?\[]")


def is_url(path: str) -> bool:
    """A path with a scheme (`s3://bucket/run/`), read through fsspec."""
    return bool(_URL.match(path))


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


def listing(directory: str) -> tuple[list[str], list[str]]:
    """(regular files, sub-directories) directly inside a directory, each sorted by name."""
    if not is_url(directory):
        entries = list(Path(directory).iterdir())
        return (sorted(str(p) for p in entries if p.is_file()), sorted(str(p) for p in entries if p.is_dir()))
    fs, root = _fs(directory)
    entries = fs.ls(root, detail=True)
    files = sorted(fs.unstrip_protocol(e["name"]) for e in entries if e["type"] == "file")
    dirs = sorted(fs.unstrip_protocol(e["name"]) for e in entries if e["type"] == "directory")
    return files, dirs


def glob(pattern: str) -> list[str]:
    """The regular files matching a glob pattern, sorted."""
    if not is_url(pattern):
        return sorted(p for p in globbing.glob(pattern) if os.path.isfile(p))
    fs, root = _fs(pattern)
    return sorted(fs.unstrip_protocol(p) for p in fs.glob(root) if fs.isfile(p))


def open_binary(path: str) -> BinaryIO:
    if not is_url(path):
        return open(path, "rb")
    fs, root = _fs(path)
    return fs.open(root, "rb")


def size_and_version(path: str) -> tuple[int, str]:
    """The file's size and what changes when it is rewritten or replaced. Locally: its device and
    inode (a file moved into its place is another file), mtime, and ctime, which the kernel sets
    on every change, a restored mtime (`touch -r`, `cp -p` onto it) included. For a URL: its
    mtime, else an ETag or checksum."""
    if not is_url(path):
        stat = os.stat(path)
        return stat.st_size, f"{stat.st_dev}:{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"
    fs, root = _fs(path)
    info = fs.info(root)
    version = next((str(info[k]) for k in ("mtime", "LastModified", "updated", "ETag", "etag", "created")
                    if info.get(k) is not None), "")
    return int(info.get("size") or 0), version


def absolute(path: str) -> str:
    return path if is_url(path) else os.path.abspath(path)
