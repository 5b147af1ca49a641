"""Training learns, model files round-trip, and the train/predict CLI behaves end to end."""

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.io.reader import read_dataset
from rafmcli.metrics import auc, evaluate
from rafmcli.model import files as model_file
from rafmcli.model.layout import CACHE_LINE
from rafmcli.options import Options
from rafmcli.predict import predict_dataset
from rafmcli.solvers.sgd import train


def run(args):
    result = CliRunner().invoke(main, args)
    return result


def planted_file(path, rng, n_rows, users=30, items=30, noise=0.05, centres=None):
    """y = 3 + <u_a, i_b> + noise: nothing a linear model can explain."""
    if centres is None:
        centres = (rng.normal(0, 1, (users, 2)), rng.normal(0, 1, (items, 2)))
    u, it = centres
    a = rng.integers(0, users, n_rows)
    b = rng.integers(0, items, n_rows)
    y = 3 + (u[a] * it[b]).sum(1) + rng.normal(0, noise, n_rows)
    with open(path, "w") as fh:
        for yy, aa, bb in zip(y, a, b):
            fh.write(f"{yy:.5f} {aa}:1 {users + bb}:1\n")
    return centres


def test_recovers_planted_interactions(tmp_path):
    rng = np.random.default_rng(0)
    centres = planted_file(tmp_path / "train", rng, 4000)
    planted_file(tmp_path / "test", rng, 1000, centres=centres)
    tr, te = read_dataset(str(tmp_path / "train")), read_dataset(str(tmp_path / "test"))
    spread = float(np.std(te.labels))
    model, history = train(tr, Options(task="r", model="fm", ranks=(4,), iters=60, learn_rate=0.1,
                                       reg_factors=(1e-4,), init_stdev=0.1), progress=False, quiet=True)
    rmse = evaluate("r", te.labels, predict_dataset(model, te)[0])["rmse"]
    assert spread > 1.0
    assert rmse < 0.15, (rmse, spread)
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def learns(tr, va, opts):
    """Best validation metric 10% better than the constant model's, train loss falling."""
    _, history = train(tr, opts, validation=va, progress=False, quiet=True)
    if opts.task == "r":
        watch, constant = "rmse", np.full(va.n_rows, tr.labels.mean())
    else:
        watch, constant = "logloss", np.full(va.n_rows, (tr.labels > 0).mean())
    baseline = evaluate(opts.task, va.labels, constant)[watch]
    return (min(h[watch] for h in history) < 0.9 * baseline
            and history[-1]["train_loss"] < history[0]["train_loss"])


@pytest.mark.parametrize("kind,ranks", [("fm", (8,)), ("rafm", (4, 16)), ("difacto", (4, 16))])
@pytest.mark.parametrize("task", ["r", "c"])
def test_training_beats_the_constant_model(sample, kind, ranks, task):
    name = "regression" if task == "r" else "classification"
    tr, va = read_dataset(sample(name + ".train")), read_dataset(sample(name + ".validation"))
    assert learns(tr, va, Options(task=task, model=kind, ranks=ranks, iters=15, early_stop=0))


def test_variants_and_optimizers_train(sample):
    tr, va = read_dataset(sample("classification.train")), read_dataset(sample("classification.validation"))
    for opts in (Options(task="c", ranks=(4, 16), variant="authors", iters=10, early_stop=0),
                 Options(task="c", ranks=(4, 16), variant="cascade", iters=10, early_stop=0),
                 Options(task="c", ranks=(4, 16), method="adam", learn_rate=0.01, iters=10, early_stop=0),
                 Options(task="c", ranks=(4, 16), method="sgd", learn_rate=0.05, iters=10, early_stop=0)):
        assert learns(tr, va, opts), opts


def test_early_stopping_keeps_best_epoch(sample):
    tr, va = read_dataset(sample("regression.train")), read_dataset(sample("regression.validation"))
    opts = Options(task="r", model="fm", ranks=(16,), iters=200, learn_rate=0.3, reg_factors=(0.0,),
                   early_stop=3)
    model, history = train(tr, opts, validation=va, progress=False, quiet=True)
    best = min(range(len(history)), key=lambda e: history[e]["rmse"])
    assert len(history) == best + 1 + 3 < 200
    again = evaluate("r", va.labels, predict_dataset(model, va)[0])["rmse"]
    assert again == pytest.approx(history[best]["rmse"], rel=1e-9)
    assert model.info["training"]["best_epoch"] == best + 1
    assert model.V.ctypes.data % CACHE_LINE == 0  # the restored copy too


