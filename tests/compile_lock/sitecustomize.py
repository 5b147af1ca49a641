"""One compile of a kernel at a time across the test run's processes: the pytest-xdist workers and
every Python process a test starts (tests/conftest.py puts this folder first on PYTHONPATH, where
Python imports ``sitecustomize`` from at start-up).

numba caches a kernel once compiled but has no lock: a cold suite compiled its commonest kernels
two or three times at once on the same two cores (the workers side by side, a `rafm` subprocess
beside the worker that started it). A process that needs a kernel another is compiling waits for
it (a lock file a kernel in NUMBA_CACHE_DIR), then numba loads it from the cache. Locks are taken
under numba's compiler lock and from caller to callee, so they cannot deadlock.

numba is not imported here: a process patches its Dispatcher when it first imports numba.
"""

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

DISPATCHER = "numba.core.dispatcher"


def _lock_name(func):
    cells = []
    for cell in func.__closure__ or ():
        try:
            cells.append(repr(cell.cell_contents) if isinstance(cell.cell_contents, int) else "")
        except ValueError:  # an empty cell
            cells.append("")
    return hashlib.sha256(f"{func.__module__}.{func.__qualname__}{cells}".encode()).hexdigest()[:20]


def _patch(dispatcher_module):
    import fcntl

    from numba.core.compiler_lock import global_compiler_lock

    folder = os.path.join(os.environ["NUMBA_CACHE_DIR"], "compiling")
    os.makedirs(folder, exist_ok=True)
    Dispatcher = dispatcher_module.Dispatcher
    compile_here = Dispatcher.compile
    if getattr(compile_here, "one_at_a_time", False):  # patched already (a second lock on the same file
        return                                          # from this process would wait for itself)
    held = set()

    def compile_once(self, sig):
        name = _lock_name(self.py_func)
        with global_compiler_lock:
            if name in held:
                return compile_here(self, sig)
            with open(os.path.join(folder, name), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                held.add(name)
                try:
                    return compile_here(self, sig)
                finally:
                    held.discard(name)

    compile_once.one_at_a_time = True
    Dispatcher.compile = compile_once


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds numba's dispatcher module as Python would, and patches it once it has run."""

    def find_spec(self, name, path, target=None):
        if name != DISPATCHER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def run_then_patch(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = run_then_patch
        return spec


def install():
    """Lock compiles in this process (nothing without NUMBA_CACHE_DIR: no shared cache to wait on)."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        return
    if DISPATCHER in sys.modules:
        _patch(sys.modules[DISPATCHER])
    elif not any(type(f).__name__ == _PatchOnImport.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _run_shadowed():
    """Run the sitecustomize this one hides on sys.path, if the Python has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    install()
    _run_shadowed()
