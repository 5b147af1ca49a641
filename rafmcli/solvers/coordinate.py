"""ALS and MCMC: the Python driver of the coordinate sweeps (libFM's fm_learn_mcmc).

One loop serves both; ALS is MCMC without the draws (libFM TIST 2012, Sec. 4):

* MCMC (Gibbs sampling) draws, in this order each iteration, the noise
  precision alpha ~ Gamma((alpha_0 + n)/2, (gamma_0 + Sum e^2)/2), the bias,
  per group the prior precision lam_g ~ Gamma((alpha_0 + n_g + 1)/2,
  (gamma_0 + beta_0 (mu_g - mu_0)^2 + Sum_{i in g} (theta_i - mu_g)^2)/2) and
  mean mu_g ~ N((Sum theta_i + beta_0 mu_0)/(n_g + beta_0), 1/((n_g + beta_0) lam_g))
  of the linear weights, then the weights; then the same per group, level
  and factor coordinate for the factors, then the factors. By default
  (``opts.shared_precision``) the groups share one lam (per level and
  coordinate) and keep their own means mu_g (:func:`draw_hyper`): a group's
  own lam is learnt from its features' values, and where those are mostly
  prior draws (rare features, or coordinates the data do not use) it drifts
  towards the hyperprior's scale, 1/sqrt(lam) ~ 1, far wider than the data's;
  one shared lam is held by the features the data do determine
  (:mod:`rafmcli.kernels.coordinate`). Predictions average the samples after
  the burn-in; classification uses the probit link with latent targets.
  RaFM's dependent vectors are also fitted to the level above (a
  distillation term of weight ``--dependent-weight`` c, the kernels' notes).
  With shared precisions they also have prior means of their own: at level
  l < k_i the vector v_i^(l) of a frequent feature is a student of its top
  vector, fitted to the pairs it stands in for, while the rare features'
  top vectors of that level are mostly prior draws; one mean per group for
  both pulls each population towards the other. Each (group, population)
  keeps its mu, all share the coordinate's lam (:func:`draw_hyper`, rows
  g and G + g; ``Priors``).
* ALS takes each coordinate's conditional mean with alpha = 1, prior means 0
  and the prior precisions fixed to the ``--regular`` values: exact
  coordinate descent on 1/2 Sum e^2 + 1/2 Sum lam theta^2.
"""

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from rafmcli import metrics
from rafmcli.errors import DivergedError
from rafmcli.fields import groups_for
from rafmcli.io.columns import columns_of
from rafmcli.kernels import read_only
from rafmcli.model.layout import aligned_copy, build
from rafmcli.options import burn_in_default
from rafmcli.predict import kernel_rows
from rafmcli.signals import raise_lost
from rafmcli.solvers.sgd import Log, feature_levels, initial_bias
from rafmcli.threads import for_work

# libFM's hyperpriors (fm_learn_mcmc::init)
ALPHA_0 = 1.0
GAMMA_0 = 1.0
BETA_0 = 1.0
MU_0 = 0.0
# colour classes split over threads pay from about this many non-zeros a thread (README: MCMC
# on the 18,010 of the regression sample ran 1.5x slower on two; on ml-100k's 160,000, 1.3-1.6x faster)
MIN_NONZEROS_PER_THREAD = 50_000


@dataclass
class Regularisation:
    """L2 weights / prior precisions: bias, linear per group, factors per group and level."""

    bias: float
    linear: np.ndarray    # [groups]
    factors: np.ndarray   # [groups, levels]

    @classmethod
    def from_options(cls, opts, n_groups):
        m = len(opts.ranks)
        linear = np.broadcast_to(np.asarray(opts.reg_linear, dtype=np.float64), (n_groups,)).copy()
        factors = np.asarray(opts.reg_factors, dtype=np.float64)
        factors = np.broadcast_to(factors.reshape(-1, m) if factors.size > 1 else factors,
                                  (n_groups, m)).copy()
        return cls(float(opts.reg_bias), linear, factors)


@dataclass
class Schedule:
    """Update order of the features of each level: colour classes, each split into thread parts.

    Level l's classes are rows level_classes[l]..level_classes[l+1]-1 of
    ``bounds``; class row c covers order[bounds[c, 0]:bounds[c, -1]], part t
    order[bounds[c, t]:bounds[c, t+1]].
    """

    order: np.ndarray
    bounds: np.ndarray
    level_classes: np.ndarray
    colours: np.ndarray

    def kernel(self):
        return self.order, self.bounds, self.level_classes


