"""One-hot fields found in the rows (numba): a saturation colouring, then coverage moves.

Features of a one-hot field never share a row; on data made of fields the
graph "i and j share a row" is multipartite and, when connected, its colouring
with the fewest colours is the field partition. DSatur finds it for such graphs:
it colours next the feature whose rows already hold the most colours (ties:
the more frequent), with the lowest colour free in its rows, so that after the
first feature of each field every feature has one colour left (its field's).

``taken[r]`` (one bit per colour, at most MAX_COLOURS) holds the colours of row
r; a feature's saturation is the OR of ``taken`` over its rows. The updates
cost Sum_r (row length)^2.

Then each feature moves, when free to, to the colour that covers the most
rows: a colour absent from all of its rows is evidence that it fills that
field there only if the field is present in most rows (a fragment of a
multi-hot field or a sparse colour is no such evidence).
"""

import numpy as np
from numba import njit

MAX_COLOURS = 64


@njit(cache=True, inline="always")
def _lowest_zero(mask):
    c = 0
    while mask & (np.uint64(1) << np.uint64(c)):
        c += 1
    return c


@njit(cache=True)
def _push(keys, items, size, key, item):
    """Push onto the max-heap (keys, items) of ``size`` entries, growing it; returns the arrays."""
    if size == keys.shape[0]:
        grown_k = np.empty(2 * size, np.int64)
        grown_i = np.empty(2 * size, np.int32)
        for k in range(size):  # a loop: numba's slice-from-array assignment takes seconds to compile
            grown_k[k] = keys[k]
            grown_i[k] = items[k]
        keys, items = grown_k, grown_i
    k = size
    while k > 0:
        parent = (k - 1) // 2
        if keys[parent] >= key:
            break
        keys[k], items[k] = keys[parent], items[parent]
        k = parent
    keys[k], items[k] = key, item
    return keys, items


@njit(cache=True)
def _pop(keys, items, size):
    """Remove the top of the max-heap of ``size`` entries; returns (key, item)."""
    key, item = keys[0], items[0]
    last_k, last_i = keys[size - 1], items[size - 1]
    size -= 1
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] > keys[child]:
            child += 1
        if keys[child] <= last_k:
            break
        keys[k], items[k] = keys[child], items[child]
        k = child
    if size > 0:
        keys[k], items[k] = last_k, last_i
    return key, item


@njit(cache=True)
def saturation_colouring(indptr, col, colptr, rows, rank):
    """DSatur over the features (columns). ``col[k]``: the column of CSR entry k; ``rank``: 0 for
    the rarest feature .. n-1 for the most frequent (the tie-break).

    Returns (colours [columns], taken [rows]); colour -1 when all MAX_COLOURS were taken in a
    feature's rows (the data is not made of fields).
    """
    n = colptr.shape[0] - 1
    n_rows = indptr.shape[0] - 1
    one = np.uint64(1)
    full = ~np.uint64(0)
    taken = np.zeros(n_rows, np.uint64)
    sat = np.zeros(n, np.uint64)
    nsat = np.zeros(n, np.int64)
    colours = np.full(n, -1, np.int32)
    keys = np.empty(max(2 * n, 1), np.int64)
    items = np.empty(max(2 * n, 1), np.int32)
    size = np.int64(0)  # not a literal 0: _push would compile once more for it
    for f in range(n):
        keys, items = _push(keys, items, size, np.int64(rank[f]), f)
        size += 1
    stride = np.int64(n + 1)
    while size > 0:
        key, f = _pop(keys, items, size)
        size -= 1
        if colours[f] >= 0 or key // stride != nsat[f] or sat[f] == full:
            continue
        c = _lowest_zero(sat[f])
        colours[f] = c
        bit = one << np.uint64(c)
        for k in range(colptr[f], colptr[f + 1]):
            r = rows[k]
            taken[r] |= bit
            for e in range(indptr[r], indptr[r + 1]):
                g = col[e]
                if colours[g] < 0 and not (sat[g] & bit):
                    sat[g] |= bit
                    nsat[g] += 1
                    keys, items = _push(keys, items, size, nsat[g] * stride + rank[g], np.int64(g))
                    size += 1
    return colours, taken


@njit(cache=True)
def _best_free(colptr, rows, taken, cover, used, f, own):
    """The colour other than ``own`` free in all of feature f's rows that covers the most rows,
    and its cover; (-1, 0) when none is free."""
    one = np.uint64(1)
    occupied = np.uint64(0)
    for k in range(colptr[f], colptr[f + 1]):
        occupied |= taken[rows[k]]
    best, best_cover = -1, np.int64(0)
    for c in range(used):
        if c != own and not occupied & (one << np.uint64(c)) and (best < 0 or cover[c] > best_cover):
            best, best_cover = c, cover[c]
    return best, best_cover


@njit(cache=True)
def coverage_moves(colptr, rows, colours, taken, order, passes):
    """Move each feature (in ``order``) to the colour free in all its rows that covers the most
    other rows, ``passes`` times or until none moves; in place. Returns, per feature, the rows
    covered by the best other colour it could take (0: none), for judging how forced it is."""
    n = colptr.shape[0] - 1
    one = np.uint64(1)
    cover = np.zeros(MAX_COLOURS, np.int64)
    for r in range(taken.shape[0]):
        for c in range(MAX_COLOURS):
            if taken[r] & (one << np.uint64(c)):
                cover[c] += 1
    used = colours.max() + 1 if n else 0
    for _ in range(passes):
        moved = 0
        for f in order:
            own = colours[f]
            if own < 0:
                continue
            count = colptr[f + 1] - colptr[f]
            best, best_cover = _best_free(colptr, rows, taken, cover, used, np.int64(f), own)
            if best < 0 or best_cover <= cover[own] - count:
                continue
            flip = (one << np.uint64(own)) | (one << np.uint64(best))
            for k in range(colptr[f], colptr[f + 1]):
                taken[rows[k]] ^= flip
            cover[own] -= count
            cover[best] += count
            colours[f] = best
            moved += 1
        if moved == 0:
            break
    rival = np.zeros(n, np.int64)
    for f in range(n):
        if colours[f] >= 0:
            rival[f] = _best_free(colptr, rows, taken, cover, used, f, colours[f])[1]
    return cover, rival
