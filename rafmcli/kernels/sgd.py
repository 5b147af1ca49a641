"""One training epoch of FM, RaFM or DiFacto with SGD, AdaGrad or Adam (numba).

Each row: the Theorem 3 forward pass (:mod:`rafmcli.kernels.forward`), then
bias, linear and factor steps. With g = dL/dy_hat of the main loss and
d_p = L'(B_{1,p}, B_{1,p+1}) (regression B_{1,p} - B_{1,p+1}; classification
sigma(lin + B_{1,p}) - sigma(lin + B_{1,p+1})), every factor gradient has the
form  ca x (S_l - v x) + cb x (S_l - T_l) + reg v  (rafm-notes, "Gradients of
B_{1,p}"), and the bias and linear weights step on g_lin (times x):

=========  ==========================  ===========================  ===========
variant    free v_i^(k_i): ca          dependent v_i^(l), l < k_i    g_lin
=========  ==========================  ===========================  ===========
paper      g                           ca = d_l, cb = 0 (rate rho_d) g
authors    g                           ca = c d_l, cb = g            g + c Sum d_p
cascade    g + c Sum_{q>=k_i} d_q      ca = c d_l,                   g
                                       cb = g + c Sum_{q>l} d_q
=========  ==========================  ===========================  ===========

* paper: Algorithm 1; dependent variables step on L(B_{1,l}, B_{1,l+1}) with
  their own rate rho_d.
* authors: the authors' TensorFlow code (RaFM.py): one optimizer on
  main loss + c Sum_p L(B_{1,p}, stopgrad B_{1,p+1}), where inside B_{1,p}
  the levels below p and the free variables of level p are under
  stop-gradient too.
* cascade: the same objective with the gradient through every level of
  B_{1,p} (no inner stop-gradients), bias and linear weights on g only.

FM and DiFacto have free variables only. L2 (``reg``) is applied to the
parameters a row touches. Kernels are free of I/O; tunables arrive as
arguments (numba freezes globals).
"""

from types import FunctionType

import numpy as np
from numba import njit

from rafmcli.kernels import NO_REFCOUNT
from rafmcli.kernels.claims import BLOCK_ROWS, next_block
from rafmcli.kernels.forward import (
    FAST,
    as_read_only,
    linear_part,
    prefetch,
    prefetch_row,
    row_forward,
    row_scratch,
    row_start,
    row_unit,
    sigmoid,
    top_level,
)
from rafmcli.kernels.replicas import first_row as replicas_first_row
from rafmcli.kernels.replicas import merge as merge_copies
from rafmcli.kernels.replicas import none as no_replicas
from rafmcli.kernels.replicas import open_copies

TASK_REGRESSION = 0
TASK_CLASSIFICATION = 1

SGD = 0
ADAGRAD = 1
ADAM = 2
GRADIENT = 3  # store the gradient in acc1 instead of stepping (the implicit trainer's tests)
ROWWISE = 4  # row-wise AdaGrad: one sum of squared gradients a factor row (forward.row_unit)

PAPER = 0  # Algorithm 1: dependent variables step on L(B_{1,p}, B_{1,p+1}) at rate rho_d
AUTHORS = 1  # the authors' code: main loss + c Sum_p L(B_{1,p}, stopgrad B_{1,p+1}), inner stop-gradients
CASCADE = 2  # the same objective, gradient through every level of B_{1,p}

# hyper-parameter vector slots
(H_LR, H_LR_DEP, H_REG0, H_REG1, H_DEP_WEIGHT, H_BETA1, H_BETA2, H_EPS, H_YMIN, H_YMAX,
 H_BIAS_ON, H_LINEAR_ON) = range(12)
N_HYPER = 12

CHUNK_ROWS = 256  # rows gathered into a contiguous buffer at a time while training
PREFETCH_AHEAD = 2  # rows between prefetching a row's factors and training on it
GATHER_AHEAD = 8  # rows the gather prefetches ahead (twice that for indptr and labels)


