"""Every training step pinned: objective -> gradient -> optimizer step, one row at a time.

The chain, each link checked against the one before, all references float64
(tests/naive.py):
1. ``naive.row_gradient`` (formula from the pair loop) equals finite
   differences of ``naive.objective``, each variant's objective with its
   stop-gradients, per parameter group;
2. the kernel's gradient (an SGD step at learning rate 1) equals ``naive.row_gradient``;
3. one SGD, AdaGrad and Adam step of the kernel equals the closed form
   ``naive.optimizer_step`` of that gradient, from a random mid-training
   optimizer state (a fresh Adam state makes the first step lr sign(g), blind
   to the gradient's size), with L2, values != 1 and rho_d != rho_f; and the
   first AdaGrad step from a fresh state, whose sums start at ADAGRAD_START;
4. one row-wise AdaGrad step: each touched factor row's one sum grows by the mean of
   its squared reference gradient and the row steps on it.
"""

import numpy as np
import pytest
from conftest import cli_rows
from naive import dependent_mask, linear, objective, optimizer_step, pair_loop, row_gradient

from rafmcli.kernels import sgd as K
from rafmcli.model.layout import build
from rafmcli.options import ADAGRAD_START
from rafmcli.solvers.sgd import optimizer_state

LR, LR_DEP, WEIGHT = 0.05, 0.2, 0.7
REG = (0.05, 0.1, (0.2, 0.1, 0.3))  # bias, linear, pairwise per level
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
STEP0 = 6  # the row is optimizer step 7 (Adam's bias correction)
IDS = np.array([0, 1, 4, 6, 8, 10])  # internal ids: levels 3, 3, 2, 2, 1, 1 below
VALS = np.array([1.5, -0.5, 2.0, 0.75, -1.25, 0.6])
LEVELS = np.array([3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1])
METHODS = {"sgd": K.SGD, "adagrad": K.ADAGRAD, "adam": K.ADAM, "rowwise-adagrad": K.ROWWISE}
VARIANTS = {"paper": K.PAPER, "authors": K.AUTHORS, "cascade": K.CASCADE}
# every model, and RaFM with every variant, with two and three levels
CASES = [("fm", (4,), "paper"), ("difacto", (2, 3, 5), "paper")] + [
    ("rafm", ranks, variant) for variant in VARIANTS for ranks in ((2, 4), (2, 3, 5))]


def make_model(kind, ranks, task, seed=5):
    rng = np.random.default_rng(seed)
    m = len(ranks)
    levels = np.minimum(LEVELS, m)
    model = build(kind, task, ranks, np.arange(levels.shape[0]), levels, 0.5, rng, 0.3, (-1e9, 1e9))
    model.w[:] = rng.normal(0, 0.5, levels.shape[0])
    return model


def label(task):
    return 0.7 if task == "r" else 1.0


def reg_levels(m):
    return REG[2][:m]


def kernel_run(model, y, variant, method, state, y_range=(-1e9, 1e9), rates=(LR, LR_DEP)):
    """One row through the training kernel; updates model and state in place."""
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    hyper = np.zeros(K.N_HYPER)
    hyper[K.H_LR], hyper[K.H_LR_DEP] = rates
    hyper[K.H_REG0], hyper[K.H_REG1] = REG[0], REG[1]
    hyper[K.H_DEP_WEIGHT] = WEIGHT
    hyper[K.H_BETA1], hyper[K.H_BETA2], hyper[K.H_EPS] = BETA1, BETA2, EPS
    hyper[K.H_YMIN], hyper[K.H_YMAX] = y_range
    hyper[K.H_BIAS_ON] = hyper[K.H_LINEAR_ON] = 1.0
    data = cli_rows([0, len(IDS)], IDS.astype(np.int32), VALS, [y])
    reg_v = np.asarray(reg_levels(len(model.ranks)), dtype=np.float64)
    task = K.TASK_REGRESSION if model.task == "r" else K.TASK_CLASSIFICATION
    K.train_epoch(np.zeros(1, np.int64), STEP0, data, (lev, widths, offsets, V, w, w0), state, hyper,
                  reg_v, task, model.nested, VARIANTS[variant], method)
    model.w0 = float(w0[0])


