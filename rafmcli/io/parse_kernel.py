"""numba parser for libSVM/libFM text held in a byte buffer.

Grammar of one line: ``label [idx[:value] ...] [# comment]``, fields split by
spaces, tabs or CR (so CRLF files read as LF files). Blank and comment-only
lines are skipped; ``idx`` alone means value 1; zero values are dropped, so
the CSR arrays hold only non-zeros; each row's entries are sorted by index.

A file is read in two passes over blocks of complete lines (the caller cuts
blocks after a newline and ends the last block with one): ``count_block``
bounds the array sizes, ``parse_block`` validates every token and fills them. The
kernels never raise: ``parse_block`` returns an error code and the byte span
of the offending token, which the caller turns into ``FILE:LINE: what (token)``.
"""

import numpy as np
from numba import njit

OK = 0
ERR_LABEL = 1
ERR_LABEL_INF = 2
ERR_INDEX = 3
ERR_INDEX_NEG = 4
ERR_INDEX_RANGE = 5
ERR_VALUE_MISSING = 6
ERR_VALUE = 7
ERR_VALUE_INF = 8
ERR_DUPLICATE = 9
ERR_INDEX_MISSING = 10

INT32_MAX = 2147483647
FLOAT32_MAX = 3.4028234663852886e38

# byte classes: 0 part of a token, 1 blank (space, tab, CR, VT, FF), 2 newline, 3 '#'
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[[32, 9, 13, 11, 12]] = 1
_CLASS[10] = 2
_CLASS[35] = 3
_TOKEN = (_CLASS == 0).astype(np.uint8)

# Exact powers of ten for Clinger's fast path: a mantissa below 2**53 and
# |exp| <= 22 give the correctly rounded double with one multiply or divide.
_POW10 = np.array([10.0**k for k in range(23)])


@njit(cache=True)
def last_newline(buf, n):
    """Index just past the last newline in ``buf[:n]`` (0 if there is none)."""
    for k in range(n - 1, -1, -1):
        if buf[k] == 10:
            return k + 1
    return 0


@njit(cache=True)
def count_block(buf, n):
    """Upper bounds for the filling pass: (lines, tokens, every value spelt ``1``).

    Tokens (labels included) are counted inside comments too; that only
    over-allocates files with long comments. The loops are branch-free; a
    ':' in the last two bytes is never followed by ``1`` and a blank.
    """
    lines = 0
    tokens = 0
    colons = 0
    colon_ones = 0
    prev = np.uint8(0)
    for pos in range(n):
        c = buf[pos]
        t = _TOKEN[c]
        tokens += t & (prev ^ 1)
        prev = t
        lines += c == 10
        colons += c == 58
    for pos in range(n - 2):
        colon_ones += (buf[pos] == 58) & (buf[pos + 1] == 49) & (_TOKEN[buf[pos + 2]] == 0)
    return lines, tokens, colons == colon_ones


@njit(cache=True)
def parse_number(buf, pos):
    """Parse a decimal float starting at ``pos``; return (ok, value, end).

    Stops at the first byte that cannot continue the number; the caller checks
    that it ends the token.
    """
    neg = False
    c = buf[pos]
    if c == 43 or c == 45:
        neg = c == 45
        pos += 1
    mant = 0
    digits = 0
    exp10 = 0
    seen = False
    while 48 <= buf[pos] <= 57:
        seen = True
        if digits < 19:
            mant = mant * 10 + (buf[pos] - 48)
            if mant > 0:
                digits += 1
        else:
            exp10 += 1
        pos += 1
    if buf[pos] == 46:
        pos += 1
        while 48 <= buf[pos] <= 57:
            seen = True
            if digits < 19:
                mant = mant * 10 + (buf[pos] - 48)
                if mant > 0:
                    digits += 1
                exp10 -= 1
            pos += 1
    if not seen:
        return False, 0.0, pos
    if buf[pos] == 101 or buf[pos] == 69:
        pos += 1
        eneg = False
        if buf[pos] == 43 or buf[pos] == 45:
            eneg = buf[pos] == 45
            pos += 1
        if not 48 <= buf[pos] <= 57:
            return False, 0.0, pos
        e = 0
        while 48 <= buf[pos] <= 57:
            if e < 100000:
                e = e * 10 + (buf[pos] - 48)
            pos += 1
        exp10 += -e if eneg else e
    if mant == 0:
        value = 0.0
    elif mant < 9007199254740992 and -22 <= exp10 <= 22:
        value = float(mant)
        if exp10 >= 0:
            value *= _POW10[exp10]
        else:
            value /= _POW10[-exp10]
    elif exp10 > 400:
        value = np.inf
    elif exp10 < -400:
        value = 0.0
    else:
        value = float(mant) * 10.0**exp10
    return True, -value if neg else value, pos


