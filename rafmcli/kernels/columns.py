"""Transposing CSR rows into CSC columns (the column access of the coordinate solvers)."""

from numba import njit


@njit(cache=True)
def transpose(indptr, indices, values, column, colptr, rows, col_values):
    """Fill ``rows`` and ``col_values`` so column j holds rows[colptr[j]:colptr[j+1]].

    ``column[k]`` is the column of entry k; rows come out in increasing order
    within a column. ``values`` and ``col_values`` are empty when every value is 1.
    """
    has_values = values.shape[0] > 0
    fill = colptr[:-1].copy()
    for r in range(indptr.shape[0] - 1):
        for k in range(indptr[r], indptr[r + 1]):
            j = column[k]
            pos = fill[j]
            rows[pos] = r
            if has_values:
                col_values[pos] = values[k]
            fill[j] = pos + 1
