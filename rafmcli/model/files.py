"""Model files: a zip archive (readable with any unzip tool) of ``model.json``
(format version, kind, task, ranks, target range, link, training options,
metrics) and ``.npy`` arrays: ``feature_ids`` (original id of each internal
feature), ``levels`` (k_i), ``w`` and ``V``; implicit models add their group
values (:class:`rafmcli.model.vocabulary.Vocabulary`). No pickle is involved.

Version 2 adds ``link`` (classification: ``logit`` or ``probit``) and
``samples``: an MCMC model keeps K samples of its chain (means of stretches
of it, or draws), the last as ``w0``, ``w`` and ``V`` and the K-1 others as
rows of ``sample_w0`` [K-1], ``sample_w`` [K-1, features] and ``sample_V``
[K-1, factors]; it predicts the mean of the K samples' predictions. Version 1 files (no link: logit, one
draw) still load.
"""

import contextlib
import functools
import io
import json
import math
import mmap
import struct
import zipfile
import zlib

import numpy as np

from rafmcli import __version__, signals
from rafmcli.errors import InputError, printable
from rafmcli.io.checksum import pieces_checked
from rafmcli.io.output import Outputs
from rafmcli.io.side_files import is_regular, read_bytes
from rafmcli.model.layout import CACHE_LINE, STATE_ARRAYS, Model, OptimizerState, aligned_copy, aligned_zeros
from rafmcli.options import MAX_LEVELS, MAX_RANK

FORMAT_NAME = "rafm-model"
FORMAT_VERSION = 2
MODEL_KINDS = ("fm", "rafm", "difacto")
TASKS = ("r", "c", "implicit")
LINKS = ("logit", "probit")


def write(model, fh, state=False):
    """Write ``model`` as a zip archive into the binary file ``fh`` (it need not seek).

    ``state``: also write its optimizer state (``state_*.npy`` and the header's
    "optimizer_state"), so that training can continue where it stopped.
    """
    header = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "rafm_version": __version__,
        "model": model.kind, "task": model.task, "ranks": list(model.ranks),
        "n_features": int(model.feature_ids.shape[0]), "level_sizes": model.sizes.tolist(),
        "w0": model.w0, "target_min": model.target_min, "target_max": model.target_max,
        "link": model.link, "samples": max(len(model.samples), 1),
        **model.info,
    }
    arrays = {"feature_ids": model.feature_ids, "levels": model.levels, "w": model.w, "V": model.V}
    if model.vocabulary is not None:
        arrays.update(model.vocabulary.arrays())
    if state and model.state is not None:
        header["optimizer_state"] = {"method": model.state.method, "steps": int(model.state.steps)}
        arrays.update({"state_" + name: getattr(model.state, name) for name in OptimizerState.ARRAYS})
    others = model.samples[:-1]
    with _archive(fh) as member:
        with member("model.json", force_zip64=False) as out:
            out.write(json.dumps(header, indent=1).encode())
        for name, arr in arrays.items():
            with member(name + ".npy") as out:
                np.lib.format.write_array(out, np.ascontiguousarray(arr), allow_pickle=False)
        if others:
            with member("sample_w0.npy", force_zip64=False) as out:
                np.lib.format.write_array(out, np.array([s[0] for s in others], dtype=np.float64))
            for k, name in ((1, "sample_w"), (2, "sample_V")):
                _write_rows(member, name, [s[k] for s in others])