def group_of(model, j):
    """Parameter group of factor coordinate j: "free" or ("dependent", l)."""
    widths, offsets = model.widths, model.offsets
    level = int(np.searchsorted(offsets, j, side="right"))
    feature = (j - offsets[level - 1]) // widths[level - 1]
    if model.kind == "rafm" and level < model.levels[feature]:
        return ("dependent", level)
    return ("free",)


@pytest.mark.parametrize("task", ["r", "c"])
@pytest.mark.parametrize("kind,ranks,variant", CASES)
def test_gradient_is_the_objectives(task, kind, ranks, variant):
    """naive.row_gradient = finite differences of the variant's objective, each parameter group."""
    model = make_model(kind, ranks, task)
    m = len(ranks)
    y = label(task)
    theta0 = (model.w0, model.w.astype(np.float64), model.V.astype(np.float64))
    d0, dw, dV = row_gradient(model, IDS, VALS, y, variant, WEIGHT, (REG[0], REG[1], reg_levels(m)))
    h = 1e-6

    def central(group, perturb, l2):
        values = []
        for sign in (1, -1):
            theta = perturb(sign * h)
            values.append(objective(model, theta, theta0, IDS, VALS, y, variant, WEIGHT, group) + l2(theta))
        return (values[0] - values[1]) / (2 * h)

    fd = central(("bias",), lambda e: (theta0[0] + e, theta0[1], theta0[2]), lambda t: 0.5 * REG[0] * t[0] ** 2)
    assert d0 == pytest.approx(fd, rel=1e-6, abs=1e-8), "bias"
    for i in IDS:
        def shift_w(e, i=i):
            w = theta0[1].copy()
            w[i] += e
            return theta0[0], w, theta0[2]
        fd = central(("linear",), shift_w, lambda t, i=i: 0.5 * REG[1] * t[1][i] ** 2)
        assert dw[i] == pytest.approx(fd, rel=1e-6, abs=1e-8), ("linear", i)
    reg_of = np.concatenate([np.full(s * w, r) for s, w, r in zip(model.sizes, model.widths, reg_levels(m))])
    touched = np.flatnonzero(dV != 0)
    groups = set()
    for j in touched:
        def shift_v(e, j=j):
            V = theta0[2].copy()
            V[j] += e
            return theta0[0], theta0[1], V
        group = group_of(model, j)
        groups.add(group[0])
        fd = central(group, shift_v, lambda t, j=j: 0.5 * reg_of[j] * t[2][j] ** 2)
        assert dV[j] == pytest.approx(fd, rel=1e-6, abs=1e-8), (j, group)
    assert groups == ({"free", "dependent"} if kind == "rafm" else {"free"})
    rows_factors = set(touched.tolist())
    assert all(dV[j] == 0 for j in range(dV.shape[0]) if j not in rows_factors)


@pytest.mark.parametrize("task", ["r", "c"])
@pytest.mark.parametrize("kind,ranks,variant", CASES)
def test_kernel_gradient_equals_reference(task, kind, ranks, variant):
    model = make_model(kind, ranks, task)
    y = label(task)
    want = row_gradient(model, IDS, VALS, y, variant, WEIGHT, (REG[0], REG[1], reg_levels(len(ranks))))
    before = (model.w0, model.w.astype(np.float64), model.V.astype(np.float64))
    # the gradient is the change of one SGD step at learning rates 1 (as the serial loop steps every
    # parameter from the row's forward pass: no parameter's step sees another's), float32 steps
    # exact to the rounding of the new values; the training loop's own kernel, compiled anyway
    kernel_run(model, y, variant, K.SGD, optimizer_state("sgd", model), rates=(1.0, 1.0))
    d0, dw, dV = (b - np.asarray(a, np.float64) for b, a in zip(before, (model.w0, model.w, model.V)))
    assert d0 == pytest.approx(want[0], rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(dw, want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dV, want[2], rtol=1e-4, atol=2e-6)
    assert np.all((dV == 0) == (want[2] == 0))


def random_state(method, model, rng):
    """Optimizer state mid-training: (accV1, accV2, accw1, accw2, acc0) as the solver lays it out."""
    nv, nw = model.V.shape[0], model.w.shape[0]
    if method == "sgd":
        return (np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, np.float32),
                np.zeros(0, np.float32), np.zeros(2))
    if method == "adagrad":
        return (rng.uniform(0.05, 1.0, nv).astype(np.float32), np.zeros(0, np.float32),
                rng.uniform(0.05, 1.0, nw).astype(np.float32), np.zeros(0, np.float32),
                np.array([rng.uniform(0.05, 1.0), 0.0]))
    return (rng.normal(0, 0.3, nv).astype(np.float32), rng.uniform(0.05, 0.5, nv).astype(np.float32),
            rng.normal(0, 0.3, nw).astype(np.float32), rng.uniform(0.05, 0.5, nw).astype(np.float32),
            np.array([rng.normal(0, 0.3), rng.uniform(0.05, 0.5)]))


