"""The RaFM paper's protocol (section 6.1.1) on the benchmark sets, with `rafm tune`.

    python bench/protocol.py [--sets ml100k-ids,...] [--models fm,rafm,difacto] [--trials 27]
                             [--seeds 1,2,3] [--method adagrad] [--threads N]
                             [--top-rank D] [--iter N] [--defaults-only]

For every set (bench/datasets.py) and model: `rafm tune --models MODEL --trials N --seed S`
on the training file (validation: its seeded 10% hold-out), the winner predicts the test
file; and `rafm train --model MODEL` with no hyper-parameter option at all, on the same
hold-out. Prints, per set and model, the test metric (RMSE or logloss) as mean ± sd over
the seeds, the winner's configuration (first seed), its parameters and training seconds,
and the defaults' test metric and its distance from the tuned one. Every command runs as
a user would type it; the commands are printed with --verbose. ``--top-rank D`` compares
the models at one top rank (the RaFM paper's tables), ``--iter`` sets tune's last rung,
``--defaults-only`` runs the defaults' rows alone.
"""

import json
import os
import subprocess
import sys
import tempfile

import click
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import datasets  # noqa: E402


def rafm(args, verbose):
    command = [sys.executable, "-m", "rafmcli", *args]
    if verbose:
        print("  $ rafm " + " ".join(args), file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"rafm {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def test_metric(task, test_file, predictions):
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate

    labels = read_dataset(test_file).labels
    return evaluate(task, labels, np.loadtxt(predictions))["rmse" if task == "r" else "logloss"]


def tuned(name, model, seed, trials, method, threads, folder, verbose, extra=()):
    """Tune ``model`` on set ``name`` with one seed: (test metric, winner's table row)."""
    files, task = datasets.paths(name), datasets.SETS[name]
    table, pred = os.path.join(folder, "table.tsv"), os.path.join(folder, "tuned.pred")
    args = ["tune", "--task", task, "--train", files["train"], "--models", model, "--trials", str(trials),
            "--method", method, "--seed", str(seed), "--table", table, "--test", files["test"], "--out", pred,
            "--quiet", *extra]
    if threads:
        args += ["--threads", str(threads)]
    rafm(args, verbose)
    with open(table) as fh:
        header = fh.readline().rstrip("\n").split("\t")
        winner = dict(zip(header, fh.readline().rstrip("\n").split("\t")))
    return test_metric(task, files["test"], pred), winner


def defaults(name, model, seed, folder, verbose):
    """`rafm train --model MODEL` with no hyper-parameter option, on one thread (reproducible, as
    tune's trials): (test metric, parameters, ranks)."""
    files, task = datasets.paths(name), datasets.SETS[name]
    pred, saved = os.path.join(folder, "default.pred"), os.path.join(folder, "default.rafm")
    rafm(["train", "--task", task, "--train", files["train"], "--model", model, "--seed", str(seed),
          "--test", files["test"], "--out", pred, "--save-model", saved, "--quiet", "--threads", "1"], verbose)
    from rafmcli.model import files as model_files

    saved_model = model_files.load(saved)
    return test_metric(task, files["test"], pred), saved_model.n_params, saved_model.ranks


def describe(row):
    text = row["ranks"]
    for name, shown in (("l2", "L2"), ("learn_rate", "lr")):
        if row[name] != "NaN":
            text += f" {shown} {float(row[name]):g}"
    if row["learn_rate"] == "NaN":  # als, mcmc
        text += f" init {float(row['init_stdev']):g}"
        if row["dependent_weight"] != "NaN":
            text += f" c {float(row['dependent_weight']):g}"
    if row["variant"] != "-":
        text += f" {row['variant']}"
        if row["dependent_rate"] != "NaN":
            text += f" rho_d {float(row['dependent_rate']):g}"
    return text + f" ep {row['best_epoch']}"


@click.command()
@click.option("--sets", default=",".join(datasets.SETS), show_default=True)
@click.option("--models", default="fm,rafm,difacto", show_default=True)
@click.option("--trials", default=27, show_default=True, help="configurations per model (rafm tune --trials)")
@click.option("--seeds", default="1,2,3", show_default=True)
@click.option("--method", default="adagrad", show_default=True)
@click.option("--threads", type=int, help="rafm tune --threads (default: all CPUs)")
@click.option("--top-rank", type=int, help="rafm tune --top-rank: every model at this top rank")
@click.option("--iter", "iters", type=int, help="rafm tune --iter (default: tune's)")
@click.option("--json", "json_path", help="also write the results as JSON lines here")
@click.option("--verbose", is_flag=True, help="print every rafm command on stderr")
@click.option("--defaults-only", is_flag=True, help="run rafm train's defaults only (no tuning)")
def main(sets, models, trials, seeds, method, threads, top_rank, iters, json_path, verbose, defaults_only):
    seeds = [int(s) for s in seeds.split(",")]
    if defaults_only:
        return defaults_table(sets, models, seeds, json_path, verbose)
    extra = (["--top-rank", str(top_rank)] if top_rank else []) + (["--iter", str(iters)] if iters else [])
    print(f"rafm tune --trials {trials} --method {method} {' '.join(extra)} per model, seeds {seeds}; "
          f"test metric mean ± sd; "
          f"defaults: rafm train --model M with no hyper-parameter option")
    print(f"{'set':<13}{'model':<9}{'tuned test':>18}  {'winner (seed ' + str(seeds[0]) + ')':<48}{'params':>10}"
          f"{'train s':>9}{'defaults test':>20}{'vs tuned':>9}  default ranks")
    sys.stdout.flush()
    out = open(json_path, "a") if json_path else None
    for name in sets.split(","):
        for model in models.split(","):
            with tempfile.TemporaryDirectory() as folder:
                runs = [tuned(name, model, s, trials, method, threads, folder, verbose, extra) for s in seeds]
                plain = [defaults(name, model, s, folder, verbose) for s in seeds]
            test = np.array([r[0] for r in runs])
            base = np.array([p[0] for p in plain])
            sd = lambda a: a.std(ddof=1) if a.shape[0] > 1 else 0.0  # noqa: E731
            winner = runs[0][1]
            gap = base.mean() / test.mean() - 1
            print(f"{name:<13}{model:<9}{test.mean():>10.4f} ± {sd(test):.4f}  {describe(winner):<48}"
                  f"{int(winner['params']):>10,}{float(winner['seconds']):>9.1f}{base.mean():>12.4f} ± {sd(base):.4f}"
                  f"{gap:>+9.1%}  {','.join(map(str, plain[0][2]))}")
            sys.stdout.flush()
            if out:
                out.write(json.dumps({"set": name, "model": model, "method": method, "trials": trials, "extra": extra,
                                      "seeds": seeds, "tuned": test.tolist(), "defaults": base.tolist(),
                                      "winners": [r[1] for r in runs], "default_params": plain[0][1],
                                      "default_ranks": list(plain[0][2])}) + "\n")
                out.flush()


def defaults_table(sets, models, seeds, json_path, verbose):
    """The defaults' rows alone: test metric mean ± sd, wall seconds of rafm train, ranks."""
    import time

    print(f"rafm train --model M with no hyper-parameter option, seeds {seeds}; test metric mean ± sd")
    print(f"{'set':<13}{'model':<9}{'defaults test':>20}{'train s':>9}{'params':>11}  ranks")
    out = open(json_path, "a") if json_path else None
    for name in sets.split(","):
        for model in models.split(","):
            plain, seconds = [], []
            with tempfile.TemporaryDirectory() as folder:
                for s in seeds:
                    start = time.perf_counter()
                    plain.append(defaults(name, model, s, folder, verbose))
                    seconds.append(time.perf_counter() - start)
            base = np.array([p[0] for p in plain])
            sd = base.std(ddof=1) if base.shape[0] > 1 else 0.0
            print(f"{name:<13}{model:<9}{base.mean():>12.4f} ± {sd:.4f}{np.mean(seconds):>9.1f}{plain[0][1]:>11,}"
                  f"  {','.join(map(str, plain[0][2]))}")
            sys.stdout.flush()
            if out:
                out.write(json.dumps({"set": name, "model": model, "seeds": seeds, "defaults": base.tolist(),
                                      "seconds": seconds, "default_params": plain[0][1],
                                      "default_ranks": list(plain[0][2])}) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
