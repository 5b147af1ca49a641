"""`rafm train` defaults with `--method mcmc` (or other methods) against the SGD (AdaGrad) defaults,
nothing else given.

    python bench/default_method.py [--sets ml100k-ids,...,samples] [--models fm,rafm,difacto] [--seeds 1,2,3]
                                   [--methods adagrad,mcmc]

For every bench set of bench/protocol.py (bench/datasets.py: trained on its training file,
scored on its test file) and the shipped samples (data_samples/, validating on their
validation file as bench/samples.py does): `rafm train --model M --method X` for each method X
of ``--methods``, no other option. Prints the test metric (RMSE or logloss; mean ± sd over the
seeds), the ranks the defaults chose, and the seconds of one run (wall clock and CPU: user +
system of the process; the CPU time moves little when other work shares the machine).
"""

import os
import subprocess
import sys
import tempfile
import time

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(os.path.dirname(HERE), "data_samples")
sys.path.insert(0, HERE)
import datasets  # noqa: E402


def files(name):
    """(task, {"train", "test"[, "validation"]}) of a protocol set or a sample."""
    if name in datasets.SETS:
        return datasets.SETS[name], datasets.paths(name)
    base = os.path.join(SAMPLES, name.split("-")[1])
    return ("r" if name.endswith("regression") else "c"), {s: f"{base}.{s}.libfm"
                                                           for s in ("train", "validation", "test")}


def run(name, model, method, seed, folder):
    """(test metric, ranks, wall seconds, CPU seconds) of `rafm train --model M --method X`."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate
    from rafmcli.model import files as model_files

    task, paths = files(name)
    pred, saved = os.path.join(folder, "p"), os.path.join(folder, "m.rafm")
    command = [sys.executable, "-m", "rafmcli", "train", "--task", task, "--train", paths["train"], "--test",
               paths["test"], "--out", pred, "--save-model", saved, "--seed", str(seed), "--quiet",
               "--model", model, "--method", method, "--threads", "1"]
    if "validation" in paths:
        command += ["--validation", paths["validation"]]
    before, start = os.times(), time.perf_counter()
    subprocess.run(command, check=True)
    wall, after = time.perf_counter() - start, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    metric = evaluate(task, read_dataset(paths["test"]).labels, np.loadtxt(pred))["rmse" if task == "r" else "logloss"]
    return metric, ",".join(map(str, model_files.load(saved).ranks)), wall, cpu


@click.command()
@click.option("--sets", default=",".join([*datasets.SETS, "samples-regression", "samples-classification"]),
              show_default=True)
@click.option("--models", default="fm,rafm,difacto", show_default=True)
@click.option("--seeds", default="1,2,3", show_default=True)
@click.option("--methods", default="adagrad,mcmc", show_default=True)
def main(sets, models, seeds, methods):
    seeds = [int(s) for s in seeds.split(",")]
    print(f"rafm train --model M --method X, nothing else; test RMSE (r) or logloss (c), mean ± sd over "
          f"seeds {seeds}; seconds of seed {seeds[0]}: wall (CPU), machine shared")
    print(f"{'set':<24}{'model':<9}{'method':<17}{'ranks':<9}{'test':>17}{'seconds':>18}")
    with tempfile.TemporaryDirectory() as folder:
        for name in sets.split(","):
            for model in models.split(","):
                for method in methods.split(","):
                    runs = [run(name, model, method, s, folder) for s in seeds]
                    test = np.array([r[0] for r in runs])
                    sd = f" ± {test.std(ddof=1):.4f}" if len(seeds) > 1 else ""
                    print(f"{name:<24}{model:<9}{method:<17}{runs[0][1]:<9}{test.mean():>8.4f}{sd:<9}"
                          f"{runs[0][2]:>9.1f} ({runs[0][3]:.1f})", flush=True)


if __name__ == "__main__":
    main()
