"""A stable argsort small enough to compile in a fraction of a second.

numba's ``np.argsort(kind="mergesort")`` is generic and took about 6 s to compile
for each key type, a tenth of a cold ``rafm train``; rows are sorted by index on
every parse, so the parser paid it every time a cache was cold.
"""

import numpy as np
from numba import njit

INSERTION_RUN = 16  # runs this short are sorted by insertion before merging


@njit(cache=True, nogil=True)
def stable_argsort(keys):
    """The order that sorts ``keys`` ascending, equal keys in their original order
    (as ``np.argsort(keys, kind="stable")``): insertion-sorted runs, merged bottom-up."""
    n = keys.shape[0]
    order = np.arange(n)
    for lo in range(0, n, INSERTION_RUN):
        for i in range(lo + 1, min(lo + INSERTION_RUN, n)):
            o = order[i]
            j = i - 1
            while j >= lo and keys[order[j]] > keys[o]:
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = o
    spare = np.empty(n, dtype=np.int64)
    width = INSERTION_RUN
    while width < n:
        for lo in range(0, n - width, 2 * width):
            mid, hi = lo + width, min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):  # the left run first on ties: stable
                if j >= hi or (i < mid and keys[order[i]] <= keys[order[j]]):
                    spare[k] = order[i]
                    i += 1
                else:
                    spare[k] = order[j]
                    j += 1
            for k in range(lo, hi):  # a loop: numba's slice-from-array assignment takes seconds to compile
                order[k] = spare[k]
        width *= 2
    return order
