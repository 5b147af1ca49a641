"""Continued training: `rafm train --init-model`, the model file's optimizer state, the API's warm start."""

import os
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli import api
from rafmcli.cli import main
from rafmcli.io.reader import read_dataset
from rafmcli.levels import assign_levels
from rafmcli.model import files as model_files
from rafmcli.model.dump import vectors
from rafmcli.model.layout import CACHE_LINE


def run(args):
    return CliRunner().invoke(main, args)


def params_by_id(model):
    """{feature id: (level, w, [vectors])} read through the model's public layout."""
    return {int(model.feature_ids[j]): (int(model.levels[j]), float(model.w[j]), [v.copy() for v in vectors(model, j)])
            for j in range(model.feature_ids.shape[0])}


def write_rows(path, rows):
    path.write_text("".join(f"{y} " + " ".join(f"{i}:{x}" for i, x in feats) + "\n" for y, feats in rows))
    return str(path)


# identical rows: any row order trains the same (classification without bias: nothing is clipped)
REPEATED = [(1, [(0, 1), (1, 0.5), (2, 1), (3, 2)])] * 6


@pytest.mark.parametrize("method", ["adagrad", "adam", "rowwise-adagrad"])
def test_two_runs_with_state_equal_one_run(tmp_path, method):
    data = write_rows(tmp_path / "rows.libfm", REPEATED)
    common = ["--task", "c", "--no-bias", "--ranks", "2,4", "--train", data, "--holdout", "0",
              "--method", method, "--learn-rate", "0.01", "--quiet"]
    assert run(["train", *common, "--iter", "6", "--save-model", str(tmp_path / "straight.rafm")]).exit_code == 0
    assert run(["train", *common, "--iter", "2", "--save-model", str(tmp_path / "half.rafm"),
                "--save-state"]).exit_code == 0
    assert run(["train", *common, "--iter", "4", "--init-model", str(tmp_path / "half.rafm"),
                "--save-model", str(tmp_path / "continued.rafm")]).exit_code == 0
    straight = model_files.load(str(tmp_path / "straight.rafm"))
    continued = model_files.load(str(tmp_path / "continued.rafm"))
    np.testing.assert_array_equal(continued.V, straight.V)
    np.testing.assert_array_equal(continued.w, straight.w)
    assert np.all(straight.w != 0)
    # without the state the optimizer restarts: a different model
    assert run(["train", *common, "--iter", "2", "--save-model", str(tmp_path / "bare.rafm")]).exit_code == 0
    assert run(["train", *common, "--iter", "4", "--init-model", str(tmp_path / "bare.rafm"),
                "--save-model", str(tmp_path / "restarted.rafm")]).exit_code == 0
    assert not np.array_equal(model_files.load(str(tmp_path / "restarted.rafm")).V, straight.V)


def test_state_is_saved_only_when_asked(sample, tmp_path):
    common = ["train", "--task", "c", "--ranks", "4,16", "--train", sample("classification.train"),
              "--iter", "2", "--quiet"]
    assert run([*common, "--save-model", str(tmp_path / "plain.rafm")]).exit_code == 0
    assert run([*common, "--save-model", str(tmp_path / "state.rafm"), "--save-state"]).exit_code == 0
    assert not any(n.startswith("state_") for n in zipfile.ZipFile(tmp_path / "plain.rafm").namelist())
    assert model_files.load(str(tmp_path / "plain.rafm")).state is None
    loaded = model_files.load(str(tmp_path / "state.rafm"))
    st = loaded.state
    assert st.method == "adagrad" and st.V1.shape == loaded.V.shape and st.V2.shape == (0,)
    assert st.V1.ctypes.data % CACHE_LINE == 0 and np.all(st.V1 > 0)
    assert st.steps == 2 * 2700  # two epochs over the 90% not held out


def test_known_features_keep_levels_new_ones_get_eq17(tmp_path):
    """Part A makes 0 frequent and 1 rare; part B the reverse and adds 7 and 8."""
    a = write_rows(tmp_path / "a.libfm", [(1.0, [(0, 1), (1, 1)])] + [(2.0, [(0, 1), (2, 1)])] * 40)
    b = write_rows(tmp_path / "b.libfm", [(1.5, [(1, 1), (7, 1)])] * 40 + [(2.5, [(8, 1), (2, 0.5)])] * 2)
    common = ["--task", "r", "--ranks", "2,8", "--holdout", "0", "--quiet"]
    assert run(["train", *common, "--train", a, "--iter", "3", "--save-model", str(tmp_path / "a.rafm"),
                "--save-state"]).exit_code == 0
    assert run(["train", *common, "--train", b, "--iter", "2", "--init-model", str(tmp_path / "a.rafm"),
                "--save-model", str(tmp_path / "b.rafm")]).exit_code == 0
    before = params_by_id(model_files.load(str(tmp_path / "a.rafm")))
    after = params_by_id(model_files.load(str(tmp_path / "b.rafm")))
    assert set(after) == {0, 1, 2, 7, 8}
    assert {i: after[i][0] for i in (0, 1, 2)} == {i: before[i][0] for i in (0, 1, 2)} == {0: 2, 1: 1, 2: 2}
    counts = read_dataset(b).counts  # ids 1, 2, 7, 8 in B
    expected = dict(zip([1, 2, 7, 8], assign_levels(counts, (2, 8))))
    assert (after[7][0], after[8][0]) == (expected[7], expected[8]) == (2, 1)
    # 0 is not in B: untouched, bit for bit; 1 and 2 trained on
    assert after[0][1] == before[0][1]
    for v_after, v_before in zip(after[0][2], before[0][2]):
        np.testing.assert_array_equal(v_after, v_before)
    assert after[1][1] != before[1][1]


