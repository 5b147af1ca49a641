"""The Python API through `import rafmcli.api`: one table of defaults with the CLI, the CLI's
model files both ways, every X kind, and scikit-learn's estimator checks when it is installed.

Estimator checks that cannot apply here and are skipped by scikit-learn itself: the pandas
ones when pandas is not installed (rafm does not need it), and array-API input (SCIPY_ARRAY_API
unset). FMClassifier declares ``multi_class=False``: it is a binary classifier, as libFM's -task c.
"""

import dataclasses
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli import api
from rafmcli.cli import main
from rafmcli.model.layout import CACHE_LINE
from rafmcli.options import METHOD_DEFAULTS, METHODS, METRICS, RANGES, VARIANTS, Options, Range


def cli(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result


def test_import_is_light():
    code = ("import sys, rafmcli, rafmcli.api; "
            "print(sorted(m for m in ('numba', 'scipy', 'sklearn', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_parameters_are_the_options_table():
    fields = {f.name for f in dataclasses.fields(Options)}
    assert set(api.IMPLICIT_ONLY) <= fields
    fields -= {"task", *api.IMPLICIT_ONLY}
    for cls, task in ((api.FMRegressor, "r"), (api.FMClassifier, "c")):
        est = cls()
        assert set(est.get_params()) == fields | {"levels", "warm_start", "verbose"}
        assert est.options() == Options(task=task)  # None everywhere: the table's defaults
    assert api.FMRegressor(model="difacto").options().ranks is None  # fit chooses them from the data
    assert api.FMRegressor(method="adam").options().learn_rate == METHOD_DEFAULTS["adam"]["learn_rate"]
    opts = api.FMRegressor(model="fm", ranks=6, reg_factors=0.5, learn_rate=0.2).options()
    assert (opts.ranks, opts.reg_factors, opts.learn_rate) == ((6,), (0.5,), 0.2)
    assert api.FMRegressor(ranks="4,16").options().ranks == (4, 16)
    for bad in (dict(model="fm", ranks=(4, 8)), dict(model="ffm"), dict(ranks=(8, 4)), dict(iters=0)):
        with pytest.raises(ValueError):
            api.FMRegressor(**bad).options()


def test_ranges_are_the_clis():
    """options.RANGES and METHODS hold what rafm train's click types take, every range of them."""
    import click

    from rafmcli.cli.options import SEED, FloatListType, GroupListType
    from rafmcli.cli.recommend import recommend
    from rafmcli.cli.train import train
    from rafmcli.options import FLOAT32_MAX

    types = {p.name: p.type for p in train.params}
    for name, allowed in RANGES.items():
        kind = types.get("regular" if name.startswith("reg_") else name)
        if name in ("beta1", "beta2", "eps"):
            assert kind is None  # Adam's own, no option of rafm train
        elif name == "seed":
            assert allowed == Range(SEED.low, SEED.high, integer=True)
        elif isinstance(kind, (FloatListType, GroupListType)):
            high = None if isinstance(kind, GroupListType) else FLOAT32_MAX  # FloatListType's bound
            assert allowed == Range(0, high, integer=isinstance(kind, GroupListType)), name
        else:
            assert (kind.min, kind.max, kind.min_open, kind.max_open, isinstance(kind, click.IntRange)) == allowed, name
    assert {n for n, t in types.items() if isinstance(t, (click.IntRange, click.FloatRange))} - set(RANGES) == {"dim"}
    assert (tuple(types["method"].choices), tuple(types["variant"].choices), tuple(types["metric"].choices)) == (
        METHODS, VARIANTS, METRICS)
    k = next(p.type for p in recommend.params if p.name == "top_k")  # rafm recommend -k: FMImplicit.recommend's k
    assert (k.min, k.max, k.min_open, k.max_open, isinstance(k, click.IntRange)) == RANGES["top_k"]


@pytest.mark.parametrize("cls,bad", [
    (api.FMRegressor, dict(reg_factors=-1.0)), (api.FMRegressor, dict(reg_factors=(0.1, -1))),
    (api.FMRegressor, dict(reg_linear=float("inf"))), (api.FMRegressor, dict(reg_bias=-1)),
    (api.FMRegressor, dict(init_stdev=-1.0)), (api.FMRegressor, dict(early_stop=-1)),
    (api.FMRegressor, dict(holdout=0.9)), (api.FMClassifier, dict(holdout=-0.1)), (api.FMRegressor, dict(iters=0)),
    (api.FMRegressor, dict(iters=2.5)), (api.FMRegressor, dict(threads=-1)), (api.FMRegressor, dict(learn_rate=0)),
    (api.FMRegressor, dict(learn_rate="fast")), (api.FMRegressor, dict(dependent_rate=0.0)),
    (api.FMRegressor, dict(dependent_weight=-1)), (api.FMRegressor, dict(seed=2**64)),
    (api.FMRegressor, dict(seed=True)), (api.FMRegressor, dict(keep_samples=0, method="mcmc")),
    (api.FMRegressor, dict(burn_in=-1, method="mcmc")), (api.FMRegressor, dict(burn_in=20, method="mcmc", iters=20)),
    (api.FMRegressor, dict(beta1=1.0)), (api.FMRegressor, dict(eps=0)), (api.FMRegressor, dict(method="lbfgs")),
    (api.FMRegressor, dict(variant="paper2")), (api.FMRegressor, dict(metric="auc")),
    (api.FMClassifier, dict(metric="rmse")), (api.FMImplicit, dict(negatives=0)), (api.FMImplicit, dict(alpha1=11)),
    (api.FMImplicit, dict(alpha2=-1)), (api.FMImplicit, dict(eval_share=1.5)), (api.FMImplicit, dict(top_k=0)),
    (api.FMImplicit, dict(eval_group=-1)), (api.FMImplicit, dict(negative_groups=(0, -1))),
    (api.FMImplicit, dict(holdout=0.6))])
def test_the_api_refuses_what_the_cli_refuses(cls, bad):
    """At fit, a ValueError naming the parameter and what it takes (rafm train: exit 2)."""
    name = next(iter(bad))
    with pytest.raises(ValueError, match=rf"^{name} must be (an integer in \[|a number in [\[(]|one of |below iters)"):
        cls(**bad).fit(np.ones((4, 2)), [0, 1, 0, 1])


def test_the_api_takes_what_the_cli_takes():
    assert api.FMRegressor(method="lbfgs").get_params()["method"] == "lbfgs"  # refused at fit, not before
    with pytest.raises(ValueError, match=r"^holdout must be a number in \[0, 0.5\], not 0.9$"):
        api.FMRegressor(holdout=0.9).options()
    with pytest.raises(ValueError, match="^method must be one of sgd, adagrad, rowwise-adagrad, adam, sgda, als, mcmc, "
                                         "not 'lbfgs'$"):
        api.FMRegressor(method="lbfgs").options()
    opts = api.FMRegressor(holdout=0.5, early_stop=0, threads=0, reg_factors=0, seed=-1, iters=np.int64(3)).options()
    assert (opts.holdout, opts.early_stop, opts.seed) == (0.5, 0, 2**64 - 1)  # rafm train --seed -1 alike
    assert api.FMRegressor(method="mcmc", burn_in=19, iters=20).options().burn_in == 19
    assert api.FMImplicit(negative_groups=[2, 0, 2], eval_share=0).options().negative_groups == (0, 2)


@pytest.mark.parametrize("given", [{"ranks": (4, 16)}, {}, {"method": "adam", "reg_factors": 0.05}])
def test_same_model_as_the_cli(sample, tmp_path, given):
    """The API and `rafm train` with the same options train the same model: without ranks both
    choose them from the data, without L2 or learning rate both race them on the validation rows."""
    saved = tmp_path / "cli.rafm"
    words = {"ranks": ["--ranks", "4,16"], "method": ["--method", "adam"], "reg_factors": ["--regular", "0,0,0.05"]}
    cli(["train", "--task", "r", "--seed", "3", "--iter", "6", "--train", sample("regression.train"),
         "--save-model", str(saved), "--quiet"] + [w for name in given for w in words[name]])
    X, y = api.read_data(sample("regression.train"))
    est = api.FMRegressor(seed=3, iters=6, **given).fit(X, y)
    trained = api.load(saved)
    assert (est.model_.ranks, est.model_.info["options"]["learn_rate"]) == (trained.model_.ranks, trained.learn_rate)
    assert list(est.model_.info["options"]["reg_factors"]) == list(trained.model_.info["options"]["reg_factors"])
    Xt, _ = api.read_data(sample("regression.test"))
    from_cli = np.array(cli(["predict", "--quiet", "--model", str(saved), sample("regression.test")])
                        .stdout.split(), dtype=float)
    np.testing.assert_allclose(est.predict(Xt), from_cli, rtol=1e-8)


@pytest.mark.parametrize("cls,name", [(api.FMRegressor, "regression"), (api.FMClassifier, "classification")])
def test_model_files_both_ways(sample, tmp_path, cls, name):
    X, y = api.read_data(sample(f"{name}.train"))
    est = cls(ranks=(4, 16), iters=4).fit(X, y)
    est.save(tmp_path / "py.rafm")
    test = sample(f"{name}.test")
    Xt, _ = api.read_data(test)
    ours = est.predict_proba(Xt)[:, 1] if cls is api.FMClassifier else est.predict(Xt)
    theirs = np.array(cli(["predict", "--quiet", "--model", str(tmp_path / "py.rafm"), test]).stdout.split(),
                      dtype=float)
    np.testing.assert_allclose(ours, theirs, rtol=1e-8)
    # and back: a CLI model in Python
    task = "c" if cls is api.FMClassifier else "r"
    cli(["train", "--task", task, "--model", "difacto", "--ranks", "2,8", "--iter", "3", "--train",
         sample(f"{name}.train"), "--save-model", str(tmp_path / "cli.rafm"), "--quiet"])
    loaded = api.load(tmp_path / "cli.rafm")
    assert type(loaded) is cls and loaded.model == "difacto" and loaded.ranks == (2, 8)
    theirs = np.array(cli(["predict", "--quiet", "--model", str(tmp_path / "cli.rafm"), test]).stdout.split(),
                      dtype=float)
    ours = loaded.predict_proba(Xt)[:, 1] if cls is api.FMClassifier else loaded.predict(Xt)
    np.testing.assert_allclose(ours, theirs, rtol=1e-8)
    with pytest.raises(ValueError, match="load it with"):
        (api.FMRegressor if cls is api.FMClassifier else api.FMClassifier).load(tmp_path / "cli.rafm")


def test_every_kind_of_x_gives_the_same_model(sample):
    scipy = pytest.importorskip("scipy.sparse")
    X, y = api.read_data(sample("classification.train"))
    D, labels = api.read_data(sample("classification.train"), sparse=False)
    np.testing.assert_array_equal(labels, y)
    probe = X[:50]
    results = []
    for form in (X, scipy.csc_matrix(X), X.toarray(), D):
        est = api.FMClassifier(ranks=(4, 16), iters=3).fit(form, None if form is D else y)
        results.append(est.predict_proba(probe))
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], rtol=1e-7)
    assert est.predict(D).shape == (D.n_rows,)


