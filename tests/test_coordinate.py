"""ALS and MCMC coordinate updates against naive computations from the full data.

The oracle: a model is linear in each single parameter theta, so with the
pair loop of tests/naive.py, g = y_hat(theta = 0) and h = y_hat(1) - y_hat(0)
over every row; ALS's update is then Sum (y - g) h / (Sum h^2 + lam) and the
Gibbs conditional N((alpha Sum (y - g) h + lam mu) / p, 1/p), p = alpha Sum h^2 + lam.
"""

import math

import numpy as np
import pytest
from naive import pair_loop

from rafmcli.io.reader import Dataset, feature_counts
from rafmcli.kernels import coordinate as K
from rafmcli.kernels import read_only
from rafmcli.options import Options
from rafmcli.solvers import coordinate as C

MODELS = [("fm", (3,)), ("rafm", (2, 9)), ("difacto", (2, 9)), ("rafm", (2, 3, 9))]


def dataset(rows, labels):
    """A Dataset from [[(id, value), ...], ...] rows."""
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.array([i for r in rows for i, _ in sorted(r)], dtype=np.int32)
    values = np.array([v for r in rows for _, v in sorted(r)], dtype=np.float32)
    ids, counts = feature_counts(indices, int(indices.max()))
    return Dataset("<test>", np.asarray(labels, dtype=np.float64), indptr, indices,
                   None if np.all(values == 1) else values, ids, counts)