def _make_steps(method):
    """``method``'s (step_weight, step_factors), ``method`` a closure constant (:func:`with_steps`)."""

    @njit(error_model="numpy", inline="always")
    def step_weight(p, j, a1, j1, a2, j2, grad, lr, beta1, beta2, eps):
        """One optimizer step on p[j] with state a1[j1], a2[j2] (lazy: only what a row touches)."""
        if method == SGD:
            p[j] -= lr * grad
        elif method == ADAGRAD or method == ROWWISE:  # a weight is a row of one
            a1[j1] += grad * grad
            p[j] -= lr * grad / (np.sqrt(a1[j1]) + eps)
        elif method == ADAM:
            a1[j1] = beta1 * a1[j1] + (1.0 - beta1) * grad
            a2[j2] = beta2 * a2[j2] + (1.0 - beta2) * grad * grad
            p[j] -= lr * a1[j1] / (np.sqrt(a2[j2]) + eps)
        else:
            a1[j1] += grad

    @njit(error_model="numpy", fastmath=FAST, inline="always")
    def step_factors(V, a1, a2, start, width, unit, S, T, so, ca, cb, x, reg, lr, beta1, beta2, eps):
        """Step the factor row v = V[start:start+width] (a1, a2: state at the same offsets; row-wise
        AdaGrad's one sum at a1[start // unit], forward.row_unit).

        Gradient ca (S_l - v x) + cb (S_l - T_l) + reg v (module notes), S_l and
        T_l at ``so`` in S and T; one branch-free float32 loop per method so that
        it vectorises 8 wide. Row-wise AdaGrad: G += mean_f g_f^2, v -= lr g / (sqrt(G) + eps),
        in two loops (the sum's loop stores nothing, so no run-time alias check picks its order).
        """
        ca, cb, x, reg = np.float32(ca), np.float32(cb), np.float32(x), np.float32(reg)
        lr, eps = np.float32(lr), np.float32(eps)
        beta1, beta2 = np.float32(beta1), np.float32(beta2)
        one = np.float32(1.0)
        if method == SGD and cb == 0:
            for f in range(width):
                v = V[start + f]
                V[start + f] = v - lr * (ca * (S[so + f] - v * x) + reg * v)
        elif method == SGD:
            for f in range(width):
                v = V[start + f]
                V[start + f] = v - lr * (ca * (S[so + f] - v * x) + cb * (S[so + f] - T[so + f]) + reg * v)
        elif method == ADAGRAD and cb == 0:  # a free variable: no T to read
            for f in range(width):
                v = V[start + f]
                g = ca * (S[so + f] - v * x) + reg * v
                acc = a1[start + f] + g * g
                a1[start + f] = acc
                V[start + f] = v - lr * g / (np.sqrt(acc) + eps)
        elif method == ADAGRAD:
            for f in range(width):
                v = V[start + f]
                g = ca * (S[so + f] - v * x) + cb * (S[so + f] - T[so + f]) + reg * v
                acc = a1[start + f] + g * g
                a1[start + f] = acc
                V[start + f] = v - lr * g / (np.sqrt(acc) + eps)
        elif method == ROWWISE:
            squares = np.float32(0.0)
            if cb == 0:  # a free variable: no T to read
                for f in range(width):
                    g = ca * (S[so + f] - V[start + f] * x) + reg * V[start + f]
                    squares += g * g
            else:
                for f in range(width):
                    g = ca * (S[so + f] - V[start + f] * x) + cb * (S[so + f] - T[so + f]) + reg * V[start + f]
                    squares += g * g
            r = start // unit
            acc = a1[r] + squares / np.float32(width)
            a1[r] = acc
            scale = lr / (np.sqrt(acc) + eps)
            if cb == 0:
                for f in range(width):
                    v = V[start + f]
                    V[start + f] = v - scale * (ca * (S[so + f] - v * x) + reg * v)
            else:
                for f in range(width):
                    v = V[start + f]
                    V[start + f] = v - scale * (ca * (S[so + f] - v * x) + cb * (S[so + f] - T[so + f]) + reg * v)
        elif method == ADAM:
            for f in range(width):
                v = V[start + f]
                g = ca * (S[so + f] - v * x) + cb * (S[so + f] - T[so + f]) + reg * v
                m1 = beta1 * a1[start + f] + (one - beta1) * g
                m2 = beta2 * a2[start + f] + (one - beta2) * g * g
                a1[start + f] = m1
                a2[start + f] = m2
                V[start + f] = v - lr * m1 / (np.sqrt(m2) + eps)
        else:
            for f in range(width):
                v = V[start + f]
                a1[start + f] += ca * (S[so + f] - v * x) + cb * (S[so + f] - T[so + f]) + reg * v

    return step_weight, step_factors


_STEPS = {method: _make_steps(method) for method in (SGD, ADAGRAD, ADAM, GRADIENT, ROWWISE)}


