"""Negative sampling of feature groups (Feat2Vec): group values, noise tables, draws (numba).

A row is split by feature group into *group values*: the features (ids and
values) a row holds in group g, sorted by id; a row without group g holds
g's empty value. The vocabulary numbers the distinct values of every group,
contiguously per group (``group_ptr``), and counts the rows holding each.

A negative for a positive row: group g with probability proportional to
c_g^alpha1 (step 1), then g's value replaced by a draw from Q2, the counts of
g's values raised to alpha2 and renormalised (step 2). Both draws use Walker's
alias method (O(1) a draw). Random numbers come from xorshift64* streams,
one state per thread, so runs are reproducible and independent of numba's
global generator.

Kernels are free of I/O; tunables arrive as arguments (numba freezes globals).
"""

import numpy as np
from numba import njit

from rafmcli.kernels import NO_REFCOUNT

EMPTY = np.uint64(0)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
XORSHIFT_MULT = np.uint64(0x2545F4914F6CDD1D)
UNIT = 1.0 / 9007199254740992.0  # 2^-53


@njit(cache=True, inline="always")
def mix64(z):
    """splitmix64's finaliser: a bijection of uint64 that scatters every bit."""
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def next_uniform(state, t):
    """A uniform double in [0, 1) from xorshift64* stream ``t`` (state[t] != 0)."""
    x = state[t]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[t] = x
    return np.float64((x * XORSHIFT_MULT) >> np.uint64(11)) * UNIT


@njit(cache=True)
def alias_tables(weights, seg_ptr, prob, alias):
    """Walker/Vose alias tables for each segment seg_ptr[s]:seg_ptr[s+1] of ``weights``.

    Fills ``prob`` (acceptance probability) and ``alias`` (global index) so
    that :func:`draw_alias` returns index i of a segment with probability
    weights[i] / sum(segment). A segment of zero weight gets uniform tables.
    """
    n = weights.shape[0]
    small = np.empty(n, dtype=np.int64)
    large = np.empty(n, dtype=np.int64)
    scaled = np.empty(n)
    for s in range(seg_ptr.shape[0] - 1):
        lo, hi = seg_ptr[s], seg_ptr[s + 1]
        size = hi - lo
        if size == 0:
            continue
        total = 0.0
        for i in range(lo, hi):
            total += weights[i]
        ns = nl = 0
        for i in range(lo, hi):
            scaled[i] = weights[i] * size / total if total > 0 else 1.0
            alias[i] = i
            if scaled[i] < 1.0:
                small[ns] = i
                ns += 1
            else:
                large[nl] = i
                nl += 1
        while ns > 0 and nl > 0:
            ns -= 1
            s_i = small[ns]
            l_i = large[nl - 1]
            prob[s_i] = scaled[s_i]
            alias[s_i] = l_i
            scaled[l_i] = (scaled[l_i] + scaled[s_i]) - 1.0
            if scaled[l_i] < 1.0:
                nl -= 1
                small[ns] = l_i
                ns += 1
        for j in range(nl):
            prob[large[j]] = 1.0
        for j in range(ns):  # left over only by rounding
            prob[small[j]] = 1.0


@njit(cache=True, inline="always")
def draw_alias(lo, hi, prob, alias, state, t):
    """An index in [lo, hi) from the alias tables of that segment."""
    u = next_uniform(state, t) * (hi - lo)
    i = lo + min(np.int64(u), hi - lo - 1)
    return i if u - np.floor(u) < prob[i] else alias[i]


@njit(cache=True, inline="always")
def value_key(v):
    """The term of value id ``v`` in a row's order-free hash (never 0 on its own)."""
    return mix64(np.uint64(v + 1) * GOLDEN)


@njit(cache=True)
def row_hash(row_values, r):
    """Hash of row r as its group values: a sum of per-value terms, so a row
    with one value swapped hashes to ``h - value_key(old) + value_key(new)``."""
    h = np.uint64(0)
    for g in range(row_values.shape[1]):
        h += value_key(row_values[r, g])
    return h if h != EMPTY else np.uint64(1)


