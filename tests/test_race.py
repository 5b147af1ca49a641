"""The defaults' race: which (pairwise L2, learning rate) pairs `rafm train` races, and how."""

import math
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.io.reader import read_dataset
from rafmcli.model import files as model_file
from rafmcli.options import L2_CHOICES, RATE_STEPS, Options, method_default
from rafmcli.solvers.sgd import race, race_choices, race_rungs


@pytest.fixture
def data(sample):
    return read_dataset(sample("regression.train")), read_dataset(sample("regression.validation"))


def opts_for(method, **given):
    return Options(task="r", model="rafm", ranks=(4, 16), method=method, reg_factors=(0.01, 0.01),
                   learn_rate=method_default(method, "learn_rate"), **given)


@pytest.mark.parametrize("method", ["sgd", "adagrad", "adam"])
def test_race_choices_are_the_table(data, method):
    """Every L2 of the table with every rate step times the method's rate; what is fixed is not raced."""
    train, _ = data
    opts = opts_for(method)
    rates = [opts.learn_rate * s for s in RATE_STEPS[method]]
    assert sorted(race_choices(train, opts).pairs) == sorted((c, r) for c in L2_CHOICES for r in rates)
    assert race_choices(train, opts, rate=False).pairs == [(c, opts.learn_rate) for c in L2_CHOICES]
    assert sorted(race_choices(train, opts, l2=False).pairs) == sorted((None, r) for r in rates)  # None: as given
    assert race_choices(train, opts, l2=False, rate=False) is None
    assert method_default("adam", "learn_rate") * max(RATE_STEPS["adam"]) > 0.005  # Adam's 0.001 alone is slow


def test_a_model_too_large_for_nine_races_l2_alone_and_says_why(data, sample, monkeypatch):
    from rafmcli import options
    from rafmcli.levels import assign_levels, summarize

    train, _ = data
    opts = opts_for("adagrad")
    params = summarize(assign_levels(train.counts, opts.ranks), train.counts, train.n_rows,
                       opts.ranks).params("rafm")
    monkeypatch.setattr(options, "RACE_MAX_PARAMS", 5 * params)
    plan = race_choices(train, opts)
    assert plan.pairs == [(c, opts.learn_rate) for c in L2_CHOICES]
    assert f"learning rate 0.05 not raced: 9 models of {params:,} parameters" in plan.note
    assert race_choices(train, opts, rate=False).note == ""  # a given rate needs no reason
    monkeypatch.setattr(options, "RACE_MAX_PARAMS", 2 * params)  # not even three: nothing raced, and why
    for plan, said in ((race_choices(train, opts), "learning rate 0.05 and pairwise L2 0.01 not raced: 9 models"),
                       (race_choices(train, opts, l2=False), "learning rate 0.05 not raced: 3 models"),
                       (race_choices(train, opts, rate=False), "pairwise L2 0.01 not raced: 3 models")):
        assert plan.pairs == [] and said in plan.note
    assert "--learn-rate and --regular to choose" in race_choices(train, opts).note
    monkeypatch.setattr(options, "RACE_MAX_PARAMS", 5 * params)
    out = CliRunner().invoke(main, ["train", "--task", "r", "--train", sample("regression.train"), "--validation",
                                    sample("regression.validation"), "--ranks", "4,16", "--iter", "2"])
    assert out.exit_code == 0 and "racing 3 values of pairwise L2" in out.output
    assert "rafm: learning rate 0.05 not raced: 9 models of" in out.output and "--learn-rate to choose" in out.output
    monkeypatch.setattr(options, "RACE_MAX_PARAMS", 2 * params)
    out = CliRunner().invoke(main, ["train", "--task", "r", "--train", sample("regression.train"), "--validation",
                                    sample("regression.validation"), "--ranks", "4,16", "--iter", "2",
                                    "--regular", "0,0,0.01"])
    assert out.exit_code == 0 and "racing" not in out.output
    assert "rafm: learning rate 0.05 not raced: 3 models of" in out.output


@pytest.mark.parametrize("method", ["als", "mcmc", "sgda"])
def test_other_methods_do_not_race(data, method):
    assert race_choices(data[0], opts_for(method)) is None


def test_race_runs_every_pair_a_tenth_then_the_best_third_to_the_end(data, monkeypatch):
    """All nine pairs train a tenth of --iter; three go on; the winner is the best of those three
    at the end (not at the first rung), and trains past the first rung."""
    train, valid = data
    opts = replace(opts_for("adagrad"), iters=30, early_stop=3)
    assert race_rungs(100) == (10, 100) and race_rungs(30) == (3, 30) and race_rungs(5) == (1, 5)
    pairs = race_choices(train, opts).pairs
    candidates = [replace(opts, reg_factors=(c, c), learn_rate=r) for c, r in pairs]
    advanced = []
    from rafmcli.solvers import sgd

    original = sgd.Training.advance

    def spy(self, until, *args, **kwargs):
        advanced.append((self.opts.reg_factors[0], self.opts.learn_rate, until))
        return original(self, until, *args, **kwargs)

    monkeypatch.setattr(sgd.Training, "advance", spy)
    run, scores = race(train, opts, valid, candidates, race_rungs(opts.iters))
    first = [a for a in advanced if a[2] == 3]
    assert len(first) == 9 and {a[:2] for a in first} == set(pairs)
    finalists = [a[:2] for a in advanced if a[2] == 30]
    assert len(finalists) == 3
    assert (run.opts.reg_factors[0], run.opts.learn_rate) in finalists
    assert run.epoch > 3 and run.best_value == scores[pairs.index((run.opts.reg_factors[0], run.opts.learn_rate))]
    assert all(run.best_value <= scores[pairs.index(f)] for f in finalists)
    # the three finalists were the best three at the first rung
    first_scores = {}
    monkeypatch.setattr(sgd.Training, "advance", original)
    for c, r in pairs:
        t = sgd.Training(train, replace(opts, reg_factors=(c, c), learn_rate=r), valid)
        t.advance(3)
        first_scores[(c, r)] = t.best[0]
    assert set(finalists) == set(sorted(pairs, key=lambda p: (first_scores[p], pairs.index(p)))[:3])