@pytest.mark.parametrize("args,words", [
    (["--task", "c"], "regression model cannot continue as classification"),
    (["--task", "r", "--model", "difacto"], "rafm model cannot continue as difacto"),
    (["--task", "r", "--ranks", "4,32"], "its ranks are 4,16"),
])
def test_a_different_model_is_refused(sample, tmp_path, args, words):
    saved = tmp_path / "m.rafm"
    assert run(["train", "--task", "r", "--ranks", "4,16", "--train", sample("regression.train"), "--iter", "1",
                "--save-model", str(saved), "--quiet"]).exit_code == 0
    result = run(["train", *args, "--train", sample("regression.train"), "--init-model", str(saved),
                  "--save-model", str(tmp_path / "again.rafm")])
    assert result.exit_code == 2 and words in result.output
    assert os.listdir(tmp_path) == ["m.rafm"]


def test_api_warm_start_is_the_cli_continuation(sample, tmp_path):
    """In memory, or through a file with its state: the API continues as `rafm train --init-model`."""
    train = sample("regression.train")
    X, y = api.read_data(train)
    opts = dict(ranks=(2, 4), holdout=0, method="adam", learn_rate=0.01, seed=4)
    half = api.FMRegressor(iters=2, **opts).fit(X, y)
    half.save(tmp_path / "half.rafm", state=True)
    assert run(["train", "--task", "r", "--ranks", "2,4", "--holdout", "0", "--method", "adam", "--learn-rate",
                "0.01", "--seed", "4", "--iter", "3", "--train", train, "--init-model", str(tmp_path / "half.rafm"),
                "--save-model", str(tmp_path / "cli.rafm"), "--quiet"]).exit_code == 0
    cli = model_files.load(str(tmp_path / "cli.rafm"))
    warm = api.FMRegressor(iters=2, warm_start=True, **opts).fit(X, y).set_params(iters=3).fit(X, y)
    loaded = api.load(tmp_path / "half.rafm").set_params(iters=3, warm_start=True).fit(X, y)
    for est in (warm, loaded):
        np.testing.assert_array_equal(est.model_.V, cli.V)
    cold = api.FMRegressor(iters=3, **opts).fit(X, y)
    assert not np.array_equal(cold.model_.V, cli.V)
    with pytest.raises(ValueError, match="cannot continue as fm"):
        warm.set_params(model="fm", ranks=4).fit(X, y)


def test_continuing_a_raced_model_keeps_its_rate_and_l2(sample, tmp_path):
    """Without --learn-rate and --regular, --init-model continues with what the first run
    used (its defaults' race chose them), says so, and given options still win."""
    base = ["train", "--task", "r", "--train", sample("regression.train"), "--validation",
            sample("regression.validation"), "--model", "rafm", "--ranks", "4,16"]
    first, second = tmp_path / "a.rafm", tmp_path / "b.rafm"
    assert run(base + ["--iter", "6", "--save-model", str(first), "--save-state", "--quiet"]).exit_code == 0
    chosen = model_files.load(str(first)).info["options"]
    result = run(base + ["--iter", "2", "--init-model", str(first), "--save-model", str(second)])
    assert result.exit_code == 0, result.output
    kept = model_files.load(str(second)).info["options"]
    assert (kept["learn_rate"], kept["reg_factors"]) == (chosen["learn_rate"], chosen["reg_factors"])
    assert f"continuing with --learn-rate {chosen['learn_rate']:g}" in result.output
    result = run(base + ["--iter", "2", "--init-model", str(first), "--learn-rate", "0.003", "--save-model",
                         str(second), "--quiet"])
    kept = model_files.load(str(second)).info["options"]
    assert kept["learn_rate"] == 0.003 and kept["reg_factors"] == chosen["reg_factors"]


