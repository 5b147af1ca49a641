"""Training throughput on a generated click-style set, and model sizes.

    python bench/bench_train.py [--rows 1000000] [--epochs 4] [--repeats 3] [--baseline DIR] [--only NAME]

Writes bench/data/clicks-<rows>.libfm once (classification, 10-20 non-zeros
a row, ids Zipf-distributed over 1,000,000 ids in random order, so most
features are rare), then trains each configuration for a few epochs without
validation. A run's figure is its median epoch after the first (which
includes compilation when the cache is cold). Each configuration runs in
``--repeats`` fresh processes, because on a shared virtual machine speed
varies more between processes (where memory lands) than between epochs; the
table gives the median run and the slowest and fastest, and the largest peak
resident memory of the runs (the whole process: data, model, optimizer state).
``--baseline DIR`` runs another rafm checkout's kernels in alternation with
this one's, configuration by configuration.
"""

import json
import os
import shlex
import subprocess
import sys

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> (model, ranks, method, threads)
CONFIGS = [
    ("FM(64) sgd", "fm", (64,), "sgd", 1),
    ("FM(64) sgd", "fm", (64,), "sgd", 2),
    ("FM(64) adagrad", "fm", (64,), "adagrad", 1),
    ("FM(64) adagrad", "fm", (64,), "adagrad", 2),
    ("FM(64) rowwise-adagrad", "fm", (64,), "rowwise-adagrad", 1),
    ("FM(64) rowwise-adagrad", "fm", (64,), "rowwise-adagrad", 2),
    ("FM(512) adagrad", "fm", (512,), "adagrad", 1),
    ("DiFacto{32,512} adagrad", "difacto", (32, 512), "adagrad", 1),
    ("RaFM{32,512} adagrad", "rafm", (32, 512), "adagrad", 1),
    ("RaFM{32,512} adagrad", "rafm", (32, 512), "adagrad", 2),
    ("RaFM{32,512} rowwise-adagrad", "rafm", (32, 512), "rowwise-adagrad", 1),
]


def data_file(rows):
    path = os.path.join(HERE, "data", f"clicks-{rows}.libfm")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([sys.executable, "-m", "rafmcli.synth", "zipf", path, "--rows", str(rows),
                        "--nnz", "10-20", "--vocab", "1000000", "--exponent", "1.1", "--task", "c",
                        "--shuffle-ids", "--seed", "2"], check=True)
    return path


def child(cmd, env=None):
    """(stdout, peak resident MB) of the process ``cmd``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed")
    return out, usage.ru_maxrss / 1024


def run_config(path, index, epochs):
    """Train configuration ``index`` in this process: (median epoch seconds, median epoch CPU
    seconds of the process, parameters)."""
    import time

    from rafmcli.io.reader import read_dataset
    from rafmcli.options import Options
    from rafmcli.solvers.sgd import Training

    _, kind, ranks, method, threads = CONFIGS[index]
    data = read_dataset(path)
    opts = Options(task="c", model=kind, ranks=ranks, method=method, iters=epochs, threads=threads,
                   learn_rate=0.01 if method == "sgd" else 0.05, early_stop=0)
    run = Training(data, opts)
    cpu = []
    for epoch in range(1, epochs + 1):
        start = time.process_time()
        run.advance(epoch)
        cpu.append(time.process_time() - start)
    seconds = [h["seconds"] for h in run.history]
    return float(np.median(seconds[1:])), float(np.median(cpu[1:])), run.model.n_params


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--epochs", default=4, show_default=True)
@click.option("--repeats", default=3, show_default=True, help="fresh processes per configuration")
@click.option("--baseline", type=click.Path(file_okay=False, exists=True),
              help="another rafm checkout, run interleaved with this one")
@click.option("--only", multiple=True, help="configurations whose name contains this (repeatable)")
@click.option("--config", "index", type=int, hidden=True)
def main(rows, epochs, repeats, baseline, only, index):
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
    trees = [("rafm", ROOT)] + ([("baseline", os.path.abspath(baseline))] if baseline else [])
    print(f"{epochs} epochs a run, {repeats} runs (trees interleaved); rows/s of the median run "
          f"(slowest - fastest); rows/CPU-s: rows per second of the process's CPU time (steadier on a "
          f"shared machine)")
    print(f"{'model':<26}{'tree':>9}{'threads':>8}{'rows/s':>12}{'range':>24}{'rows/CPU-s':>12}{'epoch s':>9}"
          f"{'params':>14}{'MB':>9}{'peak MB':>9}")
    for i, (name, _, _, _, threads) in enumerate(CONFIGS):
        if only and not any(o in name for o in only):
            continue
        runs = {t: [] for t, _ in trees}
        peak = dict.fromkeys(runs, 0.0)
        for _ in range(repeats):
            for tree_name, tree in trees:
                env = dict(os.environ, PYTHONPATH=tree)
                out, rss = child([sys.executable, __file__, "--rows", str(rows), "--epochs", str(epochs),
                                  "--config", str(i)], env)
                runs[tree_name].append(json.loads(out.splitlines()[-1]))
                peak[tree_name] = max(peak[tree_name], rss)
        for tree_name, _ in trees:
            got = runs[tree_name]
            seconds = sorted(r[0] for r in got)
            epoch, cpu, n_params = float(np.median(seconds)), float(np.median([r[1] for r in got])), got[0][2]
            spread = f"{rows / seconds[-1]:,.0f} - {rows / seconds[0]:,.0f}"
            print(f"{name:<26}{tree_name:>9}{threads:>8}{rows / epoch:>12,.0f}{spread:>24}{rows / cpu:>12,.0f}"
                  f"{epoch:>9.2f}{n_params:>14,}{4 * n_params / 1e6:>9.1f}{peak[tree_name]:>9.0f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
