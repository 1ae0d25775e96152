"""Launch calls found by correlation id (core/host.launch_rows, launch_calls) agree with pandas'
reindex of the same table, the independent reader here, for ids close together (a lookup table)
and far apart (a binary search), ids with no call, and ids given twice; their times to the
nanosecond at epoch timestamps, where floats are not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from builder import TraceBuilder

from traceagent.detect.core.host import calls_by_correlation, launch_calls, launch_rows


def _trace(tmp_path, correlations: list[int], origin_us: int = 0):
    """A kernel and its launch call for each correlation id, in this order, from `origin_us`."""
    b = TraceBuilder()
    for i, corr in enumerate(correlations):
        b.runtime("cudaLaunchKernel", origin_us + 10 * i + 1, 2.0, correlation=corr)
        b.events.append({"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7, "ts": origin_us + 10 * i + 3,
                         "dur": 1.0, "args": {"device": 0, "stream": 7, "correlation": corr}})
    return b.load(tmp_path)


@pytest.mark.parametrize("ids", [[5, 6, 7, 8, 9], [3, 10_000_000, 10**12, 42, 7]], ids=["close", "sparse"])
def test_each_id_finds_its_call_as_reindex_does(tmp_path, ids):
    trace = _trace(tmp_path, ids)
    calls = calls_by_correlation(trace)
    asked = np.array([ids[2], -1, ids[0], 123_456, ids[2], ids[4]], dtype=np.int64)  # missing and repeated ids
    # integer columns as nullable integers, exact where an id has a call and <NA> where it has none
    nullable = {c: str(t).capitalize() for c, t in calls.dtypes.items() if t.kind in "iu"}
    expected = calls.astype(nullable).reindex(asked)
    found = launch_calls(trace, asked)
    pd.testing.assert_frame_equal(found, expected, check_index_type=False, check_column_type=False, check_names=False)
    rows = launch_rows(trace, asked)
    assert rows.tolist() == [calls.index.get_loc(c) if c in calls.index else -1 for c in asked.tolist()]


def test_only_the_columns_asked_for_are_gathered(tmp_path):
    trace = _trace(tmp_path, [1, 2, 3])
    found = launch_calls(trace, np.array([3, 1]), ("start",))
    assert list(found.columns) == ["start"]
    assert found["start"].tolist() == calls_by_correlation(trace)["start"].reindex([3, 1]).tolist()


def test_launch_times_are_exact_at_epoch_timestamps_where_some_ids_have_no_call(tmp_path):
    # Kineto's timestamps are µs since the epoch: as ns they pass 2**53, and a float holds them to 256 ns
    origin = 1_700_000_000_000_000
    trace = _trace(tmp_path, [1, 2, 3], origin_us=origin)
    found = launch_calls(trace, np.array([2, 99, 3]), ("start", "end"))
    assert found["start"].tolist()[::2] == [(origin + 11) * 1000, (origin + 21) * 1000]
    assert (found["end"] - found["start"]).tolist()[::2] == [2000, 2000] and found["start"].isna().tolist()[1]
