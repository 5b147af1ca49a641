"""Training throughput on a generated click-style set, and model sizes.

    python bench/bench_train.py [--rows 1000000] [--epochs 4] [--repeats 3]

Writes bench/data/clicks-<rows>.libfm once (classification, 10-20 non-zeros
a row, ids Zipf-distributed over 1,000,000 ids in random order, so most
features are rare), then trains each configuration for a few epochs without
validation. A run's figure is its median epoch after the first (which
includes compilation when the cache is cold). Each configuration runs in
``--repeats`` fresh processes, because on a shared virtual machine speed
varies more between processes (where memory lands) than between epochs; the
table gives the median run and the slowest and fastest, and the largest peak
resident memory of the runs (the whole process: data, model, optimizer state).
"""

import json
import os
import shlex
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


def child(cmd):
    """(stdout, peak resident MB) of the process ``cmd``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed")
    return out, usage.ru_maxrss / 1024


def run_config(path, index, epochs):
    """Train configuration ``index`` in this process: (median epoch seconds, parameters)."""
    import numba

    from rafmcli.io.reader import read_dataset
    from rafmcli.options import Options
    from rafmcli.solvers.sgd import train

    _, kind, ranks, method, threads = CONFIGS[index]
    data = read_dataset(path)
    numba.set_num_threads(threads)
    opts = Options(task="c", model=kind, ranks=ranks, method=method, iters=epochs, threads=threads,
                   learn_rate=0.01 if method == "sgd" else 0.05, early_stop=0)
    model, history = train(data, opts, progress=False, quiet=True)
    return float(np.median([h["seconds"] for h in history[1:]])), model.n_params


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--epochs", default=4, show_default=True)
@click.option("--repeats", default=3, show_default=True, help="fresh processes per configuration")
@click.option("--config", "index", type=int, hidden=True)
def main(rows, epochs, repeats, index):
    path = data_file(rows)
    if index is not None:
        print(json.dumps(run_config(path, index, epochs)))
        return
    print("$ python bench/bench_train.py " + shlex.join(sys.argv[1:]))

    from rafmcli.io.reader import read_dataset
    from rafmcli.levels import assign_levels, summarize

    data = read_dataset(path)
    summary = summarize(assign_levels(data.counts, (32, 512)), data.counts, data.n_rows, (32, 512))
    print(f"{data.n_rows:,} rows, {data.nnz / data.n_rows:.1f} non-zeros a row, "
          f"{data.feature_ids.size:,} features; levels {{32,512}}: |F_2| = {summary.size[1]:,}, "
          f"n(F_1) = {summary.occupancy[0]:.1f}, n(F_2) = {summary.occupancy[1]:.1f}")
    print(f"{epochs} epochs a run, {repeats} runs; rows/s of the median run (slowest - fastest)")
    print(f"{'model':<26}{'threads':>8}{'rows/s':>12}{'range':>24}{'epoch s':>9}{'params':>14}"
          f"{'MB':>9}{'peak MB':>9}")
    for i, (name, _, _, _, threads) in enumerate(CONFIGS):
        runs, peak = [], 0.0
        for _ in range(repeats):
            out, rss = child([sys.executable, __file__, "--rows", str(rows), "--epochs", str(epochs),
                              "--config", str(i)])
            runs.append(json.loads(out.splitlines()[-1]))
            peak = max(peak, rss)
        seconds = sorted(r[0] for r in runs)
        epoch, n_params = float(np.median(seconds)), runs[0][1]
        spread = f"{rows / seconds[-1]:,.0f} - {rows / seconds[0]:,.0f}"
        print(f"{name:<26}{threads:>8}{rows / epoch:>12,.0f}{spread:>24}{epoch:>9.2f}"
              f"{n_params:>14,}{4 * n_params / 1e6:>9.1f}{peak:>9.0f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