@njit(cache=True)
def _table_size(n):
    size = 16
    while size < 2 * n:
        size *= 2
    return size


@njit(cache=True)
def row_hash_table(row_values):
    """Open-addressing set of every row's hash (--reject-positives)."""
    n = row_values.shape[0]
    table = np.zeros(_table_size(n), dtype=np.uint64)
    mask = np.uint64(table.shape[0] - 1)
    for r in range(n):
        h = row_hash(row_values, r)
        j = mix64(h) & mask
        while table[j] != EMPTY and table[j] != h:
            j = (j + np.uint64(1)) & mask
        table[j] = h
    return table


@njit(cache=True, inline="always")
def in_table(table, h):
    if h == EMPTY:
        h = np.uint64(1)
    mask = np.uint64(table.shape[0] - 1)
    j = mix64(h) & mask
    while table[j] != EMPTY:
        if table[j] == h:
            return True
        j = (j + np.uint64(1)) & mask
    return False


@njit(cache=True, **NO_REFCOUNT)
def draw_values(r, g, row_values, group_ptr, value_prob, value_alias, table, tries, K, vals, rng, t):
    """vals[0] = row r's value of group g, vals[1..K] = draws from Q2 of group g.

    With a non-empty ``table`` (the hashes of all training rows), a draw that
    makes a training row is redrawn up to ``tries`` times.
    """
    lo, hi = group_ptr[g], group_ptr[g + 1]
    vals[0] = row_values[r, g]
    base = np.uint64(0)
    if table.shape[0]:
        base = row_hash(row_values, r) - value_key(vals[0])
    for k in range(1, K + 1):
        v = draw_alias(lo, hi, value_prob, value_alias, rng, t)
        if table.shape[0]:
            for _ in range(tries):
                if not in_table(table, base + value_key(v)):
                    break
                v = draw_alias(lo, hi, value_prob, value_alias, rng, t)
        vals[k] = v


@njit(cache=True)
def draw_negatives(row_values, group_ptr, group_prob, group_alias, value_prob, value_alias, table, tries, K,
                   rng):
    """For every row, one group and K values (as training draws them): (groups [n], values [n, K+1])
    with column 0 the row's own value of the group (-1 when never seen in training)."""
    n, G = row_values.shape
    groups = np.empty(n, dtype=np.int64)
    vals = np.empty((n, K + 1), dtype=np.int64)
    for r in range(n):
        g = draw_alias(0, G, group_prob, group_alias, rng, 0)
        groups[r] = g
        draw_values(r, g, row_values, group_ptr, value_prob, value_alias, table, tries, K, vals[r], rng, np.int64(0))
    return groups, vals


@njit(cache=True)
def swap_group(feat, xs, parts, groups, vals, vptr, vfeat, vx):
    """CSR rows: row r with its group groups[r] replaced by value vals[r, k], k = 1..K."""
    n, K = vals.shape[0], vals.shape[1] - 1
    indptr = np.zeros(n * K + 1, dtype=np.int64)
    for r in range(n):
        g = groups[r]
        own = parts[r, parts.shape[1] - 1] - parts[r, 0] - (parts[r, g + 1] - parts[r, g])
        for k in range(K):
            u = vals[r, k + 1]
            indptr[r * K + k + 1] = indptr[r * K + k] + own + vptr[u + 1] - vptr[u]
    indices = np.empty(indptr[n * K], dtype=np.int32)
    values = np.empty(indptr[n * K], dtype=np.float32)
    for r in range(n):
        g = groups[r]
        for k in range(K):
            o = indptr[r * K + k]
            for h in range(parts.shape[1] - 1):
                if h == g:
                    u = vals[r, k + 1]
                    for e in range(vptr[u], vptr[u + 1]):
                        indices[o] = vfeat[e]
                        values[o] = vx[e]
                        o += 1
                else:
                    for e in range(parts[r, h], parts[r, h + 1]):
                        indices[o] = feat[e]
                        values[o] = xs[e]
                        o += 1
    return indptr, indices, values