def test_raced_runs_share_one_copy_of_the_rows_and_train_as_alone(data, monkeypatch):
    """The candidates' row arrays (in internal ids) are one copy, and the winner is the model its
    options train alone."""
    from rafmcli.solvers import sgd

    train, valid = data
    opts = replace(opts_for("adagrad"), iters=4, early_stop=0)
    candidates = [replace(opts, learn_rate=r) for r in (0.02, 0.05, 0.1)]
    rows = []
    original = sgd.Training.advance

    def spy(self, until, *args, **kwargs):
        rows.append(self.data_rows[:3] + self.valid_rows[:3])
        return original(self, until, *args, **kwargs)

    monkeypatch.setattr(sgd.Training, "advance", spy)
    run, _ = race(train, opts, valid, candidates, race_rungs(opts.iters))
    assert len(rows) == 4 and all(a is b for r in rows[1:] for a, b in zip(r, rows[0]))
    monkeypatch.setattr(sgd.Training, "advance", original)
    alone = sgd.Training(train, run.opts, valid)
    alone.advance(opts.iters)
    np.testing.assert_array_equal(alone.model.V, run.model.V)
    assert alone.history[-1]["rmse"] == run.history[-1]["rmse"]


def test_a_diverging_pair_is_out_not_fatal(data):
    train, valid = data
    opts = replace(opts_for("sgd"), iters=6)
    wild = replace(opts, learn_rate=1e6)
    run, scores = race(train, opts, valid, [wild, opts], race_rungs(opts.iters))
    assert math.isnan(scores[0]) and run.opts.learn_rate == opts.learn_rate


def test_finalists_that_diverge_keep_their_best_epoch(data, monkeypatch):
    """Every finalist diverging at the last rung is not fatal: each keeps its best epoch, and the
    best of those is the result, restored to that epoch's parameters."""
    from rafmcli.errors import DivergedError
    from rafmcli.solvers import sgd

    train, valid = data
    opts = replace(opts_for("adagrad"), iters=6, early_stop=0)
    candidates = [replace(opts, learn_rate=r) for r in (0.02, 0.05, 0.1)]
    original = sgd.Training.advance
    kept = {}

    def diverge_late(self, until, *args, **kwargs):
        if until < opts.iters:
            return original(self, until, *args, **kwargs)
        original(self, self.epoch + 1, *args, **kwargs)
        kept[self.opts.learn_rate] = (self.best[1], self.best[2][2].copy())
        raise DivergedError("diverged")

    monkeypatch.setattr(sgd.Training, "advance", diverge_late)
    run, scores = race(train, opts, valid, candidates, (1, opts.iters))
    assert len(kept) == 1 and all(math.isfinite(v) for v in scores)
    assert run.stopped and run.opts.learn_rate in kept
    model, _ = run.result()
    best_epoch, best_V = kept[run.opts.learn_rate]
    assert run.best_epoch == best_epoch and np.array_equal(model.V, best_V)


def test_cli_races_what_is_not_given(sample, tmp_path):
    """Without --regular and --learn-rate both are raced and the chosen pair is what the model keeps;
    a given --learn-rate is not raced, and with both given there is no race."""
    base = ["train", "--task", "r", "--train", sample("regression.train"), "--validation",
            sample("regression.validation"), "--ranks", "4,16", "--iter", "10", "--seed", "2"]
    saved = str(tmp_path / "m.rafm")
    out = CliRunner().invoke(main, base + ["--save-model", saved])
    assert out.exit_code == 0, out.output
    rates = [0.05 * s for s in RATE_STEPS["adagrad"]]
    assert "racing 9 pairs" in out.output and "0.025, 0.05, 0.1" in out.output
    kept = model_file.load(saved).info["options"]
    chosen = out.output.split("pairwise L2 ")[-1].split(" chosen")[0]
    assert chosen == f"{kept['reg_factors'][0]:g} and learning rate {kept['learn_rate']:g}"
    assert any(np.isclose(kept["learn_rate"], r) for r in rates) and kept["reg_factors"][0] in L2_CHOICES
    out = CliRunner().invoke(main, base + ["--learn-rate", "0.02", "--save-model", saved])
    assert "racing 3 values of pairwise L2" in out.output
    assert model_file.load(saved).info["options"]["learn_rate"] == 0.02
    assert "chosen (at learning rate 0.02) on validation rmse (best of each: " in out.output  # given: not "chosen"
    assert "; --regular fixes it\n" in out.output
    out = CliRunner().invoke(main, base + ["--regular", "0,0,0.01", "--save-model", saved])
    assert "racing 3 values of learning rate" in out.output and "chosen (at pairwise L2 0.01)" in out.output
    # a per-level L2 the user gave is kept whole while the rate is raced
    out = CliRunner().invoke(main, base + ["--ranks", "2,4,8", "--regular", "0,0,0.001,0.5,0.5", "--save-model", saved])
    assert out.exit_code == 0, out.output
    assert model_file.load(saved).info["options"]["reg_factors"] == [0.001, 0.5, 0.5]
    assert "(at pairwise L2 0.001,0.5,0.5)" in out.output
    out = CliRunner().invoke(main, base + ["--learn-rate", "0.02", "--regular", "0,0,0.01"])
    assert out.exit_code == 0 and "racing" not in out.output
