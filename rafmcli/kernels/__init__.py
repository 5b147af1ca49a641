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
