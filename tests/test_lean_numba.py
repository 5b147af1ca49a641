"""`rafm` starts numba without what no rafm kernel uses (cli.LeanNumba): scipy.linalg
(BLAS), cffi and the scan of installed distributions for numba extensions; the
kernels still run, and other code may import those modules as usual."""

import importlib.util
import json
import subprocess
import sys

import pytest

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
