"""Apply a model to a Dataset: map feature ids, run the prediction kernel, finish per task."""

from typing import NamedTuple

import numpy as np

from rafmcli.model.layout import internal_indices

# the kernel modules predicting a Dataset and writing its values load (cli/predict.py preloads them)
KERNEL_MODULES = ("rafmcli.kernels.forward", "rafmcli.kernels.rows", "rafmcli.kernels.counting",
                  "rafmcli.kernels.format")


def kernel_rows(model, data):
    """CSR arrays in the model's internal ids, entries of unseen features dropped.

    Returns (indptr, indices, values, unseen occurrences, unseen distinct ids), the arrays
    read-only (kernels.read_only); ``values`` is empty when every value is 1.
    """
    from rafmcli.kernels import read_only
    from rafmcli.kernels.counting import distinct_count
    from rafmcli.kernels.rows import drop_unseen

    internal, misses = internal_indices(model, data.indices)
    values = np.asarray(data.values if data.values is not None else np.empty(0, dtype=np.float32))
    if not misses:
        return (*read_only(data.indptr, internal, values), 0, 0)
    indptr, internal, values, unseen = drop_unseen(np.asarray(data.indptr), internal, values,
                                                   np.asarray(data.indices))
    return (*read_only(indptr, internal, values), misses, int(distinct_count(unseen, int(unseen.max()) + 1)))


def finish(model, scores):
    """Probabilities for classification (sigmoid, or the normal CDF for a probit model); values
    clipped to the training range for regression; raw scores (log-odds of a row against noise)
    for implicit models. ``scores`` (a fresh float64 array of margins) is overwritten:
    fresh memory is not free."""
    if model.task == "implicit":
        return scores
    if model.task == "c":
        if model.link == "probit":
            from rafmcli.kernels.coordinate import probit_probability

            return probit_probability(scores)
        p = np.clip(scores, -700, 700, out=scores)  # 1 / (1 + exp(-s))
        np.negative(p, out=p)
        np.exp(p, out=p)
        p += 1.0
        return np.divide(1.0, p, out=p)
    return np.clip(scores, model.target_min, model.target_max, out=scores)


class Predictions(NamedTuple):
    """What applying a model to a Dataset gives."""

    values: np.ndarray    # per row: finished predictions, or margins when asked for raw ones
    unseen: int           # occurrences of features the model never saw
    unseen_distinct: int  # distinct ids among them


def _sample_margins(model, rows):
    """Raw scores of every kept draw (one: the model itself) for rows in ``kernel_rows`` form."""
    from rafmcli.kernels.forward import predict_scores

    indptr, indices, values = rows[:3]
    return _each_sample(model, lambda *params: predict_scores(indptr, indices, values, *params, model.nested))


def _each_sample(model, score):
    """score(lev, widths, offsets, V, w, w0) for every kept draw (one: the model itself)."""
    lev, widths, offsets = model.kernel_model()[:3]
    for w0, w, V in model.samples or [(model.w0, model.w, model.V)]:
        yield score(lev, widths, offsets, V, w, w0)


def margin_rows(model, rows):
    """Raw scores y(x) = w0 + Sum w_i x_i + pairwise part for rows in ``kernel_rows`` form
    (an MCMC model: their mean over its kept samples)."""
    return _mean(_sample_margins(model, rows))


def predict_rows(model, rows):
    """Predictions for rows already in ``kernel_rows`` form: an MCMC model averages its samples' predictions."""
    return _mean(finish(model, s) for s in _sample_margins(model, rows))


def _mean(arrays):
    """The float64 mean of fresh score arrays (one array: itself, no copy)."""
    total, count = None, 0
    for a in arrays:
        if total is None:
            total = a.astype(np.float64, copy=False)
        else:
            total += a
        count += 1
    return total if count == 1 else total / count


def refuse_nan(name, values):
    """Raise InputError if any prediction of the rows of ``name`` is NaN: no such line is written."""
    bad = np.flatnonzero(np.isnan(values))
    if bad.shape[0]:
        from rafmcli.errors import InputError, printable

        raise InputError(f"{printable(name)}: the model predicts NaN for {bad.shape[0]:,} rows (first: row "
                         f"{bad[0] + 1:,}); its scores overflow")


def predict_dataset(model, data, raw=False):
    """Predictions (margins when ``raw``) and the unseen-feature counts for a Dataset; NaN is an error.

    Straight from the rows' original ids through an id table (:func:`_by_id`), or,
    when the ids are too sparse for one, through ``kernel_rows``.
    """
    found = _by_id(model, data, raw)
    if found is None:
        rows = kernel_rows(model, data)
        found = Predictions(margin_rows(model, rows) if raw else predict_rows(model, rows), rows[3], rows[4])
    refuse_nan(data.path, found.values)
    return found


def _by_id(model, data, raw):
    """Predictions made by the kernel that maps ids as it goes (kernels/forward.py
    predict_scores_by_id), over a table of every id up to the largest the model or the
    rows hold; None when that table would exceed max(2^24, 4 non-zeros) entries."""
    from rafmcli.kernels.forward import UNSEEN_MET, predict_scores_by_id
    from rafmcli.kernels.rows import count_equal, id_table

    ids = np.asarray(data.indices)
    known = model.feature_ids
    top = max(int(known.max()) if known.shape[0] else 0, int(ids.max()) if ids.shape[0] else 0)
    if top >= max(1 << 24, 4 * ids.shape[0]):
        return None
    table = id_table(known, top + 1)
    values = np.asarray(data.values if data.values is not None else np.empty(0, dtype=np.float32))
    unseen = []

    def score(*params):
        margins, misses = predict_scores_by_id(np.asarray(data.indptr), ids, values, table, *params, model.nested)
        unseen.append(misses)
        return margins

    margins = _each_sample(model, score)
    scores = _mean(margins if raw else (finish(model, s) for s in margins))
    return Predictions(scores, unseen[0], count_equal(table, UNSEEN_MET))
