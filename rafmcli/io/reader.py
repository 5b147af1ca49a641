"""Read libSVM/libFM and libFFM text files into CSR arrays (the one place text becomes arrays).

The contract, in the manner of scikit-learn's svmlight reader: a path (``-`` is
standard input; ``.gz``, ``.bz2`` and ``.xz`` are decompressed by extension) in,
a :class:`Dataset` out. Every input is opened once and read once, front to
back, so pipes, process substitutions, FIFOs and character devices read like
files and nothing is spooled to disk. Parsing itself is the numba kernel in
:mod:`rafmcli.io.parse_kernel`, on every core; this module cuts the stream
into blocks of whole lines, has each block parsed in parts and joined to the
file's arrays (or, for `rafm stats`, only counted: :func:`count_file`), turns
error codes into ``FILE:LINE: what (token)`` and keeps the binary cache of
regular files.
"""

import bz2
import gzip
import lzma
import mmap
import os
import stat
import sys
import threading
import zlib
from dataclasses import dataclass, field

import numpy as np

from rafmcli import signals, threads
from rafmcli.errors import InputError, printable
from rafmcli.kernels import read_only

BLOCK_BYTES = 16 << 20
PART_BYTES = 1 << 20  # a block is parsed in parts of about this size, in parallel
THREADS = None  # threads that parse; None: every available core (the result is the same)
MAX_LINE_BYTES = 256 << 20
PROGRESS_MIN_BYTES = 8 << 20
TOKEN_CHARS = 60
BOM = b"\xef\xbb\xbf"
SMALL_COUNT = 1 << 16  # a block's entries below which one thread counts them

_MESSAGES = {
    1: "label is not a number",
    2: "label is not finite",
    3: "feature index is not a non-negative integer",
    4: "feature index is negative",
    5: "feature index exceeds 2147483647 (int32)",
    6: "missing value after ':'",
    7: "value is not a number",
    8: "value is not finite in float32",
    9: "values of a repeated feature index sum beyond float32",
    10: "missing feature index before ':'",
    13: "field exceeds 1048575",
}


_READ_ONLY = ("labels", "indptr", "indices", "values", "feature_ids", "counts", "feature_fields")


@dataclass
class Dataset:
    """A parsed file: CSR rows, labels and feature-occurrence counts.

    ``values`` is None when every stored value is 1. ``feature_ids`` are the
    distinct ids present (sorted) and ``counts[j]`` is n_i for
    ``i = feature_ids[j]``: the number of rows in which it is non-zero.
    ``rows_with_repeats`` counts the rows of the file read in which an index
    occurred more than once (each such index holds the sum of its values);
    a subset keeps its source's count. ``feature_fields[j]`` is the field of
    ``feature_ids[j]`` in a libFFM file (None for libSVM/libFM). ``columns`` holds the CSC arrays once
    built (:mod:`rafmcli.io.columns`); ``cached`` says the file has a
    binary-cache entry they can be added to.
    """

    path: str
    labels: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray | None
    feature_ids: np.ndarray
    counts: np.ndarray
    rows_with_repeats: int = 0
    feature_fields: np.ndarray | None = None
    columns: object = field(default=None, repr=False, compare=False)
    cached: bool = field(default=False, repr=False, compare=False)

    def __setattr__(self, name, value):
        """The arrays become read-only views when set, as those mapped from the cache are: the
        kernels then see one type whether a file was parsed, mapped or given (kernels.read_only)."""
        if name in _READ_ONLY and value is not None:
            value = read_only(value)[0]
        object.__setattr__(self, name, value)

    @property
    def n_rows(self):
        return self.labels.shape[0]

    @property
    def nnz(self):
        return self.indices.shape[0]

    def subset(self, rows):
        """A Dataset of the given rows (in that order), counts recomputed."""
        rows = np.asarray(rows)
        starts, stops = self.indptr[rows], self.indptr[rows + 1]
        lengths = stops - starts
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        take = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        indices = np.asarray(self.indices)[take]
        values = None if self.values is None else np.asarray(self.values)[take]
        max_index = int(indices.max()) if indices.shape[0] else -1
        ids, counts = feature_counts(indices, max_index)
        fields = None
        if self.feature_fields is not None:
            fields = np.asarray(self.feature_fields)[np.searchsorted(self.feature_ids, ids)]
        return Dataset(self.path, np.asarray(self.labels)[rows], indptr, indices, values, ids, counts,
                       self.rows_with_repeats, fields)

    def row_values(self):
        """The values array, materialising ones when it was omitted."""
        if self.values is None:
            return np.ones(self.nnz, dtype=np.float32)
        return self.values


