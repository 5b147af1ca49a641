"""The training loop: epochs, validation, early stopping, logging (kernels do the rows).

As in UMAP's layouts, numba runs one whole epoch; this module owns the
random row order, the progress bar, the ``--rlog`` file and the decision to
stop.
"""

import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from rafmcli import metrics
from rafmcli.errors import DivergedError
from rafmcli.kernels import read_only
from rafmcli.kernels import sgd as K
from rafmcli.kernels.random import shuffled
from rafmcli.levels import assign_levels
from rafmcli.model.layout import (
    STATE_ARRAYS,
    OptimizerState,
    aligned_copy,
    aligned_zeros,
    build,
    extend,
    internal_indices,
    move_to_front,
)
from rafmcli.options import ADAGRAD_METHODS, ADAGRAD_START, STEP_METHODS, per_level
from rafmcli.predict import kernel_rows, predict_rows
from rafmcli.signals import raise_lost
from rafmcli.threads import for_work

METHODS = {"sgd": K.SGD, "adagrad": K.ADAGRAD, "rowwise-adagrad": K.ROWWISE, "adam": K.ADAM,
           "sgda": K.SGD}  # sgda: solvers/sgda.py
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


def internal_counts(model, data):
    """Each internal feature of ``model``'s occurrences in ``data`` (0 for one it lacks)."""
    internal = internal_indices(model, data.feature_ids)[0]
    counts = np.zeros(model.feature_ids.shape[0], dtype=np.int64)
    seen = internal >= 0
    counts[internal[seen]] = np.asarray(data.counts)[seen]
    return counts


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

    accV1 and accV2 share V's layout and its cache-line alignment (row-wise AdaGrad:
    accV1 one sum a factor row, Model.rowwise_index); AdaGrad's sums start at
    ADAGRAD_START (options.py), Adam's moments at 0.
    """
    n = model.state_sizes(method)
    state = (aligned_zeros(n["V1"], model.V.dtype), aligned_zeros(n["V2"], model.V.dtype),
             np.zeros(n["w1"], dtype=model.w.dtype), np.zeros(n["w2"], dtype=model.w.dtype), np.zeros(2))
    if method in ADAGRAD_METHODS:
        for sums in state[0], state[2]:
            sums[:] = ADAGRAD_START
        state[4][0] = ADAGRAD_START
    return state


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


class Training:
    """One SGD/AdaGrad/Adam training run that can be advanced, paused and resumed.

    ``advance(until)`` trains epochs up to ``until`` (or an early stop); the
    object pickles without its data (``attach`` puts the data back), so
    ``rafm tune`` can keep a trial between rounds of successive halving and
    resume it in another process. ``result()`` restores the best epoch.
    """

    MIN_ROWS_PER_THREAD = 16_384  # Hogwild threads pay from about this many rows each (README)

    def __init__(self, data, opts, validation=None, levels_override=None, groups=None, init=None, rows_of=None):
        self.opts = opts
        self.n_threads = for_work(opts.threads, data.n_rows, self.MIN_ROWS_PER_THREAD)  # the threads used
        self.rng = np.random.default_rng(opts.seed)
        levels = feature_levels(data, opts.ranks, levels_override)
        labels = np.asarray(data.labels, dtype=np.float64)
        if init is None:
            w0 = initial_bias(opts.task, data.labels) if opts.bias else 0.0
            state = [a for a in STATE_ARRAYS.get(opts.method, ()) if a.startswith("V")]  # V-sized state
            copies = 1 + len(state) * (opts.method != "rowwise-adagrad") + (opts.method == "sgda") \
                + (validation is not None)  # V-sized: optimizer state, sgda's gradients, the best epoch's copy
            self.model = build(opts.model, opts.task, opts.ranks, data.feature_ids, levels, opts.init_stdev,
                               self.rng, w0, (labels.min(), labels.max()), copies)
        else:  # continued training (--init-model): new features get Eq. 17 levels and fresh factors
            self.model = extend(init, data.feature_ids, levels, opts.init_stdev, self.rng,
                                (labels.min(), labels.max()))
        kept = self.model.state is not None and self.model.state.method == opts.method
        self.state = self.model.state.kernel_state() if kept else optimizer_state(opts.method, self.model)
        self.steps = self.model.state.steps if kept else 0  # optimizer steps taken before (Adam's t)
        self.n_hot = None  # several threads: the hot features the workers replicate, the model's first n_hot
        if self.n_threads > 1 and opts.method != "sgda":
            from rafmcli.kernels.hogwild import hot_features

            hot = hot_features(self.model, internal_counts(self.model, data), data.n_rows, self.n_threads)
            if hot is not None:  # None: plain Hogwild
                move_to_front(self.model, self.state, hot)
                self.n_hot = hot.shape[0]
        self.groups = groups
        # sgda's internal feature -> data column (a threaded run of another method renumbers its features)
        self.column_of = np.argsort(-np.asarray(levels), kind="stable") if opts.method == "sgda" else None
        self.adaptive = None  # sgda's AdaptiveStep, made by attach
        self.hyper = hyper_vector(opts, self.model)
        self.reg_v = np.asarray(per_level(opts.reg_factors, len(opts.ranks)), dtype=np.float64)
        self.watch = metrics.early_stop_metric(opts.task, opts.metric)
        self.best = (math.inf, 0, None)  # (loss of the watched metric, epoch, (w0, w, V) then)
        self.history = []
        self.stopped = False  # early stopping ended the run
        self.attach(data, validation, rows_of)

    def attach(self, data, validation=None, rows_of=None):
        """(Re)connect the training and validation rows (after unpickling).

        ``rows_of``: a Training on the same rows whose model numbers the features
        as this one does; its row arrays (in internal ids) are shared, not copied.
        FM on several threads: the model's V and w and ``self.state`` become views of
        arrays with spare rows for the workers' replicas (kernels/hogwild.spare_rows).
        """
        self.n_rows = data.n_rows
        self.validation = validation
        if rows_of is not None and np.array_equal(rows_of.model.feature_ids, self.model.feature_ids):
            self.data_rows, self.valid_rows = rows_of.data_rows, rows_of.valid_rows
        else:
            rows = kernel_rows(self.model, data)
            self.data_rows = (*rows[:3], *read_only(np.asarray(data.labels, dtype=np.float64)))
            self.valid_rows = kernel_rows(self.model, validation) if validation is not None else None
        self.spare = None  # FM on several threads: arrays with room for the workers' replicas
        if self.n_hot is not None:
            from rafmcli.kernels.hogwild import spare_rows

            self.spare = spare_rows(self.model, self.state, self.n_threads, self.n_hot)
            if self.spare is not None:
                self.state = self.spare.views
                self.model.state = None  # its arrays were copied; result() makes it anew
        self.kmodel = self.model.kernel_model()
        if self.opts.method == "sgda" and self.adaptive is None:
            from rafmcli.solvers.sgda import AdaptiveStep

            self.adaptive = AdaptiveStep(self.model, self.data_rows[:3], self.data_rows[3], self.valid_rows,
                                         validation.labels, self.groups, self.opts, self.column_of)

    def __getstate__(self):
        """Everything but the data (and sgda's step sizes: `rafm tune` runs the STEP_METHODS)."""
        state = dict(self.__dict__)
        for name in ("data_rows", "validation", "valid_rows", "kmodel", "adaptive", "spare"):
            state[name] = None
        return state

    def __setstate__(self, state):
        """Factors and optimizer state go back on cache lines (the kernels' layout)."""
        self.__dict__.update(state)
        self.model.V = aligned_copy(self.model.V)
        self.state = tuple(aligned_copy(a) if k < 2 else a for k, a in enumerate(self.state))  # accV1, accV2

    @property
    def epoch(self):
        return len(self.history)

    @property
    def done(self):
        return self.stopped or self.epoch >= self.opts.iters

    def advance(self, until, log=None, bar=None):
        """Train epochs epoch+1 .. ``until`` (at most opts.iters) unless early stopping ends the run.

        The loop is shared with implicit training (solvers/implicit.py), which
        overrides the per-epoch hooks ``train_epoch``, ``validate`` and ``score``.
        """
        while not self.done and self.epoch < until:
            raise_lost()
            epoch = self.epoch + 1
            start = time.perf_counter()
            order = shuffled(self.n_rows, int(self.rng.integers(2**63)))
            train_loss = self.train_epoch(order, epoch)
            row = {"epoch": epoch, "seconds": time.perf_counter() - start, "train_loss": train_loss}
            validated = self.validate()
            if validated is not None:
                row.update(validated)
            if not math.isfinite(train_loss) or (validated is not None
                                                 and not math.isfinite(row[self.divergence_metric])):
                raise DivergedError(
                    f"training diverged in epoch {epoch} (train loss {train_loss}); "
                    f"try a smaller --learn-rate (now {self.opts.learn_rate:g})"
                    + (f" or --init-stdev (now {self.opts.init_stdev:g})" if self.opts.init_stdev >= 1 else ""))
            self.history.append(row)
            if log is not None:
                log.write(row)
            if bar is not None:
                shown = {"loss": f"{train_loss:.4f}"}
                if validated is not None:
                    shown[f"val_{self.watch}"] = f"{row[self.watch]:.4f}"
                bar.set_postfix(shown, refresh=False)
                bar.update(1)
            if validated is None:
                continue
            score = self.score(row)
            if score < self.best[0]:
                model = self.model
                self.best = (score, epoch, (model.w0, model.w.copy(), aligned_copy(model.V)))
            elif self.opts.early_stop and epoch - self.best[1] >= self.opts.early_stop:
                self.stopped = True

    def train_epoch(self, order, epoch):
        """One pass over the rows ``order``; returns the epoch's training loss (RMSE for r)."""
        opts, model = self.opts, self.model
        n = self.n_rows
        task = K.TASK_REGRESSION if opts.task == "r" else K.TASK_CLASSIFICATION
        args = (self.steps + (epoch - 1) * n, self.data_rows, self.kmodel, self.state, self.hyper, self.reg_v, task,
                model.nested, VARIANTS[opts.variant], METHODS[opts.method])
        if self.adaptive is not None:
            loss = self.adaptive.epoch(order, epoch, self.kmodel[5])
        elif self.n_threads > 1:
            loss = K.train_epoch_hogwild(order, self.n_threads, *args, spare=self.spare, n_hot=self.n_hot or 0)
        else:
            loss = K.train_epoch(order, *args)
        model.w0 = float(self.kmodel[5][0])
        mean_loss = loss / max(n, 1)
        return math.sqrt(mean_loss) if opts.task == "r" else mean_loss

    def validate(self):
        """The validation metrics of the current model ({name: value}), or None without validation rows."""
        if self.valid_rows is None:
            return None
        return metrics.evaluate(self.opts.task, self.validation.labels, predict_rows(self.model, self.valid_rows))

    @property
    def divergence_metric(self):
        """The validation metric whose NaN means divergence (AUC can be NaN without it)."""
        return metrics.early_stop_metric(self.opts.task)

    def score(self, row):
        """What early stopping minimises: the watched metric of an epoch's row, as a loss."""
        return metrics.loss_of(self.watch, row[self.watch])

    def run(self, log=None, progress=True, quiet=False, echo=print, desc="train"):
        """Advance to opts.iters (a progress bar on stderr unless ``quiet``), then
        ``result()``, with its summary line to ``echo``."""
        bar = None
        if progress and not quiet:
            from tqdm import tqdm

            bar = tqdm(total=self.opts.iters, initial=self.epoch, unit="epoch", leave=False,
                       desc=f"{self.opts.model} {desc}", disable=None)
        try:
            self.advance(self.opts.iters, log, bar)
        finally:
            if bar is not None:
                bar.close()
        model, history = self.result()
        if not quiet:
            echo(self.summary_line(model, history))
        return model, history

    def summary_line(self, model, history):
        return _summary_line(self.opts, model, history, model.info["training"])

    @property
    def best_epoch(self):
        return self.best[1] or self.epoch

    @property
    def best_value(self):
        """The watched validation metric at the best epoch (NaN without validation)."""
        return self.history[self.best[1] - 1][self.watch] if self.best[1] else math.nan

    def result(self):
        """(model with the best epoch's parameters, history); model.info records options and metrics."""
        model = self.model
        if self.best[2] is not None:
            model.w0, model.w, model.V = self.best[2]
            self.kmodel = None  # the run cannot go on from here
        if self.spare is not None:  # the model keeps its own rows, not views of the spare arrays
            model.V, model.w = aligned_copy(model.V), model.w.copy()
            self.state = tuple(aligned_copy(a) if k < 2 else a.copy() for k, a in enumerate(self.state))
            self.kmodel, self.spare = None, None
        summary = {"epochs": self.epoch, "best_epoch": self.best_epoch}
        if self.best[2] is not None:
            summary["validation"] = {k: self.history[self.best[1] - 1][k] for k in metrics.names(self.opts.task)}
        if self.adaptive is not None:
            summary["regularisation"] = self.adaptive.summary()
        model.info = {"options": asdict(self.opts), "training": summary}
        model.state = OptimizerState(self.opts.method, *self.state, steps=self.steps + self.epoch * self.n_rows)
        return model, self.history


def race(data, opts, validation, candidates, rungs, levels_override=None):
    """Successive halving over ``candidates`` (Options) on the validation rows.

    Every candidate trains to rungs[0] epochs and the best third (at least one,
    by the watched validation metric, ties to the earlier candidate) goes on to
    the next rung; after the last rung the best is returned, as a
    :class:`Training` to go on with, with every candidate's best score for the
    record. A candidate that diverges stops there and keeps its best epoch, as a
    `rafm tune` trial does; one that diverges before any epoch is out (NaN).
    The runs share one copy of the rows in internal ids; dropped runs free their
    parameters.
    """
    from rafmcli.options import RACE_KEEP

    runs = [Training(data, candidates[0], validation, levels_override)]
    runs += [Training(data, c, validation, levels_override, rows_of=runs[0]) for c in candidates[1:]]
    scores, diverged = [math.nan] * len(runs), None
    alive = list(range(len(runs)))
    for until in rungs:
        for k in list(alive):
            try:
                runs[k].advance(until)
            except DivergedError as exc:
                runs[k].stopped, diverged = True, exc
                if not runs[k].best[1]:
                    alive.remove(k)
            scores[k] = runs[k].best_value
        if not alive:
            raise diverged  # every pair diverged in its first epoch: the last one's error (its epoch and rate)
        alive = sorted(alive, key=lambda k: (runs[k].best[0], k))
        alive = alive[:1] if until == rungs[-1] else alive[:max(1, math.ceil(len(alive) * RACE_KEEP))]
        runs = [r if k in alive else None for k, r in enumerate(runs)]
    return runs[alive[0]], scores


def _race_outcome(opts, l2_raced, rate_raced):
    """(what the race chose, the option that fixes it), in words; what was not raced stood as given."""
    values = opts.reg_factors if len(set(opts.reg_factors)) > 1 else opts.reg_factors[:1]
    l2 = "pairwise L2 " + ",".join(f"{c:g}" for c in values)
    rate = f"learning rate {opts.learn_rate:g}"
    if l2_raced and rate_raced:
        return f"{l2} and {rate} chosen", "--regular and --learn-rate fix them"
    if l2_raced:
        return f"{l2} chosen (at {rate})", "--regular fixes it"
    return f"{rate} chosen (at {l2})", "--learn-rate fixes it"


def race_rungs(iters):
    """The race's rungs: a tenth of ``iters`` (options.RACE_FIRST_RUNG_SHARE), then to the end."""
    from rafmcli.options import RACE_FIRST_RUNG_SHARE

    first = max(1, round(RACE_FIRST_RUNG_SHARE * iters))
    return (first, iters) if first < iters else (iters,)


@dataclass
class RacePlan:
    """What ``rafm train`` races on its validation rows (:func:`race_choices`).

    ``pairs``: (pairwise L2, learning rate), an L2 of None keeping opts.reg_factors as given;
    ``note``: what the user left free but is not raced (too many models at once) and why, or "".
    """

    pairs: list
    note: str = ""


def race_choices(data, opts, l2=True, rate=True):
    """The RacePlan of ``rafm train`` when the user fixed neither or one of L2 and the rate:
    options.L2_CHOICES by options.RATE_STEPS times opts.learn_rate (the method's).
    Only L2 when all the pairs at once would be too large (options.RACE_MAX_PARAMS), no pairs
    when even that would be (the note says what was not raced and why); None when the user
    fixed both or the method does not race (als, mcmc, sgda)."""
    from rafmcli.levels import summarize
    from rafmcli.options import L2_CHOICES, RACE_MAX_PARAMS, RATE_STEPS

    if opts.method not in RATE_STEPS or not (l2 or rate):
        return None
    params = summarize(assign_levels(data.counts, opts.ranks), data.counts, data.n_rows, opts.ranks).params(opts.model)
    l2s = L2_CHOICES if l2 else [None]  # None: the L2 the user gave (whole: one value per level or group)
    rates = [opts.learn_rate * s for s in RATE_STEPS[opts.method]] if rate else [opts.learn_rate]
    count, dropped = len(l2s) * len(rates), []  # (what stands, the option that sets it)
    if params * count > RACE_MAX_PARAMS and len(rates) > 1:
        dropped, rates = [(f"learning rate {opts.learn_rate:g}", "--learn-rate")], [opts.learn_rate]
    if params * len(l2s) * len(rates) > RACE_MAX_PARAMS and len(l2s) > 1:
        dropped, l2s = dropped + [(f"pairwise L2 {opts.reg_factors[0]:g}", "--regular")], [None]
    note = ""
    if dropped:
        note = (f"{' and '.join(d for d, _ in dropped)} not raced: {count} models of {params:,} parameters "
                f"at once would exceed {RACE_MAX_PARAMS:,}; {' and '.join(o for _, o in dropped)} to choose")
    pairs = [(c, r) for r in rates for c in l2s]
    return RacePlan(pairs if len(pairs) > 1 else [], note)


def train(data, opts, validation=None, levels_override=None, rlog=None, quiet=False,
          progress=True, echo=print, groups=None, init=None, race_plan=None):
    """Train a model on ``data``; returns (model, history of per-epoch dicts).

    ``opts.method`` sgda runs :class:`rafmcli.solvers.sgda.AdaptiveStep` epochs (it needs
    ``validation``), with L2 weights per group of ``groups`` (a GroupAssignment; None: inferred
    from the rows, :func:`rafmcli.fields.groups_for`).

    ``init``: a trained Model to continue from (same task, kind and ranks):
    its features keep their levels and parameters, features new in ``data``
    get Eq. 17 levels and fresh factors (:func:`rafmcli.model.layout.extend`),
    and its optimizer state is used when it has one for ``opts.method``. The
    returned model carries the state of its last epoch (``model.state``).

    ``rlog``: a writable text file for the per-epoch table (see :class:`Log`), or None.

    ``race_plan``: with ``validation`` and a method of this module, race its
    (pairwise L2, learning rate) pairs first (:func:`race`, the plan from
    :func:`race_choices`) and go on with the winner.

    With ``validation``, keeps the parameters of the epoch with the best
    validation metric and stops after ``opts.early_stop`` epochs without
    improvement (0: never stop early).
    """
    log = Log(rlog, opts.task)
    if race_plan and not race_plan.pairs and race_plan.note and init is None and validation is not None \
            and not quiet:
        echo(f"rafm: {race_plan.note}")  # nothing left to race: say why
    if race_plan and race_plan.pairs and init is None and validation is not None and opts.method in STEP_METHODS:
        race_pairs = race_plan.pairs
        rungs = race_rungs(opts.iters)
        l2s = sorted({c for c, _ in race_pairs if c is not None})
        rates = sorted({r for _, r in race_pairs})
        if not quiet:
            raced = [f"pairwise L2 ({', '.join(f'{c:g}' for c in l2s)})" if l2s else "",
                     f"learning rate ({', '.join(f'{r:g}' for r in rates)})" if len(rates) > 1 else ""]
            echo(f"rafm: racing {len(race_pairs)} {'pairs' if all(raced) else 'values'} of "
                 f"{' and '.join(r for r in raced if r)} on the validation rows: all for {rungs[0]} epochs"
                 + (", the best third on to the end" if len(rungs) > 1 else ""))
            if race_plan.note:
                echo(f"rafm: {race_plan.note}")
        candidates = [replace(opts, reg_factors=opts.reg_factors if c is None else (c,) * len(opts.reg_factors),
                              learn_rate=r) for c, r in race_pairs]
        run, scores = race(data, opts, validation, candidates, rungs, levels_override)
        opts = run.opts
        for row in run.history:
            log.write(row)
        if not quiet:
            shown = ", ".join(f"{'' if c is None else f'{c:g} at '}{r:g}: {v:.4f}"
                              for (c, r), v in zip(race_pairs, scores))
            chosen, fix = _race_outcome(opts, bool(l2s), len(rates) > 1)
            echo(f"rafm: {chosen} on validation {run.watch} (best of each: {shown}); {fix}")
    else:
        if opts.method == "sgda":
            from rafmcli.fields import groups_for

            groups = groups_for(data, opts, groups, None if quiet else echo)
        run = Training(data, opts, validation, levels_override, groups, init)
    return run.run(log, progress, quiet, echo)


def _summary_line(opts, model, history, summary):
    text = (f"{opts.model}: {model.n_params:,} parameters, {summary['epochs']} epochs, "
            f"{sum(h['seconds'] for h in history):.2f}s")
    if "validation" in summary:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in summary["validation"].items())
        text += f"; best epoch {summary['best_epoch']}: validation {shown}"
    return text
