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