def feature_counts(indices, max_index, n_threads=None):
    """Distinct ids in ``indices`` and how many rows hold each (one entry per id a row).

    ``max_index`` bounds the ids from above (-1 when there are none);
    ``n_threads`` count them (default: every available core).
    """
    if max_index < 0 or indices.shape[0] == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    if max_index < max(1 << 22, 2 * indices.shape[0]):
        from rafmcli.kernels.counting import feature_counts_table

        return feature_counts_table(indices, max_index + 1, n_threads)
    ids, counts = np.unique(indices, return_counts=True)
    return ids.astype(np.int32), counts.astype(np.int64)


class _LineTooLong(Exception):
    """A line grew past MAX_LINE_BYTES without a line end (say, /dev/zero)."""


@dataclass
class _Input:
    """An opened input: the decoded byte stream, the file under it and its fstat."""

    stream: object
    raw: object
    status: os.stat_result | None

    @property
    def regular(self):
        return self.status is not None and stat.S_ISREG(self.status.st_mode)


def _open(path, name):
    """Open ``path`` once for reading; decompression is chosen by ``path``'s extension."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            raise InputError(f"{printable(name)}: is a socket; rafm reads files, pipes and devices "
                             f"(pipe the socket's data into rafm as -)")
        raw = open(path, "rb")
    except OSError as exc:
        raise InputError(f"{printable(name)}: cannot open: {exc.strerror or exc}") from None
    status = os.fstat(raw.fileno())
    lower = path.lower()
    if stat.S_ISREG(status.st_mode) and status.st_size == 0:  # empty, whatever its suffix (gzip reads it so)
        stream = raw
    elif lower.endswith(".gz"):
        stream = gzip.GzipFile(fileobj=raw)
    elif lower.endswith(".bz2"):
        stream = bz2.BZ2File(raw)
    elif lower.endswith(".xz"):
        stream = lzma.LZMAFile(raw)
    else:
        stream = raw
    return _Input(stream, raw, status)


def _fill(stream, view):
    """Read into ``view`` until it is full or the stream ends; return bytes read."""
    got = 0
    while got < len(view):
        k = stream.readinto(view[got:])
        if not k:
            break
        got += k
    return got


class _Read:
    """One ``_fill`` of ``view``: now, or in a thread while the caller parses
    the previous block (for regular files, whose reads never block for long,
    so the thread can always be waited for)."""

    def __init__(self, stream, view, background):
        self.got = self.error = self.thread = None
        if background:
            self.thread = threading.Thread(target=self._run, args=(stream, view), daemon=True)
            self.thread.start()
        else:
            self.got = _fill(stream, view)

    def _run(self, stream, view):
        try:
            self.got = _fill(stream, view)
        except BaseException as exc:  # handed to the caller by result()
            self.error = exc

    def wait(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def result(self):
        """Bytes read; the read's exception, if it raised one."""
        self.wait()
        if self.error is not None:
            raise self.error
        return self.got