@contextlib.contextmanager
def _archive(fh):
    """member(name): a member of a zip archive written into ``fh``, safe to interrupt.

    zipfile cannot close an archive while a member is open, and a signal
    (rafmcli.signals) may land anywhere, even inside a ``with`` block's exit:
    the members opened here are closed first, each open and close with
    signals held, so an interrupted save leaves no "Exception ignored" noise
    (the staged file is discarded anyway).
    """
    zf, members = None, []

    @contextlib.contextmanager
    def member(name, force_zip64=True):
        with signals.held():
            members.append(zf.open(_aligned_info(zf, name, force_zip64), "w", force_zip64=force_zip64))
        out = members[-1]
        try:
            yield out
        finally:
            with signals.held():
                out.close()

    try:
        with signals.held():  # a signal held here is raised at the end of the block, inside the try
            zf = zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED)
        yield member
    finally:
        with signals.held():
            for out in members:
                out.close()  # a no-op once closed
            if zf is not None:
                zf.close()


ALIGN_EXTRA = 0xD935  # the zip extra field that pads a member's data to an alignment (as Android's zipalign)


def _aligned_info(zf, name, zip64):
    """A ZipInfo for ``name`` whose local header is padded (an ALIGN_EXTRA field) so that
    the member's data starts on a cache line of the file: a .npy array there (its header
    is padded to 64 bytes) can then be mapped in place by load() (:class:`_Members`)."""
    info = zipfile.ZipInfo(name)
    start = zf.start_dir + LOCAL_HEADER.size + len(name.encode()) + (20 if zip64 else 0) + 6
    info.extra = struct.pack("<HHH", ALIGN_EXTRA, 2 + -start % CACHE_LINE, CACHE_LINE) + bytes(-start % CACHE_LINE)
    return info


def _write_rows(member, name, rows):
    """Stack equal-length float32 ``rows`` into ``name.npy``, one row at a time (no stacked copy)."""
    with member(name + ".npy") as out:
        np.lib.format.write_array_header_2_0(
            out, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                  "shape": (len(rows), rows[0].shape[0])})
        for row in rows:
            out.write(np.ascontiguousarray(row, dtype=np.float32).data)


def save(model, path, state=False):
    """Write ``model`` to ``path`` on its own (see :class:`rafmcli.io.output.Outputs`)."""
    with Outputs() as outputs:
        outputs.write(path, functools.partial(write, model, state=state), binary=True)


class Damaged(ValueError):
    """What is wrong inside a model file; load() reports ``MODEL: damaged model file (what)``."""


def _field(header, name, kind, check=None, what=None):
    """``header[name]``, of JSON type ``kind`` (bool is not a number) and passing ``check``."""
    if name not in header:
        raise Damaged(f"header has no '{name}'")
    value = header[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds) or (
            check is not None and not check(value)):
        raise Damaged(f"header '{name}' must be {what} ({json.dumps(value)[:60]})")
    return value


def _int_list(value):
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _finite(value):
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond float range
        return False


def check_header_v1(header):
    """Every field a version-1 header must hold, with its type and range; returns
    (kind, task, ranks, n_features, level_sizes, w0, target range, info)."""
    if not isinstance(header, dict):
        raise Damaged("header is not a JSON object")
    kind = _field(header, "model", str, lambda v: v in MODEL_KINDS, "one of " + ", ".join(MODEL_KINDS))
    task = _field(header, "task", str, lambda v: v in TASKS, "one of " + ", ".join(TASKS))
    ranks = tuple(_field(header, "ranks", list, lambda v: _int_list(v) and 0 < len(v) <= MAX_LEVELS and (
        0 < v[0] and v[-1] <= MAX_RANK and all(a < b for a, b in zip(v, v[1:]))) and (kind != "fm" or len(v) == 1),
        f"1 to {MAX_LEVELS} increasing positive integers (one for fm)"))
    n = _field(header, "n_features", int, lambda v: 0 <= v < 2**31, "an integer in 0..2147483647")
    sizes = _field(header, "level_sizes", list, lambda v: _int_list(v) and len(v) == len(ranks) and (
        v[0] == n and all(a >= b >= 0 for a, b in zip(v, v[1:]))),
        f"{len(ranks)} non-increasing counts, the first n_features")
    w0 = _field(header, "w0", (int, float), _finite, "a finite number")
    low = _field(header, "target_min", (int, float), _finite, "a finite number")
    high = _field(header, "target_max", (int, float), lambda v: _finite(v) and v >= low,
                  "a finite number >= target_min")
    info = {k: header[k] for k in ("options", "training", "classes") if k in header}
    for name, json_type in (("options", dict), ("training", dict), ("classes", list)):
        if name in info:
            _field(info, name, json_type, what=f"a JSON {'object' if json_type is dict else 'list'}")
    return kind, task, ranks, n, sizes, float(w0), (float(low), float(high)), info


