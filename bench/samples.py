"""`rafm train` with no hyper-parameter option against FM(8) on the shipped samples.

    python bench/samples.py [--seeds 1,2,3]

For data_samples/{regression,classification}: every model (fm, rafm, difacto) and
SGD method (sgd, adagrad, adam) with nothing but --model/--method, against FM(8) as
rafm trained it before its defaults came from the data (--dim 8 --method adagrad
--learn-rate 0.05 --regular 0,0,0.01). Both validate on the sample's validation file;
prints the test metric (RMSE or logloss) as mean ± sd over the seeds, and the ranks,
pairwise L2 and learning rate the defaults chose (first seed).
"""

import os
import subprocess
import sys
import tempfile

import click
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "data_samples")
FM8 = ["--model", "fm", "--dim", "8", "--method", "adagrad", "--learn-rate", "0.05", "--regular", "0,0,0.01"]


def run(task, name, args, seed, folder):
    """(test metric, ranks, pairwise L2, learning rate) of one `rafm train` run."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate
    from rafmcli.model import files

    base = os.path.join(SAMPLES, name)
    pred, saved = os.path.join(folder, "p"), os.path.join(folder, "m.rafm")
    command = [sys.executable, "-m", "rafmcli", "train", "--task", task, "--train", base + ".train.libfm",
               "--validation", base + ".validation.libfm", "--test", base + ".test.libfm", "--out", pred,
               "--save-model", saved, "--seed", str(seed), "--quiet", "--threads", "1", *args]
    subprocess.run(command, check=True)
    labels = read_dataset(base + ".test.libfm").labels
    model = files.load(saved)
    metric = evaluate(task, labels, np.loadtxt(pred))["rmse" if task == "r" else "logloss"]
    options = model.info["options"]
    return metric, ",".join(map(str, model.ranks)), options["reg_factors"][0], options["learn_rate"]


@click.command()
@click.option("--seeds", default="1,2,3", show_default=True)
def main(seeds):
    seeds = [int(s) for s in seeds.split(",")]
    print(f"rafm train on data_samples/, validation file, test metric mean ± sd over seeds {seeds}")
    print(f"{'sample':<16}{'command':<44}{'test':>17}{'vs FM(8)':>10}  ranks, L2, rate (seed {seeds[0]})")
    with tempfile.TemporaryDirectory() as folder:
        for task, name in (("r", "regression"), ("c", "classification")):
            base = np.array([run(task, name, FM8, s, folder)[0] for s in seeds])
            print(f"{name:<16}{'FM(8): ' + ' '.join(FM8[2:]):<44}{base.mean():>8.4f} ± {base.std(ddof=1):.4f}")
            for model in ("fm", "rafm", "difacto"):
                for method in ("sgd", "adagrad", "adam"):
                    args = ["--model", model, "--method", method]
                    runs = [run(task, name, args, s, folder) for s in seeds]
                    test = np.array([r[0] for r in runs])
                    print(f"{name:<16}{' '.join(args):<44}{test.mean():>8.4f} ± {test.std(ddof=1):.4f}"
                          f"{test.mean() / base.mean() - 1:>+10.1%}  {runs[0][1]}, {runs[0][2]:g}, {runs[0][3]:g}")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
