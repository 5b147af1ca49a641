"""rafm train --method als|mcmc and --meta end to end; MCMC model files keep and average samples."""

import json
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from naive import pair_loop

from rafmcli.cli import main
from rafmcli.io.reader import read_dataset
from rafmcli.metrics import evaluate
from rafmcli.model import files as model_files
from rafmcli.predict import kernel_rows


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def naive_sample_prediction(model, sample, data, link):
    """One kept draw's predictions by the pair loop, finished (clipped, or Phi for probit)."""
    from statistics import NormalDist

    w0, w, V = sample
    indptr, indices, values = kernel_rows(model, data)[:3]
    out = []
    for r in range(data.n_rows):
        ids = list(indices[indptr[r]:indptr[r + 1]])
        vals = list(values[indptr[r]:indptr[r + 1]]) if values.shape[0] else [1.0] * len(ids)
        s = w0 + sum(float(w[i]) * v for i, v in zip(ids, vals))
        s += pair_loop(model.kind, ids, vals, model.levels, model.ranks, V)
        if link == "probit":
            out.append(NormalDist().cdf(s))
        else:
            out.append(min(max(s, model.target_min), model.target_max))
    return np.array(out)


@pytest.mark.parametrize("task,kind", [("r", "rafm"), ("c", "difacto"), ("r", "difacto"), ("c", "rafm")])
def test_saved_mcmc_model_predicts_the_average_of_its_kept_samples(tmp_path, sample, task, kind):
    name = "regression" if task == "r" else "classification"
    train_file, test_file = sample(f"{name}.train"), sample(f"{name}.test")
    result = run("train", "--task", task, "--train", train_file, "--method", "mcmc", "--model", kind,
                 "--ranks", "2,5", "--iter", 12, "--burn-in", 4, "--keep-samples", 4,
                 "--save-model", tmp_path / "m.rafm", "--quiet")
    assert result.exit_code == 0, result.output
    model = model_files.load(str(tmp_path / "m.rafm"))
    assert len(model.samples) == 4 and model.link == ("probit" if task == "c" else "logit")
    assert not np.array_equal(model.samples[0][2], model.samples[1][2])  # distinct draws
    header = json.loads(zipfile.ZipFile(tmp_path / "m.rafm").read("model.json"))
    assert (header["format_version"], header["samples"]) == (2, 4)
    data = read_dataset(test_file)
    expected = np.mean([naive_sample_prediction(model, s, data, model.link) for s in model.samples], axis=0)
    result = run("predict", "--model", tmp_path / "m.rafm", "--out", tmp_path / "p.txt", test_file)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.loadtxt(tmp_path / "p.txt"), expected, rtol=1e-5, atol=1e-6)


def test_mcmc_test_predictions_average_the_chain_and_beat_the_mean(tmp_path, sample):
    out, log = tmp_path / "p.txt", tmp_path / "log.tsv"
    result = run("train", "--task", "r", "--train", sample("regression.train"), "--validation",
                 sample("regression.validation"), "--test", sample("regression.test"), "--out", out,
                 "--method", "mcmc", "--model", "fm", "--dim", 4, "--iter", 40, "--rlog", log, "--quiet")
    assert result.exit_code == 0, result.output
    labels = read_dataset(sample("regression.test")).labels
    rmse = evaluate("r", labels, np.loadtxt(out))["rmse"]
    assert rmse < 0.9 * np.std(labels)
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    assert rows[0][:4] == ["epoch", "seconds", "train_loss", "rmse"] and len(rows) == 41


def test_als_learns_and_stops_early(tmp_path, sample):
    result = run("train", "--task", "r", "--train", sample("regression.train"), "--validation",
                 sample("regression.validation"), "--method", "als", "--model", "rafm", "--ranks", "2,8",
                 "--iter", 50, "--early-stop", 3, "--save-model", tmp_path / "m.rafm")
    assert result.exit_code == 0, result.output
    model = model_files.load(str(tmp_path / "m.rafm"))
    assert model.samples == [] and model.info["options"]["reg_factors"] == [10.0, 10.0]
    valid = read_dataset(sample("regression.validation"))
    from rafmcli.predict import predict_dataset

    rmse = evaluate("r", valid.labels, predict_dataset(model, valid).values)["rmse"]
    assert rmse < 0.9 * np.std(valid.labels)