def test_a_warm_start_keeps_the_raced_rate_and_l2(sample):
    """The API's warm start continues with the rate and L2 its first fit's race chose, as --init-model."""
    train, valid = read_dataset(sample("regression.train")), read_dataset(sample("regression.validation"))
    est = api.FMRegressor(model="rafm", ranks=(4, 16), iters=6, warm_start=True, seed=3)
    est.fit(train, eval_set=(valid, valid.labels))
    chosen = est.model_.info["options"]
    est.set_params(iters=2).fit(train, eval_set=(valid, valid.labels))
    kept = est.model_.info["options"]
    assert (kept["learn_rate"], kept["reg_factors"]) == (chosen["learn_rate"], chosen["reg_factors"])


@pytest.mark.parametrize("method", ["adagrad", "adam"])
def test_new_features_state_starts_as_a_fresh_runs(method):
    """Extending a model with state: known rows keep their sums, new rows get a fresh run's start."""
    from rafmcli.model.layout import OptimizerState, build, extend
    from rafmcli.solvers.sgd import optimizer_state

    rng = np.random.default_rng(3)
    model = build("rafm", "r", (2, 4), np.array([5, 9]), np.array([2, 1]), 0.1, rng, 0.0, (0.0, 1.0))
    trained = [a + 0.25 * (k + 1) if a.shape[0] else a for k, a in enumerate(optimizer_state(method, model))]
    model.state = OptimizerState(method, *trained, steps=7)
    grown = extend(model, np.array([9, 5, 11]), np.array([1, 2, 2]), 0.1, rng, (0.0, 1.0))
    fresh = optimizer_state(method, grown)
    old_rows = {int(i): j for j, i in enumerate(model.feature_ids)}
    for j, i in enumerate(grown.feature_ids):
        new_w = [a[j] for a in (grown.state.w1, grown.state.w2) if a.shape[0]]
        want_w = ([a[old_rows[i]] for a in trained[2:4] if a.shape[0]] if i in old_rows
                  else [a[j] for a in fresh[2:4] if a.shape[0]])
        assert new_w == want_w
    new_rows = np.ones(grown.V.shape[0], bool)
    for level in range(1, 3):  # the known features' factor rows, found through the old layout
        for i, j_old in old_rows.items():
            if model.levels[j_old] >= level:
                j = int(np.flatnonzero(grown.feature_ids == i)[0])
                w_old, w_new = int(model.widths[level - 1]), int(grown.widths[level - 1])
                at_old = int(model.offsets[level - 1]) + j_old * w_old
                at_new = int(grown.offsets[level - 1]) + j * w_new
                for k, a in enumerate((grown.state.V1, grown.state.V2)):
                    if a.shape[0]:
                        np.testing.assert_array_equal(a[at_new:at_new + w_new], trained[k][at_old:at_old + w_old])
                new_rows[at_new:at_new + w_new] = False
    for k, a in enumerate((grown.state.V1, grown.state.V2)):
        if a.shape[0]:
            np.testing.assert_array_equal(a[new_rows], fresh[k][new_rows])


def test_rowwise_sums_move_with_their_rows():
    """Row-wise AdaGrad keeps one sum a factor row (Model.rowwise_index): extending the model
    moves each known row's sum to the row's new place; new rows' sums start as a fresh run's."""
    from rafmcli.model.layout import OptimizerState, build, extend
    from rafmcli.options import ADAGRAD_START
    from rafmcli.solvers.sgd import optimizer_state

    rng = np.random.default_rng(3)
    model = build("rafm", "r", (2, 4), np.array([5, 9, 7]), np.array([2, 1, 2]), 0.1, rng, 0.0, (0.0, 1.0))
    state = list(optimizer_state("rowwise-adagrad", model))
    assert state[0].shape[0] == model.V.shape[0] // 2 < model.V.shape[0]
    state[0] = np.arange(state[0].shape[0], dtype=np.float32) + 10  # every sum told apart
    model.state = OptimizerState("rowwise-adagrad", *state, steps=3)
    grown = extend(model, np.array([9, 5, 11, 12]), np.array([1, 2, 2, 1]), 0.1, rng, (0.0, 1.0))
    sums = grown.state.V1
    assert sums.shape[0] == grown.rowwise_size
    moved = set()
    for level in (1, 2):
        for j_old, i in enumerate(model.feature_ids):
            if model.levels[j_old] >= level:
                j = int(np.flatnonzero(grown.feature_ids == i)[0])
                at = grown.rowwise_index(level, [j])[0]
                assert sums[at] == state[0][model.rowwise_index(level, [j_old])[0]]
                moved.add(int(at))
    rows = {int(grown.rowwise_index(level, [j])[0]) for level in (1, 2)
            for j in range(grown.w.shape[0]) if grown.levels[j] >= level}
    assert len(rows) == int(grown.sizes.sum())  # no two rows share a sum
    assert all(sums[r] == ADAGRAD_START for r in rows - moved)