def step_weight(p, j, a1, j1, a2, j2, grad, lr, beta1, beta2, eps):
    """One optimizer step on p[j]: in a trainer made by :func:`with_steps`, its method's own."""
    raise NotImplementedError("a trainer's optimizer step: with_steps gives the method's own")


def step_factors(V, a1, a2, start, width, unit, S, T, so, ca, cb, x, reg, lr, beta1, beta2, eps):
    """Step a factor row: in a trainer made by :func:`with_steps`, its method's own."""
    raise NotImplementedError("a trainer's optimizer step: with_steps gives the method's own")


def train_span(*args):
    """Train on a span of gathered rows: in a row loop made by :func:`with_steps`, its method's own."""
    raise NotImplementedError("a row loop's span: with_steps gives the method's own")


def with_steps(method, kernel, **helpers):
    """``kernel`` (a plain function) whose global names ``step_weight`` and ``step_factors`` are
    ``method``'s own optimizer steps: the same code over a copy of its module's globals.

    Each step holds its method's branch alone, and numba inlines it (inline="always")
    before pruning branches: with every method's branches in one step, each call site
    typed all of them, a third more compile time for Adam's trainer and a sixth more for
    row-wise AdaGrad's (SGD's and AdaGrad's about the same), for the same machine code.
    Globals, not a closure: numba's cache key pickles a closure's contents, and a jitted
    function pickles with a new id in every process, so every run would compile. The key
    does not cover globals, so ``kernel`` must use its closure's ``method`` (the key's only
    difference between methods). The module's globals are copied when the trainers are
    made, below every name they use.

    ``helpers``: more global names bound to this method's own jitted functions (a row loop's
    span of rows, made by this function too). ``kernel`` is then cached under a name of its
    own, ``<name>_m<method>``: numba names a function's cache files after it, and the loop
    around a span need not use ``method`` itself.
    """
    if not helpers and "method" not in kernel.__code__.co_freevars:
        raise ValueError(f"{kernel.__name__} does not use its closure's method: one cache entry for every method")
    scope = dict(kernel.__globals__)
    scope["step_weight"], scope["step_factors"] = _STEPS[method]
    scope.update(helpers)
    made = FunctionType(kernel.__code__, scope, kernel.__name__, kernel.__defaults__, kernel.__closure__)
    if helpers:
        made.__qualname__ = f"{kernel.__qualname__}_m{method}"
    return made


@njit(cache=True, error_model="numpy", inline="always")
def loss_gradient(task, y_hat, label, hyper):
    """(a row's loss, g = dL/dy_hat): squared error of y_hat clipped to the targets' range
    (regression), else log(1 + e^z) with z = -y y_hat and g = -y sigmoid(z), one exp for both."""
    if task == TASK_REGRESSION:
        g = min(max(y_hat, hyper[H_YMIN]), hyper[H_YMAX]) - label
        return g * g, g
    y = 1.0 if label > 0 else -1.0
    z = -y * y_hat
    e = np.exp(-abs(z))
    return max(z, 0.0) + np.log1p(e), -y * (1.0 / (1.0 + e) if z >= 0 else e / (1.0 + e))


@njit(cache=True, error_model="numpy", inline="always")
def step_rates(method, lr, lr_dep, beta1, beta2, t):
    """(free, dependent) learning rates of optimizer step t: Adam's bias correction
    sqrt(1 - beta2^t) / (1 - beta1^t) applied, others as given."""
    if method == ADAM:
        corr = np.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
        return lr * corr, lr_dep * corr
    return lr, lr_dep


@njit(cache=True, error_model="numpy", inline="always")
def distillation_terms(task, lin, B, bo, n_dep, d):
    """d_p = L'(B_{1,p}, B_{1,p+1}) for p < n_dep, B_{1,p+1} at B[bo + p]: B_{1,p} - B_{1,p+1}
    (regression) or sigma(lin + B_{1,p}) - sigma(lin + B_{1,p+1}) (classification, implicit)."""
    for p in range(n_dep):
        if task == TASK_REGRESSION:
            d[p] = B[bo + p] - B[bo + p + 1]
        else:
            d[p] = sigmoid(lin + B[bo + p]) - sigmoid(lin + B[bo + p + 1])


