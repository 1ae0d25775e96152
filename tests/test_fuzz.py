"""Property-based tests: real traces mutated at random (Hypothesis) must give an analysis with
no impossible number, or one TraceError; never another exception, never a hang.

A few examples run in the suite; a long run takes TRACEAGENT_FUZZ_EXAMPLES=2000."""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import signal
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import DATA
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from invariants import impossible

import traceagent
from traceagent.errors import TraceError

EXAMPLES = int(os.environ.get("TRACEAGENT_FUZZ_EXAMPLES", "12"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 12,  # the suite's run repeats
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
HANG_S = 30

# a real trace (HTA's AlexNet test trace, kernels and host events), cut to its first events so
# each example is fast
_ALEXNET = json.loads(gzip.decompress((DATA / "hta" / "alexnet_critical_path.json.gz").read_bytes()))
KINETO = {**_ALEXNET, "traceEvents": _ALEXNET["traceEvents"][:400]}
NSYS = DATA / "test-cuda" / "report1.sqlite"


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) when the body runs longer than `seconds`."""
    def timeout(*_):
        raise TimeoutError(f"no answer within {seconds} s: a hang")
    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(path: Path) -> None:
    """The property: an analysis with nothing impossible in it, or a TraceError."""
    with within(HANG_S):
        try:
            analysis = traceagent.analyze(path, use_cache=False)
        except TraceError:
            return
        assert impossible(json.loads(json.dumps(analysis.to_dict()))) == []


VALUES = st.sampled_from([None, "text", -1, -1e18, 1e300, 2**70, [], {}, True, "\x1b[2J", "9" * 40])
FIELDS = st.sampled_from(["ts", "dur", "name", "cat", "ph", "pid", "tid", "args"])
ARGS = st.sampled_from(["device", "stream", "correlation", "External id", "bytes"])


@st.composite
def kineto_mutation(draw):
    return draw(st.lists(st.one_of(
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
        st.tuples(st.just("drop"), st.integers(0, 399), FIELDS),
        st.tuples(st.just("retype"), st.integers(0, 399), FIELDS, VALUES),
        st.tuples(st.just("retype_arg"), st.integers(0, 399), ARGS, VALUES),
        st.tuples(st.just("nest"), st.integers(0, 399), st.integers(10, 3000)),
        st.tuples(st.just("huge_name"), st.integers(0, 399), st.integers(1_000, 200_000)),
        st.tuples(st.just("not_an_object"), st.integers(0, 399), VALUES),
    ), min_size=1, max_size=4))


def apply_kineto(mutations) -> bytes:
    doc = json.loads(json.dumps(KINETO))
    events = doc["traceEvents"]
    nested = None
    for m in mutations:
        kind, *a = m
        if kind == "drop":
            events[a[0] % len(events)].pop(a[1], None) if isinstance(events[a[0] % len(events)], dict) else None
        elif kind == "retype" and isinstance(events[a[0] % len(events)], dict):
            events[a[0] % len(events)][a[1]] = copy.deepcopy(a[2])  # Hypothesis may share one {} between mutations
        elif kind == "retype_arg" and isinstance(events[a[0] % len(events)], dict):
            args = events[a[0] % len(events)].setdefault("args", {})
            if isinstance(args, dict):
                args[a[1]] = copy.deepcopy(a[2])
        elif kind == "nest":
            nested = (a[0] % len(events), a[1])
        elif kind == "huge_name" and isinstance(events[a[0] % len(events)], dict):
            events[a[0] % len(events)]["name"] = "k" * a[1]
        elif kind == "not_an_object":
            events.insert(a[0] % len(events), copy.deepcopy(a[1]))
    text = json.dumps(doc)
    if nested:  # arguments nested thousands deep, written by hand (json.dumps would recurse)
        i, depth = nested
        marker = json.dumps(events[i]) if isinstance(events[i], dict) and events[i] else None
        if marker and marker in text:
            deep = '{"ph":"X","cat":"cpu_op","name":"deep","pid":1,"tid":1,"ts":1,"dur":1,"args":' \
                   + '{"a":' * depth + "1" + "}" * depth + "}"
            text = text.replace(marker, deep, 1)
    raw = text.encode()
    for m in mutations:
        if m[0] == "truncate":
            raw = raw[: int(len(raw) * m[1])]
        elif m[0] == "flip" and raw:
            at = min(int(len(raw) * m[1]), len(raw) - 1)
            raw = raw[:at] + bytes([raw[at] ^ m[2]]) + raw[at + 1:]
    return raw


@FUZZ
@given(mutations=kineto_mutation())
@example(mutations=[("retype", 0, "name", [])])  # found by the long run: a list for a name
@example(mutations=[("not_an_object", 0, {}), ("retype", 0, "ts", {})])  # the harness must not alias values
def test_mutated_kineto_traces(tmp_path, mutations):
    path = tmp_path / "mutated.json"
    path.write_bytes(apply_kineto(mutations))
    check(path)


_NSYS_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "StringIds", "TARGET_INFO_GPU"]
_NSYS_COLUMNS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "globalTid", "bytes",
                 "copyKind", "srcKind", "dstKind", "demangledName", "shortName", "nameId", "value", "id", "name"]
SQL_VALUES = st.sampled_from(["NULL", "'abc'", "x'00ff'", "9223372036854775807", "-9223372036854775808", "-5", "0",
                              "1.5e300"])


@st.composite
def nsys_mutation(draw):
    return draw(st.lists(st.one_of(
        st.tuples(st.just("set"), st.sampled_from(_NSYS_TABLES), st.sampled_from(_NSYS_COLUMNS), SQL_VALUES,
                  st.integers(1, 4)),
        st.tuples(st.just("drop_column"), st.sampled_from(_NSYS_TABLES), st.sampled_from(_NSYS_COLUMNS)),
        st.tuples(st.just("drop_table"), st.sampled_from(_NSYS_TABLES)),
        st.tuples(st.just("reverse_times"), st.sampled_from(_NSYS_TABLES[:5])),
    ), min_size=1, max_size=3))


@FUZZ
@given(mutations=nsys_mutation())
@example(mutations=[("set", "CUPTI_ACTIVITY_KIND_KERNEL", "start", "-9223372036854775808", 1)])  # abs() overflowed
@example(mutations=[("set", "TARGET_INFO_GPU", "id", "'abc'", 1)])  # a lookup table outside the schema
def test_mutated_nsight_exports(tmp_path, mutations):
    path = tmp_path / "mutated.sqlite"
    shutil.copy(NSYS, path)
    con = sqlite3.connect(path)
    for kind, table, *rest in mutations:
        try:  # a mutation that does not apply to this export (no such column) is simply skipped
            if kind == "set":
                column, value, every = rest
                con.execute(f"UPDATE {table} SET {column} = {value} WHERE rowid % {every} = 0")
            elif kind == "drop_column":
                con.execute(f"ALTER TABLE {table} DROP COLUMN {rest[0]}")
            elif kind == "drop_table":
                con.execute(f"DROP TABLE {table}")
            else:
                con.execute(f"UPDATE {table} SET end = start - 1000")
        except sqlite3.Error:
            pass
    con.commit()
    con.close()
    check(path)


@pytest.mark.parametrize("sql, warning", [
    ("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME", None),
    ("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME", None),
    ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN start", "has no start column: its rows were skipped"),
    ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN deviceId", None),  # optional: read as NULL (device -1)
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc'", "rows with impossible values"),
    ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = x'00ff'", None),  # a blob where a count belongs: read as 0
    ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -5", "rows with impossible values"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000", "rows with impossible values"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -5", None),  # before its launch: clock skew, not latency
])
def test_damaged_nsight_exports(tmp_path, sql, warning):
    # the cases that gave tracebacks (KeyError, DatabaseError, TypeError, ValueError) or negative
    # latencies before the loader read tables through its schema
    path = tmp_path / "damaged.sqlite"
    shutil.copy(NSYS, path)
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    analysis = traceagent.analyze(path, use_cache=False)
    assert impossible(json.loads(json.dumps(analysis.to_dict()))) == []
    warnings = analysis.ranks[0].meta.warnings
    assert any(warning in w for w in warnings) if warning else warnings == []
