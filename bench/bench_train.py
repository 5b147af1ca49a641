"""Training throughput on a generated click-style set, and model sizes.

    python bench/bench_train.py [--rows 1000000] [--epochs 3]

Writes bench/data/clicks-<rows>.libfm once (classification, 10-20 non-zeros
a row, ids Zipf-distributed over 1,000,000 ids in random order, so most
features are rare), then trains each configuration for a few epochs without
validation and reports the median epoch after the first (which includes
compilation when the cache is cold) as rows per second.
"""

import os
import subprocess
import sys

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (model, ranks, method, threads)
CONFIGS = [
    ("FM(64) sgd", "fm", (64,), "sgd", 1),
    ("FM(64) sgd", "fm", (64,), "sgd", 2),
    ("FM(64) adagrad", "fm", (64,), "adagrad", 1),
    ("FM(64) adagrad", "fm", (64,), "adagrad", 2),
    ("FM(512) adagrad", "fm", (512,), "adagrad", 1),
    ("DiFacto{32,512} adagrad", "difacto", (32, 512), "adagrad", 1),
    ("RaFM{32,512} adagrad", "rafm", (32, 512), "adagrad", 1),
    ("RaFM{32,512} adagrad", "rafm", (32, 512), "adagrad", 2),
]


def data_file(rows):
    path = os.path.join(HERE, "data", f"clicks-{rows}.libfm")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([sys.executable, "-m", "rafmcli.synth", "zipf", path, "--rows", str(rows),
                        "--nnz", "10-20", "--vocab", "1000000", "--exponent", "1.1", "--task", "c",
                        "--shuffle-ids", "--seed", "2"], check=True)
    return path


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--epochs", default=3, show_default=True)
def main(rows, epochs):
    import numba

    from rafmcli.levels import assign_levels, summarize
    from rafmcli.reader import read_dataset
    from rafmcli.trainer import Options, train

    data = read_dataset(data_file(rows))
    summary = summarize(assign_levels(data.counts, (32, 512)), data.counts, data.n_rows, (32, 512))
    print(f"{data.n_rows:,} rows, {data.nnz / data.n_rows:.1f} non-zeros a row, "
          f"{data.feature_ids.size:,} features; levels {{32,512}}: |F_2| = {summary.size[1]:,}, "
          f"n(F_1) = {summary.occupancy[0]:.1f}, n(F_2) = {summary.occupancy[1]:.1f}")
    print(f"{'model':<26}{'threads':>8}{'rows/s':>12}{'epoch s':>9}{'params':>14}{'MB':>9}")
    for name, kind, ranks, method, threads in CONFIGS:
        numba.set_num_threads(threads)
        opts = Options(task="c", model=kind, ranks=ranks, method=method, iters=epochs, threads=threads,
                       learn_rate=0.01 if method == "sgd" else 0.05, early_stop=0)
        model, history = train(data, opts, progress=False, quiet=True)
        epoch = float(np.median([h["seconds"] for h in history[1:]]))
        print(f"{name:<26}{threads:>8}{data.n_rows / epoch:>12,.0f}{epoch:>9.2f}"
              f"{model.n_params:>14,}{4 * model.n_params / 1e6:>9.1f}")
        sys.stdout.flush()
        del model


if __name__ == "__main__":
    main()