def random_data(seed, n_rows=16, n_features=6, ones=False):
    """Rows of 2-4 distinct features, frequent and rare ones, values in [0.5, 1.5] (or 1)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_features + 1) ** 0.9
    p /= p.sum()
    rows = []
    for _ in range(n_rows):
        ids = rng.choice(n_features, size=rng.integers(2, 5), replace=False, p=p)
        rows.append([(int(i) * 3 + 1, 1.0 if ones else float(np.float32(rng.uniform(0.5, 1.5)))) for i in ids])
    return dataset(rows, rng.normal(3.0, 1.0, n_rows))


def naive_scores(problem):
    """y_hat of every training row by the pair loop (internal feature ids)."""
    model = problem.model
    indptr, indices, values = problem.csr
    out = []
    for r in range(indptr.shape[0] - 1):
        ids = indices[indptr[r]:indptr[r + 1]]
        vals = values[indptr[r]:indptr[r + 1]] if values.shape[0] else np.ones(ids.shape[0])
        out.append(model.w0 + float(np.dot(model.w[ids], vals))
                   + pair_loop(model.kind, list(ids), list(vals), model.levels, model.ranks, model.V))
    return np.array(out)


def linear_in(problem, array, pos):
    """(g, h) of parameter array[pos] over every row: y_hat = g + theta h."""
    keep = array[pos]
    array[pos] = 0.0
    g = naive_scores(problem)
    array[pos] = 1.0
    h = naive_scores(problem) - g
    array[pos] = keep
    return g, h


def coordinates(problem):
    """Every factor coordinate in sweep order: (position in V, feature, level, f)."""
    model, sched = problem.model, problem.sched
    out = []
    for l in range(len(model.ranks)):
        width = model.widths[l]
        feats = sched.order[sched.bounds[sched.level_classes[l], 0]:sched.bounds[sched.level_classes[l + 1] - 1, -1]]
        for f0 in range(0, width, K.BLOCK):
            for i in feats:
                for f in range(f0, min(f0 + K.BLOCK, width)):
                    out.append((model.offsets[l] + i * width + f, int(i), l, f))
    return out


def setup(kind, ranks, seed=0, groups=None, threads=1, ones=False, local_rows=None, **extra):
    """A prepared problem on random_data, features spread over every level, and its residuals."""
    data = random_data(seed, ones=ones)
    opts = Options(task="r", model=kind, ranks=ranks, init_stdev=0.3, seed=seed, threads=threads, **extra)
    levels = (np.arange(data.feature_ids.shape[0]) % len(ranks) + 1).astype(np.int8)
    problem = C.prepare(data, opts, groups, (data.feature_ids, levels), use_cache=False)
    problem.model.w[:] = np.random.default_rng(seed + 1).normal(0, 0.3, problem.model.w.shape[0])
    scratch = C.Scratch.for_rows(data.n_rows, threads, local_rows)
    scratch.e[:] = problem.labels - naive_scores(problem)
    return problem, scratch


def group_priors(problem, seed, dependent_rows=False):
    """Random priors per group: means, precisions (linear [G], factors [G, coords]; with
    ``dependent_rows``, [2G, coords]: rows G.. for RaFM's dependent vectors)."""
    rng = np.random.default_rng(seed)
    G, n_coords = problem.n_groups, int(problem.model.widths.sum())
    rows = 2 * G if dependent_rows else G
    return C.Priors(rng.normal(0, 0.2, G), rng.uniform(0.5, 3.0, G), rng.normal(0, 0.2, (rows, n_coords)),
                    rng.uniform(0.5, 3.0, (rows, n_coords)))


def prior_row(problem, priors, i, l):
    """The prior row of v_i^(l): its group's, or with dependent rows (RaFM, l below i's top level
    k_i, levels 1-based in model.levels) row G + its group."""
    g = int(problem.group[i])
    split = priors.mu_v.shape[0] > problem.n_groups
    return g + problem.n_groups if split and problem.model.nested and problem.model.levels[i] > l + 1 else g


def coord_index(problem, level, f):
    return int(problem.model.widths[:level].sum()) + f


def kernel_h(problem, i, l, f):
    """h of coordinate f of v_i^(l) over the feature's rows: the kernels' row sums and level rule."""
    model = problem.model
    widths, offsets, sizes, nested, V = problem.layout
    n = problem.labels.shape[0]
    size_next = sizes[l + 1] if nested and l + 1 < len(widths) else 0
    S, T = np.zeros((n, K.BLOCK)), np.zeros((n, K.BLOCK))
    K.block_sums(problem.csr, V, offsets[l], widths[l], f, 1, sizes[l], size_next, S, T, 0, n)
    colptr, rows, values, col_of = problem.csc
    a, z = colptr[col_of[i]], colptr[col_of[i] + 1]
    x = values[a:z] if values.shape[0] else np.ones(z - a)
    v = float(model.V[offsets[l] + i * widths[l] + f])
    return rows[a:z], np.array([K.coordinate_h(float(x[k]), S[r, 0], T[r, 0], v, bool(i < size_next))
                                for k, r in enumerate(rows[a:z])])


@pytest.mark.parametrize("kind,ranks", MODELS)
def test_every_h_matches_the_pair_loop(kind, ranks):
    """h of every factor coordinate, from the kernels' S, T and level rule, equals the pair loop's."""
    problem, _ = setup(kind, ranks)
    assert problem.model.levels.max() == len(ranks)  # every level is used
    for pos, i, l, f in coordinates(problem):
        rows, h = kernel_h(problem, i, l, f)
        _, naive_h = linear_in(problem, problem.model.V, pos)
        np.testing.assert_allclose(h, naive_h[rows], rtol=1e-5, atol=1e-6)
        others = np.setdiff1d(np.arange(problem.labels.shape[0]), rows)
        np.testing.assert_allclose(naive_h[others], 0.0, atol=1e-6)  # h vanishes off the feature's rows


def naive_sweep(problem, priors, alpha, draw, keys):
    """The coordinate sweep done naively: every conditional from the full data, in sweep order."""
    model, group = problem.model, problem.group
    y = problem.labels
    moments = []
    for i in problem.sched.order[:model.sizes[0]]:
        g, h = linear_in(problem, model.w, i)
        p = alpha * (h @ h) + priors.lam_w[group[i]]
        mean = (alpha * ((y - g) @ h) + priors.lam_w[group[i]] * priors.mu_w[group[i]]) / p
        model.w[i] = np.float32(mean + (K.normals(keys[0], i + 1)[i] / math.sqrt(p) if draw else 0.0))
        moments.append((mean, 1 / p))
    for pos, i, l, f in coordinates(problem):
        g, h = linear_in(problem, model.V, pos)
        c = coord_index(problem, l, f)
        row = prior_row(problem, priors, i, l)
        lam, mu = priors.lam_v[row, c], priors.mu_v[row, c]
        p = alpha * (h @ h) + lam
        mean = (alpha * ((y - g) @ h) + lam * mu) / p
        model.V[pos] = np.float32(mean + (K.normals(keys[1], pos + 1)[pos] / math.sqrt(p) if draw else 0.0))
        moments.append((mean, 1 / p))
    return moments


def naive_gaps(problem, l):
    """B_{1,l+2} - B_{1,l+1} of every row (levels 1-based in the pair loop): R_l, teacher minus student."""
    model = problem.model
    indptr, indices, values = problem.csr
    out = []
    for r in range(indptr.shape[0] - 1):
        ids = list(indices[indptr[r]:indptr[r + 1]])
        vals = list(values[indptr[r]:indptr[r + 1]]) if values.shape[0] else [1.0] * len(ids)
        out.append(pair_loop("rafm", ids, vals, model.levels, model.ranks, model.V, cap=l + 2)
                   - pair_loop("rafm", ids, vals, model.levels, model.ranks, model.V, cap=l + 1))
    return np.array(out)


def naive_distilled_sweep(problem, priors, alpha, draw, keys, c):
    """The factor sweep with RaFM's distillation term, naively: a dependent coordinate of level l
    (feature above l) has the density's extra factor exp(-c alpha/2 Sum R_l^2), R_l = g_d + theta h_d
    from the pair loop; the other coordinates (the teachers) have none."""
    model = problem.model
    y = problem.labels
    for pos, i, l, f in coordinates(problem):
        g, h = linear_in(problem, model.V, pos)
        cidx = coord_index(problem, l, f)
        row = prior_row(problem, priors, i, l)
        lam, mu = priors.lam_v[row, cidx], priors.mu_v[row, cidx]
        p = alpha * (h @ h) + lam
        num = alpha * ((y - g) @ h) + lam * mu
        if model.levels[i] > l + 1:
            keep = model.V[pos]
            model.V[pos] = 0.0
            g_d = naive_gaps(problem, l)
            model.V[pos] = 1.0
            h_d = naive_gaps(problem, l) - g_d
            model.V[pos] = keep
            p += c * alpha * (h_d @ h_d)
            num -= c * alpha * (g_d @ h_d)
        model.V[pos] = np.float32(num / p + (K.normals(keys[1], pos + 1)[pos] / math.sqrt(p) if draw else 0.0))


@pytest.mark.parametrize("ranks", [(2, 9), (2, 3, 9)])
@pytest.mark.parametrize("draw,local_rows", [(False, 4096), (True, 3)], ids=["als-gathered", "mcmc-streamed"])
@pytest.mark.parametrize("dependent_rows", [False, True], ids=["group-means", "dependent-means"])
def test_distilled_sweep_equals_naive_updates(ranks, draw, local_rows, dependent_rows):
    """RaFM's dependent coordinates with the distillation term: each update against the full-data
    conditional (pair loop), and the cached residuals R_l against the pair loop's B_{1,l+1} - B_{1,l}.
    With dependent rows, a dependent vector's prior is row G + g (MCMC with shared precisions)."""
    problem, scratch = setup("rafm", ranks, local_rows=local_rows)
    reference, _ = setup("rafm", ranks)
    scratch = C.Scratch.for_rows(problem.labels.shape[0], 1, local_rows, distilled_levels=len(ranks) - 1)
    scratch.start(problem, problem.labels - naive_scores(problem))
    for l in range(len(ranks) - 1):
        np.testing.assert_allclose(scratch.R[:, l], naive_gaps(problem, l), atol=1e-6)
    priors = group_priors(problem, 5, dependent_rows)
    alpha, keys, c = 1.7, (11, 12), 2.5
    assert C.sweep(problem, priors, alpha, scratch, draw, keys, C.Workers(1), linear=False, distil=c) == 0
    naive_distilled_sweep(reference, priors, alpha, draw, keys, c)
    np.testing.assert_allclose(problem.model.V, reference.model.V, rtol=2e-5, atol=2e-6)
    for l in range(len(ranks) - 1):
        np.testing.assert_allclose(scratch.R[:, l], naive_gaps(problem, l), atol=1e-5)
    np.testing.assert_allclose(scratch.e, problem.labels - naive_scores(problem), atol=1e-5)


def groups_of(problem_data_ids, n_groups):
    from rafmcli.io.groups import GroupAssignment

    ids = np.asarray(problem_data_ids)
    return GroupAssignment((ids % n_groups).astype(np.int32), n_groups)


@pytest.mark.parametrize("kind,ranks", MODELS)
@pytest.mark.parametrize("draw,local_rows", [(False, 4096), (True, 3)], ids=["als-gathered", "mcmc-streamed"])
def test_sweep_equals_naive_coordinate_updates(kind, ranks, draw, local_rows):
    """ALS: each update is the closed-form minimiser in its coordinate. MCMC: each draw is the
    conditional mean plus the conditional standard deviation times the generator's normal."""
    data = random_data(0)
    groups = groups_of(data.feature_ids, 3)
    problem, scratch = setup(kind, ranks, groups=groups, local_rows=local_rows)
    reference, _ = setup(kind, ranks, groups=groups)
    priors = group_priors(problem, 5)
    alpha, keys = 1.7, (11, 12)
    bad = C.sweep(problem, priors, alpha, scratch, draw, keys, C.Workers(1))
    naive_sweep(reference, priors, alpha, draw, keys)
    assert bad == 0
    np.testing.assert_allclose(problem.model.w, reference.model.w, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(problem.model.V, reference.model.V, rtol=2e-5, atol=2e-6)
    # the cached residuals follow the parameters
    np.testing.assert_allclose(scratch.e, problem.labels - naive_scores(problem), atol=1e-5)


def objective(problem, lam_w, lam_v):
    e = problem.labels - naive_scores(problem)
    model = problem.model
    penalty = lam_w * float(np.sum(np.square(model.w, dtype=np.float64)))
    penalty += lam_v * float(np.sum(np.square(model.V, dtype=np.float64)))
    return 0.5 * float(e @ e) + 0.5 * penalty


@pytest.mark.parametrize("kind,ranks", MODELS[:3])
def test_als_never_increases_the_training_objective(kind, ranks):
    problem, scratch = setup(kind, ranks)
    priors = C.fixed_priors(C.Regularisation(0.0, np.array([0.3]), np.array([[0.2] * len(ranks)])),
                            problem.model.widths)
    values = [objective(problem, 0.3, 0.2)]
    for sweep_no in range(6):
        scratch.e[:] = problem.labels - naive_scores(problem)
        C.sweep(problem, priors, 1.0, scratch, False, (1, 2), C.Workers(1))
        values.append(objective(problem, 0.3, 0.2))
    assert all(b <= a * (1 + 1e-6) for a, b in zip(values, values[1:])), values
    assert values[-1] < 0.5 * values[0]


def test_als_recovers_a_planted_model():
    """Data made by a planted FM(2) without noise: ALS fits it and predicts unseen pairs."""
    rng = np.random.default_rng(3)
    users, items = 30, 20
    U = rng.normal(0, 1, (users, 2))
    W = rng.normal(0, 1, (items, 2))
    pairs = [(u, i) for u in range(users) for i in range(items)]
    rng.shuffle(pairs)
    rows = [[(u, 1.0), (users + i, 1.0)] for u, i in pairs]
    y = np.array([U[u] @ W[i] for u, i in pairs])
    train = dataset(rows[:450], y[:450])
    test = dataset(rows[450:], y[450:])
    # from a few percent of random starts ALS settles in a poor local optimum; seed 2 is not one
    opts = Options(task="r", model="fm", ranks=(2,), method="als", iters=300, init_stdev=0.5,
                   reg_bias=0.0, reg_linear=1e-4, reg_factors=(1e-4,), holdout=0.0, seed=2)
    result = C.train(train, opts, quiet=True, use_cache=False)
    from rafmcli.predict import predict_dataset

    result.model.target_min, result.model.target_max = -np.inf, np.inf  # no clipping
    fit = predict_dataset(result.model, train)[0]
    assert np.sqrt(np.mean((fit - y[:450]) ** 2)) < 1e-3
    assert np.sqrt(np.mean((predict_dataset(result.model, test)[0] - y[450:]) ** 2)) < 1e-2


def test_gibbs_posterior_matches_numerical_integration():
    """y = v0 v1 + noise, fixed alpha and priors: the sampler's mean and variance of v0 match
    the posterior integrated on a grid."""
    y = np.array([1.2, 0.8, 1.5, 0.3, 1.0])
    data = dataset([[(0, 1.0), (1, 1.0)] for _ in y], y)
    opts = Options(task="r", model="fm", ranks=(1,), init_stdev=0.5, seed=4, bias=False, linear=False)
    problem = C.prepare(data, opts, use_cache=False)
    alpha, mu, lam = 2.0, 0.4, 1.0
    priors = C.Priors(np.zeros(1), np.ones(1), np.full((1, 1), mu), np.full((1, 1), lam))
    scratch = C.Scratch.for_rows(len(y))
    scratch.e[:] = y - naive_scores(problem)
    workers = C.Workers(1)
    draws = []
    for it in range(12000):
        C.sweep(problem, priors, alpha, scratch, True, (0, 1000 + it), workers, linear=False)
        draws.append(problem.model.V[0])  # V is [v0, v1] (both features on level 1)
    draws = np.array(draws[500:], dtype=np.float64)
    grid = np.linspace(-4, 4, 801)
    a, b = np.meshgrid(grid, grid, indexing="ij")
    log_post = (-0.5 * alpha * ((y[:, None, None] - a * b) ** 2).sum(0)
                - 0.5 * lam * ((a - mu) ** 2 + (b - mu) ** 2))
    post = np.exp(log_post - log_post.max())
    marginal = post.sum(1) / post.sum()
    mean = float((marginal * grid).sum())
    var = float((marginal * (grid - mean) ** 2).sum())
    batches = draws[: len(draws) // 50 * 50].reshape(50, -1).mean(1)  # batch means for the MC error
    stderr = batches.std(ddof=1) / np.sqrt(50)
    assert abs(draws.mean() - mean) < 4 * stderr + 0.01, (draws.mean(), mean, stderr)
    assert abs(draws.var() - var) < 0.1 * var, (draws.var(), var)


def test_hyperparameter_draws_have_their_conditional_moments():
    """lam ~ Gamma((a0 + n + 1)/2, (g0 + b0 (mu - mu0)^2 + Sum (theta - mu)^2)/2), then
    mu ~ N((Sum theta + b0 mu0)/(n + b0), 1/((n + b0) lam)); alpha ~ Gamma((a0 + n)/2, (g0 + SSE)/2)."""
    rng = np.random.default_rng(0)
    theta = np.array([0.5, 1.5, 1.0, 2.0])
    N = 200000
    count, total, square = (np.full(N, v) for v in (len(theta), theta.sum(), (theta ** 2).sum()))
    mu, lam = np.full(N, 0.3), np.zeros(N)
    C.draw_hyper(rng, count, total, square, mu, lam)
    shape = (C.ALPHA_0 + 4 + 1) / 2
    rate = (C.GAMMA_0 + C.BETA_0 * (0.3 - C.MU_0) ** 2 + ((theta - 0.3) ** 2).sum()) / 2
    assert lam.mean() == pytest.approx(shape / rate, rel=0.01)
    assert lam.var() == pytest.approx(shape / rate ** 2, rel=0.03)
    assert mu.mean() == pytest.approx((theta.sum() + C.BETA_0 * C.MU_0) / (4 + C.BETA_0), abs=0.01)
    assert mu.var() == pytest.approx(rate / (shape - 1) / (4 + C.BETA_0), rel=0.03)  # E[1/((n+b0) lam)]
    alphas = C.draw_alpha(rng, np.full(N, 37.0), 50)
    assert alphas.mean() == pytest.approx((C.ALPHA_0 + 50) / (C.GAMMA_0 + 37.0), rel=0.01)
    assert alphas.var() == pytest.approx((C.ALPHA_0 + 50) / 2 / ((C.GAMMA_0 + 37.0) / 2) ** 2, rel=0.03)


def test_shared_precision_draws_have_their_conditional_moments():
    """Groups sharing lam (per coordinate): lam ~ Gamma((a0 + Sum_g (n_g + 1))/2,
    (g0 + Sum_g [b0 (mu_g - mu0)^2 + Sum_{i in g} (theta_i - mu_g)^2])/2), the same draw in every
    group; then each group's mu_g ~ N((Sum_g theta + b0 mu0)/(n_g + b0), 1/((n_g + b0) lam))."""
    rng = np.random.default_rng(3)
    groups = [np.array([0.5, 1.5, 1.0, 2.0]), np.array([-3.0])]  # a group of one feature among them
    N = 200000
    stats = [(len(t), t.sum(), (t ** 2).sum()) for t in groups]
    count, total, square = (np.repeat(np.array([s[k] for s in stats], dtype=float)[:, None], N, 1) for k in range(3))
    old_mu = np.array([0.3, -1.0])
    mu, lam = np.repeat(old_mu[:, None], N, 1), np.zeros((2, N))
    C.draw_hyper(rng, count, total, square, mu, lam, shared=True)
    np.testing.assert_array_equal(lam[0], lam[1])
    shape = (C.ALPHA_0 + sum(len(t) + 1 for t in groups)) / 2
    rate = (C.GAMMA_0 + sum(C.BETA_0 * (m - C.MU_0) ** 2 + ((t - m) ** 2).sum() for t, m in zip(groups, old_mu))) / 2
    assert lam[0].mean() == pytest.approx(shape / rate, rel=0.01)
    assert lam[0].var() == pytest.approx(shape / rate ** 2, rel=0.03)
    for g, t in enumerate(groups):
        assert mu[g].mean() == pytest.approx((t.sum() + C.BETA_0 * C.MU_0) / (len(t) + C.BETA_0), abs=0.01)
        assert mu[g].var() == pytest.approx(rate / (shape - 1) / (len(t) + C.BETA_0), rel=0.03)


def test_one_group_draws_the_same_with_a_shared_precision():
    """With one group the shared and the per-group draws are the same, bit for bit."""
    count, total, square = np.full((1, 3), 5.0), np.array([[1.0, -2.0, 0.5]]), np.array([[3.0, 4.0, 1.0]])
    out = []
    for shared in (True, False):
        mu, lam = np.full((1, 3), 0.2), np.zeros((1, 3))
        C.draw_hyper(np.random.default_rng(9), count, total, square, mu, lam, shared)
        out.append((mu, lam))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])


@pytest.mark.parametrize("score", [-2.5, -0.3, 0.4, 3.0])
@pytest.mark.parametrize("positive", [True, False])
def test_probit_latent_draws_are_truncated_normals(score, positive):
    """z ~ N(score, 1) truncated to z > 0 (positive) or z <= 0: e = z - score has the truncated
    normal's mean and variance; ALS takes the mean itself."""
    from statistics import NormalDist

    N = 200000
    scores = np.full(N, score)
    labels = read_only(np.full(N, 1.0 if positive else -1.0))[0]  # as the solver passes them
    e = np.empty(N)
    K.probit_residuals(scores, labels, True, 7, e)
    a = -score if positive else score  # standardised bound: X >= a, with e = X (positive) or -X
    nd = NormalDist()
    mills = nd.pdf(a) / (1 - nd.cdf(a))
    sign = 1 if positive else -1
    assert np.all(sign * e >= a)
    assert e.mean() == pytest.approx(sign * mills, abs=0.01)
    assert e.var() == pytest.approx(1 + a * mills - mills ** 2, rel=0.03)
    K.probit_residuals(scores[:1], labels[:1], False, 7, e[:1])
    assert e[0] == pytest.approx(sign * mills, rel=1e-9)


def one_feature_rows(targets, seed):
    """A row per (feature, repeat), holding only that feature; label = its target + noise."""
    rng = np.random.default_rng(seed)
    rows, y = [], []
    for feature, target in enumerate(targets):
        for _ in range(20):
            rows.append([(feature, 1.0)])
            y.append(target + rng.normal(0, 0.3))
    return dataset(rows, y)


def test_meta_groups_get_their_own_prior_mean():
    """Features 0-9 (group 0) have weights near 2, features 10-19 (group 1) near -1: with the
    groups, each group's prior mean follows its own features; moving group 0's features moves
    only group 0's mean; one group pools them."""
    from rafmcli.io.groups import GroupAssignment, single_group

    rng = np.random.default_rng(1)
    base = np.concatenate([2 + rng.normal(0, 0.2, 10), -1 + rng.normal(0, 0.2, 10)])
    groups = GroupAssignment(np.repeat(np.arange(2, dtype=np.int32), 10), 2)
    opts = Options(task="r", model="fm", ranks=(1,), method="mcmc", iters=60, bias=False, holdout=0.0, seed=2)
    means = []
    for shift in (0.0, 3.0):
        data = one_feature_rows(base + np.repeat([shift, 0.0], 10), 3)
        result = C.train(data, opts, groups=groups, quiet=True, use_cache=False)
        means.append(result.priors.mu_w)
    np.testing.assert_allclose(means[0], [2.0, -1.0], atol=0.4)
    np.testing.assert_allclose(means[1] - means[0], [3.0 * 10 / (10 + C.BETA_0), 0.0], atol=0.5)  # mu_g's mean
    data = one_feature_rows(base, 3)
    pooled = C.train(data, opts, groups=single_group(20), quiet=True, use_cache=False)
    assert pooled.priors.mu_w.shape == (1,)
    assert pooled.priors.mu_w[0] == pytest.approx(0.5, abs=0.5)


@pytest.mark.parametrize("dep_row", [0, 3])
def test_group_moments_count_each_vector_in_its_prior_row(dep_row):
    """Count, Sum v and Sum v^2 per prior row and coordinate against a loop over the vectors:
    v_i^(l) is in row group[i], or with ``dep_row`` and l below i's top level, row group[i] + dep_row."""
    groups = groups_of(random_data(0).feature_ids, 3)
    problem, _ = setup("rafm", (2, 3, 9), groups=groups)
    m = problem.model
    got = K.group_moments(m.V, m.widths, m.offsets, m.sizes, problem.group, 3, m.nested, dep_row)
    want = np.zeros((3, 3 + dep_row, int(m.widths.sum())))
    for l, width in enumerate(m.widths):
        c = coord_index(problem, l, 0)
        for i in np.flatnonzero(m.levels >= l + 1):
            row = problem.group[i] + (dep_row if m.levels[i] > l + 1 else 0)
            v = m.V[m.offsets[l] + i * width:m.offsets[l] + (i + 1) * width].astype(np.float64)
            want[:, row, c:c + width] += [np.ones(width), v, v * v]
    assert dep_row == 0 or want[0, 3:].sum() > 0  # there are dependent vectors
    for k in range(3):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-12)


