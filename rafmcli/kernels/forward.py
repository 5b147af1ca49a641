"""Theorem 3 forward pass for FM, RaFM and DiFacto, and batch prediction.

Parameter layout (see :mod:`rafmcli.model.layout`): features are renumbered so that
each F_l = {i : k_i >= l} is the prefix ``0 .. sizes[l]-1``; ``lev[i]`` is
k_i - 1 (0-based). Factors live in one flat float32 array ``V``: level l is a
``sizes[l] x widths[l]`` row-major block starting at ``offsets[l]``.

* RaFM (``nested``): widths[l] = D_l; v_i^(l) is the level-l row of i.
* DiFacto: widths[l] = D_l - D_{l-1}; block l holds coordinates
  [D_{l-1}, D_l) of the single vector of each i in F_l.
* FM is either with one level.

Per row (paper Theorem 3), with S_l = Sum_{F_l} v_i^(l) x_i, Q_l its squared
norms, T_l, R_l the same over F_{l+1}:
A_{l,l} = (|S_l|^2 - Q_l)/2, A_{l,l+1} = (|T_l|^2 - R_l)/2 and the truncated
models B_{1,p} = Sum_{l<=p} A_{l,l} - Sum_{l<p} A_{l,l+1}; the pairwise part
of RaFM is B_{1,m}. DiFacto's pairwise part is Sum_l A_{l,l} over its blocks.
Cost per row: Sum_l widths[l] n(F_l) (Corollary 4), never the pair loop. A one-level
model (FM) takes :func:`fm_sums`: the same arithmetic without the levels' bookkeeping.

Kernels are free of I/O; tunables arrive as arguments (numba freezes globals).
numba caches a kernel keyed by its own file only: after editing kernels/claims.py
(inlined here), clear ``__pycache__``.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic

from rafmcli.kernels import NO_REFCOUNT, read_only
from rafmcli.kernels.claims import counter_for, next_block

# Reassociation lets reductions vectorise while NaN and inf keep their meaning;
# error_model="numpy" (no ZeroDivisionError check) lets divisions vectorise.
FAST = {"reassoc", "contract", "nsz", "arcp"}

LINE_FLOATS = np.uint64(16)  # float32 values in a 64-byte cache line


def _prefetch(locality, doc, write=False):
    @intrinsic
    def prefetch(typingctx, arr, index):
        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(int(write)), i32(locality), i32(1)])
            return context.get_dummy_value()

        return types.void(arr, index), codegen

    prefetch.__doc__ = doc
    return prefetch


@intrinsic
def as_read_only(typingctx, arr):
    """``arr`` typed read-only (the same array; only numba's type changes): a kernel's own
    buffer passed to the row kernels, which are also given rows read-only
    (:func:`rafmcli.kernels.read_only`), compiles them once for both."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, signature.return_type, args[0])

    return arr.copy(readonly=True)(arr), codegen


prefetch = _prefetch(3, "Ask the CPU to start loading arr[index] into cache (llvm.prefetch: read, keep).")
prefetch_l2 = _prefetch(2, """The same into the level-2 cache (x86 prefetcht1).

For the many lines of a row's factors (FM(64) AdaGrad: over a hundred a row):
measured 1.4x SGD's and 2.1x AdaGrad's rows per CPU-second on bench_train's
1M-row set. The likely reason: a first-level hint holds one of the core's few
first-level miss buffers until its line arrives; level-2 hints queue deeper.""")
prefetch_write = _prefetch(2, """Ask the CPU to load arr[index] for writing (x86 prefetchw, which has no cache
level): the line arrives owned by this core.

For a small model shared by Hogwild threads, whose lines are mostly in the other
core's cache: a read hint brings a line shared, and the step's store then waits
for the other copy to be invalidated. Measured on bench_threads' fields set, FM(64)
SGD on two threads: 9.0-9.1 ms an epoch against 10.8-11.1 with read hints. Not for
a model in memory as a row's many lines: the hint holds a first-level miss buffer until its
line arrives (bench_train's 1M-row set, FM(64) SGD: 9% fewer rows/s on one thread, 13% on
two). A Hogwild merge uses it on any model (hogwild.merge_replica: a few rows at a time).""", write=True)


@njit(cache=True, error_model="numpy", inline="always")
def prefetch_line(arr, index, write):
    """:data:`prefetch_write` (``write``) or :data:`prefetch_l2` the line holding arr[index]."""
    if write:
        prefetch_write(arr, index)
    else:
        prefetch_l2(arr, index)


@njit(cache=True, error_model="numpy", inline="always")
def top_level(lev, i, m):
    """k_i - 1; FM (m = 1) never reads ``lev``, a random access into a large array."""
    return lev[i] if m > 1 else 0


@njit(cache=True, error_model="numpy", inline="always")
def row_start(offsets, widths, l, i):
    """Offset of v_i^(l) in V, unsigned.

    Loops below index ``V[start + f]`` with unsigned offsets: numba then adds
    no negative-index wrap (which stops vectorisation) and, unlike a slice,
    no reference counting (two atomic operations per slice).
    """
    return np.uint64(offsets[l]) + np.uint64(i) * np.uint64(widths[l])


@njit(cache=True, error_model="numpy", inline="always")
def row_unit(widths):
    """Row-wise AdaGrad's state of the factor row at V[start] is at start // unit, unit the
    narrowest level's width: rows are disjoint and at least unit wide, so no two share an
    entry, and the state needs V's size // unit entries (FM: one a feature)."""
    unit = widths[0]
    for width in widths[1:]:  # not widths.min(): numba does not compile it without reference counts
        unit = min(unit, width)
    return np.uint64(unit)


@njit(cache=True, error_model="numpy", inline="always")
def rowwise_state(accV1, V):
    """Whether ``accV1`` is row-wise AdaGrad's (one sum a row at :func:`row_unit`), not in V's layout."""
    return 0 < accV1.shape[0] != V.shape[0]


@njit(cache=True, error_model="numpy", **NO_REFCOUNT)
def prefetch_row(a, b, indices, lev, widths, offsets, V, accV1, w, accw1, write):
    """Prefetch the factor rows and linear weights (and their AdaGrad/Adam state) a row will touch.

    Called PREFETCH_AHEAD rows ahead: random rows of a large model otherwise
    stall on memory for most of their time. One hint per 64-byte line, factor
    lines into the level-2 cache (:data:`prefetch_l2`), or owned (``write``,
    :data:`prefetch_write`); a row-wise state (smaller than V) has one entry a row
    (:func:`row_unit`).
    """
    m = widths.shape[0]
    rowwise, unit = rowwise_state(accV1, V), row_unit(widths)
    for k in range(a, b):
        i = indices[k]
        prefetch(w, i)
        if accw1.shape[0]:
            prefetch(accw1, i)
        for l in range(top_level(lev, i, m) + 1):
            start = row_start(offsets, widths, l, i)
            stop = start + np.uint64(widths[l])
            prefetch_lines(V, start, stop, write)
            if rowwise:
                prefetch_line(accV1, start // unit, write)
            elif accV1.shape[0]:
                prefetch_lines(accV1, start, stop, write)


@njit(cache=True, error_model="numpy", inline="always")
def prefetch_lines(arr, start, stop, write):
    """:func:`prefetch_line` every 64-byte line of arr[start:stop] (unsigned; ``arr`` starts on a
    line, model.aligned_zeros, so the first line starts at ``start`` rounded down)."""
    line = start - start % LINE_FLOATS
    while line < stop:
        prefetch_line(arr, line, write)
        line += LINE_FLOATS


@njit(cache=True, error_model="numpy", inline="always")
def sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + np.exp(-z))
    e = np.exp(z)
    return e / (1.0 + e)


@njit(cache=True, nogil=True)
def level_offsets(widths):
    """soff: level l's sums start at soff[l] = D_1 + ... + D_{l-1} in S and T (soff[m]: their length)."""
    m = widths.shape[0]
    soff = np.zeros(m + 1, dtype=np.int64)
    for l in range(m):
        soff[l + 1] = soff[l] + widths[l]
    return soff


@njit(cache=True, nogil=True)
def row_scratch(widths):
    """A thread's scratch for :func:`row_forward`: soff (level l's sums start at soff[l] =
    D_1 + ... + D_{l-1}), S and T (float32, D_1 + ... + D_m each), Q, R and B (one per level).
    T starts at zero: one level (:func:`fm_sums`) never writes it, and Adam's and the gradient's
    factor steps read it times 0 (kernels/sgd.py), which garbage such as NaN would not survive."""
    m = widths.shape[0]
    soff = level_offsets(widths)
    return soff, np.empty(soff[m], dtype=np.float32), np.zeros(soff[m], dtype=np.float32), np.empty(m), \
        np.empty(m), np.empty(m)


@njit(cache=True, error_model="numpy", fastmath=FAST, inline="always")
def fm_sums(a, b, indices, values, V, width, S):
    """:func:`row_forward` for a one-level model (FM): S = Sum v_i x_i and the pairwise part
    (|S|^2 - Sum |v_i x_i|^2) / 2, in the levels' arithmetic and order without their
    bookkeeping (``width``: the rank, unsigned; the one level starts V, offsets[0] = 0). S is
    zeroed even for an empty row, where the levels leave it stale (no caller reads it then)."""
    has_values = values.shape[0] > 0
    for f in range(width):
        S[f] = 0.0
    Q = 0.0
    for k in range(a, b):
        x = values[k] if has_values else np.float32(1.0)
        start = np.uint64(indices[k]) * width
        q = np.float32(0.0)
        for f in range(width):
            vx = V[start + f] * x
            S[f] += vx
            q += vx * vx
        Q += q
    ss = np.float32(0.0)
    for f in range(width):
        ss += S[f] * S[f]
    return 0.5 * (ss - Q)


@njit(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
def row_forward(a, b, indices, values, lev, widths, offsets, V, nested, soff, S, T, Q, R, B):
    """Fill S, T (flat, level l at ``soff[l]``), Q, R and B[p] = B_{1,p+1} for one row (one
    level: S and B only, :func:`fm_sums`; T then stays as :func:`row_scratch` made it, zero).

    Returns (B_{1,m}, top): the row's pairwise part and its highest level
    (0-based; -1 for a row without features). Only levels 0..top are zeroed and
    reduced, so a row of rare features costs only its own levels: above top,
    S = T = 0 and B_{1,p} = B_{1,top+1} (those entries of S, T, Q, R are stale).
    """
    m = widths.shape[0]
    if m == 1:  # FM: the same sums without the levels' bookkeeping
        B[0] = fm_sums(a, b, indices, values, V, np.uint64(widths[0]), S)
        return B[0], 0 if b > a else -1
    has_values = values.shape[0] > 0
    filled = -1  # levels 0..filled are zeroed for this row
    for k in range(a, b):
        i = indices[k]
        x = values[k] if has_values else np.float32(1.0)
        top = top_level(lev, i, m)
        while filled < top:  # first feature of the row reaching this level
            filled += 1
            for f in range(np.uint64(soff[filled]), np.uint64(soff[filled + 1])):
                S[f] = 0.0
                T[f] = 0.0
            Q[filled] = 0.0
            R[filled] = 0.0
        for l in range(top + 1):
            start = row_start(offsets, widths, l, i)
            so = np.uint64(soff[l])
            q = np.float32(0.0)
            if nested and l < top:
                for f in range(np.uint64(widths[l])):
                    vx = V[start + f] * x
                    S[so + f] += vx
                    T[so + f] += vx
                    q += vx * vx
                R[l] += q
            else:
                for f in range(np.uint64(widths[l])):
                    vx = V[start + f] * x
                    S[so + f] += vx
                    q += vx * vx
            Q[l] += q
    return pairwise_from_sums(S, T, 0, Q, R, 0, soff, nested, B, 0, filled), filled


@njit(cache=True, error_model="numpy", fastmath=FAST, inline="always")
def pairwise_from_sums(S, T, so, Q, R, qo, soff, nested, B, bo, top):
    """B[bo + p] = B_{1,p+1} (Theorem 3) from a row's sums S, T (from ``so``) and Q, R
    (from ``qo``) of levels 0..``top``; the levels above, which the row does not reach,
    repeat B_{1,top+1}. Returns B_{1,m}."""
    m = soff.shape[0] - 1
    total = 0.0
    for l in range(top + 1):
        ss = np.float32(0.0)
        for f in range(np.uint64(so + soff[l]), np.uint64(so + soff[l + 1])):
            ss += S[f] * S[f]
        total += 0.5 * (ss - Q[qo + l])
        if nested and l > 0:
            tt = np.float32(0.0)
            for f in range(np.uint64(so + soff[l - 1]), np.uint64(so + soff[l])):
                tt += T[f] * T[f]
            total -= 0.5 * (tt - R[qo + l - 1])
        B[bo + l] = total
    for l in range(top + 1, m):
        B[bo + l] = total
    return total


@njit(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
def linear_part(a, b, indices, values, w):
    has_values = values.shape[0] > 0
    s = 0.0
    for k in range(a, b):
        s += w[indices[k]] * (values[k] if has_values else 1.0)
    return s


SMALL_PREDICTION = 1 << 14  # rows predicted on the calling thread alone (waking threads costs more)
PREDICTION_CHUNKS = 512  # row ranges a prediction is cut into, claimed by the threads one at a time


def predict_scores(indptr, indices, values, lev, widths, offsets, V, w, w0, nested, n_threads=None):
    """Raw scores w0 + Sum w_i x_i + pairwise part for every row: chunks of rows claimed by
    ``n_threads`` threads (default: every available core; one below SMALL_PREDICTION rows). The
    rows are passed read-only, however they came (kernels.read_only: one compiled kernel); the
    model's arrays as they are, writable, as training passes them to the same row kernels."""
    from rafmcli import threads

    n = indptr.shape[0] - 1
    out = np.empty(n)
    n_chunks = max(1, min(n, PREDICTION_CHUNKS))
    workers = 1 if n < SMALL_PREDICTION else n_threads
    threads.spread(_predict_chunks, n_chunks, n_chunks, *read_only(indptr, indices, values), lev, widths, offsets,
                   V, w, float(w0), nested, out, counter_for(workers), threads=workers)
    return out


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True)
def _predict_chunks(lo, hi, n_chunks, indptr, indices, values, lev, widths, offsets, V, w, w0, nested, out,
                    claims):
    """out[r] for the rows of the chunks (of ``n_chunks``) this worker claims from ``claims``
    one at a time (kernels/claims.py: a busy core takes fewer; empty: chunks lo..hi-1)."""
    n = indptr.shape[0] - 1
    soff, S, T, Q, R, B = row_scratch(widths)
    no_V, no_w = V[:0], w[:0]  # no optimizer state to prefetch (views made once: each costs references)
    c_lo, c_hi = next_block(claims, lo, hi, n_chunks, False, 1)
    while c_lo < c_hi:
        for c in range(c_lo, c_hi):
            stop = (c + 1) * n // n_chunks
            for r in range(c * n // n_chunks, stop):
                if r + 1 < stop:
                    prefetch_row(indptr[r + 1], indptr[r + 2], indices, lev, widths, offsets, V, no_V, w, no_w, False)
                a, b = indptr[r], indptr[r + 1]
                pair = row_forward(a, b, indices, values, lev, widths, offsets, V, nested, soff, S, T, Q, R, B)[0]
                out[r] = w0 + linear_part(a, b, indices, values, w) + pair
        c_lo, c_hi = next_block(claims, lo, hi, n_chunks, True, 1)


UNSEEN = -1  # an id table's entry for an id the model never saw
UNSEEN_MET = -2  # ... and that the rows being predicted hold (marked by predict_scores_by_id)


def predict_scores_by_id(indptr, ids, values, table, lev, widths, offsets, V, w, w0, nested, n_threads=None):
    """:func:`predict_scores` for rows holding original feature ids, mapped on the fly
    through ``table`` (internal id, or UNSEEN; ids below its length): no rows in
    internal ids are ever built. Entries of unseen features contribute nothing; their
    table entries become UNSEEN_MET, so that the distinct unseen ids can be counted
    afterwards. Returns (scores, how many entries were unseen)."""
    from rafmcli import threads

    n = indptr.shape[0] - 1
    out = np.empty(n)
    n_chunks = max(1, min(n, PREDICTION_CHUNKS))
    workers = 1 if n < SMALL_PREDICTION else n_threads
    indptr, ids, values = read_only(indptr, ids, values)
    misses = threads.spread(_predict_chunks_by_id, n_chunks, n_chunks, indptr, ids, values, table, lev, widths,
                            offsets, V, w, float(w0), nested, out, counter_for(workers), threads=workers)
    return out, sum(misses)


@njit(cache=True, error_model="numpy", nogil=True, **NO_REFCOUNT)
def _map_row(a, b, ids, values, table, idx, val, at, V, w, width):
    """Entries a..b-1 of a row in internal ids (and their values) into idx, val from
    position ``at``; unseen ones are left out and their table entries marked UNSEEN_MET.
    With ``width`` > 0 (a one-level model of that rank) each kept feature's linear weight
    and factor lines are prefetched as it is found (:func:`prefetch_row` in the same pass).
    Returns the position after the last entry kept."""
    has_values = values.shape[0] > 0
    for k in range(a, b):
        j = table[ids[k]]
        if j >= 0:
            idx[at] = j
            if has_values:
                val[at] = values[k]
            at += 1
            if width > 0:
                prefetch(w, j)
                start = np.uint64(j) * width
                prefetch_lines(V, start, start + width, False)
        elif j == UNSEEN:  # two threads may both write: the same value
            table[ids[k]] = UNSEEN_MET
    return at


BY_ID_AHEAD = 2  # rows mapped (and their factors prefetched) ahead of the row predicted


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True)
def _predict_chunks_by_id(lo, hi, n_chunks, indptr, ids, values, table, lev, widths, offsets, V, w, w0, nested,
                          out, claims):
    """out[r] for the rows of the chunks this worker claims from ``claims`` one at a time
    (:func:`predict_scores_by_id`; empty ``claims``: chunks lo..hi-1); returns the unseen entries."""
    n = indptr.shape[0] - 1
    soff, S, T, Q, R, B = row_scratch(widths)
    slots = BY_ID_AHEAD + 1
    longest = np.int64(0)  # room of each of the ring's row buffers (0 would type a literal: another compile)
    idx = np.empty(0, dtype=np.int32)
    val = np.empty(0, dtype=np.float32)
    ends = np.zeros(slots, dtype=np.int64)  # end of each slot's mapped row in idx, val
    unseen = 0
    c_lo, c_hi = next_block(claims, lo, hi, n_chunks, False, 1)
    while c_lo < c_hi:
        first, stop = c_lo * n // n_chunks, c_hi * n // n_chunks
        need = 0
        for r in range(first, stop):
            need = max(need, indptr[r + 1] - indptr[r])
        if need > longest:
            longest = need
            idx = np.empty(slots * longest, dtype=np.int32)
            val = np.empty(slots * longest if values.shape[0] else 0, dtype=np.float32)
        used = _predict_rows_by_id(first, stop, indptr, ids, values, table, lev, widths, offsets, V, w, w0, nested,
                                   out, soff, S, T, Q, R, B, idx, val, longest, ends)
        unseen += indptr[stop] - indptr[first] - used
        c_lo, c_hi = next_block(claims, lo, hi, n_chunks, True, 1)
    return unseen


@njit(cache=True, error_model="numpy", fastmath=FAST, nogil=True, **NO_REFCOUNT)
def _predict_rows_by_id(first, stop, indptr, ids, values, table, lev, widths, offsets, V, w, w0, nested, out,
                        soff, S, T, Q, R, B, idx, val, longest, ends):
    """out[r] for rows first..stop-1 (:func:`predict_scores_by_id`); returns the entries kept.
    Pipelined: the table entries of row r + BY_ID_AHEAD + 1 are prefetched, row r + BY_ID_AHEAD
    is mapped into a ring of BY_ID_AHEAD + 1 row buffers of ``longest`` entries (``idx``,
    ``val``) and its factors prefetched, then row r is predicted from its buffer with
    :func:`predict_scores`'s row kernels."""
    slots = BY_ID_AHEAD + 1
    one_level = np.uint64(widths[0]) if widths.shape[0] == 1 else np.uint64(0)  # prefetched by _map_row
    ridx, rval = as_read_only(idx), as_read_only(val)  # the row kernels' type for rows (predict_scores')
    for r in range(first, min(first + BY_ID_AHEAD, stop)):
        at = (r - first) % slots * longest
        ends[(r - first) % slots] = _map_row(indptr[r], indptr[r + 1], ids, values, table, idx, val, at, V, w,
                                             one_level)
    used = 0
    for r in range(first, stop):
        ahead = r + BY_ID_AHEAD
        if ahead + 1 < stop:
            for k in range(indptr[ahead + 1], indptr[ahead + 2]):
                prefetch(table, ids[k])
        if ahead < stop:
            slot = (ahead - first) % slots
            ends[slot] = _map_row(indptr[ahead], indptr[ahead + 1], ids, values, table, idx, val, slot * longest,
                                  V, w, one_level)
            if not one_level:
                prefetch_row(slot * longest, ends[slot], ridx, lev, widths, offsets, V, V[:0], w, w[:0], False)
        slot = (r - first) % slots
        a, b = slot * longest, ends[slot]
        pair = row_forward(a, b, ridx, rval, lev, widths, offsets, V, nested, soff, S, T, Q, R, B)[0]
        out[r] = w0 + linear_part(a, b, ridx, rval, w) + pair
        used += b - a
    return used
