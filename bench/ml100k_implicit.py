"""MovieLens 100K as implicit data: leave-one-out ranking with Feat2Vec negatives.

    python3 bench/ml100k_implicit.py [--ids-only] [--config NAME ...] [--seeds N] [--no-speed]

Every rating of u.data is a positive row (the rating itself is dropped); per
user the latest rating (u.data timestamps, ties in file order) is the test
positive and the one before it the validation positive; the rest train.
Reads ../shared/datasets/ml-100k (or $RAFM_ML100K; never copied into the
repository) and writes bench/data/ml100k-implicit[-ids].{train,validation,test}.libfm
and .meta. Groups: 0 user, 1 item with its genres (value 1/#genres: a
negative item comes with its own genres), 2 age bucket, 3 gender,
4 occupation, 5 zip code; with --ids-only, the user and item ids alone.

Each test row is ranked on its item among all 1,682 items (full catalogue)
and among 100 items drawn uniformly (the same draw for every model), leaving
out the items the user has in training and validation: HR@10, NDCG@10.
Models train with AdaGrad, early stopping on validation NDCG@10; the
learning rate and L2 of each are chosen on validation from a small grid.
Also printed: how often an item's 10 nearest items (cosine of the vectors
``rafm embed --group 1`` writes: the item with its genres, every level side
by side; for RaFM also each level alone) share a genre with it, against
random items, and training throughput next to explicit training on the same
rows.
"""

import os
import sys
import time

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
ML100K = os.environ.get("RAFM_ML100K") or os.path.join(HERE, "..", "..", "shared", "datasets", "ml-100k")
AGE_EDGES = (18, 25, 35, 45, 50, 56)
DATA = os.path.join(HERE, "data")
SPLITS = ("train", "validation", "test")
ITEM_GROUP = 1
K = 10


def _read(name, sep):
    with open(os.path.join(ML100K, name), encoding="latin-1") as fh:
        return [line.rstrip("\r\n").split(sep) for line in fh if line.strip()]


def convert(ids_only=False):
    """Write the three libFM files and the group file; return their paths, the item genres
    and {feature id: item} of the item features."""
    stem = os.path.join(DATA, "ml100k-implicit" + ("-ids" if ids_only else ""))
    paths = {s: f"{stem}.{s}.libfm" for s in SPLITS}
    paths["meta"] = f"{stem}.meta"
    items = {int(f[0]): f for f in _read("u.item", "|")}
    genres = {i: [g for g, flag in enumerate(f[5:]) if flag == "1"] for i, f in items.items()}
    ratings = [tuple(int(t) for t in r.split()[:4]) for r in
               (line for line in open(os.path.join(ML100K, "u.data"), encoding="latin-1") if line.strip())]
    n_users = len({u for u, *_ in ratings})
    item_of = {n_users + k: i for k, i in enumerate(sorted(items))}  # the numbering below
    if all(os.path.exists(p) for p in paths.values()):
        return paths, genres, item_of
    os.makedirs(DATA, exist_ok=True)
    users = {int(u[0]): u for u in _read("u.user", "|")}
    vocab, group = {}, []

    def fid(name, g):
        if name not in vocab:
            vocab[name] = len(vocab)
            group.append(g)
        return vocab[name]

    user_ids = sorted({u for u, *_ in ratings})
    item_ids = sorted(items)
    for u in user_ids:
        fid(f"user={u}", 0)
    for i in item_ids:
        fid(f"item={i}", 1)
    for g in range(19):
        fid(f"genre={g}", 1)
    side = {}
    for u in user_ids:  # u.data may hold users u.user lacks: no side features for them
        if u in users:
            _, age, gender, occupation, zipcode = users[u]
            bucket = next((e for e in AGE_EDGES if int(age) < e), 99)
            side[u] = [fid(f"age<{bucket}", 2), fid(f"gender={gender}", 3),
                       fid(f"occupation={occupation}", 4), fid(f"zip={zipcode}", 5)]
    by_user = {}
    for n, (u, i, _, t) in enumerate(ratings):
        by_user.setdefault(u, []).append((t, n, i))
    files = {s: open(paths[s], "w") for s in SPLITS}
    for u, events in sorted(by_user.items()):
        events.sort()
        for k, (_, _, i) in enumerate(events):
            split = "test" if k == len(events) - 1 else "validation" if k == len(events) - 2 else "train"
            tokens = [f"{vocab[f'user={u}']}:1", f"{vocab[f'item={i}']}:1"]
            if not ids_only:
                tokens += [f"{vocab[f'genre={g}']}:{1 / len(genres[i]):.4g}" for g in genres[i]]
                tokens += [f"{f}:1" for f in side.get(u, [])]
            files[split].write("1 " + " ".join(tokens) + "\n")
    for fh in files.values():
        fh.close()
    with open(paths["meta"], "w") as fh:
        fh.write("".join(f"{g}\n" for g in group))
    return paths, genres, item_of


