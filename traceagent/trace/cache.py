"""Parquet cache of normalized traces, so the second load of a trace skips parsing.

Entries live in one cache directory (not beside the trace: trace folders are often read-only)
keyed by the trace's absolute path, size and mtime, and by the model version below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import pandas as pd

from .model import Trace, TraceMeta


def _loader_fingerprint() -> str:
    """A hash of the loader sources: any change to what loading produces retires old entries,
    without anyone having to remember to bump a version."""
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


MODEL_VERSION = _loader_fingerprint()


def cache_dir() -> Path:
    """`$TRACEAGENT_CACHE_DIR`, else `$XDG_CACHE_HOME/traceagent`, else `~/.cache/traceagent`."""
    if env := os.environ.get("TRACEAGENT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "traceagent"


def _entry(path: str) -> Path:
    stat = os.stat(path)
    key = f"{os.path.abspath(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\0{MODEL_VERSION}"
    return cache_dir() / hashlib.sha256(key.encode()).hexdigest()[:24]


def read(path: str) -> Trace | None:
    """The cached Trace for this file as it is now, or None."""
    entry = _entry(path)
    try:
        meta = json.loads((entry / "meta.json").read_text())
        meta["devices"] = {int(k): v for k, v in meta["devices"].items()}
        frames = {name: _object_categories(pd.read_parquet(entry / f"{name}.parquet"))
                  for name in ("gpu", "cpu", "steps")}
    except (OSError, ValueError, KeyError):
        return None
    return Trace(meta=TraceMeta(**meta), **frames)


def _object_categories(frame: pd.DataFrame) -> pd.DataFrame:
    """Parquet hands categories back as Arrow strings; the loaders make plain object categories,
    and a cached Trace must be the same as a parsed one."""
    for column in frame.columns:
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            values = frame[column].array
            frame[column] = pd.Categorical.from_codes(values.codes, categories=pd.Index(values.categories, dtype=object))
    return frame


def write(path: str, trace: Trace) -> bool:
    """Store the Trace; a cache that cannot be written is skipped, never an error."""
    entry = _entry(path)
    tmp = entry.with_name(entry.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name in ("gpu", "cpu", "steps"):
            getattr(trace, name).to_parquet(tmp / f"{name}.parquet", index=False)
        (tmp / "meta.json").write_text(json.dumps(dataclasses.asdict(trace.meta), default=str))
        if entry.exists():
            return True  # another process got there first
        tmp.rename(entry)  # atomic: readers never see half an entry
        return True
    except OSError:
        return False
    finally:
        if tmp.exists():
            for f in tmp.iterdir():
                f.unlink()
            tmp.rmdir()
