"""Implicit models at work: recommendations and the ranking metrics of validation and predict.

* Fixed sampled negatives: each held-out positive with K negatives drawn once
  (Feat2Vec's sampler), so the validation loss and AUC do not jitter between
  epochs.
* A group's candidates: each row's own value of group G ranked among every
  value of G seen in training (HR@K, NDCG@K over the full catalog) and among
  100 values sampled uniformly (the protocol of much of the literature; it
  can mislead, Krichene and Rendle, KDD 2020). Values the row's context holds
  in the training data are left out of both, as in leave-one-out evaluation.
* ``recommend``: the top k values of group G for each context row.

Scores come from :mod:`rafmcli.kernels.recommend` (the context's sums once
per row, O(D) per candidate).
"""

from dataclasses import dataclass

import numpy as np

from rafmcli import metrics
from rafmcli.kernels import read_only

N_SAMPLED = 100


@dataclass
class SampledNegatives:
    """Positives (kernel rows) and their K fixed negatives each, row r's at r*K .. r*K+K-1."""

    positives: tuple
    negatives: tuple
    shift: np.ndarray  # [n, K+1]: log(K Q2(value)) of the resampled group, positive first
    K: int


def fixed_negatives(vocab, noise, rows, K, tries, seed):
    """Draw K negatives for each row of ``rows`` (kernel rows) once."""
    from rafmcli.kernels.sampling import draw_negatives, sort_rows_by_group, swap_group
    from rafmcli.model.vocabulary import rng_streams

    row_values = vocab.lookup(rows)
    groups, vals = draw_negatives(row_values, noise.group_ptr, noise.group_prob, noise.group_alias,
                                  noise.value_prob, noise.value_alias, noise.table, tries, K,
                                  rng_streams(seed, 1))
    feat, xs, parts = sort_rows_by_group(rows[0], rows[1], rows[2], vocab.group_of, vocab.n_groups)
    negatives = swap_group(feat, xs, parts, groups, vals, vocab.ptr, vocab.feat, vocab.x)
    logq = np.where(vals >= 0, noise.logq[np.maximum(vals, 0)], noise.log_unseen[groups][:, None])
    return SampledNegatives(rows[:3], negatives, logq + np.log(K), K)


def sampled_metrics(model, sampled, loss_kind, nce):
    """Mean loss (the training loss) and AUC of positives against their own negatives."""
    from rafmcli.kernels.implicit import sampled_losses
    from rafmcli.predict import predict_rows

    pos = predict_rows(model, sampled.positives)
    neg = predict_rows(model, sampled.negatives).reshape(-1, sampled.K)
    scores = np.concatenate([pos[:, None], neg], axis=1)
    shift = sampled.shift if nce else np.zeros_like(sampled.shift)
    loss = float(np.mean(sampled_losses(scores, shift, loss_kind))) if scores.shape[0] else float("nan")
    return {"loss": loss, "auc": metrics.sampled_auc(scores)}


def seen_values(train_values, query_values, group):
    """For each query row, the values of ``group`` that training rows with the same
    context (every other group's value) hold: (ptr, values) in CSR form."""
    from rafmcli.kernels.sampling import context_hashes

    train_keys = context_hashes(train_values, group)
    query_keys = context_hashes(query_values, group)
    order = np.argsort(train_keys, kind="stable")
    keys = train_keys[order]
    lo = np.searchsorted(keys, query_keys, "left")
    hi = np.searchsorted(keys, query_keys, "right")
    ptr = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
    take = np.repeat(lo - ptr[:-1], hi - lo) + np.arange(ptr[-1])
    return ptr, train_values[order[take], group].astype(np.int64)


@dataclass
class Contexts:
    """Rows split by group, with the values to leave out for each."""

    feat: np.ndarray
    xs: np.ndarray
    parts: np.ndarray      # [n, G+1]: row r's entries of group g are parts[r, g] .. parts[r, g+1]-1
    group: int
    excl_ptr: np.ndarray
    excl: np.ndarray


