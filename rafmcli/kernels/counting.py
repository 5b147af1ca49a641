"""O(non-zeros) passes over parsed data, on every core: feature occurrences
n_i, the levels of Eq. 17, their summary and the occurrence histogram.

All work in parallel over contiguous chunks and give the same result for any
number of threads (integer sums, or float sums in a fixed chunk order).
"""

import numba
import numpy as np
from numba import njit, prange

CHUNKS = 64  # fixed chunk count of the reductions, so results do not depend on threads


def occurrences(indices, length):
    """n_i for every id below ``length``: rows holding feature i (one entry per id a row)."""
    return _occurrences(indices, length, numba.get_num_threads())


@njit(cache=True, nogil=True, parallel=True)
def _occurrences(indices, length, threads):
    """Each of ``threads`` workers owns a contiguous range of ids and counts
    only those, so no two write the same counter; every worker reads all of
    ``indices`` (sequentially, cheap next to the random increments)."""
    counts = np.zeros(length, dtype=np.int32)
    for t in prange(threads):
        lo = t * length // threads
        span = np.uint32((t + 1) * length // threads - lo)
        mine = counts[lo:]
        for k in range(indices.shape[0]):
            u = np.uint32(indices[k] - lo)
            if u < span:
                mine[u] += 1
    return counts


@njit(cache=True, nogil=True, parallel=True)
def nonzero_counts(counts):
    """(ids, n) of the non-zero entries of ``counts``, ids ascending (int32, int64)."""
    n = counts.shape[0]
    found = np.zeros(CHUNKS + 1, dtype=np.int64)
    for c in prange(CHUNKS):
        total = 0
        for i in range(c * n // CHUNKS, (c + 1) * n // CHUNKS):
            total += counts[i] != 0
        found[c + 1] = total
    for c in range(CHUNKS):
        found[c + 1] += found[c]
    ids = np.empty(found[CHUNKS], dtype=np.int32)
    out = np.empty(found[CHUNKS], dtype=np.int64)
    for c in prange(CHUNKS):
        j = found[c]
        for i in range(c * n // CHUNKS, (c + 1) * n // CHUNKS):
            if counts[i] != 0:
                ids[j] = i
                out[j] = counts[i]
                j += 1
    return ids, out


@njit(cache=True, nogil=True, parallel=True)
def assign_levels(counts, bounds):
    """k_i = 1 + #{k : n_i^2 > bounds[k]} (int8), bounds[k] = D_k D_{k+1} (Eq. 17)."""
    n = counts.shape[0]
    levels = np.empty(n, dtype=np.int8)
    for i in prange(n):
        c = min(np.int64(counts[i]), 2**31 - 1)
        c2 = c * c
        k = 1
        for b in bounds:
            k += c2 > b
        levels[i] = k
    return levels


@njit(cache=True, nogil=True, parallel=True)
def level_totals(levels, counts, m):
    """(features, occurrences) whose top level is k, for k = 1..m (index k-1)."""
    n = levels.shape[0]
    top = np.zeros((CHUNKS, m), dtype=np.int64)
    occ = np.zeros((CHUNKS, m), dtype=np.int64)
    for c in prange(CHUNKS):
        for i in range(c * n // CHUNKS, (c + 1) * n // CHUNKS):
            k = levels[i] - 1
            top[c, k] += 1
            occ[c, k] += counts[i]
    return top.sum(axis=0), occ.sum(axis=0)


@njit(cache=True, nogil=True, parallel=True)
def occurrence_buckets(counts):
    """Features per bucket b of n_i: b = 0 for n = 1, else 2^(b-1) < n <= 2^b."""
    n = counts.shape[0]
    per = np.zeros((CHUNKS, 64), dtype=np.int64)
    for c in prange(CHUNKS):
        for i in range(c * n // CHUNKS, (c + 1) * n // CHUNKS):
            v = np.uint64(max(counts[i], 1) - 1)
            b = 0
            while v:  # bit length of n - 1
                v >>= np.uint64(1)
                b += 1
            per[c, b] += 1
    totals = per.sum(axis=0)
    last = 0
    for b in range(64):
        if totals[b]:
            last = b
    return totals[:last + 1]


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


def distinct_count(ids, length):
    """How many distinct values ``ids`` holds, all below ``length``."""
    return _distinct_count(ids, length, numba.get_num_threads())


@njit(cache=True, nogil=True, parallel=True)
def _distinct_count(ids, length, threads):
    """Each worker owns a contiguous range of ids (as in ``_occurrences``) and
    counts the first sighting of each."""
    seen = np.zeros(length, dtype=np.uint8)
    found = np.zeros(threads, dtype=np.int64)
    for t in prange(threads):
        lo = t * length // threads
        span = np.uint32((t + 1) * length // threads - lo)
        mine = seen[lo:]
        first = 0
        for k in range(ids.shape[0]):
            u = np.uint32(ids[k] - lo)
            if u < span and mine[u] == 0:
                mine[u] = 1
                first += 1
        found[t] = first
    return found.sum()