@njit(cache=True, inline="always")
def _part_hash(g, feat, xbits, a, b):
    h = mix64(np.uint64(g) + GOLDEN)
    for k in range(a, b):
        h = mix64(h ^ (np.uint64(feat[k]) | (np.uint64(xbits[k]) << np.uint64(32))))
    return h


@njit(cache=True, inline="always")
def _same_part(feat, xbits, a, b, feat2, xbits2, a2, b2):
    if b - a != b2 - a2:
        return False
    for k in range(b - a):
        if feat[a + k] != feat2[a2 + k] or xbits[a + k] != xbits2[a2 + k]:
            return False
    return True


@njit(cache=True)
def sort_rows_by_group(indptr, indices, values, group_of, n_groups):
    """Each row's entries ordered by (group, id): returns (ids, values, part bounds).

    Row r's entries of group g are ``parts[r, g]`` .. ``parts[r, g+1]`` of the
    returned arrays (equal bounds: the row lacks g). ``values`` may be empty
    (all ones).
    """
    n = indptr.shape[0] - 1
    nnz = indices.shape[0]
    feat = np.empty(nnz, dtype=np.int32)
    xs = np.empty(nnz, dtype=np.float32)
    parts = np.empty((n, n_groups + 1), dtype=np.int64)
    for r in range(n):
        a, b = indptr[r], indptr[r + 1]
        keys = np.empty(b - a, dtype=np.int64)
        for k in range(a, b):
            i = indices[k]
            keys[k - a] = (np.int64(group_of[i]) << 32) | np.int64(i)
        order = np.argsort(keys)
        for k in range(b - a):
            src = a + order[k]
            feat[a + k] = indices[src]
            xs[a + k] = values[src] if values.shape[0] else np.float32(1.0)
        k = a
        for g in range(n_groups + 1):
            while k < b and group_of[feat[k]] < g:
                k += 1
            parts[r, g] = k
    return feat, xs, parts


@njit(cache=True)
def index_group_values(feat, xbits, parts, known_ptr, known_feat, known_xbits, known_group, insert):
    """Ids of the group values of sorted rows (see :func:`sort_rows_by_group`).

    Values of the vocabulary ``known_*`` (value v: entries known_ptr[v]..,
    group known_group[v]) keep their ids. With ``insert``, a new value gets
    the next id, in order of first appearance; without, it gets -1.
    Returns (row_values [n, G], value count, representative (row, group) of
    every value (row -1 for known values), rows holding each value).
    """
    n, G = parts.shape[0], parts.shape[1] - 1
    n_known = known_ptr.shape[0] - 1
    cap = n_known + 64
    size = _table_size(cap)
    table = np.full(size, -1, dtype=np.int64)
    rep_row = np.full(cap, -1, dtype=np.int64)
    rep_group = np.empty(cap, dtype=np.int64)
    counts = np.zeros(cap, dtype=np.int64)
    n_values = n_known
    for v in range(n_known):
        rep_group[v] = known_group[v]
    _rehash(table, n_values, rep_row, rep_group, feat, xbits, parts, known_ptr, known_feat, known_xbits)
    row_values = np.empty((n, G), dtype=np.int32)
    for r in range(n):
        for g in range(G):
            a, b = parts[r, g], parts[r, g + 1]
            mask = np.uint64(table.shape[0] - 1)
            j = _part_hash(g, feat, xbits, a, b) & mask
            found = -1
            while table[j] >= 0:
                v = table[j]
                if rep_group[v] == g:
                    if rep_row[v] < 0:
                        same = _same_part(feat, xbits, a, b, known_feat, known_xbits, known_ptr[v],
                                          known_ptr[v + 1])
                    else:
                        rr = rep_row[v]
                        same = _same_part(feat, xbits, a, b, feat, xbits, parts[rr, g], parts[rr, g + 1])
                    if same:
                        found = v
                        break
                j = (j + np.uint64(1)) & mask
            if found < 0 and insert:
                found = n_values
                n_values += 1
                if n_values > cap:
                    cap *= 2
                    rep_row = _grown(rep_row, cap)
                    rep_group = _grown(rep_group, cap)
                    counts = _grown(counts, cap)
                    counts[found:] = 0
                rep_row[found] = r
                rep_group[found] = g
                table[j] = found
                if 2 * n_values > table.shape[0]:
                    table = np.full(2 * table.shape[0], -1, dtype=np.int64)
                    _rehash(table, n_values, rep_row, rep_group, feat, xbits, parts, known_ptr, known_feat,
                            known_xbits)
            if found >= 0:
                counts[found] += 1
            row_values[r, g] = found
    return row_values, n_values, rep_row[:n_values].copy(), rep_group[:n_values].copy(), counts[:n_values].copy()


