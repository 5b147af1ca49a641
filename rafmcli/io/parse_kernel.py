"""numba parser for libSVM/libFM text held in a byte buffer.

Grammar of one line: ``label [idx[:value] ...] [# comment]`` (libSVM/libFM) or
``label [field:idx:value ...] [# comment]`` (libFFM), tokens split by spaces,
tabs, VT or FF; a file is one or the other (the first token decides: a token of
the other kind is an error, ERR_MIXED). A line ends at LF, CRLF or a lone CR (old Mac files);
CRLF is one line end. Blank and comment-only lines are skipped; ``idx`` alone
means value 1; values that round to 0 in float32 are dropped, so the CSR
arrays hold only non-zeros; each row's entries are sorted by index, and an
index repeated within a row holds the sum of its values (in float64, in file
order, rounded once to float32; a zero sum is dropped), as scipy's
``sum_duplicates`` keeps one value per index. A libFFM entry's field goes to
``fields`` beside its index (moved along when a row is sorted); an index
repeated within a row with two fields is ERR_FIELD_CONFLICT. That an index
has one field across rows is checked by ``check_fields`` after a block is
parsed, against a table of the fields seen so far (dense while the indices
are below DENSE_FIELDS, else a hash table).

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

from rafmcli.kernels.sorting import stable_argsort

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
ERR_MIXED = 11  # a libSVM token in a libFFM file, or the other way round
ERR_FULL = 12  # the arrays are too short for the block (never in parse_parts' regions)
ERR_FIELD_RANGE = 13
ERR_FIELD_CONFLICT = 14  # one index with two fields (within a row here; across rows: check_fields)

# a block's (or part's) format so far: no token yet, libSVM/libFM, libFFM
FMT_NONE = 0
FMT_SVM = 1
FMT_FFM = 2

INT32_MAX = 2147483647
MAX_INDEX_DIGITS = 10  # INT32_MAX's digits; a longer index takes the careful path
MAX_FIELD = (1 << 20) - 1  # fields number groups: tables sized by the largest field stay small
DENSE_FIELDS = 1 << 26  # indices below this: the field table is an array (zero pages cost nothing)
FLOAT32_MAX = 3.4028234663852886e38
LF = 10
CR = 13

# parse_block's result, one row of parse_parts' table: error code, lines (on
# error: the offending line), rows, entries, largest index (-1: none), rows
# with a repeated index, the byte span of the offending token, every value 1,
# the format (FMT_*) at the end (or at the error)
(R_CODE, R_LINES, R_ROWS, R_NZ, R_MAX_INDEX, R_REPEATS, R_ERR_START, R_ERR_END,
 R_ONES, R_FORMAT) = range(10)
N_RESULTS = 10

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
def _sum_repeats(indices, values, fields, with_fields, a, b):
    """Merge runs of one index in sorted entries a..b into their sum; drop zero sums.

    Returns the new end, -1 if a sum is not finite in float32, or -2 if
    ``with_fields`` and a run holds two fields.
    """
    w = a
    j = a
    while j < b:
        idx = indices[j]
        total = np.float64(values[j])
        k = j + 1
        while k < b and indices[k] == idx:
            if with_fields and fields[k] != fields[j]:
                return -2
            total += np.float64(values[k])
            k += 1
        if not abs(total) <= FLOAT32_MAX:
            return -1
        v = np.float32(total)
        if v != 0:
            indices[w] = idx
            values[w] = v
            if with_fields:
                fields[w] = fields[j]
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
def _sort_row(indices, values, fields, with_fields, a, b):
    """Sort entries a..b by index, stably (insertion sort; kernels.sorting's merge sort for
    long rows); ``fields`` move along ``with_fields``."""
    if b - a > 32:
        order = stable_argsort(indices[a:b])
        ind, val, fld = indices[a:b].copy(), values[a:b].copy(), fields[a:b].copy() if with_fields else fields[:0]
        for k in range(b - a):  # loops: numba's array-to-slice assignment took 3 s to compile
            indices[a + k] = ind[order[k]]
            values[a + k] = val[order[k]]
            if with_fields:
                fields[a + k] = fld[order[k]]
        return
    for i in range(a + 1, b):
        key = indices[i]
        if indices[i - 1] <= key:
            continue
        v = values[i]
        f = fields[i] if with_fields else 0
        j = i - 1
        while j >= a and indices[j] > key:
            indices[j + 1] = indices[j]
            values[j + 1] = values[j]
            if with_fields:
                fields[j + 1] = fields[j]
            j -= 1
        indices[j + 1] = key
        values[j + 1] = v
        if with_fields:
            fields[j + 1] = f


@njit(cache=True, nogil=True)
def parse_block(buf, n, line_no, nz_base, labels, indptr, indices, values, fields, fmt):
    """Parse ``buf[:n]`` (whole lines) into the CSR arrays, from their start.

    Row k goes to ``labels[k]``, its entries to ``indices`` and ``values``
    (libFFM fields to ``fields``) from ``indptr[k] - nz_base``, and
    ``indptr[k + 1]`` gets ``nz_base`` plus the entries so far;
    ``indptr[0]`` is not touched. ``line_no`` is the number of lines before
    ``buf``, ``fmt`` the format (FMT_*) of what precedes it. A row that would
    not fit in the arrays returns ERR_FULL instead of writing. Returns the
    ``N_RESULTS`` fields named by ``R_*``: on error ``line_no`` is the
    offending line and the span its token (for ERR_SUM_INF and
    ERR_FIELD_CONFLICT, the line).
    """
    cap_rows = min(labels.shape[0], indptr.shape[0] - 1)
    cap_nz = min(indices.shape[0], values.shape[0], fields.shape[0])
    row = 0
    nz = np.int64(0)  # not a literal 0: the row helpers would compile once more for it
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
            return ERR_LABEL, line_no, row, nz, max_index, repeats, pos, _token_end(buf, pos), ones, fmt
        if not np.isfinite(label):
            return ERR_LABEL_INF, line_no, row, nz, max_index, repeats, pos, end, ones, fmt
        if row >= cap_rows:
            return ERR_FULL, line_no, row, nz, max_index, repeats, line_start, pos, ones, fmt
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
                return ERR_INDEX_NEG, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
            idx = 0
            while 48 <= c <= 57:  # no overflow check per digit: a long index is redone
                idx = idx * 10 + (c - 48)
                pos += 1
                c = buf[pos]
            if pos - start > MAX_INDEX_DIGITS:
                idx = _long_index(buf, start, pos)
            if pos == start:
                code = ERR_INDEX_MISSING if c == 58 else ERR_INDEX
                return code, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
            if c != 58 and _CLASS[c] == 0:
                return ERR_INDEX, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
            if idx > INT32_MAX:
                return ERR_INDEX_RANGE, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
            value = np.float32(1.0)
            field = -1
            if c == 58:
                pos += 1
                if fmt == FMT_FFM:  # field:idx:value expected: what was read as the index is the field
                    q = pos
                    while 48 <= buf[q] <= 57:
                        q += 1
                    if buf[q] == 58 and q > pos:
                        code, field, idx, pos = _ffm_index(buf, idx, pos, q)
                        if code != OK:
                            return code, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
                if buf[pos] == 49 and _CLASS[buf[pos + 1]] != 0:
                    pos += 1
                else:
                    if _CLASS[buf[pos]] != 0:
                        return ERR_VALUE_MISSING, line_no, row, nz, max_index, repeats, start, pos, ones, fmt
                    ok, number, end = parse_number(buf, pos)
                    if field < 0 and ok and buf[end] == 58:  # field:idx:value where the format is not known
                        code, field, idx, pos = _ffm_index(buf, idx, pos, end)
                        if code != OK:
                            return code, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
                        if _CLASS[buf[pos]] != 0:
                            return ERR_VALUE_MISSING, line_no, row, nz, max_index, repeats, start, pos, ones, fmt
                        ok, number, end = parse_number(buf, pos)
                    if not ok or _CLASS[buf[end]] == 0:
                        return ERR_VALUE, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
                    if not abs(number) <= FLOAT32_MAX:
                        return ERR_VALUE_INF, line_no, row, nz, max_index, repeats, start, end, ones, fmt
                    value = np.float32(number)
                    ones &= value == 1
                    pos = end
            if field < 0:
                if fmt == FMT_FFM:
                    return ERR_MIXED, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
                fmt = FMT_SVM
            else:
                if fmt == FMT_SVM:
                    return ERR_MIXED, line_no, row, nz, max_index, repeats, start, _token_end(buf, start), ones, fmt
                fmt = FMT_FFM
            if value != 0:
                if nz >= cap_nz:
                    return ERR_FULL, line_no, row, nz, max_index, repeats, line_start, pos, ones, fmt
                if idx > max_index:
                    max_index = idx
                indices[nz] = idx
                values[nz] = value
                if field >= 0:
                    fields[nz] = field
                nz += 1
        increasing = True  # rows mostly come sorted, without repeats: one check for both
        for j in range(row_start + 1, nz):
            increasing &= indices[j - 1] < indices[j]
        if not increasing:
            with_fields = fmt == FMT_FFM
            _sort_row(indices, values, fields, with_fields, row_start, nz)
            repeated = False
            for j in range(row_start + 1, nz):
                if indices[j] == indices[j - 1]:
                    repeated = True
                    break
            if repeated:
                nz = _sum_repeats(indices, values, fields, with_fields, row_start, nz)
                if nz < 0:
                    code = ERR_SUM_INF if nz == -1 else ERR_FIELD_CONFLICT
                    return code, line_no, row, row_start, max_index, repeats, line_start, pos, ones, fmt
                repeats += 1
                ones = False  # sums may be 1 too: the caller checks the values at the end
        labels[row] = label
        row += 1
        indptr[row] = nz_base + nz
        pos = _next_line(buf, pos, n)
    return OK, line_no, row, nz, max_index, repeats, 0, 0, ones, fmt


@njit(cache=True, nogil=True)
def _ffm_index(buf, field, pos, end):
    """The index of a libFFM token whose field was read; its digits are
    buf[pos:end] (a ':' at ``end``). Returns (code, field, index, start of the value)."""
    if field > MAX_FIELD:
        return ERR_FIELD_RANGE, field, 0, end + 1
    if buf[pos] == 45:
        return ERR_INDEX_NEG, field, 0, end + 1
    idx = 0
    q = pos
    while q < end and 48 <= buf[q] <= 57:
        idx = idx * 10 + (buf[q] - 48)
        q += 1
    if q != end:
        return ERR_INDEX, field, 0, end + 1
    if end - pos > MAX_INDEX_DIGITS:
        idx = _long_index(buf, pos, end)
    if idx > INT32_MAX:
        return ERR_INDEX_RANGE, field, 0, end + 1
    return OK, field, idx, end + 1


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
def parse_parts(lo, hi, buf, cuts, labels, indptr, indices, values, fields, fmt, results):
    """``parse_block`` on parts lo..hi-1, each into its scratch region, lines
    counted from 0 in each part, error spans as offsets into ``buf``; part
    p's ``R_*`` fields go to ``results[p]``. Each part starts in format
    ``fmt`` (the file's so far). Parts are independent: ranges of them run
    on threads at once (``threads.spread``)."""
    for p in range(lo, hi):
        a, b = cuts[p], cuts[p + 1]
        r0, i0, z0, cap = _region(cuts, p)
        indptr[i0] = 0
        code, lines, rows, nz, mx, rep, e0, e1, ones, form = parse_block(
            buf[a:b], b - a, np.int64(0), np.int64(0), labels[r0:r0 + cap], indptr[i0:i0 + cap + 1],
            indices[z0:z0 + cap], values[z0:z0 + cap], fields[z0:z0 + cap], fmt)
        results[p, R_CODE] = code
        results[p, R_LINES] = lines
        results[p, R_ROWS] = rows
        results[p, R_NZ] = nz
        results[p, R_MAX_INDEX] = mx
        results[p, R_REPEATS] = rep
        results[p, R_ERR_START] = a + e0
        results[p, R_ERR_END] = a + e1
        results[p, R_ONES] = ones
        results[p, R_FORMAT] = form


@njit(cache=True, nogil=True, inline="always")
def _shift(keys):
    """32 - log2 of the table's length (a power of two)."""
    k = 0
    while (1 << k) < keys.shape[0]:
        k += 1
    return 32 - k


@njit(cache=True, nogil=True, inline="always")
def _slot(keys, idx, shift):
    """Where ``idx`` is, or the empty slot where it goes, in the open-addressing
    table ``keys`` (length a power of two, -1 empty; Fibonacci hashing)."""
    mask = keys.shape[0] - 1
    h = ((np.int64(idx) * 2654435769) & 0xFFFFFFFF) >> shift
    while keys[h] != idx and keys[h] != -1:
        h = (h + 1) & mask
    return h


@njit(cache=True, nogil=True)
def check_fields(cuts, results, last, s_indptr, s_indices, s_fields, dense, keys, vals):
    """Enter the fields of parts 0..last (their rows parsed so far) into the
    table of fields seen, in file order, stopping at the first entry whose
    index already has another field.

    The table is ``dense`` (field + 1 at each index, 0 unseen) when it is not
    empty, else the open-addressing table (``keys``, ``vals``: index ->
    field), which must have room for every entry (at most half full after).
    Returns (indices added, part, row in the part, index, its first field);
    part -1 when every field agrees.
    """
    added = 0
    use_dense = dense.shape[0] > 0
    shift = _shift(keys)
    for p in range(last + 1):
        r0, i0, z0, _ = _region(cuts, p)
        for r in range(results[p, R_ROWS]):
            for e in range(z0 + s_indptr[i0 + r], z0 + s_indptr[i0 + r + 1]):
                idx = s_indices[e]
                field = s_fields[e]
                if use_dense:
                    known = dense[idx] - 1
                    if known < 0:
                        dense[idx] = field + 1
                        added += 1
                    elif known != field:
                        return added, p, r, idx, known
                    continue
                h = _slot(keys, idx, shift)
                if keys[h] == -1:
                    keys[h] = idx
                    vals[h] = field
                    added += 1
                elif vals[h] != field:
                    return added, p, r, idx, vals[h]
    return added, -1, -1, -1, -1


@njit(cache=True, nogil=True)
def dense_to_table(dense, size):
    """The open-addressing table (``size`` slots) of a dense table's known fields."""
    keys = np.full(size, -1, dtype=np.int32)
    vals = np.empty(size, dtype=np.int32)
    shift = _shift(keys)
    for idx in range(dense.shape[0]):
        if dense[idx] > 0:
            h = _slot(keys, idx, shift)
            keys[h] = idx
            vals[h] = dense[idx] - 1
    return keys, vals


@njit(cache=True, nogil=True)
def rehash(keys, vals, size):
    """The table (``keys``, ``vals``) moved to ``size`` slots (a power of two)."""
    new_keys = np.full(size, -1, dtype=np.int32)
    new_vals = np.empty(size, dtype=np.int32)
    shift = _shift(new_keys)
    for h in range(keys.shape[0]):
        if keys[h] != -1:
            g = _slot(new_keys, keys[h], shift)
            new_keys[g] = keys[h]
            new_vals[g] = vals[h]
    return new_keys, new_vals


@njit(cache=True, nogil=True)
def fields_of(keys, vals, ids):
    """The field of each index in ``ids`` (all in the table)."""
    out = np.empty(ids.shape[0], dtype=np.int32)
    shift = _shift(keys)
    for j in range(ids.shape[0]):
        out[j] = vals[_slot(keys, ids[j], shift)]
    return out


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


@njit(cache=True, nogil=True)
def count_parts(lo, hi, cuts, results, s_indices, counts, ranges):
    """n_i of a parsed block without joining it: add the entries of every part
    (in the scratch regions) to ``counts``, ids in ranges lo..hi-1 of ``ranges``
    equal ones of the table only (as counting._count_ids: threads owning
    different ranges never write the same counter)."""
    first = lo * counts.shape[0] // ranges
    span = np.uint32(hi * counts.shape[0] // ranges - first)
    mine = counts[first:]
    for p in range(cuts.shape[0] - 1):
        z0 = _region(cuts, p)[2]
        for k in range(z0, z0 + results[p, R_NZ]):
            u = np.uint32(s_indices[k] - first)
            if u < span:
                mine[u] += 1