def schedule(model, csc, counts, n_rows, parts):
    """Colour the features (no two of a colour share a row) and split each class into ``parts``.

    Features pick colours most frequent first; parts are balanced by rows.
    """
    from rafmcli.kernels.coordinate import SERIAL, colour

    colptr, rows, _, col_of = csc
    by_count = np.argsort(-counts, kind="stable").astype(np.int64)
    colours = colour(colptr, rows, col_of, by_count, n_rows)
    order, bounds, level_classes = [], [], [0]
    start = 0
    for size in model.sizes:
        feats = np.arange(size)
        feats = feats[np.argsort(colours[:size], kind="stable")]
        cls = colours[feats]
        cuts = np.flatnonzero(np.diff(cls)) + 1
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [size]])):
            if a == b:
                continue
            if cls[a] == SERIAL:
                row = np.full(parts + 1, start + b)
                row[0] = start + a
            else:
                work = np.cumsum(counts[feats[a:b]] + 4.0)
                row = start + a + np.searchsorted(work, work[-1] * np.arange(parts + 1) / parts, side="left")
                row[0], row[-1] = start + a, start + b
            bounds.append(row)
        order.append(feats)
        start += size
        level_classes.append(len(bounds))
    order = np.concatenate(order).astype(np.int32) if order else np.zeros(0, np.int32)
    bounds = np.array(bounds, dtype=np.int64).reshape(-1, parts + 1)
    return Schedule(order, bounds, np.array(level_classes, dtype=np.int64), colours)


@dataclass
class Priors:
    """Current prior means and precisions: linear [groups], factors [rows, coordinates]: a row per
    group (row g), and for RaFM MCMC with shared precisions one more per group for the dependent
    vectors (row G + g)."""

    mu_w: np.ndarray
    lam_w: np.ndarray
    mu_v: np.ndarray
    lam_v: np.ndarray


def fixed_priors(reg, widths, dep_row=0):
    """ALS: means 0, precisions the L2 weights (per group and level, broadcast over coordinates).

    ``dep_row`` > 0: rows dep_row.. for RaFM's dependent vectors (copies of the groups' rows)."""
    lam_v = np.repeat(reg.factors, widths, axis=1)
    if dep_row:
        lam_v = np.concatenate([lam_v, lam_v[:dep_row]])
    return Priors(np.zeros_like(reg.linear), reg.linear.copy(), np.zeros_like(lam_v), lam_v)


def draw_hyper(rng, count, total, square, mu, lam, shared=False):
    """Draw lam then mu of every group (libFM's draw_*_lambda, draw_*_mu), in place.

    ``count``, ``total``, ``square``: per group (axis 0, and coordinate) n_g, Sum theta, Sum theta^2.
    ``shared``: one precision per coordinate for all groups, each group keeping its mean (the
    Normal-Gamma prior with lam common to the groups' mu_g and theta):
    lam ~ Gamma((alpha_0 + Sum_g (n_g + 1))/2, (gamma_0 + Sum_g [beta_0 (mu_g - mu_0)^2 +
    Sum_{i in g} (theta_i - mu_g)^2])/2). With one group both draws are the same.
    """
    spread = square - 2.0 * mu * total + count * mu * mu
    terms = BETA_0 * (mu - MU_0) ** 2 + np.maximum(spread, 0.0)
    if shared:
        lam[...] = rng.gamma(0.5 * (ALPHA_0 + (count + 1.0).sum(axis=0)), 1.0 / (0.5 * (GAMMA_0 + terms.sum(axis=0))))
    else:
        lam[...] = rng.gamma(0.5 * (ALPHA_0 + count + 1.0), 1.0 / (0.5 * (GAMMA_0 + terms)))
    precision = (count + BETA_0) * lam
    mu[...] = rng.normal((total + BETA_0 * MU_0) / (count + BETA_0), 1.0 / np.sqrt(precision))


@dataclass
class Chain:
    """Running sums of per-sample predictions (after the burn-in) for one data set."""

    rows: tuple
    total: np.ndarray
    count: int = 0

    def add(self, predictions):
        self.total += predictions
        self.count += 1

    def mean(self):
        return self.total / max(self.count, 1)


@dataclass
class Result:
    """What a coordinate run returns: the model, per-iteration history, chain-averaged test predictions."""

    model: object
    history: list
    test_predictions: np.ndarray | None
    priors: Priors


