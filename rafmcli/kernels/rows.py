"""Rows in a model's internal feature ids, O(non-zeros), ranges of rows or
entries on several threads (``threads.spread``).

``id_table`` maps original ids to internal ones (-1: never seen in
training); ``map_ids`` applies it and counts the misses; ``drop_unseen``
removes the entries of unseen features row by row and hands back their
original ids (for counting the distinct ones). Work is cut in ``CHUNKS``
fixed pieces, so results never depend on the number of threads.
"""

import numpy as np
from numba import njit

from rafmcli import threads
from rafmcli.kernels import read_only

CHUNKS = 64
SMALL = 1 << 16  # entries below which one thread does the work


def _threads(n):
    return 1 if n < SMALL else None


def id_table(known, length):
    """table[known[j]] = j, -1 elsewhere below ``length`` (the ids in ``known`` are distinct).
    The -1s are written on every core: a table of 20M ids is 80 MB of fresh pages, and the
    first write to each costs the kernel clearing it."""
    table = np.empty(length, dtype=np.int32)
    threads.spread(_fill, CHUNKS, table, -1, threads=_threads(length))
    threads.spread(_fill_table, CHUNKS, *read_only(known), table, threads=_threads(known.shape[0]))
    return table


@njit(cache=True, nogil=True)
def _fill(lo, hi, table, value):
    n = table.shape[0]
    table[lo * n // CHUNKS:hi * n // CHUNKS] = value


@njit(cache=True, nogil=True)
def _fill_table(lo, hi, known, table):
    n = known.shape[0]
    for j in range(lo * n // CHUNKS, hi * n // CHUNKS):
        table[known[j]] = j


def count_equal(table, value):
    """How many entries of the int32 ``table`` equal ``value``: one pass on every core, no
    temporary array (``np.count_nonzero(table == value)`` makes one of the table's length)."""
    return sum(threads.spread(_count_equal, CHUNKS, read_only(table)[0], value, threads=_threads(table.shape[0])))


@njit(cache=True, nogil=True)
def _count_equal(lo, hi, table, value):
    n = table.shape[0]
    count = 0
    for k in range(lo * n // CHUNKS, hi * n // CHUNKS):
        count += table[k] == value
    return count


def map_ids(ids, table):
    """(table[ids] with -1 for ids beyond the table, how many are -1)."""
    out = np.empty(ids.shape[0], dtype=np.int32)
    misses = threads.spread(_map_ids, CHUNKS, *read_only(ids, table), out, threads=_threads(ids.shape[0]))
    return out, sum(misses)


@njit(cache=True, nogil=True)
def _map_ids(lo, hi, ids, table, out):
    n = ids.shape[0]
    length = table.shape[0]
    misses = 0
    for k in range(lo * n // CHUNKS, hi * n // CHUNKS):
        i = ids[k]
        j = table[i] if i < length else -1
        out[k] = j
        misses += j < 0
    return misses


def drop_unseen(indptr, internal, values, ids):
    """CSR rows without the entries whose ``internal`` id is -1.

    Returns (indptr, indices, values, the dropped entries' original ids);
    ``values`` stays empty when it is.
    """
    workers = _threads(internal.shape[0])
    counts = np.zeros((CHUNKS + 1, 2), dtype=np.int64)  # kept and dropped entries before chunk c
    threads.spread(_count_kept, CHUNKS, *read_only(indptr, internal), counts, threads=workers)
    counts = np.cumsum(counts, axis=0)
    out_ptr = np.empty(indptr.shape[0], dtype=np.int64)
    out_ptr[0] = 0
    out_idx = np.empty(counts[CHUNKS, 0], dtype=np.int32)
    out_val = np.empty(counts[CHUNKS, 0] if values.shape[0] else 0, dtype=values.dtype)
    unseen = np.empty(counts[CHUNKS, 1], dtype=ids.dtype)
    threads.spread(_drop_unseen, CHUNKS, *read_only(indptr, internal, values, ids), counts, out_ptr, out_idx,
                   out_val, unseen, threads=workers)
    return out_ptr, out_idx, out_val, unseen


@njit(cache=True, nogil=True)
def _count_kept(lo, hi, indptr, internal, counts):
    """counts[c + 1] = (kept, dropped) entries of the rows of chunk c, for chunks lo..hi-1."""
    rows = indptr.shape[0] - 1
    for c in range(lo, hi):
        a, b = indptr[c * rows // CHUNKS], indptr[(c + 1) * rows // CHUNKS]
        keep = 0
        for k in range(a, b):
            keep += internal[k] >= 0
        counts[c + 1, 0] = keep
        counts[c + 1, 1] = b - a - keep


@njit(cache=True, nogil=True)
def _drop_unseen(lo, hi, indptr, internal, values, ids, counts, out_ptr, out_idx, out_val, unseen):
    rows = indptr.shape[0] - 1
    with_values = values.shape[0] > 0
    for c in range(lo, hi):
        pos, gone = counts[c, 0], counts[c, 1]
        for r in range(c * rows // CHUNKS, (c + 1) * rows // CHUNKS):
            for k in range(indptr[r], indptr[r + 1]):
                j = internal[k]
                if j >= 0:
                    out_idx[pos] = j
                    if with_values:
                        out_val[pos] = values[k]
                    pos += 1
                else:
                    unseen[gone] = ids[k]
                    gone += 1
            out_ptr[r + 1] = pos