BASE = {"task": "implicit", "method": "adagrad", "iters": 60, "early_stop": 5, "init_stdev": 0.05,
        "eval_group": ITEM_GROUP, "top_k": K, "threads": 1}  # one thread: every figure reproducible
LOGISTIC = {"loss": "logistic", "reject_positives": False, "eval_share": 0.0}  # Feat2Vec's own form
CONFIGS = {
    "fm-uniform": {"model": "fm", "ranks": (32,), "negative_groups": (ITEM_GROUP,), "alpha2": 0.0,
                   "nce": False, **LOGISTIC},
    "fm-default": {"model": "fm", "ranks": (32,)},
    "fm-no-share": {"model": "fm", "ranks": (32,), "eval_share": 0.0},
    "fm-feat2vec": {"model": "fm", "ranks": (32,), **LOGISTIC},
    "fm-feat2vec-reject": {"model": "fm", "ranks": (32,), **LOGISTIC, "reject_positives": True},
    "fm-item-feat2vec": {"model": "fm", "ranks": (32,), "negative_groups": (ITEM_GROUP,), **LOGISTIC},
    "fm-ns": {"model": "fm", "ranks": (32,), "nce": False, **LOGISTIC},
    "fm-softmax-no-nce": {"model": "fm", "ranks": (32,), "nce": False},
    "fm-l2-positives": {"model": "fm", "ranks": (32,), "regular_negatives": False},
    "rafm-default": {"model": "rafm", "ranks": (8, 32)},
    "rafm-l2-positives": {"model": "rafm", "ranks": (8, 32), "regular_negatives": False},
    "rafm-feat2vec": {"model": "rafm", "ranks": (8, 32), **LOGISTIC},
}
GRID = [{"learn_rate": lr, "reg_factors": (reg,)} for lr in (0.05, 0.1) for reg in (0.001, 0.01)]
LABELS = {
    "fm-uniform": "FM(32), uniform negative items, plain logistic",
    "fm-default": "FM(32), defaults: sampled softmax, --reject-positives, --eval-share 0.5",
    "fm-no-share": "FM(32), defaults but --eval-share 0",
    "fm-feat2vec": "FM(32), Feat2Vec's form: logistic NCE, --keep-positives, --eval-share 0",
    "fm-feat2vec-reject": "FM(32), logistic NCE, --reject-positives, --eval-share 0",
    "fm-item-feat2vec": "FM(32), logistic NCE of the item group only",
    "fm-ns": "FM(32), logistic without NCE (word2vec), --eval-share 0",
    "fm-softmax-no-nce": "FM(32), defaults but --no-nce",
    "fm-l2-positives": "FM(32), defaults but --no-regular-negatives (L2 in the positive row only)",
    "rafm-default": "RaFM{8,32}, defaults",
    "rafm-l2-positives": "RaFM{8,32}, defaults but --no-regular-negatives",
    "rafm-feat2vec": "RaFM{8,32}, Feat2Vec's form (logistic NCE, --eval-share 0)",
}


def command(name, point, paths):
    """The rafm train command line of a configuration."""
    from rafmcli.options import DEFAULTS as D

    c = {**BASE, **CONFIGS[name], **point}
    args = ["rafm train --task implicit", f"--model {c['model']}",
            f"--dim {c['ranks'][0]}" if c["model"] == "fm" else f"--ranks {','.join(map(str, c['ranks']))}",
            f"--learn-rate {c['learn_rate']:g}", f"--regular 0,0,{c['reg_factors'][0]:g}",
            f"--init-stdev {c['init_stdev']:g}", f"--iter {c['iters']}", f"--eval-group {ITEM_GROUP}"]
    if "negative_groups" in c:
        args.append("--negative-groups " + ",".join(map(str, c["negative_groups"])))
    if c.get("alpha2", 0.75) != 0.75:
        args.append(f"--alpha2 {c['alpha2']:g}")
    if c.get("loss", D.loss) != D.loss:
        args.append(f"--loss {c['loss']}")
    if not c.get("nce", True):
        args.append("--no-nce")
    if c.get("reject_positives", D.reject_positives) != D.reject_positives:
        args.append("--reject-positives" if c["reject_positives"] else "--keep-positives")
    if c.get("regular_negatives", D.regular_negatives) != D.regular_negatives:
        args.append("--regular-negatives" if c["regular_negatives"] else "--no-regular-negatives")
    if c.get("eval_share", D.eval_share) != D.eval_share and "negative_groups" not in c:
        args.append(f"--eval-share {c['eval_share']:g}")
    rel = {k: os.path.relpath(p) for k, p in paths.items()}
    args += [f"--meta {rel['meta']}", f"--train {rel['train']}", f"--validation {rel['validation']}"]
    return " ".join(args)


