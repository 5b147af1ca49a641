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