def kept_iterations(iters, burn_in, keep):
    """The iterations (1-based) that end ``keep`` equal stretches of the chain after the burn-in."""
    n = iters - burn_in
    keep = min(keep, n)
    return {burn_in + int(math.ceil((k + 1) * n / keep)) for k in range(keep)}


class Kept:
    """What an MCMC model file keeps: for each of K equal stretches of the chain after the burn-in,
    the mean of its draws (``means``) or its last draw.

    A stretch's mean predicts as well as its draws do on average (the chain stays in one mode,
    so the means of v_i and v_j give nearly the mean of <v_i, v_j>), without their noise: with
    ten stretches the file predicts as well as the whole chain, where ten thinned draws do not
    (README: kept samples).
    """

    def __init__(self, iters, burn_in, keep, means):
        self.ends = kept_iterations(iters, burn_in, keep)
        self.burn_in, self.means = burn_in, means
        self.samples = []
        self.sums, self.count = None, 0

    def add(self, it, model):
        if it <= self.burn_in:
            return
        if self.means:
            if self.sums is None:
                self.sums = [0.0, np.zeros(model.w.shape[0]), np.zeros(model.V.shape[0])]
            self.sums[0] += model.w0
            self.sums[1] += model.w
            self.sums[2] += model.V
            self.count += 1
        if it not in self.ends:
            return
        if self.means:
            w0, w, V = (s / self.count for s in self.sums)
            self.samples.append((float(w0), w.astype(np.float32), aligned_copy(V.astype(np.float32))))
            self.sums, self.count = None, 0
        else:
            self.samples.append((model.w0, model.w.copy(), aligned_copy(model.V)))


@dataclass
class Problem:
    """A model to fit and the data in the forms the sweeps take (internal feature ids)."""

    model: object
    labels: np.ndarray
    csr: tuple        # (indptr, indices, values)
    csc: tuple        # (colptr, rows, values, col_of): col_of[i] = data column of internal feature i
    group: np.ndarray  # int32 group of each internal feature
    n_groups: int
    sched: Schedule

    @property
    def layout(self):
        m = self.model
        return m.widths, m.offsets, m.sizes, m.nested, m.V


def coordinate_threads(opts, data):
    """The threads ALS and MCMC use on ``data`` (:func:`rafmcli.threads.for_work`)."""
    return for_work(opts.threads, data.indices.shape[0], MIN_NONZEROS_PER_THREAD)


def _copies(opts, validated):
    """V-sized float32 arrays a run holds: the model; mcmc's kept samples (at most the iterations
    after the burn-in) and, keeping stretch means, their float64 sums of w and V (two more);
    als's best iteration with validation rows (mcmc keeps none)."""
    if opts.method != "mcmc":
        return 1 + validated
    burn_in = burn_in_default(opts.iters) if opts.burn_in is None else opts.burn_in
    return 1 + min(opts.keep_samples, max(opts.iters - burn_in, 1)) + 2 * opts.keep_means


def prepare(data, opts, groups=None, levels_override=None, use_cache=True, echo=None, copies=1):
    """Levels (Eq. 17 or ``levels_override``), a fresh model, CSR, CSC, the groups
    (:func:`rafmcli.fields.groups_for`) and the update schedule."""
    rng = np.random.default_rng(opts.seed)
    levels = feature_levels(data, opts.ranks, levels_override)
    labels = np.asarray(data.labels, dtype=np.float64)
    w0 = _initial_bias(opts.task, labels) if opts.bias else 0.0
    model = build(opts.model, opts.task, opts.ranks, data.feature_ids, levels, opts.init_stdev, rng, w0,
                  (labels.min(), labels.max()), copies)
    if opts.task == "c":
        model.link = "probit"
    order = np.argsort(-np.asarray(levels), kind="stable").astype(np.int32)  # build's renumbering
    cols = columns_of(data, use_cache)
    groups = groups_for(data, opts, groups, echo)
    csc = (cols.indptr, cols.rows, cols.values, order)
    counts = np.asarray(data.counts, dtype=np.float64)[order]
    sched = schedule(model, csc, counts, data.n_rows, coordinate_threads(opts, data))
    return Problem(model, labels, kernel_rows(model, data)[:3], read_only(*csc),
                   np.ascontiguousarray(groups.group[order], dtype=np.int32), groups.n_groups, sched)