def test_auc_by_hand():
    assert auc([1, 0, 1, 0], [0.9, 0.1, 0.8, 0.3]) == 1.0
    assert auc([1, 0, 1, 0], [0.1, 0.9, 0.2, 0.8]) == 0.0
    assert auc([1, 0], [0.5, 0.5]) == 0.5
    assert auc([1, 0, 0, 1], [0.2, 0.4, 0.6, 0.8]) == 0.5


# ---- model files -------------------------------------------------------------

def _trained(sample, kind="rafm"):
    tr = read_dataset(sample("classification.train"))
    model, _ = train(tr, Options(task="c", model=kind, ranks=(4, 16) if kind != "fm" else (6,),
                                 iters=3), progress=False, quiet=True)
    return model


@pytest.mark.parametrize("kind", ["fm", "rafm", "difacto"])
def test_save_load_predict_round_trip(sample, tmp_path, kind):
    model = _trained(sample, kind)
    path = tmp_path / "m.rafm"
    model_file.save(model, str(path))
    loaded = model_file.load(str(path))
    te = read_dataset(sample("classification.test"))
    np.testing.assert_array_equal(predict_dataset(model, te)[0], predict_dataset(loaded, te)[0])
    for name in ("feature_ids", "levels", "w", "V"):
        np.testing.assert_array_equal(getattr(model, name), getattr(loaded, name))
    assert loaded.w0 == model.w0 and loaded.ranks == model.ranks and loaded.kind == kind
    assert model.V.ctypes.data % CACHE_LINE == 0
    assert loaded.V.ctypes.data % CACHE_LINE == 0
    assert [f for f in os.listdir(tmp_path)] == ["m.rafm"]


def test_rafm_stores_only_active_factors(sample):
    model = _trained(sample)
    sizes = model.sizes
    assert model.V.shape[0] == 4 * sizes[0] + 16 * sizes[1]
    assert model.factors(2).shape == (sizes[1], 16)
    assert np.all(np.diff(model.levels.astype(int)) <= 0)


def _rewrite(src, dst, change):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            zout.writestr(item, change(item.filename, data))


def test_unknown_version_and_damage_refused(sample, tmp_path):
    model = _trained(sample)
    good = tmp_path / "good.rafm"
    model_file.save(model, str(good))

    def newer(name, data):
        if name != "model.json":
            return data
        header = json.loads(data)
        header["format_version"] = 99
        return json.dumps(header)

    _rewrite(good, tmp_path / "newer.rafm", newer)
    _rewrite(good, tmp_path / "short.rafm", lambda name, data: data[:-40] if name == "V.npy" else data)
    truncated = tmp_path / "truncated.rafm"
    truncated.write_bytes(good.read_bytes()[:-200])
    flipped = bytearray(good.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    (tmp_path / "flipped.rafm").write_bytes(bytes(flipped))
    (tmp_path / "text.rafm").write_text("1 2:3\n")
    test_file = sample("classification.test")
    for name, words in [("newer", "format version 99"), ("truncated", "damaged"), ("short", "truncated"),
                        ("flipped", "damaged"), ("text", "damaged")]:
        result = run(["predict", "--model", str(tmp_path / f"{name}.rafm"), test_file])
        assert result.exit_code == 2, (name, result.output)
        assert words in result.output, (name, result.output)


# ---- command line ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fm", "rafm", "difacto"])
@pytest.mark.parametrize("task", ["r", "c"])
def test_cli_train_then_predict(sample, tmp_path, kind, task):
    name = "regression" if task == "r" else "classification"
    ranks = ["--dim", "6"] if kind == "fm" else ["--ranks", "4,16"]
    out, saved, rlog = tmp_path / "pred.txt", tmp_path / "m.rafm", tmp_path / "log.tsv"
    result = run(["train", "--task", task, "--model", kind, *ranks, "--train", sample(name + ".train"),
                  "--validation", sample(name + ".validation"), "--test", sample(name + ".test"),
                  "--out", str(out), "--save-model", str(saved), "--rlog", str(rlog), "--iter", "8",
                  "--quiet"])
    assert result.exit_code == 0, result.output
    pred = np.loadtxt(out)
    te = read_dataset(sample(name + ".test"))
    assert pred.shape == (te.n_rows,)
    if task == "c":
        assert np.all((pred > 0) & (pred < 1))
        assert evaluate("c", te.labels, pred)["auc"] > 0.6
    else:
        tr = read_dataset(sample(name + ".train"))
        assert tr.labels.min() <= pred.min() and pred.max() <= tr.labels.max()
    result = run(["predict", "--model", str(saved), "--out", str(tmp_path / "again.txt"),
                  sample(name + ".test")])
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "again.txt"), pred)
    lines = rlog.read_text().splitlines()
    header = lines[0].split("\t")
    metrics = ["rmse", "mae"] if task == "r" else ["logloss", "auc", "accuracy"]
    assert header == ["epoch", "seconds", "train_loss", *metrics]
    assert [int(line.split("\t")[0]) for line in lines[1:]] == list(range(1, len(lines)))


