"""A frame of the model's column types (model.GPU_COLUMNS and the others) in one file and back,
exactly: the cache's format.

The file is a msgpack header (the rows, and each column's name, type, the NumPy type of each of
its buffers and a categorical's categories), then each buffer's raw bytes, 64-byte aligned, read
straight into new arrays: one copy from the disk to the frame. NumPy and msgspec are all it needs;
Arrow's IPC files, which it replaces, brought pyarrow, whose import alone held 40 MiB.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

MAGIC = b"traceagent frame 1\n"
_ALIGN = 64
_LENGTH = struct.Struct("<Q")
#: the NumPy types a buffer may have: the model's numbers, bools and categorical codes (little-endian)
_BUFFER_TYPES = {t: np.dtype(t) for t in ("|i1", "<i2", "<i4", "<i8", "<f4", "<f8", "|b1")}
#: a categorical's categories: objects, pandas' strings, or float64 where pandas made an empty one so
_CATEGORY_TYPES = {"object": object, "str": "str", "float64": np.float64}
#: how many buffers a column of each type has
_BUFFER_COUNT = {"Int64": 2}


class _Column(msgspec.Struct, array_like=True):
    name: str
    type: str  # the model's: int32, int64, float32, float64, bool, Int64 (values, then the mask), category (codes)
    buffers: list[str]  # each buffer's NumPy type, in order
    categories: list[str] | None = None
    categories_type: str = "object"


class _Header(msgspec.Struct, array_like=True):
    rows: int
    columns: list[_Column]


def write_frame(path: Path, frame: pd.DataFrame) -> None:
    """Write `frame` (a RangeIndex and the model's column types) to `path`."""
    columns, buffers = [], []
    for name in frame.columns:
        column, arrays = _encoded(str(name), frame[name])
        columns.append(column)
        buffers.extend(arrays)
    header = msgspec.msgpack.encode(_Header(len(frame), columns))
    with open(path, "wb") as f:
        f.write(MAGIC + _LENGTH.pack(len(header)) + header)
        for array in buffers:
            f.write(b"\0" * (-f.tell() % _ALIGN))
            f.write(np.ascontiguousarray(array).data.cast("B"))


def _encoded(name: str, column: pd.Series) -> tuple[_Column, list[np.ndarray]]:
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        categories = dtype.categories
        if str(categories.dtype) not in _CATEGORY_TYPES or (categories.dtype == np.float64 and len(categories)):
            raise TypeError(f"column {name!r}: categories must be strings, not {categories.dtype}")
        codes = column.array.codes
        return (_Column(name, "category", [codes.dtype.str], [str(c) for c in categories] if len(categories) else [],
                        str(categories.dtype)), [codes])
    if str(dtype) == "Int64":
        array = column.array
        return (_Column(name, "Int64", ["<i8", "|b1"]),
                [column.to_numpy(dtype=np.int64, na_value=0), np.asarray(array.isna(), dtype=bool)])
    values = column.to_numpy()
    if values.dtype.str not in _BUFFER_TYPES:
        raise TypeError(f"column {name!r}: {dtype} is not a type the model has")
    return _Column(name, str(dtype), [values.dtype.str]), [values]


def read_frame(path: Path, schema: dict[str, str]) -> pd.DataFrame:
    """The frame written at `path`, checked against `schema` (the model's columns and types);
    ValueError if the file is not one write_frame made for that schema, or is cut or damaged."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError("not a traceagent frame file")
        (size,) = _LENGTH.unpack(f.read(_LENGTH.size))
        try:
            header = msgspec.msgpack.decode(f.read(size), type=_Header)
        except msgspec.DecodeError as exc:
            raise ValueError(f"damaged header: {exc}") from None
        if [(c.name, c.type) for c in header.columns] != list(schema.items()):
            raise ValueError("columns differ from the model's")
        if any(len(c.buffers) != _BUFFER_COUNT.get(c.type, 1) for c in header.columns):
            raise ValueError("a column has the wrong number of buffers")
        buffers = _buffers(f, header)
        data = {c.name: _decoded(c, buffers) for c in header.columns}
    return pd.DataFrame(data, columns=pd.Index(list(data), dtype=object), copy=False)


def _buffers(f, header: _Header) -> Iterator[np.ndarray]:
    """Each buffer the header lists, read in order into an array of its own."""
    for column in header.columns:
        for kind in column.buffers:
            dtype = _BUFFER_TYPES.get(kind)
            if dtype is None:
                raise ValueError(f"column {column.name!r}: a buffer of type {kind!r}")
            f.seek(-f.tell() % _ALIGN, 1)
            array = np.empty(header.rows, dtype=dtype)
            if f.readinto(array.data.cast("B")) != array.nbytes:
                raise ValueError(f"column {column.name!r} is cut short")
            yield array


def _decoded(column: _Column, buffers: Iterator[np.ndarray]):
    values = next(buffers)
    if column.type == "category":
        if column.categories is None or column.categories_type not in _CATEGORY_TYPES:
            raise ValueError(f"column {column.name!r} has no categories")
        categories = pd.Index(column.categories, dtype=_CATEGORY_TYPES[column.categories_type])
        return pd.Categorical.from_codes(values, categories=categories)  # checks each code is one of them
    if column.type == "Int64":
        return pd.arrays.IntegerArray(values, next(buffers))
    if values.dtype != np.dtype(column.type):
        raise ValueError(f"column {column.name!r} holds {values.dtype}, not {column.type}")
    return values
