"""Read libSVM/libFM text files into CSR arrays (the one place text becomes arrays).

The contract, in the manner of scikit-learn's svmlight reader: a path (``-`` is
standard input; ``.gz``, ``.bz2`` and ``.xz`` are decompressed by extension) in,
a :class:`Dataset` out. Parsing itself is the numba kernel in
:mod:`rafmcli.parse_kernel`; this module feeds it blocks of bytes, turns its
error codes into ``FILE:LINE: what (token)`` and keeps the binary cache.
"""

import bz2
import gzip
import lzma
import os
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass

import numpy as np

from rafmcli.errors import InputError

BLOCK_BYTES = 16 << 20
PROGRESS_MIN_BYTES = 8 << 20
BOM = b"\xef\xbb\xbf"

_MESSAGES = {
    1: "label is not a number",
    2: "label is not finite",
    3: "feature index is not a non-negative integer",
    4: "feature index is negative",
    5: "feature index exceeds 2147483647 (int32)",
    6: "missing value after ':'",
    7: "value is not a number",
    8: "value is not finite in float32",
    9: "duplicate feature index in one row",
    10: "missing feature index before ':'",
}
_DUPLICATE = 9


@dataclass
class Dataset:
    """A parsed file: CSR rows, labels and feature-occurrence counts.

    ``values`` is None when every stored value is 1. ``feature_ids`` are the
    distinct ids present (sorted) and ``counts[j]`` is n_i for
    ``i = feature_ids[j]``: the number of rows in which it is non-zero.
    """

    path: str
    labels: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray | None
    feature_ids: np.ndarray
    counts: np.ndarray

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
        return Dataset(self.path, np.asarray(self.labels)[rows], indptr, indices, values, ids, counts)

    def row_values(self):
        """The values array, materialising ones when it was omitted."""
        if self.values is None:
            return np.ones(self.nnz, dtype=np.float32)
        return self.values


def feature_counts(indices, max_index):
    """Distinct ids in ``indices`` and how many rows hold each (rows have no duplicates)."""
    if max_index < 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    if max_index < max(1 << 22, 2 * indices.shape[0]):
        from rafmcli.io.parse_kernel import occurrences

        counts = occurrences(indices, max_index + 1)
        ids = np.flatnonzero(counts)
        return ids.astype(np.int32), counts[ids].astype(np.int64)
    ids, counts = np.unique(indices, return_counts=True)
    return ids.astype(np.int32), counts.astype(np.int64)


def _open_raw(path):
    """Open ``path`` for binary reading; return (decoded stream, raw file)."""
    raw = open(path, "rb")
    lower = path.lower()
    if lower.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw), raw
    if lower.endswith(".bz2"):
        return bz2.BZ2File(raw), raw
    if lower.endswith(".xz"):
        return lzma.LZMAFile(raw), raw
    return raw, raw


def _fill(stream, view):
    """Read into ``view`` until it is full or the stream ends; return bytes read."""
    got = 0
    while got < len(view):
        k = stream.readinto(view[got:])
        if not k:
            break
        got += k
    return got


def _error(name, code, line_no, line):
    """The one-line message for a kernel error; ``line`` is the token, or the row for duplicates."""
    text = line.decode("utf-8", errors="replace")
    token = text.strip()
    what = _MESSAGES[code]
    if code == _DUPLICATE:
        seen = set()
        for tok in text.split("#")[0].split()[1:]:
            key = tok.split(":")[0]
            if key in seen:
                token = tok
                break
            seen.add(key)
    elif code == 3 and token.lower().startswith("qid:"):
        what = "qid tokens are not supported"
    if len(token) > 60:
        token = token[:57] + "..."
    return InputError(f"{name}:{line_no}: {what} ({token})")