def fit(data, name, point, seed):
    from rafmcli.io.groups import read_groups
    from rafmcli.options import Options
    from rafmcli.solvers.implicit import train

    opts = Options(**{**BASE, **CONFIGS[name], **point, "seed": seed})
    model, history = train(data["train"], read_groups(data["paths"]["meta"]), opts,
                           validation=data["validation"], progress=False, quiet=True)
    return model, history


def choose_point(data, name):
    """(best validation NDCG@K, GRID point, its model, its training seconds) of ``name`` trained
    with seed 1 at every GRID point: seed 1's run is then the first of the seeds."""
    best = None
    for point in GRID:
        start = time.perf_counter()
        model, history = fit(data, name, point, seed=1)
        val = max(h[f"ndcg{K}"] for h in history)
        if best is None or val > best[0]:
            best = (val, point, model, time.perf_counter() - start)
    return best


def test_metrics(model, data, seed=0):
    """Full-catalogue and sampled-100 HR@10 / NDCG@10 of the test positives."""
    from rafmcli import ranking
    from rafmcli.predict import kernel_rows

    vocab = model.vocabulary
    seen = np.concatenate([vocab.lookup(kernel_rows(model, data[s])) for s in ("train", "validation")])
    rset = ranking.ranking_set(vocab, kernel_rows(model, data["test"]), ITEM_GROUP, seen, seed)
    return ranking.ranking_metrics(model, rset, K), rset


def popularity(model, rset):
    """Items ranked by their training count, ties placing the positive among them at random."""
    from rafmcli.metrics import hit_ndcg

    vocab, ctx = model.vocabulary, rset.ctx
    lo, hi = vocab.candidates(ITEM_GROUP)
    count = vocab.count[lo:hi].astype(float)
    full, sampled = [], []
    for r in range(rset.own.shape[0]):
        own = count[rset.own[r] - lo] if lo <= rset.own[r] < hi else 0.0
        keep = np.ones(hi - lo, bool)
        excl = ctx.excl[ctx.excl_ptr[r]:ctx.excl_ptr[r + 1]]
        keep[excl[(excl >= lo) & (excl < hi)] - lo] = False
        if lo <= rset.own[r] < hi:
            keep[rset.own[r] - lo] = False
        full.append(((count[keep] > own).sum(), (count[keep] == own).sum()))
        s = rset.sampled[r][rset.sampled[r] >= 0] - lo
        sampled.append(((count[s] > own).sum(), (count[s] == own).sum()))
    full, sampled = np.array(full), np.array(sampled)
    names = ("hr10", "ndcg10", "hr10_sampled", "ndcg10_sampled")
    return dict(zip(names, hit_ndcg(full[:, 0], full[:, 1], K) + hit_ndcg(sampled[:, 0], sampled[:, 1], K)))


def genre_agreement(model, genres, item_of, level=None):
    """(share of an item's 10 nearest items sharing a genre with it, the same for random items),
    on the item values of ``rafm embed --group 1 [--level N]`` (an item with its genres: the
    sum of their vectors; with --ids-only, the item's own vector)."""
    from rafmcli.embeddings import value_embeddings

    emb = value_embeddings(model, level, ITEM_GROUP)
    items = [item_of[int(next(f for f in name.split(",") if int(f) in item_of))] for name in emb.labels]
    g = np.zeros((len(items), 1 + max(max(v, default=0) for v in genres.values())), bool)
    for n, i in enumerate(items):
        g[n, genres[i]] = True
    share = (g.astype(int) @ g.T.astype(int)) > 0
    unit = emb.vectors.astype(np.float64)
    unit /= np.maximum(np.linalg.norm(unit, axis=1), 1e-12)[:, None]
    cosine = unit @ unit.T
    np.fill_diagonal(cosine, -np.inf)
    nearest = np.argsort(-cosine, axis=1)[:, :10]
    near = share[np.arange(len(items))[:, None], nearest].mean()
    off = ~np.eye(len(items), dtype=bool)
    return float(near), float(share[off].mean())


