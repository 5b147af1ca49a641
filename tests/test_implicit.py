"""Implicit data: group values, Feat2Vec sampling, gradients (finite differences, Theorem 1),
recommend against brute force, embeddings, and the commands end to end."""

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
from naive import group_values, implicit_loss, pair_loop, read_word2vec
from numba import njit

from rafmcli.kernels import implicit as KI
from rafmcli.kernels import read_only
from rafmcli.kernels import sgd as KS
from rafmcli.kernels.forward import FAST
from rafmcli.kernels.sampling import draw_negatives
from rafmcli.model.layout import build
from rafmcli.model.vocabulary import build_vocabulary, noise_tables, rng_streams

# internal features 0-2: group 0 (one-hot), 3-5: group 1 (one-hot), 6-7: group 2 (several a row)
GROUP_OF = np.array([0, 0, 0, 1, 1, 1, 2, 2], dtype=np.int32)
ROWS = [[(0, 1.0), (3, 1.0), (6, 0.5), (7, 0.5)],
        [(1, 1.0), (4, 1.0), (6, 1.0)],
        [(2, 1.0), (5, 1.0)],
        [(0, 1.0), (4, 1.0), (7, 1.0)],
        [(1, 1.0), (3, 1.0), (6, 0.5), (7, 0.5)],
        [(0, 1.0), (4, 1.0), (6, 1.0)]]


def csr(rows):
    """Rows in ``kernel_rows`` form, read-only as it gives them (one compile of each kernel)."""
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    ids = np.array([i for r in rows for i, _ in r], dtype=np.int32)
    xs = np.array([x for r in rows for _, x in r], dtype=np.float32)
    return read_only(indptr, ids, xs)


def tiny(kind="fm", ranks=(3,), seed=0):
    rng = np.random.default_rng(seed)
    levels = rng.integers(1, len(ranks) + 1, GROUP_OF.shape[0])
    levels[0] = len(ranks)  # some feature on the top level
    model = build(kind, "implicit", ranks, np.arange(GROUP_OF.shape[0]), levels, 0.5, rng, 0.2, (0.0, 0.0))
    model.w[:] = rng.normal(0, 0.5, GROUP_OF.shape[0])
    vocab, row_values = build_vocabulary(csr(ROWS), GROUP_OF, 3)  # ROWS hold internal ids
    model.vocabulary = vocab
    return model, vocab, row_values