@dataclass
class Scratch:
    """Working arrays of a run: residuals e, block sums S and T per row, distillation residuals R
    (RaFM: [rows, levels - 1], else empty), each thread's buffers."""

    e: np.ndarray
    S: np.ndarray
    T: np.ndarray
    R: np.ndarray
    buffers: list   # per thread (H, E, D, W, Hd, Ed) for kernels.coordinate.factor_part

    @classmethod
    def for_rows(cls, n, threads=1, local_rows=None, longest=None, distilled_levels=0):
        """Arrays for ``n`` rows; buffers for features of up to ``local_rows`` rows (default
        LOCAL_ROWS), no longer than the ``longest`` feature; R for ``distilled_levels``."""
        from rafmcli.kernels.coordinate import BLOCK, LOCAL_ROWS

        local = min(LOCAL_ROWS if local_rows is None else local_rows, n if longest is None else longest)
        gather = distilled_levels and local
        buffers = [(np.empty((BLOCK, local)), np.empty(local), np.empty(BLOCK), np.empty(BLOCK),
                    np.empty((BLOCK, gather)), np.empty(gather)) for _ in range(threads)]
        return cls(np.empty(n), np.zeros((n, BLOCK)), np.zeros((n, BLOCK)),
                   np.zeros((n if distilled_levels else 0, max(distilled_levels, 1))), buffers)

    def start(self, problem, residuals):
        """e = ``residuals``; R from the model (:func:`kernels.coordinate.distillation_residuals`)."""
        from rafmcli.kernels.coordinate import distillation_residuals

        self.e[:] = residuals
        if self.R.shape[0]:
            m = problem.model
            distillation_residuals(problem.csr, m.widths, m.offsets, m.sizes, m.V, self.R, 0, self.R.shape[0])


class Workers:
    """``threads`` Python threads for the kernels, which release the GIL; inline when 1.

    ``run(fn, n)`` calls fn(0) .. fn(n-1), on the threads when there are
    several, and returns their results.
    """

    def __init__(self, threads):
        from concurrent.futures import ThreadPoolExecutor

        self.threads = threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="rafm") if threads > 1 else None

    def run(self, fn, n):
        if self.pool is None or n == 1:
            return [fn(t) for t in range(n)]
        return list(self.pool.map(fn, range(n)))

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()


