"""`rafm` starts numba without what no rafm kernel uses (cli.LeanNumba): scipy.linalg
(BLAS), cffi, the scan of installed distributions for numba extensions, and numba's
registries when every kernel loads from the cache; the kernels still run, and other
code may import those modules as usual."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import SAMPLES, child_env

CHECK = r"""
import importlib.metadata, json, sys
scans = []
entry_points = importlib.metadata.entry_points
importlib.metadata.entry_points = lambda *a, **k: (scans.append(1), entry_points(*a, **k))[1]
from rafmcli.cli import main
try:
    main(["stats", "--json", "--no-cache", sys.argv[1]])
except SystemExit as exc:
    assert not exc.code, exc.code
loaded = {name: name in sys.modules for name in ("scipy.linalg", "cffi", "pycparser")}
loaded["entry points read"] = bool(scans)
import cffi  # noqa: F401  (outside numba, cffi imports as usual)
print(json.dumps(loaded))
"""


@pytest.mark.skipif(importlib.util.find_spec("cffi") is None, reason="cffi not installed: nothing to leave out")
def test_rafm_runs_numba_without_blas_cffi_or_extension_scan(tmp_path):
    data = tmp_path / "d.libfm"
    data.write_text("1 3:1 5:0.5\n0 3:2\n")
    proc = subprocess.run([sys.executable, "-c", CHECK, str(data)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    *report, loaded = proc.stdout.strip().splitlines()
    assert json.loads("\n".join(report))["files"][0]["features"] == 2  # the kernels ran
    assert json.loads(loaded) == {"scipy.linalg": False, "cffi": False, "pycparser": False,
                                  "entry points read": False}


COMMANDS = r"""
import json, os, sys
from rafmcli import cli
if sys.argv[4] == "numba's own loads":
    del cli._AFTER_LOADING["numba.core.caching"]
cli.LeanNumba.install()  # as main does, before numba is imported here
main = cli.main
from numba.core import base
refreshed = []  # numba installing its registries (every one, each time)
refresh = base.BaseContext.refresh
base.BaseContext.refresh = lambda self: (refreshed.append(1), refresh(self))[1]
out, samples, clicks = sys.argv[1:4]
for args in (
        ["train", "--task", "c", "--model", "rafm", "--ranks", "4,16", "--iter", "3", "--threads", "1",
         "--train", f"{samples}/classification.train.libfm", "--test", f"{samples}/classification.test.libfm",
         "--out", f"{out}/rafm.txt", "--save-model", f"{out}/c.rafm"],
        ["predict", "--model", f"{out}/c.rafm", "--out", f"{out}/predict.txt", f"{samples}/classification.test.libfm"],
        ["train", "--task", "r", "--method", "mcmc", "--ranks", "4,8", "--iter", "5",
         "--train", f"{samples}/regression.train.libfm", "--test", f"{samples}/regression.test.libfm",
         "--out", f"{out}/mcmc.txt"],
        ["train", "--task", "implicit", "--ranks", "4,16", "--meta", f"{samples}/implicit.meta", "--iter", "2",
         "--threads", "1", "--train", f"{samples}/implicit.train.libfm", "--save-model", f"{out}/i.rafm"],
        ["recommend", "--model", f"{out}/i.rafm", "--group", "1", "-k", "5", "--out", f"{out}/recommend.txt",
         f"{samples}/implicit.test.libfm"],
        ["train", "--task", "c", "--model", "fm", "--dim", "8", "--threads", "2", "--iter", "2",
         "--train", clicks, "--test", f"{samples}/classification.test.libfm", "--out", f"{out}/hogwild.txt"]):
    try:
        main([*args, "--quiet", "--no-cache"])
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)
print(json.dumps({"registries": bool(refreshed)}))
"""


def test_kernels_loaded_from_the_cache_run_without_numbas_registries(tmp_path):
    """The first process loads (or compiles) every kernel the way numba does, installing its
    registries; the second loads every kernel from the cache without them (it crashed when numba's runtime was not
    started) and writes the same bytes: RaFM epochs and prediction, MCMC (whose cached
    environment imports numba modules), implicit training and recommend's parallel
    kernels; Hogwild FM on two threads (40,000 rows) the same within its noise."""
    import numpy as np

    rng = np.random.default_rng(5)
    ids = rng.integers(1, 400, size=(40_000, 8))
    clicks = tmp_path / "clicks.libfm"
    clicks.write_text("".join(f"{int(r[0] % 3 == 0)} " + " ".join(f"{i}:1" for i in sorted(set(r))) + "\n"
                              for r in ids))
    runs = []
    for name, loads in (("first", "numba's own loads"), ("second", "rafm's")):
        out = tmp_path / name
        out.mkdir()
        proc = subprocess.run([sys.executable, "-c", COMMANDS, str(out), SAMPLES, str(clicks), loads],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        runs.append((out, json.loads(proc.stdout.strip().splitlines()[-1])))
    import numba

    from rafmcli.cli import LEAN_LOADS_NUMBA

    tested = LEAN_LOADS_NUMBA[0] <= tuple(numba.version_info[:2]) <= LEAN_LOADS_NUMBA[1]
    assert runs[0][1] == {"registries": True}
    assert runs[1][1] == {"registries": not tested}  # another numba: numba's own loads
    for name in ("rafm.txt", "predict.txt", "mcmc.txt", "recommend.txt"):
        assert (runs[0][0] / name).read_bytes() == (runs[1][0] / name).read_bytes(), name
        assert len((runs[1][0] / name).read_text().splitlines()) > 100
    first, second = (np.loadtxt(out / "hogwild.txt") for out, _ in runs)
    assert first.shape == second.shape == (600,)
    assert np.abs(first - second).max() < 0.05


@pytest.mark.parametrize("version, lean", [((0, 58, 0), True), ((0, 68, 1), True), ((0, 69, 0), False),
                                           ((0, 57, 1), False), ((0, None, None), False)])
def test_cached_loads_are_lean_only_on_the_numba_versions_read(monkeypatch, version, lean):
    """A numba built from git without tags (version 0+untagged..., minor None) keeps its own
    load: comparing None with an int raised during numba's import, failing every command."""
    import types

    from rafmcli import cli

    class Cache:
        def load_overload(self, sig, target_context):
            """numba's own"""

    monkeypatch.setitem(sys.modules, "numba", types.SimpleNamespace(version_info=version))
    cli._cached_loads_lean(types.SimpleNamespace(Cache=Cache))
    assert (Cache.load_overload is cli._load_overload) == lean


