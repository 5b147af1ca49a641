"""rafm's kernels load from numba's cache in every process (start-up, issue 11).

numba keys a cached function on its bytecode and the pickled contents of its
closure. A jitted function closing over another jitted function pickles that
dispatcher with a per-process id, so its key changed in every process and it
was compiled again on every run (a wrapper around the training kernel cost
every `rafm train` 1.2 s)."""

import importlib
import pkgutil

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
