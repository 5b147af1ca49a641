"""Synthetic libFM files with Zipf-like feature frequencies.

Two kinds of data:

* ``samples``: the small train/validation/test files in ``data_samples/``.
  Each row is a user, an item and three context fields, one-hot, plus one
  real-valued feature; the target comes from a planted FM (rank 4) so a
  model has something to learn. Regression targets are the FM score plus
  noise; classification labels are Bernoulli(sigmoid(score)) in {0, 1}.
  ``implicit.*`` are positives only (user, item with its genres, hour) with
  their group file ``implicit.meta``: users pick items by planted tastes.
* ``zipf``: large files for the benchmarks (ids Zipf-distributed over a
  vocabulary, labels random or planted), written fast.

Run ``python -m rafmcli.synth --help``.
"""

import os

import click
import numpy as np

SAMPLE_FIELDS = (("user", 600, 1.05), ("item", 400, 1.0), ("hour", 24, 0.3),
                 ("device", 6, 0.8), ("site", 150, 1.2))
SAMPLE_SPLITS = (("train", 3000), ("validation", 600), ("test", 600))
PLANTED_RANK = 4


def zipf_ids(rng, n, vocab, exponent, shuffle=True):
    """n draws from P(rank r) ~ 1/r^exponent over ``vocab`` ids.

    With ``shuffle`` ranks map to ids in random order (hashed features);
    without it id r-1 has rank r (frequent features get small ids).
    """
    weights = 1.0 / np.arange(1, vocab + 1) ** exponent
    cdf = np.cumsum(weights)
    ranks = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    ranks = np.minimum(ranks, vocab - 1)
    return rng.permutation(vocab)[ranks] if shuffle else ranks


def write_rows(fh, labels, indptr, indices, values=None, label_format="%.6g"):
    """Write CSR rows as libFM text: ``label idx:value ...`` one row a line."""
    token = " %d:1" if values is None else " %d:%.6g"
    formats = {}
    chunk = 65536
    for start in range(0, labels.shape[0], chunk):
        stop = min(start + chunk, labels.shape[0])
        lo, hi = indptr[start], indptr[stop]
        ids = indices[lo:hi].tolist()
        vals = None if values is None else values[lo:hi].tolist()
        ptr = (indptr[start:stop + 1] - lo).tolist()
        out = []
        for r, lab in enumerate(labels[start:stop].tolist()):
            a, b = ptr[r], ptr[r + 1]
            if b - a not in formats:
                formats[b - a] = label_format + token * (b - a) + "\n"
            fields = ids[a:b] if vals is None else [x for p in zip(ids[a:b], vals[a:b]) for x in p]
            out.append(formats[b - a] % (lab, *fields))
        fh.write("".join(out))


def planted_fm(rng, n_features, scale):
    """A random FM (w0, w, V) of rank PLANTED_RANK to generate targets from."""
    w = rng.normal(0.0, 0.3 * scale, n_features)
    v = rng.normal(0.0, 0.5 * scale, (n_features, PLANTED_RANK))
    return w, v


def fm_scores(indptr, indices, values, w, v):
    """y = Sum w_i x_i + 1/2 (|Sum v_i x_i|^2 - Sum |v_i x_i|^2) per row (paper Eq. 1)."""
    rows = indptr.shape[0] - 1
    row_of = np.repeat(np.arange(rows), np.diff(indptr))
    vx = v[indices] * values[:, None]
    s = np.zeros((rows, v.shape[1]))
    np.add.at(s, row_of, vx)
    q = np.bincount(row_of, weights=(vx * vx).sum(1), minlength=rows)
    lin = np.bincount(row_of, weights=w[indices] * values, minlength=rows)
    return lin + 0.5 * ((s * s).sum(1) - q)


def sample_rows(rng, n_rows):
    """CSR rows of the sample layout: one id per field plus a real feature."""
    offsets = np.cumsum([0] + [vocab for _, vocab, _ in SAMPLE_FIELDS])
    cols = [offsets[f] + zipf_ids(rng, n_rows, vocab, s) for f, (_, vocab, s) in enumerate(SAMPLE_FIELDS)]
    real_id = offsets[-1]
    cols.append(np.full(n_rows, real_id))
    indices = np.stack(cols, axis=1)
    values = np.ones(indices.shape)
    values[:, -1] = np.round(rng.uniform(0.1, 2.0, n_rows), 3)
    order = np.argsort(indices, axis=1)
    indices = np.take_along_axis(indices, order, 1).ravel()
    values = np.take_along_axis(values, order, 1).ravel()
    indptr = np.arange(n_rows + 1) * len(cols)
    return indptr, indices.astype(np.int64), values, real_id + 1


def write_samples(outdir, seed=7):
    """data_samples/: {regression,classification}.{train,validation,test}.libfm."""
    rng = np.random.default_rng(seed)
    os.makedirs(outdir, exist_ok=True)
    total = sum(n for _, n in SAMPLE_SPLITS)
    indptr, indices, values, n_features = sample_rows(rng, total)
    w, v = planted_fm(rng, n_features, 1.0)
    score = fm_scores(indptr, indices, values, w, v)
    targets = {
        "regression": np.round(3.0 + score + rng.normal(0.0, 0.3, total), 3),
        "classification": (rng.random(total) < 1 / (1 + np.exp(-2.0 * score))).astype(float),
    }
    for task, y in targets.items():
        start = 0
        for split, n in SAMPLE_SPLITS:
            path = os.path.join(outdir, f"{task}.{split}.libfm")
            rows = slice(start, start + n)
            ptr = indptr[start:start + n + 1]
            lo, hi = ptr[0], ptr[-1]
            with open(path, "w", encoding="ascii") as fh:
                fh.write(f"# rafm synthetic {task} {split}: python -m rafmcli.synth samples --seed {seed}\n")
                write_rows(fh, y[rows], ptr - lo, indices[lo:hi], values[lo:hi])
            start += n
    write_implicit_samples(outdir, seed)