@njit(cache=True, error_model="numpy", inline="always")
def level_coefficients(g, d, n_dep, m, variant, dep_weight, a_free, a_dep, b_dep, o):
    """A row's factor-gradient coefficients (the module's table) at offset ``o``:
    a_free[o + l] for a feature's top level l (every l < m), a_dep[o + l] and
    b_dep[o + l] for its dependent levels l < n_dep (the row's highest level,
    0-based; 0 without dependent levels), from g = dL/dy_hat and d (see
    :func:`distillation_terms`). Returns g_lin, the bias and linear weights' coefficient."""
    g_lin = g
    for p in range(m):
        a_free[o + p] = g
    if variant == PAPER:
        for p in range(n_dep):
            a_dep[o + p] = d[p]
            b_dep[o + p] = 0.0
    elif variant == AUTHORS:
        for p in range(n_dep):
            a_dep[o + p] = dep_weight * d[p]
            b_dep[o + p] = g
            g_lin += dep_weight * d[p]
    elif n_dep > 0:
        tail = 0.0  # Sum_{q >= p} d[q]
        for p in range(n_dep, -1, -1):
            a_free[o + p] = g + dep_weight * tail
            if p < n_dep:
                a_dep[o + p] = dep_weight * d[p]
                b_dep[o + p] = g + dep_weight * (tail - d[p])
            if p > 0:
                tail += d[p - 1]
    return g_lin


@njit(cache=True, inline="always")
def next_span(pos, block_lo, block_hi, stop, visited, merge_rows):
    """Where a worker's row loop trains next, from row ``pos`` of its claimed block
    [block_lo, block_hi): (j, stop, n, gather). Row pos is row j of its gathered chunk of
    CHUNK_ROWS, which ends at ``stop`` (a new chunk when ``gather``: gather it first), and
    the span runs n rows, to the chunk's end or the next merge (every ``merge_rows`` of the
    ``visited`` rows)."""
    j = (pos - block_lo) % CHUNK_ROWS
    gather = j == 0
    if gather:
        stop = min(pos + CHUNK_ROWS, block_hi)
    return j, stop, min(stop - pos, merge_rows - visited % merge_rows), gather


@njit(cache=True, error_model="numpy")
def gather_rows(order, lo, hi, indptr, indices, values, labels, ptr, idx, val, lab, n_hot, first):
    """Copy rows order[lo:hi] into small contiguous buffers (local CSR).

    Training then walks the buffer in order and can prefetch the factors of
    the row PREFETCH_AHEAD on without first waiting for its feature ids. The copy itself
    prefetches GATHER_AHEAD rows ahead: a row's ``indptr`` entries and label
    first, its ids once that ``indptr`` entry has arrived.

    A hot feature (internal id i < ``n_hot``: solvers/sgd.py numbers them first: model/layout.move_to_front)
    becomes ``first + i``, a Hogwild worker's own copy (kernels/replicas.py); ``n_hot`` 0:
    no change. One comparison and a select: with a table of slots (a load a feature) two
    threads ran at 1.59x-1.66x one on bench_threads' fields set, with the comparison at
    1.73x-1.77x (in-process epochs).
    """
    has_values = values.shape[0] > 0
    remapped = n_hot > 0
    n = hi - lo
    nz = 0
    ptr[0] = 0
    for j in range(n):
        if j + 2 * GATHER_AHEAD < n:
            r = order[lo + j + 2 * GATHER_AHEAD]
            prefetch(indptr, r)
            prefetch(labels, r)
        if j + GATHER_AHEAD < n:
            r = order[lo + j + GATHER_AHEAD]
            prefetch(indices, indptr[r])
            prefetch(indices, indptr[r + 1] - 1)
            if has_values:
                prefetch(values, indptr[r])
                prefetch(values, indptr[r + 1] - 1)
        r = order[lo + j]
        a, b = indptr[r], indptr[r + 1]
        for k in range(a, b):
            i = indices[k]
            if remapped:
                i = first + i if i < n_hot else i
            idx[nz] = i
            if has_values:
                val[nz] = values[k]
            nz += 1
        ptr[j + 1] = nz
        lab[j] = labels[r]


@njit(cache=True, nogil=True)
def span_scratch(widths):
    """A worker's scratch for a span of rows: :func:`forward.row_scratch`'s six arrays, the
    coefficients a_free, a_dep, b_dep and d (:func:`level_coefficients`), the row-wise unit."""
    m = widths.shape[0]
    return (*row_scratch(widths), np.empty(m), np.zeros(m), np.zeros(m), np.zeros(m), row_unit(widths))


