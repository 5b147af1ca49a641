"""A trained FM, RaFM or DiFacto in memory: parameter layout and feature mapping.

Only active factors are stored (Proposition 1): features are renumbered so
that F_l is a prefix, and level l is one ``|F_l| x width_l`` float32 block of
the flat array ``V`` (width_l = D_l for RaFM, D_l - D_{l-1} for DiFacto).
"""

import os
from dataclasses import dataclass, field

import numpy as np

from rafmcli.options import ADAGRAD_METHODS, ADAGRAD_START

CACHE_LINE = 64  # bytes


def aligned_zeros(n, dtype):
    """``n`` zeros of ``dtype`` starting on a cache line.

    Factor rows of D float32 (D a multiple of 16) then cover D/16 lines, not
    D/16 + 1: a fifth fewer memory transfers per FM(64) row in training.
    """
    size = n * np.dtype(dtype).itemsize
    buf = np.zeros(size + CACHE_LINE, dtype=np.uint8)
    start = -buf.ctypes.data % CACHE_LINE
    return buf[start:start + size].view(dtype)


def aligned_copy(a):
    """A copy of the flat array ``a`` starting on a cache line."""
    out = aligned_zeros(a.shape[0], a.dtype)
    out[:] = a
    return out


# the accumulators each optimizer method keeps (OptimizerState's other arrays are empty)
STATE_ARRAYS = {"sgd": (), "sgda": (), "adagrad": ("V1", "w1"), "rowwise-adagrad": ("V1", "w1"),
                "adam": ("V1", "V2", "w1", "w2")}


@dataclass
class Model:
    kind: str                 # "fm", "rafm" or "difacto"
    task: str                 # "r", "c" or "implicit"
    ranks: tuple              # D_1 < ... < D_m (FM: one rank)
    feature_ids: np.ndarray   # int32: original id of internal feature j
    levels: np.ndarray        # int8: k_j in 1..m, non-increasing in j
    w0: float
    w: np.ndarray             # float32 [F]
    V: np.ndarray             # float32, flat, level blocks
    target_min: float
    target_max: float
    info: dict = field(default_factory=dict)
    vocabulary: object = None  # implicit models: group values (model.vocabulary.Vocabulary)
    link: str = "logit"       # classification: "logit" (sigmoid) or "probit" (normal CDF)
    samples: list = field(default_factory=list)  # MCMC: kept draws (w0, w, V); predictions average them
    state: object = None       # OptimizerState of the last epoch, kept to continue training

    @property
    def nested(self):
        return self.kind != "difacto"

    @property
    def sizes(self):
        """|F_l| for l = 1..m."""
        m = len(self.ranks)
        return np.array([(self.levels >= l).sum() for l in range(1, m + 1)], dtype=np.int64)

    @property
    def widths(self):
        d = np.asarray(self.ranks, dtype=np.int64)
        return d if self.nested else np.diff(d, prepend=0)

    @property
    def offsets(self):
        return np.concatenate([[0], np.cumsum(self.sizes * self.widths)[:-1]]).astype(np.int64)

    @property
    def rowwise_size(self):
        """Entries of row-wise AdaGrad's state: one a factor row, the row at V[start] at
        start // (narrowest width) (kernels/forward.row_unit)."""
        return self.V.shape[0] // int(self.widths.min())

    def state_sizes(self, method):
        """{V1, V2, w1, w2: entries} of ``method``'s optimizer state, 0 for what it does not keep
        (STATE_ARRAYS): V's size (row-wise AdaGrad's V1: :attr:`rowwise_size`) or w's."""
        full = {"V1": self.rowwise_size if method == "rowwise-adagrad" else self.V.shape[0],
                "V2": self.V.shape[0], "w1": self.w.shape[0], "w2": self.w.shape[0]}
        return {name: size if name in STATE_ARRAYS[method] else 0 for name, size in full.items()}

    def rowwise_index(self, level, rows):
        """Where row-wise AdaGrad's sums of internal features ``rows`` at ``level`` (1-based) are."""
        l = level - 1
        return (int(self.offsets[l]) + np.asarray(rows, dtype=np.int64) * int(self.widths[l])) // int(self.widths.min())

    @property
    def n_params(self):
        return 1 + self.w.shape[0] + self.V.shape[0]

    def factors(self, level):
        """The |F_l| x width_l block of level ``level`` (1-based), a view into V."""
        return self.block(self.V, level)

    def block(self, flat, level):
        """The |F_l| x width_l block of level ``level`` (1-based) of ``flat``, an array in V's
        layout (V, or element-wise optimizer state), as a view."""
        l = level - 1
        size, width, off = int(self.sizes[l]), int(self.widths[l]), int(self.offsets[l])
        return flat[off:off + size * width].reshape(size, width)

    def kernel_model(self):
        """The tuple the numba kernels take: (lev, widths, offsets, V, w, w0)."""
        return ((self.levels - 1).astype(np.int8), self.widths, self.offsets, self.V, self.w,
                np.array([self.w0]))


