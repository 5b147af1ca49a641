"""A model as text: libFM's layout for FM, extended per level for RaFM and DiFacto.

Text (``write_text``), one line per feature id 0..N-1 in every section
(N = largest id + 1; ids the model never saw are zeros or empty lines)::

    #global bias W0                      (absent when trained without the bias)
    w0
    #unary interactions Wj               (absent when trained without linear weights)
    w_j                                  (N lines)
    #pairwise interactions Vj,f          (FM: N lines of D values; libFM reads this file)
    #levels kj                           (RaFM, DiFacto: N lines, 0 = never seen)
    #pairwise interactions Vj,f level l (rank D_l)      (RaFM, l = 1..m: v_j^(l) if k_j >= l, else empty)
    #pairwise interactions Vj,f (rank D_kj)             (DiFacto: v_j, D_{k_j} values)
    #rafm model=KIND task=T ranks=D1,... target_min=A target_max=B link=L samples=K

An MCMC model of K > 1 samples writes K such blocks, each after a line
``#rafm sample s of K``, then the last line. JSON (``write_json``): the
header fields with ``w0`` and ``features``, or for K > 1 a list ``draws``
of {w0, features}.

Scores (paper Eq. 1, Eq. 5): y(x) = w0 + Sum_j w_j x_j + Sum_{i<j} <v_i, v_j>_{ij} x_i x_j
where the pair product is <v_i, v_j> for FM, <v_i^(l), v_j^(l)> with
l = min(k_i, k_j) for RaFM, and the dot product of the first D_min(k_i,k_j)
coordinates for DiFacto. A prediction is (1/K) Sum_s f(y_s(x)) over the
samples, f = 1/(1+exp(-y)) (link logit) or Phi(y) (probit) for
classification, y clipped to [target_min, target_max] for regression, y
for implicit models; a raw prediction is (1/K) Sum_s y_s(x). Values are
printed with 9 significant digits, enough to give back every float32 exactly.
"""

import json
import math
import warnings
from dataclasses import replace

import numpy as np

from rafmcli.errors import InputError, printable
from rafmcli.io.side_files import read_bytes, text_lines

FLOAT = "%.9g"
DENSE_SLACK = 4            # the text layout may write this many lines per stored feature
DENSE_MIN_LINES = 1 << 20  # ... or this many, whichever is larger


def _floats(values):
    return " ".join(FLOAT % v for v in values)


def _trailer(model):
    return (f"#rafm model={model.kind} task={model.task} ranks={','.join(map(str, model.ranks))} "
            f"target_min={float(model.target_min)!r} target_max={float(model.target_max)!r} link={model.link} "
            f"samples={max(len(model.samples), 1)}\n")


def draws(model):
    """One Model per kept sample (an MCMC model's K, sharing its layout), else ``[model]``."""
    return [replace(model, w0=w0, w=w, V=V, samples=[]) for w0, w, V in model.samples] or [model]


def _trained_with(model, name):
    """Whether the model was trained with option ``name`` ("bias", "linear"); True if unrecorded."""
    return bool((model.info.get("options") or {}).get(name, True))


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
        raise InputError(f"{printable(path)}: feature ids run to {lines - 1:,} for {features:,} features; the "
                         f"libFM layout writes one line per id: use --format json")


def write_text(model, fh):
    """Write the text layout of the module notes to the text handle ``fh``."""
    samples = draws(model)
    for s, draw in enumerate(samples, 1):
        if len(samples) > 1:
            fh.write(f"#rafm sample {s} of {len(samples)}\n")
        _write_block(draw, fh)
    fh.write(_trailer(model))


def _write_block(model, fh):
    """One sample's sections: bias and weights (if trained), levels, factors."""
    n = n_lines(model)
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[model.feature_ids] = np.arange(model.feature_ids.shape[0])
    if _trained_with(model, "bias"):
        fh.write(f"#global bias W0\n{float(model.w0)!r}\n")
    if _trained_with(model, "linear"):
        fh.write("#unary interactions Wj\n")
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


