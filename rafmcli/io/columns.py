"""Column (CSC) access to a Dataset: the rows in which each feature occurs.

The coordinate solvers (ALS, MCMC) update one feature at a time and walk its
rows. Columns are numbered like ``Dataset.feature_ids`` (column j holds
feature ``feature_ids[j]``), so they do not depend on a model. They are built
once per file and kept in the binary cache beside the CSR arrays, memory-mapped
when the file is read again.
"""

from typing import NamedTuple

import numpy as np

from rafmcli.kernels import read_only


class Columns(NamedTuple):
    """CSC arrays: column j's rows are ``rows[indptr[j]:indptr[j+1]]`` (increasing)."""

    indptr: np.ndarray   # int64 [features + 1]
    rows: np.ndarray     # int32 [nnz]
    values: np.ndarray   # float32 [nnz], empty when every value is 1


def build(data):
    """The Columns of ``data`` (O(nnz))."""
    from rafmcli.kernels.columns import transpose

    if data.n_rows >= 2**31:
        raise ValueError("more than 2^31 rows")
    indptr = np.concatenate([[0], np.cumsum(data.counts)]).astype(np.int64)
    column = np.searchsorted(data.feature_ids, data.indices).astype(np.int32)
    values = np.asarray(data.values) if data.values is not None else np.zeros(0, np.float32)
    rows = np.empty(data.nnz, dtype=np.int32)
    col_values = np.empty(values.shape[0], dtype=np.float32)
    transpose(*read_only(data.indptr, data.indices, values), column, indptr, rows, col_values)
    return Columns(*read_only(indptr, rows, col_values))  # as the cache's maps are (kernels.read_only)


def columns_of(data, use_cache=True, cache_dir=None):
    """``data.columns``, built (and added to the file's cache entry) on first use."""
    if data.columns is not None:
        return data.columns
    data.columns = build(data)
    if use_cache and data.cached:
        from rafmcli.io import cache

        arrays = {"col_indptr": data.columns.indptr, "col_rows": data.columns.rows}
        if data.columns.values.shape[0]:
            arrays["col_values"] = data.columns.values
        cache.add_arrays(data.path, arrays, cache_dir)
    return data.columns