def write_meta(path, groups):
    path.write_text("".join(f"{g}\n" for g in groups))
    return path


def test_meta_bad_line_is_one_line_error_and_nothing_written(tmp_path, sample):
    meta = tmp_path / "groups.txt"
    meta.write_text("0\n1\nuser\n")
    result = run("train", "--task", "r", "--train", sample("regression.train"), "--method", "mcmc",
                 "--meta", meta, "--save-model", tmp_path / "m.rafm")
    assert result.exit_code == 2
    assert f"{meta}:3: not a non-negative integer (user)" in result.output
    assert not (tmp_path / "m.rafm").exists()


def test_meta_features_beyond_the_file_and_per_group_regular(tmp_path, sample):
    train = sample("regression.train")
    meta = write_meta(tmp_path / "groups.txt", [0] * 50 + [1] * 50)
    args = ["train", "--task", "r", "--train", train, "--method", "als", "--meta", meta, "--iter", 3,
            "--holdout", 0, "--save-model", tmp_path / "m.rafm", "--model", "fm"]
    result = run(*args, "--regular", "0,1,2,3,4")  # r0, r1 per group (3 groups with the extra one): too few
    assert result.exit_code == 2 and "r0,r1_1..r1_3,r2_1..r2_3 (7 values)" in result.output
    result = run(*args, "--regular", "0,1,2,3,4,5,6")
    assert result.exit_code == 0, result.output
    assert "features beyond its 100 lines form group 2" in result.output
    options = model_files.load(str(tmp_path / "m.rafm")).info["options"]
    assert options["reg_linear"] == [1.0, 2.0, 3.0] and options["reg_factors"] == [4.0, 5.0, 6.0]


@pytest.mark.parametrize("method,option,value", [
    ("mcmc", "--learn-rate", "0.1"), ("mcmc", "--regular", "0,1,1"), ("mcmc", "--early-stop", "3"),
    ("als", "--burn-in", "3"), ("als", "--variant", "paper"), ("adagrad", "--keep-samples", "3"),
    ("adagrad", "--meta", "groups.txt"), ("als", "--group-precision", None), ("sgd", "--shared-precision", None),
])
def test_options_a_method_ignores_are_refused(tmp_path, sample, method, option, value):
    result = run("train", "--task", "r", "--train", sample("regression.train"), "--method", method,
                 option, *([value] if value else []), "--save-model", tmp_path / "m.rafm")
    assert result.exit_code == 2, result.output
    assert f"Error: {option} " in result.output  # the spelling the user typed
    assert not (tmp_path / "m.rafm").exists()


def test_burn_in_must_leave_samples(sample):
    result = run("train", "--task", "r", "--train", sample("regression.train"), "--method", "mcmc",
                 "--iter", 5, "--burn-in", 5)
    assert result.exit_code == 2 and "--burn-in" in result.output