def expected_step(method, model, state, grads, variant):
    """Closed-form new (w0, w, V) and state from the reference gradient, float64."""
    d0, dw, dV = grads
    t = STEP0 + 1
    n_state = {"sgd": 0, "adagrad": 1, "adam": 2}[method]

    def step(p, g, lr, parts):
        return optimizer_step(method, p, g, lr, parts, t, BETA1, BETA2, EPS)

    w0, s0 = step(model.w0, d0, LR, tuple(np.float64(state[4][k]) for k in range(n_state)))
    rows = IDS
    w = model.w.astype(np.float64)
    sw = [state[2].astype(np.float64), state[3].astype(np.float64)][:n_state]
    new_w, new_sw = step(w[rows], dw[rows], LR, tuple(a[rows] for a in sw))
    w[rows] = new_w
    for a, b in zip(sw, new_sw):
        a[rows] = b
    V = model.V.astype(np.float64)
    sv = [state[0].astype(np.float64), state[1].astype(np.float64)][:n_state]
    touched = np.flatnonzero(dV != 0)
    lr = np.where(dependent_mask(model)[touched] & (variant == "paper"), LR_DEP, LR)
    new_v, new_sv = step(V[touched], dV[touched], lr, tuple(a[touched] for a in sv))
    V[touched] = new_v
    for a, b in zip(sv, new_sv):
        a[touched] = b
    return w0, w, V, s0, sw, sv


