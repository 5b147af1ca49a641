"""Checks of loaded model arrays at memory speed: values finite, ids distinct.

``count_not_finite`` reads float32 (float64) values as uint32 (uint64) bit
patterns: a value is inf or NaN exactly when all its exponent bits are set,
so a range is decided by one branch-free, vectorised count.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def count_not_finite(bits, exponent):
    """How many of the bit patterns ``bits`` (uint32 or uint64) have every bit of
    ``exponent`` set (0x7f800000 for float32, 0x7ff0000000000000 for float64)."""
    bad = 0
    for k in range(bits.shape[0]):
        bad += (bits[k] & exponent) == exponent
    return bad


def not_finite(values):
    """How many of the float32 or float64 ``values`` are inf or NaN."""
    if values.dtype == np.float32:
        return int(count_not_finite(values.view(np.uint32), np.uint32(0x7F800000)))
    return int(count_not_finite(values.view(np.uint64), np.uint64(0x7FF0000000000000)))


def ids_distinct(ids):
    """True when the non-negative int32 ``ids`` are all different: O(len(ids)), no sort.

    One bit per possible id in lazily zeroed memory (np.zeros): only the pages
    the ids fall on are ever touched.
    """
    if ids.shape[0] == 0:
        return True
    return bool(_first_repeat(ids, np.zeros(int(ids.max()) // 8 + 1, dtype=np.uint8)) < 0)


@njit(cache=True, nogil=True)
def _first_repeat(ids, seen):
    """Position of the first id already seen before it (-1: none); marks ``seen`` bits."""
    for k in range(ids.shape[0]):
        i = ids[k]
        byte, bit = i >> 3, np.uint8(1 << (i & 7))
        if seen[byte] & bit:
            return k
        seen[byte] |= bit
    return -1