def test_version_1_model_files_still_load(tmp_path, sample):
    result = run("train", "--task", "c", "--train", sample("classification.train"), "--iter", 2,
                 "--save-model", tmp_path / "m2.rafm", "--model", "fm")
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "m2.rafm") as src, zipfile.ZipFile(tmp_path / "m1.rafm", "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "model.json":
                header = json.loads(data)
                header["format_version"] = 1
                del header["link"], header["samples"]
                data = json.dumps(header).encode()
            dst.writestr(item, data)
    old = model_files.load(str(tmp_path / "m1.rafm"))
    assert old.link == "logit" and old.samples == []
    test = sample("classification.test")
    outputs = [run("predict", "--model", tmp_path / name, test).output for name in ("m1.rafm", "m2.rafm")]
    assert outputs[0] == outputs[1]


def test_api_mcmc_classifier_matches_the_cli(tmp_path, sample):
    """FMClassifier(method='mcmc') trains the CLI's chain and predicts the mean of its draws' Phi."""
    from rafmcli import api

    args = ["train", "--task", "c", "--train", sample("classification.train"), "--method", "mcmc",
            "--model", "fm", "--dim", 3, "--iter", 8, "--seed", 5, "--save-model", tmp_path / "cli.rafm", "--quiet"]
    assert run(*args).exit_code == 0
    X, y = api.read_data(sample("classification.train"), sparse=False)
    est = api.FMClassifier(method="mcmc", model="fm", ranks=3, iters=8, seed=5).fit(X)
    cli_model = model_files.load(str(tmp_path / "cli.rafm"))
    assert len(est.model_.samples) == len(cli_model.samples) == 8  # burn-in 8 // 10 = 0, all 8 kept
    np.testing.assert_array_equal(est.model_.V, cli_model.V)
    test, _ = api.read_data(sample("classification.test"), sparse=False)
    assert run("predict", "--model", tmp_path / "cli.rafm", "--out", tmp_path / "p.txt",
               sample("classification.test")).exit_code == 0
    expected = np.loadtxt(tmp_path / "p.txt")
    np.testing.assert_allclose(est.predict_proba(test)[:, 1], expected, rtol=1e-6)


def test_kept_means_are_the_means_of_the_chain_stretches(tmp_path, sample):
    """--keep-means K keeps, for K equal stretches after the burn-in, the mean of their draws
    (the same chain kept whole with --keep-draws gives the stretches)."""
    common = ["train", "--task", "r", "--train", sample("regression.train"), "--method", "mcmc", "--model",
              "rafm", "--ranks", "2,4", "--iter", 10, "--burn-in", 4, "--quiet", "--save-model"]
    assert run(*common, tmp_path / "draws.rafm", "--keep-draws", "--keep-samples", 6).exit_code == 0
    assert run(*common, tmp_path / "means.rafm", "--keep-samples", 2).exit_code == 0
    draws = model_files.load(str(tmp_path / "draws.rafm")).samples
    means = model_files.load(str(tmp_path / "means.rafm")).samples
    assert len(draws) == 6 and len(means) == 2
    for kept, stretch in zip(means, (draws[:3], draws[3:])):
        for k in range(3):
            np.testing.assert_allclose(kept[k], np.mean([d[k] for d in stretch], axis=0), rtol=1e-5, atol=1e-6)


def test_dependent_weight_is_the_distillation_weight_of_rafm_mcmc(tmp_path, sample):
    """--dependent-weight c reaches the coordinate solver (0: no distillation term); FM refuses it."""
    base = ("train", "--task", "r", "--train", sample("regression.train"), "--test", sample("regression.test"),
            "--method", "mcmc", "--iter", 6, "--quiet")
    outs = []
    for c in (0, 1, 1):
        out = tmp_path / f"p{len(outs)}.txt"
        result = run(*base, "--model", "rafm", "--ranks", "2,5", "--dependent-weight", c, "--out", out)
        assert result.exit_code == 0, result.output
        outs.append(np.loadtxt(out))
    assert np.array_equal(outs[1], outs[2]) and not np.allclose(outs[0], outs[1])
    result = run(*base, "--model", "fm", "--dependent-weight", 1, "--out", tmp_path / "f.txt")
    assert result.exit_code == 2 and "--dependent-weight applies to --model rafm only" in result.output


def test_mcmc_weighs_the_distillation_term_twice_by_default(tmp_path, sample):
    """--method mcmc without --dependent-weight takes c = 2 (options.METHOD_DEFAULTS), in the CLI and
    the API alike; als keeps 1; a given weight wins."""
    from rafmcli import api

    base = ("train", "--task", "r", "--train", sample("regression.train"), "--model", "rafm", "--ranks", "2,5",
            "--iter", 2, "--quiet", "--save-model")
    for extra, want in ((("--method", "mcmc"), 2.0), (("--method", "als"), 1.0),
                        (("--method", "mcmc", "--dependent-weight", 1), 1.0)):
        path = tmp_path / "m.rafm"
        result = run(*base, path, *extra)
        assert result.exit_code == 0, result.output
        assert model_files.load(str(path)).info["options"]["dependent_weight"] == want, extra
    X, y = api.read_data(sample("regression.train"), sparse=False)
    est = api.FMRegressor(method="mcmc", model="rafm", ranks=(2, 5), iters=2, seed=1).fit(X, y)
    assert est.model_.info["options"]["dependent_weight"] == 2.0
