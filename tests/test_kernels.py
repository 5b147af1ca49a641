"""Kernels against the pair loop (Eq. 1, 4, 5) and their gradients against finite differences."""

import dataclasses

import numpy as np
import pytest
from naive import pair_loop

from rafmcli.kernels import forward as F
from rafmcli.kernels import sgd as K
from rafmcli.model.layout import build


def random_model(kind, ranks, n_features, rng, stdev=0.3):
    m = len(ranks)
    levels = rng.integers(1, m + 1, n_features)
    model = build(kind, "r", ranks, np.arange(n_features), levels, stdev, rng, 0.3, (-1e9, 1e9))
    model.w[:] = rng.normal(0, 0.5, n_features)
    return model


def random_rows(rng, n_features, n_rows, max_nnz=9):
    indptr, indices, values = [0], [], []
    for _ in range(n_rows):
        k = rng.integers(0, max_nnz + 1)
        indices += list(rng.choice(n_features, k, replace=False))
        values += list(rng.choice([1.0, 0.5, -2.0, 3.25], k) * rng.uniform(0.5, 1.5, k))
        indptr.append(len(indices))
    return (np.array(indptr, np.int64), np.array(indices, np.int32), np.array(values, np.float32))


def naive_score(model, ids, vals, cap=None):
    lin = model.w0 + sum(float(model.w[i]) * v for i, v in zip(ids, vals))
    return lin + pair_loop(model.kind, ids, vals, model.levels, model.ranks, model.V, cap)


def test_fm_hand_example():
    """w0 = .5, w = (1, 2, 3), v = ((1,0), (0,1), (1,1)), x = (1, 2, .5):
    linear 1 + 4 + 1.5 = 6.5; pairs <v0,v1>2 = 0, <v0,v2>.5 = .5, <v1,v2>1 = 1."""
    rng = np.random.default_rng(0)
    model = build("fm", "r", (2,), np.arange(3), np.ones(3), 0.0, rng, 0.5, (-10, 10))
    model.w[:] = [1, 2, 3]
    model.V[:] = [1, 0, 0, 1, 1, 1]
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    out = F.predict_scores(np.array([0, 3]), np.array([0, 1, 2], np.int32),
                           np.array([1, 2, 0.5], np.float32), lev, widths, offsets, V, w, 0.5, True)
    assert out[0] == pytest.approx(8.5)


