"""A Hogwild worker's private copies of the hot features, in spare rows of the model's arrays.

FM's parameter arrays (V, w and their optimizer state) can be allocated with
spare rows after the model's own (kernels/hogwild.py ``spare_rows``). The hot
features are the model's first ``n_hot`` (solvers/sgd.py numbers them so:
model/layout.move_to_front); worker t of T keeps its copy of hot feature i in row
``n_features + t * n_hot + i``, and rows are gathered with hot features' ids
rewritten to those rows (kernels/sgd.py ``gather_rows``: one comparison, no
table), so the worker runs the serial row loop unchanged. Every ``merge_rows``
rows it adds its change since the last merge (copy - base) to the shared row
and takes the sum back (:func:`merge`): Hogwild's delayed updates, batched.
The bias is copied and merged the same way.

A worker's hot features and share of the work are a :class:`Replicas`; :func:`none`
gives the serial loop's.
"""

from typing import NamedTuple

import numpy as np
from numba import njit


class Replicas(NamedTuple):
    """What a Hogwild worker of kernels.sgd's row loop copies, and how it shares the work."""

    n_hot: int           # the hot features: the model's first n_hot (model/layout.move_to_front)
    n_features: int      # the model's own rows; the workers' copies follow them
    n_threads: int
    merge_rows: int      # rows between a worker's merges
    claims: np.ndarray   # the counter of claimed blocks of rows (kernels/claims.py; empty: own range)
    write_prefetch: bool  # prefetch the rows to step for writing (forward.prefetch_write: a small model)


@njit(cache=True)
def none():
    """``replicas`` of the serial loop: no hot features, one merge (the bias) at the end."""
    return Replicas(0, 0, 1, 1 << 62, np.empty(0, dtype=np.int64), False)


@njit(cache=True)
def first_row(lo, items, replicas):
    """The row of hot feature 0's copy of the worker whose range starts at ``lo`` (worker t's
    range starts at t * items // n_threads: threads.range_bounds, pinned by tests/test_hogwild.py)."""
    n_threads = replicas.n_threads
    t = 0
    while t * items // n_threads < lo:
        t += 1
    return replicas.n_features + t * replicas.n_hot


@njit(cache=True, error_model="numpy")
def _rows(arr, width, n_hot, first, base, merge):
    """Copy the hot rows of ``arr`` (its first ``n_hot`` rows of ``width``) into the worker's
    rows (from row ``first``) and into ``base`` or, with ``merge``, merge the worker's rows into
    them (:func:`_merge_one`)."""
    if not arr.shape[0]:
        return
    h = np.uint64(first) * width
    for e in range(np.uint64(n_hot) * width):
        if merge:
            _merge_one(arr, e, arr, h + e, base, e)
        else:
            v = arr[e]
            arr[h + e] = v
            base[e] = v


@njit(cache=True, error_model="numpy", inline="always")
def _state_width(model, state):
    """Entries a feature has in the first optimizer state: V's width, or one (row-wise AdaGrad:
    a state smaller than V, forward.row_unit)."""
    return np.uint64(model[1][0]) if state[0].shape[0] == model[3].shape[0] else np.uint64(1)


@njit(cache=True, error_model="numpy")
def _each_array(n_hot, first, model, state, base, merge):
    """:func:`_rows` on V, w and their optimizer state, with ``base`` their bases."""
    width, one = np.uint64(model[1][0]), np.uint64(1)
    _rows(model[3], width, n_hot, first, base[0], merge)
    _rows(state[0], _state_width(model, state), n_hot, first, base[1], merge)
    _rows(state[1], width, n_hot, first, base[2], merge)
    _rows(model[4], one, n_hot, first, base[3], merge)
    _rows(state[2], one, n_hot, first, base[4], merge)
    _rows(state[3], one, n_hot, first, base[5], merge)


@njit(cache=True, error_model="numpy")
def open_copies(n_hot, first, model, state):
    """Fill the worker's rows from the shared ones; return their values now (the base of the
    first merge): (V, accV1, accV2, w, accw1, accw2, bias, bias state)."""
    V, w, width = model[3], model[4], np.uint64(model[1][0])
    accV1, accV2, accw1, accw2, acc0 = state
    base = (np.empty(n_hot * width, V.dtype),
            np.empty(n_hot * _state_width(model, state) if accV1.shape[0] else 0, V.dtype),
            np.empty(n_hot * width if accV2.shape[0] else 0, V.dtype), np.empty(n_hot, w.dtype),
            np.empty(n_hot if accw1.shape[0] else 0, w.dtype), np.empty(n_hot if accw2.shape[0] else 0, w.dtype),
            model[5].copy(), acc0.copy())
    _each_array(n_hot, first, model, state, base, False)
    return base


@njit(cache=True, error_model="numpy", inline="always")
def _merge_one(shared, g, local, h, base, b):
    """shared[g] += local[h] - base[b] (exactly local[h] when no other worker changed shared[g]);
    all three then hold the sum. Hogwild: a concurrent merge of the same entry may be lost."""
    s, v0 = shared[g], base[b]
    v = local[h] if s == v0 else s + (local[h] - v0)
    shared[g] = v
    local[h] = v
    base[b] = v


@njit(cache=True, error_model="numpy")
def merge(n_hot, first, model, state, bias, bias_state, base):
    """Merge the worker's rows and its bias (``bias``, ``bias_state``: its copies) into the shared ones."""
    _each_array(n_hot, first, model, state, base, True)
    _merge_one(model[5], 0, bias, 0, base[6], 0)
    for k in range(2):
        _merge_one(state[4], k, bias_state, k, base[7], k)