def write_json(model, fh):
    """One JSON object: the header fields, then ``w0`` and ``features`` (sorted by id, each with id,
    level, w, v) of a one-sample model, or ``draws``, a list of {w0, features}, of an MCMC model."""
    samples = draws(model)
    head = {"format": "rafm-dump", "format_version": 2, "model": model.kind, "task": model.task,
            "ranks": list(model.ranks), "target_min": model.target_min, "target_max": model.target_max,
            "link": model.link, "samples": len(samples)}
    fh.write(json.dumps(head)[:-1])
    if len(samples) == 1:
        fh.write(", ")
        _write_draw(model, fh)
        fh.write("}\n")
        return
    fh.write(', "draws": [')
    for s, draw in enumerate(samples):
        fh.write(("," if s else "") + "\n{")
        _write_draw(draw, fh)
        fh.write("}")
    fh.write("\n]}\n")


def _write_draw(model, fh):
    """``"w0": ..., "features": [...]`` of one sample, one feature a line."""
    fh.write(f'"w0": {json.dumps(model.w0)}, "features": [')
    order = np.argsort(model.feature_ids, kind="stable")
    for n, j in enumerate(order):
        vs = ", ".join("[" + ", ".join(FLOAT % x for x in v) + "]" for v in vectors(model, j))
        fh.write(("," if n else "") + f'\n {{"id": {int(model.feature_ids[j])}, '
                 f'"level": {int(model.levels[j])}, "w": {FLOAT % model.w[j]}, "v": [{vs}]}}')
    fh.write("\n]")


TEXT_SECTIONS = ("#global bias W0", "#unary interactions Wj", "#pairwise interactions Vj,f", "#rafm ", "#levels kj")


def _one_shape(shown, lines, values, expected, what):
    """Every line of a section holds ``expected`` values, else InputError
    ``FILE:LINE: expected n WHAT values, found k (line)`` (``shown``: the file's printable name)."""
    for (line_no, text), row in zip(lines, values):
        if len(row) != expected:
            raise InputError(f"{shown}:{line_no}: expected {expected} {what} value{'s' * (expected > 1)}, "
                             f"found {len(row)} ({printable(text, 60)})")


def _numbers(shown, lines, dtype=np.float32):
    """The values of a text model's section ``lines`` ((line number, text) pairs), a list per line;
    a token that is not a number, not finite or beyond ``dtype`` (3.5e38 is no float32) is an
    InputError ``FILE:LINE: what (token)``."""
    largest = float(np.finfo(dtype).max)
    values = []
    for line_no, text in lines:
        row = []
        for token in text.split():
            try:
                value = float(token)
            except ValueError:
                raise InputError(f"{shown}:{line_no}: not a number ({printable(token, 60)})") from None
            if not abs(value) <= largest:
                what = "value is not finite" if not math.isfinite(value) else f"value beyond {np.dtype(dtype).name}"
                raise InputError(f"{shown}:{line_no}: {what} ({printable(token, 60)})")
            row.append(value)
        values.append(row)
    return values


def _section(shown, lines, what, width=None, dtype=np.float32):
    """The values of a text model's section ``lines`` ((line number, text) pairs) as an [n, width]
    float64 array (width None: the first line's count). numpy parses the section at once; where
    it stops early, or a line holds another count or a value beyond ``dtype``, the line-by-line
    reading (:func:`_numbers`, :func:`_one_shape`) names the line."""
    counts = [len(text.split()) for _, text in lines]
    expected = width or counts[0] or 1
    if all(count == expected for count in counts):
        try:
            with warnings.catch_warnings():  # numpy warns or raises where the text stops being numbers
                warnings.simplefilter("ignore")
                values = np.fromstring(" ".join(text for _, text in lines), dtype=np.float64, sep=" ")
        except ValueError:
            values = np.empty(0)
        if values.shape[0] == expected * len(lines) and np.all(np.abs(values) <= np.finfo(dtype).max):
            return values.reshape(len(lines), expected)
    rows = _numbers(shown, lines, dtype)
    _one_shape(shown, lines, rows, expected, what)
    return np.array(rows, dtype=np.float64)  # what float() reads and numpy does not ("1_000")