def sweep(problem, priors, alpha, scratch, draw, keys, workers, linear=True, distil=0.0):
    """One pass over the linear weights (unless ``linear`` is False) and every factor coordinate.

    Colour classes run one after another, each split over the workers; a
    level's BLOCK-coordinate blocks first get their row sums S, T. ``distil``:
    the weight c of the distillation term (RaFM; needs scratch.R). Returns
    the number of non-finite draws.
    """
    from rafmcli.kernels import coordinate as K

    order, bounds, classes = problem.sched.kernel()
    csr, csc, group, layout = problem.csr, problem.csc, problem.group, problem.layout
    widths, offsets, sizes, nested, V = layout
    dep_row = priors.mu_v.shape[0] - problem.n_groups
    e, S, T, R = scratch.e, scratch.S, scratch.T, scratch.R
    cd = float(distil) if R.shape[0] else 0.0
    parts = bounds.shape[1] - 1
    n = e.shape[0]
    row_cuts = [t * n // parts for t in range(parts + 1)]
    bad = 0
    if linear:
        w = problem.model.w
        for c in range(classes[0], classes[1]):
            bad += sum(workers.run(lambda t: K.linear_part(csc, group, w, priors.mu_w, priors.lam_w, alpha, e, draw,
                                                       keys[0], order, bounds[c, t], bounds[c, t + 1]), parts))
    cstart = 0
    for l in range(len(widths)):
        size_next = sizes[l + 1] if nested and l + 1 < len(widths) else 0
        for f0 in range(0, widths[l], K.BLOCK):
            nb = min(K.BLOCK, widths[l] - f0)
            workers.run(lambda t: K.block_sums(csr, V, offsets[l], widths[l], f0, nb, sizes[l], size_next, S, T,
                                               row_cuts[t], row_cuts[t + 1]), parts)
            for c in range(classes[l], classes[l + 1]):
                bad += sum(workers.run(lambda t: K.factor_part(csc, layout, group, dep_row, priors.mu_v, priors.lam_v,
                                                           alpha, e, S, T, R, cd, draw, keys[1], l, f0, cstart,
                                                           order, bounds[c, t], bounds[c, t + 1],
                                                           scratch.buffers[t]),
                                       parts))
        cstart += widths[l]
    return bad


def draw_alpha(rng, sse, n):
    """The noise precision: alpha ~ Gamma((alpha_0 + n)/2, rate (gamma_0 + Sum e^2)/2)."""
    return rng.gamma(0.5 * (ALPHA_0 + n), 2.0 / (GAMMA_0 + np.asarray(sse)))


def draw_bias(rng, w0, e, alpha, reg, draw):
    """The bias (h = 1, prior N(0, 1/reg)) from its conditional; e follows. Returns the new w0."""
    n = e.shape[0]
    p = alpha * n + reg
    if not p > 0:
        return w0
    new = alpha * (e.sum() + n * w0) / p
    if draw:
        new += rng.standard_normal() / math.sqrt(p)
    e -= new - w0
    return new


def train(data, opts, validation=None, test=None, groups=None, levels_override=None, rlog=None,
          quiet=False, progress=True, echo=print, use_cache=True):
    """ALS (``opts.method == "als"``) or MCMC (``"mcmc"``) on ``data``; returns a :class:`Result`.

    ``groups``: a GroupAssignment of ``data.feature_ids`` (None: inferred from the rows, or one
    group with ``opts.auto_groups`` off).
    ALS keeps the iteration with the best validation metric and stops early
    like SGD; MCMC runs ``opts.iters`` sweeps and predicts ``validation`` and
    ``test`` with the average over the samples after ``opts.burn_in``.
    """

    from rafmcli.kernels import coordinate as K
    from rafmcli.kernels.forward import predict_scores

    sampling = opts.method == "mcmc"
    probit = opts.task == "c"
    workers = Workers(coordinate_threads(opts, data))
    try:
        copies = _copies(opts, validation is not None)
        problem = prepare(data, opts, groups, levels_override, use_cache, None if quiet else echo, copies)
        return _run(problem, opts, sampling, probit, validation, test, rlog, quiet, progress, echo, K,
                    predict_scores, workers)
    finally:
        workers.close()


def _run(problem, opts, sampling, probit, validation, test, rlog, quiet, progress, echo, K, predict_scores,
         workers):
    rng = np.random.default_rng([opts.seed, 1])
    model, labels = problem.model, problem.labels
    reg = Regularisation.from_options(opts, problem.n_groups)
    dep_row = problem.n_groups if _split_dependents(opts, model, sampling) else 0
    priors = fixed_priors(reg, model.widths, dep_row)
    n = labels.shape[0]
    distilled = len(model.widths) - 1 if model.nested and opts.dependent_weight > 0 else 0
    scratch = Scratch.for_rows(n, workers.threads, longest=int(np.diff(problem.csc[0]).max(initial=1)),
                               distilled_levels=distilled)
    e = scratch.e
    lev = model.kernel_model()[0]

    def scores(rows):
        return predict_scores(rows[0], rows[1], rows[2], lev, model.widths, model.offsets, model.V, model.w,
                              model.w0, model.nested)

    def finish(s):
        return K.probit_probability(s) if probit else np.clip(s, model.target_min, model.target_max)

    chains = {}
    for name, extra in (("validation", validation), ("test", test)):
        if extra is not None:
            chains[name] = Chain(kernel_rows(model, extra)[:3], np.zeros(extra.n_rows))
    burn_in = 0 if not sampling else burn_in_default(opts.iters) if opts.burn_in is None else opts.burn_in
    kept = Kept(opts.iters, burn_in, opts.keep_samples, opts.keep_means) if sampling else None
    watch = metrics.early_stop_metric(opts.task, opts.metric)
    best = (math.inf, 0, None)
    history = []
    log = Log(rlog, opts.task)
    bar = None
    if progress and not quiet:
        from tqdm import tqdm

        bar = tqdm(total=opts.iters, unit="iter", leave=False, desc=f"{opts.model} {opts.method}", disable=None)
    # e = target - y_hat is kept exact by every update; the probit target is the latent z
    target = labels.copy()
    labels = read_only(labels)[0]  # as the kernels take their inputs (kernels.read_only)
    scratch.start(problem, target - scores(problem.csr))
    try:
        for it in range(1, opts.iters + 1):
            raise_lost()
            start = time.perf_counter()
            keys = rng.integers(0, 2**63, size=3, dtype=np.int64)
            if probit:
                train_scores = target - e
                K.probit_residuals(train_scores, labels, sampling, keys[2], e)
                np.add(train_scores, e, out=target)
            alpha = draw_alpha(rng, float(np.square(e).sum()), n) if sampling and not probit else 1.0
            if opts.bias:
                model.w0 = draw_bias(rng, model.w0, e, alpha, reg.bias, sampling)
            if sampling:
                w = model.w
                count = np.bincount(problem.group, minlength=problem.n_groups).astype(np.float64)
                total = np.bincount(problem.group, weights=w, minlength=problem.n_groups)
                square = np.bincount(problem.group, weights=np.square(w, dtype=np.float64),
                                     minlength=problem.n_groups)
                shared = opts.shared_precision
                if opts.linear:
                    draw_hyper(rng, count, total, square, priors.mu_w, priors.lam_w, shared)
                draw_hyper(rng, *K.group_moments(model.V, model.widths, model.offsets, model.sizes, problem.group,
                                                 problem.n_groups, model.nested, dep_row),
                           priors.mu_v, priors.lam_v, shared)
            bad = sweep(problem, priors, alpha, scratch, sampling, keys, workers, opts.linear, opts.dependent_weight)
            seconds = time.perf_counter() - start
            if bad or not math.isfinite(alpha) or not math.isfinite(model.w0):
                raise DivergedError(f"{opts.method}: non-finite parameters in iteration {it}")
            row = {"epoch": it, "seconds": seconds,
                   "train_loss": _train_loss(opts.task, labels, finish(target - e))}
            averaging = it > burn_in
            for name, chain in chains.items():
                current = finish(scores(chain.rows))
                if averaging:
                    chain.add(current)
                if name == "validation":
                    shown = chain.mean() if averaging and sampling else current
                    row.update(metrics.evaluate(opts.task, validation.labels, shown))
            if not math.isfinite(row["train_loss"]) or ("validation" in chains and not math.isfinite(row[watch])):
                raise DivergedError(f"{opts.method}: training diverged in iteration {it}")
            if kept is not None:
                kept.add(it, model)
            history.append(row)
            log.write(row)
            if bar is not None:
                bar.set_postfix({"loss": f"{row['train_loss']:.4f}"}, refresh=False)
                bar.update(1)
            if sampling or "validation" not in chains:
                continue
            if metrics.loss_of(watch, row[watch]) < best[0]:
                best = (metrics.loss_of(watch, row[watch]), it, (model.w0, model.w.copy(), aligned_copy(model.V)))
            elif opts.early_stop and it - best[1] >= opts.early_stop:
                break
    finally:
        if bar is not None:
            bar.close()
    if best[2] is not None:
        model.w0, model.w, model.V = best[2]
    if kept is not None and kept.samples:
        model.w0, model.w, model.V = kept.samples[-1]
        model.samples = kept.samples
    summary = {"epochs": len(history), "best_epoch": best[1] or len(history)}
    if "validation" in chains and history:
        summary["validation"] = {k: history[summary["best_epoch"] - 1][k] for k in metrics.names(opts.task)}
    model.info = {"options": asdict(opts), "training": summary}
    test_predictions = chains["test"].mean() if sampling and test is not None else None
    if not quiet:
        echo(_summary_line(opts, model, history, summary))
    return Result(model, history, test_predictions, priors)


def _split_dependents(opts, model, sampling):
    """MCMC with shared precisions on RaFM: the dependent vectors (v_i^(l), l < k_i) get prior
    means of their own, per group (module notes)."""
    return sampling and opts.shared_precision and model.nested and len(model.widths) > 1


def _initial_bias(task, labels):
    """Regression: the mean; probit: Phi^-1 of the positive rate."""
    if task == "r":
        return initial_bias(task, labels)
    from statistics import NormalDist

    rate = float(np.clip(np.mean(labels > 0), 1e-6, 1 - 1e-6))
    return NormalDist().inv_cdf(rate)


def _train_loss(task, labels, predictions):
    if task == "r":
        return float(np.sqrt(np.mean((predictions - labels) ** 2)))
    return metrics.evaluate("c", labels, predictions)["logloss"]


def _summary_line(opts, model, history, summary):
    text = (f"{opts.model} {opts.method}: {model.n_params:,} parameters, {summary['epochs']} iterations, "
            f"{sum(h['seconds'] for h in history):.2f}s")
    if "validation" in summary:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in summary["validation"].items())
        which = "chain average" if opts.method == "mcmc" else f"best iteration {summary['best_epoch']}"
        text += f"; {which}: validation {shown}"
    return text