def chi2_bound(df, z=3.29):
    """Upper 0.0005 quantile of chi-square(df) (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def chi2(observed, expected):
    return float(((observed - expected) ** 2 / expected).sum())


# ---- group values ---------------------------------------------------------------

def test_vocabulary_matches_a_plain_reading():
    model, vocab, row_values = tiny()
    plain = group_values(ROWS, GROUP_OF)
    for g in range(3):
        seen = {}
        for r, value in enumerate(plain[g]):
            seen.setdefault(value, []).append(r)
        lo, hi = vocab.group_ptr[g], vocab.group_ptr[g + 1]
        assert hi - lo == len(seen)
        for value, rows in seen.items():
            v = row_values[rows[0], g]
            assert lo <= v < hi and all(row_values[r, g] == v for r in rows)
            entries = tuple(zip(vocab.feat[vocab.ptr[v]:vocab.ptr[v + 1]].tolist(),
                                vocab.x[vocab.ptr[v]:vocab.ptr[v + 1]].tolist()))
            assert entries == value and vocab.count[v] == len(rows)
    # the empty value (row 2 has no group 2) comes first, so candidates are one range
    assert vocab.ptr[vocab.group_ptr[2]] == vocab.ptr[vocab.group_ptr[2] + 1]
    assert vocab.candidates(2) == (vocab.group_ptr[2] + 1, vocab.group_ptr[3])
    assert vocab.distinct_features().tolist() == [3, 3, 2]


def test_lookup_finds_known_values_and_marks_unknown():
    _, vocab, row_values = tiny()
    assert np.array_equal(vocab.lookup(csr(ROWS)), row_values)
    unknown = vocab.lookup(csr([[(0, 1.0), (3, 2.0), (6, 1.0), (7, 1.0)]]))  # 3:2 and {6,7} unseen
    assert unknown[0, 0] == row_values[0, 0] and unknown[0, 1] == -1 and unknown[0, 2] == -1


# ---- sampling ----------------------------------------------------------------------

def counts_vocabulary(counts_per_group):
    """A vocabulary of one-hot groups whose value v of group g occurs counts[g][v] times."""
    rows, ids, group_of = [], [], []
    for g, counts in enumerate(counts_per_group):
        ids.append(np.arange(len(counts)) + len(group_of))
        group_of += [g] * len(counts)
    n = max(sum(c) for c in counts_per_group)
    columns = [np.repeat(ids[g], counts) for g, counts in enumerate(counts_per_group)]
    for r in range(n):
        rows.append([(int(col[r % len(col)]), 1.0) for col in columns])
    return build_vocabulary(csr(rows), np.array(group_of, np.int32), len(counts_per_group))


@pytest.mark.parametrize("alpha1,alpha2,floor", [(0.75, 0.75, None), (0.0, 0.0, None), (1.0, 0.5, None),
                                                 (0.75, 0.75, (1, 0.5)), (0.75, 0.75, (2, 0.1))])
def test_group_and_value_frequencies(alpha1, alpha2, floor):
    """Groups ~ c^alpha1, or with --eval-share s (``floor`` (g, s)) g at least s, the others
    scaled alike; values ~ count^alpha2."""
    counts = [[1, 4, 9, 16, 30], [2, 60], [5, 5, 5, 20, 1, 1, 3]]
    vocab, row_values = counts_vocabulary(counts)
    noise = noise_tables(vocab, alpha1, alpha2, floor=floor)
    n, K = 60000, 4
    rows = np.tile(row_values, (n // row_values.shape[0] + 1, 1))[:n]
    groups, vals = draw_negatives(rows, noise.group_ptr, noise.group_prob, noise.group_alias,
                                  noise.value_prob, noise.value_alias, noise.table, 0, K, rng_streams(3, 1))
    c = np.array([len(x) for x in counts], dtype=float)
    p_group = c ** alpha1 / (c ** alpha1).sum()
    if floor is not None and p_group[floor[0]] < floor[1]:  # (1, 0.5) raises group 1 from 0.16; (2, 0.1) is met
        rest = np.arange(3) != floor[0]
        p_group[rest] *= (1 - floor[1]) / p_group[rest].sum()
        p_group[floor[0]] = floor[1]
    observed = np.bincount(groups, minlength=3)
    assert chi2(observed, n * p_group) < chi2_bound(2)
    assert chi2(observed, n * np.full(3, 1 / 3)) > chi2_bound(2) or alpha1 == 0  # the test has power
    for g in range(3):
        drawn = vals[groups == g, 1:].ravel() - vocab.group_ptr[g]
        assert drawn.min() >= 0 and drawn.max() < len(counts[g])
        by_value = np.bincount(drawn, minlength=len(counts[g]))
        # value ids follow first appearance; map back to the counts they stand for
        q = vocab.count[vocab.group_ptr[g]:vocab.group_ptr[g + 1]].astype(float) ** alpha2
        assert chi2(by_value, drawn.shape[0] * q / q.sum()) < chi2_bound(len(counts[g]) - 1)
        if alpha2 == 0:
            assert np.allclose(q / q.sum(), 1 / len(counts[g]))
        np.testing.assert_allclose(noise.logq[vocab.group_ptr[g]:vocab.group_ptr[g + 1]], np.log(q / q.sum()))


def test_negatives_differ_from_their_positive_in_one_group():
    from rafmcli.ranking import fixed_negatives

    _, vocab, row_values = tiny()
    plain = group_values(ROWS, GROUP_OF)
    for reject in (False, True):
        noise = noise_tables(vocab, 0.75, 0.75, row_values=row_values if reject else None)
        sampled = fixed_negatives(vocab, noise, csr(ROWS), 7, 50 if reject else 0, seed=1)
        indptr, ids, xs = sampled.negatives
        negatives = [list(zip(ids[a:b].tolist(), xs[a:b].tolist())) for a, b in zip(indptr[:-1], indptr[1:])]
        neg_values = group_values(negatives, GROUP_OF)
        training = set(zip(*(plain[g] for g in range(3))))
        for j in range(len(negatives)):
            r = j // 7
            differing = [g for g in range(3) if neg_values[g][j] != plain[g][r]]
            assert len(differing) <= 1
            if reject:
                assert len(differing) == 1
                assert tuple(neg_values[g][j] for g in range(3)) not in training


# ---- gradients -----------------------------------------------------------------------

REG = (0.05, 0.1, 0.2)


def hyper_vector(dep_weight=0.7):
    hyper = np.zeros(KS.N_HYPER)
    hyper[KS.H_LR] = hyper[KS.H_LR_DEP] = 1.0
    hyper[KS.H_REG0], hyper[KS.H_REG1] = REG[0], REG[1]
    hyper[KS.H_DEP_WEIGHT] = dep_weight
    hyper[KS.H_BIAS_ON] = hyper[KS.H_LINEAR_ON] = 1.0
    return hyper


def kernel_gradient(model, vocab, row_values, noise, conf, order, forced=None, reg=REG, seed=0):
    """Summed GRADIENT-mode gradients over positives ``order``: (dw0, dw, dV)."""
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    state = (np.zeros_like(V), np.zeros(0, np.float32), np.zeros_like(w), np.zeros(0, np.float32), np.zeros(2))
    hyper = hyper_vector()
    hyper[KS.H_REG0], hyper[KS.H_REG1] = reg[0], reg[1]
    reg_v = np.full(len(model.ranks), reg[2], dtype=np.float64)  # reg=(0, 0, 0) would give int64: another compile
    forced = KI.NO_FORCING if forced is None else np.asarray(forced, np.int64)
    KI.train_epoch(np.asarray(order, np.int64), 0, row_values, (vocab.ptr, vocab.feat, vocab.x),
                   noise.kernel_tuple(), (lev, widths, offsets, V, w, w0), state, hyper, reg_v, conf,
                   rng_streams(seed, 1), KS.GRADIENT, forced)
    return state[4][0], state[2].astype(np.float64), state[0].astype(np.float64)


def forced_epoch(vocab, row_values, n, g=2, K=3):
    """(order of n positives, forced draws: group g and K other values of it a positive, K)."""
    order = np.random.default_rng(1).integers(0, row_values.shape[0], n).astype(np.int64)
    lo, hi = vocab.group_ptr[g], vocab.group_ptr[g + 1]
    forced = np.array([[g, row_values[r, g]] + [v for v in range(lo, hi) if v != row_values[r, g]][:K]
                       for r in order], dtype=np.int64)
    return order, forced, K


@pytest.mark.parametrize("method", [KS.GRADIENT, KS.ADAM])
def test_a_worker_claims_blocks_of_positives_beyond_its_own_range(method):
    """With a claims counter the implicit worker given positives [n/2, n) visits every positive of
    ``order`` in blocks of BLOCK_ROWS, in order, and counts order[pos] as optimizer step
    step0 + pos + 1: its summed gradients (GRADIENT), or its Adam-trained model, equal the
    serial epoch's bit for bit (forced negatives); the counter ends one past the last block."""
    from rafmcli.kernels.claims import BLOCK_ROWS

    runs = []
    for claims in (None, np.zeros(1, np.int64)):
        model, vocab, row_values = tiny("rafm", (2, 3), seed=5)
        noise = noise_tables(vocab, 0.75, 0.5)
        order, forced, K = forced_epoch(vocab, row_values, 1300)
        conf = config(K, KI.SOFTMAX, True, model.nested, KS.CASCADE)
        hyper = hyper_vector()
        if method == KS.ADAM:
            hyper[KS.H_LR] = hyper[KS.H_LR_DEP] = 0.01
            hyper[KS.H_BETA1], hyper[KS.H_BETA2], hyper[KS.H_EPS] = 0.9, 0.999, 1e-8
        lev, widths, offsets, V, w, w0 = model.kernel_model()
        two = method == KS.ADAM
        state = (np.zeros_like(V), np.zeros_like(V) if two else np.zeros(0, np.float32), np.zeros_like(w),
                 np.zeros_like(w) if two else np.zeros(0, np.float32), np.zeros(2))
        args = (row_values, (vocab.ptr, vocab.feat, vocab.x), noise.kernel_tuple(), (lev, widths, offsets, V, w, w0),
                state, hyper, np.full(2, 0.1), conf, rng_streams(0, 1))
        step0 = 7
        if claims is None:
            KI.train_epoch(order, step0, *args, method, forced)
        else:
            n = order.shape[0]
            KI._TRAINERS[method](order, n // 2, n, step0, *args, 0, forced, claims)
            assert claims[0] == -(-n // BLOCK_ROWS) + 1
        runs.append((V, w, w0, *state))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    assert np.abs(runs[0][3]).sum() > 0  # the state moved: the epoch did something


def config(K, loss, nce, nested, variant, regular_negatives=True):
    conf = np.zeros(KI.N_CONF, np.int64)
    conf[KI.C_NEGATIVES], conf[KI.C_LOSS], conf[KI.C_NCE] = K, loss, nce
    conf[KI.C_NESTED], conf[KI.C_VARIANT] = nested, variant
    conf[KI.C_REG_NEGATIVES] = regular_negatives
    return conf


def substituted(vocab, row_values, r, g, v):
    """Features of row r with group g's value replaced by value v."""
    out = []
    for h in range(row_values.shape[1]):
        u = v if h == g else row_values[r, h]
        out += list(zip(vocab.feat[vocab.ptr[u]:vocab.ptr[u + 1]].tolist(),
                        vocab.x[vocab.ptr[u]:vocab.ptr[u + 1]].tolist()))
    return out


def naive_rows(model, rows, cap=None):
    """(lin, pairwise) of each row by the pair loop."""
    out = []
    for row in rows:
        ids, vals = [i for i, _ in row], [x for _, x in row]
        lin = model.w0 + sum(float(model.w[i]) * x for i, x in row)
        out.append((lin, pair_loop(model.kind, ids, vals, model.levels, model.ranks, model.V, cap)))
    return out


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _distill(a, b, lin):
    pa, pb = _sigmoid(lin + a), _sigmoid(lin + b)
    return -(pb * np.log(pa) + (1 - pb) * np.log(1 - pa))


def objective(model, rows, shift, loss, variant, coordinate, targets, reg_count):
    """What the kernel's step on factor ``coordinate`` descends (tests/test_kernels.py's
    _objective, summed over the positive and its negatives)."""
    widths, offsets = model.widths, model.offsets
    level = int(np.searchsorted(offsets, coordinate, side="right"))
    feature = (coordinate - offsets[level - 1]) // widths[level - 1]
    m = len(model.ranks)
    scored = naive_rows(model, rows)
    main = implicit_loss([lin + pair for lin, pair in scored], shift, loss)
    reg = 0.5 * REG[2] * reg_count * float(model.V[coordinate]) ** 2
    if not model.nested or m == 1:
        return main + reg
    truncated = [naive_rows(model, rows, cap=p) for p in range(1, m)]
    if variant == KS.PAPER:
        if level == model.levels[feature]:
            return main + reg
        return sum(_distill(truncated[level - 1][j][1], targets[j][level + 1], scored[j][0])
                   for j in range(len(rows))) + reg
    if variant == KS.AUTHORS:  # only the p = level term has this coordinate live (tests/naive.py objective)
        if level == model.levels[feature]:
            return main + reg
        return main + 0.7 * sum(_distill(truncated[level - 1][j][1], targets[j][level + 1], scored[j][0])
                                for j in range(len(rows))) + reg
    return main + 0.7 * sum(_distill(truncated[p - 1][j][1], targets[j][p + 1], scored[j][0])
                            for j in range(len(rows)) for p in range(1, m)) + reg


@pytest.mark.parametrize("loss,nce", [("logistic", True), ("logistic", False), ("softmax", False),
                                      ("softmax", True)])
@pytest.mark.parametrize("kind,ranks,variant", [("fm", (3,), KS.PAPER), ("difacto", (2, 4), KS.PAPER),
                                                ("rafm", (2, 3), KS.PAPER), ("rafm", (2, 3), KS.AUTHORS),
                                                ("rafm", (2, 3), KS.CASCADE)])
@pytest.mark.parametrize("regular_negatives", [True, False])
def test_gradients_equal_finite_differences(kind, ranks, variant, loss, nce, regular_negatives):
    """A positive with K = 3 forced negatives: the kernel's gradient (NCE shift
    -log(K Q2) or none; logistic or softmax) against central differences, L2
    counted in every row a value feature is in (a context feature once) or in
    the positive row only (--no-regular-negatives)."""
    model, vocab, row_values = tiny(kind, ranks, seed=4)
    noise = noise_tables(vocab, 0.75, 0.5)
    r, g, K = 1, 2, 3
    lo = vocab.group_ptr[g]
    vals = [row_values[r, g]] + [v for v in range(lo, vocab.group_ptr[g + 1]) if v != row_values[r, g]][:K]
    conf = config(K, KI.LOGISTIC if loss == "logistic" else KI.SOFTMAX, nce, model.nested, variant,
                  regular_negatives)
    f32 = model.V.copy()
    dw0, dw, dV = kernel_gradient(model, vocab, row_values, noise, conf, [r], forced=[[g] + vals])
    model.V = f32.astype(np.float64)
    rows = [substituted(vocab, row_values, r, g, v) for v in vals]
    shift = [np.log(K) + noise.logq[v] if nce else 0.0 for v in vals]
    m = len(ranks)
    targets = [{p: pair_loop(kind, [i for i, _ in row], [x for _, x in row], model.levels, ranks, model.V, cap=p)
                for p in range(1, m + 1)} for row in rows]
    h = 1e-6

    def reg_count(feature):
        """How many L2 terms of the feature the step carries."""
        occurs = sum(feature in [i for i, _ in row] for row in rows)
        if not regular_negatives or occurs == len(rows):  # the positive's only, or a context feature
            return int(feature in [i for i, _ in rows[0]])
        return occurs

    for coordinate in range(model.V.shape[0]):
        level = int(np.searchsorted(model.offsets, coordinate, side="right"))
        feature = (coordinate - model.offsets[level - 1]) // model.widths[level - 1]
        if not any(feature in [i for i, _ in row] for row in rows):
            assert dV[coordinate] == 0
            continue
        old = model.V[coordinate]
        model.V[coordinate] = old + h
        up = objective(model, rows, shift, loss, variant, coordinate, targets, reg_count(feature))
        model.V[coordinate] = old - h
        down = objective(model, rows, shift, loss, variant, coordinate, targets, reg_count(feature))
        model.V[coordinate] = old
        assert dV[coordinate] == pytest.approx((up - down) / (2 * h), rel=3e-4, abs=3e-5), coordinate

    lin0 = [w0 for w0, _ in naive_rows(model, rows)]
    truncated = [naive_rows(model, rows, cap=p) for p in range(1, m)]

    def main_loss(w0, w):
        """The bias and linear weights' objective: the loss, plus for the authors' rule the
        distillation terms through lin (targets fixed at the unperturbed lin)."""
        lins = [w0 + sum(float(w[i]) * x for i, x in row) for row in rows]
        ys = [lin + pair for lin, (_, pair) in zip(lins, naive_rows(model, rows))]
        total = implicit_loss(ys, shift, loss)
        if variant == KS.AUTHORS and m > 1:
            for j in range(len(rows)):
                for p in range(1, m):
                    pa = _sigmoid(lins[j] + truncated[p - 1][j][1])
                    pb = _sigmoid(lin0[j] + targets[j][p + 1])
                    total += 0.7 * -(pb * np.log(pa) + (1 - pb) * np.log(1 - pa))
        return total

    assert dw0 == pytest.approx((main_loss(model.w0 + h, model.w) - main_loss(model.w0 - h, model.w)) / (2 * h)
                                + REG[0] * model.w0, rel=1e-4, abs=1e-6)
    for i in range(model.w.shape[0]):
        w = model.w.astype(np.float64)
        w[i] += h
        up = main_loss(model.w0, w)
        w[i] -= 2 * h
        fd = (up - main_loss(model.w0, w)) / (2 * h)
        if not any(i in [f for f, _ in row] for row in rows):
            assert dw[i] == 0
        else:
            assert dw[i] == pytest.approx(fd + reg_count(i) * REG[1] * model.w[i], rel=1e-4, abs=1e-6), i


# ---- Theorem 1 -----------------------------------------------------------------------

def test_theorem_1_monte_carlo_gradient_is_the_convex_combination():
    """Feat2Vec's Theorem 1 on a tiny FM: the training gradient averaged over many
    sampled negatives equals Sum_g p_g E[grad | group g], where each group's
    expectation is exact, enumerating every K-tuple of its values, and the
    gradients come from finite differences of the plain loss."""
    model, vocab, row_values = tiny("fm", (2,), seed=7)
    K, alpha1, alpha2, r = 2, 0.75, 0.5, 0
    noise = noise_tables(vocab, alpha1, alpha2)
    conf = config(K, KI.LOGISTIC, True, False, KS.PAPER)
    batches, per_batch = 25, 4000
    samples = [np.concatenate(kernel_gradient(model, vocab, row_values, noise, conf, np.full(per_batch, r),
                                              reg=(0, 0, 0), seed=s)[1:]) for s in range(batches)]
    samples = np.array(samples) / per_batch
    mc, se = samples.mean(0), samples.std(0, ddof=1) / np.sqrt(batches)
    V64, w64 = model.V.astype(np.float64), model.w.astype(np.float64)

    def expected_loss(params, group):
        w, V = params[:w64.shape[0]], params[w64.shape[0]:]
        lo, hi = vocab.group_ptr[group], vocab.group_ptr[group + 1]
        q = np.exp(noise.logq[lo:hi])
        total = 0.0
        for negs in itertools.product(range(lo, hi), repeat=K):
            rows = [substituted(vocab, row_values, r, group, v) for v in (row_values[r, group],) + negs]
            ys = [model.w0 + sum(w[i] * x for i, x in row)
                  + pair_loop("fm", [i for i, _ in row], [x for _, x in row], model.levels, model.ranks, V)
                  for row in rows]
            shift = [np.log(K) + noise.logq[v] for v in (row_values[r, group],) + negs]
            total += np.prod(q[np.array(negs) - lo]) * implicit_loss(ys, shift, "logistic")
        return total

    params = np.concatenate([w64, V64])
    per_group = []
    for group in range(3):
        grad = np.zeros(params.shape[0])
        for j in range(params.shape[0]):
            up, down = params.copy(), params.copy()
            up[j] += 1e-6
            down[j] -= 1e-6
            grad[j] = (expected_loss(up, group) - expected_loss(down, group)) / 2e-6
        per_group.append(grad)
    exact = sum(p * grad for p, grad in zip(noise.group_p, per_group))
    tolerance = 5 * se + 1e-4
    assert np.all(np.abs(mc - exact) < tolerance), np.abs(mc - exact) / tolerance
    # the comparison has power: equal weights for the groups would be rejected
    uniform = sum(grad / 3 for grad in per_group)
    assert np.any(np.abs(mc - uniform) > tolerance)


# ---- recommend, embeddings ----------------------------------------------------------------

def brute_force_top(model, vocab, rows, group, k, excluded):
    from rafmcli.predict import predict_rows

    lo, hi = vocab.candidates(group)
    out = []
    for r, row in enumerate(rows):
        context = [(i, x) for i, x in row if vocab.group_of[i] != group]
        cands = [v for v in range(lo, hi) if v not in excluded[r]]
        full = [context + list(zip(vocab.feat[vocab.ptr[v]:vocab.ptr[v + 1]].tolist(),
                                   vocab.x[vocab.ptr[v]:vocab.ptr[v + 1]].tolist())) for v in cands]
        scores = predict_rows(model, csr(full)) if full else np.zeros(0)
        order = sorted(range(len(cands)), key=lambda j: (-scores[j], cands[j]))[:k]
        out.append(([cands[j] for j in order], [scores[j] for j in order]))
    return out


@pytest.mark.parametrize("kind,ranks", [("fm", (3,)), ("rafm", (2, 4)), ("difacto", (2, 3, 5))])
def test_recommend_equals_brute_force(kind, ranks):
    from rafmcli import ranking

    model, vocab, row_values = tiny(kind, ranks, seed=11)
    queries = ROWS + [[(1, 1.0)], [(6, 1.0), (2, 2.0)], []]
    for group in range(3):
        for train_values, k in ((None, 2), (row_values, 10)):
            ctx = ranking.contexts(vocab, csr(queries), group, train_values)
            ids, scores = ranking.recommend(model, ctx, k)
            excluded = [set(ctx.excl[ctx.excl_ptr[r]:ctx.excl_ptr[r + 1]].tolist()) for r in range(len(queries))]
            if train_values is not None:  # seen: values of training rows with the same context
                plain = group_values(ROWS, GROUP_OF)
                for r, row in enumerate(queries[:len(ROWS)]):
                    same = [t for t in range(len(ROWS))
                            if all(plain[h][t] == plain[h][r] for h in range(3) if h != group)]
                    assert excluded[r] == {int(row_values[t, group]) for t in same}
            for r, (want_ids, want_scores) in enumerate(brute_force_top(model, vocab, queries, group, k, excluded)):
                got = ids[r][ids[r] >= 0]
                assert got.tolist() == want_ids
                np.testing.assert_allclose(scores[r][:len(got)], want_scores, rtol=1e-5, atol=1e-5)


def test_ranks_of_held_out_rows_equal_brute_force():
    from rafmcli import ranking
    from rafmcli.metrics import hit_ndcg
    from rafmcli.predict import predict_rows

    model, vocab, row_values = tiny("rafm", (2, 4), seed=2)
    group = 1
    rset = ranking.ranking_set(vocab, csr(ROWS), group, row_values, seed=0, n_sampled=2)
    got = ranking.ranking_metrics(model, rset, 1)
    lo, hi = vocab.candidates(group)
    higher, ties = [], []
    for r, row in enumerate(ROWS):
        excluded = set(rset.ctx.excl[rset.ctx.excl_ptr[r]:rset.ctx.excl_ptr[r + 1]].tolist()) | {row_values[r, group]}
        own = predict_rows(model, csr([row]))[0]
        others = [v for v in range(lo, hi) if v not in excluded]
        scores = predict_rows(model, csr([substituted(vocab, row_values, r, group, v) for v in others]))
        higher.append(int((scores > own + 1e-9).sum()))
        ties.append(int((np.abs(scores - own) <= 1e-9).sum()))
    hr, ndcg = hit_ndcg(higher, ties, 1)
    assert got["hr1"] == pytest.approx(hr) and got["ndcg1"] == pytest.approx(ndcg)


def test_hit_and_ndcg_by_hand():
    from rafmcli.metrics import hit_ndcg, sampled_auc

    hr, ndcg = hit_ndcg([0, 1, 5], [0, 0, 0], 2)
    assert hr == pytest.approx(2 / 3)
    assert ndcg == pytest.approx((1 + 1 / np.log2(3)) / 3)
    # a constant model: the positive among 3 ties is at rank 1, 2 or 3 with equal chance
    hr, ndcg = hit_ndcg([0], [2], 1)
    assert hr == pytest.approx(1 / 3) and ndcg == pytest.approx(1 / 3)
    assert sampled_auc(np.array([[1.0, 0.0, 2.0, 1.0]])) == pytest.approx(0.5)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def row_gradients_in_a_fast_kernel(y, shift, K, loss_kind, grad):
    """KI.row_gradients compiled as the epoch kernel compiles it: a callee takes its caller's fastmath."""
    return KI.row_gradients(y, shift, K, loss_kind, grad)


def test_row_gradients_do_not_depend_on_where_the_arrays_lie():
    """grad written just after y and shift (LLVM's run-time alias check then takes the scalar
    loop: grad - shift < 256 bytes, so n < 30) gives the same bits as grad written before them
    (the vectorised loop)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        n, loss_kind = int(rng.integers(2, 30)), int(rng.integers(2))
        y, shift = rng.normal(size=n) * 3, rng.normal(size=n)
        losses, grads = [], []
        for near in (True, False):
            buf = np.zeros(3 * n + 8)
            at = (0, n + 2, 2 * n + 4) if near else (n + 4, 2 * n + 6, 0)  # y, shift, grad
            buf[at[0]:at[0] + n], buf[at[1]:at[1] + n] = y, shift
            grad = buf[at[2]:at[2] + n]
            losses.append(row_gradients_in_a_fast_kernel(buf[at[0]:at[0] + n], buf[at[1]:at[1] + n], n - 1,
                                                         loss_kind, grad))
            grads.append(grad.copy())
        assert losses[0] == losses[1] and np.array_equal(grads[0], grads[1]), (n, loss_kind)


def test_one_thread_trains_the_same_bits_wherever_memory_lies(sample, tmp_path):
    """--threads 1 is bit for bit: the same run under environments of different sizes (which move
    the kernels' scratch arrays about the heap) gives the same parameters.

    A first run in this process makes sure the others load the implicit trainer from numba's
    cache: the kernel as compiled in a process and its cached copy differ in the last bits of the
    bias, which this loss leaves at about 1e-16 (5.2e-16 against 8.7e-16; w and V equal)."""
    from rafmcli.model import files as model_files

    meta = os.path.join(os.path.dirname(sample("implicit.train")), "implicit.meta")
    args = ["train", "--task", "implicit", "--ranks", "4,16", "--train", sample("implicit.train"), "--meta", meta,
            "--iter", "3", "--holdout", "0", "--threads", "1", "--quiet", "--save-model"]
    assert run(args + [str(tmp_path / "first.rafm")]).exit_code == 0
    models = []
    for pad in (1, 300, 2000, 9000):
        path = tmp_path / f"m{pad}.rafm"
        subprocess.run([sys.executable, "-m", "rafmcli", *args, str(path)],
                       env=dict(os.environ, RAFM_TEST_PADDING="x" * pad), check=True)
        models.append(model_files.load(str(path)))
    for other in models[1:]:
        assert other.w0 == models[0].w0
        assert np.array_equal(other.w, models[0].w) and np.array_equal(other.V, models[0].V)


@pytest.mark.parametrize("kind,ranks,level", [("fm", (3,), 1), ("rafm", (2, 4), 1), ("rafm", (2, 4), 2),
                                              ("difacto", (2, 3, 5), 2), ("rafm", (2, 4), None),
                                              ("difacto", (2, 3, 5), None)])
def test_embed_round_trips_through_a_word2vec_reader(tmp_path, kind, ranks, level):
    """Level N: v^(N) of F_N; no --level (the default, all): every level side by side."""
    from rafmcli.embeddings import embeddings, write_word2vec
    from rafmcli.model import files as model_files

    model, _, _ = tiny(kind, ranks, seed=3)
    model_files.save(model, str(tmp_path / "m.rafm"))
    out = tmp_path / "vectors.txt"
    chosen = [] if level is None else ["--level", str(level)]
    assert run(["embed", "--model", str(tmp_path / "m.rafm"), "--out", str(out)] + chosen).exit_code == 0
    vectors = read_word2vec(out.read_text())
    features = np.flatnonzero(model.levels >= (level or 1))
    assert len(vectors) == features.shape[0]
    for j in features:
        if level is None:
            want = all_levels(model)[j]
        elif kind == "difacto":
            want = np.concatenate([model.factors(l)[j] for l in range(1, level + 1)])
        else:
            want = model.factors(level)[j]
        assert np.array_equal(vectors[str(model.feature_ids[j])], want)
    with open(tmp_path / "direct.txt", "w") as fh:
        write_word2vec(fh, embeddings(model, level))
    assert (tmp_path / "direct.txt").read_text() == out.read_text()


def all_levels(model):
    """Every feature's vectors of every level side by side, zeros above its own (plain loops)."""
    out = np.zeros((model.levels.shape[0], int(model.widths.sum())), dtype=np.float32)
    for j in range(model.levels.shape[0]):
        col = 0
        for level in range(1, len(model.ranks) + 1):
            block = model.factors(level)
            if j < block.shape[0]:
                out[j, col:col + block.shape[1]] = block[j]
            col += block.shape[1]
    return out


def plain_values(model, group):
    """{name: [(internal feature, x), ...]} of the group's values seen in training, from ROWS
    (which hold internal ids); a name joins the features' original ids, ascending."""
    found = {}
    for row in ROWS:
        value = sorted((i, x) for i, x in row if GROUP_OF[i] == group)
        if value:
            found[",".join(str(i) for i in sorted(model.feature_ids[i] for i, _ in value))] = value
    return found


@pytest.mark.parametrize("kind,ranks", [("fm", (3,)), ("rafm", (2, 4)), ("difacto", (2, 3, 5))])
def test_embed_group_writes_each_value_as_the_sum_of_its_features(tmp_path, kind, ranks):
    from rafmcli.model import files as model_files

    model, vocab, _ = tiny(kind, ranks, seed=4)
    model_files.save(model, str(tmp_path / "m.rafm"))
    vectors = all_levels(model)
    for group in range(3):
        out = tmp_path / f"g{group}.txt"
        result = run(["embed", "--model", str(tmp_path / "m.rafm"), "--group", str(group), "--out", str(out)])
        assert result.exit_code == 0, result.output
        got = read_word2vec(out.read_text())
        want = {name: sum(np.float64(x) * vectors[i] for i, x in value)
                for name, value in plain_values(model, group).items()}
        assert sorted(got) == sorted(want)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)


def test_similar_equals_numpy_cosine(tmp_path):
    from rafmcli.model import files as model_files

    model, _, _ = tiny("rafm", (2, 4), seed=5)
    model_files.save(model, str(tmp_path / "m.rafm"))
    vectors = all_levels(model).astype(np.float64)  # by internal id, as ROWS and GROUP_OF
    for internal in (0, 4, 6):  # 6 is in two values of group 2: it stands for its own vector
        query = int(model.feature_ids[internal])
        own = int(GROUP_OF[internal])
        holding = [sum(x * vectors[i] for i, x in value) for value in plain_values(model, own).values()
                   if internal in dict(value)]
        value_name = [name for name, value in plain_values(model, own).items() if internal in dict(value)]
        for args, searched in ((["--all-groups"], None), ([], own), (["--group", "2"], 2)):
            result = run(["similar", "--model", str(tmp_path / "m.rafm"), "-k", "3", str(query)] + args)
            assert result.exit_code == 0, result.output
            lines = [line.split("\t") for line in result.output.splitlines()]
            assert lines[0] == ["query", "rank", "id", "cosine"]
            if searched is None:
                candidates = {str(model.feature_ids[j]): vectors[j] for j in range(8) if j != internal}
                target = vectors[internal]
            else:
                candidates = {name: sum(x * vectors[i] for i, x in value)
                              for name, value in plain_values(model, searched).items()}
                target = holding[0] if len(holding) == 1 else vectors[internal]
                if len(holding) == 1 and searched == own:
                    del candidates[value_name[0]]
            cosine = {name: float(v @ target / np.linalg.norm(v) / np.linalg.norm(target))
                      for name, v in candidates.items()}
            best = sorted(cosine, key=lambda name: -cosine[name])[:3]
            assert [f[2] for f in lines[1:]] == best
            np.testing.assert_allclose([float(f[3]) for f in lines[1:]], [cosine[b] for b in best], rtol=1e-5)


# ---- the commands ------------------------------------------------------------------------

def run(args):
    from click.testing import CliRunner

    from rafmcli.cli import main

    return CliRunner().invoke(main, args)


def planted_implicit(path, rng, n_rows, users=60, items=50):
    """Users of taste t = user % 5 pick items of the same taste (item % 5) 85% of the time;
    items of taste 0 are the most popular overall."""
    with open(path, "w") as fh:
        for _ in range(n_rows):
            u = int(rng.integers(users))
            if rng.random() < 0.85:
                it = int(rng.integers(items // 5)) * 5 + u % 5
            else:
                it = int(rng.integers(items // 5)) * 5
            fh.write(f"1 {u}:1 {users + it}:1\n")
    return users, items


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("implicit")
    rng = np.random.default_rng(0)
    users, items = planted_implicit(root / "train.libfm", rng, 6000)
    planted_implicit(root / "valid.libfm", rng, 300)
    (root / "meta.txt").write_text("0\n" * users + "1\n" * items)
    return root, users, items


@pytest.mark.parametrize("model,threads", [("fm", 3), ("rafm", 1)])
def test_training_learns_tastes_and_beats_popularity(planted, tmp_path, model, threads):
    """FM on three Hogwild threads (6,000 rows: 2,000 a thread), RaFM on one."""
    from rafmcli.model import files as model_files

    root, users, items = planted
    args = ["train", "--task", "implicit", "--model", model, "--train", str(root / "train.libfm"),
            "--validation", str(root / "valid.libfm"), "--meta", str(root / "meta.txt"), "--eval-group", "1",
            "--top-k", "5", "--iter", "12", "--rlog", str(tmp_path / "log.tsv"),
            "--save-model", str(tmp_path / "m.rafm"), "--quiet", "--threads", str(threads)]
    args += ["--dim", "4"] if model == "fm" else ["--ranks", "2,4"]
    result = run(args)
    assert result.exit_code == 0, result.output
    trained = model_files.load(str(tmp_path / "m.rafm")).info["options"]  # the defaults (rafm-train(1))
    assert (trained["loss"], trained["nce"], trained["reject_positives"], trained["eval_share"],
            trained["regular_negatives"]) == ("softmax", True, True, 0.5, True)
    log = np.genfromtxt(tmp_path / "log.tsv", names=True, delimiter="\t")
    # popularity (taste-0 items first) hits the taste only for a fifth of users: HR@5 about 0.2
    assert log["hr5"].max() > 0.5 and log["auc"].max() > 0.7
    assert log["train_loss"][-1] < log["train_loss"][0]
    valid_users = [int(line.split()[1].split(":")[0]) for line in open(root / "valid.libfm")]
    seen = {}
    for line in open(root / "train.libfm"):
        u, it = (int(t.split(":")[0]) for t in line.split()[1:])
        seen.setdefault(u, set()).add(it)
    for exclude in ([], ["--exclude-seen", str(root / "train.libfm")]):
        result = run(["recommend", "--model", str(tmp_path / "m.rafm"), "--group", "1", "-k", "5",
                      str(root / "valid.libfm")] + exclude)
        assert result.exit_code == 0, result.output
        lines = [line.split("\t") for line in result.output.splitlines()[1:]]
        assert len(lines) == 5 * len(valid_users)
        recommended = [(valid_users[int(f[0]) - 1], int(f[2])) for f in lines]
        if exclude:
            assert not any(it in seen.get(u, ()) for u, it in recommended)
        else:  # every user has seen all items of their taste: without exclusion those come first
            assert np.mean([(it - users) % 5 == u % 5 for u, it in recommended]) > 0.6
    result = run(["similar", "--model", str(tmp_path / "m.rafm"), "-k", "3", str(users + 7)])
    neighbours = [int(line.split("\t")[2]) for line in result.output.splitlines()[1:]]
    assert sum((i - users) % 5 == 2 for i in neighbours) >= 2


def test_api_estimator_is_rafm_train(planted, tmp_path):
    """FMImplicit trains the model rafm train --task implicit trains, recommends and embeds as the
    commands do, and round-trips through a model file."""
    from rafmcli import api
    from rafmcli.model import files as model_files

    root, users, items = planted
    common = ["--model", "fm", "--dim", "4", "--eval-group", "1", "--iter", "3", "--seed", "2",
              "--threads", "1"]  # bit for bit: one thread (more would be Hogwild)
    for name, flag in (("cli.rafm", ["--no-regular-negatives"]), ("default.rafm", [])):
        result = run(["train", "--task", "implicit", "--train", str(root / "train.libfm"), "--validation",
                      str(root / "valid.libfm"), "--meta", str(root / "meta.txt"), "--save-model",
                      str(tmp_path / name), "--quiet"] + common + flag)
        assert result.exit_code == 0, result.output
    X, _ = api.read_data(root / "train.libfm", sparse=False)
    X_valid, _ = api.read_data(root / "valid.libfm", sparse=False)
    groups = [0] * users + [1] * items
    est = api.FMImplicit(groups=groups, model="fm", ranks=4, eval_group=1, iters=3, seed=2, threads=1,
                         regular_negatives=False).fit(X, eval_set=X_valid)
    cli = model_files.load(str(tmp_path / "cli.rafm"))
    assert np.array_equal(est.model_.V, cli.V) and np.array_equal(est.model_.w, cli.w)
    assert not np.array_equal(model_files.load(str(tmp_path / "default.rafm")).V, cli.V)  # the flag reaches the kernel
    names, scores = est.recommend(X_valid, group=1, k=3, exclude_seen=X)
    compiled = _recommend_signatures()
    assert all(apart == 0 for _, apart in compiled), compiled  # the contexts and the candidates alike
    result = run(["recommend", "--model", str(tmp_path / "cli.rafm"), "--group", "1", "-k", "3",
                  "--exclude-seen", str(root / "train.libfm"), str(root / "valid.libfm")])
    table = [line.split("\t") for line in result.output.splitlines()[1:]]
    assert [f[2] for f in table] == [n for row in names for n in row]
    np.testing.assert_allclose([float(f[3]) for f in table], scores[~np.isnan(scores)], rtol=1e-5, atol=1e-6)
    joblib = pytest.importorskip("joblib")
    joblib.dump(est, tmp_path / "est.joblib")
    mapped = joblib.load(tmp_path / "est.joblib", mmap_mode="r")
    again_names, again_scores = mapped.recommend(X_valid, group=1, k=3, exclude_seen=X)
    assert again_names == names
    np.testing.assert_array_equal(again_scores, scores)
    # a vocabulary built, mapped from a model file or unpickled read-only is one numba type
    assert _recommend_signatures() == compiled
    result = run(["embed", "--model", str(tmp_path / "cli.rafm"), "--group", "1", "--out", str(tmp_path / "v.txt")])
    written = read_word2vec((tmp_path / "v.txt").read_text())
    names, vectors = est.embeddings(group=1)
    assert list(written) == names and all(np.array_equal(written[n], v) for n, v in zip(names, vectors))
    est.save(tmp_path / "api.rafm")
    again = api.load(tmp_path / "api.rafm")
    assert isinstance(again, api.FMImplicit) and again.eval_group == 1
    np.testing.assert_array_equal(again.decision_function(X_valid), est.decision_function(X_valid))
    with pytest.raises(ValueError, match="implicit model"):
        api.FMClassifier.load(tmp_path / "api.rafm")
    with pytest.raises(ValueError, match="needs feature groups"):
        api.FMImplicit(model="fm", ranks=4).fit(X)


def _recommend_signatures():
    """For each kernel of recommending: how many argument types it has been compiled for, and
    how many of them differ from another only in read-only flags or literal values."""
    from conftest import types_apart

    from rafmcli.kernels import recommend, sampling

    kernels = [getattr(recommend, name) for name in ("candidate_constants", "_top_k_chunks", "_alone", "_cross")]
    kernels += [sampling.sort_rows_by_group, sampling.index_group_values, KI.add_sums, KI.linear_sum]
    return [(len(k.signatures), types_apart(k)) for k in kernels]


def test_implicit_input_errors(planted, tmp_path):
    root, _, _ = planted
    base = ["train", "--task", "implicit", "--quiet", "--iter", "1"]
    (tmp_path / "bad-meta.txt").write_text("0\n1\nuser\n")
    result = run(base + ["--train", str(root / "train.libfm"), "--meta", str(tmp_path / "bad-meta.txt")])
    assert result.exit_code == 2 and f"{tmp_path / 'bad-meta.txt'}:3:" in result.output
    (tmp_path / "zero.libfm").write_text("1 0:1 60:1\n# comment\n\n0 1:1 61:1\n")
    result = run(base + ["--train", str(tmp_path / "zero.libfm"), "--meta", str(root / "meta.txt")])
    assert result.exit_code == 2 and f"{tmp_path / 'zero.libfm'}:4: implicit data holds positives only" in result.output
    result = run(base + ["--train", str(root / "train.libfm")])
    assert result.exit_code == 2 and "--meta" in result.output
    result = run(base + ["--train", str(root / "train.libfm"), "--meta", str(root / "meta.txt"), "--alpha1", "inf"])
    assert result.exit_code == 2 and "--alpha1" in result.output
    result = run(base + ["--train", str(root / "train.libfm"), "--meta", str(root / "meta.txt"), "--eval-group", "7"])
    assert result.exit_code == 2 and "group 7" in result.output
    result = run(base + ["--train", str(root / "train.libfm"), "--meta", str(root / "meta.txt"),
                         "--negative-groups", "5"])
    assert result.exit_code == 2 and "no feature group" in result.output
    explicit = tmp_path / "explicit.rafm"
    assert run(["train", "--task", "c", "--train", str(root / "train.libfm"), "--iter", "1", "--quiet",
                "--save-model", str(explicit)]).exit_code == 0
    result = run(["recommend", "--model", str(explicit), "--group", "1", str(root / "valid.libfm")])
    assert result.exit_code == 2 and "no feature groups" in result.output
    result = run(["similar", "--model", str(explicit), "123456"])
    assert result.exit_code == 2 and "feature 123456" in result.output
    result = run(["embed", "--model", str(explicit), "--level", "3", "--out", str(tmp_path / "v.txt")])
    assert result.exit_code == 2 and not (tmp_path / "v.txt").exists()


def test_predict_metrics_reproduce_the_validation_metrics(planted, tmp_path):
    root, _, _ = planted
    model_path = str(tmp_path / "m.rafm")
    result = run(["train", "--task", "implicit", "--model", "fm", "--dim", "4", "--train", str(root / "train.libfm"),
                  "--validation", str(root / "valid.libfm"), "--meta", str(root / "meta.txt"), "--eval-group", "1",
                  "--iter", "3", "--save-model", model_path, "--quiet"])
    assert result.exit_code == 0, result.output
    from rafmcli.model import files as model_files

    validation = model_files.load(model_path).info["training"]["validation"]
    result = run(["predict", "--model", model_path, "--metrics", "--eval-group", "1", "--exclude-seen",
                  str(root / "train.libfm"), "--out", str(tmp_path / "scores.txt"), str(root / "valid.libfm")])
    assert result.exit_code == 0, result.output
    line = [x for x in result.output.splitlines() if "valid.libfm: loss" in x][0]
    fields = line.split(" (")[0].split()
    shown = dict(zip(fields[2::2], fields[3::2]))
    assert set(shown) == set(validation)
    for key, value in validation.items():
        assert float(shown[key]) == pytest.approx(value, rel=1e-5), key
    result = run(["predict", "--model", model_path, "--eval-group", "1", str(root / "valid.libfm")])
    assert result.exit_code == 2 and "--metrics" in result.output


def to_libffm(src, dst, users):
    """The planted file with fields: 0 for the users, 1 for the items (what meta.txt says)."""
    with open(src) as fh, open(dst, "w") as out:
        for line in fh:
            label, *tokens = line.split()
            out.write(" ".join([label] + [f"{int(int(t.split(':')[0]) >= users)}:{t}" for t in tokens]) + "\n")


def test_libffm_fields_are_the_groups(planted, tmp_path):
    """A libFFM training file's fields are its groups: implicit training on it
    without --meta gives the model --meta gives on the libSVM file, and so do
    ALS's per-group priors; --meta over a libFFM file wins, with a note."""
    from rafmcli.model import files as model_files

    root, users, _ = planted
    for name in ("train", "valid"):
        to_libffm(root / f"{name}.libfm", tmp_path / f"{name}.ffm", users)
    # the same model: one thread (more would be Hogwild)
    common = ["--threads", "1", "--task", "implicit", "--dim", "4", "--eval-group", "1", "--iter", "3", "--quiet"]
    for kind, extra in (("implicit", []), ("als", ["--task", "r", "--method", "als", "--regular", "0,1,2,3,4"])):
        opts = common if kind == "implicit" else extra + ["--dim", "4", "--iter", "2", "--quiet"]
        svm = run(["train", "--train", str(root / "train.libfm"), "--validation", str(root / "valid.libfm"),
                   "--meta", str(root / "meta.txt"), "--save-model", str(tmp_path / f"{kind}-meta.rafm")] + opts)
        assert svm.exit_code == 0, svm.output
        ffm = run(["train", "--train", str(tmp_path / "train.ffm"), "--validation", str(tmp_path / "valid.ffm"),
                   "--save-model", str(tmp_path / f"{kind}-ffm.rafm")] + opts)
        assert ffm.exit_code == 0, ffm.output
        a, b = (model_files.load(str(tmp_path / f"{kind}-{x}.rafm")) for x in ("meta", "ffm"))
        np.testing.assert_array_equal(a.V, b.V)
        np.testing.assert_array_equal(a.w, b.w)
        if kind == "implicit":
            np.testing.assert_array_equal(a.vocabulary.group_of, b.vocabulary.group_of)
            group_of = a.vocabulary.group_of
            contexts = (("meta", root / "valid.libfm"), ("ffm", tmp_path / "valid.ffm"))
            recs = [run(["recommend", "--model", str(tmp_path / f"implicit-{x}.rafm"), "--group", "1", "-k", "3",
                         str(path)]).output for x, path in contexts]
            assert recs[0] == recs[1] and recs[0].count("\n") == 1 + 3 * 300
    head = open(tmp_path / "valid.ffm").read().splitlines(keepends=True)[:4]
    item = min(set(range(users, users + 50)) - {int(line.split()[2].split(":")[1]) for line in head})
    (tmp_path / "clash.ffm").write_text("".join(head) + f"1 0:1:1 0:{item}:1\n")  # an item in the users' field
    clash = run(["train", "--train", str(tmp_path / "train.ffm"), "--validation", str(tmp_path / "clash.ffm")]
                + common)
    assert clash.exit_code == 2 and f"{tmp_path / 'clash.ffm'}:5: feature {item} is in field 0 here but in field 1 " \
        f"in {tmp_path / 'train.ffm'}" in clash.output, clash.output
    import json

    stats = run(["stats", "--json", str(tmp_path / "train.ffm"), str(root / "train.libfm")])
    ffm_stats, svm_stats = json.loads(stats.stdout)["files"]
    assert svm_stats["fields"] is None
    items = {t.split(":")[0] for line in open(root / "train.libfm") for t in line.split()[2:]}
    assert ffm_stats["fields"] == [{"field": 0, "features": ffm_stats["features"] - len(items)},
                                   {"field": 1, "features": len(items)}]
    assert "fields       2 (libFFM" in run(["stats", str(tmp_path / "train.ffm")]).stdout
    (tmp_path / "swap.txt").write_text("1\n" * users + "0\n" * 50)
    both = run(["train", "--train", str(tmp_path / "train.ffm"), "--meta", str(tmp_path / "swap.txt"),
                "--save-model", str(tmp_path / "swap.rafm")] + common[:-1] + ["--holdout", "0", "--eval-group", "0"])
    assert both.exit_code == 0, both.output
    assert "the --meta file gives the feature groups" in both.stderr
    swapped = model_files.load(str(tmp_path / "swap.rafm")).vocabulary.group_of
    np.testing.assert_array_equal(swapped, 1 - group_of)


def test_rowwise_adagrad_keeps_one_sum_a_row_in_implicit_epochs():
    """Implicit row-wise AdaGrad (forced negatives): an FM epoch equals the same model with an empty,
    wider second level bit for bit (a row's sum is found by the narrowest width, forward.row_unit),
    and exactly the rows whose factors moved have moved their one sum."""
    from rafmcli.options import ADAGRAD_START
    from rafmcli.solvers.sgd import optimizer_state

    runs = []
    for ranks in ((3,), (3, 5)):
        model, vocab, row_values = tiny("fm", (3,), seed=5)
        if len(ranks) == 2:
            n = model.w.shape[0]
            two = build("rafm", "implicit", ranks, model.feature_ids, np.ones(n), 0.5, np.random.default_rng(0),
                        0.2, (0.0, 0.0))
            two.V[:], two.w[:], two.w0, two.vocabulary = model.V, model.w, model.w0, vocab
            model = two
        before = model.V.copy()
        noise = noise_tables(vocab, 0.75, 0.5)
        order, forced, K = forced_epoch(vocab, row_values, 400)
        hyper = hyper_vector()
        hyper[KS.H_LR] = hyper[KS.H_LR_DEP] = 0.05
        hyper[KS.H_EPS] = 1e-8
        lev, widths, offsets, V, w, w0 = model.kernel_model()
        state = optimizer_state("rowwise-adagrad", model)
        assert state[0].shape[0] == model.w.shape[0]  # one sum a feature's row
        KI.train_epoch(order, 0, row_values, (vocab.ptr, vocab.feat, vocab.x), noise.kernel_tuple(),
                       (lev, widths, offsets, V, w, w0), state, hyper, np.full(len(ranks), 0.1),
                       config(K, KI.SOFTMAX, True, model.nested, KS.CASCADE), rng_streams(0, 1), KS.ROWWISE, forced)
        moved = np.any(V.reshape(-1, 3) != before.reshape(-1, 3), axis=1)
        np.testing.assert_array_equal(state[0] != ADAGRAD_START, moved)
        assert moved.sum() >= 5
        runs.append((V.copy(), w.copy(), w0.copy(), *(a.copy() for a in state)))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_recommend_k_is_capped_at_the_group_s_values(sample, tmp_path, monkeypatch):
    """-k 1000000 allocated rows x k (13 GB for 72,801 lines) to pad past the group's values: k is
    capped at their number, and the output is that of -k equal to it."""
    from rafmcli.kernels import recommend
    from rafmcli.model import files as model_files

    meta = os.path.join(os.path.dirname(sample("implicit.train")), "implicit.meta")
    model = tmp_path / "m.rafm"
    assert run(["train", "--task", "implicit", "--ranks", "2,4", "--train", sample("implicit.train"), "--meta", meta,
                "--iter", "1", "--holdout", "0", "--quiet", "--save-model", str(model)]).exit_code == 0
    lo, hi = model_files.load(str(model)).vocabulary.candidates(1)
    asked, top_k = [], recommend.top_k

    def spy(*args):
        asked.append(args[12])  # k
        return top_k(*args)

    monkeypatch.setattr(recommend, "top_k", spy)
    capped, exact = (run(["recommend", "--model", str(model), "--group", "1", "-k", str(k), sample("implicit.test")])
                     for k in (1_000_000, hi - lo))
    assert asked == [hi - lo, hi - lo] and capped.exit_code == 0 and capped.output == exact.output


@pytest.mark.parametrize("label", ["0", "-1"])
def test_predict_metrics_refuse_rows_that_are_not_positives(sample, tmp_path, label):
    """Implicit rows are positives: predict --metrics ranked rows labelled 0 or -1 as positives (the
    same loss, AUC and HR@10 as the real file), where train refuses them: now the same error line."""
    meta = os.path.join(os.path.dirname(sample("implicit.train")), "implicit.meta")
    model = tmp_path / "m.rafm"
    assert run(["train", "--task", "implicit", "--ranks", "2,4", "--train", sample("implicit.train"), "--meta", meta,
                "--iter", "1", "--holdout", "0", "--quiet", "--save-model", str(model)]).exit_code == 0
    rows = open(sample("implicit.test")).read().splitlines()
    relabelled = tmp_path / "test.libfm"
    relabelled.write_text("".join(line + "\n" for line in rows[:5]) + label + " " + rows[5].split(" ", 1)[1] + "\n")
    result = run(["predict", "--model", str(model), "--metrics", "--out", str(tmp_path / "p"), str(relabelled)])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (f"Error: {relabelled}:6: implicit data holds positives only; label must "
                                              f"be > 0 ({label})")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("threads,want", [(2, 2), (1, 1), (0, 8)])
def test_validation_ranks_on_the_training_threads(sample, monkeypatch, threads, want):
    """--eval-group's ranking during training runs on --threads' threads (0: every core), as
    training does; on 8 cores (faked) --threads 2 used all 8 once the kernels left numba's pool."""
    from rafmcli import threads as T

    monkeypatch.setitem(T._CORES, "n", 8)
    used, spread = [], T.spread

    def spy(kernel, items, *args, threads=None):
        if kernel.__name__ == "_rank_chunks":
            used.append(T.resolved(threads))
        return spread(kernel, items, *args, threads=threads)

    monkeypatch.setattr(T, "spread", spy)
    meta = os.path.join(os.path.dirname(sample("implicit.train")), "implicit.meta")
    result = run(["train", "--task", "implicit", "--ranks", "2,4", "--train", sample("implicit.train"), "--meta", meta,
                  "--validation", sample("implicit.validation"), "--eval-group", "1", "--iter", "2", "--quiet",
                  "--threads", str(threads)])
    assert result.exit_code == 0, result.output
    assert used and set(used) == {want}