def _bytes(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024


def check_fits(model, copies=1):
    """Refuse a model whose parameters (float32: bias, w, V), times the ``copies`` of them its
    training holds at once (optimizer state, the best epoch's, MCMC's kept samples), exceed this
    machine's physical memory, before V is allocated: InputError with the count and bytes."""
    from rafmcli.errors import InputError

    n_factors = sum(int(s) * int(w) for s, w in zip(model.sizes, model.widths))
    params = 1 + model.feature_ids.shape[0] + n_factors
    need = 4 * params * copies
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return n_factors
    if need > memory:
        ranks = ",".join(str(d) for d in model.ranks)
        raise InputError(f"a {model.kind} model with ranks {ranks} on {model.feature_ids.shape[0]:,} features "
                         f"would have {params:,} parameters"
                         + (f", {copies} copies of them while training" if copies > 1 else "")
                         + f" ({_bytes(need)}), more than the {_bytes(memory)} of memory here; choose smaller ranks")
    return n_factors


def build(kind, task, ranks, feature_ids, levels, init_stdev, rng, w0, target_range, copies=1):
    """A freshly initialised model: features sorted by level (F_l prefixes), V ~ N(0, s).

    Its size (times ``copies``) is checked against the machine's memory first (:func:`check_fits`).
    """
    order = np.argsort(-np.asarray(levels), kind="stable")
    levels = np.asarray(levels, dtype=np.int8)[order]
    ids = np.asarray(feature_ids, dtype=np.int32)[order]
    model = Model(kind, task, tuple(ranks), ids, levels, float(w0),
                  np.zeros(ids.shape[0], dtype=np.float32), np.empty(0, dtype=np.float32),
                  float(target_range[0]), float(target_range[1]))
    n_factors = check_fits(model, copies)
    model.V = normal_factors(n_factors, init_stdev, rng)
    return model


@dataclass
class OptimizerState:
    """AdaGrad/Adam accumulators of a model: V1, V2 in V's layout (row-wise AdaGrad: V1 one
    sum a factor row, Model.rowwise_index), w1, w2 in w's, bias (2).

    Arrays a method does not use are empty; ``steps`` counts the rows trained
    (Adam's bias correction continues from it).
    """

    method: str
    V1: np.ndarray
    V2: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    bias: np.ndarray
    steps: int = 0
    ARRAYS = ("V1", "V2", "w1", "w2", "bias")

    def kernel_state(self):
        """The tuple the epoch kernels take: (accV1, accV2, accw1, accw2, acc0)."""
        return tuple(getattr(self, name) for name in self.ARRAYS)


def extend(model, feature_ids, levels, init_stdev, rng, target_range):
    """``model`` with the features of ``feature_ids`` it lacks added (to continue training).

    Known features keep their level, weights and factors; new ones get
    ``levels`` (Eq. 17 on the new data, one per id of ``feature_ids``), w = 0
    and factors ~ N(0, init_stdev). Optimizer state moves with its parameters
    and starts as a fresh run's for the new features. The target range is the union.
    """
    new = internal_indices(model, feature_ids)[0] < 0
    ids = np.concatenate([model.feature_ids, np.asarray(feature_ids, dtype=np.int32)[new]])
    lv = np.concatenate([model.levels, np.asarray(levels, dtype=np.int8)[new]])
    grown = build(model.kind, model.task, model.ranks, ids, lv, init_stdev, rng, model.w0,
                  (min(model.target_min, target_range[0]), max(model.target_max, target_range[1])))
    grown.info, grown.vocabulary = dict(model.info), model.vocabulary
    pos = internal_indices(grown, model.feature_ids)[0].astype(np.int64)

    def move_rows(old_flat, new_flat):
        for level in range(1, len(model.ranks) + 1):
            old = model.block(old_flat, level)
            grown.block(new_flat, level)[pos[:old.shape[0]]] = old  # F_l is a prefix of both orders

    move_rows(model.V, grown.V)
    grown.w[pos] = model.w
    if model.state is not None:
        st = model.state
        rowwise = st.method == "rowwise-adagrad"
        n = grown.state_sizes(st.method)
        grown.state = OptimizerState(st.method, aligned_zeros(n["V1"], st.V1.dtype),
                                     aligned_zeros(n["V2"], st.V2.dtype), np.zeros(n["w1"], st.w1.dtype),
                                     np.zeros(n["w2"], st.w2.dtype), st.bias.copy(), st.steps)
        if st.method in ADAGRAD_METHODS:  # new features' sums start where a fresh run's do
            grown.state.V1[:] = ADAGRAD_START
            grown.state.w1[:] = ADAGRAD_START
        for level in range(1, len(model.ranks) + 1) if rowwise and st.V1.shape[0] else ():
            size = int(model.sizes[level - 1])
            grown.state.V1[grown.rowwise_index(level, pos[:size])] = st.V1[model.rowwise_index(level, np.arange(size))]
        for old, new_arr in ((st.V1, grown.state.V1), (st.V2, grown.state.V2)) if not rowwise else ():
            if old.shape[0]:
                move_rows(old, new_arr)
        for old, new_arr in ((st.w1, grown.state.w1), (st.w2, grown.state.w2)):
            if old.shape[0]:
                new_arr[pos] = old
    return grown


def move_to_front(model, state, first):
    """Renumber ``model``'s internal features in place so that ``first`` (distinct internal ids
    of features of the top level) become 0 .. len(first) - 1 in that order, and the features
    they displace take the places they leave.

    Feature ids, weights, factors of every level and the optimizer ``state``'s per-feature
    arrays (accV1 and accV2 element-wise, or row-wise AdaGrad's accV1 one sum a factor row;
    accw1, accw2; not the bias's acc0) move with their features, so the model predicts as
    before; the top level's features are the first of every level block, so levels stay
    non-increasing.
    """
    first = np.asarray(first, dtype=np.int64)
    n = first.shape[0]
    levels = np.asarray(model.levels)
    if n and (first.min() < 0 or first.max() >= levels.shape[0] or np.unique(first).shape[0] < n):
        raise ValueError("features to move to the front must be distinct internal ids")
    if n and np.any(levels[first] != levels[0]):
        raise ValueError("only features of the top level can move to the front")
    is_first = np.zeros(levels.shape[0], dtype=bool)
    is_first[first] = True
    vacated = np.sort(first[first >= n])
    order = np.arange(levels.shape[0])  # new internal id -> old
    order[vacated] = np.flatnonzero(~is_first[:n])
    order[:n] = first
    places = np.concatenate([np.arange(n), vacated])
    moved = places[order[places] != places]
    src = order[moved]
    for a in (model.feature_ids, model.w, state[2], state[3]):
        if a.shape[0]:
            a[moved] = a[src]
    for a in (model.V, *state[:2]):
        for level in range(1, len(model.ranks) + 1) if a.shape[0] else ():
            if a.shape[0] == model.V.shape[0]:
                rows = model.block(a, level)
                rows[moved] = rows[src]
            else:  # row-wise AdaGrad
                a[model.rowwise_index(level, moved)] = a[model.rowwise_index(level, src)]


def normal_factors(n, stdev, rng):
    """``n`` float32 draws of N(0, stdev^2), cache-line aligned, drawn on every core
    (kernels/random.py) from one draw of ``rng``: the same for any number of threads."""
    from rafmcli.kernels.random import fill_normal

    V = aligned_zeros(n, np.float32)
    fill_normal(V, stdev, int(rng.integers(2**63)))
    return V


def internal_indices(model, ids):
    """(internal ids of the original ``ids``, -1 where the model never saw one; how many are -1).

    A lookup table over the model's id range (kernels/rows.py) unless that
    range is sparse and far larger than ``ids`` (then a binary search).
    """
    ids = np.asarray(ids)
    known = model.feature_ids
    if known.shape[0] == 0:
        return np.full(ids.shape, -1, dtype=np.int32), ids.shape[0]
    top = int(known.max())
    if top < max(1 << 24, 4 * ids.shape[0]):
        from rafmcli.kernels.rows import id_table, map_ids

        internal, misses = map_ids(ids, id_table(known, top + 1))
        return internal, int(misses)
    order = np.argsort(known)
    sorted_ids = known[order]
    pos = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.shape[0] - 1)
    internal = np.where(sorted_ids[pos] == ids, order[pos], -1).astype(np.int32)
    return internal, int((internal < 0).sum())
