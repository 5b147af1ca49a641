"""One epoch of implicit (positives-only) training: Feat2Vec negative sampling (numba).

For each positive row x+ (its group values ``row_values[r]``): draw ONE group
g (probability proportional to c_g^alpha1), then K values of g from Q2
(:mod:`rafmcli.kernels.sampling`); negative k is x+ with g's value replaced
by value k. All K+1 rows share the context (every group but g), so the
context's sums S_l, T_l, Q_l, R_l (Theorem 3) are computed once and each row
adds only its own value's features: with n_c context features and values of
n_g features, a positive with K negatives visits n_c + (K+1) n_g features
(forward and update each), not (K+1)(n_c + n_g).

Losses on the scores y_j (j = 0 the positive), with s_j = y_j - log(K Q2(v_j))
under the NCE correction (Feat2Vec's p(y=1|x) = e^y / (e^y + K Q2(x_g))) and
s_j = y_j without it (word2vec's negative sampling):

* logistic: -log sigma(s_0) - Sum_k log sigma(-s_k); dL/dy_0 = sigma(s_0) - 1,
  dL/dy_k = sigma(s_k).
* softmax: LSE(0, s_1 - s_0, ..., s_K - s_0) = LSE(s) - s_0; dL/dy_j = softmax(s)_j - [j = 0].

Each row j gives its factors the usual gradients (rafm-notes, "Gradients of
B_{1,p}"): a_j x (S^j_l - v x) + b_j x (S^j_l - T^j_l). A context feature
is in every row, so its gradient is the sum over j, which is one step with
x (Sum_j a_j S^j_l + Sum_j b_j (S^j_l - T^j_l)) - (Sum_j a_j) v x^2: the
per-level sums are formed once per positive, then every context feature
steps once. Each row's coefficients (a_j, b_j, per RaFM variant) and the
optimizer steps are those of :mod:`rafmcli.kernels.sgd`.

L2 (rafm-notes, "Regularisation") steps each context feature once per
positive and each value feature once per scored row it is in (the default,
conf[C_REG_NEGATIVES] = 1), or, with conf[C_REG_NEGATIVES] = 0
(--no-regular-negatives), only in the positive row: a feature is then
regularised as often as the data has it, whatever --negatives and Q2 are,
instead of also each time noise draws it (a rare item K Q2 / count times its
count; a genre, which nearly every item has, up to K+1 times per positive
while its gradients over the rows that share it cancel).

numba caches this file's kernels keyed by this file only: after editing
kernels/__init__.py, sgd.py, forward.py, sampling.py or claims.py, clear ``__pycache__`` (the
tests compile into a cache named after all sources).
"""

import numpy as np
from numba import njit

from rafmcli.kernels import NO_REFCOUNT
from rafmcli.kernels.claims import BLOCK_ROWS, next_block
from rafmcli.kernels.forward import FAST, level_offsets, pairwise_from_sums, row_start, row_unit, top_level
from rafmcli.kernels.sampling import draw_alias, draw_values
from rafmcli.kernels.sgd import (
    ADAGRAD,
    ADAM,
    GRADIENT,
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
    ROWWISE,
    SGD,
    TASK_CLASSIFICATION,
    distillation_terms,
    level_coefficients,
    step_factors,
    step_weight,
    train_span,
    with_steps,
)

ZERO = np.int64(0)  # an offset typed int64 as the others (a literal 0 compiles add_sums again)
LOGISTIC = 0  # the values of ranking.LOSSES
SOFTMAX = 1

# slots of the integer configuration vector
C_NEGATIVES, C_LOSS, C_NCE, C_NESTED, C_VARIANT, C_TRIES, C_REG_NEGATIVES = range(7)
N_CONF = 7


