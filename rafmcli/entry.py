"""The ``rafm`` process (the console script and ``python -m rafmcli``): its signal handler
first (:func:`rafmcli.signals.for_the_process`), then the command group, which imports
click and every command."""

import os

from rafmcli import signals


def one_blas_thread():
    """OPENBLAS_NUM_THREADS=1 unless set: numpy's OpenBLAS otherwise starts a thread a core
    at import, which spins about 50 ms of CPU waiting for work rafm never gives it (its
    loops are its own kernels), on the cores rafm's workers run on."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def run():
    """Run ``rafm`` with the process's signal handler installed first."""
    one_blas_thread()
    signals.for_the_process()
    from rafmcli.cli import main

    main()
