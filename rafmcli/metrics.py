"""Evaluation metrics: RMSE and MAE for regression; logloss, AUC, accuracy for classification.

Classification labels follow libFM: a label > 0 is positive, anything else negative.
"""

import numpy as np

REGRESSION_METRICS = ("rmse", "mae")
CLASSIFICATION_METRICS = ("logloss", "auc", "accuracy")
PROB_EPS = 1e-15


def names(task):
    return REGRESSION_METRICS if task == "r" else CLASSIFICATION_METRICS


HIGHER_IS_BETTER = frozenset({"auc", "accuracy"})


def early_stop_metric(task, metric=None):
    """The validation metric early stopping and selection watch: ``metric``, or RMSE / logloss.

    Raises ValueError when ``metric`` is not one of the task's metrics.
    """
    if metric is None:
        return "rmse" if task == "r" else "logloss"
    if metric not in names(task):
        kind = "regression" if task == "r" else "classification"
        raise ValueError(f"--metric {metric} is not a {kind} metric (choose from {', '.join(names(task))})")
    return metric


def loss_of(metric, value):
    """``value`` of ``metric`` as a loss: lower is better (AUC and accuracy negated)."""
    return -value if metric in HIGHER_IS_BETTER else value


def auc(positive, scores):
    """Area under the ROC curve by the rank-sum formula, ties given average ranks."""
    positive = np.asarray(positive, dtype=bool)
    n_pos = int(positive.sum())
    n_neg = positive.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = np.asarray(scores)[order]
    ranks = np.empty(len(order))
    # average rank (1-based) over each run of equal scores
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(order)]])
    run_rank = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(run_rank, ends - starts)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def evaluate(task, labels, predictions):
    """Metrics of ``predictions`` (clipped values, or probabilities) against ``labels``."""
    labels = np.asarray(labels, dtype=np.float64)
    if labels.shape[0] == 0:
        return {k: float("nan") for k in names(task)}
    if task == "r":
        err = predictions - labels
        return {"rmse": float(np.sqrt(np.mean(err * err))), "mae": float(np.mean(np.abs(err)))}
    positive = labels > 0
    p = np.clip(predictions, PROB_EPS, 1 - PROB_EPS)
    logloss = -np.mean(np.where(positive, np.log(p), np.log1p(-p)))
    return {"logloss": float(logloss), "auc": auc(positive, predictions),
            "accuracy": float(np.mean((predictions > 0.5) == positive))}


def sampled_auc(scores):
    """AUC of each positive against its own sampled negatives: scores [n, 1+K], column 0
    the positive; the fraction of (positive, negative) pairs ordered right, ties half."""
    scores = np.asarray(scores)
    if scores.shape[0] == 0 or scores.shape[1] < 2:
        return float("nan")
    pos, neg = scores[:, :1], scores[:, 1:]
    return float(np.mean((pos > neg) + 0.5 * (pos == neg)))


def hit_ndcg(higher, ties, k):
    """Mean HR@k and NDCG@k of one relevant item per row (Krichene and Rendle, KDD 2020).

    ``higher[r]`` candidates score above row r's positive and ``ties[r]``
    equal it; the positive is placed uniformly among its ties, so a constant
    model scores no better than chance. The ideal DCG is 1.
    """
    higher = np.asarray(higher, dtype=np.int64)
    ties = np.asarray(ties, dtype=np.int64)
    if higher.shape[0] == 0:
        return float("nan"), float("nan")
    span = ties + 1
    hit = np.clip(k - higher, 0, span) / span
    discount = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(k) + 2.0))])
    first = np.minimum(higher, k)
    last = np.minimum(higher + span, k)
    dcg = (discount[last] - discount[first]) / span
    return float(hit.mean()), float(dcg.mean())
