"""Counting passes over parsed data: the distinct ids and their occurrences
n_i (O(non-zeros + ids), on every core), then O(features) passes: the levels
of Eq. 17, their summary and the occurrence histogram.

The O(features) passes run on one thread: they take milliseconds, less than
loading a parallel kernel does. Every result is an integer count, the same
for any number of threads.
"""

import numpy as np
from numba import njit

from rafmcli import threads

SMALL = 1 << 16  # entries below which one thread counts alone
SPILL = 16  # slots past the outputs per range: where a range's writes of zero counters go


def feature_counts_table(indices, length, n_threads=None):
    """(ids, n) of the ids of ``indices``, all below ``length``: the distinct ids
    ascending (int32) and n_i, the entries holding each (int64; one entry per id
    a row, so the rows holding it). O(non-zeros + length) passes on every core:
    counting by id ranges, then each range's non-zero counters counted and written."""
    ranges = 1 if indices.shape[0] < SMALL else n_threads or threads.available_cores()
    ranges = max(1, min(ranges, length))
    counts = np.zeros(length, dtype=np.int32)
    threads.spread(_count_ids, ranges, indices, counts, ranges, threads=n_threads)
    return nonzero_ids(counts, ranges, n_threads)


def nonzero_ids(counts, ranges=None, n_threads=None):
    """(ids, n) of the non-zero entries of the table ``counts`` (ids ascending, int32;
    n int64), in ``ranges`` id ranges (default: one per available core) on every core."""
    ranges = max(1, min(ranges or n_threads or threads.available_cores(), counts.shape[0]))
    found = np.zeros(ranges + 1, dtype=np.int64)
    threads.spread(_count_nonzero, ranges, counts, ranges, found, threads=n_threads)
    at = np.cumsum(found)  # at[lo]: distinct ids below range lo's
    ids = np.empty(at[-1] + SPILL * ranges, dtype=np.int32)
    n = np.empty(ids.shape[0], dtype=np.int64)
    threads.spread(_nonzero_counts, ranges, counts, ranges, at, ids, n, threads=n_threads)
    return ids[:at[-1]], n[:at[-1]]


