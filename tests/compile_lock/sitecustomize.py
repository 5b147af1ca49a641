"""One compile of a kernel at a time across a test run's processes: the pytest-xdist workers and
the Python processes tests start with the run's PYTHONPATH (tests/conftest.py puts this folder
first on it; Python imports ``sitecustomize`` from there at start-up).

numba caches a kernel once compiled but has no lock: a cold suite compiled its commonest kernels
two or three times at once on the same two cores (the workers side by side, a `rafm` subprocess
beside the worker that started it). A process that needs a kernel another is compiling waits for
it (a lock file per kernel in NUMBA_CACHE_DIR/compiling), then numba loads it from the cache.

Only cached kernels not yet compiled in the process take a lock, under numba's compiler lock
and from caller to callee, so two processes cannot wait for each other; a wait longer than
WAIT_SECONDS (a process stopped while compiling) compiles all the same.

numba is not imported here: a process patches its Dispatcher when it first imports numba.
"""

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time

DISPATCHER = "numba.core.dispatcher"
WAIT_SECONDS = 600


def _lock_name(func):
    cells = []
    for cell in func.__closure__ or ():
        try:
            cells.append(repr(cell.cell_contents) if isinstance(cell.cell_contents, int) else "")
        except ValueError:  # an empty cell
            cells.append("")
    return hashlib.sha256(f"{func.__module__}.{func.__qualname__}{cells}".encode()).hexdigest()[:20]


def _wait_for(lock):
    """Take the lock on the open file ``lock``; False after WAIT_SECONDS without it."""
    import fcntl

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def _patch(dispatcher_module, folder):
    from numba.core import sigutils
    from numba.core.caching import NullCache
    from numba.core.compiler_lock import global_compiler_lock

    Dispatcher = dispatcher_module.Dispatcher
    compile_here = Dispatcher.compile
    if getattr(compile_here, "one_at_a_time", False):  # patched already (a second lock on the same file
        return                                          # from this process would wait for itself)
    held = set()

    def compile_once(self, sig):
        if isinstance(self._cache, NullCache):  # numba's own helpers: never cached, nothing to wait for
            return compile_here(self, sig)
        name = _lock_name(self.py_func)
        with global_compiler_lock:
            args, _ = sigutils.normalize_signature(sig)
            if name in held or tuple(args) in self.overloads:
                return compile_here(self, sig)
            with open(os.path.join(folder, name), "w") as lock:
                _wait_for(lock)
                held.add(name)
                try:
                    return compile_here(self, sig)
                finally:
                    held.discard(name)

    compile_once.one_at_a_time = True
    Dispatcher.compile = compile_once


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds numba's dispatcher module as the path finder would, and patches it once it has run."""

    def __init__(self, folder):
        self.folder = folder

    def find_spec(self, name, path, target=None):
        if name != DISPATCHER:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        run, folder = spec.loader.exec_module, self.folder

        def run_then_patch(module):
            run(module)
            _patch(module, folder)

        spec.loader.exec_module = run_then_patch
        return spec


def install():
    """Lock compiles in this process; nothing without a NUMBA_CACHE_DIR to keep the lock files in."""
    folder = os.path.join(os.environ.get("NUMBA_CACHE_DIR") or "", "compiling")
    if folder == "compiling":
        return
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:  # numba will say what is wrong with its cache directory
        return
    if DISPATCHER in sys.modules:
        _patch(sys.modules[DISPATCHER], folder)
    elif not any(type(f).__name__ == _PatchOnImport.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(folder))


def _run_shadowed():
    """Run the sitecustomize this one hides on sys.path, if the Python has one."""
    here = os.path.realpath(os.path.dirname(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and os.path.realpath(spec.origin or "") != os.path.realpath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    install()
    _run_shadowed()