@njit(cache=True, nogil=True)
def chunk_buffers(indptr, indices, values):
    """A worker's (ptr, idx, val, lab) for :func:`gather_rows`: room for CHUNK_ROWS of the longest row."""
    longest = 0
    for r in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[r + 1] - indptr[r])
    return (np.empty(CHUNK_ROWS + 1, dtype=np.int64), np.empty(CHUNK_ROWS * longest, dtype=indices.dtype),
            np.empty(CHUNK_ROWS * longest if values.shape[0] > 0 else 0, dtype=values.dtype), np.empty(CHUNK_ROWS))


def _make_trainers(method):
    """The row loop with the optimizer ``method`` fixed (one worker's; the serial epoch is one
    worker): a Python function that makes the worker's buffers, then runs the jitted loop.

    The method is a compile-time constant, so the other optimizers' loops are
    pruned: with all of them in one function LLVM vectorised none (SGD ran at
    a fifth of its speed).
    """

    def span(j0, j1, j_end, step, ptr, idx, val, lab, model, state, w0, acc0, hyper, reg_v, task, nested,
             variant, scratch, write, loss):
        """Train on rows j0..j1-1 of a gathered chunk (``ptr``, ``idx``, ``val``, ``lab``; its rows
        end at ``j_end``), row j0 being optimizer step ``step`` + 1; returns ``loss`` plus theirs.

        Without reference counts (kernels.NO_REFCOUNT): the bias and linear steps, and the
        factor steps of every level of every feature, inline. ``scratch``: row_scratch's
        arrays, the coefficients a_free, a_dep, b_dep, d (:func:`level_coefficients`) and the
        row-wise unit, all made by :func:`train_rows`. ``write``: prefetch the rows for writing
        (forward.prefetch_write).
        """
        lev, widths, offsets, V, w, _ = model
        accV1, accV2, accw1, accw2, _ = state
        soff, S, T, Q, R, B, a_free, a_dep, b_dep, d, unit = scratch
        m = widths.shape[0]
        has_values = val.shape[0] > 0
        beta1, beta2, eps = hyper[H_BETA1], hyper[H_BETA2], hyper[H_EPS]
        lr, lr_dep_base = hyper[H_LR], hyper[H_LR_DEP]
        dep_weight = hyper[H_DEP_WEIGHT]
        for j in range(j0, j1):
            if j + PREFETCH_AHEAD < j_end:
                ahead = j + PREFETCH_AHEAD
                prefetch_row(ptr[ahead], ptr[ahead + 1], idx, lev, widths, offsets, V, accV1, w, accw1, write)
            a, b = ptr[j], ptr[j + 1]
            lin = w0[0] + linear_part(a, b, idx, val, w)
            pair, row_top = row_forward(a, b, idx, val, lev, widths, offsets, V, nested, soff, S, T, Q, R, B)
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
            step_weight(w0, 0, acc0, 0, acc0, 1, g_lin + hyper[H_REG0] * w0[0], lr_step * hyper[H_BIAS_ON],
                        beta1, beta2, eps)
            lr_linear = lr_step * hyper[H_LINEAR_ON]
            for k in range(a, b):
                i = idx[k]
                x = val[k] if has_values else np.float32(1.0)
                top = top_level(lev, i, m)
                step_weight(w, i, accw1, i, accw2, i, g_lin * x + hyper[H_REG1] * w[i], lr_linear,
                            beta1, beta2, eps)
                for l in range(top + 1):
                    start = row_start(offsets, widths, l, i)
                    width = np.uint64(widths[l])
                    so = np.uint64(soff[l])
                    if nested and l < top:
                        step_factors(V, accV1, accV2, start, width, unit, S, T, so, a_dep[l] * x,
                                     b_dep[l] * x, x, reg_v[l], lr_dep, beta1, beta2, eps)
                    else:
                        step_factors(V, accV1, accV2, start, width, unit, S, T, so, a_free[l] * x, 0.0,
                                     x, reg_v[l], lr_step, beta1, beta2, eps)
        return loss

    def train_rows(lo, hi, order, step0, data, model, state, hyper, reg_v, task, nested, variant, replicas, buffers):
        """Visit rows order[lo:hi] (with ``replicas``' claims: blocks of ``order`` claimed from the
        workers' counter), updating the model after each; return the summed loss.

        Rows are gathered CHUNK_ROWS at a time and trained by this method's ``train_span``
        (:func:`span`, inlined) between merges. ``replicas`` (kernels/replicas.py): hot features
        and the bias are stepped in this worker's copies, merged every ``merge_rows`` rows and at
        the end. ``buffers``: :func:`worker_buffers`' (this loop allocates nothing).
        """
        indptr, indices, values, labels = data
        n_hot, claims = replicas.n_hot, replicas.claims
        merge_rows, write = replicas.merge_rows, replicas.write_prefetch
        first, base, w0, acc0, scratch, ptr, idx, val, lab = buffers
        ridx, rval = as_read_only(idx), as_read_only(val)  # the row kernels' type for rows (prediction's)
        loss = 0.0
        visited = 0  # rows this worker has visited (a merge every merge_rows of them)
        block_lo, block_hi = next_block(claims, lo, hi, order.shape[0], False, BLOCK_ROWS)
        pos, stop = block_lo, block_lo
        while pos < block_hi:
            if visited > 0 and visited % merge_rows == 0:
                merge_copies(n_hot, first, model, state, w0, acc0, base)
            j, stop, n, gather = next_span(pos, block_lo, block_hi, stop, visited, merge_rows)
            if gather:
                gather_rows(order, pos, stop, indptr, indices, values, labels, ptr, idx, val, lab, n_hot, first)
            loss = train_span(j, j + n, j + stop - pos, step0 + pos, ptr, ridx, rval, lab, model, state, w0, acc0,
                              hyper, reg_v, task, nested, variant, scratch, write, loss)
            visited += n
            pos += n
            if pos == block_hi:  # the block is done: claim the next
                block_lo, block_hi = next_block(claims, lo, hi, order.shape[0], True, BLOCK_ROWS)
                pos = block_lo
        merge_copies(n_hot, first, model, state, w0, acc0, base)
        return loss

    # The span inlines into the loop: a span called as a function of its own ran, in the process
    # that compiled it, a copy compiled apart from the one cached inside the loop, and the two
    # rounded RaFM's SGD steps differently (a compiling run and a cached one differed).
    options = dict(cache=True, error_model="numpy", fastmath=FAST, **NO_REFCOUNT)
    jitted_span = njit(**options, inline="always")(with_steps(method, span))  # train_rows' global train_span
    loop = njit(**options, nogil=True)(with_steps(method, train_rows, train_span=jitted_span))

    def trainer(lo, hi, order, step0, data, model, state, hyper, reg_v, task, nested, variant, replicas):
        """:func:`train_rows` with this worker's buffers made first."""
        buffers = worker_buffers(lo, order.shape[0], data, model, state, replicas)
        return loop(lo, hi, order, step0, data, model, state, hyper, reg_v, task, nested, variant, replicas, buffers)

    return trainer


