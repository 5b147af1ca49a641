"""Binary cache of parsed files: ``.npy`` arrays re-opened with memory mapping.

One entry per input path, in ``$RAFM_CACHE_DIR`` (default
``$XDG_CACHE_HOME/rafm`` or ``~/.cache/rafm``), never beside the input. An
entry records the file's absolute path, inode, size, modification and change
times and a CRC32 of every array; it is used only when all of them match.
An entry of another file version is stale and silently rebuilt; an entry that
cannot be read or does not check (damaged, truncated, hand-edited) is rebuilt
with one warning. Entries are written to a temporary directory and renamed
into place, so a crash leaves no half-written entry.
"""

import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from rafmcli.errors import printable
from rafmcli.io import checksum
from rafmcli.io.columns import Columns
from rafmcli.io.reader import Dataset

FORMAT = 3  # 2: identity has inode and ctime; meta.json holds rows_with_repeats; 3: libFFM fields
# Every array an entry may hold, with its dtype; all but ``values``, ``feature_fields`` (libFFM
# files) and the columns are required.
_DTYPES = {"labels": "float64", "indptr": "int64", "indices": "int32", "values": "float32",
           "feature_ids": "int32", "counts": "int64", "feature_fields": "int32"}
# The transposed data (io/columns.py), added to an entry when ALS or MCMC first read the file
_COLUMN_DTYPES = {"col_indptr": "int64", "col_rows": "int32", "col_values": "float32"}
_OPTIONAL = {"values", "feature_fields"} | set(_COLUMN_DTYPES)


class _Damaged(Exception):
    """An entry that exists but cannot be used."""


def default_dir():
    """Where entries live: $RAFM_CACHE_DIR, else the XDG cache directory."""
    if os.environ.get("RAFM_CACHE_DIR"):
        return os.environ["RAFM_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rafm")