def test_cli_predict_several_files_to_stdout(sample, tmp_path):
    saved = tmp_path / "m.rafm"
    assert run(["train", "--task", "c", "--train", sample("classification.train"), "--iter", "3",
                "--save-model", str(saved), "--quiet"]).exit_code == 0
    files = [sample("classification.test"), sample("classification.validation")]
    result = run(["predict", "--model", str(saved), *files])
    assert result.exit_code == 0
    values = [float(v) for v in result.stdout.split()]
    assert len(values) == 1200
    single = run(["predict", "--model", str(saved), files[1]])
    assert [float(v) for v in single.stdout.split()] == values[600:]


def test_rlog_without_validation_has_nan(sample, tmp_path):
    rlog = tmp_path / "log.tsv"
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--holdout", "0",
                  "--iter", "3", "--rlog", str(rlog), "--quiet"])
    assert result.exit_code == 0, result.output
    rows = [line.split("\t") for line in rlog.read_text().splitlines()]
    assert len(rows) == 4 and rows[1][3:] == ["NaN", "NaN"]


def test_holdout_used_by_default(sample, tmp_path):
    rlog = tmp_path / "log.tsv"
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--iter", "3",
                  "--rlog", str(rlog)])
    assert result.exit_code == 0
    assert "held-out" in result.stderr
    assert "NaN" not in rlog.read_text()


def test_reproducible_with_one_thread(sample, tmp_path):
    outs = []
    for seed in (3, 3, 4):
        out = tmp_path / f"p{len(outs)}.txt"
        result = run(["train", "--task", "c", "--train", sample("classification.train"),
                      "--test", sample("classification.test"), "--out", str(out), "--iter", "4",
                      "--seed", str(seed), "--threads", "1", "--quiet"])
        assert result.exit_code == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


def test_hogwild_threads_learn(sample, threads_on_small_data):
    tr, va = read_dataset(sample("classification.train")), read_dataset(sample("classification.validation"))
    assert learns(tr, va, Options(task="c", model="fm", ranks=(8,), iters=10, threads=2, early_stop=0))


def test_divergence_exits_3_and_writes_nothing(sample, tmp_path):
    saved, out = tmp_path / "m.rafm", tmp_path / "p.txt"
    result = run(["train", "--task", "r", "--model", "fm", "--method", "sgd", "--learn-rate", "1e6",
                  "--init-stdev", "1", "--train", sample("regression.train"), "--save-model", str(saved),
                  "--test", sample("regression.test"), "--out", str(out), "--quiet"])
    assert result.exit_code == 3, result.output
    assert "diverged in epoch 1" in result.output and "--learn-rate" in result.output
    assert os.listdir(tmp_path) == []