def test_eval_set_replaces_the_holdout(sample):
    X, y = api.read_data(sample("regression.train"))
    Xv, yv = api.read_data(sample("regression.validation"), n_features=X.shape[1] + 500)
    est = api.FMRegressor(ranks=(4, 16), iters=30, early_stop=2).fit(X, y, eval_set=(Xv, yv))
    best = min(h["rmse"] for h in est.history_)
    assert est.model_.info["training"]["validation"]["rmse"] == best
    again = np.sqrt(np.mean((est.predict(Xv) - yv) ** 2))
    assert again == pytest.approx(best, rel=1e-6)


def test_string_classes_survive_save_and_load(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, (200, 6)).astype(float)
    y = np.where(X[:, 0] * X[:, 1] + X[:, 2] > 0.5, "yes", "no")
    est = api.FMClassifier(model="fm", ranks=4, iters=30, holdout=0, learn_rate=0.1).fit(X, y)
    assert list(est.classes_) == ["no", "yes"]
    assert set(est.predict(X)) <= {"no", "yes"} and est.score(X, y) > 0.9
    est.save(tmp_path / "m.rafm")
    again = api.load(tmp_path / "m.rafm")
    assert list(again.classes_) == ["no", "yes"]
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    with pytest.raises(ValueError, match="not seen in fit"):
        est.fit(X, y, eval_set=(X, np.where(y == "yes", "maybe", y)))


