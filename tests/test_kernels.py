"""The forward kernels against the pair loop (Eq. 1, 4, 5); training steps are in test_steps.py."""

import numpy as np
import pytest
from naive import pair_loop

from rafmcli.kernels import forward as F
from rafmcli.kernels import read_only
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


@pytest.mark.parametrize("kind", ["fm", "rafm", "difacto"])
def test_one_level_models_predict_as_the_level_machinery_does(kind):
    """One level takes its own sums (forward.fm_sums); the same model with a second, empty
    level takes the levels' (row_forward, pairwise_from_sums): bit for bit the same scores,
    with and without values, by mapped rows and by original ids."""
    rng = np.random.default_rng(9)
    one = random_model(kind, (6,), 40, rng)
    two = build(kind, "r", (6, 8), np.arange(40), np.ones(40), 0.3, rng, 0.3, (-1e9, 1e9))
    two.V[:], two.w[:], two.w0 = one.V, one.w, one.w0
    indptr, indices, values = random_rows(rng, 40, 200)
    table = np.arange(40, dtype=np.int32)
    for vals in (values, np.empty(0, np.float32)):
        scores = []
        for model in (one, two):
            lev, widths, offsets, V, w, w0 = model.kernel_model()
            assert widths.shape[0] == (1 if model is one else 2)
            scores.append(F.predict_scores(indptr, indices, vals, lev, widths, offsets, V, w, w0[0], model.nested))
            scores.append(F.predict_scores_by_id(indptr, indices, vals, table.copy(), lev, widths, offsets, V, w,
                                                 w0[0], model.nested)[0])
        for got in scores[1:]:
            np.testing.assert_array_equal(got, scores[0])


def test_a_rows_dependent_sums_start_at_zero():
    """One level never writes T, and the factor steps read it times 0 (kernels/sgd.py): left
    uninitialised, a NaN there made FM's gradient NaN now and then."""
    for widths in ([8], [4, 16], [1, 2, 3]):
        T = F.row_scratch(np.array(widths, np.int64))[2]
        assert T.shape == (sum(widths),) and not T.any()


def test_one_level_row_forward_returns_the_pairwise_part_and_top_level():
    """row_forward's contract on one level: (B_{1,1}, 0) with B[0] set, (0, -1) for an empty row."""
    lev, widths, offsets = np.zeros(3, np.int8), np.array([2], np.int64), np.array([0], np.int64)
    V = np.array([1, 0, 0, 1, 1, 1], np.float32)  # test_fm_hand_example's factors
    soff, S, T, Q, R, B = F.row_scratch(widths)
    B[:] = 7.0
    ids, x = read_only(np.array([0, 1, 2], np.int32), np.array([1, 2, 0.5], np.float32))  # rows, as predicted
    assert F.row_forward(0, 3, ids, x, lev, widths, offsets, V, True, soff, S, T, Q, R, B) == (1.5, 0)
    assert B[0] == 1.5
    assert F.row_forward(0, 0, ids, x, lev, widths, offsets, V, True, soff, S, T, Q, R, B) == (0.0, -1)


def test_predictions_the_same_on_any_number_of_threads(monkeypatch):
    """Rows cut into ranges on threads (small inputs on the calling thread alone): every row
    predicted once, bit for bit as on one thread."""
    rng = np.random.default_rng(5)
    model = random_model("rafm", (2, 5), 40, rng)
    indptr, indices, values = random_rows(rng, 40, 700)
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    args = (indptr, indices, values, lev, widths, offsets, V, w, w0[0], True)
    one = F.predict_scores(*args, n_threads=1)
    assert one[0] == pytest.approx(naive_score(model, indices[:indptr[1]], values[:indptr[1]]), rel=1e-5, abs=1e-5)
    monkeypatch.setattr(F, "SMALL_PREDICTION", 0)
    for n_threads in (2, 3):
        np.testing.assert_array_equal(F.predict_scores(*args, n_threads=n_threads), one)


@pytest.mark.parametrize("kind", ["rafm", "difacto"])
@pytest.mark.parametrize("ranks", [(2, 5), (2, 3, 7), (1, 2, 4, 8, 16)])
def test_truncated_models_equal_capped_pair_loop(kind, ranks):
    """B[p] = B_{1,p+1}: the model with every k_i capped at p+1."""
    rng = np.random.default_rng(7)
    model = random_model(kind, ranks, 30, rng)
    indptr, indices, values = random_rows(rng, 30, 25, max_nnz=12)
    indices, values = read_only(indices, values)  # the row kernels' types in training and prediction
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    m = len(ranks)
    soff, S, T, Q, R, B = F.row_scratch(widths)
    for r in range(25):
        a, b = indptr[r], indptr[r + 1]
        pair, top = F.row_forward(a, b, indices, values, lev, widths, offsets, V, model.nested, soff,
                                  S, T, Q, R, B)
        assert top == (max(model.levels[indices[a:b]]) - 1 if b > a else -1)
        assert pair == B[m - 1]
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


def test_training_and_prediction_compile_the_row_kernels_once(sample):
    """Training's gathered row buffers reach the row kernels typed read-only (forward.as_read_only),
    as the rows a prediction is given: each row kernel has no two signatures that differ only in
    read-only flags or literals (on a cold kernel cache; a cached caller compiles nothing)."""
    from conftest import types_apart

    from rafmcli import api

    X, y = api.read_data(sample("regression.train"))
    est = api.FMRegressor(model="rafm", ranks=(4, 16), iters=2, threads=1, holdout=0.2).fit(X, y)
    est.predict(X[:50])
    for kernel in (F.row_forward, F.linear_part, F.prefetch_row):
        assert types_apart(kernel) == 0, kernel.signatures
