"""Interval algebra on sorted int64 arrays: union, intersection, difference, coverage.

An interval set is a pair (starts, ends) of equal-length int64 arrays, sorted, disjoint and
non-empty intervals [start, end). Every function is vectorized; none loops per interval.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals (any order) into a disjoint sorted set."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():  # copies made only where something is dropped or out of order (a trace is by start)
        starts, ends = starts[keep], ends[keep]
    del keep
    if len(starts) == 0:
        return EMPTY
    if not (starts[1:] >= starts[:-1]).all():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        del order
    reach = np.maximum.accumulate(ends)
    # a new merged interval begins where a start lies beyond everything before it
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    np.greater(starts[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    if len(first) == len(starts):  # nothing merged (a stream of tiny kernels), so reach is ends: the input is
        return _read_only(starts), _read_only(ends)  # the set, as views, not copies (150 MiB on 10 M kernels)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], reach[last]


def length(iv: Intervals) -> int:
    return int((iv[1] - iv[0]).sum())


def _sweep(a: Intervals, b: Intervals, keep) -> Intervals:
    """Where keep(in_a, in_b) holds, as an interval set."""
    points = np.r_[a[0], a[1], b[0], b[1]]
    if len(points) == 0:
        return EMPTY
    na, nb = len(a[0]), len(b[0])
    # +1 where an interval of a (or b) opens, -1 where it closes: int8, summed as int64
    da = np.zeros(len(points), dtype=np.int8)
    da[:na], da[na:2 * na] = 1, -1
    db = np.zeros(len(points), dtype=np.int8)
    db[2 * na:2 * na + nb], db[2 * na + nb:] = 1, -1
    order = np.argsort(points, kind="stable")
    points, da, db = points[order], da[order], db[order]
    del order
    # state after each boundary; only the last boundary at a given time counts
    in_a, in_b = np.cumsum(da, dtype=np.int64) > 0, np.cumsum(db, dtype=np.int64) > 0
    last_at_time = np.r_[points[1:] != points[:-1], True]
    points, in_a, in_b = points[last_at_time], in_a[last_at_time], in_b[last_at_time]
    inside = keep(in_a[:-1], in_b[:-1])
    return union(points[:-1][inside], points[1:][inside])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if not len(a[0]) or not len(b[0]):
        return EMPTY
    return _sweep(a, b, lambda x, y: x & y)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    if not len(a[0]) or not len(b[0]):  # nothing to take from, or nothing taken: the sweep would give a back
        return a if len(a[0]) else EMPTY
    return _sweep(a, b, lambda x, y: x & ~y)


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    s, e = np.maximum(iv[0], lo), np.minimum(iv[1], hi)
    keep = e > s
    return s[keep], e[keep]


def gaps(iv: Intervals) -> Intervals:
    """The holes between consecutive intervals of a set (the set's own span, no edges): read-only
    views of the set's own arrays, not copies (a device's gap table is as long as its busy set, and
    on millions of tiny kernels two copies were 150 MiB of the analysis' peak)."""
    if len(iv[0]) < 2:
        return EMPTY
    return _read_only(iv[1][:-1]), _read_only(iv[0][1:])


def _read_only(values: np.ndarray) -> np.ndarray:
    """A view of the array that cannot be written through: for sets that share another's memory."""
    view = values.view()
    view.flags.writeable = False
    return view


def inside(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """How much of each interval (not a set: any, in any order) lies inside [lo, hi), 0 for none."""
    return np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)


def covered(iv: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each query [start, end), how much of it the set covers (ns)."""
    return _cumulative(iv, np.asarray(ends, dtype=np.int64)) - _cumulative(iv, np.asarray(starts, dtype=np.int64))


def even_edges(lo: int, hi: int, bins: int) -> np.ndarray:
    """The bins + 1 edges of [lo, hi] cut into `bins` equal bins, in exact ns: the first lo, the
    last hi (spaced from lo: epoch ns as floats would be off by up to 128 ns)."""
    return int(lo) + np.linspace(0, int(hi) - int(lo), bins + 1).astype(np.int64)


def binned_share(iv: Intervals, lo: int, hi: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(bin edges, share of each bin covered by `iv`): [lo, hi] cut into `bins` equal bins, as the
    chat app's timeline and the HTML report draw device busy time."""
    edges = even_edges(lo, hi, bins)
    return edges, covered(iv, edges[:-1], edges[1:]) / np.maximum(np.diff(edges), 1)


def _cumulative(iv: Intervals, t: np.ndarray) -> np.ndarray:
    """Covered length in (-inf, t] for each t."""
    s, e = iv
    if len(s) == 0:
        return np.zeros(len(t), dtype=np.int64)
    before = np.r_[0, np.cumsum(e - s)]
    k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
    partial = np.where(k > 0, np.minimum(t, e[np.maximum(k - 1, 0)]) - s[np.maximum(k - 1, 0)], 0)
    return before[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(partial, 0)
