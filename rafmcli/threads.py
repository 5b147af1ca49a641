"""How many threads rafm's numba kernels run on."""

import contextlib
import os


def available_cores():
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def using(n):
    """Run the numba kernels called inside on ``n`` threads (at most numba's pool)."""
    import numba

    saved = numba.get_num_threads()
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(saved)
