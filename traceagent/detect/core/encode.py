"""The JSON form of every result, generated from its type: a dataclass is its fields in order, a map
has string keys, numpy scalars are Python numbers, NaN and infinities are null (JSON has neither).
No result writes its own `to_dict`: what a type declares is what `analyze --json` prints and what
its JSON Schema (traceagent/schema.py) describes, so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

_ENCODER = msgspec.json.Encoder(enc_hook=lambda value: _numpy(value))
_DECODER = msgspec.json.Decoder()


def _numpy(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} has no JSON form")


def to_json(value: Any) -> bytes:
    """`value` as JSON text (msgspec encodes NaN and infinities as null)."""
    return _ENCODER.encode(value)


def to_data(value: Any) -> Any:
    """`value` as plain JSON values (dicts, lists, str, numbers, bool, None): a round trip through
    the encoder, which is C, so it costs less than a Python walk of the result."""
    return _DECODER.decode(_ENCODER.encode(value))