def _blocks(stream, on_block=None, ahead=False):
    """Yield (buf, n): blocks of whole lines, ending in LF or CR (never inside a CRLF).

    A UTF-8 byte-order mark is blanked; a line longer than the buffer grows
    it, up to MAX_LINE_BYTES. The last line gets an LF if it has no line end.
    With ``ahead``, two buffers take turns: the next block is read in a
    thread while the caller parses this one.
    """
    from rafmcli.io.parse_kernel import CR, LF, last_line_end

    bufs = [np.empty(BLOCK_BYTES + 1, dtype=np.uint8) for _ in range(2 if ahead else 1)]
    cur = tail = 0
    first = True
    pending = _Read(stream, memoryview(bufs[0])[:-1], False)
    try:
        while True:
            buf = bufs[cur]
            got = pending.result()
            n = tail + got
            if first and n >= 3:
                if bytes(buf[:3]) == BOM:
                    buf[:3] = 32
                first = False
            if got == 0:
                if n and buf[n - 1] != LF and buf[n - 1] != CR:
                    buf[n] = LF
                    n += 1
                if n:
                    yield buf, n
                return
            cut = last_line_end(buf, n)
            if cut == 0:
                if n >= MAX_LINE_BYTES:
                    raise _LineTooLong
                grown = np.empty(2 * buf.shape[0] - 1, dtype=np.uint8)
                grown[:n] = buf[:n]
                bufs[cur], tail = grown, n
                pending = _Read(stream, memoryview(grown)[tail:-1], False)
                continue
            first = False
            tail = n - cut
            if ahead:
                if bufs[1 - cur].shape[0] < buf.shape[0]:
                    bufs[1 - cur] = np.empty(buf.shape[0], dtype=np.uint8)
                following = bufs[1 - cur]
                following[:tail] = buf[cut:n]
                pending = _Read(stream, memoryview(following)[tail:-1], True)
                yield buf, cut
                cur = 1 - cur
            else:
                yield buf, cut
                buf[:tail] = buf[cut:n]
                pending = _Read(stream, memoryview(buf)[tail:-1], False)
            if on_block is not None:
                on_block()
    finally:
        pending.wait()  # never close the stream under a running read


def _repeated_sum_token(line):
    """The first index in ``line`` whose repeated values sum beyond float32."""
    sums = {}
    for tok in line.split(b"#")[0].split()[1:]:
        idx, _, val = tok.partition(b":")
        sums[idx] = sums.get(idx, 0.0) + float(np.float32(float(val) if val else 1.0))
        if not abs(sums[idx]) <= float(np.finfo(np.float32).max):
            return idx
    return line


def _ffm_what(code, token):
    """What is wrong with a libFFM-looking token (two ':' or more), where the
    kernel's code names the first part an index; None to keep the code's message."""
    from rafmcli.io import parse_kernel as K

    field, _, rest = token.partition(b":")
    if code == K.ERR_INDEX_MISSING:
        return "missing field before ':'"
    if code == K.ERR_INDEX_NEG and field.startswith(b"-"):
        return "field is negative"
    if code == K.ERR_INDEX and not field.isdigit():
        return "field is not a non-negative integer"
    if code == K.ERR_INDEX_RANGE and field.isdigit() and int(field) > K.INT32_MAX:
        return "field exceeds 1048575"
    if code == K.ERR_VALUE and not rest.partition(b":")[0]:
        return "missing feature index between ':'s"
    return None


def _tokens(line):
    return line.split(b"#")[0].split()[1:]


def _field_token(line, idx, field):
    """The first token of ``line`` that puts index ``idx`` in a field other than
    ``field`` (with ``field`` None: other than the index's first field in the line)."""
    for tok in _tokens(line):
        parts = tok.split(b":")
        if (len(parts) == 3 and parts[1].isdigit() and int(parts[1]) == idx
                and np.float32(float(parts[2])) != 0):
            if field is None:
                field = int(parts[0])
            elif int(parts[0]) != field:
                return tok
    return line


def _row_conflict(line):
    """(index, first field, token) of the first index in ``line`` given two fields."""
    first = {}
    for tok in _tokens(line):
        parts = tok.split(b":")
        if (len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit()
                and np.float32(float(parts[2])) != 0):  # a zero is dropped, field and all
            f, i = int(parts[0]), int(parts[1])
            if first.setdefault(i, f) != f:
                return i, first[i], tok
    return None, None, line


