"""Training threads: ``rafm train --threads 1`` against ``--threads 2`` (and xLearn), whole processes.

    python bench/bench_threads.py [--set fields|clicks-1000000|both|samples] [--repeats 3] [--epochs N]

``fields`` is a generated small-vocabulary click set (:func:`fields_rows`):
57,600 training and 28,800 test rows, 10 one-hot fields of 10 to 2,000 values
(5,400 features) drawn Zipf(1.1) within each field, clicks from a planted
rank-4 FM, so every row touches a few hundred hot feature rows: the case where
lock-free threads fight over cache lines. ``clicks-1000000`` is bench_train.py's
1M-row set (1M ids, Zipf, 10-20 a row). Each configuration trains ``--epochs``
(fields: 50, the 1M set: 4) without validation and predicts the test rows, in
``--repeats`` fresh processes run in turn (1 thread, 2 threads, two 1-thread
processes at once, 1 thread, ...), so that a busy machine slows all alike. The
pair (thr ``1+1``: each process's median epoch rate, summed; their epochs overlap
but for start-up drift, which can flatter the pair on the 1M set's 4 epochs) is the ceiling this machine gives two cores
on the same work at that moment: nothing is shared between the processes, so no
threading scheme can do better, except by sharing one model's memory traffic.
On a virtual machine whose cores share caches and memory with other guests the
pair often stays well below 2x. The table gives the median run with
the slowest and fastest: training rows/s (epochs after the first, from the
--rlog), the whole command's wall time, its peak resident memory, and the test
AUC and log loss (accuracy must stay within noise of one thread). ``samples``
times whole ``rafm train`` runs on the shipped samples with one thread and with the default
(every core, but fewer where they would not pay): on a few thousand rows a second thread's
start costs more than it saves, so the default must cost nothing there.

With xLearn installed (``pip install xlearn==0.40a1``; USER is set for it), xLearn's
FM(64) with SGD (learning rate 0.01, L2 0.01, its default instance normalisation)
runs beside ``FM(64) sgd`` as a whole process too: train ``--epochs``, predict the test
rows, on a copy of the files in a temporary directory (it leaves caches beside them).
"""

import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_train import data_file  # noqa: E402

FIELD_SIZES = (2000, 1500, 800, 500, 300, 150, 80, 40, 20, 10)
# name -> extra rafm train arguments
CONFIGS = [
    ("FM(64) sgd", ["--model", "fm", "--dim", "64", "--method", "sgd", "--learn-rate", "0.01"]),
    ("FM(64) adagrad", ["--model", "fm", "--dim", "64", "--method", "adagrad"]),
    ("RaFM{8,64} adagrad", ["--model", "rafm", "--ranks", "8,64", "--method", "adagrad"]),
]


def fields_rows(rng, n_rows, sizes=FIELD_SIZES, exponent=1.1, rank=4):
    """(labels, feature ids a row): one value of each field, Zipf(``exponent``) within the
    field over a random order of its values, clicks ~ Bernoulli(sigmoid(planted FM))."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cols = []
    for start, size in zip(starts, sizes):
        p = 1.0 / np.arange(1, size + 1) ** exponent
        ranked = rng.permutation(size)
        cols.append(start + ranked[rng.choice(size, n_rows, p=p / p.sum())])
    ids = np.stack(cols, axis=1)
    n = int(np.sum(sizes))
    w, v = rng.normal(0, 0.3, n), rng.normal(0, 0.5, (n, rank))
    s = v[ids].sum(axis=1)
    logit = -0.5 + w[ids].sum(axis=1) + 0.5 * ((s * s).sum(1) - (v[ids] ** 2).sum(axis=(1, 2)))
    labels = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype(int)
    return labels, ids


def fields_files(seed=11, train_rows=57_600, test_rows=28_800):
    """bench/data/fields.{train,test}.libfm, written once."""
    paths = [os.path.join(HERE, "data", f"fields.{part}.libfm") for part in ("train", "test")]
    if not all(os.path.exists(p) for p in paths):
        os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
        labels, ids = fields_rows(np.random.default_rng(seed), train_rows + test_rows)
        for path, rows in zip(paths, (slice(0, train_rows), slice(train_rows, None))):
            with open(path, "w") as fh:
                fh.writelines(f"{y} " + " ".join(f"{i}:1" for i in row) + "\n"
                              for y, row in zip(labels[rows], ids[rows]))
    return paths


def sets(name):
    """name -> (train file, test file, epochs)."""
    out = {}
    if name in ("fields", "both"):
        out["fields"] = (*fields_files(), 50)
    if name in ("clicks-1000000", "both"):
        path = data_file(1_000_000)
        out["clicks-1000000"] = (path, path, 4)
    return out


def run(cmd):
    """Run ``cmd``: (wall seconds, peak resident MB of the process)."""
    return finish(*start(cmd))


def start(cmd):
    """``cmd`` started: (process, cmd, start time) for :func:`finish`."""
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), cmd, time.perf_counter()


def finish(proc, cmd, started):
    """Wait for a started command: (wall seconds, peak resident MB of the process)."""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    err = proc.stderr.read()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed:\n{err}")
    return wall, usage.ru_maxrss / 1024


def rafm_run(train, test, epochs, threads, extra, workdir):
    """One whole ``rafm train``: (train rows/s, wall s, peak MB, auc, logloss)."""
    return rafm_result(train, test, workdir, *run(rafm_command(train, test, epochs, threads, extra, workdir)))


def rafm_pair(train, test, epochs, extra, workdir):
    """Two ``--threads 1`` runs started together, each in its own directory: (their train
    rows/s summed, the later one's wall s, the larger peak MB, the first's auc and logloss)."""
    dirs = [os.path.join(workdir, part) for part in ("a", "b")]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    started = []
    try:
        for d in dirs:
            started.append(start(rafm_command(train, test, epochs, 1, extra, d)))
        done = [rafm_result(train, test, d, *finish(*s)) for d, s in zip(dirs, started)]
    finally:  # a failed run: no process left writing into the directories
        for proc, _, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return (done[0][0] + done[1][0], max(done[0][1], done[1][1]), max(done[0][2], done[1][2]), *done[0][3:])


def rafm_command(train, test, epochs, threads, extra, workdir):
    return [sys.executable, "-m", "rafmcli", "train", "--task", "c", "--train", train, "--test", test,
            "--out", os.path.join(workdir, "p.txt"), "--iter", str(epochs), "--holdout", "0",
            "--threads", str(threads), "--rlog", os.path.join(workdir, "log.tsv"), "--quiet", *extra]


def rafm_result(train, test, workdir, wall, peak):
    """(train rows/s, wall s, peak MB, auc, logloss) of a finished run in ``workdir``."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate

    seconds = np.loadtxt(os.path.join(workdir, "log.tsv"), skiprows=1, usecols=1, ndmin=1)
    n_rows = read_dataset(train).n_rows
    labels = read_dataset(test).labels
    metrics = evaluate("c", labels, np.loadtxt(os.path.join(workdir, "p.txt")))
    return n_rows / float(np.median(seconds[1:])), wall, peak, metrics["auc"], metrics["logloss"]


