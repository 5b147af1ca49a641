"""Slow, obviously correct references that the fast code is checked against.

* ``read_plain``: a plain-Python libSVM/libFM reader (regular expressions and
  bytes.split per line) with every rule of rafm's reader, errors included.
* FM, RaFM and DiFacto predictions as the O(n^2) pair loop of paper
  Eq. 1, 4 and 5.
"""

import re

import numpy as np

LINE_END = re.compile(rb"\r\n|\r|\n")
NUMBER = re.compile(rb"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
INDEX = re.compile(rb"[0-9]+")
FLOAT32_MAX = float(np.finfo(np.float32).max)


class PlainError(ValueError):
    """The first bad line of a file (1-based, counting LF, CRLF and lone CR)."""

    def __init__(self, line):
        super().__init__(f"bad line {line}")
        self.line = line


def read_plain(text):
    """Rows of a libFM text as (labels, [sorted [(idx, value), ...] per row]).

    Same rules as rafm's reader: lines end at LF, CRLF or CR; '#' starts a
    comment; blank lines are skipped; ``idx`` alone means 1; values are
    float32 and zeros are dropped; a repeated index holds the sum of its
    values (float64 in file order, then float32), dropped if 0. ``text`` is
    str or bytes; a bad line raises PlainError.
    """
    return read_plain_counted(text)[:2]


def read_plain_counted(text):
    """``read_plain`` plus the number of rows that repeat an index."""
    data = text.encode() if isinstance(text, str) else text
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    labels, rows, repeats = [], [], 0
    for line_no, line in enumerate(LINE_END.split(data), 1):
        tokens = line.split(b"#")[0].split()
        if not tokens:
            continue
        if not NUMBER.fullmatch(tokens[0]) or not np.isfinite(float(tokens[0])):
            raise PlainError(line_no)
        sums = {}
        for tok in tokens[1:]:
            idx, colon, val = tok.partition(b":")
            if not INDEX.fullmatch(idx) or int(idx) > 2**31 - 1:
                raise PlainError(line_no)
            if colon and not (NUMBER.fullmatch(val) and abs(float(val)) <= FLOAT32_MAX):
                raise PlainError(line_no)
            value = float(np.float32(float(val))) if colon else 1.0
            if value != 0.0:
                sums.setdefault(int(idx), []).append(value)
        row = []
        for idx, parts in sums.items():
            total = 0.0
            for v in parts:
                total += v
            if not abs(total) <= FLOAT32_MAX:
                raise PlainError(line_no)
            if float(np.float32(total)) != 0.0:
                row.append((idx, float(np.float32(total))))
        repeats += any(len(parts) > 1 for parts in sums.values())
        labels.append(float(tokens[0]))
        rows.append(sorted(row))
    return labels, rows, repeats


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


def read_word2vec(text):
    """A word2vec text file (gensim's ``binary=False`` format) as {token: vector}, checked
    against its ``count dim`` header."""
    lines = text.rstrip("\n").split("\n")
    count, dim = (int(t) for t in lines[0].split())
    vectors = {}
    for line in lines[1:]:
        token, *numbers = line.rstrip().split(" ")
        assert len(numbers) == dim, line
        vectors[token] = np.array([float(v) for v in numbers], dtype=np.float32)
    assert len(vectors) == count == len(lines) - 1
    return vectors


def implicit_loss(y, shift, kind):
    """Loss of a positive y[0] and its negatives y[1:] on s = y - shift (kernels/implicit.py)."""
    s = np.asarray(y, dtype=np.float64) - np.asarray(shift, dtype=np.float64)
    if kind == "logistic":
        return float(np.log1p(np.exp(-s[0])) + np.log1p(np.exp(s[1:])).sum())
    top = s.max()
    return float(top + np.log(np.exp(s - top).sum()) - s[0])


def group_values(rows, group_of):
    """Each row's group values as tuples of sorted (id, value): {group: [tuple per row]}."""
    out = {}
    n_groups = int(max(group_of)) + 1
    for g in range(n_groups):
        out[g] = [tuple(sorted((i, float(np.float32(x))) for i, x in row if group_of[i] == g)) for row in rows]
    return out
