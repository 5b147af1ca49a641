"""numba parser for libSVM/libFM text held in a byte buffer.

Grammar of one line: ``label [idx[:value] ...] [# comment]``, fields split by
spaces, tabs, VT or FF. A line ends at LF, CRLF or a lone CR (old Mac files);
CRLF is one line end. Blank and comment-only lines are skipped; ``idx`` alone
means value 1; values that round to 0 in float32 are dropped, so the CSR
arrays hold only non-zeros; each row's entries are sorted by index, and an
index repeated within a row holds the sum of its values (in float64, in file
order, rounded once to float32; a zero sum is dropped), as scipy's
``sum_duplicates`` keeps one value per index.

The input is read once, in blocks of whole lines (the caller cuts a block
after its last complete line end and never cuts a CRLF in two). Each block is
parsed in two passes over the same bytes:

* ``count_block`` counts the block's line ends (exactly as ``parse_block``
  numbers lines) and bounds its tokens; the caller sizes the block's arrays
  from these counts;
* ``parse_block`` validates every token and fills those arrays.

Both passes see the same bytes, so the counts always bound the fill; even so
``parse_block`` checks every write against its arrays' lengths and never
writes out of bounds. Blocks are independent apart from the line number they
start at (the sum of earlier blocks' line counts), so they can be counted and
parsed in parallel and their arrays concatenated in order. The kernels never
raise: ``parse_block`` returns an error code and the byte span of the
offending token (or line), which the caller turns into ``FILE:LINE: what
(token)``.
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
ERR_SUM_INF = 9
ERR_INDEX_MISSING = 10
NEED_VALUES = 11  # a value other than 1 and no values array: call again with one
ERR_FULL = 12  # the arrays are too short for the block (never after count_block)

INT32_MAX = 2147483647
FLOAT32_MAX = 3.4028234663852886e38
LF = 10
CR = 13

# byte classes: 0 part of a token, 1 blank (space, tab, VT, FF), 2 line end (LF, CR), 3 '#'
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[[32, 9, 11, 12]] = 1
_CLASS[[LF, CR]] = 2
_CLASS[35] = 3
_TOKEN = (_CLASS == 0).astype(np.uint8)

# Exact powers of ten for Clinger's fast path: a mantissa below 2**53 and
# |exp| <= 22 give the correctly rounded double with one multiply or divide.
_POW10 = np.array([10.0**k for k in range(23)])


@njit(cache=True)
def last_line_end(buf, n):
    """Index just past the last complete line end in ``buf[:n]`` (0 if none).

    A CR in the last byte is not complete: an LF may follow it in the next
    read, and CRLF must stay one line end.
    """
    k = n - 1
    if k >= 0 and buf[k] == CR:
        k -= 1
    while k >= 0:
        c = buf[k]
        if c == LF or c == CR:
            return k + 1
        k -= 1
    return 0


@njit(cache=True)
def count_block(buf, n):
    """(line ends, token bound, every value spelt ``1``) of ``buf[:n]``.

    Line ends are LF plus every CR not followed by LF: exactly the lines
    ``parse_block`` numbers. Tokens (labels included) are counted inside
    comments too; that only over-allocates files with long comments. The
    loops are branch-free; a ':' in the last two bytes is never followed by
    ``1`` and a non-token byte.
    """
    lines = 0
    tokens = 0
    colons = 0
    colon_ones = 0
    crs = 0
    prev = np.uint8(0)
    for pos in range(n):
        c = buf[pos]
        t = _TOKEN[c]
        tokens += t & (prev ^ 1)
        prev = t
        lines += c == LF
        crs += c == CR
        colons += c == 58
    for pos in range(n - 2):
        colon_ones += (buf[pos] == 58) & (buf[pos + 1] == 49) & (_TOKEN[buf[pos + 2]] == 0)
    if crs:  # CR files are rare: only they pay for the pairs
        for pos in range(n - 1):
            lines += (buf[pos] == CR) & (buf[pos + 1] != LF)
        lines += buf[n - 1] == CR
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
def _next_line(buf, pos, n):
    """From a line end at ``pos``, the start of the next line (CRLF is one end)."""
    if buf[pos] == CR and pos + 1 < n and buf[pos + 1] == LF:
        return pos + 2
    return pos + 1


@njit(cache=True)
def _sort_row(indices, values, a, b, fill_values):
    """Sort entries a..b by index, stably (insertion sort; mergesort for long rows)."""
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
def _sum_repeats(indices, values, a, b):
    """Merge runs of one index in sorted entries a..b into their sum; drop zero sums.

    Returns the new end, or -1 if a sum is not finite in float32.
    """
    w = a
    j = a
    while j < b:
        idx = indices[j]
        total = np.float64(values[j])
        k = j + 1
        while k < b and indices[k] == idx:
            total += np.float64(values[k])
            k += 1
        if not abs(total) <= FLOAT32_MAX:
            return -1
        v = np.float32(total)
        if v != 0:
            indices[w] = idx
            values[w] = v
            w += 1
        j = k
    return w


@njit(cache=True)
def parse_block(buf, n, line_no, nz_base, labels, indptr, indices, values):
    """Parse ``buf[:n]`` (whole lines) into the CSR arrays, from their start.

    The arrays are the free tails of the file's arrays: row k of the block
    goes to ``labels[k]``, its entries to ``indices`` (and ``values``) from
    ``indptr[k] - nz_base`` and ``indptr[k + 1]`` gets ``nz_base`` plus the
    block's entries so far; ``indptr[0]`` is not touched. ``line_no`` is the
    number of lines before the block. ``values`` is written unless it is
    empty (then every value must be 1, else NEED_VALUES). With room for the
    lines and tokens ``count_block`` reports the arrays are long enough; a
    row that would not fit returns ERR_FULL instead of writing.
    Returns (error, line_no, rows, nz, max_index, rows_with_repeats,
    err_start, err_end): on error ``line_no`` is the offending line and the
    span its token (for ERR_SUM_INF, the line).
    """
    fill_values = values.shape[0] > 0
    cap_rows = min(labels.shape[0], indptr.shape[0] - 1)
    cap_nz = indices.shape[0]
    if fill_values:
        cap_nz = min(cap_nz, values.shape[0])
    row = 0
    nz = 0
    max_index = -1
    repeats = 0
    pos = 0
    while pos < n:
        line_no += 1
        line_start = pos
        while _CLASS[buf[pos]] == 1:
            pos += 1
        k = _CLASS[buf[pos]]
        if k != 0:
            while _CLASS[buf[pos]] != 2:
                pos += 1
            pos = _next_line(buf, pos, n)
            continue
        ok, label, end = parse_number(buf, pos)
        if not ok or _CLASS[buf[end]] == 0:
            return ERR_LABEL, line_no, row, nz, max_index, repeats, pos, _token_end(buf, pos)
        if not np.isfinite(label):
            return ERR_LABEL_INF, line_no, row, nz, max_index, repeats, pos, end
        if row >= cap_rows:
            return ERR_FULL, line_no, row, nz, max_index, repeats, line_start, pos
        pos = end
        row_start = nz
        while True:
            while _CLASS[buf[pos]] == 1:
                pos += 1
            k = _CLASS[buf[pos]]
            if k != 0:
                while _CLASS[buf[pos]] != 2:
                    pos += 1
                break
            start = pos
            c = buf[pos]
            if c == 45:
                return ERR_INDEX_NEG, line_no, row, nz, max_index, repeats, start, _token_end(buf, start)
            idx = 0
            while 48 <= c <= 57:
                if idx <= INT32_MAX:
                    idx = idx * 10 + (c - 48)
                pos += 1
                c = buf[pos]
            if pos == start:
                code = ERR_INDEX_MISSING if c == 58 else ERR_INDEX
                return code, line_no, row, nz, max_index, repeats, start, _token_end(buf, start)
            if c != 58 and _CLASS[c] == 0:
                return ERR_INDEX, line_no, row, nz, max_index, repeats, start, _token_end(buf, start)
            if idx > INT32_MAX:
                return ERR_INDEX_RANGE, line_no, row, nz, max_index, repeats, start, _token_end(buf, start)
            value = np.float32(1.0)
            if c == 58:
                pos += 1
                if buf[pos] == 49 and _CLASS[buf[pos + 1]] != 0:
                    pos += 1
                else:
                    if _CLASS[buf[pos]] != 0:
                        return ERR_VALUE_MISSING, line_no, row, nz, max_index, repeats, start, pos
                    ok, number, end = parse_number(buf, pos)
                    if not ok or _CLASS[buf[end]] == 0:
                        return ERR_VALUE, line_no, row, nz, max_index, repeats, start, _token_end(buf, start)
                    if not abs(number) <= FLOAT32_MAX:
                        return ERR_VALUE_INF, line_no, row, nz, max_index, repeats, start, end
                    value = np.float32(number)
                    pos = end
            if value != 0:
                if nz >= cap_nz:
                    return ERR_FULL, line_no, row, nz, max_index, repeats, line_start, pos
                if not fill_values and value != 1:
                    return NEED_VALUES, line_no, row, nz, max_index, repeats, line_start, pos
                if idx > max_index:
                    max_index = idx
                indices[nz] = idx
                if fill_values:
                    values[nz] = value
                nz += 1
        _sort_row(indices, values, row_start, nz, fill_values)
        repeated = False
        for j in range(row_start + 1, nz):
            if indices[j] == indices[j - 1]:
                repeated = True
                break
        if repeated:
            if not fill_values:
                return NEED_VALUES, line_no, row, nz, max_index, repeats, line_start, pos
            nz = _sum_repeats(indices, values, row_start, nz)
            if nz < 0:
                return ERR_SUM_INF, line_no, row, row_start, max_index, repeats, line_start, pos
            repeats += 1
        labels[row] = label
        row += 1
        indptr[row] = nz_base + nz
        pos = _next_line(buf, pos, n)
    return OK, line_no, row, nz, max_index, repeats, 0, 0


@njit(cache=True)
def occurrences(indices, length):
    """n_i for ids below ``length``: rows holding feature i (one entry per id a row)."""
    counts = np.zeros(length, dtype=np.int32)
    for k in range(indices.shape[0]):
        counts[indices[k]] += 1
    return counts
