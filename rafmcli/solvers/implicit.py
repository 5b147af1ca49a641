"""Implicit training (positives only, Feat2Vec negatives): epochs, validation, early stopping.

The kernels (:mod:`rafmcli.kernels.implicit`) run whole epochs; this module
builds the group values and noise tables, draws the validation negatives once
and gives each epoch its random streams. The epoch loop, the ``--rlog`` table,
early stopping and the best epoch are :class:`rafmcli.solvers.sgd.Training`'s.
"""

import math
from dataclasses import asdict

import numpy as np

from rafmcli import ranking
from rafmcli.errors import InputError
from rafmcli.kernels import implicit as K
from rafmcli.model.layout import build
from rafmcli.model.vocabulary import build_vocabulary, rng_streams, training_noise
from rafmcli.options import per_level
from rafmcli.predict import kernel_rows
from rafmcli.solvers.sgd import METHODS, VARIANTS, Log, Training, feature_levels, hyper_vector, optimizer_state
from rafmcli.threads import for_work

LOSSES = ranking.LOSSES
REDRAWS = 20  # --reject-positives: a negative that is a training row is drawn again up to this often


def metric_names(opts, ranked):
    names = ("loss", "auc")
    return names + ranking.ranking_names(opts.top_k) if ranked else names


def watched(opts, ranked):
    """(metric, sign): early stopping minimises sign * metric."""
    return (f"ndcg{opts.top_k}", -1.0) if ranked else ("loss", 1.0)