def _error(name, code, line_no, span):
    """The one-line message for a kernel error; ``span`` is the token's bytes."""
    from rafmcli.io import parse_kernel as K

    what = _MESSAGES.get(code)
    token = span.strip()
    if code == K.ERR_SUM_INF:
        token = _repeated_sum_token(span)
    elif code == K.ERR_FIELD_CONFLICT:
        idx, field, token = _row_conflict(span)
        what = (f"feature {idx} is in field {field} and in field {int(token.split(b':')[0])}; "
                f"an index belongs to one field")
    elif code == K.ERR_MIXED:
        what = ("libFFM token (field:index:value) in a libSVM/libFM file" if token.count(b":") >= 2 else
                "libSVM/libFM token in a libFFM file (whose tokens are field:index:value)")
    elif code == K.ERR_INDEX and token.lower().startswith(b"qid:"):
        what = "qid tokens are not supported"
    elif token.count(b":") >= 2:
        what = _ffm_what(code, token) or what
    return InputError(f"{printable(name)}:{line_no}: {what} ({printable(token, TOKEN_CHARS)})")


class _Arrays:
    """The file's CSR arrays, filled block by block.

    After each block is parsed, ``reserve`` makes room for its rows and
    entries. Capacity grows geometrically by copying, towards ``expected``
    times what the first blocks needed when the input's size is known
    (``expected`` = total bytes / bytes so far); unused capacity is never
    written, so it costs address space, not memory.
    """

    def __init__(self):
        self.labels = np.empty(0, dtype=np.float64)
        self.indptr = np.zeros(1, dtype=np.int64)
        self.indices = np.empty(0, dtype=np.int32)
        self.values = None
        self.rows = self.nz = 0

    @staticmethod
    def _grown(array, need, expected, keep, exact=False):
        """``array`` with room for ``need`` items, its first ``keep`` kept."""
        if array.shape[0] >= need:
            return array
        size = need if exact else max(need, int(need * expected * 1.05) + 64,
                                      int(array.shape[0] * (1.25 if expected > 1 else 2)))
        grown = np.empty(size, dtype=array.dtype)
        grown[:keep] = array[:keep]
        return grown

    def reserve(self, rows, entries, with_values, expected=1.0):
        """Room for ``rows`` more rows and ``entries`` more entries (and values if asked)."""
        rows, nz = self.rows + rows, self.nz + entries
        self.labels = self._grown(self.labels, rows, expected, self.rows)
        self.indptr = self._grown(self.indptr, rows + 1, expected, self.rows + 1)
        self.indices = self._grown(self.indices, nz, expected, self.nz)
        if with_values and self.values is None:
            self.values = np.empty(self.indices.shape[0], dtype=np.float32)
            self.values[:self.nz] = 1.0
        elif self.values is not None:
            self.values = self._grown(self.values, self.indices.shape[0], 1.0, self.nz, exact=True)

    def add(self, cuts, results, space, expected):
        """Join a parsed block (its parts in the scratch arrays ``space``) to the arrays."""
        from rafmcli.io import parse_kernel as K

        parts = cuts.shape[0] - 1
        rows, nz = int(results[:, K.R_ROWS].sum()), int(results[:, K.R_NZ].sum())
        self.reserve(rows, nz, not results[:, K.R_ONES].all(), expected)
        values = self.values if self.values is not None else np.empty(0, dtype=np.float32)
        row_at = self.rows + np.concatenate([[0], np.cumsum(results[:, K.R_ROWS])])
        nz_at = self.nz + np.concatenate([[0], np.cumsum(results[:, K.R_NZ])])
        threads.spread(K.join_parts, parts, cuts, results, row_at, nz_at, *space[:4], self.labels, self.indptr,
                       self.indices, values, threads=THREADS)
        self.rows += rows
        self.nz += nz

    def final(self):
        """(labels, indptr, indices, values or None), exactly as long as the data."""
        values = None if self.values is None else self.values[:self.nz]
        return self.labels[:self.rows], self.indptr[:self.rows + 1], self.indices[:self.nz], values

    def dataset(self, name, max_index, repeats, fields):
        labels, indptr, indices, values = self.final()
        if values is not None and np.all(values == 1):
            values = None
        ids, counts = feature_counts(indices, max_index, THREADS)
        return Dataset(name, labels, indptr, indices, values, ids, counts, repeats, fields.of(ids))