def throughput(data, seed=1):
    """Explicit training (--task c, labels all 1) and implicit training on the same rows: rows/s."""
    from rafmcli.options import Options
    from rafmcli.solvers.sgd import train as train_explicit

    out = []
    for model, ranks in (("fm", (32,)), ("rafm", (8, 32))):
        opts = Options(task="c", model=model, ranks=ranks, iters=4, holdout=0, seed=seed, threads=1)
        _, history = train_explicit(data["train"], opts, progress=False, quiet=True)
        explicit = data["train"].n_rows / np.median([h["seconds"] for h in history[1:]])
        name = f"{model}-default"
        _, history = fit(data, name, {"learn_rate": 0.05, "reg_factors": (0.01,), "iters": 4, "early_stop": 0},
                         seed)
        implicit = data["train"].n_rows / np.median([h["seconds"] for h in history[1:]])
        out.append((model, ranks, explicit, implicit))
    return out


@click.command()
@click.option("--config", "names", multiple=True, type=click.Choice(list(CONFIGS)),
              help="Only these configurations (default: all).")
@click.option("--seeds", default=2, show_default=True, help="Seeds per configuration (mean ± sd).")
@click.option("--no-speed", is_flag=True, help="Skip the throughput table.")
@click.option("--ids-only", is_flag=True, help="Rows of a user id and an item id only (two groups).")
def main(names, seeds, no_speed, ids_only):
    from rafmcli.io.reader import read_dataset

    paths, genres, item_of = convert(ids_only)
    data = {s: read_dataset(paths[s]) for s in SPLITS}
    data["paths"] = paths
    print(f"train {data['train'].n_rows:,} / validation {data['validation'].n_rows:,} / "
          f"test {data['test'].n_rows:,} positives")
    rows, agreement = [], {}
    base_model = None
    for name in names or CONFIGS:
        best = choose_point(data, name)
        results, secs = [], []
        for seed in range(1, seeds + 1):
            start = time.perf_counter()
            model, history = fit(data, name, best[1], seed) if seed > 1 else (best[2], None)
            secs.append(time.perf_counter() - start if seed > 1 else best[3])
            metrics, rset = test_metrics(model, data)
            results.append(metrics)
            if seed == 1:
                levels = [None] + (list(range(1, len(model.ranks) + 1)) if len(model.ranks) > 1 else [])
                agreement[name] = [(level, genre_agreement(model, genres, item_of, level)) for level in levels]
                base_model = base_model or (model, rset)
        rows.append((name, best[1], results, np.mean(secs)))
        print(f"{name}: {results} ({command(name, best[1], paths)})", file=sys.stderr, flush=True)
    pop = popularity(*base_model)
    print(f"\n| model | full HR@{K} | full NDCG@{K} | sampled-100 HR@{K} | train s |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| item popularity | {pop['hr10']:.4f} | {pop['ndcg10']:.4f} | {pop['hr10_sampled']:.4f} | 0 |")
    for name, point, results, sec in rows:
        cells = []
        for key in ("hr10", "ndcg10", "hr10_sampled"):
            values = [r[key] for r in results]
            cells.append(f"{np.mean(values):.4f} ± {np.std(values):.4f}")
        print(f"| {LABELS[name]} | " + " | ".join(cells) + f" | {sec:.1f} |")
    print("\nCommands (learning rate and L2 chosen on validation):")
    for name, point, _, _ in rows:
        print(f"  {name}: {command(name, point, paths)}")
    print("\n| model (item vectors of rafm embed --group 1 [--level N]) | items whose 10 nearest share a genre "
          "| random pairs of those items | ratio |")
    print("| --- | --- | --- | --- |")
    for name, levels in agreement.items():
        for level, (near, rand) in levels:
            shown = LABELS[name] + ("" if len(levels) == 1 else ", all levels" if level is None else f", level {level}")
            print(f"| {shown} | {near:.3f} | {rand:.3f} | {near / rand:.2f} |")
    if not no_speed:
        print("\n| model | explicit rows/s (--task c) | implicit positives/s (5 negatives each) |")
        print("| --- | --- | --- |")
        for model, ranks, explicit, implicit in throughput(data):
            label = "FM(32)" if model == "fm" else "RaFM{8,32}"
            print(f"| {label} | {explicit:,.0f} | {implicit:,.0f} |")


if __name__ == "__main__":
    main()