def test_bad_test_file_fails_before_training(sample, tmp_path):
    bad = tmp_path / "bad.libfm"
    bad.write_text("1 1:1\n1 x:1\n")
    saved = tmp_path / "m.rafm"
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--test", str(bad),
                  "--out", str(tmp_path / "p.txt"), "--save-model", str(saved), "--quiet"])
    assert result.exit_code == 2
    assert f"{bad}:2: feature index is not a non-negative integer (x:1)" in result.output
    assert sorted(os.listdir(tmp_path)) == ["bad.libfm"]


@pytest.mark.parametrize("args,words", [
    (["--model", "fm", "--ranks", "4,8"], "one rank"),
    (["--dim", "4", "--ranks", "4,8"], "not both"),
    (["--test", "x"], "--test needs --out"),
    (["--regular", "0,0"], "r0,r1,r2"),
    (["--regular", "0,0,1,2,3"], "got 5 values"),
    (["--regular", "0,-1,0"], "non-negative"),
    (["--learn-rate", "0"], "learn-rate"),
    (["--method", "lbfgs"], "lbfgs"),
])
def test_bad_options(sample, args, words):
    result = run(["train", "--task", "r", "--train", sample("regression.train"), *args])
    assert result.exit_code == 2
    assert words in result.output


def test_missing_required_option():
    result = run(["train", "--train", "x"])
    assert result.exit_code == 2 and "--task" in result.output


def test_levels_file_overrides_eq17(sample, tmp_path):
    tr = read_dataset(sample("regression.train"))
    rare = tr.feature_ids[np.argsort(tr.counts)[:3]]
    levels = tmp_path / "levels.txt"
    levels.write_text("# feature level\n" + "".join(f"{i} 2\n" for i in rare))
    saved = tmp_path / "m.rafm"
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--ranks", "4,1000",
                  "--levels", str(levels), "--iter", "2", "--holdout", "0", "--save-model", str(saved),
                  "--quiet"])
    assert result.exit_code == 0, result.output
    model = model_file.load(str(saved))
    top = set(model.feature_ids[model.levels == 2].tolist())
    eq17 = set(tr.feature_ids[tr.counts ** 2 > 4 * 1000].tolist())
    assert top == eq17 | set(rare.tolist()) and not eq17 & set(rare.tolist())
    levels.write_text(f"{rare[0]} 3\n")
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--ranks", "4,1000",
                  "--levels", str(levels), "--quiet"])
    assert result.exit_code == 2 and f"{levels}:1: level must be 1..2 (3)" in result.output


def test_unseen_features_reported(sample, tmp_path):
    saved = tmp_path / "m.rafm"
    run(["train", "--task", "r", "--train", sample("regression.train"), "--iter", "2",
         "--save-model", str(saved), "--quiet"])
    new = tmp_path / "new.libfm"
    new.write_text("1 999999:1 5:1\n2 888888:1\n")
    result = run(["predict", "--model", str(saved), str(new)])
    assert result.exit_code == 0
    assert "2 occurrences of 2 features unseen in training" in result.stderr
    assert len(result.stdout.split()) == 2


def test_subprocess_entry_point(sample, tmp_path):
    """The installed `rafm` script, as a pipeline would call it."""
    saved = tmp_path / "m.rafm"
    subprocess.run(["rafm", "train", "--task", "c", "--train", sample("classification.train"),
                    "--iter", "2", "--save-model", str(saved), "--quiet"], check=True)
    with open(sample("classification.test"), "rb") as fh:
        out = subprocess.run(["rafm", "predict", "--model", str(saved), "-"], stdin=fh,
                             capture_output=True, check=True)
    assert len(out.stdout.split()) == 600
    bad = subprocess.run([sys.executable, "-m", "rafmcli", "predict", "--model", str(saved),
                          str(tmp_path / "missing.libfm")], capture_output=True, text=True)
    assert bad.returncode == 2 and "missing.libfm" in bad.stderr