@pytest.mark.parametrize("kind,ranks,variant", CASES[:3])
def test_first_adagrad_step_starts_from_the_table_sums(kind, ranks, variant):
    """A fresh AdaGrad state holds ADAGRAD_START everywhere: the first step is lr g / sqrt(start + g^2)."""
    model = make_model(kind, ranks, "r")
    grads = row_gradient(model, IDS, VALS, 0.7, variant, WEIGHT, (REG[0], REG[1], reg_levels(len(ranks))))
    nv, nw, empty = model.V.shape[0], model.w.shape[0], np.zeros(0, np.float32)
    start = (np.full(nv, ADAGRAD_START), empty, np.full(nw, ADAGRAD_START), empty, np.array([ADAGRAD_START, 0]))
    w0, w, V, s0, sw, sv = expected_step("adagrad", model, start, grads, variant)
    old = (model.w0, model.w.astype(np.float64), model.V.astype(np.float64))
    state = optimizer_state("adagrad", model)
    kernel_run(model, 0.7, variant, K.ADAGRAD, state)
    assert model.w0 - old[0] == pytest.approx(w0 - old[0], rel=1e-4)
    np.testing.assert_allclose(model.w - old[1], w - old[1], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(model.V - old[2], V - old[2], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(state[0], sv[0], rtol=1e-5)
    assert np.count_nonzero(state[0] != ADAGRAD_START) == np.count_nonzero(grads[2])


@pytest.mark.parametrize("task", ["r", "c"])
@pytest.mark.parametrize("method", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("kind,ranks,variant", CASES)
def test_one_row_step_equals_closed_form(task, method, kind, ranks, variant):
    model = make_model(kind, ranks, task)
    y = label(task)
    grads = row_gradient(model, IDS, VALS, y, variant, WEIGHT, (REG[0], REG[1], reg_levels(len(ranks))))
    state = random_state(method, model, np.random.default_rng(9))
    w0, w, V, s0, sw, sv = expected_step(method, model, state, grads, variant)
    old = (model.w0, model.w.astype(np.float64), model.V.astype(np.float64))
    kernel_run(model, y, variant, METHODS[method], state)
    # compare the steps taken (new - old): float32 parameters, float64 references
    assert model.w0 - old[0] == pytest.approx(w0 - old[0], rel=1e-4, abs=1e-9)
    np.testing.assert_allclose(model.w - old[1], w - old[1], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(model.V - old[2], V - old[2], rtol=1e-3, atol=1e-7)
    for k, want in enumerate(s0):
        assert state[4][k] == pytest.approx(want, rel=1e-4)
    for got, want in zip(state[2:4], sw):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)
    for got, want in zip(state[0:2], sv):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def rowwise_expected(model, state, grads, variant):
    """Closed-form row-wise AdaGrad step, float64: (w0, w, V, bias sum, w sums, row sums, rows touched).
    A factor row v of a feature in the row: G += mean_f g_f^2, v -= lr g / (sqrt(G) + eps), G at
    Model.rowwise_index; the bias and each linear weight take AdaGrad's step (a row of one)."""
    d0, dw, dV = grads
    w0, (s0,) = optimizer_step("adagrad", model.w0, d0, LR, (np.float64(state[4][0]),), 0, BETA1, BETA2, EPS)
    w, sw = model.w.astype(np.float64), state[2].astype(np.float64)
    w[IDS], (sw[IDS],) = optimizer_step("adagrad", w[IDS], dw[IDS], LR, (sw[IDS],), 0, BETA1, BETA2, EPS)
    V, G = model.V.astype(np.float64), state[0].astype(np.float64)
    dependent = dependent_mask(model)
    touched = 0
    for level in range(1, len(model.ranks) + 1):
        width, offset = int(model.widths[level - 1]), int(model.offsets[level - 1])
        for i in IDS[model.levels[IDS] >= level]:
            cols = offset + i * width + np.arange(width)
            r = model.rowwise_index(level, [i])[0]
            G[r] += np.mean(dV[cols] ** 2)
            lr = LR_DEP if dependent[cols[0]] and variant == "paper" else LR
            V[cols] -= lr * dV[cols] / (np.sqrt(G[r]) + EPS)
            touched += 1
    return w0, w, V, s0, sw, G, touched


@pytest.mark.parametrize("task", ["r", "c"])
@pytest.mark.parametrize("kind,ranks,variant", CASES)
def test_rowwise_adagrad_step_equals_closed_form(task, kind, ranks, variant):
    model = make_model(kind, ranks, task)
    y = label(task)
    grads = row_gradient(model, IDS, VALS, y, variant, WEIGHT, (REG[0], REG[1], reg_levels(len(ranks))))
    rng, empty = np.random.default_rng(9), np.zeros(0, np.float32)
    state = (rng.uniform(0.05, 1.0, model.rowwise_size).astype(np.float32), empty,
             rng.uniform(0.05, 1.0, model.w.shape[0]).astype(np.float32), empty, np.array([rng.uniform(0.05, 1.0), 0]))
    w0, w, V, s0, sw, G, touched = rowwise_expected(model, state, grads, variant)
    before = state[0].copy()
    old = (model.w0, model.w.astype(np.float64), model.V.astype(np.float64))
    kernel_run(model, y, variant, K.ROWWISE, state)
    assert model.w0 - old[0] == pytest.approx(w0 - old[0], rel=1e-4, abs=1e-9)
    np.testing.assert_allclose(model.w - old[1], w - old[1], rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(model.V - old[2], V - old[2], rtol=1e-3, atol=1e-7)
    assert state[4][0] == pytest.approx(s0, rel=1e-5)
    np.testing.assert_allclose(state[2], sw, rtol=1e-5)
    np.testing.assert_allclose(state[0], G, rtol=1e-5)
    assert np.count_nonzero(state[0] != before) == touched


@pytest.mark.parametrize("side", ["above", "below"])
def test_regression_prediction_clipped_in_training(side):
    """Training steps on g = clip(y_hat, target range) - y, as libFM: a row whose raw
    prediction lies outside the training targets' range pulls only from the range's edge."""
    model = make_model("rafm", (2, 3, 5), "r")
    y_hat = linear(model.w0, model.w, IDS, VALS) + pair_loop("rafm", IDS, VALS, model.levels, model.ranks,
                                                             model.V)
    edge = y_hat - 1.0 if side == "above" else y_hat + 1.0
    y_range = (edge - 5.0, edge) if side == "above" else (edge, edge + 5.0)
    y = edge - 0.2 if side == "above" else edge + 0.2
    reg = (REG[0], REG[1], reg_levels(3))
    clipped = row_gradient(model, IDS, VALS, y, "authors", WEIGHT, reg, y_range)
    unclipped = row_gradient(model, IDS, VALS, y, "authors", WEIGHT, reg)
    state = random_state("sgd", model, None)
    w0, w, V, *_ = expected_step("sgd", model, state, clipped, "authors")
    w0_raw = expected_step("sgd", model, state, unclipped, "authors")[0]
    old = model.w0
    kernel_run(model, y, "authors", K.SGD, state, y_range)
    assert model.w0 - old == pytest.approx(w0 - old, rel=1e-4)
    assert abs((w0_raw - old) - (w0 - old)) > 0.01  # the clip matters here
    np.testing.assert_allclose(model.V, V, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["sgd", "adagrad", "adam", "rowwise-adagrad"])
@pytest.mark.parametrize("task", ["r", "c"])
def test_one_level_trains_as_the_level_machinery_does(task, method):
    """An FM epoch (one level: forward.fm_sums) against the same model with a second, empty
    level (the levels' row_forward): the same parameters and optimizer state, bit for bit."""
    rng = np.random.default_rng(4)
    one = make_model("fm", (4,), task)
    two = build("rafm", task, (4, 6), np.arange(12), np.ones(12), 0.5, rng, 0.3, (-1e9, 1e9))
    two.V[:], two.w[:], two.w0 = one.V, one.w, one.w0
    n_rows = 300
    indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 6, n_rows))]).astype(np.int64)
    data = cli_rows(indptr, rng.integers(0, 12, indptr[-1]).astype(np.int32), rng.uniform(-2, 2, indptr[-1]),
                    rng.integers(0, 2, n_rows))
    hyper = np.zeros(K.N_HYPER)
    hyper[K.H_LR], hyper[K.H_REG0], hyper[K.H_REG1] = LR, REG[0], REG[1]
    hyper[K.H_BETA1], hyper[K.H_BETA2], hyper[K.H_EPS] = BETA1, BETA2, EPS
    hyper[K.H_YMIN], hyper[K.H_YMAX] = -1e9, 1e9
    hyper[K.H_BIAS_ON] = hyper[K.H_LINEAR_ON] = 1.0
    task_code = K.TASK_REGRESSION if task == "r" else K.TASK_CLASSIFICATION
    order = rng.permutation(n_rows).astype(np.int64)
    trained = []
    for model, reg_v in ((one, [0.2]), (two, [0.2, 0.1])):
        kmodel = model.kernel_model()
        state = optimizer_state(method, model)
        K.train_epoch(order, 0, data, kmodel, state, hyper, np.array(reg_v), task_code, model.nested, K.PAPER,
                      METHODS[method])
        assert kmodel[1].shape[0] == (1 if model is one else 2)
        trained.append((model.V.copy(), model.w.copy(), kmodel[5].copy(), [s.copy() for s in state]))
    for got, want in zip(trained[1][:3], trained[0][:3]):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(trained[1][3], trained[0][3]):
        np.testing.assert_array_equal(got, want)


def test_with_steps_refuses_a_trainer_that_does_not_use_its_method():
    """numba's cache key covers a trainer's closure, not its globals (kernels.sgd.with_steps):
    a trainer whose code never names its ``method`` would serve one method's steps for all."""

    def using(method):
        def trainer(x):
            return x + method

        return trainer

    def ignoring(method):
        def trainer(x):
            return x

        return trainer

    assert K.with_steps(K.ADAM, using(K.ADAM))(1) == 1 + K.ADAM
    with pytest.raises(ValueError, match="method"):
        K.with_steps(K.ADAM, ignoring(K.ADAM))