def read_text(path, raw=None):
    """An FM Model from libFM's text layout (``libFM -save_model`` or ``rafm dump`` of an FM), read
    from ``path`` or given as its bytes ``raw``.

    Line j of each section is feature id j; every id becomes a feature of
    level 1; a missing bias or weights section is zeros. The task, clipping
    range and link come from rafm's last line when present; otherwise the
    task is None (the caller's), the range empty (the new training data's)
    and the link logit. A dump of several MCMC samples is refused.
    """
    from rafmcli.model.files import LINKS, TASKS
    from rafmcli.model.layout import Model, aligned_copy

    sections, name, shown = {}, None, printable(path)
    raw = read_bytes(path, "model file") if raw is None else raw
    try:
        for line_no, line in enumerate(text_lines(raw, "ascii"), 1):
            if line.startswith("#rafm sample "):
                raise InputError(f"{shown}:{line_no}: '{printable(line, 60)}': a dump of an MCMC model's "
                                 f"samples cannot be loaded (its predictions average them); use its .rafm model file")
            if line.startswith("#"):
                if not line.startswith(TEXT_SECTIONS):
                    raise InputError(f"{shown}:{line_no}: not a section of a libFM or rafm text model "
                                     f"({printable(line, 60)})")
                name = line.split(" level ")[0] if line.startswith("#pairwise") else line
                sections[name] = []
            elif name is None:
                raise InputError(f"{shown}:{line_no}: not a model file (expected '#global bias W0' or "
                                 f"'#pairwise interactions Vj,f')")
            else:
                sections[name].append((line_no, line))
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown}: cannot read: {exc}") from None
    if "#levels kj" in sections:
        raise InputError(f"{shown}: a RaFM or DiFacto text dump cannot be loaded; use its .rafm model file")
    rows = sections.get("#pairwise interactions Vj,f")
    if not rows:
        raise InputError(f"{shown}: no '#pairwise interactions Vj,f' section: not a libFM model")
    meta = next((dict(kv.partition("=")[::2] for kv in n.split()[1:]) for n in sections if n.startswith("#rafm ")), {})
    weights = sections.get("#unary interactions Wj", [(0, "0")] * len(rows))
    bias = sections.get("#global bias W0") or [(0, "0")]
    V, w, w0 = _section(shown, rows, "factor"), _section(shown, weights, "weight", 1), \
        _section(shown, bias, "bias", 1, np.float64)
    if len(bias) > 1:
        raise InputError(f"{shown}:{bias[1][0]}: a second bias line ({printable(bias[1][1], 60)})")
    if len(w) != len(V):
        raise InputError(f"{shown}: damaged libFM model ({len(w):,} unary weights for {len(V):,} rows of "
                         f"factors)")
    try:
        target = float(meta.get("target_min", "inf")), float(meta.get("target_max", "-inf"))
    except ValueError as exc:
        raise InputError(f"{shown}: not a number in the model ({exc})") from None
    if target != (math.inf, -math.inf) and not all(math.isfinite(t) for t in target):  # (inf, -inf): none given
        raise InputError(f"{shown}: damaged rafm line: target_min and target_max must be finite "
                         f"({meta.get('target_min')}, {meta.get('target_max')})")
    V, w, w0 = V.astype(np.float32), w.astype(np.float32).ravel(), float(w0[0, 0])
    if meta.get("task", "r") not in TASKS or meta.get("link", "logit") not in LINKS or meta.get("samples", "1") != "1":
        raise InputError(f"{shown}: damaged rafm line: task, link or samples not one of rafm's")
    n = V.shape[0]
    return Model("fm", meta.get("task"), (V.shape[1],), np.arange(n, dtype=np.int32), np.ones(n, dtype=np.int8),
                 w0, w, aligned_copy(V.ravel()), *target, link=meta.get("link", "logit"))