def test_predict_follows_predict_proba(sample):
    """predict is classes_[argmax(predict_proba)], an MCMC model's too, whose probability (the mean
    of its samples' Phi) and mean margin can fall on either side of 0.5; a tie goes to classes_[0]."""
    X, y = api.read_data(sample("classification.train"))
    est = api.FMClassifier(ranks=(2, 8), method="mcmc", iters=20, threads=1).fit(X, y)
    proba = est.predict_proba(X)
    assert np.any((est.decision_function(X) > 0) != (proba[:, 1] > 0.5))  # the rows at stake
    np.testing.assert_array_equal(est.predict(X), est.classes_[np.argmax(proba, axis=1)])
    est.predict_proba = lambda X: np.array([[0.5, 0.5], [0.4, 0.6]])
    np.testing.assert_array_equal(est.predict(X[:2]), est.classes_)


def test_a_warm_fit_keeps_the_classes(tmp_path):
    """A warm fit on other classes would flip the positive class under the continued model: refused,
    its own or a loaded model's; a cold fit takes the new classes."""
    X = np.random.default_rng(0).integers(0, 2, (200, 6)).astype(float)
    y = (X[:, 0] > 0).astype(int)
    others = np.where(y > 0, "a", "b")
    est = api.FMClassifier(model="fm", ranks=4, iters=2, holdout=0, warm_start=True).fit(X, y)
    before = est.predict_proba(X)
    with pytest.raises(ValueError, match=r"^a warm fit keeps the classes \[0, 1\] of the fitted model, not "
                                         r"\['a', 'b'\]"):
        est.fit(X, others)
    assert list(est.classes_) == [0, 1]
    np.testing.assert_array_equal(est.predict_proba(X), before)
    est.fit(X, 1 - y)  # the same classes continue
    est.save(tmp_path / "m.rafm")
    loaded = api.load(tmp_path / "m.rafm").set_params(warm_start=True)
    with pytest.raises(ValueError, match="warm fit keeps the classes"):
        loaded.fit(X, others)
    assert list(est.set_params(warm_start=False).fit(X, others).classes_) == ["a", "b"]