@njit(cache=True)
def _token_end(buf, pos):
    while _CLASS[buf[pos]] == 0:
        pos += 1
    return pos


@njit(cache=True)
def _sort_row(indices, values, a, b, fill_values):
    """Sort entries a..b by index (insertion sort; mergesort for long rows)."""
    if b - a > 32:
        order = np.argsort(indices[a:b], kind="mergesort")
        indices[a:b] = indices[a:b][order]
        if fill_values:
            values[a:b] = values[a:b][order]
        return
    for i in range(a + 1, b):
        key = indices[i]
        if indices[i - 1] <= key:
            continue
        v = values[i] if fill_values else np.float32(1.0)
        j = i - 1
        while j >= a and indices[j] > key:
            indices[j + 1] = indices[j]
            if fill_values:
                values[j + 1] = values[j]
            j -= 1
        indices[j + 1] = key
        if fill_values:
            values[j + 1] = v


@njit(cache=True)
def parse_block(buf, n, line_no, row, nz, labels, indptr, indices, values):
    """Parse ``buf[:n]`` (complete lines) into the CSR arrays.

    ``line_no``, ``row`` and ``nz`` carry on from the previous block;
    ``indptr[0]`` is 0; ``values`` is written unless it is empty.
    Returns (error, line_no, row, nz, max_index, err_start, err_end): on error
    ``line_no`` is the offending line and the span its token (for a duplicate
    index, the row).
    """
    fill_values = values.shape[0] > 0
    max_index = -1
    pos = 0
    while pos < n:
        line_no += 1
        line_start = pos
        while _CLASS[buf[pos]] == 1:
            pos += 1
        k = _CLASS[buf[pos]]
        if k != 0:
            while buf[pos] != 10:
                pos += 1
            pos += 1
            continue
        ok, label, end = parse_number(buf, pos)
        if not ok or _CLASS[buf[end]] == 0:
            return ERR_LABEL, line_no, row, nz, max_index, pos, _token_end(buf, pos)
        if not np.isfinite(label):
            return ERR_LABEL_INF, line_no, row, nz, max_index, pos, end
        pos = end
        row_start = nz
        while True:
            while _CLASS[buf[pos]] == 1:
                pos += 1
            k = _CLASS[buf[pos]]
            if k != 0:
                while buf[pos] != 10:
                    pos += 1
                break
            start = pos
            c = buf[pos]
            if c == 45:
                return ERR_INDEX_NEG, line_no, row, nz, max_index, start, _token_end(buf, start)
            idx = 0
            while 48 <= c <= 57:
                if idx <= INT32_MAX:
                    idx = idx * 10 + (c - 48)
                pos += 1
                c = buf[pos]
            if pos == start:
                code = ERR_INDEX_MISSING if c == 58 else ERR_INDEX
                return code, line_no, row, nz, max_index, start, _token_end(buf, start)
            if c != 58 and _CLASS[c] == 0:
                return ERR_INDEX, line_no, row, nz, max_index, start, _token_end(buf, start)
            if idx > INT32_MAX:
                return ERR_INDEX_RANGE, line_no, row, nz, max_index, start, _token_end(buf, start)
            value = 1.0
            if c == 58:
                pos += 1
                if buf[pos] == 49 and _CLASS[buf[pos + 1]] != 0:
                    pos += 1
                else:
                    if _CLASS[buf[pos]] != 0:
                        return ERR_VALUE_MISSING, line_no, row, nz, max_index, start, pos
                    ok, value, end = parse_number(buf, pos)
                    if not ok or _CLASS[buf[end]] == 0:
                        return ERR_VALUE, line_no, row, nz, max_index, start, _token_end(buf, start)
                    if not abs(value) <= FLOAT32_MAX:
                        return ERR_VALUE_INF, line_no, row, nz, max_index, start, end
                    pos = end
            if value != 0.0:
                if idx > max_index:
                    max_index = idx
                indices[nz] = idx
                if fill_values:
                    values[nz] = value
                nz += 1
        _sort_row(indices, values, row_start, nz, fill_values)
        for j in range(row_start + 1, nz):
            if indices[j] == indices[j - 1]:
                return ERR_DUPLICATE, line_no, row, nz, max_index, line_start, pos
        labels[row] = label
        row += 1
        indptr[row] = nz
        pos += 1
    return OK, line_no, row, nz, max_index, 0, 0


@njit(cache=True)
def occurrences(indices, length):
    """n_i for ids below ``length``: rows holding feature i (rows have no duplicates)."""
    counts = np.zeros(length, dtype=np.int32)
    for k in range(indices.shape[0]):
        counts[indices[k]] += 1
    return counts
