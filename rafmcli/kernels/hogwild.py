"""Hogwild training on several threads with per-thread replicas of the hot features.

Lock-free threads (Hogwild) scale when rows touch mostly different parameters.
On a small vocabulary every row touches the same few hundred hot feature rows,
and two threads writing them move their cache lines between cores on nearly
every step (two threads ran twice as slowly as one). Here each worker steps the
hot features' parameters, their optimizer state and the bias in a private
replica, and every MERGE_ROWS rows adds its change since the last merge
(replica - base) to the shared model and takes the sum back: Hogwild's delayed
updates, batched. Cold features are stepped in place.

The hot features are the model's first ``n_hot`` (:func:`hot_features` chooses
them, and the training renumbers the model so: model/layout.move_to_front), so
a worker tells one by a comparison (i < n_hot) and finds its copy at a fixed
offset. With a table of each feature's slot, a dependent load a feature, two
threads ran at 1.59x-1.66x one on bench_threads' fields set, at 1.73x-1.77x
without it (in-process epochs).

* FM (one level), factors up to SPARE_MAX_BYTES: the replicas are spare rows
  after the model's own in the same arrays (:func:`spare_rows`,
  kernels/replicas.py), and a hot feature's id is rewritten to its replica's
  as rows are gathered, so a worker runs kernels.sgd's own row loop at the
  serial loop's speed.
* FM with larger factors: plain Hogwild with kernels.sgd's row loop, each
  worker with its own copy of the bias (on a large vocabulary few rows are hot).
* RaFM and DiFacto (level blocks leave no room for spare rows): the worker's
  row loop repeats kernels.sgd's with replica-aware forward kernels
  (:func:`_make_trainer`; one loop with run-time replica tests cost a third of
  single-thread speed).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from rafmcli.kernels import NO_REFCOUNT
from rafmcli.kernels.claims import BLOCK_ROWS, next_block
from rafmcli.kernels.forward import (
    FAST,
    pairwise_from_sums,
    prefetch,
    prefetch_line,
    prefetch_lines,
    row_start,
    row_unit,
    rowwise_state,
    top_level,
)
from rafmcli.kernels.replicas import Replicas
from rafmcli.kernels.sgd import (
    _TRAINERS,
    ADAGRAD,
    ADAM,
    H_BETA1,
    H_BETA2,
    H_BIAS_ON,
    H_DEP_WEIGHT,
    H_EPS,
    H_LINEAR_ON,
    H_LR,
    H_LR_DEP,
    H_REG0,
    H_REG1,
    PAPER,
    PREFETCH_AHEAD,
    ROWWISE,
    SGD,
    chunk_buffers,
    distillation_terms,
    gather_rows,
    level_coefficients,
    loss_gradient,
    next_span,
    no_replicas,
    span_scratch,
    step_factors,
    step_rates,
    step_weight,
    train_span,
    with_steps,
)

HOT_SHARE = 1 / 512  # a hot feature is in at least this share of the rows (replica-aware loop: it merges only the
# copies a worker touched, so a low share costs little; at 1/128 both threads kept writing the rows of features
# seen every few hundred rows)
SPARE_HOT_SHARE = 1 / 256  # the same for FM's spare rows, whose merges visit every copy, touched or not
MAX_HOT = 4096  # at most this many hot features
MERGE_ROWS = 1024  # rows between a worker's merges
MERGE_AHEAD = 8  # hot features whose shared rows a merge prefetches ahead
MIN_MERGES = 16  # merges a worker makes in an epoch at least (on small data: fewer rows between them)


@njit(cache=True, error_model="numpy", **NO_REFCOUNT)
def prefetch_row_hot(a, b, indices, lev, widths, offsets, V, accV1, w, accw1, n_hot, write):
    """forward.prefetch_row for the features that are not hot (i >= ``n_hot``); hot ones are
    in the worker's replica, already in cache."""
    m = widths.shape[0]
    rowwise, unit = rowwise_state(accV1, V), row_unit(widths)
    for k in range(a, b):
        i = indices[k]
        if i < n_hot:
            continue
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