class _Members:
    """The members of an open model archive, read as checked arrays (:meth:`array`).

    With ``mapped`` (rafm predict: :func:`load`), stored (uncompressed) members
    of a file that can be mapped are mapped, not read: copy-on-write
    (``mmap.ACCESS_COPY``), so the arrays are writable like read ones and the
    file is never written. Pages come from the page cache as they are first used; the only
    pass over them at load is the check of their CRC-32 and, for floats, that
    every value is finite, one pass on every core (:func:`_check_mapped`).
    Compressed members, and any file that cannot be mapped, are read through
    zipfile as before; every check is the same either way.
    """

    def __init__(self, zf, mapped):
        self.zf = zf
        self.names = set(zf.namelist())
        self.mapped = _map_file(zf.fp) if mapped else None
        self.not_finite = {}  # name -> how many values of that float array are inf or NaN

    def finite(self, name):
        """Every value of the float array ``name`` (already read) is finite."""
        return self.not_finite[name] == 0

    def span(self, info):
        """(offset, size) of a stored member's bytes in the mapped file, or None to read it
        through zipfile (compressed, encrypted, not mapped, or a local header that zipfile
        would refuse: zipfile then gives its own error)."""
        mm = self.mapped
        if mm is None or info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            return None
        head = mm[info.header_offset:info.header_offset + LOCAL_HEADER.size]
        if len(head) < LOCAL_HEADER.size:
            return None
        magic, name_length, extra_length = LOCAL_HEADER.unpack(head)
        start = info.header_offset + LOCAL_HEADER.size + name_length + extra_length
        name = mm[info.header_offset + LOCAL_HEADER.size:info.header_offset + LOCAL_HEADER.size + name_length]
        if (magic != zipfile.stringFileHeader or name != info.orig_filename.encode(
                "utf-8" if info.flag_bits & 0x800 else "cp437") or start + info.compress_size > len(mm)
                or info.compress_size != info.file_size):
            return None
        return start, info.file_size

    def array(self, name, dtype, shape=None, aligned=False):
        """``name``.npy, refused unless it is a C-order ``dtype`` array of ``shape``
        (an int: that many items; None: flat, any length), checked from its .npy
        header before any memory is allocated or mapped. ``aligned``: starting on a
        cache line (a mapped array always does, or it is copied: :func:`_aligned_info`)."""
        if isinstance(shape, int):
            shape = (shape,)
        try:
            info = self.zf.getinfo(name + ".npy")
        except KeyError:
            raise Damaged(f"no {name}.npy") from None
        span = self.span(info)
        if span is None:
            with self.zf.open(info) as fh:
                found = _npy_header(fh, name, dtype, shape)
                out = _read_into(fh, name, found, dtype, aligned)
            if out.dtype.kind == "f":
                self.not_finite[name] = _not_finite(out.reshape(-1))
            return out
        start, size = span
        head = io.BytesIO(self.mapped[start:start + min(size, NPY_HEADER_MAX)])
        found = _npy_header(head, name, dtype, shape)
        offset, count = head.tell(), math.prod(found)
        room = size - offset - count * np.dtype(dtype).itemsize
        if room < 0:
            raise Damaged(f"{name}.npy is truncated")
        if room > 0:
            raise Damaged(f"{name}.npy has bytes beyond its array")
        out = np.frombuffer(self.mapped, dtype=dtype, count=count, offset=start + offset)
        self.not_finite[name] = _check_mapped(self.mapped, start, size, offset, out, info)
        if out.ctypes.data % CACHE_LINE:  # a file not written by this rafm: copied, as a read would
            out = aligned_copy(out) if aligned else out.copy()
        return out.reshape(found)


