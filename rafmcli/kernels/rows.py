"""Rows in a model's internal feature ids, O(non-zeros) on every core.

``id_table`` maps original ids to internal ones (-1: never seen in
training); ``map_ids`` applies it and counts the misses; ``drop_unseen``
removes the entries of unseen features row by row and hands back their
original ids (for counting the distinct ones). Work is split in a fixed
number of chunks, so results never depend on the number of threads.
"""

import numpy as np
from numba import njit, prange

CHUNKS = 64


@njit(cache=True, nogil=True, parallel=True)
def id_table(known, length):
    """table[known[j]] = j, -1 elsewhere below ``length`` (the ids in ``known`` are distinct)."""
    table = np.empty(length, dtype=np.int32)
    for c in prange(CHUNKS):
        for i in range(c * length // CHUNKS, (c + 1) * length // CHUNKS):
            table[i] = -1
    n = known.shape[0]
    for c in prange(CHUNKS):
        for j in range(c * n // CHUNKS, (c + 1) * n // CHUNKS):
            table[known[j]] = j
    return table


@njit(cache=True, nogil=True, parallel=True)
def map_ids(ids, table):
    """(table[ids] with -1 for ids beyond the table, how many are -1)."""
    n = ids.shape[0]
    length = table.shape[0]
    out = np.empty(n, dtype=np.int32)
    missing = np.zeros(CHUNKS, dtype=np.int64)
    for c in prange(CHUNKS):
        miss = 0
        for k in range(c * n // CHUNKS, (c + 1) * n // CHUNKS):
            i = ids[k]
            j = table[i] if i < length else -1
            out[k] = j
            miss += j < 0
        missing[c] = miss
    return out, missing.sum()


@njit(cache=True, nogil=True, parallel=True)
def drop_unseen(indptr, internal, values, ids):
    """CSR rows without the entries whose ``internal`` id is -1.

    Returns (indptr, indices, values, the dropped entries' original ids);
    ``values`` stays empty when it is.
    """
    rows = indptr.shape[0] - 1
    with_values = values.shape[0] > 0
    kept = np.zeros(CHUNKS + 1, dtype=np.int64)
    dropped = np.zeros(CHUNKS + 1, dtype=np.int64)
    for c in prange(CHUNKS):
        a, b = indptr[c * rows // CHUNKS], indptr[(c + 1) * rows // CHUNKS]
        keep = 0
        for k in range(a, b):
            keep += internal[k] >= 0
        kept[c + 1] = keep
        dropped[c + 1] = b - a - keep
    for c in range(CHUNKS):
        kept[c + 1] += kept[c]
        dropped[c + 1] += dropped[c]
    out_ptr = np.empty(rows + 1, dtype=np.int64)
    out_ptr[0] = 0
    out_idx = np.empty(kept[CHUNKS], dtype=np.int32)
    out_val = np.empty(kept[CHUNKS] if with_values else 0, dtype=values.dtype)
    unseen = np.empty(dropped[CHUNKS], dtype=ids.dtype)
    for c in prange(CHUNKS):
        pos, gone = kept[c], dropped[c]
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
    return out_ptr, out_idx, out_val, unseen