def identity(path, status=None):
    """What must match for an entry to be used: format, absolute path, inode, size, times.

    ``status`` is the file's (f)stat; by default ``os.stat(path)``.
    """
    st = os.stat(path) if status is None else status
    return {"format": FORMAT, "path": os.path.abspath(path), "inode": st.st_ino,
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _entry_dir(path, cache_dir):
    key = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()
    return os.path.join(cache_dir or default_dir(), key[:32])


def _crc(array):
    return checksum.crc32(np.ascontiguousarray(array).view(np.uint8))


def _check(condition, what):
    if not condition:
        raise _Damaged(what)


def _read_entry(entry, path, ident):
    """The entry's Dataset; None if it belongs to another version of the file."""
    with open(os.path.join(entry, "meta.json"), encoding="utf-8") as fh:
        meta = json.load(fh)
    _check(isinstance(meta, dict) and isinstance(meta.get("identity"), dict), "meta.json is not an entry")
    if meta["identity"] != ident:
        return None
    specs = meta.get("arrays")
    dtypes = {**_DTYPES, **_COLUMN_DTYPES}
    _check(isinstance(specs, dict) and set(specs) <= set(dtypes)
           and set(dtypes) - _OPTIONAL <= set(specs), "meta.json lists other arrays")
    arrays = {}
    for name, spec in specs.items():
        _check(isinstance(spec, dict), f"{name}: no spec")
        arr = np.load(os.path.join(entry, name + ".npy"), mmap_mode="r", allow_pickle=False)
        _check(str(arr.dtype) == dtypes[name] == spec.get("dtype") and arr.ndim == 1
               and list(arr.shape) == spec.get("shape"), f"{name}: dtype or shape")
        _check(_crc(arr) == spec.get("crc32"), f"{name}: checksum")
        arrays[name] = arr
    repeats = meta.get("rows_with_repeats")
    _check(isinstance(repeats, int) and repeats >= 0, "rows_with_repeats")
    data = Dataset(path, arrays["labels"], arrays["indptr"], arrays["indices"], arrays.get("values"),
                   arrays["feature_ids"], arrays["counts"], repeats, arrays.get("feature_fields"))
    _check(data.indptr.shape[0] == data.n_rows + 1 and data.indptr[0] == 0 and data.indptr[-1] == data.nnz
           and (data.values is None or data.values.shape[0] == data.nnz)
           and data.feature_ids.shape == data.counts.shape
           and (data.feature_fields is None or data.feature_fields.shape == data.feature_ids.shape),
           "array sizes disagree")
    if "col_indptr" in arrays:
        columns = Columns(arrays["col_indptr"], arrays.get("col_rows"),
                          arrays.get("col_values", np.zeros(0, np.float32)))
        _check(columns.rows is not None and columns.indptr.shape[0] == data.feature_ids.shape[0] + 1
               and columns.indptr[-1] == data.nnz and columns.rows.shape[0] == data.nnz
               and columns.values.shape[0] in (0, data.nnz), "column arrays disagree")
        data.columns = columns
    return data


def load(path, ident, cache_dir=None):
    """The cached Dataset for ``path`` as of ``ident``, or None if absent, stale or damaged.

    A damaged entry (anything unreadable or inconsistent) warns once on stderr.
    """
    entry = _entry_dir(path, cache_dir)
    if not os.path.lexists(entry):
        return None
    try:
        return _read_entry(entry, path, ident)
    except Exception as exc:  # whatever fails to read or check, the entry is rebuilt
        what = exc.args[0] if isinstance(exc, _Damaged) else f"{type(exc).__name__}: {exc}"
        print(f"rafm: warning: damaged cache entry for {printable(path)} ({printable(str(what), 120)}); "
              f"rebuilding it", file=sys.stderr)
        return None


def store(data, ident, cache_dir=None):
    """Write ``data`` as the entry of ``data.path``, taken when it had ``ident``.

    ``ident`` is read when the file is opened, so a file changed meanwhile is
    not trusted next time. Warns and goes on if the cache cannot be written.
    """
    entry = _entry_dir(data.path, cache_dir)
    parent = os.path.dirname(entry)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
        try:
            specs = {}
            for name in _DTYPES:
                arr = getattr(data, name)
                if arr is None:
                    continue
                np.save(os.path.join(tmp, name + ".npy"), arr, allow_pickle=False)
                specs[name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "crc32": _crc(arr)}
            meta = {"identity": ident, "arrays": specs, "rows_with_repeats": int(data.rows_with_repeats)}
            with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as fh:
                json.dump(meta, fh, indent=1)
            if os.path.isdir(entry) and not os.path.islink(entry):
                shutil.rmtree(entry, ignore_errors=True)
            elif os.path.lexists(entry):
                os.unlink(entry)
            try:
                os.replace(tmp, entry)
            except OSError as exc:  # another rafm stored this entry since the removal: theirs stands
                stored = os.path.isfile(os.path.join(entry, "meta.json"))  # (not what our removal left)
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not stored:
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        print(f"rafm: warning: cannot write cache in {printable(parent)}: {exc}", file=sys.stderr)


def add_arrays(path, arrays, cache_dir=None):
    """Add ``arrays`` ({name: array}, names of _COLUMN_DTYPES) to the current entry of ``path``.

    Skips an entry that is absent or belongs to another version of the file.
    Each array is written under a temporary name and renamed into place before
    meta.json, itself replaced atomically, lists it. Warns and goes on on failure.
    """
    entry = _entry_dir(path, cache_dir)
    meta_path = os.path.join(entry, "meta.json")
    try:
        with open(meta_path, encoding="utf-8") as fh:
            meta = json.load(fh)
        if meta.get("identity") != identity(path):
            return
        for name, arr in arrays.items():
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npy", dir=entry)
            with os.fdopen(fd, "wb") as fh:
                np.save(fh, arr, allow_pickle=False)
            os.replace(tmp, os.path.join(entry, name + ".npy"))
            meta["arrays"][name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "crc32": _crc(arr)}
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=entry)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=1)
        os.replace(tmp, meta_path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"rafm: warning: cannot add to the cache entry of {printable(path)}: {exc}", file=sys.stderr)