def implicit_rows():
    """(40 rows of two one-hot groups of 3 features, their groups)."""
    return np.eye(6)[np.random.default_rng(1).integers(0, 3, (40, 2)) + [0, 3]].sum(axis=1), [0, 0, 0, 1, 1, 1]


def implicit_fit(rows, groups):
    return api.FMImplicit(groups=groups, model="fm", ranks=2, iters=1, holdout=0).fit(rows)


def test_recommend_takes_k_from_1():
    """As rafm recommend -k (exit 2 below 1): k=0 gave empty lists."""
    rows, groups = implicit_rows()
    est = implicit_fit(rows, groups)
    for k in (0, -1, 2.5):
        with pytest.raises(ValueError, match=rf"^k must be an integer in \[1, inf\), not {k}$"):
            est.recommend(rows, group=1, k=k)
    assert [len(names) for names in est.recommend(rows[:2], group=1, k=1)[0]] == [1, 1]


def test_a_loaded_estimator_knows_the_width_of_x(sample, tmp_path):
    """n_features_in_ goes with the model file (its info) and pickles, so a loaded estimator refuses
    a dense X of another width as the fitted one does; a Dataset's fit records none, nor does the CLI."""
    from rafmcli.model import files

    X, y = api.read_data(sample("classification.train"))
    dense = X.toarray()
    est = api.FMClassifier(ranks=(2, 8), iters=2).fit(dense, y)
    est.save(tmp_path / "m.rafm")
    for again in (api.load(tmp_path / "m.rafm"), api.FMClassifier.load(tmp_path / "m.rafm"),
                  pickle.loads(pickle.dumps(api.load(tmp_path / "m.rafm")))):
        assert again.n_features_in_ == dense.shape[1]
        with pytest.raises(ValueError, match=f"X has 100 features, but FMClassifier is expecting {dense.shape[1]}"):
            again.predict(dense[:, :100])
        np.testing.assert_array_equal(again.predict(X[:, :100]), est.predict(X[:, :100]))  # by id, as before
    implicit_fit(*implicit_rows()).save(tmp_path / "i.rafm")
    assert api.load(tmp_path / "i.rafm").n_features_in_ == 6
    model = files.load(str(tmp_path / "m.rafm"))
    model.info["training"]["n_features_in"] = "1181"
    files.save(model, str(tmp_path / "bad.rafm"))
    with pytest.raises(ValueError, match="bad.rafm: damaged model file.*n_features_in.*positive integer"):
        api.load(tmp_path / "bad.rafm")
    D, labels = api.read_data(sample("classification.train"), sparse=False)
    est.fit(D)
    assert not hasattr(est, "n_features_in_")
    est.save(tmp_path / "d.rafm")
    assert not hasattr(api.load(tmp_path / "d.rafm"), "n_features_in_")