IMPLICIT_SIZES = {"user": 300, "item": 200, "genre": 8, "hour": 24}
IMPLICIT_SPLITS = (("train", 4000), ("validation", 400), ("test", 400))


def write_implicit_samples(outdir, seed):
    """data_samples/implicit.{train,validation,test}.libfm and implicit.meta (the groups).

    A row: label 1, a user, an item with its genres (value 1/#genres; the
    item and its genres form one group) and an hour that means nothing.
    User u picks item i with probability proportional to
    popularity_i * exp(3 <t_u, t_i>), tastes t of rank 2.
    """
    rng = np.random.default_rng(seed + 1)
    n_user, n_item, n_genre, n_hour = IMPLICIT_SIZES.values()
    item0, genre0, hour0 = n_user, n_user + n_item, n_user + n_item + n_genre
    users, items = rng.normal(0, 1, (n_user, 2)), rng.normal(0, 1, (n_item, 2))
    genres = [sorted(rng.choice(n_genre, rng.integers(1, 3), replace=False)) for _ in range(n_item)]
    popularity = 1.0 / np.arange(1, n_item + 1) ** 0.8
    with open(os.path.join(outdir, "implicit.meta"), "w", encoding="ascii") as fh:
        fh.write("0\n" * n_user + "1\n" * (n_item + n_genre) + "2\n" * n_hour)
    for split, n in IMPLICIT_SPLITS:
        with open(os.path.join(outdir, f"implicit.{split}.libfm"), "w", encoding="ascii") as fh:
            for u in zipf_ids(rng, n, n_user, 0.6):
                p = popularity * np.exp(3 * items @ users[u])
                i = int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right"))
                i = min(i, n_item - 1)
                tokens = [f"{u}:1", f"{item0 + i}:1"]
                tokens += [f"{genre0 + g}:{1 / len(genres[i]):.4g}" for g in genres[i]]
                tokens.append(f"{hour0 + rng.integers(n_hour)}:1")
                fh.write("1 " + " ".join(tokens) + "\n")


@click.group()
def main():
    """Write synthetic libFM files."""


@main.command()
@click.option("--out", "outdir", default="data_samples", show_default=True, type=click.Path(file_okay=False))
@click.option("--seed", default=7, show_default=True, type=int)
def samples(outdir, seed):
    """The small regression and classification files shipped in data_samples/."""
    write_samples(outdir, seed)


@main.command()
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--rows", default=2_000_000, show_default=True, type=click.IntRange(1))
@click.option("--nnz", default="20", show_default=True, help="Non-zeros a row: N, or LO-HI drawn uniformly.")
@click.option("--vocab", default=1_000_000, show_default=True, type=click.IntRange(1))
@click.option("--exponent", default=1.1, show_default=True, type=click.FloatRange(0))
@click.option("--task", type=click.Choice(["r", "c"]), default="c", show_default=True)
@click.option("--shuffle-ids/--ranked-ids", default=False, show_default=True,
              help="Ids in random order, or id r-1 for the r-th most frequent feature.")
@click.option("--seed", default=1, show_default=True, type=int)
def zipf(out, rows, nnz, vocab, exponent, task, shuffle_ids, seed):
    """A large file: each row draws its ids from one Zipf law over VOCAB ids.

    Labels come from a planted rank-4 FM (class 0/1 or a real target), so
    training on the file is meaningful.
    """
    rng = np.random.default_rng(seed)
    lo, _, hi = nnz.partition("-")
    lo, hi = int(lo), int(hi or lo)
    w, v = planted_fm(rng, vocab, 1.0 / np.sqrt(hi))
    with open(out, "w", encoding="ascii") as fh:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            lengths = rng.integers(lo, hi + 1, n)
            indptr = np.concatenate([[0], np.cumsum(lengths)])
            ids = zipf_ids(rng, int(indptr[-1]), vocab, exponent, shuffle_ids)
            ids = unique_per_row(rng, ids, np.repeat(np.arange(n), lengths), vocab)
            score = fm_scores(indptr, ids, np.ones(ids.shape), w, v)
            if task == "c":
                y = (rng.random(n) < 1 / (1 + np.exp(-3.0 * score))).astype(float)
            else:
                y = np.round(3.0 + score + rng.normal(0, 0.3, n), 3)
            write_rows(fh, y, indptr, ids, label_format="%g")


def unique_per_row(rng, ids, row_of, vocab):
    """Sort ids within each row, redrawing repeats until every row is duplicate-free."""
    ids = ids.copy()
    while True:
        ids = ids[np.lexsort((ids, row_of))]
        dup = (ids[1:] == ids[:-1]) & (row_of[1:] == row_of[:-1])
        if not dup.any():
            return ids
        ids[1:][dup] = rng.integers(0, vocab, int(dup.sum()))


if __name__ == "__main__":
    main()