def test_dependent_vectors_get_prior_means_of_their_own():
    """RaFM MCMC with shared precisions: rows G + g hold the dependent vectors' prior means, which
    follow those vectors (all at 3: mu's conditional mean 3 n/(n + b0)) while the top vectors' rows
    stay at theirs (0); one lam per coordinate. libFM's per-group precisions, FM and ALS keep a row
    per group."""
    groups = groups_of(random_data(0).feature_ids, 2)
    problem, _ = setup("rafm", (2, 9), groups=groups)
    m = problem.model
    dependent = np.zeros(m.V.shape[0], dtype=bool)
    dependent[m.offsets[0]:m.offsets[0] + m.sizes[1] * m.widths[0]] = True  # level 0 of the level-2 features
    m.V[:] = np.where(dependent, 3.0, 0.0)
    count, total, square = K.group_moments(m.V, m.widths, m.offsets, m.sizes, problem.group, 2, m.nested, 2)
    N = 20000
    mu, lam = np.zeros((4, N, m.widths.sum())), np.zeros((4, N, m.widths.sum()))
    C.draw_hyper(np.random.default_rng(4), *(np.repeat(a[:, None], N, 1) for a in (count, total, square)), mu, lam,
                 shared=True)
    np.testing.assert_array_equal(lam[0], lam[3])
    n = count[2:, 0]
    np.testing.assert_allclose(mu[2:, :, 0].mean(axis=1), 3.0 * n / (n + C.BETA_0), atol=0.05)  # level 0, dependent
    np.testing.assert_allclose(mu[:2, :, :].mean(axis=1), 0.0, atol=0.05)
    data = random_data(0)
    for method, model, extra, rows in (("mcmc", "rafm", {}, 4), ("mcmc", "rafm", {"shared_precision": False}, 2),
                                       ("mcmc", "fm", {}, 2), ("als", "rafm", {}, 2)):
        opts = Options(task="r", model=model, ranks=(2, 9) if model == "rafm" else (3,), method=method, iters=2,
                       holdout=0.0, seed=1, **extra)
        result = C.train(data, opts, groups=groups, quiet=True, use_cache=False)
        assert result.priors.mu_v.shape[0] == rows, (method, model, extra)


