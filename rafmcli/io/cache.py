"""Binary cache of parsed files: ``.npy`` arrays re-opened with memory mapping.

One entry per input path, in ``$RAFM_CACHE_DIR`` (default
``$XDG_CACHE_HOME/rafm`` or ``~/.cache/rafm``), never beside the input. An
entry records the file's absolute path, size and modification time and a CRC32
of every array; it is used only when all of them match, otherwise it is
rebuilt. Entries are written to a temporary directory and renamed into place,
so a crash leaves no half-written entry.
"""

import hashlib
import json
import os
import shutil
import sys
import tempfile
import zlib

import numpy as np

from rafmcli.io.reader import Dataset

FORMAT = 1
_ARRAYS = ("labels", "indptr", "indices", "values", "feature_ids", "counts")


def default_dir():
    """Where entries live: $RAFM_CACHE_DIR, else the XDG cache directory."""
    if os.environ.get("RAFM_CACHE_DIR"):
        return os.environ["RAFM_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rafm")


def identity(path):
    """What must match for an entry to be used: format, absolute path, size, mtime."""
    st = os.stat(path)
    return {"format": FORMAT, "path": os.path.abspath(path),
            "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _entry_dir(path, cache_dir):
    key = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()
    return os.path.join(cache_dir or default_dir(), key[:32])


def _crc(array):
    return zlib.crc32(np.ascontiguousarray(array).view(np.uint8))


def load(path, cache_dir=None):
    """The cached Dataset for ``path``, or None if absent, stale or damaged."""
    entry = _entry_dir(path, cache_dir)
    try:
        with open(os.path.join(entry, "meta.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
        if meta.get("identity") != identity(path):
            return None
        arrays = {}
        for name, spec in meta["arrays"].items():
            arr = np.load(os.path.join(entry, name + ".npy"), mmap_mode="r", allow_pickle=False)
            if (str(arr.dtype) != spec["dtype"] or list(arr.shape) != spec["shape"]
                    or _crc(arr) != spec["crc32"]):
                return None
            arrays[name] = arr
        data = Dataset(path, arrays["labels"], arrays["indptr"], arrays["indices"],
                       arrays.get("values"), arrays["feature_ids"], arrays["counts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if data.indptr.shape[0] != data.n_rows + 1 or data.indptr[-1] != data.nnz:
        return None
    return data


def store(data, ident, cache_dir=None):
    """Write ``data`` as the entry of ``data.path``, taken when it had ``ident``.

    ``ident`` is read before parsing, so a file changed meanwhile is not
    trusted next time. Warns and goes on if the cache cannot be written.
    """
    entry = _entry_dir(data.path, cache_dir)
    parent = os.path.dirname(entry)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
        try:
            specs = {}
            for name in _ARRAYS:
                arr = getattr(data, name)
                if arr is None:
                    continue
                np.save(os.path.join(tmp, name + ".npy"), arr, allow_pickle=False)
                specs[name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "crc32": _crc(arr)}
            meta = {"identity": ident, "arrays": specs}
            with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as fh:
                json.dump(meta, fh, indent=1)
            shutil.rmtree(entry, ignore_errors=True)
            os.replace(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        print(f"rafm: warning: cannot write cache in {parent}: {exc}", file=sys.stderr)