@njit(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
def add_sums(a, b, feat, xs, lev, widths, offsets, V, nested, soff, S, T, so, Q, R, qo):
    """Add features feat[a:b] (values xs) to one row's sums: S, T at offset ``so``,
    Q, R at ``qo`` (the accumulation half of ``forward.row_forward``)."""
    m = widths.shape[0]
    for k in range(a, b):
        i = feat[k]
        x = xs[k]
        top = top_level(lev, i, m)
        for l in range(top + 1):
            start = row_start(offsets, widths, l, i)
            o = np.uint64(so + soff[l])
            q = np.float32(0.0)
            if nested and l < top:
                for f in range(np.uint64(widths[l])):
                    vx = V[start + f] * x
                    S[o + f] += vx
                    T[o + f] += vx
                    q += vx * vx
                R[qo + l] += q
            else:
                for f in range(np.uint64(widths[l])):
                    vx = V[start + f] * x
                    S[o + f] += vx
                    q += vx * vx
            Q[qo + l] += q



@njit(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
def linear_sum(a, b, feat, xs, w):
    s = 0.0
    for k in range(a, b):
        s += w[feat[k]] * xs[k]
    return s


@njit(cache=True, error_model="numpy", **NO_REFCOUNT)
def row_gradients(y, shift, K, loss_kind, grad):
    """Loss of one positive (j = 0) and its K negatives on s_j = y_j - shift_j;
    fills grad[j] = dL/dy_j (module notes).

    The softmax's sum of exponentials has a loop of its own that stores nothing. In the
    loop that writes grad, a vectorised sum (fastmath callers) sits behind LLVM's run-time
    check that grad lies far enough from y and shift; the check's outcome, and with it the
    order of the sum, then depends on where the arrays were allocated, and two identical
    runs differed in the last bits."""
    loss = 0.0
    if loss_kind == LOGISTIC:
        for j in range(K + 1):
            s = y[j] - shift[j]
            z = -s if j == 0 else s  # loss log(1 + e^z), dL/ds = sign * sigmoid(z)
            e = np.exp(-abs(z))
            loss += max(z, 0.0) + np.log1p(e)
            p = 1.0 / (1.0 + e) if z >= 0 else e / (1.0 + e)
            grad[j] = -p if j == 0 else p
    else:
        top = -np.inf
        for j in range(K + 1):
            top = max(top, y[j] - shift[j])
        for j in range(K + 1):
            grad[j] = np.exp(y[j] - shift[j] - top)
        z = 0.0
        for j in range(K + 1):
            z += grad[j]
        loss = np.log(z) + top - (y[0] - shift[0])
        for j in range(K + 1):
            grad[j] /= z
        grad[0] -= 1.0
    return loss


@njit(cache=True, error_model="numpy")
def sampled_losses(y, shift, loss_kind):
    """Per-positive loss of rows y[n, K+1] (column 0 the positive), shifts as y."""
    n, K = y.shape[0], y.shape[1] - 1
    out = np.empty(n)
    grad = np.empty(K + 1)
    for r in range(n):
        out[r] = row_gradients(y[r], shift[r], K, loss_kind, grad)
    return out


def _make_trainers(method):
    """The epoch kernel over a range of positives with the optimizer ``method`` fixed (as kernels/sgd.py).

    Callers use it directly: a jitted wrapper closing over it would get a new numba cache key in
    every process (the key hashes the closure's pickled dispatcher) and compile on every run.
    """

    def span(pos0, pos1, order, step0, rows, vocab, noise, model, state, hyper, reg_v, conf, rng, t, forced,
             scratch, loss):
        """Train on positives order[pos0:pos1] (:func:`train_positives`); returns ``loss`` plus
        theirs. Without reference counts (kernels.NO_REFCOUNT); ``scratch`` from train_positives."""
        row_values = rows
        vptr, vfeat, vx = vocab
        group_ptr, group_prob, group_alias, value_prob, value_alias, logq, table = noise
        lev, widths, offsets, V, w, w0 = model
        accV1, accV2, accw1, accw2, acc0 = state
        (soff, S, T, Q, R, B, y, lin, grad, grad_lin, shift, vals, a_free, a_dep, b_dep, d, sum_free, sum_dep,
         coef_free, coef_dep) = scratch
        K, loss_kind, nce = conf[C_NEGATIVES], conf[C_LOSS], conf[C_NCE]
        nested, variant, tries = conf[C_NESTED] != 0, conf[C_VARIANT], conf[C_TRIES]
        reg_negatives = np.float64(conf[C_REG_NEGATIVES] != 0)
        G = row_values.shape[1]
        m = widths.shape[0]
        W = soff[m]
        unit = row_unit(widths)
        log_k = np.log(K)
        n_dep = m - 1 if nested else 0  # dependent levels: a row's own may be fewer (then d_p = 0 above it)
        beta1, beta2, eps = hyper[H_BETA1], hyper[H_BETA2], hyper[H_EPS]
        lr, lr_dep_base, dep_weight = hyper[H_LR], hyper[H_LR_DEP], hyper[H_DEP_WEIGHT]
        for pos in range(pos0, pos1):
            r = order[pos]
            if forced.shape[0]:
                g = forced[pos, 0]
                for j in range(K + 1):
                    vals[j] = forced[pos, j + 1]
            else:
                g = draw_alias(0, G, group_prob, group_alias, rng, t)
                draw_values(r, g, row_values, group_ptr, value_prob, value_alias, table, tries, K, vals,
                            rng, t)
            # the context's sums, then each row's
            S[:W] = 0.0
            T[:W] = 0.0
            Q[:m] = 0.0
            R[:m] = 0.0
            lin_ctx = w0[0]
            for h in range(G):
                if h != g:
                    u = row_values[r, h]
                    add_sums(vptr[u], vptr[u + 1], vfeat, vx, lev, widths, offsets, V, nested, soff,
                             S, T, ZERO, Q, R, ZERO)
                    lin_ctx += linear_sum(vptr[u], vptr[u + 1], vfeat, vx, w)
            for j in range(K + 1):
                so, qo = (j + 1) * W, (j + 1) * m
                for f in range(W):  # loops: numba's slice-from-array assignment takes seconds to compile
                    S[so + f] = S[f]
                    T[so + f] = T[f]
                for l in range(m):
                    Q[qo + l] = Q[l]
                    R[qo + l] = R[l]
                u = vals[j]
                add_sums(vptr[u], vptr[u + 1], vfeat, vx, lev, widths, offsets, V, nested, soff,
                         S, T, so, Q, R, qo)
                lin[j] = lin_ctx + linear_sum(vptr[u], vptr[u + 1], vfeat, vx, w)
                y[j] = lin[j] + pairwise_from_sums(S, T, so, Q, R, qo, soff, nested, B, j * m, m - 1)
            for j in range(K + 1):
                shift[j] = logq[vals[j]] + log_k if nce else 0.0
            loss += row_gradients(y, shift, K, loss_kind, grad)
            lr_step, lr_dep = lr, lr_dep_base
            if method == ADAM:
                step = step0 + pos + 1
                corr = np.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)
                lr_step, lr_dep = lr * corr, lr_dep_base * corr
            if n_dep > 0 and variant != PAPER:
                lr_dep = lr_step
            g_lin = 0.0
            for j in range(K + 1):  # each row's coefficients, as the explicit kernel's
                distillation_terms(TASK_CLASSIFICATION, lin[j], B, j * m, n_dep, d)
                grad_lin[j] = level_coefficients(grad[j], d, n_dep, m, variant, dep_weight, a_free, a_dep,
                                                 b_dep, j * m)
                g_lin += grad_lin[j]
            # per-level sums over the rows for the context features
            sum_free[:] = 0.0
            sum_dep[:] = 0.0
            for l in range(m):
                coef_free[l] = 0.0
                coef_dep[l] = 0.0
                for j in range(K + 1):
                    af = np.float32(a_free[j * m + l])
                    ad = np.float32(a_dep[j * m + l])
                    bd = np.float32(b_dep[j * m + l])
                    coef_free[l] += a_free[j * m + l]
                    coef_dep[l] += a_dep[j * m + l]
                    so = (j + 1) * W
                    for f in range(soff[l], soff[l + 1]):
                        s = S[so + f]
                        sum_free[f] += af * s
                        sum_dep[f] += ad * s + bd * (s - T[so + f])
            step_weight(w0, 0, acc0, 0, acc0, 1, g_lin + hyper[H_REG0] * w0[0], lr_step * hyper[H_BIAS_ON],
                        beta1, beta2, eps)
            lr_linear = lr_step * hyper[H_LINEAR_ON]
            for h in range(G):
                if h == g:
                    continue
                u = row_values[r, h]
                for k in range(vptr[u], vptr[u + 1]):
                    i = vfeat[k]
                    x = vx[k]
                    step_weight(w, i, accw1, i, accw2, i, g_lin * x + hyper[H_REG1] * w[i], lr_linear,
                                beta1, beta2, eps)
                    top = top_level(lev, i, m)
                    for l in range(top + 1):
                        # gradient x (sum_l - coef_l v x) + reg v: step_factors with ca = x,
                        # cb = 0 and coef_l x in the place of x
                        dependent = nested and l < top
                        sums = sum_dep if dependent else sum_free
                        coef = coef_dep[l] if dependent else coef_free[l]
                        step_factors(V, accV1, accV2, row_start(offsets, widths, l, i), np.uint64(widths[l]), unit,
                                     sums, sums, np.uint64(soff[l]), x, 0.0, coef * x, reg_v[l],
                                     lr_dep if dependent else lr_step, beta1, beta2, eps)
            for j in range(K + 1):
                u = vals[j]
                observed = 1.0 if j == 0 else reg_negatives  # L2 in this row (module notes)
                for k in range(vptr[u], vptr[u + 1]):
                    i = vfeat[k]
                    x = vx[k]
                    step_weight(w, i, accw1, i, accw2, i, grad_lin[j] * x + observed * hyper[H_REG1] * w[i], lr_linear,
                                beta1, beta2, eps)
                    top = top_level(lev, i, m)
                    for l in range(top + 1):
                        c = j * m + l
                        dependent = nested and l < top
                        step_factors(V, accV1, accV2, row_start(offsets, widths, l, i), np.uint64(widths[l]), unit,
                                     S, T, np.uint64((j + 1) * W + soff[l]),
                                     (a_dep[c] if dependent else a_free[c]) * x,
                                     b_dep[c] * x if dependent else 0.0, x, observed * reg_v[l],
                                     lr_dep if dependent else lr_step, beta1, beta2, eps)
        return loss

    def train_positives(order, lo, hi, step0, rows, vocab, noise, model, state, hyper, reg_v, conf,
                        rng, t, forced, claims, scratch):
        """Positives order[lo:hi] (with non-empty ``claims``: blocks of ``order`` claimed from the
        workers' counter, kernels/claims.py), each with its K negatives; returns the summed loss.
        order[pos] is optimizer step step0 + pos + 1. Each block's positives are trained by this
        method's ``train_span`` (:func:`span`, inlined); ``scratch``: :func:`positive_scratch`'s.

        ``forced`` (tests): a [n, K+2] array of (group, values...) to use instead
        of drawing; empty to draw.
        """
        loss = 0.0
        block_lo, block_hi = next_block(claims, lo, hi, order.shape[0], False, BLOCK_ROWS)
        while block_lo < block_hi:
            loss = train_span(block_lo, block_hi, order, step0, rows, vocab, noise, model, state, hyper, reg_v, conf,
                              rng, t, forced, scratch, loss)
            block_lo, block_hi = next_block(claims, lo, hi, order.shape[0], True, BLOCK_ROWS)
        return loss

    # inlined, not called: see kernels/sgd.py (a compiling run and a cached one rounded differently)
    options = dict(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
    jitted_span = njit(**options, inline="always")(with_steps(method, span))  # train_positives' global train_span
    loop = njit(**options, nogil=True)(with_steps(method, train_positives, train_span=jitted_span))

    def trainer(order, lo, hi, step0, rows, vocab, noise, model, state, hyper, reg_v, conf, rng, t, forced, claims):
        """:func:`train_positives` with its scratch made first."""
        return loop(order, lo, hi, step0, rows, vocab, noise, model, state, hyper, reg_v, conf, rng, t, forced, claims,
                    positive_scratch(model[1], conf[C_NEGATIVES]))

    return trainer


@njit(cache=True, nogil=True)
def positive_scratch(widths, K):
    """A worker's scratch for :func:`_make_trainers`' span: soff and, for the context (slot 0)
    and each of the K + 1 rows, S, T, Q, R, B and the rows' coefficients."""
    m = widths.shape[0]
    soff = level_offsets(widths)
    W = soff[m]
    n_slots = K + 2  # slot 0: the context; slot j + 1: row j
    return (soff, np.empty(n_slots * W, dtype=np.float32), np.empty(n_slots * W, dtype=np.float32),  # S, T
            np.empty(n_slots * m), np.empty(n_slots * m), np.empty((K + 1) * m),  # Q, R, B
            np.empty(K + 1), np.empty(K + 1), np.empty(K + 1),  # y, lin, grad
            np.empty(K + 1),  # grad_lin: each row's bias/linear coefficient (the authors' rule adds c Sum d_p)
            np.empty(K + 1), np.empty(K + 1, dtype=np.int64),  # shift, vals
            np.empty((K + 1) * m), np.zeros((K + 1) * m), np.zeros((K + 1) * m),  # a_free, a_dep, b_dep
            np.zeros(m),  # d (a_dep, b_dep stay 0 at and above n_dep)
            np.empty(W, dtype=np.float32),  # sum_free: Sum_j a_free_j S^j
            np.empty(W, dtype=np.float32),  # sum_dep: Sum_j a_dep_j S^j + b_dep_j (S^j - T^j)
            np.empty(m), np.empty(m))  # coef_free, coef_dep


_TRAINERS = {method: _make_trainers(method) for method in (SGD, ADAGRAD, ADAM, GRADIENT, ROWWISE)}
NO_FORCING = np.empty((0, 0), dtype=np.int64)


def train_epoch(order, step0, rows, vocab, noise, model, state, hyper, reg_v, conf, rng, method,
                forced=NO_FORCING):
    """One pass over the positives ``order`` on one thread (stream rng[0]); returns the summed loss."""
    return _TRAINERS[method](order, 0, order.shape[0], step0, rows, vocab, noise, model, state, hyper,
                             reg_v, conf, rng, 0, forced, np.empty(0, dtype=np.int64))


def _workers(t_lo, t_hi, order, n_threads, step0, rows, vocab, noise, model, state, hyper, reg_v, conf, rng,
             kernel, claims):
    """Workers t_lo..t_hi-1 of :func:`train_epoch_hogwild`, worker t drawing from stream rng[t] and
    claiming blocks of ``order`` from ``claims``."""
    n, loss = order.shape[0], 0.0
    for t in range(t_lo, t_hi):
        lo, hi = t * n // n_threads, (t + 1) * n // n_threads
        loss += kernel(order, lo, hi, step0, rows, vocab, noise, model, state, hyper, reg_v, conf, rng, t,
                       NO_FORCING, claims)
    return loss


def train_epoch_hogwild(order, n_threads, step0, rows, vocab, noise, model, state, hyper, reg_v, conf,
                        rng, method):
    """One pass with ``n_threads`` lock-free workers (Python threads, :func:`rafmcli.threads.spread`)
    that claim blocks of ``order`` as they go, worker t drawing from stream rng[t]."""
    from rafmcli.threads import spread

    claims = np.zeros(1, dtype=np.int64)
    return float(sum(spread(_workers, n_threads, order, n_threads, step0, rows, vocab, noise, model, state,
                            hyper, reg_v, conf, rng, _TRAINERS[method], claims, threads=n_threads)))
