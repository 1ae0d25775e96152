"""The JSON contract of `analyze --json` and `diff --json`: a `schema_version`, and JSON Schemas
generated (with pydantic) from the types the JSON is encoded from (analysis.AnalysisRecord,
diff.DiffResult: core/encode.py), so the schema is the code's and nothing is patched after.
`traceagent schema` prints them, generated when asked: no copy is kept to fall behind the types (a
detector added to the registry is in the schema with nothing else to regenerate).

The version changes its major number when a key is removed or changes meaning, its minor number
when keys are added.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from .detect.analysis import SCHEMA_VERSION, AnalysisRecord
from .detect.compare.diff import DiffResult
from .detect.compare.scaling import ScalingResult


def _schema(kind: type, title: str) -> dict:
    schema = TypeAdapter(kind).json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
            "x-schema-version": SCHEMA_VERSION, **schema}


def closed(schema: Any) -> Any:
    """Every object with named properties admits no others (additionalProperties: false): a key the
    schema does not describe is an error, so the schema cannot fall behind the output unnoticed.
    Maps (dict[str, X], described by additionalProperties alone) stay maps. A dataclass field with
    a default is written all the same (encode.to_data writes every field): it is required too."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
            written = [name for name, prop in out["properties"].items() if isinstance(prop, dict) and "default" in prop]
            if written:
                out["required"] = [*out.get("required", []), *(n for n in written if n not in out.get("required", []))]
        return out
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


def analysis_schema() -> dict:
    return _schema(AnalysisRecord, "traceagent analyze --json")


def diff_schema() -> dict:
    return _schema(DiffResult, "traceagent diff --json")


SCHEMAS = {"analyze": lambda: closed(analysis_schema()), "diff": lambda: closed(diff_schema()),
           "scaling": lambda: closed(_schema(ScalingResult, "traceagent scaling --json"))}