@njit(cache=True, nogil=True)
def worker_buffers(lo, n_order, data, model, state, replicas):
    """A row loop's arrays for the worker whose range starts at ``lo``: (its first replica row,
    the replicas' base (replicas.open_copies), its bias and bias state, :func:`span_scratch`,
    :func:`chunk_buffers`)."""
    first = replicas_first_row(lo, n_order, replicas)
    base = open_copies(replicas.n_hot, first, model, state)
    w0, acc0 = base[6].copy(), base[7].copy()  # the bias and its state: this worker's copies
    return (first, base, w0, acc0, span_scratch(model[1]), *chunk_buffers(data[0], data[1], data[2]))


_TRAINERS = {method: _make_trainers(method) for method in (SGD, ADAGRAD, ADAM, ROWWISE)}


def train_epoch(order, step0, data, model, state, hyper, reg_v, task, nested, variant, method):
    """One pass over ``order`` on one thread (bit-for-bit reproducible); returns the summed loss.

    Each row: forward (Theorem 3), then bias, linear and factor steps; row
    ``order[pos]`` counts as optimizer step ``step0 + pos + 1`` (Adam's bias correction).
    """
    return _TRAINERS[method](0, order.shape[0], order, step0, data, model, state, hyper, reg_v, task, nested,
                             variant, no_replicas())


def train_epoch_hogwild(order, n_threads, step0, data, model, state, hyper, reg_v, task, nested,
                        variant, method, spare=None, n_hot=0):
    """One pass with ``n_threads`` lock-free workers claiming blocks of ``order`` as they go
    (:mod:`rafmcli.kernels.hogwild`: replicas of the model's first ``n_hot`` features, its hot
    ones; ``spare``: its ``spare_rows`` for FM)."""
    from rafmcli.kernels import hogwild

    return hogwild.train_epoch(order, n_threads, step0, data, model, state, hyper, reg_v, task, nested,
                               variant, method, spare, n_hot)