@njit(cache=True, nogil=True)
def _count_ids(lo, hi, indices, counts, ranges):
    """Count the ids of ``indices`` in id ranges lo..hi-1 of ``ranges`` equal ones:
    threads that own different ranges never write the same counter, and each
    reads all of ``indices`` (sequentially, cheap next to the random increments)."""
    first = lo * counts.shape[0] // ranges
    span = np.uint32(hi * counts.shape[0] // ranges - first)
    mine = counts[first:]
    for k in range(indices.shape[0]):
        u = np.uint32(indices[k] - first)
        if u < span:
            mine[u] += 1


@njit(cache=True, nogil=True)
def _count_nonzero(lo, hi, counts, ranges, found):
    """found[lo + 1] = non-zero counters in id ranges lo..hi-1."""
    nonzero = 0
    for i in range(lo * counts.shape[0] // ranges, hi * counts.shape[0] // ranges):
        nonzero += counts[i] != 0
    found[lo + 1] = nonzero


@njit(cache=True, nogil=True)
def _nonzero_counts(lo, hi, counts, ranges, at, ids, n):
    """Ids and values of the non-zero counters of id ranges lo..hi-1, from ids[at[lo]]
    on, without a branch: every counter is written at the next free slot, which
    only a non-zero one takes; once the range's slots are full the rest go to
    its SPILL slots past the end."""
    j, end = at[lo], at[hi]
    spill = at[-1] + SPILL * lo
    for i in range(lo * counts.shape[0] // ranges, hi * counts.shape[0] // ranges):
        c = counts[i]
        k = j if j < end else spill
        ids[k] = i
        n[k] = c
        j += c != 0


@njit(cache=True, nogil=True)
def assign_levels(counts, bounds):
    """k_i = 1 + #{k : n_i^2 > bounds[k]} (int8), bounds[k] = D_k D_{k+1} (Eq. 17)."""
    levels = np.empty(counts.shape[0], dtype=np.int8)
    for i in range(counts.shape[0]):
        c = min(np.int64(counts[i]), 2**31 - 1)
        c2 = c * c
        k = 1
        for b in bounds:
            k += c2 > b
        levels[i] = k
    return levels


@njit(cache=True, nogil=True)
def level_totals(levels, counts, m):
    """(features, occurrences) whose top level is k, for k = 1..m (index k-1)."""
    top = np.zeros(m, dtype=np.int64)
    occ = np.zeros(m, dtype=np.int64)
    for i in range(levels.shape[0]):
        top[levels[i] - 1] += 1
        occ[levels[i] - 1] += counts[i]
    return top, occ


@njit(cache=True, nogil=True)
def occurrence_buckets(counts):
    """Features per bucket b of n_i: b = 0 for n = 1, else 2^(b-1) < n <= 2^b."""
    per = np.zeros(64, dtype=np.int64)
    last = 0
    for c in counts:
        v = np.uint64(max(c, 1) - 1)
        b = 0
        while v:  # bit length of n - 1
            v >>= np.uint64(1)
            b += 1
        per[b] += 1
        last = max(last, b)
    return per[:last + 1]


@njit(cache=True, nogil=True)
def distinct_values(values, limit):
    """(sorted distinct values, True) if ``values`` has at most ``limit`` of them, else
    (empty, False)."""
    seen = np.empty(limit + 1, dtype=values.dtype)
    k = 0
    for x in values:
        found = False
        for j in range(k):
            if seen[j] == x:
                found = True
                break
        if not found:
            if k == limit:
                return seen[:0], False
            seen[k] = x
            k += 1
    return np.sort(seen[:k]), True


def distinct_count(ids, length, n_threads=None):
    """How many distinct values ``ids`` holds, all below ``length``."""
    seen = np.zeros(length, dtype=np.uint8)
    ranges = 1 if ids.shape[0] < SMALL else n_threads or threads.available_cores()
    return sum(threads.spread(_first_sightings, ranges, ids, seen, ranges, threads=n_threads))


@njit(cache=True, nogil=True)
def _first_sightings(lo, hi, ids, seen, ranges):
    """First sightings of the ids in id ranges lo..hi-1 (as ``_count_ids``)."""
    first = lo * seen.shape[0] // ranges
    span = np.uint32(hi * seen.shape[0] // ranges - first)
    mine = seen[first:]
    found = 0
    for k in range(ids.shape[0]):
        u = np.uint32(ids[k] - first)
        if u < span and mine[u] == 0:
            mine[u] = 1
            found += 1
    return found


def table_summary(counts, bounds, n_threads=None):
    """What `rafm stats` reports of the non-zero counters n_i of the table ``counts``, in one
    pass on every core, without listing them: (features, smallest id, largest id (-1, -1
    when none), features per occurrence bucket (as :func:`occurrence_buckets`, 64 of them),
    features whose top level is k and their occurrences (as :func:`level_totals` of
    :func:`assign_levels` with ``bounds``))."""
    ranges = max(1, min(n_threads or threads.available_cores(), counts.shape[0]))
    parts = threads.spread(_summarize_ranges, ranges, counts, ranges, bounds, threads=n_threads)
    found = [p for p in parts if p[0]]
    if not found:
        return 0, -1, -1, np.zeros(64, np.int64), np.zeros(bounds.shape[0] + 1, np.int64), \
            np.zeros(bounds.shape[0] + 1, np.int64)
    return (sum(p[0] for p in found), min(p[1] for p in found), max(p[2] for p in found),
            sum(p[3] for p in found), sum(p[4] for p in found), sum(p[5] for p in found))


@njit(cache=True, nogil=True)
def _summarize_ranges(lo, hi, counts, ranges, bounds):
    buckets = np.zeros(64, dtype=np.int64)
    top = np.zeros(bounds.shape[0] + 1, dtype=np.int64)
    occ = np.zeros(bounds.shape[0] + 1, dtype=np.int64)
    features, first, last = 0, -1, -1
    for i in range(lo * counts.shape[0] // ranges, hi * counts.shape[0] // ranges):
        c = counts[i]
        if c == 0:
            continue
        if first < 0:
            first = i
        last = i
        features += 1
        v = np.uint64(c - 1)
        b = 0
        while v:
            v >>= np.uint64(1)
            b += 1
        buckets[b] += 1
        c2 = min(np.int64(c), 2**31 - 1) ** 2
        k = 0
        for bound in bounds:
            k += c2 > bound
        top[k] += 1
        occ[k] += c
    return features, first, last, buckets, top, occ
