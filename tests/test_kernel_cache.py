"""rafm's kernels load from numba's cache in every process (start-up, issue 11).

numba keys a cached function on its bytecode and the pickled contents of its
closure. A jitted function closing over another jitted function pickles that
dispatcher with a per-process id, so its key changed in every process and it
was compiled again on every run (a wrapper around the training kernel cost
every `rafm train` 1.2 s)."""

import importlib
import pkgutil
import subprocess
import sys

from conftest import SAMPLES, child_env
from numba.core.caching import NullCache
from numba.core.dispatcher import Dispatcher

import rafmcli.io
import rafmcli.kernels


def cached_kernels():
    """(name, dispatcher) of every cache=True kernel reachable from the kernel modules' globals,
    also inside dicts and tuples (kernels made by factories, one per optimizer)."""
    for package in (rafmcli.kernels, rafmcli.io):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                items = value.values() if isinstance(value, dict) else [value]
                for item in items:
                    for kernel in item if isinstance(item, tuple) else (item,):
                        if isinstance(kernel, Dispatcher) and not isinstance(kernel._cache, NullCache):
                            yield f"{module.__name__}.{name}", kernel


def test_no_cached_kernel_closes_over_another_kernel():
    kernels = list(cached_kernels())
    assert len(kernels) > 20
    for name, kernel in kernels:
        cells = kernel.py_func.__closure__ or ()
        assert not any(isinstance(c.cell_contents, Dispatcher) for c in cells), name


def test_a_compiling_run_and_a_cached_run_give_the_same_bits(tmp_path):
    """RaFM with SGD, one thread, from an empty kernel cache and then from the cache it left:
    the same predictions byte for byte. A row loop that called its span as a function of its
    own ran a copy compiled apart from the one cached inside the loop, and the two rounded the
    dependent levels' steps differently (about 1e-9 after three epochs)."""
    cache = tmp_path / "numba"
    outputs = []
    for run in ("compiling", "cached"):
        out = tmp_path / f"{run}.txt"
        proc = subprocess.run(
            [sys.executable, "-m", "rafmcli", "train", "--task", "c", "--model", "rafm", "--ranks", "2,4,8",
             "--method", "sgd", "--learn-rate", "0.01", "--iter", "3", "--threads", "1", "--seed", "7",
             "--train", f"{SAMPLES}/classification.train.libfm", "--test", f"{SAMPLES}/classification.test.libfm",
             "--out", str(out), "--quiet", "--no-cache"],
            env={**child_env(), "NUMBA_CACHE_DIR": str(cache)}, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        outputs.append(out.read_bytes())
    assert any(cache.rglob("*.nbc"))  # the second run had a cache to load
    assert outputs[0] == outputs[1]
