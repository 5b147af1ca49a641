"""A planted-taste implicit set (not MovieLens): ranking and item neighbours, as bench/ml100k_implicit.py.

    python3 bench/implicit_planted.py [--config NAME ...] [--seeds N] [--data-seed S]

The second data set for the implicit benchmarks, so that what they show is
not a property of ml-100k. Generated with a seed (bench/data/planted-implicit-S.*):
2,000 users and 1,000 items, each of one of 8 tastes; a taste is a centre
in R^4, a user's and an item's latent vectors are their taste's centre plus
noise, and a user picks item i with probability proportional to
popularity_i exp(<t_u, t_i>) (popularity Zipf 0.8 over a shuffled order),
15 to 60 picks each. An item has 1 to 3 of 20 genres (value 1/#genres, in
the item's group as on ml-100k): each drawn from its taste's 3 genres with
probability 0.6, else from all 20, so genres tell tastes apart only in part
and occur in every row. Groups: 0 user, 1 item with its genres, 2 an age
bucket that leans on the taste, 3 a region that means nothing. Per user the
last pick is the test positive, the one before it validation.

Models, the grid of learning rate and L2 chosen on validation NDCG@10 (seed
1) and the metrics are those of bench/ml100k_implicit.py: full-catalogue
HR@10 / NDCG@10 leaving out the user's training and validation items, and
how often an item's 10 nearest items (cosine of ``rafm embed --group 1``'s
vectors) share a genre, or the planted taste, with it against random items.
"""

import os
import sys

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import ml100k_implicit as bench  # noqa: E402  (the models, grid and metrics are shared)

USERS, ITEMS, TASTES, GENRES, DIM = 2000, 1000, 8, 20, 4
AGES, REGIONS = 7, 50


def generate(seed):
    """Write the three libFM files and the group file; return the paths, each item's genres
    and taste, and {feature id: item}."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1.2, (TASTES, DIM))
    item_taste, user_taste = rng.integers(TASTES, size=ITEMS), rng.integers(TASTES, size=USERS)
    items = centres[item_taste] + rng.normal(0, 0.5, (ITEMS, DIM))
    users = centres[user_taste] + rng.normal(0, 0.5, (USERS, DIM))
    popularity = (1.0 / np.arange(1, ITEMS + 1) ** 0.8)[rng.permutation(ITEMS)]
    home = [rng.choice(GENRES, 3, replace=False) for _ in range(TASTES)]
    genres = []
    for i in range(ITEMS):
        picks = {int(rng.choice(home[item_taste[i]]) if rng.random() < 0.6 else rng.integers(GENRES))
                 for _ in range(rng.integers(1, 4))}
        genres.append(sorted(picks))
    age = np.where(rng.random(USERS) < 0.5, user_taste % AGES, rng.integers(AGES, size=USERS))
    region = rng.integers(REGIONS, size=USERS)
    item0, genre0 = USERS, USERS + ITEMS
    age0, region0 = genre0 + GENRES, genre0 + GENRES + AGES
    stem = os.path.join(bench.DATA, f"planted-implicit-{seed}")
    paths = {s: f"{stem}.{s}.libfm" for s in bench.SPLITS}
    paths["meta"] = f"{stem}.meta"
    os.makedirs(bench.DATA, exist_ok=True)
    with open(paths["meta"], "w") as fh:
        fh.write("0\n" * USERS + "1\n" * (ITEMS + GENRES) + "2\n" * AGES + "3\n" * REGIONS)
    files = {s: open(paths[s], "w") for s in bench.SPLITS}
    for u in range(USERS):
        p = popularity * np.exp(items @ users[u])
        n = int(rng.integers(15, 61))
        picks = rng.choice(ITEMS, n, replace=False, p=p / p.sum())
        for k, i in enumerate(picks):
            split = "test" if k == n - 1 else "validation" if k == n - 2 else "train"
            tokens = [f"{u}:1", f"{item0 + i}:1"] + [f"{genre0 + g}:{1 / len(genres[i]):.4g}" for g in genres[i]]
            tokens += [f"{age0 + age[u]}:1", f"{region0 + region[u]}:1"]
            files[split].write("1 " + " ".join(tokens) + "\n")
    for fh in files.values():
        fh.close()
    return paths, dict(enumerate(genres)), item_taste, {item0 + i: i for i in range(ITEMS)}


@click.command()
@click.option("--config", "names", multiple=True, type=click.Choice(list(bench.CONFIGS)),
              help="Only these configurations (default: the five below).")
@click.option("--seeds", default=2, show_default=True, help="Training seeds per configuration (mean ± sd).")
@click.option("--data-seed", default=1, show_default=True, help="Seed of the generated data set.")
def main(names, seeds, data_seed):
    from rafmcli.io.reader import read_dataset

    paths, genres, taste, item_of = generate(data_seed)
    data = {s: read_dataset(paths[s]) for s in bench.SPLITS}
    data["paths"] = paths
    print(f"train {data['train'].n_rows:,} / validation {data['validation'].n_rows:,} / "
          f"test {data['test'].n_rows:,} positives (data seed {data_seed})")
    tastes = {i: [int(taste[i])] for i in range(ITEMS)}
    print(f"\n| model | full HR@{bench.K} | full NDCG@{bench.K} | L2 chosen | genre neighbours | taste neighbours |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names or ("fm-uniform", "fm-default", "fm-l2-positives", "rafm-default", "rafm-l2-positives"):
        best = bench.choose_point(data, name)
        results, ratios = [], []
        for seed in range(1, seeds + 1):
            model = best[2] if seed == 1 else bench.fit(data, name, best[1], seed)[0]
            results.append(bench.test_metrics(model, data)[0])
            ratios.append([near / rand for near, rand in (bench.genre_agreement(model, groups, item_of)
                                                          for groups in (genres, tastes))])
        cells = [f"{np.mean([r[k] for r in results]):.4f} ± {np.std([r[k] for r in results]):.4f}"
                 for k in ("hr10", "ndcg10")]
        ratio = np.mean(ratios, axis=0)
        print(f"| {bench.LABELS[name]} | {' | '.join(cells)} | {best[1]['reg_factors'][0]:g} "
              f"(lr {best[1]['learn_rate']:g}) | {ratio[0]:.2f}x | {ratio[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
