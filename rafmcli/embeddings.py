"""Feature embeddings out of a model: word2vec text files and cosine neighbours.

Which vector a feature has depends on the model:

* FM: its one vector v_i.
* RaFM: one vector per level up to k_i. Level N (default 1) gives every
  feature of F_N = {i : k_i >= N} its v_i^(N), of rank D_N. Level 1 is the
  one every feature has, and the one every pair of features meets in (a pair
  interacts through level min(k_i, k_j), and the distillation of Algorithm 1
  pulls each lower level towards the levels above), so its vectors are
  comparable across rare and frequent features; a frequent feature's level-1
  vector is only that distillation, and its top level is the better
  neighbour finder (bench/ml100k_implicit.py).
* DiFacto: one vector of rank D_{k_i}; level N gives the features of F_N
  their first D_N coordinates (the part every pair within F_N uses).

The text format is word2vec's (gensim ``KeyedVectors.load_word2vec_format``
with ``binary=False``): a line ``count dim``, then ``id v1 ... vD`` per
feature, ``id`` the feature's index in the data files.
"""

from dataclasses import dataclass

import numpy as np

VECTOR_FORMAT = "%.9g"  # float32 round-trips


@dataclass
class Embeddings:
    ids: np.ndarray       # original feature ids
    internal: np.ndarray  # their internal indices in the model
    vectors: np.ndarray   # float32 [n, D]


def level_vectors(model, level):
    """Every feature's level-``level`` vector (module notes): internal indices 0..|F_N|-1."""
    m = len(model.ranks)
    if not 1 <= level <= m:
        raise ValueError(f"level must be 1..{m} for ranks {','.join(map(str, model.ranks))} ({level})")
    size = int(model.sizes[level - 1])
    if model.nested:
        return model.factors(level)
    return np.hstack([model.factors(l)[:size] for l in range(1, level + 1)])


def embeddings(model, level=1, group=None):
    """The level's vectors, of the features of ``group`` only if given (needs a model with groups)."""
    vectors = level_vectors(model, level)
    internal = np.arange(vectors.shape[0])
    if group is not None:
        internal = internal[model.vocabulary.group_of[internal] == group]
    return Embeddings(model.feature_ids[internal], internal, vectors[internal])


def write_word2vec(fh, emb):
    """word2vec text: ``count dim``, then ``id v1 ... vD`` a line."""
    fh.write(f"{emb.vectors.shape[0]} {emb.vectors.shape[1]}\n")
    row_format = " ".join([VECTOR_FORMAT] * emb.vectors.shape[1])
    for i, v in zip(emb.ids.tolist(), emb.vectors.astype(np.float64)):
        fh.write(f"{i} {row_format % tuple(v)}\n")


def most_similar(emb, query, k):
    """The k features of ``emb`` nearest ``query`` (an original id in ``emb``) by cosine,
    the query left out, ties to the lower id: (ids, cosines)."""
    vectors = emb.vectors.astype(np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.where(norms > 0, norms, 1.0)[:, None]
    where = np.flatnonzero(emb.ids == query)[0]
    cosine = unit @ unit[where]
    cosine[where] = -np.inf
    order = np.lexsort((emb.ids, -cosine))[:min(k, emb.ids.shape[0] - 1)]
    return emb.ids[order], cosine[order]