def test_threads_give_the_same_chain_bit_for_bit(threads_on_small_data):
    """Features of one colour share no row, draws are keyed by parameter: 1 and 3 threads agree."""
    rng = np.random.default_rng(5)
    rows = [[(int(u), 1.0), (100 + int(i), 1.0), (200 + int(c), 0.5)]
            for u, i, c in zip(rng.integers(0, 60, 600), rng.integers(0, 40, 600), rng.integers(0, 5, 600))]
    data = dataset(rows, rng.normal(3, 1, 600))
    models = []
    for threads in (1, 3):
        opts = Options(task="r", model="rafm", ranks=(2, 9), method="mcmc", iters=5, holdout=0.0, threads=threads)
        result = C.train(data, opts, test=data, quiet=True, use_cache=False)
        models.append((result.model, result.test_predictions))
    assert np.array_equal(models[0][0].V, models[1][0].V)
    assert np.array_equal(models[0][0].w, models[1][0].w)
    assert np.array_equal(models[0][1], models[1][1])


def test_small_data_samples_on_one_thread(monkeypatch):
    """ALS and MCMC use at most one thread per MIN_NONZEROS_PER_THREAD non-zeros: every core
    (0) on 1,800 non-zeros is one thread; with the minimum lowered, the cores."""
    from rafmcli import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    rng = np.random.default_rng(2)
    data = dataset([[(int(u), 1.0), (50 + int(i), 1.0), (90 + int(c), 0.5)]
                    for u, i, c in zip(rng.integers(0, 50, 600), rng.integers(0, 40, 600), rng.integers(0, 5, 600))],
                   rng.normal(3, 1, 600))
    opts = Options(task="r", model="fm", ranks=(4,), method="mcmc", threads=0)
    assert C.coordinate_threads(opts, data) == 1
    monkeypatch.setattr(C, "MIN_NONZEROS_PER_THREAD", 600)
    assert C.coordinate_threads(opts, data) == 3