def _blocks(path, name, progress, desc):
    """Yield (buf, n): blocks of whole lines, the last one ending in a newline.

    A UTF-8 byte-order mark is blanked; a line longer than the buffer grows it.
    """
    from rafmcli.io.parse_kernel import last_newline

    try:
        stream, raw = _open_raw(path)
    except OSError as exc:
        raise InputError(f"{name}: cannot open: {exc.strerror or exc}") from None
    size = os.fstat(raw.fileno()).st_size
    bar = None
    if progress and size >= PROGRESS_MIN_BYTES:
        from tqdm import tqdm

        bar = tqdm(total=size, unit="B", unit_scale=True, leave=False,
                   desc=f"{desc} {os.path.basename(name)}", disable=None)
    buf = np.empty(BLOCK_BYTES + 1, dtype=np.uint8)
    tail = 0
    first = True
    try:
        with raw, stream:
            while True:
                got = _fill(stream, memoryview(buf)[tail:-1])
                n = tail + got
                if first and bytes(buf[:3]) == BOM:
                    buf[:3] = 32
                first = False
                if got == 0:
                    if n and buf[n - 1] != 10:
                        buf[n] = 10
                        n += 1
                    if n:
                        yield buf, n
                    break
                cut = last_newline(buf, n)
                if cut == 0:
                    grown = np.empty(2 * buf.shape[0] - 1, dtype=np.uint8)
                    grown[:n] = buf[:n]
                    buf, tail = grown, n
                    continue
                yield buf, cut
                tail = n - cut
                buf[:tail] = buf[cut:n]
                if bar is not None:
                    bar.update(raw.tell() - bar.n)
    except (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as exc:
        raise InputError(f"{name}: cannot decompress: {exc}") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc}") from None
    finally:
        if bar is not None:
            bar.close()


def parse_file(path, progress=False, name=None):
    """Parse ``path``: a counting pass bounds the arrays, a second pass fills them.

    ``name`` is how errors and the Dataset call the file (default: ``path``).
    """
    from rafmcli.io.parse_kernel import count_block, parse_block

    name = path if name is None else name
    lines = tokens = 0
    ones = True
    for buf, n in _blocks(path, name, progress, "counting"):
        li, t, o = count_block(buf, n)
        lines, tokens, ones = lines + li, tokens + t, ones and o
    labels = np.empty(lines, dtype=np.float64)
    indptr = np.zeros(lines + 1, dtype=np.int64)
    indices = np.empty(tokens, dtype=np.int32)
    values = np.empty(0 if ones else tokens, dtype=np.float32)
    line_no = rows = nz = 0
    max_index = -1
    for buf, n in _blocks(path, name, progress, "parsing"):
        code, line_no, rows, nz, mx, a, b = parse_block(
            buf, n, line_no, rows, nz, labels, indptr, indices, values)
        if code:
            raise _error(name, code, line_no, bytes(buf[a:b]))
        max_index = max(max_index, mx)
    indices = indices[:nz]
    values = values[:nz] if values.shape[0] and not np.all(values[:nz] == 1) else None
    ids, counts = feature_counts(indices, max_index)
    return Dataset(name, labels[:rows], indptr[:rows + 1], indices, values, ids, counts)


def _spool_stdin():
    """Copy standard input to a temporary file so it can be read twice."""
    spool = tempfile.NamedTemporaryFile(prefix="rafm-stdin-", delete=False)
    with spool:
        shutil.copyfileobj(sys.stdin.buffer, spool, BLOCK_BYTES)
    return spool.name


def read_dataset(path, use_cache=True, cache_dir=None, progress=False):
    """Read a libSVM/libFM file, through the binary cache unless told not to.

    ``-`` reads standard input (never cached).
    """
    if path == "-":
        spooled = _spool_stdin()
        try:
            return parse_file(spooled, progress, name="<stdin>")
        finally:
            os.unlink(spooled)
    if not use_cache:
        return parse_file(path, progress)
    from rafmcli.io import cache

    data = cache.load(path, cache_dir)
    if data is None:
        try:
            ident = cache.identity(path)
        except OSError as exc:
            raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None
        data = parse_file(path, progress)
        cache.store(data, ident, cache_dir)
    return data
