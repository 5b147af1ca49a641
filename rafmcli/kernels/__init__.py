"""numba kernels, free of I/O: the Theorem 3 forward pass and per-solver updates."""

import numpy as np


def read_only(*arrays):
    """Read-only views of ``arrays``: what the kernels are given as input they only read
    (a data set's rows, id tables, counts, labels).

    numba compiles a kernel once per argument type, and a read-only array is another type:
    rows mapped from the binary cache are read-only, rows built in memory are not. Passing
    every such input read-only compiles each kernel once (and guards the data from a kernel).
    """
    views = []
    for a in arrays:
        v = np.asanyarray(a).view()  # a memory map stays one
        v.flags.writeable = False
        views.append(v)
    return tuple(views)


# Per-row kernels compile without numba's reference counting (NRT). With it, a jitted
# function increfs every array argument on entry and decrefs it on return, each an atomic
# instruction in a call of its own, and numba's pruning leaves most of them: called once a
# row (and an inlined step once a feature), they took half of FM(64) SGD's training time
# on bench_threads' fields set and a third of prediction's. Such a kernel allocates
# nothing and returns no array (its caller would release a reference it never took). Helpers
# it inlines count no references either, and so may a kernel it calls that does not set
# ``_nrt`` itself: numba lets such a callee inherit the flag from whichever caller compiles
# it first, so those callees must keep the same rule (today only sampling.row_hash, which
# returns a number). The flag is not in numba's cache key: after changing it, clear
# ``__pycache__``.
NO_REFCOUNT = {"_nrt": False}
