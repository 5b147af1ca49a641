"""Feature embeddings out of a model: word2vec text files and cosine neighbours.

Which vector a feature has depends on the model:

* FM: its one vector v_i.
* RaFM: one vector per level up to k_i. The default, all levels, puts
  each feature's v^(1), ..., v^(k_i) side by side (rank D_1 + ... + D_m,
  zeros for the levels above k_i): every feature has one, so rare and
  frequent features are comparable, and a frequent feature keeps its
  top-level vector. Level N alone gives the features of F_N = {i : k_i >= N}
  their v_i^(N), of rank D_N. On MovieLens item neighbours, level 1 alone is
  a poor neighbour finder for frequent items (their level-1 vector is only
  distilled from the level above) and all levels the best
  (bench/ml100k_implicit.py).
* DiFacto: one vector of rank D_{k_i}; all levels give it zero-padded to
  D_m; level N gives the features of F_N their first D_N coordinates (the
  part every pair within F_N uses).

A group's *values* (models trained with groups) get Feat2Vec's group
embedding phi_g(x_g) = Sum_{j in g} x_j v_j: an item that comes with its
genres is the sum of its own vector and its genres' (weighted by their
values), the vector the model scores it with (its pairwise term with a
context is <phi_g, Sum_context x_k v_k>). A one-hot value is its feature's
vector. A value is named by its features' ids, ascending, joined by
commas, as ``rafm recommend`` names it.

The text format is word2vec's (gensim ``KeyedVectors.load_word2vec_format``
with ``binary=False``): a line ``count dim``, then ``id v1 ... vD`` per
feature, ``id`` the feature's index in the data files.
"""

from dataclasses import dataclass

import numpy as np

VECTOR_FORMAT = "%.9g"  # float32 round-trips


@dataclass
class Embeddings:
    ids: np.ndarray       # original feature ids (of group values: a key, their value ids)
    internal: np.ndarray  # their internal indices in the model (of group values: value ids)
    vectors: np.ndarray   # float32 [n, D]
    labels: list | None = None  # group values: their names (feature ids joined by commas)

    def names(self):
        return self.labels if self.labels is not None else [str(i) for i in self.ids.tolist()]


def level_vectors(model, level=None):
    """Every feature's level-``level`` vector (module notes): internal indices 0..|F_N|-1.

    ``level`` None: all levels side by side (width Sum_l width_l), each feature's vectors
    at their level's place and zeros where it has none, so every feature has one and
    <u_i, u_j> = Sum over the levels both have of <v_i^(l), v_j^(l)>.
    """
    m = len(model.ranks)
    if level is None:
        out = np.zeros((model.levels.shape[0], int(model.widths.sum())), dtype=np.float32)
        col = 0
        for l in range(1, m + 1):
            block = model.factors(l)
            out[:block.shape[0], col:col + block.shape[1]] = block
            col += block.shape[1]
        return out
    if not 1 <= level <= m:
        raise ValueError(f"level must be 1..{m} for ranks {','.join(map(str, model.ranks))} ({level})")
    size = int(model.sizes[level - 1])
    if model.nested:
        return model.factors(level)
    return np.hstack([model.factors(l)[:size] for l in range(1, level + 1)])


def embeddings(model, level=None, group=None):
    """The level's vectors, of the features of ``group`` only if given (needs a model with groups)."""
    vectors = level_vectors(model, level)
    internal = np.arange(vectors.shape[0])
    if group is not None:
        internal = internal[model.vocabulary.group_of[internal] == group]
    return Embeddings(model.feature_ids[internal], internal, vectors[internal])


def value_embeddings(model, level, group):
    """Group ``group``'s values (those seen in training, as ``rafm recommend`` ranks them):
    phi_g = Sum_j x_j v_j^(level) over each value's features (module notes); values holding a
    feature without a level-``level`` vector are left out. ``ids``/``internal`` are value ids."""
    vectors = level_vectors(model, level)
    vocab = model.vocabulary
    lo, hi = vocab.candidates(group)
    lengths = np.diff(vocab.ptr[lo:hi + 1])
    feat, x = vocab.feat[vocab.ptr[lo]:vocab.ptr[hi]], vocab.x[vocab.ptr[lo]:vocab.ptr[hi]]
    owner = np.repeat(np.arange(hi - lo), lengths)
    missing = np.bincount(owner[feat >= vectors.shape[0]], minlength=hi - lo) > 0
    out = np.zeros((hi - lo, vectors.shape[1]), dtype=np.float64)
    have = feat < vectors.shape[0]
    np.add.at(out, owner[have], x[have, None].astype(np.float64) * vectors[feat[have]])
    keep = np.flatnonzero(~missing)
    labels = value_names(model, keep + lo)
    return Embeddings(keep + lo, keep + lo, out[keep].astype(np.float32), [labels[int(v)] for v in keep + lo])


def value_names(model, values):
    """{value id: its features' original ids, ascending, joined by commas} (rafm recommend's and
    rafm embed --group's name of a group value)."""
    v = model.vocabulary
    return {int(u): ",".join(map(str, np.sort(model.feature_ids[v.feat[v.ptr[u]:v.ptr[u + 1]]]).tolist()))
            for u in values}


def write_word2vec(fh, emb):
    """word2vec text: ``count dim``, then ``id v1 ... vD`` a line."""
    fh.write(f"{emb.vectors.shape[0]} {emb.vectors.shape[1]}\n")
    row_format = " ".join([VECTOR_FORMAT] * emb.vectors.shape[1])
    for i, v in zip(emb.names(), emb.vectors.astype(np.float64)):
        fh.write(f"{i} {row_format % tuple(v)}\n")


def value_of(model, internal):
    """The one value of its group that holds internal feature ``internal``, or None (it is in
    several, e.g. a genre, or in none)."""
    vocab = model.vocabulary
    where = np.flatnonzero(vocab.feat == internal)
    values = np.unique(np.searchsorted(vocab.ptr, where, side="right") - 1)
    return int(values[0]) if values.shape[0] == 1 else None


def most_similar(emb, vector, k, exclude=-1):
    """The k rows of ``emb`` nearest ``vector`` by cosine, row ``exclude`` left out, ties to the
    lower id: (names, cosines)."""
    vectors = emb.vectors.astype(np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.where(norms > 0, norms, 1.0)[:, None]
    query = np.asarray(vector, dtype=np.float64)
    cosine = unit @ (query / max(float(np.linalg.norm(query)), 1e-300))
    if exclude >= 0:
        cosine[exclude] = -np.inf
    order = np.lexsort((emb.ids, -cosine))[:min(k, emb.ids.shape[0] - (exclude >= 0))]
    names = emb.names()
    return [names[i] for i in order], cosine[order]