XLEARN_RUN = """
import sys, xlearn
train, test, epochs, threads, workdir = sys.argv[1:]
fm = xlearn.create_fm()
fm.setTrain(train)
fm.fit({"task": "binary", "lr": 0.01, "lambda": 0.01, "k": 64, "epoch": int(epochs),
        "nthread": int(threads), "opt": "sgd", "metric": "none"}, workdir + "/xl.model")
fm.setTest(test)
fm.setSigmoid()
fm.predict(workdir + "/xl.model", workdir + "/xl.out")
"""


def xlearn_run(train, test, epochs, threads, workdir):
    """One whole xLearn train + predict: (None, wall s, peak MB, auc, logloss)."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.metrics import evaluate

    copies = []
    for path in (train, test):
        copy = os.path.join(workdir, "xl-" + os.path.basename(path))
        if not os.path.exists(copy):
            shutil.copyfile(path, copy)
        copies.append(copy)
    os.environ.setdefault("USER", "bench")  # xLearn dies without USER
    wall, peak = run([sys.executable, "-c", XLEARN_RUN, *copies, str(epochs), str(threads), workdir])
    metrics = evaluate("c", read_dataset(test).labels, np.loadtxt(os.path.join(workdir, "xl.out")))
    return float("nan"), wall, peak, metrics["auc"], metrics["logloss"]


def has_xlearn():
    try:
        import xlearn  # noqa: F401
    except ImportError:
        return False
    return True


def command_line(extra, threads, epochs):
    return shlex.join(["rafm", "train", "--task", "c", "--train", "TRAIN", "--test", "TEST", "--out", "P",
                       "--iter", str(epochs), "--holdout", "0", "--threads", str(threads), *extra])


def cell(values, fmt):
    """median (slowest - fastest) of ``values``."""
    v = sorted(values)
    return f"{fmt(float(np.median(v)))} ({fmt(v[0])} - {fmt(v[-1])})"


SAMPLES = os.path.join(os.path.dirname(HERE), "data_samples")
# small files: whole `rafm train` runs with the defaults but --threads (name, arguments)
SMALL_RUNS = [
    ("classification sample, defaults", ["--task", "c", "--train", "classification.train.libfm",
                                         "--validation", "classification.validation.libfm"]),
    ("regression sample, defaults", ["--task", "r", "--train", "regression.train.libfm",
                                     "--validation", "regression.validation.libfm"]),
    ("regression sample, mcmc", ["--task", "r", "--train", "regression.train.libfm", "--method", "mcmc"]),
    ("implicit sample, defaults", ["--task", "implicit", "--train", "implicit.train.libfm", "--meta", "implicit.meta"]),
]


def small_files(repeats):
    """Whole-command wall time of SMALL_RUNS with one thread and with the default (every core,
    fewer where they would not pay: threads.for_work), in turn: does the default cost anything
    on the shipped samples (a few thousand rows)?"""
    print(f"\nshipped samples (data_samples/): whole command, median wall s (fastest-slowest) of {repeats}")
    print(f"{'run':<36}{'--threads 1':>22}{'default (0)':>22}")
    for name, args in SMALL_RUNS:
        cmd = [sys.executable, "-m", "rafmcli", "train", *(a if not a.endswith((".libfm", ".meta")) else
                                                          os.path.join(SAMPLES, a) for a in args), "--quiet"]
        run(cmd + ["--threads", "1"])  # kernels compiled and cached before timing
        walls = {1: [], 0: []}
        for _ in range(repeats):
            for threads in (1, 0):
                walls[threads].append(run(cmd + ["--threads", str(threads)])[0])
        print(f"{name:<36}{cell(walls[1], lambda x: f'{x:.2f}'):>22}{cell(walls[0], lambda x: f'{x:.2f}'):>22}")
    print("  rafm train ARGS --threads T --quiet  (ARGS as named, files in data_samples/)")


@click.command()
@click.option("--set", "which", type=click.Choice(["fields", "clicks-1000000", "both", "samples"]),
              default="both", show_default=True)
@click.option("--repeats", default=3, show_default=True, help="fresh processes per configuration")
@click.option("--epochs", type=int, help="epochs a run [default: 50 on fields, 4 on the 1M set]")
@click.option("--config", "names", multiple=True, help="only these configurations (by name)")
def main(which, repeats, epochs, names):
    print("$ python bench/bench_threads.py " + shlex.join(sys.argv[1:]))
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start "
          "(a shared machine: compare rows side by side, not with other runs)")
    if which == "samples":
        small_files(repeats)
        return
    configs = [c for c in CONFIGS if not names or c[0] in names]
    xlearn = has_xlearn() and (not names or "xLearn FM(64) sgd" in names)
    if not xlearn:
        print("xLearn not installed (pip install xlearn==0.40a1): no xLearn rows")
    with tempfile.TemporaryDirectory() as workdir:
        for name, (train, test, default_epochs) in sets(which).items():
            n_epochs = epochs or default_epochs
            print(f"\n{name}: {n_epochs} epochs + predict; median run (slowest-fastest) of {repeats}")
            print(f"{'model':<20}{'thr':>4}  {'train rows/s':>32}{'wall s':>22}{'peak MB':>18}"
                  f"{'AUC':>26}{'logloss':>26}")
            rows = list(configs)
            if xlearn and name == "fields":
                rows.append(("xLearn FM(64) sgd", None))
            walls = {}  # (label, threads) -> median wall seconds
            for label, extra in rows:
                runs = {1: [], 2: []} if extra is None else {1: [], 2: [], "1+1": []}
                for _ in range(repeats):
                    for threads in runs:
                        if extra is None:
                            runs[threads].append(xlearn_run(train, test, n_epochs, threads, workdir))
                        elif threads == "1+1":
                            runs[threads].append(rafm_pair(train, test, n_epochs, extra, workdir))
                        else:
                            runs[threads].append(rafm_run(train, test, n_epochs, threads, extra, workdir))
                for threads in runs:
                    r = np.array(runs[threads])
                    walls[label, threads] = float(np.median(r[:, 1]))
                    print(f"{label:<20}{threads:>4}  {cell(r[:, 0], lambda x: f'{x:,.0f}'):>32}"
                          f"{cell(r[:, 1], lambda x: f'{x:.2f}'):>22}{cell(r[:, 2], lambda x: f'{x:.0f}'):>18}"
                          f"{cell(r[:, 3], lambda x: f'{x:.4f}'):>26}{cell(r[:, 4], lambda x: f'{x:.4f}'):>26}")
                if extra is not None:
                    one, two, pair = (np.median(np.array(runs[t])[:, 0]) for t in (1, 2, "1+1"))
                    print(f"{'':<24}2 threads / 1: {two / one:.2f}x train rows/s; two processes / 1: "
                          f"{pair / one:.2f}x (the machine's ceiling); 2 threads / two processes: {two / pair:.2f}x")
                sys.stdout.flush()
            if ("xLearn FM(64) sgd", 2) in walls and ("FM(64) sgd", 2) in walls:
                print(f"{'':<24}FM(64) sgd wall / xLearn's, 2 threads: "
                      f"{walls['FM(64) sgd', 2] / walls['xLearn FM(64) sgd', 2]:.2f}x")
            for label, extra in configs:
                print("  " + command_line(extra, "T", n_epochs))
            if xlearn and name == "fields":
                print("  xLearn: python -c XLEARN_RUN TRAIN TEST EPOCHS T DIR (bench_threads.py; k 64, sgd, lr 0.01, "
                      "lambda 0.01)")
    print(f"\nchildren's CPU: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime:.0f} s")


if __name__ == "__main__":
    main()
