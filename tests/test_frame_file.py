"""The cache's frame files give back exactly the frames written: every column type of the model,
real traces' frames, and a file that is cut or damaged is a ValueError, never a wrong frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import B200, NSYS_BEFORE, RESNET_NW0

import traceagent
from traceagent.trace.frame_file import MAGIC, read_frame, write_frame
from traceagent.trace.model import STEP_COLUMNS, categorical, typed_frame

SCHEMA = {"kind": "category", "empty_kind": "category", "device": "int32", "start": "int64", "ratio": "float32",
          "value": "float64", "is_comm": "bool", "gpu_start": "Int64", "label": "category"}


def _frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(rows)
    names = ["gemm", "nccl:all_reduce", "ünïcode ✓", ""]
    return typed_frame({
        "kind": categorical([names[i % 4] if i % 5 else None for i in range(rows)]),
        "empty_kind": pd.Categorical.from_codes(np.full(rows, -1, dtype=np.int8),
                                                categories=pd.Index([], dtype="float64" if rows else object)),
        "device": rng.integers(-1, 8, rows).astype(np.int32),
        "start": rng.integers(-(2**62), 2**62, rows),
        "ratio": rng.random(rows).astype(np.float32),
        "value": np.where(rng.random(rows) < 0.2, np.nan, rng.random(rows)),
        "is_comm": rng.random(rows) < 0.5,
        "gpu_start": pd.array([None if i % 3 == 0 else i * 7 for i in range(rows)], dtype="Int64"),
        "label": pd.Categorical(["a", "b"] * (rows // 2) + ["a"] * (rows % 2)),  # pandas' own string categories
    }, SCHEMA)


def _assert_same(read: pd.DataFrame, written: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(read, written, check_exact=True)
    for column in written.columns:
        if isinstance(written[column].dtype, pd.CategoricalDtype):
            assert read[column].cat.categories.dtype == written[column].cat.categories.dtype, column


@pytest.mark.parametrize("rows", [0, 1, 1001])
def test_every_column_type_reads_back_exactly(tmp_path, rows):
    frame = _frame(rows)
    write_frame(tmp_path / "f.frame", frame)
    _assert_same(read_frame(tmp_path / "f.frame", SCHEMA), frame)


@pytest.mark.parametrize("path", [RESNET_NW0, B200, NSYS_BEFORE], ids=lambda p: p.name[:24])
def test_a_real_traces_frames_read_back_exactly(tmp_path, path):
    trace = traceagent.load(path, use_cache=False).traces[0]
    for name in ("gpu", "cpu", "steps", "memory", "metrics"):
        frame = getattr(trace, name)
        write_frame(tmp_path / name, frame)
        _assert_same(read_frame(tmp_path / name, {c: str(t) for c, t in _schema_of(name).items()}), frame)


def _schema_of(name: str) -> dict[str, str]:
    from traceagent.trace import model
    return {"gpu": model.GPU_COLUMNS, "cpu": model.CPU_COLUMNS, "steps": STEP_COLUMNS, "memory": model.MEMORY_COLUMNS,
            "metrics": model.METRIC_COLUMNS}[name]


def _damaged(raw: bytes, how: str) -> bytes:
    if how == "cut":
        return raw[: len(raw) - 100]
    if how == "magic":
        return b"X" + raw[1:]
    if how == "header":
        return raw[:40] + b"\xff" * 20 + raw[60:]
    assert how == "code_out_of_range"  # the first buffer, 64-byte aligned after the header, is `kind`'s int8
    header_end = len(MAGIC) + 8 + int.from_bytes(raw[len(MAGIC):len(MAGIC) + 8], "little")  # codes: one past them
    at = header_end + (-header_end % 64) + 1
    return raw[:at] + b"\x7f" + raw[at + 1:]


@pytest.mark.parametrize("how", ["cut", "magic", "header", "code_out_of_range"])
def test_a_damaged_file_is_a_value_error(tmp_path, how):
    frame = _frame(1001)
    write_frame(tmp_path / "f.frame", frame)
    (tmp_path / "f.frame").write_bytes(_damaged((tmp_path / "f.frame").read_bytes(), how))
    with pytest.raises(ValueError):
        read_frame(tmp_path / "f.frame", SCHEMA)


def test_another_schema_is_a_value_error(tmp_path):
    write_frame(tmp_path / "f.frame", _frame(3))
    with pytest.raises(ValueError, match="columns differ"):
        read_frame(tmp_path / "f.frame", {**SCHEMA, "start": "int32"})


def test_a_loaded_trace_is_read_back_from_the_cache(isolated_cache):
    from traceagent.trace import cache, load
    parsed = traceagent.load(RESNET_NW0).traces[0]
    cached = cache.read(load.file_key(str(RESNET_NW0)))
    assert cached is not None  # a hit, not a damaged entry parsed again
    for name in ("gpu", "cpu", "steps", "memory", "metrics"):
        _assert_same(getattr(cached, name), getattr(parsed, name))
