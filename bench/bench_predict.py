"""Prediction benchmark: `rafm predict` and `rafm train --test --out` end to end.

    python bench/bench_predict.py [--rows 2000000] [--repeats 3] [--baseline DIR]

Uses bench_reader.py's file (2M rows of 20 Zipf(1.3) ids over 20M ids, read
through the cache) and an FM(64) trained for one epoch on its first
``--train-rows`` rows, so that most of the file's 10M ids are unseen by the
model (every unseen id is counted). Whole processes, ``--repeats`` each,
median and range; rows/s is the file's rows over the whole command:

* ``rafm predict --model M --out FILE DATA``;
* ``rafm train ... --test DATA --out FILE`` minus the same training without
  ``--test``: the test set's share (reading it from the cache, predicting,
  writing), the difference of the two medians. Each run builds a model of the
  training rows' 2M features, whose first touch of fresh memory varies by up to
  a second a process on this VM, so run-by-run differences are noise; the two
  commands' medians and ranges are printed beside it;
* in-process, the pieces of a prediction: loading the model (mapped, as
  rafm predict loads it, where the tree can), re-opening the
  cached file, ``predict_dataset`` (mapping ids, counting unseen ones and the
  kernel: one pass since issue 11's stop 17, two before), writing.

``--baseline DIR`` runs the same with another rafm checkout side by side.
"""

import json
import os
import statistics
import sys
import tempfile

import click

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_reader import data_file, spread, timed  # noqa: E402

PIECES = r"""
import json, sys, time
import numpy as np
from rafmcli.io import output, reader
from rafmcli.model import files
from rafmcli import predict as P

def load(path):
    try:
        return files.load(path, mapped=True)  # what rafm predict does (issue 11: members mapped)
    except TypeError:  # a tree from before the mapping
        return files.load(path)

model_path, path, out = sys.argv[1:4]
small = load(model_path)
P.predict_dataset(small, reader.read_dataset(sys.argv[4]))      # load kernels first
with open(out, "wb") as fh:
    output.format_predictions(fh, np.array([0.5]))
times = {}
t = time.perf_counter(); model = load(model_path); times["load model"] = time.perf_counter() - t
t = time.perf_counter(); data = reader.read_dataset(path); times["re-open cached file"] = time.perf_counter() - t
t = time.perf_counter(); scores = P.predict_dataset(model, data).values
times["map ids, count unseen, predict"] = time.perf_counter() - t
t = time.perf_counter()
with open(out, "wb") as fh:
    output.format_predictions(fh, scores)
times["format and write"] = time.perf_counter() - t
print(json.dumps(times))
"""


def run_tree(tree, path, train_path, workdir, repeats, cache_dir):
    env = dict(os.environ, PYTHONPATH=tree, RAFM_CACHE_DIR=cache_dir)
    rafm = [sys.executable, "-m", "rafmcli"]
    model = os.path.join(workdir, "fm64.rafm")
    out = os.path.join(workdir, "predictions.txt")
    train = rafm + ["train", "--task", "c", "--model", "fm", "--dim", "64", "--iter", "1", "--holdout", "0",
                    "--quiet", "--train", train_path]
    timed(train + ["--save-model", model], env)
    timed(rafm + ["predict", "--quiet", "--model", model, "--out", out, path], env)  # cache entry, kernels
    r = {}
    runs = [timed(rafm + ["predict", "--quiet", "--model", model, "--out", out, path], env) for _ in range(repeats)]
    r["predict"], r["predict_rss"] = [w for w, _, _ in runs], [m for _, m, _ in runs]
    with_test = [timed(train + ["--test", path, "--out", out], env)[0] for _ in range(repeats)]
    without = [timed(train, env)[0] for _ in range(repeats)]
    r["with_test"], r["without_test"] = with_test, without
    pieces = [json.loads(timed([sys.executable, "-c", PIECES, model, path, out, train_path], env)[2])
              for _ in range(repeats)]
    r["pieces"] = {k: [p[k] for p in pieces] for k in pieces[0]}
    return r


@click.command()
@click.option("--rows", default=2_000_000, show_default=True)
@click.option("--train-rows", default=200_000, show_default=True, help="rows the model is trained on")
@click.option("--repeats", default=3, show_default=True, help="fresh processes per figure")
@click.option("--baseline", type=click.Path(file_okay=False, exists=True),
              help="another rafm checkout to run side by side")
def main(rows, train_rows, repeats, baseline):
    path = data_file(rows)
    trees = [("rafm", ROOT)] + ([("baseline", os.path.abspath(baseline))] if baseline else [])
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        train_path = os.path.join(workdir, "train.libfm")
        with open(path, "rb") as src, open(train_path, "wb") as dst:
            for _ in range(train_rows):
                dst.write(src.readline())
        for name, tree in trees:
            results[name] = run_tree(tree, path, train_path, workdir, repeats, os.path.join(workdir, name))
    print(f"file: {path}, {rows:,} rows; FM(64) trained one epoch on its first {train_rows:,} rows")
    print(f"{repeats} fresh processes a figure: median (fastest-slowest); {os.cpu_count()} cores")
    print(f"{'measure':<44}" + "".join(f"{name:>28}" for name, _ in trees) + "  target")

    def line(label, values_of, conv, target=""):
        cells = "".join(f"{spread([conv(v) for v in values_of(results[n])], lambda x: f'{x:,.2f}'):>28}"
                        for n, _ in trees)
        print(f"{label:<44}{cells}  {target}")

    line("rafm predict, whole command (M rows/s)", lambda r: r["predict"], lambda s: rows / s / 1e6, ">= 2")
    line("  wall seconds", lambda r: r["predict"], lambda s: s)
    line("  peak RSS (MB)", lambda r: r["predict_rss"], lambda b: b / 1e6)
    share = {n: statistics.median(results[n]["with_test"]) - statistics.median(results[n]["without_test"])
             for n, _ in trees}
    cells = "".join(f"{rows / share[n] / 1e6 if share[n] > 0 else float('nan'):>28,.2f}" for n, _ in trees)
    print(f"{'train --test --out, test share (M rows/s)':<44}{cells}  >= 2")
    line("  train with --test --out, wall seconds", lambda r: r["with_test"], lambda s: s)
    line("  the same training alone, wall seconds", lambda r: r["without_test"], lambda s: s)
    for piece in results["rafm"]["pieces"]:
        line(f"  in-process: {piece} (s)", lambda r, p=piece: r["pieces"][p], lambda s: s)
    if baseline:
        med = {n: statistics.median(results[n]["predict"]) for n, _ in trees}
        print(f"speed-up of the whole command: {med['baseline'] / med['rafm']:.1f}x")


if __name__ == "__main__":
    main()