LOCAL_HEADER = struct.Struct("<4s22xHH")  # a zip local file header: magic, ..., name and extra lengths
NPY_HEADER_MAX = 1 << 16  # bytes of a member searched for its .npy header (numpy reads at most 10,000)
CHECK_PIECE = 1 << 23  # bytes of a mapped member checked at a time (CRC-32, then finiteness while cached)


def _map_file(fh):
    """The whole of the archive's open file ``fh`` mapped copy-on-write (the file zipfile
    read the directory from), or None where it cannot be (an empty file, no descriptor)."""
    try:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError, AttributeError):
        return None


def _not_finite(values):
    """How many of the float ``values`` are inf or NaN (numpy: no numba import; its
    loops release the GIL, so a model is checked while :func:`rafmcli.jit.preload` runs)."""
    return int(values.shape[0] - np.count_nonzero(np.isfinite(values)))


def _ids_distinct(ids):
    """The int32 ``ids`` are all different: one sort (numpy: no numba import; a flag per
    possible id was slower and larger from a few ids per flag byte on)."""
    ordered = np.sort(ids)
    return not bool(np.any(ordered[1:] == ordered[:-1]))


def _npy_header(fh, name, dtype, shape):
    """The shape of the .npy array starting at ``fh``, refused unless its dtype is
    ``dtype``, it is C-ordered and it has ``shape`` (None: flat, any length)."""
    try:
        version = np.lib.format.read_magic(fh)
        if version not in ((1, 0), (2, 0)):
            raise Damaged(f"{name}.npy has .npy version {version}")
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        found, fortran, got = read_header(fh)
    except Damaged:
        raise
    except ValueError as exc:
        raise Damaged(f"{name}.npy: {exc}") from None
    if got != np.dtype(dtype) or (fortran and len(found) > 1) or (
            found != shape if shape is not None else len(found) != 1):
        expected = "(N,)" if shape is None else str(shape)
        raise Damaged(f"{name}.npy is {got} of shape {found}, expected {np.dtype(dtype)} of shape {expected}")
    return found


def _read_into(fh, name, found, dtype, aligned):
    """The array of shape ``found`` read from the rest of the member ``fh`` (zipfile checks its CRC-32)."""
    out = aligned_zeros(found[0], dtype) if aligned else np.empty(found, dtype)
    buf = memoryview(out).cast("B")
    done = 0
    while done < len(buf):
        got = fh.readinto(buf[done:])
        if not got:
            raise Damaged(f"{name}.npy is truncated")
        done += got
    if fh.read(1):
        raise Damaged(f"{name}.npy has bytes beyond its array")
    return out


