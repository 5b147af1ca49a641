"""FM(64) with SGD: rafm against xLearn on the bench_train.py click set.

    pip install xlearn==0.40a1      # optional; builds from source, needs cmake
    python bench/bench_xlearn.py [--rows 1000000] [--epochs 4] [--repeats 3]

Both train a rank-64 FM with plain SGD (learning rate 0.01, L2 0.01) on
the same file, 1 and 2 threads, without validation. Epoch times are
xLearn's own per-epoch log lines and rafm's trainer history; a run's figure
is its median epoch after the first, and each tool runs ``--repeats`` times
in fresh processes (median run shown, with the slowest and fastest, and the
largest peak resident memory of its processes).
xLearn reads a copy of the file in a temporary directory, because it leaves
a binary cache beside its input.
"""

import json
import os
import re
import shutil
import sys
import tempfile

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_train import CONFIGS, child, data_file  # noqa: E402

XLEARN_RUN = """
import sys, xlearn
fm = xlearn.create_fm()
fm.setTrain(sys.argv[1])
fm.fit({"task": "binary", "lr": 0.01, "lambda": 0.01, "k": 64, "epoch": int(sys.argv[2]),
        "nthread": int(sys.argv[3]), "opt": "sgd", "metric": "none"}, sys.argv[4])
"""
EPOCH_LINE = re.compile(r"^\[\s*\d+%\s*\]\s+(\d+)\s+\S+\s+([\d.]+)\s*$")


def xlearn_epochs(path, epochs, threads, workdir):
    """(per-epoch seconds from xLearn's log, peak resident MB of its process)."""
    env = dict(os.environ, USER=os.environ.get("USER") or "bench")  # xLearn dies without USER
    out, peak = child([sys.executable, "-c", XLEARN_RUN, path, str(epochs), str(threads),
                       os.path.join(workdir, "xlearn.model")], env)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    seconds = [float(m.group(2)) for m in map(EPOCH_LINE.match, plain.splitlines()) if m]
    if len(seconds) != epochs:
        raise RuntimeError(f"could not read xLearn's epoch times from:\n{plain}")
    return seconds, peak


def rafm_median_epoch(rows, epochs, threads):
    """(rafm's median epoch seconds, peak resident MB of its process): bench_train.py's run."""
    index = next(i for i, c in enumerate(CONFIGS) if c[0] == "FM(64) sgd" and c[4] == threads)
    out, peak = child([sys.executable, os.path.join(HERE, "bench_train.py"), "--rows", str(rows),
                       "--epochs", str(epochs), "--config", str(index)])
    return json.loads(out.splitlines()[-1])[0], peak


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--epochs", default=4, show_default=True)
@click.option("--repeats", default=3, show_default=True, help="fresh processes per tool")
def main(rows, epochs, repeats):
    try:
        import xlearn  # noqa: F401
    except ImportError:
        raise SystemExit("xlearn is not installed: pip install xlearn==0.40a1")
    path = data_file(rows)
    print(f"FM(64), SGD, {rows:,} rows; {epochs} epochs a run, {repeats} runs; "
          f"rows/s of the median run (slowest - fastest)")
    print(f"{'tool':<10}{'threads':>8}{'rows/s':>12}{'range':>26}{'epoch s':>9}{'peak MB':>9}")
    with tempfile.TemporaryDirectory() as workdir:
        copy = os.path.join(workdir, os.path.basename(path))
        shutil.copyfile(path, copy)
        for threads in (1, 2):
            for tool in ("rafm", "xLearn"):
                runs, peak = [], 0.0
                for _ in range(repeats):
                    if tool == "rafm":
                        epoch, rss = rafm_median_epoch(rows, epochs, threads)
                    else:
                        seconds, rss = xlearn_epochs(copy, epochs, threads, workdir)
                        epoch = float(np.median(seconds[1:]))
                    runs.append(epoch)
                    peak = max(peak, rss)
                runs.sort()
                epoch = float(np.median(runs))
                spread = f"{rows / runs[-1]:,.0f} - {rows / runs[0]:,.0f}"
                print(f"{tool:<10}{threads:>8}{rows / epoch:>12,.0f}{spread:>26}{epoch:>9.2f}{peak:>9.0f}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
