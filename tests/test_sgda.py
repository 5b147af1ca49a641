"""SGDA (libFM's adaptive regularisation) against naive steps: the parameter step on a training
row, then the regularisation step on a validation row by finite differences of its loss."""

import numpy as np
import pytest
from click.testing import CliRunner
from naive import pair_loop
from test_coordinate import dataset

from rafmcli.cli import main
from rafmcli.io.groups import GroupAssignment
from rafmcli.model.layout import build
from rafmcli.options import Options
from rafmcli.predict import kernel_rows
from rafmcli.solvers.sgda import AdaptiveStep

MODELS = [("fm", (3,)), ("rafm", (2, 4)), ("difacto", (2, 4)), ("rafm", (1, 2, 4))]


def score(model, w0, w, V, ids, vals):
    """y_hat of one row by the pair loop, with float64 parameters."""
    return w0 + float(np.dot(w[ids], vals)) + pair_loop(model.kind, list(ids), list(vals), model.levels,
                                                        model.ranks, V)


def row_of(rows, r):
    indptr, indices, values = rows[:3]
    ids = indices[indptr[r]:indptr[r + 1]]
    vals = values[indptr[r]:indptr[r + 1]] if values.shape[0] else np.ones(ids.shape[0])
    return ids, vals.astype(np.float64)


def coordinate_classes(model, group):
    """For every V position: (feature, class column of lam_v)."""
    out = {}
    coff = np.concatenate([[0], np.cumsum(model.widths)])
    for l in range(len(model.ranks)):
        for i in range(model.sizes[l]):
            for f in range(model.widths[l]):
                out[model.offsets[l] + i * model.widths[l] + f] = (i, coff[l] + f)
    return out


