"""The ``rafm`` process's own exit: objects are frozen out of the collector's reach
(gc.freeze) so that shutting the interpreter down does not walk numba's objects."""

import gc

import pytest
from click.testing import CliRunner

from rafmcli.cli import main


def test_the_process_entry_point_freezes_the_collector_and_in_process_calls_do_not(monkeypatch):
    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    with pytest.raises(SystemExit) as exc:
        main(["--version"])  # what the rafm script and python -m rafmcli run
    assert exc.value.code == 0 and frozen == [True]
    assert CliRunner().invoke(main, ["--version"]).exit_code == 0
    assert frozen == [True]


SLOW_IMPORT_AND_FAIL = """
import atexit, sys
sys.path.insert(0, sys.argv[1])
import click
from rafmcli import jit
from rafmcli.cli import main

@main.command("fail-early")
def fail_early():
    jit.preload("slow_kernels")
    raise click.UsageError("bad input")

atexit.register(lambda: print("interpreter shutdown ran", file=sys.stderr))
if sys.argv[2] == "closed":
    sys.stdout = None  # what Python gives a process started with standard output closed
main(["fail-early"])
"""


@pytest.mark.parametrize("stdout", ["open", "closed"])
def test_a_command_failing_while_kernels_preload_skips_the_interpreter_shutdown(tmp_path, stdout):
    """A command that fails while jit.preload's thread still imports exits at once with its
    status, without the interpreter's shutdown: run beside numba's import it crashed the
    process (exit 139, about one `rafm predict` in eight failing early on one core). Standard
    output closed (None) is no AttributeError traceback."""
    import subprocess
    import sys
    import time

    (tmp_path / "slow_kernels.py").write_text("import time\ntime.sleep(60)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", SLOW_IMPORT_AND_FAIL, str(tmp_path), stdout], capture_output=True,
                          text=True, timeout=120)
    assert time.perf_counter() - start < 30  # not after the 60 s import
    assert done.returncode == 2 and done.stderr.endswith("Error: bad input\n"), done.stderr
    assert "interpreter shutdown ran" not in done.stderr  # os._exit: no atexit hook, no module teardown
