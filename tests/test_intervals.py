"""Interval algebra, against hand-worked cases and a brute-force check on random sets."""

from unittest.mock import patch

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceagent.detect.core import intervals as iv
from traceagent.trace import normalize
from traceagent.trace.normalize import innermost_enclosing


def s(*pairs):
    return np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64)


def pairs(x):
    return list(zip(x[0].tolist(), x[1].tolist()))


def test_union_merges_overlapping_and_touching_streams():
    # stream A: [0,10) [20,30); stream B: [5,15) [30,35) -> [0,15) [20,35)
    merged = iv.union(np.array([0, 20, 5, 30]), np.array([10, 30, 15, 35]))
    assert pairs(merged) == [(0, 15), (20, 35)]
    assert iv.length(merged) == 30


def test_union_of_nested_and_empty_intervals():
    assert pairs(iv.union(np.array([0, 2, 4, 50]), np.array([100, 3, 4, 60]))) == [(0, 100)]
    assert pairs(iv.union(np.array([], dtype=np.int64), np.array([], dtype=np.int64))) == []


def test_intersect_and_subtract():
    a, b = s((0, 10), (20, 30)), s((5, 25))
    assert pairs(iv.intersect(a, b)) == [(5, 10), (20, 25)]
    assert pairs(iv.subtract(a, b)) == [(0, 5), (25, 30)]
    assert pairs(iv.subtract(b, a)) == [(10, 20)]


def test_gaps_and_covered():
    a = s((0, 10), (20, 30), (40, 45))
    assert pairs(iv.gaps(a)) == [(10, 20), (30, 40)]
    # [5,25) is covered 5+5; [10,20) not at all; [0,100) all 25
    assert iv.covered(a, np.array([5, 10, 0]), np.array([25, 20, 100])).tolist() == [10, 0, 25]


def test_a_set_already_disjoint_and_its_gaps_share_the_input_memory_read_only():
    # a stream of back-to-back kernels is its own busy set: ten million of them must not be held twice
    starts, ends = np.array([0, 20, 40]), np.array([10, 30, 45])
    busy = iv.union(starts, ends)
    holes = iv.gaps(busy)
    assert pairs(busy) == [(0, 10), (20, 30), (40, 45)] and pairs(holes) == [(10, 20), (30, 40)]
    assert np.shares_memory(busy[0], starts) and np.shares_memory(holes[0], ends)
    assert not any(a.flags.writeable for a in (*busy, *holes))
    assert starts.flags.writeable  # the caller's own arrays stay as they were


def test_against_brute_force_on_random_sets():
    rng = np.random.default_rng(0)
    for _ in range(50):
        a_s = rng.integers(0, 200, 8); a = iv.union(a_s, a_s + rng.integers(0, 30, 8))
        b_s = rng.integers(0, 200, 8); b = iv.union(b_s, b_s + rng.integers(0, 30, 8))
        grid = np.arange(0, 260)
        in_a = np.zeros(260, bool); in_b = np.zeros(260, bool)
        for lo, hi in pairs(a): in_a[lo:hi] = True
        for lo, hi in pairs(b): in_b[lo:hi] = True
        assert iv.length(iv.intersect(a, b)) == int((in_a & in_b).sum())
        assert iv.length(iv.subtract(a, b)) == int((in_a & ~in_b).sum())
        q_lo = rng.integers(0, 200, 5); q_hi = q_lo + rng.integers(0, 60, 5)
        expect = [int(in_a[lo:hi].sum()) for lo, hi in zip(q_lo, q_hi)]
        assert iv.covered(a, q_lo, q_hi).tolist() == expect
        del grid


@settings(max_examples=200, deadline=None, derandomize=True)
@given(events=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 40), st.integers(0, 15)), max_size=60),
       queries=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(-2, 60)), min_size=1, max_size=30))
def test_innermost_enclosing_against_brute_force(events, queries):
    # improper nesting, ties and touching ends included: the answer is, on the query's thread,
    # the last event in start order (row order on ties) that started by t and has not ended before t
    outer = pd.DataFrame(events, columns=["pid", "tid", "start", "dur"]).assign(end=lambda f: f["start"] + f["dur"])
    pid, tid, t = (np.array([q[i] for q in queries], dtype=np.int64) for i in range(3))
    expected = []
    for p, th, at in queries:
        rows = sorted((r.start, i) for i, r in enumerate(outer.itertuples()) if (r.pid, r.tid) == (p, th) and r.start <= at)
        open_rows = [i for _, i in rows if outer["end"].iloc[i] >= at]
        expected.append(open_rows[-1] if open_rows else -1)
    assert innermost_enclosing(outer, pid, tid, t).tolist() == expected
    with patch.object(normalize, "QUERY_CHUNK", 7):  # queries walked a few at a time give the same answers
        assert innermost_enclosing(outer, pid, tid, t).tolist() == expected
