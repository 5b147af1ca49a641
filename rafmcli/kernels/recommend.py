"""Scoring every value of one group in a context row: top-k and ranks (numba).

A context row x (group G removed) and a candidate value c (features f of G,
values x_f) make the row x + c. Its score splits as

    y(x + c) = y(x) + const(c) + Sum_{f in c} x_f Sum_{l <= k_f} <v_f^(l), U_l>

with const(c) = Sum_f w_f x_f + the pairwise part of c alone, and U_l the
context's sums: S_l - T_l for a feature's dependent level l < k_f of RaFM,
S_l otherwise (FM: S_1; DiFacto: the block sums S_l). Every level's cross
term of Theorem 3 (<S^x_l, S^c_l> - <T^x_l, T^c_l>) collapses to this. The
context's sums are computed once per row; a candidate then costs O(D) per
feature, and const(c) once for all rows.

Kernels are free of I/O; tunables arrive as arguments (numba freezes globals).
Rows are scored in chunks that threads claim one at a time (kernels/claims.py,
threads.spread): plain ``nogil`` kernels, which compile in a fraction of a
``parallel=True`` kernel's time, load from the cache without numba's thread pool
and run on the threads their caller gives (``n_threads``; None: threads.spread's
default, every available core, or one in a ``rafm tune`` worker).
"""

import numpy as np
from numba import njit

from rafmcli.kernels.claims import counter_for, next_block
from rafmcli.kernels.forward import FAST, pairwise_from_sums, row_scratch, row_start, top_level
from rafmcli.kernels.implicit import ZERO, add_sums, linear_sum


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _context(feat, xs, parts, r, skip, lev, widths, offsets, V, w, nested, soff, S, T, Q, R, B):
    """Fill S, T with row r's sums over every group but ``skip``; return its score without w0."""
    S[:] = 0.0
    T[:] = 0.0
    Q[:] = 0.0
    R[:] = 0.0
    lin = 0.0
    for h in range(parts.shape[1] - 1):
        if h != skip:
            a, b = parts[r, h], parts[r, h + 1]
            add_sums(a, b, feat, xs, lev, widths, offsets, V, nested, soff, S, T, ZERO, Q, R, ZERO)
            lin += linear_sum(a, b, feat, xs, w)
    return lin + pairwise_from_sums(S, T, 0, Q, R, 0, soff, nested, B, 0, soff.shape[0] - 2)


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _cross(a, b, feat, xs, lev, widths, offsets, V, nested, soff, S, T):
    """Sum_{f in a:b} x_f Sum_{l <= k_f} <v_f^(l), U_l> (module notes)."""
    m = widths.shape[0]
    total = 0.0
    for k in range(a, b):
        i = feat[k]
        x = xs[k]
        top = top_level(lev, i, m)
        for l in range(top + 1):
            start = row_start(offsets, widths, l, i)
            so = np.uint64(soff[l])
            dot = np.float32(0.0)
            if nested and l < top:
                for f in range(np.uint64(widths[l])):
                    dot += V[start + f] * (S[so + f] - T[so + f])
            else:
                for f in range(np.uint64(widths[l])):
                    dot += V[start + f] * S[so + f]
            total += x * dot
    return total


@njit(cache=True, error_model="numpy", fastmath=FAST)
def _alone(a, b, feat, xs, lev, widths, offsets, V, w, nested, soff, S, T, Q, R, B):
    """Linear plus pairwise part of features a:b by themselves."""
    S[:] = 0.0
    T[:] = 0.0
    Q[:] = 0.0
    R[:] = 0.0
    add_sums(a, b, feat, xs, lev, widths, offsets, V, nested, soff, S, T, ZERO, Q, R, ZERO)
    return linear_sum(a, b, feat, xs, w) + pairwise_from_sums(S, T, 0, Q, R, 0, soff, nested, B, 0, soff.shape[0] - 2)


@njit(cache=True, error_model="numpy", fastmath=FAST)
def candidate_constants(lo, hi, vptr, vfeat, vx, lev, widths, offsets, V, w, nested):
    """const(c) of values lo..hi-1 (module notes)."""
    soff, S, T, Q, R, B = row_scratch(widths)
    out = np.empty(hi - lo)
    for v in range(lo, hi):
        out[v - lo] = _alone(vptr[v], vptr[v + 1], vfeat, vx, lev, widths, offsets, V, w, nested, soff,
                             S, T, Q, R, B)
    return out


ROW_CHUNKS = 256  # chunks of rows the threads claim (kernels/claims.py)


