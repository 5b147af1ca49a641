"""Workers claim blocks of their work (an epoch's rows or positives, prediction chunks) from one
shared counter.

A static split (worker t visits rows t n / T .. (t + 1) n / T) makes every
epoch wait for the slowest core: measured on the fields set, one worker often
took 17-20 ms against the other's 13 ms, so two threads ran at 1.3x one instead
of 1.8x. Workers that claim BLOCK_ROWS rows at a time with an atomic
fetch-and-add on ``claims[0]`` finish within one block of each other. The
counter's cache line moves between cores once a block, not once a row.
"""

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

BLOCK_ROWS = 512  # rows a worker claims at a time (two of kernels.sgd's gather chunks)


@intrinsic
def fetch_increment(typingctx, counter):
    """counter[0] += 1 as one atomic step (any number of threads); returns the value before."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.ndim == 1):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        first = cgutils.get_item_pointer(context, builder, signature.args[0], array,
                                         [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", first, context.get_constant(types.int64, 1), "monotonic")

    return types.int64(counter), codegen


@njit(cache=True, inline="always")
def next_block(claims, lo, hi, n, done, size):
    """The items (rows, chunks) a worker visits next, (start, stop) with start == stop when
    there are none left.

    Empty ``claims``: the worker's own range lo..hi, once (``done`` says whether it was
    given). Otherwise the next unclaimed block of ``size`` of the ``n`` items.
    """
    if claims.shape[0] == 0:
        return (hi, hi) if done else (lo, hi)
    start = min(fetch_increment(claims) * size, n)
    return start, min(start + size, n)


def counter_for(workers):
    """The counter ``workers`` threads claim blocks from (:func:`next_block`); empty for one
    thread, which then visits its range in order without an atomic a block."""
    from rafmcli import threads

    return np.zeros(1 if threads.resolved(workers) > 1 else 0, dtype=np.int64)