def test_errors_are_python_errors(sample, tmp_path):
    bad = tmp_path / "bad.libfm"
    bad.write_text("1 3:1\n1 3:x\n")
    with pytest.raises(ValueError, match=r"bad.libfm:2: value is not a number \(3:x\)"):
        api.read_data(bad)
    for error in (ValueError, AttributeError):  # rafm's NotFittedError, or scikit-learn's once imported
        with pytest.raises(error, match="not fitted"):
            api.FMRegressor().predict(np.ones((2, 2)))
    with pytest.raises(ValueError, match="2 classes"):
        api.FMClassifier().fit(np.ones((4, 2)), [1, 1, 1, 1])
    with pytest.raises(RuntimeError, match="diverged"):
        api.FMRegressor(model="fm", learn_rate=1e30, init_stdev=1, holdout=0, iters=3).fit(
            *api.read_data(sample("regression.train")))


def test_pickle_keeps_factors_on_cache_lines(sample):
    X, y = api.read_data(sample("regression.train"))
    est = api.FMRegressor(ranks=(4, 16), iters=2).fit(X, y)
    again = pickle.loads(pickle.dumps(est))
    assert again.model_.V.ctypes.data % CACHE_LINE == 0
    np.testing.assert_array_equal(again.predict(X), est.predict(X))


def test_an_estimator_mapped_read_only_gets_writable_parameters(sample, tmp_path):
    """joblib's load(mmap_mode="r") maps the arrays read-only, which numba types apart: the
    unpickled model's parameters, its kept MCMC draws' too, are writable copies on cache lines
    (one compile of each prediction kernel), and predict as before."""
    joblib = pytest.importorskip("joblib")
    X, y = api.read_data(sample("regression.train"))
    est = api.FMRegressor(ranks=(4, 16), method="mcmc", iters=6, keep_samples=3).fit(X, y)
    joblib.dump(est, tmp_path / "est.joblib")
    again = joblib.load(tmp_path / "est.joblib", mmap_mode="r")
    arrays = [again.model_.w, again.model_.V] + [a for _, w, V in again.model_.samples for a in (w, V)]
    assert len(again.model_.samples) == 3
    assert all(a.flags.writeable for a in arrays)
    assert all(V.ctypes.data % CACHE_LINE == 0 for V in arrays[1::2])
    np.testing.assert_array_equal(again.predict(X), est.predict(X))


def test_readme_notebook_session_runs(tmp_path):
    """README's notebook section, executed as it stands, from the repository root."""
    pytest.importorskip("scipy")
    from conftest import ROOT, child_env

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    code = "\n".join(line[4:] if line.startswith((">>> ", "... ")) else "" for line in block.splitlines())
    os.symlink(os.path.join(ROOT, "data_samples"), tmp_path / "data_samples")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env=child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "clicks.rafm").exists()


try:
    from sklearn.utils.estimator_checks import parametrize_with_checks
except ImportError:
    def test_sklearn_checks():
        pytest.skip("scikit-learn is not installed (pip install 'rafm[api]')")
else:
    import warnings

    with warnings.catch_warnings():  # rafm keeps scikit-learn optional: no BaseEstimator to inherit
        warnings.filterwarnings("ignore", "Estimator .* does not inherit from")
        checks = parametrize_with_checks([api.FMRegressor(iters=5), api.FMClassifier(iters=5)])

    @checks
    def test_sklearn_checks(estimator, check):
        check(estimator)