def test_predict_into_a_closed_pipe_exits_quietly(sample, tmp_path):
    saved = tmp_path / "m.rafm"
    subprocess.run(["rafm", "train", "--task", "r", "--train", sample("regression.train"),
                    "--iter", "2", "--save-model", str(saved), "--quiet"], check=True)
    many = tmp_path / "many.libfm"
    many.write_text(open(sample("regression.train")).read() * 20)
    result = subprocess.run(["bash", "-o", "pipefail", "-ec",
                             f"rafm predict --quiet --model {saved} {many} | head -1"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""
    assert len(result.stdout.split()) == 1


@pytest.mark.parametrize("args,words", [
    (["--variant", "authors", "--dependent-rate", "0.1"], "--dependent-rate is rho_d of --variant paper"),
    (["--variant", "cascade", "--dependent-rate", "0.1"], "--dependent-rate is rho_d of --variant paper"),
    (["--dependent-rate", "0.1"], "--dependent-rate is rho_d of --variant paper"),  # default: cascade
    (["--variant", "paper", "--dependent-weight", "2"], "--dependent-weight is c_p of --variant authors or cascade"),
    (["--variant", "paper", "--dependent-weight", "1"], "--dependent-weight is c_p"),
    (["--model", "fm", "--dependent-rate", "0.1"], "--dependent-rate applies to --model rafm only"),
    (["--model", "difacto", "--variant", "authors"], "--variant applies to --model rafm only"),
])
def test_options_a_variant_ignores_are_refused(sample, args, words):
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--iter", "1", "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_dependent_rate_acts(sample, tmp_path):
    """--dependent-rate moves exactly the dependent vectors v_i^(l), l < k_i (paper variant, SGD):
    at a vanishing rate they keep their initial values while every free vector moves."""
    from rafmcli.levels import assign_levels
    from rafmcli.model.layout import build

    tr = read_dataset(sample("regression.train"))
    moved = {}
    for rate in ("1e-30", "0.01"):
        saved = tmp_path / f"m{rate}.rafm"
        result = run(["train", "--task", "r", "--train", sample("regression.train"), "--ranks", "4,16",
                      "--method", "sgd", "--learn-rate", "0.01", "--variant", "paper", "--dependent-rate", rate,
                      "--iter", "1", "--holdout", "0", "--save-model", str(saved), "--quiet"])
        assert result.exit_code == 0, result.output
        model = model_file.load(str(saved))
        assert model.info["options"]["dependent_rate"] == float(rate)
        initial = build("rafm", "r", (4, 16), tr.feature_ids, assign_levels(tr.counts, (4, 16)), 0.01,
                        np.random.default_rng(1), 0.0, (0, 1)).factors(1)
        top = model.levels == 2
        seen = np.isin(model.feature_ids, tr.feature_ids[tr.counts > 0])
        moved[rate] = (np.abs(model.factors(1)[top] - initial[top]).max(axis=1),
                       np.abs(model.factors(1)[~top & seen] - initial[~top & seen]).max(axis=1))
    dependent, free = moved["1e-30"]
    assert dependent.max() < 1e-12 and free.min() > 0
    assert moved["0.01"][0].min() > 1e-6


def test_metric_chooses_the_best_epoch(sample):
    """--metric auc keeps the epoch of the highest validation AUC (higher is better), mae the lowest MAE."""
    tr, va = read_dataset(sample("classification.train")), read_dataset(sample("classification.validation"))
    for task, metric, pick in (("c", "auc", max), ("c", "accuracy", max), ("c", "logloss", min)):
        opts = Options(task=task, model="fm", ranks=(8,), iters=12, early_stop=0, learn_rate=0.3, metric=metric)
        model, history = train(tr, opts, validation=va, progress=False, quiet=True)
        values = [h[metric] for h in history]
        best = values.index(pick(values)) + 1
        assert model.info["training"]["best_epoch"] == best, (metric, values)
        assert evaluate(task, va.labels, predict_dataset(model, va)[0])[metric] == pytest.approx(pick(values))
    tr, va = read_dataset(sample("regression.train")), read_dataset(sample("regression.validation"))
    opts = Options(task="r", model="fm", ranks=(16,), iters=200, early_stop=2, learn_rate=0.3, reg_factors=(0.0,),
                   metric="mae")
    model, history = train(tr, opts, validation=va, progress=False, quiet=True)
    best = min(range(len(history)), key=lambda e: history[e]["mae"])
    assert len(history) == best + 1 + 2 < 200 and model.info["training"]["best_epoch"] == best + 1


def test_metric_of_the_other_task_refused(sample):
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--metric", "auc"])
    assert result.exit_code == 2 and "--metric auc is not a regression metric" in result.output