class Tally:
    """What `rafm stats` reports of a file, counted while it is parsed, without
    its CSR arrays: a Dataset's ``path``, ``labels``, ``rows_with_repeats``,
    ``feature_ids``, ``counts`` and ``feature_fields`` (the last three made from the
    counts when first asked for), with ``n_rows`` and ``nnz``; ``table`` holds n_i
    by id (None when the ids outgrew a table)."""

    def __init__(self, path, labels, n_rows, nnz, table, pairs, rows_with_repeats, fields):
        self.path, self.labels, self.n_rows, self.nnz = path, labels, n_rows, nnz
        self.table, self._pairs, self.rows_with_repeats, self._fields = table, pairs, rows_with_repeats, fields

    def _listed(self):
        if self._pairs is None:
            from rafmcli.kernels.counting import nonzero_ids

            self._pairs = nonzero_ids(self.table, n_threads=THREADS)
        return self._pairs

    @property
    def feature_ids(self):
        return self._listed()[0]

    @property
    def counts(self):
        return self._listed()[1]

    @property
    def feature_fields(self):
        return self._fields.of(self.feature_ids) if self._fields.format == 2 else None


class _Tally:
    """A file's labels and n_i, block by block (:func:`count_file`).

    n_i are counted into a table over the ids (kernels on every core, as
    :func:`feature_counts` does for whole arrays) while the largest id stays
    below what that rule allows for the file's expected entries; past it the
    table's counts become entries again (each id as often as it was counted)
    and the ids of later blocks are kept, to be counted by one np.unique when
    asked for, as read_dataset counts sparse ids (merging each block into sorted
    pairs re-sorted all the ids found so far: quadratic in the blocks).
    """

    def __init__(self):
        self.labels = np.empty(0, dtype=np.float64)
        self.rows = self.nz = 0
        self.table = np.zeros(0, dtype=np.int32)
        self.entries = None  # the ids once they outgrew a table (the first ``kept``)
        self.kept = 0
        self.counted = None

    @property
    def pairs(self):
        """Sorted distinct (ids, counts) once the ids outgrew a table, else None."""
        if self.entries is not None and self.counted is None:
            ids, counts = np.unique(self.entries[:self.kept], return_counts=True)
            self.counted, self.entries = (ids.astype(np.int32), counts.astype(np.int64)), np.zeros(0, np.int32)
        return self.counted

    def add(self, cuts, results, space, expected):
        from rafmcli.io import parse_kernel as K

        rows, nz = int(results[:, K.R_ROWS].sum()), int(results[:, K.R_NZ].sum())
        self.labels = _Arrays._grown(self.labels, self.rows + rows, expected, self.rows)
        at = self.rows
        for p in range(cuts.shape[0] - 1):
            first, got = int(cuts[p]) // 2 + p, int(results[p, K.R_ROWS])  # parse_kernel._region
            self.labels[at:at + got] = space[0][first:first + got]
            at += got
        self.rows, self.nz = at, self.nz + nz
        top = int(results[:, K.R_MAX_INDEX].max())
        if top < 0:
            return
        if self.entries is None and top >= self.table.shape[0]:
            if top < max(1 << 22, 2 * int(self.nz * expected)):
                grown = np.zeros(max(top + 1, min(2 * self.table.shape[0], 1 << 31)), dtype=np.int32)
                grown[:self.table.shape[0]] = self.table
                self.table = grown
            else:
                ids = np.flatnonzero(self.table)
                self.entries = np.repeat(ids.astype(np.int32), self.table[ids])
                self.kept, self.table = self.entries.shape[0], self.table[:0]
        if self.entries is None:
            ranges = 1 if nz < SMALL_COUNT else THREADS or threads.available_cores()
            threads.spread(K.count_parts, ranges, cuts, results, space[2], self.table, ranges, threads=THREADS)
            return
        self.entries = _Arrays._grown(self.entries, self.kept + nz, expected, self.kept)
        for p in range(cuts.shape[0] - 1):
            got = int(results[p, K.R_NZ])
            self.entries[self.kept:self.kept + got] = space[2][int(cuts[p]) // 2 + p:][:got]
            self.kept += got

    def dataset(self, name, max_index, repeats, fields):
        pairs = self.pairs
        table = None if pairs is not None else self.table[:max_index + 1]
        return Tally(name, self.labels[:self.rows], self.rows, self.nz, table, pairs, repeats, fields)


class _Scratch:
    """parse_parts' scratch arrays, kept from block to block (see parse_kernel)."""

    def __init__(self):
        self.arrays = None

    def get(self, n, parts):
        from rafmcli.io.parse_kernel import scratch_sizes

        rows, ptr, entries = scratch_sizes(n, parts)
        if self.arrays is None or self.arrays[1].shape[0] < ptr or self.arrays[2].shape[0] < entries:
            self.arrays = None  # the old ones freed first
            self.arrays = (small_pages(rows, np.float64), small_pages(ptr, np.int64), small_pages(entries, np.int32),
                           small_pages(entries, np.float32), small_pages(entries, np.int32))
        return self.arrays


def small_pages(n, dtype):
    """An uninitialised array of ``n`` ``dtype`` in memory backed by small (4 KiB) pages only.

    parse_parts writes each part's rows at the start of a worst-case region (a
    sixth of it or less in typical files); with transparent huge pages each
    region's first write would fault in, and zero, a whole 2 MiB page: for a
    16 MiB block, about 160 MB of memory touched instead of about 30.
    """
    buf = mmap.mmap(-1, max(1, n * np.dtype(dtype).itemsize))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dtype, count=n)