def top_k(feat, xs, parts, group, lo, hi, const, vptr, vfeat, vx, excl_ptr, excl, k, lev, widths,
          offsets, V, w, w0, nested, n_threads=None):
    """For each row, the k best values of ``lo..hi-1`` (group ``group``) substituted for
    its group part, best first; ties go to the lower value id. Values
    excl[excl_ptr[r]:excl_ptr[r+1]] are skipped for row r. Returns (value ids,
    scores), [n, k], -1 and -inf where fewer than k values remain. Chunks of rows
    on ``n_threads`` threads (default: every available core)."""
    from rafmcli import threads

    n = parts.shape[0]
    ids = np.full((n, k), -1, dtype=np.int64)
    scores = np.full((n, k), -np.inf)
    n_chunks = max(1, min(n, ROW_CHUNKS))
    threads.spread(_top_k_chunks, n_chunks, n_chunks, feat, xs, parts, group, lo, hi, const, vptr, vfeat, vx,
                   excl_ptr, excl, k, lev, widths, offsets, V, w, w0, nested, ids, scores,
                   counter_for(n_threads), threads=n_threads)
    return ids, scores


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True)
def _top_k_chunks(c_lo, c_hi, n_chunks, feat, xs, parts, group, lo, hi, const, vptr, vfeat, vx, excl_ptr, excl,
                  k, lev, widths, offsets, V, w, w0, nested, ids, scores, claims):
    """:func:`top_k` for the chunks of rows this worker claims from ``claims`` (empty: c_lo..c_hi-1)."""
    n = parts.shape[0]
    soff, S, T, Q, R, B = row_scratch(widths)
    skip = np.zeros(hi - lo, dtype=np.bool_)
    first, last = next_block(claims, c_lo, c_hi, n_chunks, False, 1)
    while first < last:
        for r in range(first * n // n_chunks, last * n // n_chunks):
            base = w0 + _context(feat, xs, parts, r, group, lev, widths, offsets, V, w, nested, soff,
                                 S, T, Q, R, B)
            for e in range(excl_ptr[r], excl_ptr[r + 1]):
                if lo <= excl[e] < hi:
                    skip[excl[e] - lo] = True
            filled = 0
            for j in range(hi - lo):
                if skip[j]:
                    continue
                v = lo + j
                s = base + const[j] + _cross(vptr[v], vptr[v + 1], vfeat, vx, lev, widths, offsets, V,
                                             nested, soff, S, T)
                if filled == k and not s > scores[r, k - 1]:
                    continue
                p = filled if filled < k else k - 1
                while p > 0 and s > scores[r, p - 1]:
                    if p < k:
                        scores[r, p] = scores[r, p - 1]
                        ids[r, p] = ids[r, p - 1]
                    p -= 1
                scores[r, p] = s
                ids[r, p] = v
                filled = min(filled + 1, k)
            for e in range(excl_ptr[r], excl_ptr[r + 1]):
                if lo <= excl[e] < hi:
                    skip[excl[e] - lo] = False
        first, last = next_block(claims, c_lo, c_hi, n_chunks, True, 1)


def rank_counts(feat, xs, parts, group, lo, hi, const, vptr, vfeat, vx, excl_ptr, excl, own, sampled,
                lev, widths, offsets, V, w, w0, nested, n_threads=None):
    """Where each row's own group part ranks among the values lo..hi-1.

    Row r's own part (its entries of ``group``) is scored against every value
    except its own (``own[r]``, -1 if unknown) and the excluded ones, and
    against the values sampled[r] (-1 entries unused). Returns per row
    (higher, ties) over all values and (higher, ties) over the sampled ones.
    Chunks of rows on ``n_threads`` threads (default: every available core).
    """
    from rafmcli import threads

    n = parts.shape[0]
    out = np.zeros((n, 4), dtype=np.int64)
    n_chunks = max(1, min(n, ROW_CHUNKS))
    threads.spread(_rank_chunks, n_chunks, n_chunks, feat, xs, parts, group, lo, hi, const, vptr, vfeat, vx,
                   excl_ptr, excl, own, sampled, lev, widths, offsets, V, w, nested, out,
                   counter_for(n_threads), threads=n_threads)
    return out


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True)
def _rank_chunks(c_lo, c_hi, n_chunks, feat, xs, parts, group, lo, hi, const, vptr, vfeat, vx, excl_ptr, excl,
                 own, sampled, lev, widths, offsets, V, w, nested, out, claims):
    """:func:`rank_counts` for the chunks of rows this worker claims from ``claims`` (empty: c_lo..c_hi-1)."""
    n = parts.shape[0]
    soff, S, T, Q, R, B = row_scratch(widths)
    S2, T2 = np.empty_like(S), np.empty_like(T)  # the row's own part's sums
    skip = np.zeros(hi - lo, dtype=np.bool_)
    first, last = next_block(claims, c_lo, c_hi, n_chunks, False, 1)
    while first < last:
        for r in range(first * n // n_chunks, last * n // n_chunks):
            a, b = parts[r, group], parts[r, group + 1]
            mine = _alone(a, b, feat, xs, lev, widths, offsets, V, w, nested, soff, S2, T2, Q, R, B)
            _context(feat, xs, parts, r, group, lev, widths, offsets, V, w, nested, soff, S, T, Q, R, B)
            mine += _cross(a, b, feat, xs, lev, widths, offsets, V, nested, soff, S, T)
            for e in range(excl_ptr[r], excl_ptr[r + 1]):
                if lo <= excl[e] < hi:
                    skip[excl[e] - lo] = True
            if lo <= own[r] < hi:
                skip[own[r] - lo] = True
            higher = ties = 0
            for j in range(hi - lo):
                if not skip[j]:
                    v = lo + j
                    s = const[j] + _cross(vptr[v], vptr[v + 1], vfeat, vx, lev, widths, offsets, V, nested,
                                          soff, S, T)
                    higher += s > mine
                    ties += s == mine
            out[r, 0], out[r, 1] = higher, ties
            higher = ties = 0
            for e in range(sampled.shape[1]):
                v = sampled[r, e]
                if v >= 0:
                    s = const[v - lo] + _cross(vptr[v], vptr[v + 1], vfeat, vx, lev, widths, offsets, V,
                                               nested, soff, S, T)
                    higher += s > mine
                    ties += s == mine
            out[r, 2], out[r, 3] = higher, ties
            for e in range(excl_ptr[r], excl_ptr[r + 1]):
                if lo <= excl[e] < hi:
                    skip[excl[e] - lo] = False
            if lo <= own[r] < hi:
                skip[own[r] - lo] = False
        first, last = next_block(claims, c_lo, c_hi, n_chunks, True, 1)
