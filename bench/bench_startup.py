"""Start-up and model building: where the time of a small `rafm train` goes,
and how fast 8M x 64 factors are initialised.

    python bench/bench_startup.py [--repeats 5] [--features 8000000] [--baseline DIR]

Whole processes (``--repeats`` each, median and range, kernels already
cached): the bare interpreter, importing numpy and numba, ``rafm --help``
and ``rafm train`` of FM and RaFM on a 100-row file (defaults: 10% held out,
up to 100 epochs with early stopping). Then, in one process, the first
cached kernel load (numba's own initialisation), and drawing ``--features``
x 64 float32 factors with the model builder against numpy's float64 normals
cast to float32 (what rafm did before), with the peak memory and CPU time of
each (sys: the kernel faulting fresh pages in; on a virtual machine the host
may back them only at first touch), rafm's draws again into the same,
already touched memory, and rafm's draws into 4 KiB pages (``NUMPY_MADVISE_HUGEPAGE=0``:
numpy then asks for no transparent huge pages, whose first touch costs more on this VM
but which train faster). Bytecode is cached (``PYTHONDONTWRITEBYTECODE`` is
dropped), as in an installed package. numba starts as the ``rafm`` command starts it
(``rafmcli.cli.LeanNumba``: a cached kernel loads without numba's registries).
``--baseline DIR`` runs the same with another rafm checkout side by side.
"""

import json
import os
import sys
import tempfile

import click

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_reader import spread, timed  # noqa: E402

INIT = r"""
import json, resource, sys, time
import numpy as np
from rafmcli.model import layout

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime

n, how = int(sys.argv[1]) * 64, sys.argv[2]
if how == "rafm":
    from rafmcli.kernels.random import fill_normal
    fill_normal(np.empty(1, np.float32), 1.0, 0)  # load the kernel
base = peak()
t, (u, s) = time.perf_counter(), cpu()
rng = np.random.default_rng(1)
if how == "rafm":
    V = layout.build("fm", "r", (64,), np.arange(int(sys.argv[1])), np.ones(int(sys.argv[1])), 0.01, rng,
                     0.0, (0, 1)).V
else:
    V = layout.aligned_zeros(n, np.float32)
    V[:] = rng.normal(0.0, 0.01, n)
seconds, (u2, s2) = time.perf_counter() - t, cpu()
out = {"seconds": seconds, "peak": peak() - base, "user": u2 - u, "sys": s2 - s}
if how == "rafm":  # the same draws into memory already touched: no page faults
    t, (u, s) = time.perf_counter(), cpu()
    fill_normal(V, 0.01, 1)
    out["redraw"], out["redraw user"] = time.perf_counter() - t, cpu()[0] - u
print(json.dumps(out))
"""

FIRST_LOAD = r"""
import json, time
import numpy as np
from rafmcli.cli import LeanNumba
LeanNumba.install()  # as the rafm command does
t = time.perf_counter()
import numba
from rafmcli.io import parse_kernel
imported = time.perf_counter() - t
t = time.perf_counter()
parse_kernel.last_line_end(np.zeros(4, dtype=np.uint8), 4)
print(json.dumps({"import numba": imported, "first cached kernel (numba init)": time.perf_counter() - t}))
"""


@click.command()
@click.option("--repeats", default=5, show_default=True, help="fresh processes per figure")
@click.option("--features", default=8_000_000, show_default=True, help="rows of 64 factors to initialise")
@click.option("--baseline", type=click.Path(file_okay=False, exists=True),
              help="another rafm checkout to run side by side")
def main(repeats, features, baseline):
    trees = [("rafm", ROOT)] + ([("baseline", os.path.abspath(baseline))] if baseline else [])
    small = os.path.join(ROOT, "data_samples", "classification.train.libfm")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        hundred = os.path.join(workdir, "hundred.libfm")
        with open(small) as src, open(hundred, "w") as dst:
            dst.writelines([line for line in src if not line.startswith("#")][:100])
        for name, tree in trees:
            env = dict(os.environ, PYTHONPATH=tree, RAFM_CACHE_DIR=os.path.join(workdir, name))
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as in an installed package
            rafm = [sys.executable, "-m", "rafmcli"]
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "import numpy": [sys.executable, "-c", "import numpy"],
                "import numba": [sys.executable, "-c", "import numba"],
                "rafm --help": rafm + ["--help"],
                "rafm train FM, 100 rows": rafm + ["train", "--task", "c", "--model", "fm", "--train", hundred,
                                                   "--quiet"],
                "rafm train RaFM, 100 rows": rafm + ["train", "--task", "c", "--train", hundred, "--quiet"],
            }
            for args in commands.values():
                timed(args, env)  # compile or load every kernel once
            r = results[name] = {}
            for label, args in commands.items():
                runs = [timed(args, env) for _ in range(repeats)]
                r[label] = ([w for w, _, _ in runs], [m for _, m, _ in runs])
            loads = [json.loads(timed([sys.executable, "-c", FIRST_LOAD], env)[2]) for _ in range(repeats)]
            for key in loads[0]:
                r["in-process: " + key] = ([d[key] for d in loads], None)
            if name == "rafm":
                for how in ("rafm", "rafm, 4 KiB pages", "numpy float64"):
                    # numpy asks for transparent huge pages (2 MiB) for large arrays; without them
                    # (NUMPY_MADVISE_HUGEPAGE=0) first touch costs less here but training runs slower
                    init_env = dict(env, NUMPY_MADVISE_HUGEPAGE="0") if "4 KiB" in how else env
                    # rafm's first touch is bimodal here (huge pages found at once, or after the kernel
                    # compacts memory): every repeat; numpy's float64 draws take 10-16 s, half as many
                    n_inits = repeats if how.startswith("rafm") else max(1, repeats // 2)
                    inits = [json.loads(timed([sys.executable, "-c", INIT, str(features),
                                               how.split()[0].rstrip(",")], init_env)[2])
                             for _ in range(n_inits)]
                    r[f"init {features:,} x 64: {how}"] = ([d["seconds"] for d in inits],
                                                          [d["peak"] for d in inits])
                    r[f"  CPU user: {how}"] = ([d["user"] for d in inits], None)
                    r[f"  CPU sys (page faults): {how}"] = ([d["sys"] for d in inits], None)
                    if how == "rafm":
                        r["  the draws again (memory touched already)"] = ([d["redraw"] for d in inits], None)
                        r["  the draws again, CPU user"] = ([d["redraw user"] for d in inits], None)
    print(f"{repeats} fresh processes a figure (numpy's float64 inits: {max(1, repeats // 2)}): "
          f"median (fastest-slowest); {os.cpu_count()} cores; kernels cached")
    print(f"{'measure':<46}" + "".join(f"{n + ' s':>24}{'peak MB':>10}" for n, _ in trees))
    for label in results["rafm"]:
        cells = ""
        for n, _ in trees:
            if label not in results[n]:
                cells += f"{'':>34}"
                continue
            seconds, peaks = results[n][label]
            mem = f"{sorted(peaks)[len(peaks) // 2] / 1e6:,.0f}" if peaks else ""
            cells += f"{spread(seconds, lambda x: f'{x:.2f}'):>24}{mem:>10}"
        print(f"{label:<46}{cells}")
    print("targets: rafm train on 100 rows < 0.8 s; 8M x 64 factors <= 2 s")


if __name__ == "__main__":
    main()
