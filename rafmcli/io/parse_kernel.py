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
parsed on every core in three steps:

* ``split_lines`` cuts the block into parts of about ``part_bytes``, each
  ending just after a line end (never inside a CRLF);
* ``parse_parts`` runs ``parse_block`` on parts, ranges of them on several
  threads at once (``threads.spread``), each part into its own region of
  scratch arrays sized from its bytes (a row takes at least 2 bytes, an
  entry at least 2), numbering lines from 0;
* ``join_parts`` copies the parts' rows, in order, to the file's arrays
  (``indptr`` shifted by the entries before each part), again in parallel.

Parts are independent apart from where their rows land and the line they
start at (the sum of the earlier parts' line counts), which the caller adds
to an error's line: the first failing part has only successful parts before
it, so its line number is exact. Where the cuts fall depends on the bytes
and ``part_bytes`` only, never on the number of threads, so every thread
count gives the same arrays. ``parse_block`` checks every write against its
arrays' lengths and never writes out of bounds. The kernels never raise:
``parse_block`` returns an error code and the byte span of the offending
token (or line), which the caller turns into ``FILE:LINE: what (token)``.
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
ERR_FULL = 12  # the arrays are too short for the block (never in parse_parts' regions)

INT32_MAX = 2147483647
MAX_INDEX_DIGITS = 10  # INT32_MAX's digits; a longer index takes the careful path
FLOAT32_MAX = 3.4028234663852886e38
LF = 10
CR = 13

# parse_block's result, one row of parse_parts' table: error code, lines (on
# error: the offending line), rows, entries, largest index (-1: none), rows
# with a repeated index, the byte span of the offending token, every value 1
(R_CODE, R_LINES, R_ROWS, R_NZ, R_MAX_INDEX, R_REPEATS, R_ERR_START, R_ERR_END,
 R_ONES) = range(9)
N_RESULTS = 9

# byte classes: 0 part of a token, 1 blank (space, tab, VT, FF), 2 line end (LF, CR), 3 '#'
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[[32, 9, 11, 12]] = 1
_CLASS[[LF, CR]] = 2
_CLASS[35] = 3

# Exact powers of ten for Clinger's fast path: a mantissa below 2**53 and
# |exp| <= 22 give the correctly rounded double with one multiply or divide.
_POW10 = np.array([10.0**k for k in range(23)])


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _token_end(buf, pos):
    while _CLASS[buf[pos]] == 0:
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def _next_line(buf, pos, n):
    """From a line end at ``pos``, the start of the next line (CRLF is one end)."""
    if buf[pos] == CR and pos + 1 < n and buf[pos + 1] == LF:
        return pos + 2
    return pos + 1


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _long_index(buf, start, end):
    """The index spelt by the digits buf[start:end], or INT32_MAX + 1 if it is larger."""
    while start < end - 1 and buf[start] == 48:
        start += 1
    if end - start > MAX_INDEX_DIGITS:
        return INT32_MAX + 1
    idx = 0
    for p in range(start, end):
        idx = idx * 10 + (buf[p] - 48)
    return idx


@njit(cache=True, nogil=True)
def _sort_row(indices, values, a, b):
    """Sort entries a..b by index, stably (insertion sort; mergesort for long rows)."""
    if b - a > 32:
        order = np.argsort(indices[a:b], kind="mergesort")
        indices[a:b] = indices[a:b][order]
        values[a:b] = values[a:b][order]
        return
    for i in range(a + 1, b):
        key = indices[i]
        if indices[i - 1] <= key:
            continue
        v = values[i]
        j = i - 1
        while j >= a and indices[j] > key:
            indices[j + 1] = indices[j]
            values[j + 1] = values[j]
            j -= 1
        indices[j + 1] = key
        values[j + 1] = v


@njit(cache=True, nogil=True)
def parse_block(buf, n, line_no, nz_base, labels, indptr, indices, values):
    """Parse ``buf[:n]`` (whole lines) into the CSR arrays, from their start.

    Row k goes to ``labels[k]``, its entries to ``indices`` and ``values``
    from ``indptr[k] - nz_base``, and ``indptr[k + 1]`` gets ``nz_base``
    plus the entries so far; ``indptr[0]`` is not touched. ``line_no`` is
    the number of lines before ``buf``. A row that would not fit in the
    arrays returns ERR_FULL instead of writing. Returns the ``N_RESULTS``
    fields named by ``R_*``: on error ``line_no`` is the offending line and
    the span its token (for ERR_SUM_INF, the line).
    """
    cap_rows = min(labels.shape[0], indptr.shape[0] - 1)
    cap_nz = min(indices.shape[0], values.shape[0])
    row = 0
    nz = 0
    max_index = -1
    repeats = 0
    ones = True
    pos = 0
    while pos < n:
        line_no += 1
        line_start = pos
        while _CLASS[buf[pos]] == 1:
            pos += 1
        if _CLASS[buf[pos]] != 0:
            while _CLASS[buf[pos]] != 2:
                pos += 1
            pos = _next_line(buf, pos, n)
            continue
        ok, label, end = parse_number(buf, pos)
        if not ok or _CLASS[buf[end]] == 0:
            return ERR_LABEL, line_no, row, nz, max_index, repeats, pos, _token_end(buf, pos), ones
        if not np.isfinite(label):
            return ERR_LABEL_INF, line_no, row, nz, max_index, repeats, pos, end, ones
        if row >= cap_rows:
            return ERR_FULL, line_no, row, nz, max_index, repeats, line_start, pos, ones
        pos = end
        row_start = nz
        while True:
            while _CLASS[buf[pos]] == 1:
                pos += 1
            if _CLASS[buf[pos]] != 0:
                while _CLASS[buf[pos]] != 2:
                    pos += 1
                break
            start = pos
            c = buf[pos]
            if c == 45:
                return ERR_INDEX_NEG, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones
            idx = 0
            while 48 <= c <= 57:  # no overflow check per digit: a long index is redone
                idx = idx * 10 + (c - 48)
                pos += 1
                c = buf[pos]
            if pos - start > MAX_INDEX_DIGITS:
                idx = _long_index(buf, start, pos)
            if pos == start:
                code = ERR_INDEX_MISSING if c == 58 else ERR_INDEX
                return code, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones
            if c != 58 and _CLASS[c] == 0:
                return ERR_INDEX, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones
            if idx > INT32_MAX:
                return ERR_INDEX_RANGE, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones
            value = np.float32(1.0)
            if c == 58:
                pos += 1
                if buf[pos] == 49 and _CLASS[buf[pos + 1]] != 0:
                    pos += 1
                else:
                    if _CLASS[buf[pos]] != 0:
                        return ERR_VALUE_MISSING, line_no, row, nz, max_index, repeats, start, pos, ones
                    ok, number, end = parse_number(buf, pos)
                    if not ok or _CLASS[buf[end]] == 0:
                        return ERR_VALUE, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones
                    if not abs(number) <= FLOAT32_MAX:
                        return ERR_VALUE_INF, line_no, row, nz, max_index, repeats, start, end, ones
                    value = np.float32(number)
                    ones &= value == 1
                    pos = end
            if value != 0:
                if nz >= cap_nz:
                    return ERR_FULL, line_no, row, nz, max_index, repeats, line_start, pos, ones
                if idx > max_index:
                    max_index = idx
                indices[nz] = idx
                values[nz] = value
                nz += 1
        increasing = True  # rows mostly come sorted, without repeats: one check for both
        for j in range(row_start + 1, nz):
            increasing &= indices[j - 1] < indices[j]
        if not increasing:
            _sort_row(indices, values, row_start, nz)
            repeated = False
            for j in range(row_start + 1, nz):
                if indices[j] == indices[j - 1]:
                    repeated = True
                    break
            if repeated:
                nz = _sum_repeats(indices, values, row_start, nz)
                if nz < 0:
                    return ERR_SUM_INF, line_no, row, row_start, max_index, repeats, line_start, pos, ones
                repeats += 1
                ones = False  # sums may be 1 too: the caller checks the values at the end
        labels[row] = label
        row += 1
        indptr[row] = nz_base + nz
        pos = _next_line(buf, pos, n)
    return OK, line_no, row, nz, max_index, repeats, 0, 0, ones


@njit(cache=True, nogil=True)
def split_lines(buf, n, part_bytes):
    """Cuts 0 = c_0 <= c_1 <= ... <= c_P = n of ``buf[:n]`` (whole lines) into
    parts of about ``part_bytes``; each cut is just after a line end, never
    between the CR and LF of a CRLF (a part may be empty)."""
    parts = max(1, (n + part_bytes - 1) // part_bytes)
    cuts = np.empty(parts + 1, dtype=np.int64)
    cuts[0] = 0
    for p in range(1, parts):
        q = max(p * (n // parts), cuts[p - 1], 1)
        while q < n:
            c = buf[q - 1]
            if c == LF or (c == CR and buf[q] != LF):
                break
            q += 1
        cuts[p] = min(q, n)
    cuts[parts] = n
    return cuts


def scratch_sizes(n, parts):
    """(rows, indptr, entries) lengths of parse_parts' scratch arrays for ``n`` bytes."""
    return n // 2 + parts + 1, n // 2 + 2 * parts + 2, n // 2 + parts + 1


@njit(cache=True, nogil=True, inline="always")
def _region(cuts, p):
    """(first row, first indptr entry, first entry, capacity) of part p in the scratch arrays.

    A row needs at least 2 bytes (label, line end), an entry at least 2 (blank,
    index): part p holds at most len/2 of each, and floor(b/2) - floor(a/2) >=
    floor((b - a)/2) keeps the regions apart.
    """
    a, b = cuts[p], cuts[p + 1]
    first = a // 2 + p
    return first, first + p, first, (b - a) // 2 + 1


@njit(cache=True, nogil=True)
def parse_parts(lo, hi, buf, cuts, labels, indptr, indices, values, results):
    """``parse_block`` on parts lo..hi-1, each into its scratch region, lines
    counted from 0 in each part, error spans as offsets into ``buf``; part
    p's ``R_*`` fields go to ``results[p]``. Parts are independent: ranges
    of them run on threads at once (``threads.spread``)."""
    for p in range(lo, hi):
        a, b = cuts[p], cuts[p + 1]
        r0, i0, z0, cap = _region(cuts, p)
        indptr[i0] = 0
        code, lines, rows, nz, mx, rep, e0, e1, ones = parse_block(
            buf[a:b], b - a, 0, 0, labels[r0:r0 + cap], indptr[i0:i0 + cap + 1],
            indices[z0:z0 + cap], values[z0:z0 + cap])
        results[p, R_CODE] = code
        results[p, R_LINES] = lines
        results[p, R_ROWS] = rows
        results[p, R_NZ] = nz
        results[p, R_MAX_INDEX] = mx
        results[p, R_REPEATS] = rep
        results[p, R_ERR_START] = a + e0
        results[p, R_ERR_END] = a + e1
        results[p, R_ONES] = ones


@njit(cache=True, nogil=True)
def join_parts(lo, hi, cuts, results, row_at, nz_at, s_labels, s_indptr, s_indices, s_values,
               labels, indptr, indices, values):
    """Copy the rows of parts lo..hi-1 from the scratch arrays to the file's
    arrays: part p's rows from ``row_at[p]``, its entries from ``nz_at[p]``
    (``indptr`` shifted to match); ``values`` too unless it is empty."""
    with_values = values.shape[0] > 0
    for p in range(lo, hi):
        r0, i0, z0, _ = _region(cuts, p)
        out_row, out_nz = row_at[p], nz_at[p]
        for k in range(results[p, R_ROWS]):
            labels[out_row + k] = s_labels[r0 + k]
            indptr[out_row + k + 1] = out_nz + s_indptr[i0 + k + 1]
        for k in range(results[p, R_NZ]):
            indices[out_nz + k] = s_indices[z0 + k]
        if with_values:
            for k in range(results[p, R_NZ]):
                values[out_nz + k] = s_values[z0 + k]
