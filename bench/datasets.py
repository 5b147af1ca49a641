"""The benchmark data sets as libFM files under bench/data/ (made once, never committed).

    python bench/datasets.py            # make them all and print what they hold

* ``ml100k-ids``: MovieLens 100K split u1, rating regression, user and item one-hot
  (as libFM's reference runs).
* ``ml100k-side``: the same plus age bucket, gender, occupation, zip code and item
  genres (1/number of genres each), so feature frequencies range from 1 to thousands.
* ``ml100k-click``: the side-feature rows as a click task, rating >= 4 is a click.
* ``rankaware``: a generated click set whose interactions really are rank-aware
  (:func:`rank_aware_rows`).

MovieLens is converted by bench/ml100k.py (from ../shared/datasets/ml-100k or
$RAFM_ML100K; its licence forbids copying it into the repository). Every set
has ``train`` and ``test``; validation is the seeded 10% hold-out of ``train``
that ``rafm train`` and ``rafm tune`` use.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)
import ml100k  # noqa: E402  (the MovieLens converter)

# name -> task
SETS = {"ml100k-ids": "r", "ml100k-side": "r", "ml100k-click": "c", "rankaware": "c"}


def _click(out, source):
    """The side-feature rows with rating >= 4 as label 1, else 0."""
    for split in ("train", "test"):
        with open(source[split]) as src, open(out[split] + ".tmp", "w") as fh:
            for line in src:
                rating, _, rest = line.partition(" ")
                fh.write(("1" if float(rating) >= 4 else "0") + " " + rest)
        os.replace(out[split] + ".tmp", out[split])


def rank_aware_rows(rng, n_rows, fields=(20000, 5000, 2000, 500, 100, 30), exponent=1.1, ranks=(4, 32),
                    frequent=64, total_rows=None):
    """A click set whose pairwise interactions are a planted RaFM.

    Each row holds one value of each field, drawn from a Zipf law (ids shuffled
    within the field). A feature whose expected count over ``total_rows`` is at
    least ``frequent`` interacts through a rank-``ranks[1]`` vector with other
    frequent features and through its rank-``ranks[0]`` vector with everything
    else; a rare feature has only the rank-``ranks[0]`` vector. Vectors are
    scaled so that both kinds of pair carry the same variance. The label is a
    Bernoulli draw of sigmoid(bias + linear + pairs). Returns (labels, ids
    [rows, fields], vocabulary size).
    """
    total_rows = total_rows or n_rows
    sizes = np.asarray(fields)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    n_features = int(starts[-1])
    planted = np.random.default_rng(12345)  # the planted model is the same for every split
    prob = np.concatenate([(1.0 / np.arange(1, s + 1) ** exponent) / (1.0 / np.arange(1, s + 1) ** exponent).sum()
                           for s in sizes])
    perm = np.concatenate([starts[f] + planted.permutation(s) for f, s in enumerate(sizes)])
    top = prob * total_rows >= frequent  # indexed by frequency rank within field
    low = planted.normal(0, ranks[0] ** -0.25, (n_features, ranks[0]))
    high = planted.normal(0, ranks[1] ** -0.25, (n_features, ranks[1]))
    w = planted.normal(0, 0.2, n_features)
    ids_by_rank = np.empty((n_rows, len(sizes)), dtype=np.int64)
    for f, s in enumerate(sizes):
        cdf = np.cumsum(prob[starts[f]:starts[f + 1]])
        ids_by_rank[:, f] = starts[f] + np.minimum(np.searchsorted(cdf, rng.random(n_rows) * cdf[-1]), s - 1)
    score = np.full(n_rows, -1.0) + w[ids_by_rank].sum(1)
    for a in range(len(sizes)):
        for b in range(a + 1, len(sizes)):
            i, j = ids_by_rank[:, a], ids_by_rank[:, b]
            both = top[i] & top[j]
            score += np.where(both, (high[i] * high[j]).sum(1), (low[i] * low[j]).sum(1))
    labels = (rng.random(n_rows) < 1 / (1 + np.exp(-score))).astype(int)
    return labels, perm[ids_by_rank], n_features


def _rankaware(out, n_train=100_000, n_test=25_000, seed=3):
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("test", n_test)):
        labels, ids, _ = rank_aware_rows(rng, n, total_rows=n_train)
        ids = np.sort(ids, axis=1)
        with open(out[split] + ".tmp", "w") as fh:
            fmt = "%d" + " %d:1" * ids.shape[1] + "\n"
            fh.write("".join(fmt % (lab, *row) for lab, row in zip(labels.tolist(), ids.tolist())))
        os.replace(out[split] + ".tmp", out[split])


def paths(name):
    """{"train": path, "test": path} of set ``name``, made on first use."""
    if name in ("ml100k-ids", "ml100k-side"):
        return ml100k.convert(ids_only=name == "ml100k-ids")
    out = {s: os.path.join(DATA, f"{name}.{s}.libfm") for s in ("train", "test")}
    if not all(os.path.exists(p) for p in out.values()):
        os.makedirs(DATA, exist_ok=True)
        if name == "rankaware":
            _rankaware(out)
        else:
            _click(out, ml100k.convert(ids_only=False))
    return out


def main():
    from rafmcli.io.reader import read_dataset

    for name in sys.argv[1:] or SETS:
        files = paths(name)
        data = read_dataset(files["train"])
        test = read_dataset(files["test"])
        print(f"{name:<13} task {SETS[name]}  train {data.n_rows:>7,} rows  test {test.n_rows:>7,}  "
              f"{data.feature_ids.shape[0]:>6,} features  {data.nnz / data.n_rows:.1f} non-zeros a row  "
              f"mean label {np.mean(data.labels):.3f}")


if __name__ == "__main__":
    main()