@njit(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
def row_forward_hot(a, b, indices, values, lev, widths, offsets, V, nested, soff, S, T, Q, R, B, n_hot,
                    hot_stride, Vh):
    """forward.row_forward where a hot feature (i < ``n_hot``) reads v_i^(l) from the worker's
    replica ``Vh`` at i * hot_stride + soff[l]."""
    m = widths.shape[0]
    has_values = values.shape[0] > 0
    filled = -1
    for k in range(a, b):
        i = indices[k]
        x = values[k] if has_values else np.float32(1.0)
        top = top_level(lev, i, m)
        while filled < top:
            filled += 1
            for f in range(np.uint64(soff[filled]), np.uint64(soff[filled + 1])):
                S[f] = 0.0
                T[f] = 0.0
            Q[filled] = 0.0
            R[filled] = 0.0
        for l in range(top + 1):
            so = np.uint64(soff[l])
            q = np.float32(0.0)
            if i < n_hot:
                start = np.uint64(i) * np.uint64(hot_stride) + so
                if nested and l < top:
                    for f in range(np.uint64(widths[l])):
                        vx = Vh[start + f] * x
                        S[so + f] += vx
                        T[so + f] += vx
                        q += vx * vx
                    R[l] += q
                else:
                    for f in range(np.uint64(widths[l])):
                        vx = Vh[start + f] * x
                        S[so + f] += vx
                        q += vx * vx
            else:
                start = row_start(offsets, widths, l, i)
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


@njit(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
def linear_part_hot(a, b, indices, values, w, n_hot, wh):
    """Sum_i w_i x_i over one row, hot features' (i < ``n_hot``) weights from the replica ``wh``."""
    has_values = values.shape[0] > 0
    s = 0.0
    for k in range(a, b):
        i = indices[k]
        wi = wh[i] if i < n_hot else w[i]
        s += wi * (values[k] if has_values else 1.0)
    return s


@njit(cache=True, error_model="numpy", inline="always")
def _merge(shared, g, local, base, h, width):
    """Add a replica's change since the last merge (local - base) to ``shared``; both copies
    then hold the sum (exactly ``local`` when no other worker changed the entry; Hogwild: a
    concurrent merge of the same entry may be lost)."""
    for f in range(width):
        s, b = shared[g + f], base[h + f]
        v = local[h + f] if s == b else s + (local[h + f] - b)
        shared[g + f] = v
        local[h + f] = v
        base[h + f] = v


@njit(cache=True, error_model="numpy", inline="always")
def _prefetch_shared(i, lev, widths, offsets, V, accV1, accV2, rowwise):
    """Prefetch feature i's shared factor rows and their element-wise state for writing: between
    merges nothing else touches them, and in a model larger than the caches they leave them."""
    for l in range(top_level(lev, i, widths.shape[0]) + 1):
        g = row_start(offsets, widths, l, i)
        stop = g + np.uint64(widths[l])
        prefetch_lines(V, g, stop, True)
        if accV1.shape[0] and not rowwise:
            prefetch_lines(accV1, g, stop, True)
        if accV2.shape[0]:
            prefetch_lines(accV2, g, stop, True)


@njit(cache=True, error_model="numpy")
def merge_replica(hot, n_hot, lev, widths, offsets, soff, model, state, replica):
    """Merge the replicas of the hot features ``hot[:n_hot]`` (and the bias) into the shared model."""
    V, w, w0 = model[3], model[4], model[5]
    accV1, accV2, accw1, accw2, acc0 = state
    Vh, Vb, A1h, A1b, A2h, A2b, wh, wb, aw1h, aw1b, aw2h, aw2b, w0h, w0b, a0h, a0b = replica
    m = widths.shape[0]
    stride = soff[m]
    rowwise, unit = rowwise_state(accV1, V), row_unit(widths)
    for k in range(n_hot):
        if k + MERGE_AHEAD < n_hot:
            _prefetch_shared(hot[k + MERGE_AHEAD], lev, widths, offsets, V, accV1, accV2, rowwise)
        i = hot[k]
        for l in range(top_level(lev, i, m) + 1):
            g = row_start(offsets, widths, l, i)
            h = np.uint64(i) * np.uint64(stride) + np.uint64(soff[l])
            width = np.uint64(widths[l])
            _merge(V, g, Vh, Vb, h, width)
            if rowwise:
                _merge(accV1, g // unit, A1h, A1b, h // unit, 1)
            elif accV1.shape[0]:
                _merge(accV1, g, A1h, A1b, h, width)
            if accV2.shape[0]:
                _merge(accV2, g, A2h, A2b, h, width)
        _merge(w, i, wh, wb, i, 1)
        if accw1.shape[0]:
            _merge(accw1, i, aw1h, aw1b, i, 1)
        if accw2.shape[0]:
            _merge(accw2, i, aw2h, aw2b, i, 1)
    _merge(w0, 0, w0h, w0b, 0, 1)
    _merge(acc0, 0, a0h, a0b, 0, 2)


@njit(cache=True, error_model="numpy")
def new_replica(n_hot, lev, widths, offsets, soff, model, state):
    """A thread's private copies (and their values at the last merge) of the hot features'
    (the model's first ``n_hot``) parameters and optimizer state, and of the bias, filled from
    the shared model."""
    V, w = model[3], model[4]
    accV1, accV2, accw1, accw2 = state[0], state[1], state[2], state[3]
    n, stride = n_hot, soff[widths.shape[0]]

    nv, n2 = n * stride, n * stride if accV2.shape[0] else 0
    n1 = 0 if not accV1.shape[0] else nv if accV1.shape[0] == V.shape[0] else nv // row_unit(widths)
    Vh, Vb = np.zeros(nv, dtype=V.dtype), np.zeros(nv, dtype=V.dtype)
    A1h, A1b = np.zeros(n1, dtype=V.dtype), np.zeros(n1, dtype=V.dtype)
    A2h, A2b = np.zeros(n2, dtype=V.dtype), np.zeros(n2, dtype=V.dtype)
    nw1, nw2 = n if accw1.shape[0] else 0, n if accw2.shape[0] else 0
    wh, wb = np.zeros(n, dtype=w.dtype), np.zeros(n, dtype=w.dtype)
    aw1h, aw1b = np.zeros(nw1, dtype=w.dtype), np.zeros(nw1, dtype=w.dtype)
    aw2h, aw2b = np.zeros(nw2, dtype=w.dtype), np.zeros(nw2, dtype=w.dtype)
    w0h, w0b = np.zeros(1), np.zeros(1)
    a0h, a0b = np.zeros(2), np.zeros(2)
    replica = (Vh, Vb, A1h, A1b, A2h, A2b, wh, wb, aw1h, aw1b, aw2h, aw2b, w0h, w0b, a0h, a0b)
    merge_replica(np.arange(n, dtype=np.int32), n, lev, widths, offsets, soff, model, state,
                  replica)  # zero deltas: a copy; int32 ids as the row loop's (one compile)
    return replica


def _make_trainer(method):
    """One Hogwild worker's row loop with the optimizer ``method`` fixed (as kernels.sgd's)."""
    def span(j0, j1, j_end, step, ptr, idx, val, lab, model, state, hyper, reg_v, task, nested, variant, n_hot,
             replica, scratch, dirty, touched, n_touched, write, loss):
        """Train on rows j0..j1-1 of a gathered chunk (kernels.sgd's span), hot features (the
        first ``n_hot``) in ``replica``; a hot feature is added to ``touched`` (and marked
        ``dirty``) the first time a row steps it. Returns (``loss`` plus the rows', the features in
        ``touched``).
        ``write``: prefetch for writing (forward.prefetch_write). Without reference counts
        (kernels.NO_REFCOUNT)."""
        lev, widths, offsets, V, w, _ = model
        accV1, accV2, accw1, accw2, _ = state
        Vh, A1h, A2h, wh, aw1h, aw2h = replica[0], replica[2], replica[4], replica[6], replica[8], replica[10]
        W0, A0 = replica[12], replica[14]
        soff, S, T, Q, R, B, a_free, a_dep, b_dep, d, unit = scratch
        m = widths.shape[0]
        has_values = val.shape[0] > 0
        stride = soff[m]
        beta1, beta2, eps = hyper[H_BETA1], hyper[H_BETA2], hyper[H_EPS]
        lr, lr_dep_base = hyper[H_LR], hyper[H_LR_DEP]
        dep_weight = hyper[H_DEP_WEIGHT]
        for j in range(j0, j1):
            if j + PREFETCH_AHEAD < j_end:
                ahead = j + PREFETCH_AHEAD
                prefetch_row_hot(ptr[ahead], ptr[ahead + 1], idx, lev, widths, offsets, V, accV1, w, accw1, n_hot,
                                 write)
            a, b = ptr[j], ptr[j + 1]
            lin = W0[0] + linear_part_hot(a, b, idx, val, w, n_hot, wh)
            pair, row_top = row_forward_hot(a, b, idx, val, lev, widths, offsets, V, nested, soff, S, T,
                                            Q, R, B, n_hot, stride, Vh)
            y_hat = lin + pair
            row_loss, g = loss_gradient(task, y_hat, lab[j], hyper)
            loss += row_loss
            lr_step, lr_dep = step_rates(method, lr, lr_dep_base, beta1, beta2, step + (j - j0) + 1)
            # gradient coefficients (module notes); a row has no level above row_top,
            # so d_p = 0 for p >= row_top
            n_dep = row_top if nested else 0
            distillation_terms(task, lin, B, 0, n_dep, d)
            g_lin = level_coefficients(g, d, n_dep, m, variant, dep_weight, a_free, a_dep, b_dep, 0)
            if n_dep > 0 and variant != PAPER:
                lr_dep = lr_step
            # bias and linear weights
            step_weight(W0, 0, A0, 0, A0, 1, g_lin + hyper[H_REG0] * W0[0], lr_step * hyper[H_BIAS_ON],
                        beta1, beta2, eps)
            lr_linear = lr_step * hyper[H_LINEAR_ON]
            for k in range(a, b):
                i = idx[k]
                x = val[k] if has_values else np.float32(1.0)
                top = top_level(lev, i, m)
                hot = i < n_hot
                if hot:
                    if not dirty[i]:
                        dirty[i] = True
                        touched[n_touched] = i
                        n_touched += 1
                    step_weight(wh, i, aw1h, i, aw2h, i, g_lin * x + hyper[H_REG1] * wh[i], lr_linear,
                                beta1, beta2, eps)
                else:
                    step_weight(w, i, accw1, i, accw2, i, g_lin * x + hyper[H_REG1] * w[i], lr_linear,
                                beta1, beta2, eps)
                for l in range(top + 1):
                    width = np.uint64(widths[l])
                    so = np.uint64(soff[l])
                    # calls on fixed arrays, not on one chosen array, and cb = 0 a constant where it is
                    if hot:
                        start = np.uint64(i) * np.uint64(stride) + so
                        if nested and l < top:
                            step_factors(Vh, A1h, A2h, start, width, unit, S, T, so, a_dep[l] * x, b_dep[l] * x,
                                         x, reg_v[l], lr_dep, beta1, beta2, eps)
                        else:
                            step_factors(Vh, A1h, A2h, start, width, unit, S, T, so, a_free[l] * x, 0.0,
                                         x, reg_v[l], lr_step, beta1, beta2, eps)
                    else:
                        start = row_start(offsets, widths, l, i)
                        if nested and l < top:
                            step_factors(V, accV1, accV2, start, width, unit, S, T, so, a_dep[l] * x, b_dep[l] * x,
                                         x, reg_v[l], lr_dep, beta1, beta2, eps)
                        else:
                            step_factors(V, accV1, accV2, start, width, unit, S, T, so, a_free[l] * x, 0.0,
                                         x, reg_v[l], lr_step, beta1, beta2, eps)
        return loss, n_touched

    def rows_range(lo, hi, order, step0, data, model, state, hyper, reg_v, task, nested, variant, n_hot,
                   merge_rows, claims, write, buffers):
        """Visit rows order[lo:hi] (with non-empty ``claims``: blocks of ``order`` claimed from the
        workers' counter, kernels/claims.py), updating the model after each; return the summed loss.

        The hot features' (the model's first ``n_hot``) parameters and the bias are stepped in a private replica
        merged into the shared model every ``merge_rows`` rows (:func:`merge_replica`). Rows are
        gathered CHUNK_ROWS at a time and trained by this method's ``train_span`` (:func:`span`,
        inlined) between merges. ``write``: prefetch rows for writing (forward.prefetch_write).
        ``buffers``: :func:`replica_buffers`' (this loop allocates nothing).
        """
        indptr, indices, values, labels = data
        lev, widths, offsets = model[0], model[1], model[2]
        scratch, ptr, idx, val, lab, replica, dirty, touched = buffers
        soff = scratch[0]
        n_touched = np.int64(0)  # not a literal 0: merge_replica would compile once more for it
        loss = 0.0
        visited = 0  # rows this worker has visited (a merge every merge_rows of them)
        block_lo, block_hi = next_block(claims, lo, hi, order.shape[0], False, BLOCK_ROWS)
        pos, stop = block_lo, block_lo
        while pos < block_hi:
            if visited > 0 and visited % merge_rows == 0:
                merge_replica(touched, n_touched, lev, widths, offsets, soff, model, state, replica)
                for k in range(n_touched):
                    dirty[touched[k]] = False
                n_touched = np.int64(0)
            j, stop, n, gather = next_span(pos, block_lo, block_hi, stop, visited, merge_rows)
            if gather:
                gather_rows(order, pos, stop, indptr, indices, values, labels, ptr, idx, val, lab, np.int64(0),
                            np.int64(0))  # ids unchanged: the span tests i < n_hot itself
            loss, n_touched = train_span(j, j + n, j + stop - pos, step0 + pos, ptr, idx, val, lab, model, state,
                                         hyper, reg_v, task, nested, variant, n_hot, replica, scratch, dirty,
                                         touched, n_touched, write, loss)
            visited += n
            pos += n
            if pos == block_hi:  # the block is done: claim the next
                block_lo, block_hi = next_block(claims, lo, hi, order.shape[0], True, BLOCK_ROWS)
                pos = block_lo
        merge_replica(touched, n_touched, lev, widths, offsets, soff, model, state, replica)
        return loss

    # inlined, not called: see kernels/sgd.py (a compiling run and a cached one rounded differently)
    options = dict(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
    jitted_span = njit(**options, inline="always")(with_steps(method, span))  # rows_range's global train_span
    loop = njit(**options, nogil=True)(with_steps(method, rows_range, train_span=jitted_span))

    def worker(lo, hi, order, step0, data, model, state, hyper, reg_v, task, nested, variant, n_hot,
               merge_rows, claims, write):
        """:func:`rows_range` with this worker's buffers made first."""
        buffers = replica_buffers(data, model, state, n_hot)
        return loop(lo, hi, order, step0, data, model, state, hyper, reg_v, task, nested, variant, n_hot,
                    merge_rows, claims, write, buffers)

    return worker


@njit(cache=True, nogil=True)
def replica_buffers(data, model, state, n_hot):
    """A replica-aware worker's arrays: span_scratch, chunk_buffers, its replica
    (:func:`new_replica`), and the dirty flags and the touched list of its hot features."""
    scratch = span_scratch(model[1])
    replica = new_replica(n_hot, model[0], model[1], model[2], scratch[0], model, state)
    return (scratch, *chunk_buffers(data[0], data[1], data[2]), replica, np.zeros(n_hot, dtype=np.bool_),
            np.empty(n_hot, dtype=np.int32))


_WORKERS = {method: _make_trainer(method) for method in (SGD, ADAGRAD, ADAM, ROWWISE)}


class SpareRows(NamedTuple):
    """The epoch kernels' (lev, widths, offsets, V, w) and (accV1, accV2, accw1, accw2, acc0)
    with spare rows for ``n_threads`` workers' ``n_hot`` replica rows after the model's own
    (:func:`spare_rows`), and that state as views of its first rows (the model's own)."""

    model: tuple
    state: tuple
    views: tuple
    n_threads: int
    n_hot: int


SPARE_MAX_BYTES = 1 << 26  # larger FM factors (with their spare rows) are not copied
WRITE_PREFETCH_BYTES = 1 << 23  # factors and optimizer state up to this size are prefetched for writing: they
# live in the cores' caches, where a read hint leaves the store waiting for the other core's copy (fields set:
# a gain); larger ones come from memory, where a write hint costs (the 1M-row set, forward.prefetch_write)


def spare_fits(model, n_threads, n_hot):
    """Whether ``model`` trains on spare rows (:func:`spare_rows`): one level (FM, or RaFM and
    DiFacto with one rank) and factors that with ``n_threads`` x ``n_hot`` spare rows take at most
    SPARE_MAX_BYTES (the copy would raise peak memory; on a large vocabulary few rows are hot,
    and plain Hogwild scales: :func:`train_epoch`)."""
    rows = model.V.shape[0] // int(model.widths[0]) + n_threads * n_hot
    return len(model.ranks) == 1 and rows * int(model.widths[0]) * model.V.itemsize <= SPARE_MAX_BYTES


def spare_rows(model, state, n_threads, n_hot):
    """Arrays with room for ``n_threads`` x ``n_hot`` replica rows after ``model``'s factors,
    weights and optimizer ``state`` (one copy) when :func:`spare_fits`; the model's V and w
    then view their first rows. Returns :class:`SpareRows`, or None."""
    from rafmcli.model.layout import aligned_zeros

    if not spare_fits(model, n_threads, n_hot):
        return None
    spare, width = n_threads * n_hot, int(model.widths[0])

    def grow(a, width):
        if not a.shape[0]:
            return a, a
        full = aligned_zeros(a.shape[0] + spare * width, a.dtype)
        full[:a.shape[0]] = a
        return full, full[:a.shape[0]]

    V, model.V = grow(model.V, width)
    w, model.w = grow(model.w, 1)
    grown = [grow(a, width if a.shape[0] == model.V.shape[0] else 1) for a in state[:2]]  # 1: row-wise AdaGrad
    grown += [grow(a, 1) for a in state[2:4]]
    kmodel = (*model.kernel_model()[:3], V, w)
    return SpareRows(kmodel, tuple(g[0] for g in grown) + (state[4],), tuple(g[1] for g in grown) + (state[4],),
                     n_threads, n_hot)


def replicates(model, spare):
    """Whether Hogwild workers keep replicas of hot features: RaFM and DiFacto (``model``'s
    levels), and FM with ``spare`` rows; an FM too large for them trains plain Hogwild."""
    return spare is not None or model[1].shape[0] > 1


def hot_features(model, counts, n_rows, n_threads):
    """The internal ids of the features ``n_threads`` workers will replicate, most frequent first:
    those in at least HOT_SHARE of the ``n_rows`` rows (SPARE_HOT_SHARE on spare rows; ``counts``:
    each feature's occurrences), at most MAX_HOT, among the top level's features (the first:
    levels are non-increasing), whose rows are in every level block. None for plain Hogwild
    (an FM too large for spare rows)."""
    levels, counts = np.asarray(model.levels), np.asarray(counts)
    top = int(np.count_nonzero(levels == levels[0])) if levels.shape[0] else 0
    share = SPARE_HOT_SHARE if len(model.ranks) == 1 else HOT_SHARE
    ids = np.flatnonzero(counts[:top] >= max(1, int(np.ceil(share * n_rows))))
    hot = ids[np.argsort(-counts[ids], kind="stable")][:MAX_HOT]
    if len(model.ranks) == 1 and not spare_fits(model, n_threads, hot.shape[0]):
        return None
    return hot


def train_epoch(order, n_threads, step0, data, model, state, hyper, reg_v, task, nested, variant, method,
                spare=None, n_hot=0, merge_rows=MERGE_ROWS):
    """One pass with ``n_threads`` lock-free workers (Python threads, :func:`rafmcli.threads.spread`)
    that claim blocks of ``order`` as they go (kernels/claims.py: a slow core takes fewer);
    returns the summed loss.

    Where workers keep replicas (:func:`replicates`), each steps the hot features (the model's
    first ``n_hot``: solvers/sgd.py numbers them first, :func:`hot_features`) in its replica,
    merged every ``merge_rows`` rows (fewer on small data).
    ``spare``: :func:`spare_rows`' arrays for ``model`` and ``state`` (FM), whose workers then
    run kernels.sgd's row loop. Workers prefetch the rows they step for writing when the factors
    and their optimizer state take at most WRITE_PREFETCH_BYTES (forward.prefetch_write; a
    merge's prefetches are for writing whatever the size, :func:`_prefetch_shared`).
    """
    from rafmcli.threads import spread

    n_features = model[4].shape[0]
    made_for = (n_threads, n_hot) if spare is None else (spare.n_threads, spare.n_hot)
    if not 0 <= n_hot <= n_features or made_for != (n_threads, n_hot):  # the kernels index replicas unchecked
        raise ValueError(f"{n_hot} hot features on {n_threads} threads for a model of {n_features} features "
                         f"with spare rows for {made_for[1]} on {made_for[0]}")
    # on small data, workers would otherwise not see each other's hot features for much of an epoch
    merge_rows = max(1, min(merge_rows, order.shape[0] // (MIN_MERGES * n_threads)))
    claims = np.zeros(1, dtype=np.int64)  # the next block of rows a worker may claim (kernels/claims.py)
    write = model[3].nbytes + state[0].nbytes + state[1].nbytes <= WRITE_PREFETCH_BYTES
    if not replicates(model, spare):  # plain Hogwild
        unused = no_replicas()  # but each worker's bias is its own, merged every merge_rows rows
        replicas = unused._replace(n_threads=n_threads, merge_rows=merge_rows, claims=claims, write_prefetch=write)
        return float(sum(spread(_TRAINERS[method], order.shape[0], order, step0, data, model, state, hyper, reg_v,
                                task, nested, variant, replicas, threads=n_threads)))
    if spare is not None:
        spare_model = (*spare.model, model[5])  # the bias array the caller reads
        replicas = Replicas(n_hot, n_features, n_threads, merge_rows, claims, write)
        losses = spread(_TRAINERS[method], order.shape[0], order, step0, data, spare_model, spare.state,
                        hyper, reg_v, task, nested, variant, replicas, threads=n_threads)
    else:
        losses = spread(_WORKERS[method], order.shape[0], order, step0, data, model, state, hyper, reg_v,
                        task, nested, variant, n_hot, merge_rows, claims, write, threads=n_threads)
    return float(sum(losses))