class _Fields:
    """The file's format so far (parse_kernel.FMT_*) and, for libFFM, the field
    of every index seen: an array indexed by the index (zeroed pages, so only
    the pages of indices seen cost memory) while indices stay below
    parse_kernel.DENSE_FIELDS, else an open-addressing table kept at most half full."""

    def __init__(self):
        self.format = 0
        self.dense = np.zeros(0, dtype=np.int32)
        self.keys = self.vals = None
        self.count = 0

    def check(self, cuts, results, last, space):
        """Enter parts 0..last of a block (see parse_kernel.check_fields); returns
        (part, row in the part, index, its first field), part -1 if all agree."""
        from rafmcli.io import parse_kernel as K

        top = int(results[:last + 1, K.R_MAX_INDEX].max())
        if self.keys is None and top < K.DENSE_FIELDS:
            if top >= self.dense.shape[0]:
                grown = np.zeros(min(max(top + 1, 2 * self.dense.shape[0]), K.DENSE_FIELDS), dtype=np.int32)
                grown[:self.dense.shape[0]] = self.dense
                self.dense = grown
        else:
            need = self.count + int(results[:last + 1, K.R_NZ].sum())
            size = 1 << max(10, (2 * need - 1).bit_length())
            if self.keys is None:
                self.keys, self.vals = K.dense_to_table(self.dense, size)
                self.dense = self.dense[:0]
            elif size > self.keys.shape[0]:
                self.keys, self.vals = K.rehash(self.keys, self.vals, size)
        keys = self.keys if self.keys is not None else np.full(1, -1, dtype=np.int32)
        vals = self.vals if self.vals is not None else np.zeros(1, dtype=np.int32)
        added, part, row, idx, field = K.check_fields(cuts, results, last, space[1], space[2], space[4],
                                                      self.dense, keys, vals)
        self.count += added
        return part, row, idx, field

    def of(self, feature_ids):
        """Fields of ``feature_ids`` (libFFM), or None."""
        if self.format != 2:
            return None
        if self.keys is None:
            return self.dense[feature_ids] - 1
        from rafmcli.io.parse_kernel import fields_of

        return fields_of(self.keys, self.vals, feature_ids)


def _row_line(part, row):
    """(line within ``part``, 1-based; the line's bytes) of data row ``row`` of
    ``part`` (whole lines), by parse_block's rules: LF, CRLF and CR end lines;
    blank and comment lines hold no row."""
    import re

    seen = -1
    for line_no, line in enumerate(re.split(rb"\r\n|\r|\n", part), 1):
        head = line.lstrip(b" \t\x0b\x0c")
        if head and head[:1] != b"#":
            seen += 1
            if seen == row:
                return line_no, line
    raise AssertionError("no such row")