def _check_mapped(mapped, start, size, offset, values, info):
    """The CRC-32 of a mapped member (bytes ``start``..``start+size`` of ``mapped``)
    against the archive's, as zipfile checks it on a read; returns how many of its
    float ``values`` (from byte ``offset`` of the member) are inf or NaN (0 for other
    dtypes). Pieces of CHECK_PIECE bytes on every core (io/checksum.py): each piece's
    CRC, then its values while they are still cached."""
    member = memoryview(mapped)[start:start + size]
    item = values.dtype.itemsize

    def finiteness(a, b):
        first, stop = (max(0, min(values.shape[0], -(-(x - offset) // item))) for x in (a, b))
        return _not_finite(values[first:stop]) if stop > first else 0

    try:
        crc, bad = pieces_checked(member, CHECK_PIECE, finiteness if values.dtype.kind == "f" else None)
    finally:
        member.release()
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return bad


def read_model_v1(members, header):
    """A version-1 model: the header, then feature_ids, levels, w and V checked against it."""
    kind, task, ranks, n, sizes, w0, target, info = check_header_v1(header)
    feature_ids = members.array("feature_ids", np.int32, n)
    levels = members.array("levels", np.int8, n)
    if n and (levels.min() < 1 or levels.max() > len(ranks)):
        raise Damaged(f"levels.npy holds levels outside 1..{len(ranks)}")
    if np.any(np.diff(levels.astype(np.int64)) > 0):
        raise Damaged("levels.npy is not non-increasing")
    model = Model(kind, task, ranks, feature_ids, levels, w0, None, None, target[0], target[1], info)
    if model.sizes.tolist() != sizes:
        raise Damaged(f"levels.npy gives level sizes {model.sizes.tolist()}, the header {sizes}")
    if n and (feature_ids.min() < 0 or not _ids_distinct(feature_ids)):
        raise Damaged("feature_ids.npy holds negative or repeated ids")
    model.w = members.array("w", np.float32, n)
    model.V = members.array("V", np.float32, int(sum(int(s) * int(d) for s, d in zip(sizes, model.widths))),
                            aligned=True)
    for name in ("w", "V"):
        if not members.finite(name):
            raise Damaged(f"{name}.npy holds values that are not finite")
    if "group_of.npy" in members.names:
        model.vocabulary = _read_vocabulary(members, n)
    return model


def read_model_v2(members, header):
    """Version 2: version 1 plus "link" and "samples"; an MCMC model's K-1
    earlier draws as rows of sample_w0 [K-1], sample_w [K-1, F], sample_V [K-1, |V|]."""
    if not isinstance(header, dict):
        raise Damaged("header is not a JSON object")
    link = _field(header, "link", str, lambda v: v in LINKS, "logit or probit")
    samples = _field(header, "samples", int, lambda v: v >= 1, "a positive integer")
    model = read_model_v1(members, header)
    model.link = link
    if "optimizer_state" in header:
        model.state = _read_state(members, header, model)
    if samples > 1:
        k, n = samples - 1, model.w.shape[0]
        w0s = members.array("sample_w0", np.float64, k)
        ws = members.array("sample_w", np.float32, (k, n))
        Vs = members.array("sample_V", np.float32, (k, model.V.shape[0]))
        if not all(members.finite(name) for name in ("sample_w0", "sample_w", "sample_V")):
            raise Damaged("the sample arrays hold values that are not finite")
        model.samples = [(float(w0s[j]), ws[j], Vs[j]) for j in range(k)] + [(model.w0, model.w, model.V)]
    return model


def _read_state(members, header, model):
    """The optimizer state saved for continued training: the accumulators its method keeps
    (STATE_ARRAYS), in the layout of V (aligned; row-wise AdaGrad's sums one a factor row)
    and w, the others empty, and the bias pair."""
    def valid(v):
        method, steps = v.get("method"), v.get("steps")
        return isinstance(method, str) and method in STATE_ARRAYS and isinstance(steps, int) and not isinstance(
            steps, bool) and steps >= 0

    opt = _field(header, "optimizer_state", dict, valid,
                 f'an object {{"method": one of {", ".join(STATE_ARRAYS)}, "steps": count}}')
    arrays = {}
    for name, size in model.state_sizes(opt["method"]).items():
        arrays[name] = members.array("state_" + name, np.float32, aligned=name.startswith("V"))
        if arrays[name].shape[0] != size or not members.finite("state_" + name):
            raise Damaged(f"state_{name}.npy has {arrays[name].shape[0]} values, not {size} as {opt['method']} "
                          f"keeps, or values that are not finite")
    arrays["bias"] = members.array("state_bias", np.float64, 2)
    return OptimizerState(opt["method"], **arrays, steps=opt["steps"])


def _read_vocabulary(members, n_features):
    """An implicit model's group values, each array checked against the others."""
    from rafmcli.model.vocabulary import Vocabulary

    group_of = members.array("group_of", np.int32, n_features)
    group_ptr = members.array("group_ptr", np.int64)
    count = members.array("value_count", np.int64)
    ptr = members.array("value_ptr", np.int64, count.shape[0] + 1)
    if not _offsets(group_ptr, count.shape[0]) or not _offsets(ptr, None):
        raise Damaged("group_ptr.npy or value_ptr.npy is not a run of offsets")
    feat = members.array("value_features", np.int32, int(ptr[-1]))
    x = members.array("value_x", np.float32, int(ptr[-1]))
    n_groups = group_ptr.shape[0] - 1
    if (group_of.size and (group_of.min() < 0 or group_of.max() >= n_groups)
            or feat.size and (feat.min() < 0 or feat.max() >= n_features)
            or count.size and count.min() < 0 or not members.finite("value_x")):
        raise Damaged("the group values (group_of, value_features, value_x, value_count) are out of range")
    return Vocabulary(group_of, group_ptr, ptr, feat, x, count)


def _offsets(ptr, end):
    """ptr starts at 0, never decreases and (unless ``end`` is None) ends at ``end``."""
    return (ptr.shape[0] >= 1 and ptr[0] == 0 and bool(np.all(np.diff(ptr) >= 0))
            and (end is None or ptr[-1] == end))


READERS = {1: read_model_v1, 2: read_model_v2}  # format_version -> reader(_Members, header) -> Model


def load(path, text_ok=False, mapped=False):
    """Read a model file; refuse unknown format versions, and any damage: a header
    field missing or of the wrong type or range, an array whose dtype, shape or
    values disagree with the header -> ``MODEL: damaged model file (what)``.

    ``text_ok``: a file that is not a zip archive is read as libFM's text model
    (:func:`rafmcli.model.dump.read_text`). ``mapped`` (rafm predict): stored
    members are mapped from the file instead of read (:class:`_Members`), no
    fresh memory for a large model; the arrays then live on the file's pages, so
    the file must not be truncated or rewritten in place while they are used (the
    process would die of SIGBUS). Replacing it by a rename, as rafm's own writes
    of regular files do, is safe.
    """
    from rafmcli.model.dump import read_text

    source = path
    if not is_regular(path, "model file"):  # a pipe or FIFO: a zip archive is read from its end, so from memory
        raw = read_bytes(path, "model file")
        if text_ok and not raw.startswith(b"PK"):
            return read_text(path, raw)
        source, mapped = io.BytesIO(raw), False
    elif text_ok and not zipfile.is_zipfile(path):
        return read_text(path)
    try:
        with zipfile.ZipFile(source) as zf:
            try:
                header = json.loads(zf.read("model.json"))
            except KeyError:
                raise Damaged("no model.json") from None
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                raise Damaged(f"model.json is not JSON: {exc}") from None
            if not isinstance(header, dict):
                raise Damaged("header is not a JSON object")
            if header.get("format") != FORMAT_NAME:
                raise InputError(f"{printable(path)}: not a rafm model file")
            version = header.get("format_version")
            if not isinstance(version, int) or isinstance(version, bool):
                raise Damaged(f"format_version is not an integer ({json.dumps(version)})")
            if version not in READERS:
                raise InputError(f"{printable(path)}: model format version {version} is not supported by "
                                 f"rafm {__version__} (it reads versions {', '.join(map(str, READERS))})")
            return READERS[version](_Members(zf, mapped), header)
    except Damaged as exc:
        raise InputError(f"{printable(path)}: damaged model file ({exc})") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError) as exc:
        raise InputError(f"{printable(path)}: damaged model file ({exc})") from None
    except RuntimeError as exc:  # zipfile: an encrypted member
        raise InputError(f"{printable(path)}: damaged model file ({exc})") from None
    except OSError as exc:
        raise InputError(f"{printable(path)}: cannot read model file: {exc.strerror or exc}") from None