def test_preload_imports_on_its_own_thread_and_leaves_failures_to_the_caller(tmp_path, monkeypatch):
    """jit.preload imports its modules on a thread (rafm predict: numba starts while the
    model is checked); an import that fails there escapes nothing from the thread, and
    the caller's own import raises it with its message."""
    import threading

    from rafmcli import jit

    escaped = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)

    (tmp_path / "preload_probe.py").write_text("import threading\nTHREAD = threading.current_thread().name\n")
    (tmp_path / "preload_broken.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("preload_probe", "preload_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    jit.preload("preload_probe", "preload_broken")()
    assert sys.modules["preload_probe"].THREAD == "rafm-preload"
    assert "preload_broken" not in sys.modules
    assert escaped == []
    with pytest.raises(ImportError, match="broken on purpose"):
        importlib.import_module("preload_broken")


def test_a_command_that_stops_before_waiting_exits_without_the_preload(tmp_path):
    """A command that fails (a damaged model) or is interrupted before it waits for its preload
    exits at once: the import still running (here one that never ends) does not hold the
    process, and nothing is printed about the thread."""
    (tmp_path / "preload_forever.py").write_text("import threading\nthreading.Event().wait()\n")
    code = "import sys; from rafmcli import jit; jit.preload('preload_forever'); sys.exit(2)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=child_env(tmp_path))
    assert (done.returncode, done.stderr) == (2, "")


BLAS_THREADS = r"""
import os, sys
from rafmcli import entry
if sys.argv[1] == "rafm":
    entry.one_blas_thread()  # what the rafm process does first
import numpy  # noqa: F401  (its OpenBLAS starts its threads here)
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.parametrize("start, preset, threads", [("rafm", None, 1), ("rafm", "2", 2), ("plain", None, "cores")])
def test_rafm_starts_numpy_with_one_blas_thread(start, preset, threads):
    """OpenBLAS's threads spin for work rafm never gives them: a rafm process starts none,
    unless OPENBLAS_NUM_THREADS says otherwise; a plain numpy import starts one a core."""
    env = {k: v for k, v in child_env().items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    proc = subprocess.run([sys.executable, "-c", BLAS_THREADS, start], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cores = len(os.sched_getaffinity(0))
    assert int(proc.stdout) == (cores if threads == "cores" else min(threads, cores))