def _parse_block(sink, scratch, fields, buf, n, line_no, name, expected):
    """Parse one block in parts on every core and hand it to ``sink`` (an
    _Arrays joins it, a _Tally counts it).

    ``fields`` (a _Fields) carries the format and libFFM fields from block to
    block. Returns (lines, max_index, rows with repeats).
    """
    from rafmcli.io import parse_kernel as K

    cuts = K.split_lines(buf, n, PART_BYTES)
    parts = cuts.shape[0] - 1
    space = scratch.get(n, parts)
    results = np.zeros((parts, K.N_RESULTS), dtype=np.int64)
    threads.spread(K.parse_parts, parts, buf, cuts, *space, fields.format, results, threads=THREADS)
    stop = None  # the first part that failed, in file order
    for p in range(parts):
        form = int(results[p, K.R_FORMAT])
        if form and fields.format and form != fields.format:  # parsed before the format was known
            K.parse_parts(p, p + 1, buf, cuts, *space, fields.format, results)
            stop = p
            break
        fields.format = form or fields.format
        if results[p, K.R_CODE]:
            stop = p
            break
    if fields.format == K.FMT_FFM:
        part, row, idx, first = fields.check(cuts, results, parts - 1 if stop is None else stop, space)
        if part >= 0:
            within, line = _row_line(bytes(buf[cuts[part]:cuts[part + 1]]), row)
            token = _field_token(line, idx, first)
            at = line_no + int(results[:part, K.R_LINES].sum()) + within
            raise InputError(f"{printable(name)}:{at}: feature {idx} is in field {first} before this line; "
                             f"an index belongs to one field ({printable(token.strip(), TOKEN_CHARS)})")
    if stop is not None:
        code, a, b = results[stop, K.R_CODE], results[stop, K.R_ERR_START], results[stop, K.R_ERR_END]
        line = line_no + int(results[:stop, K.R_LINES].sum()) + int(results[stop, K.R_LINES])
        if code == K.ERR_FULL:
            raise AssertionError(f"parse_block overran its part (line {line})")
        raise _error(name, code, line, bytes(buf[a:b]))
    sink.add(cuts, results, space, expected)
    return (int(results[:, K.R_LINES].sum()), int(results[:, K.R_MAX_INDEX].max()),
            int(results[:, K.R_REPEATS].sum()))


def _on_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _position(source):
    """Bytes of the file under a regular input read so far (its descriptor's
    offset: unlike ``tell()`` it does not wait for a read running in a thread)."""
    return os.lseek(source.raw.fileno(), 0, os.SEEK_CUR)


