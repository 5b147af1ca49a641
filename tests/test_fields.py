"""Feature groups inferred from the rows (rafmcli/fields.py) and what the solvers make of them."""

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.fields import infer
from rafmcli.io.columns import build
from rafmcli.io.reader import read_dataset

USERS, ITEMS = 60, 40
FIELDS = {"user": USERS, "item": ITEMS, "age": 5, "gender": 2, "category": 6, "context": 3}


def one_hot_rows(rng, n_rows, numeric=0):
    """Rows of one user, one item and their side fields (age, gender of the user, category of
    the item) and a context, ids shuffled across fields; ``numeric`` dense columns after them.
    Returns (rows as [(id, value)], field of each id)."""
    ids = rng.permutation(sum(FIELDS.values()))
    start = dict(zip(FIELDS, np.cumsum([0] + list(FIELDS.values()))))
    age, gender, category = rng.integers(0, 5, USERS), rng.integers(0, 2, USERS), rng.integers(0, 6, ITEMS)
    field_of = np.empty(len(ids), dtype=np.int64)
    for k, name in enumerate(FIELDS):
        field_of[ids[start[name]:start[name] + FIELDS[name]]] = k
    rows = []
    for _ in range(n_rows):
        u, i = rng.zipf(1.5) % USERS, rng.integers(0, ITEMS)
        value = {"user": u, "item": i, "age": age[u], "gender": gender[u], "category": category[i],
                 "context": rng.integers(0, 3)}
        row = [(int(ids[start[name] + value[name]]), 1.0) for name in FIELDS]
        row += [(len(ids) + k, round(float(rng.normal()), 3)) for k in range(numeric)]
        rows.append(row)
    return rows, field_of


def write(path, rows, rng):
    with open(path, "w") as fh:
        for row in rows:
            fh.write(f"{rng.normal():.3f} " + " ".join(f"{i}:{v:g}" for i, v in sorted(row)) + "\n")
    return str(path)


def partition(labels):
    """A partition as a set of frozensets of positions, whatever the labels' names."""
    labels = np.asarray(labels)
    return {frozenset(np.flatnonzero(labels == g).tolist()) for g in np.unique(labels)}


def inferred(path):
    data = read_dataset(path)
    return data, infer(data, build(data))


def test_inferred_groups_are_the_one_hot_fields(tmp_path):
    """User and item one-hot with side fields that are functions of them (age, gender, category),
    a free context field and two numeric columns: the six fields, the numeric columns in a
    seventh group."""
    rng = np.random.default_rng(5)
    rows, field_of = one_hot_rows(rng, 1500, numeric=2)
    data, found = inferred(write(tmp_path / "t.libfm", rows, rng))
    ids = np.asarray(data.feature_ids)
    truth = np.where(ids < field_of.shape[0], field_of[np.minimum(ids, field_of.shape[0] - 1)], len(FIELDS))
    assert partition(found.assignment.group) == partition(truth)
    assert found.rest == 2 and found.assignment.n_groups == len(FIELDS) + 1
    assert sorted(found.field_sizes, reverse=True) == list(found.field_sizes)
    assert set(found.field_sizes) == {int((truth == k).sum()) for k in range(len(FIELDS))}


@pytest.mark.parametrize("words", [6, 30])
def test_data_without_fields_gets_one_group(tmp_path, words):
    """Bags of words (six or thirty of 300 words a row, Zipf): one group, as without inference."""
    rng = np.random.default_rng(words)
    rows = [[(int(w), 1.0) for w in np.unique(rng.zipf(1.3, words) % 300)] for _ in range(1500)]
    _, found = inferred(write(tmp_path / "bow.libfm", rows, rng))
    assert (found.assignment.n_groups, found.field_sizes) == (1, ())
    assert not found.assignment.group.any()


def test_mcmc_trains_with_the_inferred_groups(tmp_path):
    """`rafm train --method mcmc` without --meta gives the same chain as with a --meta file of the
    true fields (numbered as inferred: largest first), and says so; --no-auto-groups gives the
    one-group chain."""
    rng = np.random.default_rng(7)
    rows, field_of = one_hot_rows(rng, 600)
    train = write(tmp_path / "t.libfm", rows, rng)
    sizes = np.bincount(field_of)
    number = np.empty(len(sizes), dtype=np.int64)
    number[np.argsort(-sizes, kind="stable")] = np.arange(len(sizes))
    (tmp_path / "fields.meta").write_text("".join(f"{number[f]}\n" for f in field_of))

    def chain(*extra):
        out = tmp_path / "p.txt"
        result = CliRunner().invoke(main, ["train", "--task", "r", "--train", train, "--test", train, "--out",
                                           str(out), "--model", "fm", "--dim", "2", "--method", "mcmc",
                                           "--iter", "6", *extra])
        assert result.exit_code == 0, result.output
        return np.loadtxt(out), result.output

    auto, said = chain()
    assert "feature groups: 6 one-hot fields inferred from the training rows" in said
    given, _ = chain("--meta", str(tmp_path / "fields.meta"))
    one, said_off = chain("--no-auto-groups")
    np.testing.assert_array_equal(auto, given)
    assert not np.array_equal(auto, one) and "feature groups" not in said_off



def test_inferred_groups_do_not_hurt_mcmc_on_the_samples():
    """data_samples/regression (3,000 rows, five one-hot fields and a numeric column), FM rank 32,
    40 MCMC iterations, seeds 1-3 averaged (one seed's chain moves test RMSE by a few hundredths):
    with each group's own prior precision (libFM's, --group-precision) the inferred groups cost
    0.06-0.12 test RMSE against one group over seeds 1-6 (0.09-0.22 at 100 iterations; libFM
    with the same -meta file alike); with the shared precision (the default) -0.004 to 0.055
    over seeds 1-6, 0.03 on average over seeds 1-3."""
    from dataclasses import replace

    from conftest import ROOT

    from rafmcli.options import METHOD_DEFAULTS, Options
    from rafmcli.solvers import coordinate as C

    train, test = (read_dataset(f"{ROOT}/data_samples/regression.{s}.libfm") for s in ("train", "test"))

    def rmse(seed, **change):
        opts = replace(Options(), task="r", model="fm", ranks=(32,), method="mcmc", iters=40, seed=seed,
                       **METHOD_DEFAULTS["mcmc"], **change)
        result = C.train(train, opts, test=test, quiet=True, progress=False)
        return float(np.sqrt(np.mean((result.test_predictions - test.labels) ** 2)))

    seeds = (1, 2, 3)
    one, grouped, own = (np.mean([rmse(seed, **change) for seed in seeds])
                         for change in ({"auto_groups": False}, {}, {"shared_precision": False}))
    assert grouped < one + 0.05, (grouped, one)
    assert own > grouped + 0.03, (own, grouped)