@pytest.mark.parametrize("kind", ["rafm", "difacto"])
@pytest.mark.parametrize("ranks", [(6,), (2, 5), (2, 3, 7), (1, 2, 4, 8, 16)])
def test_predictions_equal_pair_loop(kind, ranks):
    rng = np.random.default_rng(len(ranks))
    model = random_model(kind, ranks, 40, rng)
    indptr, indices, values = random_rows(rng, 40, 60)
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    for vals in (values, np.empty(0, np.float32)):
        got = F.predict_scores(indptr, indices, vals, lev, widths, offsets, V, w, w0[0], model.nested)
        for r in range(60):
            ids = indices[indptr[r]:indptr[r + 1]]
            x = vals[indptr[r]:indptr[r + 1]] if vals.shape[0] else np.ones(ids.shape[0])
            assert got[r] == pytest.approx(naive_score(model, ids, x), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("kind", ["rafm", "difacto"])
@pytest.mark.parametrize("ranks", [(2, 5), (2, 3, 7), (1, 2, 4, 8, 16)])
def test_truncated_models_equal_capped_pair_loop(kind, ranks):
    """B[p] = B_{1,p+1}: the model with every k_i capped at p+1."""
    rng = np.random.default_rng(7)
    model = random_model(kind, ranks, 30, rng)
    indptr, indices, values = random_rows(rng, 30, 25, max_nnz=12)
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    m = len(ranks)
    soff = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    S, T = np.empty(soff[-1]), np.empty(soff[-1])
    Q, R, B = np.empty(m), np.empty(m), np.empty(m)
    for r in range(25):
        a, b = indptr[r], indptr[r + 1]
        F.row_forward(a, b, indices, values, lev, widths, offsets, V, model.nested, soff, S, T, Q, R, B)
        for p in range(1, m + 1):
            want = pair_loop(kind, indices[a:b], values[a:b], model.levels, ranks, model.V, cap=p)
            assert B[p - 1] == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_one_rank_rafm_and_difacto_are_fm():
    rng = np.random.default_rng(3)
    indptr, indices, values = random_rows(rng, 25, 30)
    outs = []
    for kind in ("fm", "rafm", "difacto"):
        model = random_model(kind, (5,), 25, np.random.default_rng(11))
        lev, widths, offsets, V, w, w0 = model.kernel_model()
        outs.append(F.predict_scores(indptr, indices, values, lev, widths, offsets, V, w, w0[0],
                                     model.nested))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    for r in range(30):
        ids, x = indices[indptr[r]:indptr[r + 1]], values[indptr[r]:indptr[r + 1]]
        assert outs[0][r] == pytest.approx(naive_score(model, ids, x), rel=1e-5, abs=1e-5)


# ---- gradients -------------------------------------------------------------

REG = (0.05, 0.1, 0.2)  # bias, linear, pairwise


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _loss(task, y_hat, y):
    if task == "r":
        return 0.5 * (y_hat - y) ** 2
    s = 1.0 if y > 0 else -1.0
    return np.log1p(np.exp(-s * y_hat))


def _distill(task, a, b, lin):
    """L(B_{1,p}, B_{1,p+1}): square, or cross-entropy against sigmoid(b) as soft label."""
    if task == "r":
        return 0.5 * (a - b) ** 2
    pa, pb = _sigmoid(lin + a), _sigmoid(lin + b)
    return -(pb * np.log(pa) + (1 - pb) * np.log(1 - pa))


def _kernel_gradient(model, ids, vals, y, task, variant):
    """One row through the training kernel in GRADIENT mode: (dw0, dw, dV)."""
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    state = (np.zeros_like(V), np.zeros(0, np.float32), np.zeros_like(w), np.zeros(0, np.float32),
             np.zeros(2))
    hyper = np.zeros(K.N_HYPER)
    hyper[K.H_LR] = hyper[K.H_LR_DEP] = 1.0
    hyper[K.H_REG0], hyper[K.H_REG1] = REG[0], REG[1]
    hyper[K.H_DEP_WEIGHT] = 0.7
    hyper[K.H_YMIN], hyper[K.H_YMAX] = -1e9, 1e9
    hyper[K.H_BIAS_ON] = hyper[K.H_LINEAR_ON] = 1.0
    data = (np.array([0, len(ids)], np.int64), np.asarray(ids, np.int32),
            np.asarray(vals, np.float32), np.array([y], np.float64))
    reg_v = np.full(len(model.ranks), REG[2])
    K.train_epoch(np.zeros(1, np.int64), 0, data, (lev, widths, offsets, V, w, w0), state, hyper,
                  reg_v, 0 if task == "r" else 1, model.nested, variant, K.GRADIENT)
    return state[4][0], state[2], state[0]


def _owner(model, j):
    """(feature, level) of flat factor coordinate j."""
    widths, offsets = model.widths, model.offsets
    level = int(np.searchsorted(offsets, j, side="right"))
    return (j - offsets[level - 1]) // widths[level - 1], level


def _objective(model, ids, vals, y, task, variant, j, targets):
    """What the kernel's step on factor coordinate j descends, in float64.

    FM/DiFacto and free variables under Algorithm 1: the main loss. A
    dependent variable under Algorithm 1: L(B_{1,l}, B_{1,l+1} fixed). Joint
    variant: main loss + c Sum_p L(B_{1,p}, B_{1,p+1} fixed). Plus L2/2 on j.
    """
    feature, level = _owner(model, j)
    lin = model.w0 + sum(float(model.w[i]) * v for i, v in zip(ids, vals))
    m = len(model.ranks)
    reg = 0.5 * REG[2] * float(model.V[j]) ** 2
    main = _loss(task, lin + pair_loop(model.kind, ids, vals, model.levels, model.ranks, model.V), y)
    if model.kind == "difacto" or m == 1:
        return main + reg
    truncated = [pair_loop(model.kind, ids, vals, model.levels, model.ranks, model.V, cap=p)
                 for p in range(1, m)]
    if variant == K.PAPER:
        if level == model.levels[feature]:
            return main + reg
        return _distill(task, truncated[level - 1], targets[level + 1], lin) + reg
    return main + 0.7 * sum(_distill(task, truncated[p - 1], targets[p + 1], lin) for p in range(1, m)) + reg


@pytest.mark.parametrize("task", ["r", "c"])
@pytest.mark.parametrize("kind,ranks,variant", [
    ("fm", (4,), K.PAPER), ("difacto", (2, 3, 5), K.PAPER),
    ("rafm", (2, 4), K.PAPER), ("rafm", (2, 3, 5), K.PAPER),
    ("rafm", (2, 4), K.JOINT), ("rafm", (2, 3, 5), K.JOINT)])
def test_gradients_equal_finite_differences(task, kind, ranks, variant):
    rng = np.random.default_rng(5)
    model = random_model(kind, ranks, 12, rng, stdev=0.5)
    model.V = model.V.astype(np.float64)  # exact perturbations for the oracle
    ids = np.array([0, 3, 5, 8, 11])
    vals = np.array([1.0, 0.5, -1.5, 2.0, 1.0])
    y = 1.0 if task == "c" else 0.7
    f32 = dataclasses.replace(model, V=model.V.astype(np.float32), w=model.w.copy())
    dw0, dw, dV = _kernel_gradient(f32, ids, vals, y, task, variant)
    m = len(ranks)
    targets = {p: pair_loop(kind, ids, vals, model.levels, ranks, model.V, cap=p) for p in range(1, m + 1)}
    h = 1e-6
    touched = [j for j in range(model.V.shape[0]) if _owner(model, j)[0] in ids]
    for j in touched:
        old = model.V[j]
        model.V[j] = old + h
        up = _objective(model, ids, vals, y, task, variant, j, targets)
        model.V[j] = old - h
        down = _objective(model, ids, vals, y, task, variant, j, targets)
        model.V[j] = old
        assert dV[j] == pytest.approx((up - down) / (2 * h), rel=2e-4, abs=2e-5), (j, _owner(model, j))
    untouched = [j for j in range(model.V.shape[0]) if j not in touched]
    assert np.all(dV[untouched] == 0)

    def main_loss(w0, w):
        lin = w0 + sum(float(w[i]) * v for i, v in zip(ids, vals))
        return _loss(task, lin + targets[m], y)

    fd0 = (main_loss(model.w0 + h, model.w) - main_loss(model.w0 - h, model.w)) / (2 * h)
    assert dw0 == pytest.approx(fd0 + REG[0] * model.w0, rel=1e-4, abs=1e-6)
    for i in ids:
        w = model.w.astype(np.float64)
        w[i] += h
        up = main_loss(model.w0, w)
        w[i] -= 2 * h
        down = main_loss(model.w0, w)
        assert dw[i] == pytest.approx((up - down) / (2 * h) + REG[1] * model.w[i], rel=1e-4, abs=1e-6)
