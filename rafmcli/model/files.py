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

import functools
import json
import zipfile

import numpy as np

from rafmcli import __version__
from rafmcli.errors import InputError
from rafmcli.io.output import Outputs
from rafmcli.model.layout import Model, OptimizerState, aligned_copy, aligned_zeros

FORMAT_NAME = "rafm-model"
FORMAT_VERSION = 2
READS = (1, 2)


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
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("model.json", json.dumps(header, indent=1))
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.ascontiguousarray(arr), allow_pickle=False)
        if others:
            with zf.open("sample_w0.npy", "w") as out:
                np.lib.format.write_array(out, np.array([s[0] for s in others], dtype=np.float64))
            for k, name in ((1, "sample_w"), (2, "sample_V")):
                _write_rows(zf, name, [s[k] for s in others])


def _write_rows(zf, name, rows):
    """Stack equal-length float32 ``rows`` into ``name.npy``, one row at a time (no stacked copy)."""
    with zf.open(name + ".npy", "w", force_zip64=True) as out:
        np.lib.format.write_array_header_2_0(
            out, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                  "shape": (len(rows), rows[0].shape[0])})
        for row in rows:
            out.write(np.ascontiguousarray(row, dtype=np.float32).data)


def save(model, path, state=False):
    """Write ``model`` to ``path`` on its own (see :class:`rafmcli.io.output.Outputs`)."""
    with Outputs() as outputs:
        outputs.write(path, functools.partial(write, model, state=state), binary=True)


def _read_aligned(fh):
    """A flat ``.npy`` array read straight into cache-line-aligned memory (no second copy)."""
    version = np.lib.format.read_magic(fh)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"unsupported .npy version {version}")
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read_header(fh)
    if len(shape) != 1 or dtype != np.float32:
        raise ValueError(f"V has shape {shape} and dtype {dtype}, not flat float32")
    out = aligned_zeros(shape[0], dtype)
    buf = memoryview(out).cast("B")
    done = 0
    while done < len(buf):
        got = fh.readinto(buf[done:])
        if not got:
            raise EOFError("V.npy is truncated")
        done += got
    return out


def load(path, text_ok=False):
    """Read a model file; refuse unknown format versions and damaged files.

    ``text_ok``: a file that is not a zip archive is read as libFM's text model
    (:func:`rafmcli.model.dump.read_text`).
    """
    if text_ok and not zipfile.is_zipfile(path):
        from rafmcli.model.dump import read_text

        return read_text(path)
    try:
        with zipfile.ZipFile(path) as zf:
            header = json.loads(zf.read("model.json"))
            if header.get("format") != FORMAT_NAME:
                raise InputError(f"{path}: not a rafm model file")
            version = header.get("format_version")
            if version not in READS:
                raise InputError(f"{path}: model format version {version} is not supported by "
                                 f"rafm {__version__} (it reads versions {', '.join(map(str, READS))})")
            arrays = {}
            for name in ("feature_ids", "levels", "w"):
                with zf.open(name + ".npy") as fh:
                    arrays[name] = np.lib.format.read_array(fh, allow_pickle=False)
            with zf.open("V.npy") as fh:
                arrays["V"] = _read_aligned(fh)
            vocabulary = None
            if "group_of.npy" in zf.namelist():
                from rafmcli.model.vocabulary import Vocabulary

                vocabulary = Vocabulary.from_arrays(
                    {name: np.lib.format.read_array(zf.open(name + ".npy"), allow_pickle=False)
                     for name in Vocabulary.ARRAYS})
            n_samples = int(header.get("samples", 1))
            if n_samples > 1:
                for name in ("sample_w0", "sample_w", "sample_V"):
                    with zf.open(name + ".npy") as fh:
                        arrays[name] = np.lib.format.read_array(fh, allow_pickle=False)
            state = None
            if "optimizer_state" in header:
                opt = header["optimizer_state"]
                state = {name: np.lib.format.read_array(zf.open(f"state_{name}.npy"), allow_pickle=False)
                         for name in OptimizerState.ARRAYS}
                for name in ("V1", "V2"):
                    state[name] = _aligned(state[name])
                state = OptimizerState(str(opt["method"]), **state, steps=int(opt["steps"]))
    except InputError:
        raise
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: damaged or unreadable model file ({exc})") from None
    info = {k: v for k, v in header.items() if k in ("options", "training", "classes")}
    model = Model(header["model"], header["task"], tuple(header["ranks"]), arrays["feature_ids"],
                  arrays["levels"], float(header["w0"]), arrays["w"], arrays["V"],
                  float(header["target_min"]), float(header["target_max"]), info, vocabulary,
                  header.get("link", "logit"), state=state)
    n = model.feature_ids.shape[0]
    if (model.levels.shape[0] != n or model.w.shape[0] != n
            or model.V.shape[0] != int((model.sizes * model.widths).sum())
            or np.any(np.diff(model.levels.astype(np.int64)) > 0)
            or model.sizes.tolist() != header.get("level_sizes")
            or model.link not in ("logit", "probit")):
        raise InputError(f"{path}: damaged model file (array sizes disagree with the header)")
    if "sample_V" in arrays:
        w0s, ws, Vs = arrays["sample_w0"], arrays["sample_w"], arrays["sample_V"]
        k = n_samples - 1
        if (w0s.shape != (k,) or ws.shape != (k, n) or Vs.shape != (k, model.V.shape[0])
                or ws.dtype != np.float32 or Vs.dtype != np.float32):
            raise InputError(f"{path}: damaged model file (sample arrays disagree with the header)")
        model.samples = [(float(w0s[j]), ws[j], Vs[j]) for j in range(k)] + [(model.w0, model.w, model.V)]
    if state is not None and not (
            all(a.shape[0] in (0, model.V.shape[0]) and a.dtype == np.float32 for a in (state.V1, state.V2))
            and all(a.shape[0] in (0, n) and a.dtype == np.float32 for a in (state.w1, state.w2))
            and state.bias.shape == (2,)):
        raise InputError(f"{path}: damaged model file (optimizer state sizes disagree with the model)")
    return model


def _aligned(a):
    return aligned_copy(np.ascontiguousarray(a).ravel())
