"""A model as text: libFM's layout for FM, extended per level for RaFM and DiFacto.

Text (``write_text``), one line per feature id 0..N-1 in every section
(N = largest id + 1; ids the model never saw are zeros or empty lines)::

    #global bias W0
    w0
    #unary interactions Wj
    w_j                                  (N lines)
    #pairwise interactions Vj,f          (FM: N lines of D values; libFM reads this file)
    #levels kj                           (RaFM, DiFacto: N lines, 0 = never seen)
    #pairwise interactions Vj,f level l (rank D_l)      (RaFM, l = 1..m: v_j^(l) if k_j >= l, else empty)
    #pairwise interactions Vj,f (rank D_kj)             (DiFacto: v_j, D_{k_j} values)
    #rafm model=KIND task=T ranks=D1,... target_min=A target_max=B

Scores (paper Eq. 1, Eq. 5): y(x) = w0 + Sum_j w_j x_j + Sum_{i<j} <v_i, v_j>_{ij} x_i x_j
where the pair product is <v_i, v_j> for FM, <v_i^(l), v_j^(l)> with
l = min(k_i, k_j) for RaFM, and the dot product of the first D_min(k_i,k_j)
coordinates for DiFacto. Classification predicts 1/(1+exp(-y)); regression
clips y to [target_min, target_max]. Values are printed with 9 significant
digits, enough to give back every float32 exactly.
"""

import json

import numpy as np

from rafmcli.errors import InputError

FLOAT = "%.9g"
DENSE_SLACK = 4            # the text layout may write this many lines per stored feature
DENSE_MIN_LINES = 1 << 20  # ... or this many, whichever is larger


def _floats(values):
    return " ".join(FLOAT % v for v in values)


def _trailer(model):
    return (f"#rafm model={model.kind} task={model.task} ranks={','.join(map(str, model.ranks))} "
            f"target_min={model.target_min!r} target_max={model.target_max!r}\n")


def vectors(model, j):
    """The factor vectors of internal feature ``j``: one per level for RaFM, one for FM and DiFacto."""
    k = int(model.levels[j])
    blocks = [model.factors(level)[j] for level in range(1, k + 1)]
    return blocks if model.kind == "rafm" else [np.concatenate(blocks)]


def n_lines(model):
    """Lines per section of the text layout: largest feature id + 1."""
    return int(model.feature_ids.max()) + 1 if model.feature_ids.shape[0] else 0


def check_dense(model, path):
    """Refuse the text layout when the ids are too sparse for one line per id."""
    lines, features = n_lines(model), model.feature_ids.shape[0]
    if lines > max(DENSE_SLACK * features, DENSE_MIN_LINES):
        raise InputError(f"{path}: feature ids run to {lines - 1:,} for {features:,} features; the "
                         f"libFM layout writes one line per id: use --format json")


def write_text(model, fh):
    """Write the text layout of the module notes to the text handle ``fh``."""
    n = n_lines(model)
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[model.feature_ids] = np.arange(model.feature_ids.shape[0])
    fh.write(f"#global bias W0\n{model.w0!r}\n#unary interactions Wj\n")
    w = np.zeros(n, dtype=np.float32)
    w[model.feature_ids] = model.w
    np.savetxt(fh, w, fmt=FLOAT)
    if model.kind == "fm":
        fh.write("#pairwise interactions Vj,f\n")
        dense = np.zeros((n, model.ranks[0]), dtype=np.float32)
        dense[model.feature_ids] = model.factors(1)
        np.savetxt(fh, dense, fmt=FLOAT, delimiter=" ")
    else:
        levels = np.zeros(n, dtype=np.int64)
        levels[model.feature_ids] = model.levels
        fh.write("#levels kj\n")
        np.savetxt(fh, levels, fmt="%d")
        if model.nested:
            for level, rank in enumerate(model.ranks, 1):
                fh.write(f"#pairwise interactions Vj,f level {level} (rank {rank})\n")
                block = model.factors(level)
                for i in range(n):
                    j = row_of[i]
                    fh.write(_floats(block[j]) + "\n" if j >= 0 and levels[i] >= level else "\n")
        else:
            fh.write("#pairwise interactions Vj,f (rank D_kj)\n")
            for i in range(n):
                j = row_of[i]
                fh.write(_floats(vectors(model, j)[0]) + "\n" if j >= 0 else "\n")
    fh.write(_trailer(model))


def write_json(model, fh):
    """One JSON object: the header fields and ``features`` sorted by id, each with id, level, w, v."""
    head = {"format": "rafm-dump", "format_version": 1, "model": model.kind, "task": model.task,
            "ranks": list(model.ranks), "target_min": model.target_min, "target_max": model.target_max,
            "w0": model.w0}
    fh.write(json.dumps(head)[:-1] + ', "features": [')
    order = np.argsort(model.feature_ids, kind="stable")
    for n, j in enumerate(order):
        vs = ", ".join("[" + ", ".join(FLOAT % x for x in v) + "]" for v in vectors(model, j))
        fh.write(("," if n else "") + f'\n {{"id": {int(model.feature_ids[j])}, '
                 f'"level": {int(model.levels[j])}, "w": {FLOAT % model.w[j]}, "v": [{vs}]}}')
    fh.write("\n]}\n")


def read_text(path):
    """An FM Model from libFM's text layout (``libFM -save_model`` or ``rafm dump`` of an FM).

    Line j of each section is feature id j; every id becomes a feature of
    level 1. The task and clipping range come from rafm's last line when
    present; otherwise the task is None (the caller's) and the range empty
    (the new training data's).
    """
    from rafmcli.model.layout import Model, aligned_copy

    sections, name = {}, None
    try:
        with open(path, encoding="ascii") as fh:
            for line_no, line in enumerate(fh, 1):
                line = line.rstrip("\r\n")
                if line.startswith("#"):
                    name = line.split(" level ")[0] if line.startswith("#pairwise") else line
                    sections[name] = []
                elif name is None:
                    raise InputError(f"{path}:{line_no}: not a model file (expected '#global bias W0' or "
                                     f"'#pairwise interactions Vj,f')")
                else:
                    sections[name].append(line)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if "#levels kj" in sections:
        raise InputError(f"{path}: a RaFM or DiFacto text dump cannot be loaded; use its .rafm model file")
    rows = sections.get("#pairwise interactions Vj,f")
    if not rows:
        raise InputError(f"{path}: no '#pairwise interactions Vj,f' section: not a libFM model")
    try:
        V = np.array([[float(t) for t in row.split()] for row in rows], dtype=np.float32)
        w = np.array([float(t) for t in sections.get("#unary interactions Wj", ["0"] * len(rows))],
                     dtype=np.float32)
        w0 = float(sections.get("#global bias W0", ["0"])[0])
    except ValueError as exc:
        raise InputError(f"{path}: not a number in the model ({exc})") from None
    if V.ndim != 2 or V.shape[1] == 0 or w.shape[0] != V.shape[0] or not np.all(np.isfinite(V)):
        raise InputError(f"{path}: damaged libFM model (sections of different lengths or ragged factors)")
    meta = next((dict(kv.split("=", 1) for kv in n.split()[1:]) for n in sections if n.startswith("#rafm ")), {})
    n = V.shape[0]
    return Model("fm", meta.get("task"), (V.shape[1],), np.arange(n, dtype=np.int32), np.ones(n, dtype=np.int8),
                 w0, w, aligned_copy(V.ravel()), float(meta.get("target_min", "inf")),
                 float(meta.get("target_max", "-inf")))