@njit(cache=True)
def _rehash(table, n_values, rep_row, rep_group, feat, xbits, parts, known_ptr, known_feat, known_xbits):
    mask = np.uint64(table.shape[0] - 1)
    for v in range(n_values):
        g = rep_group[v]
        if rep_row[v] < 0:
            h = _part_hash(g, known_feat, known_xbits, known_ptr[v], known_ptr[v + 1])
        else:
            r = rep_row[v]
            h = _part_hash(g, feat, xbits, parts[r, g], parts[r, g + 1])
        j = h & mask
        while table[j] >= 0:
            j = (j + np.uint64(1)) & mask
        table[j] = v


@njit(cache=True)
def _grown(a, cap):
    """``a`` copied into the start of a new array of ``cap`` entries (the rest unset)."""
    out = np.empty(cap, dtype=a.dtype)
    for i in range(a.shape[0]):  # a loop: slice assignment compiles for seconds
        out[i] = a[i]
    return out


@njit(cache=True)
def context_hashes(row_values, skip):
    """Order-free hash of each row's values outside group ``skip`` (its context)."""
    n, G = row_values.shape
    out = np.empty(n, dtype=np.uint64)
    for r in range(n):
        h = np.uint64(0)
        for g in range(G):
            if g != skip:
                h += value_key(row_values[r, g])
        out[r] = h
    return out


@njit(cache=True)
def sample_candidates(lo, hi, own, excl_ptr, excl, n_sampled, rng):
    """For each row, n_sampled distinct values drawn uniformly from lo..hi-1, never its
    own value or an excluded one (all of them when fewer remain); -1 pads."""
    n = own.shape[0]
    out = np.full((n, n_sampled), -1, dtype=np.int64)
    mark = np.zeros(hi - lo, dtype=np.bool_)
    for r in range(n):
        blocked = 0
        for e in range(excl_ptr[r], excl_ptr[r + 1]):
            v = excl[e]
            if lo <= v < hi and not mark[v - lo]:
                mark[v - lo] = True
                blocked += 1
        if lo <= own[r] < hi and not mark[own[r] - lo]:
            mark[own[r] - lo] = True
            blocked += 1
        free = hi - lo - blocked
        if free <= n_sampled:
            got = 0
            for j in range(hi - lo):
                if not mark[j]:
                    out[r, got] = lo + j
                    got += 1
        else:
            got = 0
            while got < n_sampled:
                j = min(np.int64(next_uniform(rng, 0) * (hi - lo)), hi - lo - 1)
                if not mark[j]:
                    mark[j] = True
                    out[r, got] = lo + j
                    got += 1
            for e in range(n_sampled):
                mark[out[r, e] - lo] = False
        for e in range(excl_ptr[r], excl_ptr[r + 1]):
            v = excl[e]
            if lo <= v < hi:
                mark[v - lo] = False
        if lo <= own[r] < hi:
            mark[own[r] - lo] = False
    return out