@pytest.mark.parametrize("kind,ranks", MODELS)
def test_one_parameter_step_then_one_regularisation_step(kind, ranks):
    rng = np.random.default_rng(2)
    rows = [[(a, float(np.float32(rng.uniform(0.5, 1.5)))) for a in rng.choice(6, 3, replace=False)]
            for _ in range(8)]
    data = dataset(rows, rng.normal(0, 1, 8))
    levels = (np.arange(data.feature_ids.shape[0]) % len(ranks) + 1).astype(np.int8)
    model = build(kind, "r", ranks, data.feature_ids, levels, 0.5, rng, 0.3, (-100.0, 100.0))
    model.w[:] = rng.normal(0, 0.5, model.w.shape[0])
    order = np.argsort(-levels, kind="stable")
    groups = GroupAssignment((np.arange(data.feature_ids.shape[0]) % 2).astype(np.int32), 2)
    opts = Options(task="r", model=kind, ranks=ranks, learn_rate=0.1)
    train_rows, valid_rows = kernel_rows(model, data), kernel_rows(model, data)
    step = AdaptiveStep(model, train_rows, data.labels, valid_rows, data.labels, groups, opts, order)
    step.lam_w[:] = rng.uniform(0.2, 0.5, 2)
    step.lam_v[:] = rng.uniform(0.2, 0.5, step.lam_v.shape)
    step.grads[1][:] = rng.normal(0, 0.3, model.V.shape[0])  # loss gradients of an earlier step
    step.grads[0][:] = rng.normal(0, 0.3, model.w.shape[0])
    step.next_valid = 5
    group, lr = step.group, 0.1
    w0, w, V = model.w0, model.w.astype(np.float64), model.V.astype(np.float64)
    lam_w, lam_v = step.lam_w.copy(), step.lam_v.copy()
    gw, gV = step.grads[0].astype(float), step.grads[1].astype(float)
    classes = coordinate_classes(model, group)

    # naive parameter step on training row 2: theta -= lr (g h + lam theta), h = d y_hat / d theta
    ids, vals = row_of(train_rows, 2)
    g = score(model, w0, w, V, ids, vals) - data.labels[2]
    new_w, new_V = w.copy(), V.copy()
    for i, x in zip(ids, vals):
        gw[i] = g * x
        new_w[i] = w[i] - lr * (gw[i] + lam_w[group[i]] * w[i])
    for pos, (i, c) in classes.items():
        if i in ids:
            e = np.zeros_like(V)
            e[pos] = 1.0
            h = score(model, w0, w, V + e, ids, vals) - score(model, w0, w, V, ids, vals)
            gV[pos] = g * h
            new_V[pos] = V[pos] - lr * (gV[pos] + lam_v[group[i], c] * V[pos])

    w0_array = np.array([w0])
    step.epoch(np.array([2]), 2, w0_array)
    np.testing.assert_allclose(model.w, new_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.V, new_V, rtol=1e-5, atol=1e-6)
    assert w0_array[0] == pytest.approx(w0 - lr * g)

    # naive regularisation step on validation row 5: finite differences of its loss at theta'(lam)
    w, V = model.w.astype(np.float64), model.V.astype(np.float64)
    vids, vvals = row_of(valid_rows, 5)

    def val_loss(lw, lv):
        wd = w - lr * (gw + lw[group] * w)
        Vd = V.copy()
        for pos, (i, c) in classes.items():
            Vd[pos] = V[pos] - lr * (gV[pos] + lv[group[i], c] * V[pos])
        return 0.5 * (score(model, w0_array[0], wd, Vd, vids, vvals) - data.labels[5]) ** 2

    eps = 1e-6
    expected_w, expected_v = lam_w.copy(), lam_v.copy()
    for gi in range(2):
        up, down = lam_w.copy(), lam_w.copy()
        up[gi] += eps
        down[gi] -= eps
        expected_w[gi] = max(0.0, lam_w[gi] - lr * (val_loss(up, lam_v) - val_loss(down, lam_v)) / (2 * eps))
        for c in range(lam_v.shape[1]):
            up, down = lam_v.copy(), lam_v.copy()
            up[gi, c] += eps
            down[gi, c] -= eps
            expected_v[gi, c] = max(0.0, lam_v[gi, c] - lr * (val_loss(lam_w, up) - val_loss(lam_w, down)) / (2 * eps))
    np.testing.assert_allclose(step.lam_w, expected_w, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(step.lam_v, expected_v, rtol=1e-4, atol=1e-7)
    assert step.next_valid == 6
    assert not np.allclose(step.lam_v, lam_v)  # the step moved something


def test_sgda_learns_and_needs_validation_rows(tmp_path, sample):
    train = sample("regression.train")
    result = CliRunner().invoke(main, ["train", "--task", "r", "--train", train, "--method", "sgda",
                                       "--holdout", "0", "--save-model", str(tmp_path / "m.rafm")])
    assert result.exit_code == 2 and "validation" in result.output
    result = CliRunner().invoke(main, ["train", "--task", "r", "--train", train, "--validation",
                                       sample("regression.validation"), "--method", "sgda", "--model", "rafm",
                                       "--ranks", "2,8", "--learn-rate", "0.02", "--iter", "30",
                                       "--save-model", str(tmp_path / "m.rafm"), "--quiet"])
    assert result.exit_code == 0, result.output
    from rafmcli.fields import infer
    from rafmcli.io.columns import build
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate
    from rafmcli.model import files
    from rafmcli.predict import predict_dataset

    model = files.load(str(tmp_path / "m.rafm"))
    valid = read_dataset(sample("regression.validation"))
    assert evaluate("r", valid.labels, predict_dataset(model, valid).values)["rmse"] < 0.9 * valid.labels.std()
    learnt = model.info["training"]["regularisation"]
    groups = infer(read_dataset(train), build(read_dataset(train))).assignment.n_groups  # no --meta: inferred
    assert groups > 1 and len(learnt["linear"]) == groups and len(learnt["factors_by_level"]) == 2
    assert max(learnt["linear"] + sum(learnt["factors_by_level"], [])) > 0
