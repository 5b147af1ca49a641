"""The training loop: epochs, validation, early stopping, logging (kernels do the rows).

As in UMAP's layouts, numba runs one whole epoch; this module owns the
random row order, the progress bar, the ``--rlog`` file and the decision to
stop.
"""

import math
import time
from dataclasses import asdict

import numpy as np

from rafmcli import metrics
from rafmcli.errors import DivergedError
from rafmcli.kernels import sgd as K
from rafmcli.levels import assign_levels
from rafmcli.model.layout import OptimizerState, aligned_copy, aligned_zeros, build, extend
from rafmcli.options import per_level
from rafmcli.predict import kernel_rows, predict_rows

METHODS = {"sgd": K.SGD, "adagrad": K.ADAGRAD, "adam": K.ADAM, "sgda": K.SGD}  # sgda: solvers/sgda.py
VARIANTS = {"paper": K.PAPER, "authors": K.AUTHORS, "cascade": K.CASCADE}


def holdout_split(data, fraction, seed):
    """(train, validation): a seeded random ``fraction`` of the rows held out, order kept.

    Returns (data, None) when the fraction leaves either side empty.
    """
    rows = np.random.default_rng(seed).permutation(data.n_rows)
    cut = int(round(fraction * data.n_rows))
    if not 0 < cut < data.n_rows:
        return data, None
    return data.subset(np.sort(rows[cut:])), data.subset(np.sort(rows[:cut]))


def initial_bias(task, labels):
    """Mean target (regression) or the log-odds of the positive rate (classification)."""
    if task == "r":
        return float(np.mean(labels))
    rate = float(np.clip(np.mean(labels > 0), 1e-6, 1 - 1e-6))
    return math.log(rate / (1 - rate))


def feature_levels(data, ranks, levels_override=None):
    """k_i of every feature of ``data`` by Eq. 17, then the ``--levels`` file's (ids, levels)."""
    levels = assign_levels(data.counts, ranks)
    if levels_override is not None:
        ids, lv = levels_override
        pos = np.searchsorted(data.feature_ids, ids)
        pos = np.minimum(pos, max(data.feature_ids.shape[0] - 1, 0))
        hit = data.feature_ids[pos] == ids if data.feature_ids.shape[0] else np.zeros(0, bool)
        levels[pos[hit]] = lv[hit]
    return levels


def hyper_vector(opts, model):
    """The kernels' float tunables (slots K.H_*)."""
    hyper = np.zeros(K.N_HYPER)
    hyper[K.H_LR] = opts.learn_rate
    hyper[K.H_LR_DEP] = opts.learn_rate if opts.dependent_rate is None else opts.dependent_rate
    hyper[K.H_REG0], hyper[K.H_REG1] = opts.reg_bias, opts.reg_linear
    hyper[K.H_DEP_WEIGHT] = opts.dependent_weight
    hyper[K.H_BETA1], hyper[K.H_BETA2], hyper[K.H_EPS] = opts.beta1, opts.beta2, opts.eps
    hyper[K.H_YMIN], hyper[K.H_YMAX] = model.target_min, model.target_max
    hyper[K.H_BIAS_ON], hyper[K.H_LINEAR_ON] = float(opts.bias), float(opts.linear)
    return hyper


def optimizer_state(method, model):
    """(accV1, accV2, accw1, accw2, acc0) sized for the method (empty when unused).

    accV1 and accV2 share V's layout and its cache-line alignment.
    """
    one, two = method in ("adagrad", "adam"), method == "adam"
    return (aligned_zeros(model.V.shape[0] if one else 0, model.V.dtype),
            aligned_zeros(model.V.shape[0] if two else 0, model.V.dtype),
            np.zeros(model.w.shape[0] if one else 0, dtype=model.w.dtype),
            np.zeros(model.w.shape[0] if two else 0, dtype=model.w.dtype),
            np.zeros(2))


class Log:
    """The tab-separated --rlog table: a header, then one row per epoch (NaN if missing).

    ``fh`` is a writable text file (the CLI stages it: a temporary file renamed
    at the end, or a stream written as training goes) or None for no log.
    """

    def __init__(self, fh, task, metric_names=None):
        self.columns = ("epoch", "seconds", "train_loss") + tuple(metric_names or metrics.names(task))
        self.fh = fh
        if self.fh:
            self.fh.write("\t".join(self.columns) + "\n")
            self.fh.flush()

    def write(self, row):
        if self.fh:
            self.fh.write("\t".join(_cell(row.get(c, float("nan"))) for c in self.columns) + "\n")
            self.fh.flush()


def _cell(value):
    if isinstance(value, int):
        return str(value)
    return "NaN" if value is None or not math.isfinite(value) else f"{value:.6g}"


