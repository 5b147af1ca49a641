"""MovieLens 100K (split u1) as libFM files, and FM / DiFacto / RaFM on them.

    python bench/ml100k.py [--ids-only] [--config NAME ...]

Reads ../shared/datasets/ml-100k (never copied into the repository) and
writes bench/data/ml100k-u1[-ids].{train,test}.libfm: user and item one-hot,
plus (unless --ids-only) age bucket, gender, occupation, zip code and item
genres, so feature frequencies range from 1 to thousands. Every model trains
on u1.base with 10% of it held out for early stopping (rafm train's default)
and is scored on u1.test. Each model's learning rate and L2 are chosen from
a small grid by validation RMSE; the test RMSE is the mean (± sd) over
three seeds. Prints test RMSE, parameters and train seconds.
"""

import os
import sys
import time

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _find_ml100k():
    """shared/datasets/ml-100k beside the repository (or beside a parent: git worktrees)."""
    folder = os.path.dirname(HERE)
    while True:
        parent = os.path.dirname(folder)
        candidate = os.path.join(parent, "shared", "datasets", "ml-100k")
        if os.path.isdir(candidate) or parent == folder:
            return candidate
        folder = parent


ML100K = os.environ.get("RAFM_ML100K") or _find_ml100k()
AGE_EDGES = (18, 25, 35, 45, 50, 56)


def _read(name, sep):
    with open(os.path.join(ML100K, name), encoding="latin-1") as fh:
        return [line.rstrip("\n").split(sep) for line in fh if line.strip()]


GROUPS = ("user", "item", "age", "gender", "occupation", "zip", "genre")


def convert(ids_only):
    """Write the u1 train/test libFM files and the --meta group file (a field per group: user,
    item, age, gender, occupation, zip, genre); return their paths ("train", "test", "meta")."""
    suffix = "-ids" if ids_only else ""
    out = {s: os.path.join(HERE, "data", f"ml100k-u1{suffix}.{s}.libfm") for s in ("train", "test")}
    out["meta"] = os.path.join(HERE, "data", f"ml100k-u1{suffix}.meta")
    if all(os.path.exists(p) for p in out.values()):
        return out
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    vocab = {}

    def fid(name):
        return vocab.setdefault(name, len(vocab))

    users = {u[0]: u for u in _read("u.user", "|")}
    items = {i[0]: i for i in _read("u.item", "|")}
    user_feats, item_feats = {}, {}
    for uid, (_, age, gender, occupation, zipcode) in users.items():
        feats = [fid(f"user={uid}")]
        if not ids_only:
            feats += [fid(f"age<{next((e for e in AGE_EDGES if int(age) < e), 99)}"),
                      fid(f"gender={gender}"), fid(f"occupation={occupation}"), fid(f"zip={zipcode}")]
        user_feats[uid] = feats
    for iid, fields in items.items():
        feats = [(fid(f"item={iid}"), 1.0)]
        genres = [g for g, flag in enumerate(fields[5:]) if flag == "1"]
        if not ids_only and genres:
            feats += [(fid(f"genre={g}"), round(1.0 / len(genres), 4)) for g in genres]
        item_feats[iid] = feats
    for split, name in (("train", "u1.base"), ("test", "u1.test")):
        with open(out[split], "w") as fh:
            for uid, iid, rating, _ in _read(name, "\t"):
                tokens = [f"{f}:1" for f in user_feats[uid]]
                tokens += [f"{f}:{v:g}" for f, v in item_feats[iid]]
                fh.write(rating + " " + " ".join(tokens) + "\n")
    with open(out["meta"], "w") as fh:
        for name in vocab:  # in id order
            fh.write(f"{GROUPS.index(name.split('=')[0].split('<')[0])}\n")
    return out


# name -> (model, ranks, options)
CONFIGS = {
    "fm-8": ("fm", (8,), {}),
    "fm-32": ("fm", (32,), {}),
    "difacto-8,32": ("difacto", (8, 32), {}),
    "rafm-8,32": ("rafm", (8, 32), {"variant": "paper"}),  # Algorithm 1 (not the default variant)
    "rafm-8,32-authors": ("rafm", (8, 32), {"variant": "authors"}),
    "rafm-8,32-cascade": ("rafm", (8, 32), {"variant": "cascade"}),
}
BASE = {"task": "r", "method": "adagrad", "iters": 300, "early_stop": 5, "init_stdev": 0.01,
        "threads": 1}  # one thread: every figure reproducible
# every model gets the same small grid, RaFM also its dependent rate rho_d;
# the point is chosen on the validation rows
GRID = [{"learn_rate": lr, "reg_factors": (reg,)} for lr in (0.02, 0.05) for reg in (0.03, 0.1)]
RAFM_GRID = GRID + [{**p, "dependent_rate": 5 * p["learn_rate"]} for p in GRID]
SEEDS = (1, 2, 3)


def run(files, name, point, holdout=0.1, seed=1):
    """Train config ``name`` at grid ``point`` on u1.base less a 10% hold-out; score u1.test."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate
    from rafmcli.options import Options
    from rafmcli.predict import predict_dataset
    from rafmcli.solvers.sgd import holdout_split, train

    kind, ranks, extra = CONFIGS[name]
    full = read_dataset(files["train"])
    test = read_dataset(files["test"])
    tr, valid = holdout_split(full, holdout, seed)
    opts = Options(**{**BASE, **point, **extra, "model": kind, "ranks": ranks, "seed": seed})
    start = time.perf_counter()
    model, history = train(tr, opts, validation=valid, progress=False, quiet=True)
    seconds = time.perf_counter() - start
    rmse = evaluate("r", test.labels, predict_dataset(model, test)[0])["rmse"]
    return {"name": name, "rmse": rmse, "params": model.n_params, "seconds": seconds,
            "epochs": len(history), "best": model.info["training"]["best_epoch"],
            "valid": model.info["training"]["validation"]["rmse"]}


def describe(point):
    text = f"lr {point['learn_rate']:g}, L2 {point['reg_factors'][0]:g}"
    if "dependent_rate" in point:
        text += f", rho_d {point['dependent_rate']:g}"
    return text


@click.command()
@click.option("--ids-only", is_flag=True, help="Only user and item ids (as libFM's reference runs).")
@click.option("--config", "names", multiple=True, type=click.Choice(sorted(CONFIGS)),
              help="Configurations to run (default: all).")
def main(ids_only, names):
    files = convert(ids_only)
    run(files, "fm-8", GRID[0])  # compile kernels before timing anything
    print(f"ml-100k u1, {'ids only' if ids_only else 'ids + side features'}; "
          f"grid point chosen on validation RMSE (seed 1), test RMSE over seeds {SEEDS}")
    print(f"{'model':<17}{'chosen':<32}{'valid RMSE':>11}{'test RMSE':>18}{'params':>10}{'seconds':>9}")
    for name in names or CONFIGS:
        kind, _, extra = CONFIGS[name]
        grid = RAFM_GRID if kind == "rafm" and extra.get("variant", "paper") == "paper" else GRID
        trials = [run(files, name, point) for point in grid]
        best = min(range(len(grid)), key=lambda k: trials[k]["valid"])
        runs = [trials[best]] + [run(files, name, grid[best], seed=s) for s in SEEDS[1:]]
        test = np.array([r["rmse"] for r in runs])
        print(f"{name:<17}{describe(grid[best]):<32}{trials[best]['valid']:>11.4f}"
              f"{test.mean():>10.4f} ± {test.std(ddof=1):.4f}{runs[0]['params']:>10,}"
              f"{np.mean([r['seconds'] for r in runs]):>9.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