class ImplicitTraining(Training):
    """An implicit run: the epoch loop, early stopping and best-epoch keeping of
    :class:`rafmcli.solvers.sgd.Training`, with Feat2Vec epochs, sampled and
    ranking validation metrics, and the model's group values."""

    MIN_ROWS_PER_THREAD = 2_000  # each positive row scores 1 + negatives rows: threads pay sooner

    def __init__(self, data, groups, opts, validation=None, levels_override=None):
        self.opts = opts
        self.n_threads = for_work(opts.threads, data.n_rows, self.MIN_ROWS_PER_THREAD)  # the threads used
        self.rng = np.random.default_rng(opts.seed)
        levels = feature_levels(data, opts.ranks, levels_override)
        model = self.model = build(opts.model, "implicit", opts.ranks, data.feature_ids, levels, opts.init_stdev,
                                   self.rng, 0.0, (0.0, 0.0))
        assigned = groups.assign(model.feature_ids)
        rows = kernel_rows(model, data)
        vocab, self.row_values = build_vocabulary(rows, assigned.group, assigned.n_groups)
        model.vocabulary = vocab
        if opts.eval_group is not None:
            lo, hi = vocab.candidates(opts.eval_group) if opts.eval_group < vocab.n_groups else (0, 0)
            if hi <= lo:
                raise InputError(f"group {opts.eval_group} has no features in the training data")
        try:
            self.noise = training_noise(vocab, opts, self.row_values if opts.reject_positives else None)
        except ValueError as exc:
            raise InputError(f"{data.path}: {exc}") from None
        self.sampled = self.rset = None
        if validation is not None:
            vrows = kernel_rows(model, validation)
            # drawn without rejection, so that rafm predict --metrics (which has no training rows) gets them too
            self.sampled = ranking.fixed_negatives(vocab, self.noise, vrows, opts.negatives, 0, opts.seed + 1)
            if opts.eval_group is not None:
                self.rset = ranking.ranking_set(vocab, vrows, opts.eval_group, self.row_values, opts.seed + 2)
        self.state = optimizer_state(opts.method, model)
        self.hyper = hyper_vector(opts, model)
        self.reg_v = np.asarray(per_level(opts.reg_factors, len(opts.ranks)), dtype=np.float64)
        self.conf = np.zeros(K.N_CONF, dtype=np.int64)
        self.conf[K.C_NEGATIVES], self.conf[K.C_LOSS], self.conf[K.C_NCE] = opts.negatives, LOSSES[opts.loss], opts.nce
        self.conf[K.C_NESTED], self.conf[K.C_VARIANT] = model.nested, VARIANTS[opts.variant]
        self.conf[K.C_TRIES] = REDRAWS if opts.reject_positives else 0
        self.conf[K.C_REG_NEGATIVES] = opts.regular_negatives
        self.kmodel = model.kernel_model()
        self.vocab_k = (vocab.ptr, vocab.feat, vocab.x)
        self.watch, self.sign = watched(opts, self.rset is not None)
        self.n_rows = data.n_rows
        self.best = (math.inf, 0, None)
        self.history = []
        self.stopped = False

    @property
    def metric_names(self):
        return metric_names(self.opts, self.rset is not None)

    def train_epoch(self, order, epoch):
        """Every positive of ``order`` with its negatives; returns the mean loss per positive."""
        opts, n = self.opts, self.n_rows
        streams = rng_streams((opts.seed, epoch), self.n_threads)
        args = ((epoch - 1) * n, self.row_values, self.vocab_k, self.noise.kernel_tuple(), self.kmodel, self.state,
                self.hyper, self.reg_v, self.conf, streams, METHODS[opts.method])
        if self.n_threads > 1:
            loss = K.train_epoch_hogwild(order, self.n_threads, *args)
        else:
            loss = K.train_epoch(order, *args)
        self.model.w0 = float(self.kmodel[5][0])
        return loss / max(n, 1)

    def validate(self):
        """Loss and AUC on the fixed validation negatives, and the ranking metrics of --eval-group."""
        if self.sampled is None:
            return None
        row = ranking.sampled_metrics(self.model, self.sampled, LOSSES[self.opts.loss], self.opts.nce)
        if self.rset is not None:
            # on --threads' threads (0: every core), as training
            row.update(ranking.ranking_metrics(self.model, self.rset, self.opts.top_k, self.opts.threads or None))
        return row

    divergence_metric = "loss"

    def score(self, row):
        return self.sign * row[self.watch]

    def summary_line(self, model, history):
        return _summary_line(self.opts, model, history, model.info["training"])

    def result(self):
        """(model with the best epoch's parameters, history); model.info records options and metrics."""
        model, history = self.model, self.history
        if self.best[2] is not None:
            model.w0, model.w, model.V = self.best[2]
        steady = [h["seconds"] for h in history[1:]] or [h["seconds"] for h in history]  # epoch 1 compiles
        summary = {"epochs": len(history), "best_epoch": self.best_epoch,
                   "positives_per_second": self.n_rows / max(float(np.median(steady)), 1e-9)}
        if self.best[2] is not None:
            summary["validation"] = {k: history[self.best[1] - 1][k] for k in self.metric_names}
        model.info = {"options": asdict(self.opts), "training": summary}
        return model, history


def train(data, groups, opts, validation=None, levels_override=None, rlog=None, quiet=False,
          progress=True, echo=print):
    """Train on positive rows ``data`` with feature ``groups`` (io.groups.Groups or
    FieldGroups); returns (model, history of per-epoch dicts). ``rlog``: a text
    file for the per-epoch table, or None.

    With ``validation`` (positives), keeps the best epoch by validation NDCG@k
    of ``opts.eval_group`` (or, without one, by the validation loss) and stops
    after ``opts.early_stop`` epochs without improvement.
    """
    run = ImplicitTraining(data, groups, opts, validation, levels_override)
    return run.run(Log(rlog, "implicit", run.metric_names), progress, quiet, echo, desc="implicit")


def _summary_line(opts, model, history, summary):
    text = (f"{opts.model} implicit: {model.n_params:,} parameters, {summary['epochs']} epochs, "
            f"{sum(h['seconds'] for h in history):.2f}s ({summary['positives_per_second']:,.0f} positives/s "
            f"with {opts.negatives} negatives each)")
    if "validation" in summary:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in summary["validation"].items())
        text += f"; best epoch {summary['best_epoch']}: validation {shown}"
    return text