def _parse(source, name, progress=False, desc="reading", sink=None):
    """Parse an opened input in one pass into a Dataset (or, with a _Tally as
    ``sink``, a Tally); a regular file that changes meanwhile is an error."""
    bar = on_block = None
    if progress and source.regular and source.status.st_size >= PROGRESS_MIN_BYTES and _on_terminal(sys.stderr):
        from tqdm import tqdm  # its bar (disable=None) shows on a terminal only: not imported for nothing

        bar = tqdm(total=source.status.st_size, unit="B", unit_scale=True, leave=False,
                   desc=f"{desc} {os.path.basename(name)}", disable=None)

        def on_block():
            bar.update(_position(source) - bar.n)
    sink, scratch, fields = sink or _Arrays(), _Scratch(), _Fields()
    line_no = repeats = 0
    max_index = -1
    try:
        with source.raw, source.stream:
            try:
                ahead = source.regular and source.status.st_size > BLOCK_BYTES
                for buf, n in _blocks(source.stream, on_block, ahead):
                    signals.raise_lost()
                    expected = 1.0
                    if source.regular:  # total bytes / bytes so far, compressed or not
                        expected = max(source.status.st_size / max(_position(source), 1), 1.0)
                    lines, mx, rep = _parse_block(sink, scratch, fields, buf, n, line_no, name, expected)
                    line_no += lines
                    max_index = max(max_index, mx)
                    repeats += rep
                scratch.arrays = None  # freed before counting: peak memory stays under twice the arrays
            except _LineTooLong:
                raise InputError(f"{printable(name)}:{line_no + 1}: line longer than "
                                 f"{MAX_LINE_BYTES:,} bytes") from None
            if source.regular:
                now = os.fstat(source.raw.fileno())
                before = source.status
                if (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                    raise InputError(f"{printable(name)}: changed while reading")
    except (EOFError, zlib.error, lzma.LZMAError) as exc:
        raise InputError(f"{printable(name)}: cannot decompress: {exc}") from None
    except OSError as exc:
        if source.stream is not source.raw and (isinstance(exc, gzip.BadGzipFile) or exc.errno is None):
            raise InputError(f"{printable(name)}: cannot decompress: {exc}") from None
        raise InputError(f"{printable(name)}: cannot read: {exc.strerror or exc}") from None
    finally:
        if bar is not None:
            bar.close()
    return sink.dataset(name, max_index, repeats, fields)


def parse_file(path, progress=False, name=None):
    """Parse ``path`` (any readable file, pipe or device), without the cache.

    ``name`` is how errors and the Dataset call the file (default: ``path``).
    """
    name = path if name is None else name
    return _parse(_open(path, name), name, progress)


def parse_stdin(progress=False):
    """Parse standard input, as ``<stdin>``, in one pass."""
    return _parse(_stdin(), "<stdin>", progress)


def _stdin():
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None:
        raise InputError("<stdin>: cannot read: standard input is closed")
    return _Input(stdin, stdin, None)


def read_dataset(path, use_cache=True, cache_dir=None, progress=False):
    """Read a libSVM/libFM file, through the binary cache unless told not to.

    ``-`` reads standard input. Only regular files are cached; pipes, FIFOs
    and devices are read once, like standard input.
    """
    if path == "-":
        return parse_stdin(progress)
    source = _open(path, path)
    if not (use_cache and source.regular):
        return _parse(source, path, progress)
    return _through_cache(source, path, cache_dir, progress)


def _through_cache(source, path, cache_dir, progress):
    """The Dataset of the opened regular file ``source`` from its cache entry, or
    parsed and stored there."""
    from rafmcli.io import cache

    ident = cache.identity(path, source.status)
    try:
        data = cache.load(path, ident, cache_dir)
    except BaseException:
        source.raw.close()
        raise
    if data is None:
        data = _parse(source, path, progress)
        cache.store(data, ident, cache_dir)
    else:
        source.raw.close()
    data.cached = True
    return data


def count_file(path, use_cache=True, cache_dir=None, progress=False):
    """What `rafm stats` needs of a file: its Dataset through the cache, as
    read_dataset reads it, when it is a regular file and the cache is on; else
    a Tally counted while the file is parsed, without building its CSR arrays
    (a third of the memory and of the fresh pages; the same errors, line
    numbers and counts)."""
    if path == "-":
        return _parse(_stdin(), "<stdin>", progress, sink=_Tally())
    source = _open(path, path)
    if use_cache and source.regular:
        return _through_cache(source, path, cache_dir, progress)
    return _parse(source, path, progress, sink=_Tally())


def data_line_number(path, row):
    """The line number of data row ``row`` (0-based) of a regular file, for messages
    (None for pipes and devices, which cannot be read twice).

    Follows the parser's rules: LF, CRLF and lone CR end lines; blank lines and
    ``#`` comment lines hold no row.
    """
    import io

    source = _open(path, path)
    if not source.regular:
        source.raw.close()
        return None
    with source.raw, io.TextIOWrapper(source.stream, encoding="latin-1", newline=None) as text:
        seen = -1
        for line_no, line in enumerate(text, 1):
            if line_no == 1 and line.startswith(BOM.decode("latin-1")):
                line = line[len(BOM):]
            if line.split("#")[0].strip():
                seen += 1
                if seen == row:
                    return line_no
    return None


def require_positive_labels(name, data):
    """Implicit data: every row is a positive, so every label must be > 0 (as --task c reads it)."""
    bad = np.flatnonzero(~(np.asarray(data.labels) > 0))
    if bad.shape[0]:
        line = data_line_number(name, int(bad[0])) if name != "-" else None
        where = f"{printable(name)}:{line}" if line else f"{printable(name)}: row {bad[0] + 1}"
        raise InputError(f"{where}: implicit data holds positives only; label must be > 0 "
                         f"({data.labels[bad[0]]:g})")
