"""The ``rafm`` process (the console script and ``python -m rafmcli``): signals are the
process's from its first moment to its last (:func:`rafmcli.signals.for_the_process`),
then the command group runs; it imports click and every command, so it comes second."""

from rafmcli import signals


def run():
    """Run ``rafm`` with the process's signal handler installed first."""
    signals.for_the_process()
    from rafmcli.cli import main

    main()
