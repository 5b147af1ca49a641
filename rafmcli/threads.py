"""How many threads rafm's numba kernels run on, and running a kernel over
ranges of work on several threads.

Kernels that split into independent ranges (parsing parts of a block,
formatting chunks of predictions, counting ranges of ids) are compiled as
plain ``nogil`` functions of a range ``lo, hi`` and spread over a few Python
threads by :func:`spread`: unlike ``parallel=True`` kernels they load from
numba's cache in milliseconds, and one range runs without waking a thread.
"""

import os
import threading

_POOL = {"size": 0, "executor": None}
_DEFAULT = {"threads": None}  # spread's thread count when a call gives none (None: every core)


def set_default(n):
    """Make ``spread`` use ``n`` threads when a call does not say (``rafm tune``'s workers: 1)."""
    _DEFAULT["threads"] = n
_POOL_LOCK = threading.Lock()


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # a cgroup v2 CPU quota: "QUOTA PERIOD" or "max PERIOD"
_CORES = {}


def available_cores():
    """Cores this process may run on: its CPU affinity, but no more than its cgroup's CPU
    quota allows (a container limited to 2 CPUs on a 64-core host: 2); at least 1."""
    if "n" not in _CORES:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        _CORES["n"] = max(1, min(n, quota_cpus(CGROUP_CPU_MAX) or n))
    return _CORES["n"]


def quota_cpus(path):
    """The CPUs a cgroup v2 ``cpu.max`` file allows (quota / period, rounded up); None when
    it sets no quota or cannot be read."""
    try:
        with open(path) as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        return None


def for_work(requested, work, per_thread):
    """The threads a training run uses: ``requested`` (0: every available core), but at most
    one per ``per_thread`` units of ``work`` (rows, non-zeros; below that a thread's start
    and merges cost more than it saves) and at least 1."""
    return max(1, min(requested or available_cores(), work // per_thread))


def _executor(workers):
    from concurrent.futures import ThreadPoolExecutor

    with _POOL_LOCK:
        if _POOL["size"] < workers:
            if _POOL["executor"] is not None:
                _POOL["executor"].shutdown(wait=False)
            _POOL["executor"] = ThreadPoolExecutor(workers, thread_name_prefix="rafm")
            _POOL["size"] = workers
        return _POOL["executor"]


def range_bounds(items, n):
    """Where :func:`spread`'s ``n`` ranges over ``range(items)`` start (and the last ends):
    range t is t * items // n .. (t + 1) * items // n (kernels/replicas.first_row relies on it)."""
    return [t * items // n for t in range(n + 1)]


def resolved(threads=None):
    """The threads :func:`spread` runs on when given ``threads`` (None: :func:`set_default`'s,
    else every available core), before it caps them by the items."""
    return threads or _DEFAULT["threads"] or available_cores()


def spread(kernel, items, *args, threads=None):
    """``kernel(lo, hi, *args)`` over contiguous ranges covering ``range(items)``,
    one range per thread (``threads``, default :func:`set_default`'s or every available core, at most
    ``items``); the calling thread runs the first range itself.

    ``kernel`` must release the GIL (``nogil=True``) and write only what its
    range owns (or what it claims: kernels/claims.py). Returns the ranges' results in order.
    """
    n = max(1, min(resolved(threads), items))
    bounds = range_bounds(items, n)
    if n == 1:
        return [kernel(0, items, *args)]
    from concurrent.futures import wait

    futures = [_executor(n - 1).submit(kernel, bounds[t], bounds[t + 1], *args) for t in range(1, n)]
    try:
        first = kernel(bounds[0], bounds[1], *args)
    finally:
        wait(futures)  # no range still writes when this returns, whatever happened
    return [first] + [f.result() for f in futures]