def contexts(vocab, rows, group, train_values=None):
    """Rows as contexts for ranking group ``group``; with the training rows' values,
    each context's values seen in training are excluded."""
    from rafmcli.kernels.sampling import sort_rows_by_group

    feat, xs, parts = sort_rows_by_group(rows[0], rows[1], rows[2], vocab.group_of, vocab.n_groups)
    feat, xs = read_only(feat, xs)  # read-only as the vocabulary's candidates: one numba type for both
    if train_values is None:
        ptr, excl = np.zeros(parts.shape[0] + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    else:
        ptr, excl = seen_values(train_values, vocab.lookup(rows), group)
    return Contexts(feat, xs, parts, group, ptr, excl)


def _kernel_model(model):
    lev, widths, offsets, V, w, w0 = model.kernel_model()
    return lev, widths, offsets, V, w, float(w0[0]), model.nested


def _constants(model, lo, hi):
    from rafmcli.kernels.recommend import candidate_constants

    v = model.vocabulary
    lev, widths, offsets, V, w, _, nested = _kernel_model(model)
    return candidate_constants(lo, hi, v.ptr, v.feat, v.x, lev, widths, offsets, V, w, nested)


def recommend(model, ctx, k):
    """(value ids [n, k], scores [n, k]) of the best values of ctx.group for each context; k is
    at most the group's number of values (a larger k allocated n x k for nothing)."""
    from rafmcli.kernels.recommend import top_k

    v = model.vocabulary
    lo, hi = v.candidates(ctx.group)
    k = max(1, min(k, hi - lo))
    const = _constants(model, lo, hi)
    return top_k(ctx.feat, ctx.xs, ctx.parts, ctx.group, lo, hi, const, v.ptr, v.feat, v.x, ctx.excl_ptr,
                 ctx.excl, k, *_kernel_model(model))


@dataclass
class RankingSet:
    """Held-out rows ranked on their own value of one group."""

    ctx: Contexts
    own: np.ndarray      # [n]: the row's value id of the group (-1 never seen)
    sampled: np.ndarray  # [n, N_SAMPLED]: candidates drawn once (-1 pads)


def ranking_set(vocab, rows, group, train_values, seed, n_sampled=N_SAMPLED):
    from rafmcli.kernels.sampling import sample_candidates
    from rafmcli.model.vocabulary import rng_streams

    ctx = contexts(vocab, rows, group, train_values)
    own = vocab.lookup(rows)[:, group].astype(np.int64)
    lo, hi = vocab.candidates(group)
    sampled = sample_candidates(lo, hi, own, ctx.excl_ptr, ctx.excl, n_sampled, rng_streams(seed, 1))
    return RankingSet(ctx, own, sampled)


def ranking_names(k):
    return (f"hr{k}", f"ndcg{k}", f"hr{k}_sampled", f"ndcg{k}_sampled")


def ranking_metrics(model, rset, k, n_threads=None):
    """HR@k and NDCG@k over every candidate and over the sampled ones, scored on ``n_threads``
    threads (None: every available core)."""
    from rafmcli.kernels.recommend import rank_counts

    v, ctx = model.vocabulary, rset.ctx
    lo, hi = v.candidates(ctx.group)
    const = _constants(model, lo, hi)
    counts = rank_counts(ctx.feat, ctx.xs, ctx.parts, ctx.group, lo, hi, const, v.ptr, v.feat, v.x,
                         ctx.excl_ptr, ctx.excl, rset.own, rset.sampled, *_kernel_model(model), n_threads=n_threads)
    full = metrics.hit_ndcg(counts[:, 0], counts[:, 1], k)
    sampled = metrics.hit_ndcg(counts[:, 2], counts[:, 3], k)
    return dict(zip(ranking_names(k), full + sampled))


LOSSES = {"logistic": 0, "softmax": 1}  # kernels.implicit.LOGISTIC, SOFTMAX


def evaluate(model, rows, group=None, k=10, seen=None):
    """The validation metrics of an implicit model on positives ``rows`` (kernel rows):
    loss and AUC against negatives drawn as in training (the model's own K,
    alpha1, alpha2, groups, loss and seed), and with ``group``, HR@k and NDCG@k
    of its values, leaving out those the ``seen`` rows' values (lookups) hold.
    On the validation file, with its training file as ``seen``, these are the
    validation metrics of training (whose fixed negatives reject nothing either)."""
    from rafmcli.model.vocabulary import training_noise
    from rafmcli.options import DEFAULTS

    trained = model.info.get("options", {})
    opts = {**vars(DEFAULTS), **trained, "eval_share": trained.get("eval_share", 0.0)}
    noise = training_noise(model.vocabulary, opts)
    sampled = fixed_negatives(model.vocabulary, noise, rows, opts["negatives"], 0, opts["seed"] + 1)
    out = sampled_metrics(model, sampled, LOSSES[opts["loss"]], opts["nce"])
    if group is not None:
        rset = ranking_set(model.vocabulary, rows, group, seen, opts["seed"] + 2)
        out.update(ranking_metrics(model, rset, k))
    return out
