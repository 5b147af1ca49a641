"""Slow, obviously correct references that the fast code is checked against.

* ``read_plain``: a plain-Python libSVM/libFM reader (str.split per line).
* FM, RaFM and DiFacto predictions as the O(n^2) pair loop of paper
  Eq. 1, 4 and 5.
"""

import numpy as np


def read_plain(text):
    """Rows of a libFM text as (labels, [sorted [(idx, value), ...] per row]).

    Same rules as rafm's reader: '#' starts a comment, blank lines are
    skipped, ``idx`` alone means 1, zero values are dropped.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    labels, rows = [], []
    for line in text.split("\n"):
        tokens = line.split("#")[0].split()
        if not tokens:
            continue
        labels.append(float(tokens[0]))
        row = []
        for tok in tokens[1:]:
            idx, _, val = tok.partition(":")
            value = float(np.float32(float(val))) if val else 1.0
            if value != 0.0:
                row.append((int(idx), value))
        rows.append(sorted(row))
    return labels, rows


def csr_rows(data):
    """A Dataset's rows in the ``read_plain`` form."""
    values = data.row_values()
    out = []
    for r in range(data.n_rows):
        a, b = data.indptr[r], data.indptr[r + 1]
        out.append([(int(i), float(v)) for i, v in zip(data.indices[a:b], values[a:b])])
    return out


def factor(V, widths, offsets, i, level):
    """Row i of level block ``level`` (1-based) of a flat factor array."""
    width = widths[level - 1]
    start = offsets[level - 1] + i * width
    return V[start:start + width]


def pair_loop(kind, ids, vals, levels, ranks, V, cap=None):
    """Sum_{i<j} <v_i, v_j> x_i x_j by the pair loop (paper Eq. 1, 4, 5).

    RaFM: the pair uses level k_ij = min(k_i, k_j) (capped at ``cap``: the
    truncated B_{1,cap}). DiFacto: one vector per feature (its blocks 1..k_i
    concatenated), pairs use the first min(D_{k_i}, D_{k_j}) coordinates
    (capped at D_cap).
    """
    V = np.asarray(V, dtype=np.float64)
    widths = list(ranks) if kind != "difacto" else list(np.diff(ranks, prepend=0))
    sizes = [int((np.asarray(levels) >= l).sum()) for l in range(1, len(ranks) + 1)]
    offsets = np.concatenate([[0], np.cumsum(np.multiply(sizes, widths))[:-1]])
    total = 0.0
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            i, j = ids[a], ids[b]
            k = min(levels[i], levels[j])
            if cap is not None:
                k = min(k, cap)
            if kind == "difacto":
                vi = np.concatenate([factor(V, widths, offsets, i, l) for l in range(1, k + 1)])
                vj = np.concatenate([factor(V, widths, offsets, j, l) for l in range(1, k + 1)])
            else:
                vi, vj = factor(V, widths, offsets, i, k), factor(V, widths, offsets, j, k)
            total += float(vi @ vj) * vals[a] * vals[b]
    return total
