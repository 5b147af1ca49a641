"""Slow, obviously correct references that the fast code is checked against.

* ``read_plain``: a plain-Python libSVM/libFM and libFFM reader (regular
  expressions and bytes.split per line) with every rule of rafm's reader,
  errors included.
* FM, RaFM and DiFacto predictions as the O(n^2) pair loop of paper
  Eq. 1, 4 and 5, and its gradient.
* Each training variant's objective for one row, stop-gradients included
  (``objective``), its gradient by formula (``row_gradient``), and the
  closed-form SGD, AdaGrad and Adam steps (``optimizer_step``), all float64.
"""

import re

import numpy as np

LINE_END = re.compile(rb"\r\n|\r|\n")
NUMBER = re.compile(rb"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
INDEX = re.compile(rb"[0-9]+")
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_FIELD = (1 << 20) - 1


class PlainError(ValueError):
    """The first bad line of a file (1-based, counting LF, CRLF and lone CR)."""

    def __init__(self, line):
        super().__init__(f"bad line {line}")
        self.line = line


def read_plain(text):
    """Rows of a libFM text as (labels, [sorted [(idx, value), ...] per row]).

    Same rules as rafm's reader: lines end at LF, CRLF or CR; '#' starts a
    comment; blank lines are skipped; ``idx`` alone means 1; values are
    float32 and zeros are dropped; a repeated index holds the sum of its
    values (float64 in file order, then float32), dropped if 0. ``text`` is
    str or bytes; a bad line raises PlainError.
    """
    return read_plain_counted(text)[:2]


def read_plain_counted(text):
    """``read_plain`` plus the number of rows that repeat an index."""
    return read_plain_fields(text)[:3]


def read_plain_fields(text):
    """``read_plain_counted`` plus the libFFM fields: {index: field} of the stored
    entries, or None for a libSVM/libFM file.

    libFFM tokens are ``field:idx:value`` (all three parts; field <=
    MAX_FIELD); the first token decides the file's kind and a token of the
    other kind is an error; an index repeated in a row with two fields (among
    its non-zero tokens) is an error, and so is a stored index whose field
    differs from the one it had on an earlier line.
    """
    data = text.encode() if isinstance(text, str) else text
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    labels, rows, repeats = [], [], 0
    kind, fields = None, {}
    for line_no, line in enumerate(LINE_END.split(data), 1):
        tokens = line.split(b"#")[0].split()
        if not tokens:
            continue
        if not NUMBER.fullmatch(tokens[0]) or not np.isfinite(float(tokens[0])):
            raise PlainError(line_no)
        sums, row_fields = {}, {}
        for tok in tokens[1:]:
            parts = tok.split(b":")
            ffm = len(parts) >= 3
            if kind is not None and ffm != kind:
                raise PlainError(line_no)
            kind = ffm
            if ffm:
                if len(parts) != 3 or not INDEX.fullmatch(parts[0]) or int(parts[0]) > MAX_FIELD:
                    raise PlainError(line_no)
                field, idx, val, colon = int(parts[0]), parts[1], parts[2], True
            else:
                field, (idx, colon, val) = None, tok.partition(b":")
            if not INDEX.fullmatch(idx) or int(idx) > 2**31 - 1:
                raise PlainError(line_no)
            if colon and not (NUMBER.fullmatch(val) and abs(float(val)) <= FLOAT32_MAX):
                raise PlainError(line_no)
            value = float(np.float32(float(val))) if colon else 1.0
            if value != 0.0:
                sums.setdefault(int(idx), []).append(value)
                if row_fields.setdefault(int(idx), field) != field:
                    raise PlainError(line_no)
        row = []
        for idx, parts in sums.items():
            total = 0.0
            for v in parts:
                total += v
            if not abs(total) <= FLOAT32_MAX:
                raise PlainError(line_no)
            if float(np.float32(total)) != 0.0:
                row.append((idx, float(np.float32(total))))
        for idx, _ in sorted(row):
            if kind and fields.setdefault(idx, row_fields[idx]) != row_fields[idx]:
                raise PlainError(line_no)
        repeats += any(len(parts) > 1 for parts in sums.values())
        labels.append(float(tokens[0]))
        rows.append(sorted(row))
    return labels, rows, repeats, (fields if kind else None)


def csr_rows(data):
    """A Dataset's rows in the ``read_plain`` form."""
    values = data.row_values()
    out = []
    for r in range(data.n_rows):
        a, b = data.indptr[r], data.indptr[r + 1]
        out.append([(int(i), float(v)) for i, v in zip(data.indices[a:b], values[a:b])])
    return out


def factor(V, widths, offsets, i, level):
    """Row i of level block ``level`` (1-based) of a flat factor array."""
    width = widths[level - 1]
    start = offsets[level - 1] + i * width
    return V[start:start + width]


def pair_loop(kind, ids, vals, levels, ranks, V, cap=None):
    """Sum_{i<j} <v_i, v_j> x_i x_j by the pair loop (paper Eq. 1, 4, 5).

    RaFM: the pair uses level k_ij = min(k_i, k_j) (capped at ``cap``: the
    truncated B_{1,cap}). DiFacto: one vector per feature (its blocks 1..k_i
    concatenated), pairs use the first min(D_{k_i}, D_{k_j}) coordinates
    (capped at D_cap).
    """
    V = np.asarray(V, dtype=np.float64)
    widths = list(ranks) if kind != "difacto" else list(np.diff(ranks, prepend=0))
    sizes = [int((np.asarray(levels) >= l).sum()) for l in range(1, len(ranks) + 1)]
    offsets = np.concatenate([[0], np.cumsum(np.multiply(sizes, widths))[:-1]])
    total = 0.0
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            i, j = ids[a], ids[b]
            k = min(levels[i], levels[j])
            if cap is not None:
                k = min(k, cap)
            if kind == "difacto":
                vi = np.concatenate([factor(V, widths, offsets, i, l) for l in range(1, k + 1)])
                vj = np.concatenate([factor(V, widths, offsets, j, l) for l in range(1, k + 1)])
            else:
                vi, vj = factor(V, widths, offsets, i, k), factor(V, widths, offsets, j, k)
            total += float(vi @ vj) * vals[a] * vals[b]
    return total


def read_word2vec(text):
    """A word2vec text file (gensim's ``binary=False`` format) as {token: vector}, checked
    against its ``count dim`` header."""
    lines = text.rstrip("\n").split("\n")
    count, dim = (int(t) for t in lines[0].split())
    vectors = {}
    for line in lines[1:]:
        token, *numbers = line.rstrip().split(" ")
        assert len(numbers) == dim, line
        vectors[token] = np.array([float(v) for v in numbers], dtype=np.float32)
    assert len(vectors) == count == len(lines) - 1
    return vectors


def implicit_loss(y, shift, kind):
    """Loss of a positive y[0] and its negatives y[1:] on s = y - shift (kernels/implicit.py)."""
    s = np.asarray(y, dtype=np.float64) - np.asarray(shift, dtype=np.float64)
    if kind == "logistic":
        return float(np.log1p(np.exp(-s[0])) + np.log1p(np.exp(s[1:])).sum())
    top = s.max()
    return float(top + np.log(np.exp(s - top).sum()) - s[0])


def group_values(rows, group_of):
    """Each row's group values as tuples of sorted (id, value): {group: [tuple per row]}."""
    out = {}
    n_groups = int(max(group_of)) + 1
    for g in range(n_groups):
        out[g] = [tuple(sorted((i, float(np.float32(x))) for i, x in row if group_of[i] == g)) for row in rows]
    return out


def _layout(kind, ranks, levels):
    widths = list(ranks) if kind != "difacto" else list(np.diff(ranks, prepend=0))
    sizes = [int((np.asarray(levels) >= l).sum()) for l in range(1, len(ranks) + 1)]
    offsets = np.concatenate([[0], np.cumsum(np.multiply(sizes, widths))[:-1]]).astype(int)
    return widths, offsets


def coordinates(kind, ranks, levels, i, k):
    """Flat indices in V of feature i's vector at level k (RaFM) or of blocks 1..k (DiFacto)."""
    widths, offsets = _layout(kind, ranks, levels)
    if kind == "difacto":
        return np.concatenate([offsets[l - 1] + i * widths[l - 1] + np.arange(widths[l - 1])
                               for l in range(1, k + 1)])
    return offsets[k - 1] + i * widths[k - 1] + np.arange(widths[k - 1])


def pair_loop_gradient(kind, ids, vals, levels, ranks, V, cap=None):
    """d/dV of ``pair_loop``: each pair (i, j) adds v_j x_i x_j to the coordinates of v_i it uses."""
    V = np.asarray(V, dtype=np.float64)
    grad = np.zeros_like(V)
    for a in range(len(ids)):
        for b in range(len(ids)):
            if a == b:
                continue
            i, j = ids[a], ids[b]
            k = min(levels[i], levels[j])
            if cap is not None:
                k = min(k, cap)
            vj = V[coordinates(kind, ranks, levels, j, k)]
            grad[coordinates(kind, ranks, levels, i, k)] += vj * vals[a] * vals[b]
    return grad


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def loss(task, y_hat, y):
    """Square loss / 2 or logistic loss (label > 0 positive)."""
    if task == "r":
        return 0.5 * (y_hat - y) ** 2
    return np.logaddexp(0.0, -y_hat if y > 0 else y_hat)


def distill(task, a, b):
    """L(a, b) with b the fixed target: square / 2, or cross-entropy of sigma(a) against sigma(b)."""
    if task == "r":
        return 0.5 * (a - b) ** 2
    pb = _sigmoid(b)
    return pb * np.logaddexp(0.0, -a) + (1 - pb) * np.logaddexp(0.0, a)


def linear(w0, w, ids, vals):
    return w0 + sum(float(w[i]) * v for i, v in zip(ids, vals))


def dependent_mask(model):
    """True for coordinates of V that are dependent variables v_i^(l), l < k_i (RaFM only)."""
    mask = np.zeros(model.V.shape[0], dtype=bool)
    if model.kind != "rafm":
        return mask
    for i, k in enumerate(model.levels):
        for l in range(1, k):
            mask[coordinates("rafm", model.ranks, model.levels, i, l)] = True
    return mask


def objective(model, theta, theta0, ids, vals, y, variant, weight, group):
    """The loss a training step on parameter ``group`` descends, at parameters ``theta``.

    ``theta`` and ``theta0`` are (w0, w, V); quantities under stop-gradient are
    evaluated at ``theta0`` (a finite difference at theta = theta0 then gives
    the gradient with the stop-gradients). ``group`` is "bias", "linear",
    "free" or ("dependent", l). L2 is not included.

    * FM, DiFacto, and every group of RaFM "paper" except dependent ones: the
      main loss L(lin + B_{1,m}, y).
    * RaFM "paper", dependent v^(l): L(lin + B_{1,l}, stopgrad(lin + B_{1,l+1})).
    * RaFM "authors" (RaFM.py): main + c Sum_p L(lin + B_{1,p}', stopgrad(lin + B_{1,p+1}))
      where in B_{1,p}' only level p's dependent vectors (features with
      k_i > p) are live: the lower levels and level p's free vectors are
      stopped.
    * RaFM "cascade": main + c Sum_p L(stopgrad(lin) + B_{1,p}, stopgrad(lin + B_{1,p+1})).
    """
    task, kind, ranks, levels = model.task, model.kind, model.ranks, model.levels
    w0, w, V = theta
    m = len(ranks)
    lin = linear(w0, w, ids, vals)
    lin0 = linear(theta0[0], theta0[1], ids, vals)
    main = loss(task, lin + pair_loop(kind, ids, vals, levels, ranks, V), y)
    if kind != "rafm" or m == 1 or variant == "paper" and group[0] != "dependent":
        return main
    target = [None] + [lin0 + pair_loop(kind, ids, vals, levels, ranks, theta0[2], cap=p)
                       for p in range(1, m + 1)]
    if variant == "paper":
        l = group[1]
        return distill(task, lin + pair_loop(kind, ids, vals, levels, ranks, V, cap=l), target[l + 1])
    total = main
    for p in range(1, m):
        if variant == "authors":
            live = np.asarray(theta0[2], dtype=np.float64).copy()
            for i in range(len(levels)):
                if levels[i] > p:
                    c = coordinates(kind, ranks, levels, i, p)
                    live[c] = V[c]
            a = lin + pair_loop(kind, ids, vals, levels, ranks, live, cap=p)
        else:
            a = lin0 + pair_loop(kind, ids, vals, levels, ranks, V, cap=p)
        total += weight * distill(task, a, target[p + 1])
    return total


def row_gradient(model, ids, vals, y, variant, weight, reg, y_range=None):
    """(d w0, d w, d V) of one row by formula from the pair loop, L2 included.

    With g = dL/dy_hat (regression: y_hat clipped to ``y_range`` first, as
    training does) and d_p = L'(B_{1,p}, B_{1,p+1}):
    paper: free g dB_m, dependent v^(l): d_l dB_l, bias/linear g;
    authors: free g dB_m, dependent v^(l): g dB_m + c d_l dB_l, bias/linear g + c Sum d_p;
    cascade: g dB_m + c Sum_p d_p dB_p for every factor, bias/linear g.
    ``reg`` = (r0, r1, (r2 per level)) applied to the parameters the row touches.
    """
    task, kind, ranks, levels = model.task, model.kind, model.ranks, model.levels
    V = np.asarray(model.V, dtype=np.float64)
    m = len(ranks)
    lin = linear(model.w0, model.w, ids, vals)
    truncated = [None] + [pair_loop(kind, ids, vals, levels, ranks, V, cap=p) for p in range(1, m + 1)]
    y_hat = lin + truncated[m]
    if task == "r":
        if y_range is not None:
            y_hat = min(max(y_hat, y_range[0]), y_range[1])
        g = y_hat - y
    else:
        g = _sigmoid(y_hat) - (1.0 if y > 0 else 0.0)
    dB = [None] + [pair_loop_gradient(kind, ids, vals, levels, ranks, V, cap=p) for p in range(1, m + 1)]
    g_lin = g
    gV = g * dB[m]
    if kind == "rafm" and m > 1:
        d = [None] + [truncated[p] - truncated[p + 1] if task == "r"
                      else _sigmoid(lin + truncated[p]) - _sigmoid(lin + truncated[p + 1]) for p in range(1, m)]
        for p in range(1, m):
            dep = np.zeros(V.shape[0], dtype=bool)
            for i in range(len(levels)):
                if levels[i] > p:
                    dep[coordinates(kind, ranks, levels, i, p)] = True
            if variant == "paper":
                gV[dep] = d[p] * dB[p][dep]
            elif variant == "authors":
                gV[dep] += weight * d[p] * dB[p][dep]
                g_lin += weight * d[p]
            else:
                gV += weight * d[p] * dB[p]
    touched = np.zeros(V.shape[0], dtype=bool)
    for i in ids:
        touched[coordinates(kind, ranks, levels, i, levels[i]) if kind == "difacto" else
                np.concatenate([coordinates(kind, ranks, levels, i, l) for l in range(1, levels[i] + 1)])] = True
    per_coordinate = np.zeros(V.shape[0])
    for l in range(1, m + 1):
        widths, offsets = _layout(kind, ranks, levels)
        size = int((np.asarray(levels) >= l).sum())
        per_coordinate[offsets[l - 1]:offsets[l - 1] + size * widths[l - 1]] = reg[2][l - 1]
    gV += np.where(touched, per_coordinate * V, 0.0)
    gw = np.zeros(model.w.shape[0])
    for i, x in zip(ids, vals):
        gw[i] = g_lin * x + reg[1] * float(model.w[i])
    return g_lin + reg[0] * model.w0, gw, gV


def optimizer_step(method, p, grad, lr, state, t, beta1, beta2, eps):
    """One closed-form step of parameter(s) ``p``; returns (new p, new state).

    sgd: p - lr g. adagrad: a += g^2, p - lr g / (sqrt(a) + eps).
    adam (as TensorFlow's): m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
    p - lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps), t the step count.
    """
    p, grad = np.asarray(p, dtype=np.float64), np.asarray(grad, dtype=np.float64)
    if method == "sgd":
        return p - lr * grad, state
    if method == "adagrad":
        acc = state[0] + grad * grad
        return p - lr * grad / (np.sqrt(acc) + eps), (acc,)
    m1 = beta1 * state[0] + (1 - beta1) * grad
    m2 = beta2 * state[1] + (1 - beta2) * grad * grad
    rate = lr * np.sqrt(1 - beta2**t) / (1 - beta1**t)
    return p - rate * m1 / (np.sqrt(m2) + eps), (m1, m2)
