import hashlib
import os
import signal
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "data_samples")


def child_env(*first):
    """The environment of a Python process a test starts: ``first`` and this checkout ahead of
    the test run's PYTHONPATH (tests/compile_lock: no kernel compiled by two processes at once)."""
    paths = (*map(str, first), ROOT, os.environ.get("PYTHONPATH"))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _kernel_source_hash():
    """numba keys a cached kernel by its own file's timestamp only, so a change in
    kernels/forward.py would leave stale compiled callers in kernels/sgd.py. Tests
    compile into a cache directory named after every source file of the package."""
    digest = hashlib.sha256()
    package = os.path.join(ROOT, "rafmcli")
    for folder, _, names in sorted(os.walk(package)):
        for name in sorted(n for n in names if n.endswith(".py")):
            with open(os.path.join(folder, name), "rb") as fh:
                digest.update(name.encode() + fh.read())
    return digest.hexdigest()[:16]


if "NUMBA_CACHE_DIR" not in os.environ:  # before anything imports numba; subprocesses inherit it
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "rafm-test-numba",
                                                 _kernel_source_hash())


def _compile_one_at_a_time():
    """No two processes of the test run compile the same kernel at once (tests/compile_lock): this
    worker, and the Python processes tests start with this PYTHONPATH, which find the lock's
    sitecustomize first on it."""
    from compile_lock.sitecustomize import install

    install()
    folder = os.path.join(ROOT, "tests", "compile_lock")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)


_compile_one_at_a_time()

# A shell's background job (`pytest &`) starts with SIGINT ignored, rafm children would inherit
# that, and rafm rightly leaves an ignored signal ignored: the Ctrl-C tests need it caught.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: PYTEST_XDIST_AUTO_NUM_WORKERS if set (xdist's own), else a worker for each core
    this process may use (affinity and cgroup quota: threads.available_cores), at most four (each
    worker holds its own imports and compiled kernels; more would add memory, not speed, here)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's hook reads it
    from rafmcli.threads import available_cores

    return min(4, available_cores())


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own binary-cache directory, outside its tmp_path."""
    monkeypatch.setenv("RAFM_CACHE_DIR", str(tmp_path_factory.mktemp("rafm-cache")))


@pytest.fixture
def sample():
    """Path of a shipped sample file, e.g. sample('regression.train')."""
    return lambda name: os.path.join(SAMPLES, name + ".libfm")


@pytest.fixture
def threads_on_small_data(monkeypatch):
    """Training uses every thread it is given, however few the rows (rafmcli.threads.for_work
    would give a small test set one): for tests of the threaded paths themselves."""
    from rafmcli.solvers import coordinate, implicit, sgd

    monkeypatch.setattr(sgd.Training, "MIN_ROWS_PER_THREAD", 1)
    monkeypatch.setattr(implicit.ImplicitTraining, "MIN_ROWS_PER_THREAD", 1)
    monkeypatch.setattr(coordinate, "MIN_NONZEROS_PER_THREAD", 1)


def cli_rows(indptr, indices, values, labels):
    """A training kernel's row arrays as ``rafm train`` passes them: read-only (kernels.read_only),
    so that a kernel test runs the specialisation the CLI compiles instead of compiling one of
    its own (numba types read-only arrays apart)."""
    from rafmcli.kernels import read_only

    return read_only(np.asarray(indptr, dtype=np.int64), indices, np.asarray(values, dtype=np.float32),
                     np.asarray(labels, dtype=np.float64))


def types_apart(kernel):
    """How many of a numba kernel's compiled signatures differ from another only in read-only
    flags or literal values: compiles the kernels' inputs should have spared (kernels.read_only)."""
    from numba.core import types

    def plain(t):
        t = types.unliteral(t)
        return t.copy(readonly=False) if isinstance(t, types.Array) else t

    return len(kernel.signatures) - len({tuple(map(plain, sig)) for sig in kernel.signatures})
