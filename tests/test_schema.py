"""The JSON contract: analyze --json and diff --json carry a schema_version and validate against the
JSON Schemas generated from the result types (checked with jsonschema, an independent validator)."""

from __future__ import annotations

import json
from functools import cache

import jsonschema
import pytest
from conftest import (
    DATA,
    DLRM_8RANK,
    RESNET_NW0,
    RESNET_NW4,
    analyzed,
)

from traceagent.cli import main
from traceagent.detect.analysis import SCHEMA_VERSION
from traceagent.detect.compare.diff import diff
from traceagent.detect.core.encode import to_data
from traceagent.detect.registry import DETECTORS
from traceagent.schema import SCHEMAS


@cache  # checking a schema takes a quarter of a second; each is checked once per worker
def validator(which: str) -> jsonschema.Draft202012Validator:
    schema = SCHEMAS[which]()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_rejects_what_breaks_the_contract():
    data = json.loads(json.dumps(analyzed(RESNET_NW0).to_dict()))
    data["ranks"][0]["idle"]["idle_pct"] = "39%"
    del data["verdict"]["limiter"]
    messages = [e.message for e in validator("analyze").iter_errors(data)]
    assert any("'39%' is not of type 'number'" in m for m in messages)
    assert any("'limiter' is a required property" in m for m in messages)


def test_a_verdicts_evidence_holds_only_its_kinds_keys():
    data = json.loads(json.dumps(analyzed(RESNET_NW0).to_dict()))
    evidence = data["verdict"]["evidence"]
    assert evidence["kind"] == data["verdict"]["limiter"] == "idle"
    assert validator("analyze").is_valid(data)
    evidence["kernel"] = "gemm"  # a compute verdict's key on an idle verdict's evidence
    assert not validator("analyze").is_valid(data)
    del evidence["kernel"]
    evidence["kind"] = "compute"  # the tag decides which keys are allowed: cause is an idle key
    assert not validator("analyze").is_valid(data)


def test_diff_json_validates():
    data = json.loads(json.dumps(to_data(diff(analyzed(RESNET_NW0), analyzed(RESNET_NW4)))))
    assert data["schema_version"] == SCHEMA_VERSION
    assert [e.message for e in validator("diff").iter_errors(data)] == []


def test_traceagent_schema_prints_the_generated_schemas(capsys):
    # generated from the types when asked (no copy kept beside them to fall behind): a registered
    # detector's result is a property of each rank, and the version is the contract's
    for which in SCHEMAS:
        assert main(["schema", which]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed == SCHEMAS[which]() and printed["x-schema-version"] == SCHEMA_VERSION
    assert main(["schema", "analyze"]) == 0
    rank = json.loads(capsys.readouterr().out)["$defs"]["RankRecord"]["properties"]
    assert set(rank) == {"rank", "params", "devices", *(k.name for d in DETECTORS for k in d.json_keys())}


ALL_TRACES = [*sorted(p for p in DATA.rglob("*") if p.name.endswith((".json.gz", ".sqlite"))), DLRM_8RANK]


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: str(p.relative_to(DATA)))
def test_analyze_and_diff_json_validate_with_no_key_the_schema_does_not_describe(path):
    # the schemas are closed (additionalProperties: false on every object with named properties), so
    # any key the output has and the schema lacks is an error here
    data = json.loads(json.dumps(analyzed(path).to_dict()))  # as printed: JSON types only
    assert data["schema_version"] == SCHEMA_VERSION
    assert [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator("analyze").iter_errors(data)] == []
    compared = json.loads(json.dumps(to_data(diff(analyzed(RESNET_NW0), analyzed(path)))))
    assert compared["schema_version"] == SCHEMA_VERSION
    assert [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator("diff").iter_errors(compared)] == []


def open_objects(schema, path: str = "") -> list[str]:
    """Where a schema admits keys it does not name: an object without properties whose other keys
    are not typed (free-form), or an empty schema (anything)."""
    found = []
    if isinstance(schema, dict):
        if schema == {} or (schema.get("type") == "object" and "properties" not in schema
                            and schema.get("additionalProperties") in (None, True, {})):
            found.append(path or "/")
        if "properties" in schema and schema.get("additionalProperties") is not False:
            found.append(f"{path} (not closed)")
        for key, value in schema.items():
            found += open_objects(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += open_objects(value, f"{path}/{i}")
    return found


def test_no_part_of_either_schema_is_free_form():
    for which in SCHEMAS:
        assert open_objects(SCHEMAS[which]()) == [], which
    assert open_objects({"type": "object"}) and open_objects({"properties": {"a": {}}})  # the finder finds them
