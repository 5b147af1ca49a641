"""The ``rafm`` process (the console script and ``python -m rafmcli``): its signal handler
first (:func:`rafmcli.signals.for_the_process`), then the command group, which imports
click and every command."""

from rafmcli import signals


def run():
    """Run ``rafm`` with the process's signal handler installed first."""
    signals.for_the_process()
    from rafmcli.cli import main

    main()