def train(data, opts, validation=None, levels_override=None, rlog=None, quiet=False,
          progress=True, echo=print, groups=None, init=None):
    """Train a model on ``data``; returns (model, history of per-epoch dicts).

    ``opts.method`` sgda runs :class:`rafmcli.solvers.sgda.AdaptiveStep` epochs (it needs
    ``validation``), with L2 weights per group of ``groups`` (a GroupAssignment).

    ``init``: a trained Model to continue from (same task, kind and ranks):
    its features keep their levels and parameters, features new in ``data``
    get Eq. 17 levels and fresh factors (:func:`rafmcli.model.layout.extend`),
    and its optimizer state is used when it has one for ``opts.method``. The
    returned model carries the state of its last epoch (``model.state``).

    ``rlog``: a writable text file for the per-epoch table (see :class:`Log`), or None.

    With ``validation``, keeps the parameters of the epoch with the best
    validation metric and stops after ``opts.early_stop`` epochs without
    improvement (0: never stop early).
    """
    m = len(opts.ranks)
    rng = np.random.default_rng(opts.seed)
    levels = feature_levels(data, opts.ranks, levels_override)
    labels = np.asarray(data.labels, dtype=np.float64)
    if init is None:
        w0 = initial_bias(opts.task, data.labels) if opts.bias else 0.0
        model = build(opts.model, opts.task, opts.ranks, data.feature_ids, levels, opts.init_stdev,
                      rng, w0, (labels.min(), labels.max()))
    else:
        model = extend(init, data.feature_ids, levels, opts.init_stdev, rng, (labels.min(), labels.max()))
    rows = kernel_rows(model, data)
    kdata = (rows[0], rows[1], rows[2], labels)
    vrows = kernel_rows(model, validation) if validation is not None else None
    kept = model.state is not None and model.state.method == opts.method
    state = model.state.kernel_state() if kept else optimizer_state(opts.method, model)
    steps = model.state.steps if kept else 0
    adaptive = None
    if opts.method == "sgda":
        from rafmcli.solvers.sgda import AdaptiveStep

        adaptive = AdaptiveStep(model, rows, labels, vrows, validation.labels, groups, opts,
                                np.argsort(-np.asarray(levels), kind="stable"))
    hyper = hyper_vector(opts, model)
    reg_v = np.asarray(per_level(opts.reg_factors, m), dtype=np.float64)
    kmodel = model.kernel_model()
    watch = metrics.early_stop_metric(opts.task, opts.metric)
    loss_name = metrics.early_stop_metric(opts.task)  # NaN here means divergence (AUC can be NaN)
    best = (math.inf, 0, None)
    history = []
    log = Log(rlog, opts.task)
    bar = None
    if progress and not quiet:
        from tqdm import tqdm

        bar = tqdm(total=opts.iters, unit="epoch", leave=False, desc=f"{opts.model} train",
                   disable=None)
    n = data.n_rows
    task = K.TASK_REGRESSION if opts.task == "r" else K.TASK_CLASSIFICATION
    try:
        for epoch in range(1, opts.iters + 1):
            start = time.perf_counter()
            order = rng.permutation(n).astype(np.int64)
            args = (steps + (epoch - 1) * n, kdata, kmodel, state, hyper, reg_v, task, model.nested,
                    VARIANTS[opts.variant], METHODS[opts.method])
            if adaptive is not None:
                loss = adaptive.epoch(order, epoch, kmodel[5])
            elif opts.threads > 1:
                loss = K.train_epoch_hogwild(order, opts.threads, *args)
            else:
                loss = K.train_epoch(order, *args)
            mean_loss = loss / max(n, 1)
            train_loss = math.sqrt(mean_loss) if opts.task == "r" else mean_loss
            model.w0 = float(kmodel[5][0])
            row = {"epoch": epoch, "seconds": time.perf_counter() - start, "train_loss": train_loss}
            if vrows is not None:
                row.update(metrics.evaluate(opts.task, validation.labels, predict_rows(model, vrows)))
            if not math.isfinite(train_loss) or (vrows is not None and not math.isfinite(row[loss_name])):
                raise DivergedError(
                    f"training diverged in epoch {epoch} (train loss {train_loss}); "
                    f"try a smaller --learn-rate (now {opts.learn_rate:g})")
            history.append(row)
            log.write(row)
            if bar is not None:
                shown = {"loss": f"{train_loss:.4f}"}
                if vrows is not None:
                    shown[f"val_{watch}"] = f"{row[watch]:.4f}"
                bar.set_postfix(shown, refresh=False)
                bar.update(1)
            if vrows is None:
                continue
            if metrics.loss_of(watch, row[watch]) < best[0]:
                best = (metrics.loss_of(watch, row[watch]), epoch, (model.w0, model.w.copy(), aligned_copy(model.V)))
            elif opts.early_stop and epoch - best[1] >= opts.early_stop:
                break
    finally:
        if bar is not None:
            bar.close()
    if best[2] is not None:
        model.w0, model.w, model.V = best[2]
    summary = {"epochs": len(history), "best_epoch": best[1] or len(history)}
    if best[2] is not None:
        summary["validation"] = {k: history[best[1] - 1][k] for k in metrics.names(opts.task)}
    if adaptive is not None:
        summary["regularisation"] = adaptive.summary()
    model.info = {"options": asdict(opts), "training": summary}
    model.state = OptimizerState(opts.method, *state, steps=steps + len(history) * n)
    if not quiet:
        echo(_summary_line(opts, model, history, summary))
    return model, history



def _summary_line(opts, model, history, summary):
    text = (f"{opts.model}: {model.n_params:,} parameters, {summary['epochs']} epochs, "
            f"{sum(h['seconds'] for h in history):.2f}s")
    if "validation" in summary:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in summary["validation"].items())
        text += f"; best epoch {summary['best_epoch']}: validation {shown}"
    return text
