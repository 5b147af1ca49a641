"""`rafm tune`: the paper's protocol (section 6.1.1) as one command.

Each model gets the same number of configurations, sampled from a seeded
design over what matters for the method: SGD methods (L2, learning rate,
ranks, and for RaFM variant and rho_d); ALS (L2 as prior precision, init
stdev, ranks, and RaFM's distillation weight c); MCMC (init stdev, ranks, c:
it has no learning rate and draws its regularisation). They race by
synchronous successive halving over epochs (Jamieson and Talwalkar 2016;
Hyperband's building block): every live trial trains to the rung's epoch
count, the best third by validation metric goes on to three times as many
epochs, until one trial per model runs to the end (--iter, early stopping).
An SGD trial is paused between rungs as a pickled
:class:`~rafmcli.solvers.sgd.Training`, so no epoch is trained twice. ALS
and MCMC trials run over iterations instead of epochs: an MCMC chain has no
early stopping and is judged by the validation metric of its running
average (with the burn-in of the full chain, so a rung sees exactly the
start of the chain the last rung runs); a coordinate trial is not paused
but run again from its seed to the next rung (the same draws bit for bit,
at most about twice the iterations of a paused one).

Trials run in worker processes (one thread each; :mod:`rafmcli.solvers.pool`);
a rung's decisions are taken once all of its trials are in, by score then
trial number, so the result depends on the seed only, not on how many
workers there are or which finishes first. With a time budget and no trial
count, new brackets of fresh configurations follow one another (starting
from a later rung each time, as Hyperband's brackets do) until the time is up.
"""

import math
import os
import pickle
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace

import numpy as np

from rafmcli import metrics
from rafmcli.errors import DivergedError
from rafmcli.options import DEFAULTS, L2_CHOICES, method_default
from rafmcli.signals import raise_lost

# the paper's L2 grid {1e-6, 5e-6, 1e-5, ..., 1e-1}, one step further: rafm's L2 acts per occurrence
L2_GRID = (1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1, 2e-1)
LR_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0)  # times the method's default learning rate
DEP_RATE_STEPS = (1.0, 2.0, 5.0, 10.0)  # rho_d / rho_f of the paper variant
COORDINATE = ("als", "mcmc")
INIT_STDEV_STEPS = (0.25, 0.5, 1.0, 2.0)  # times the method's default init stdev (als, mcmc)
ALS_L2_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)  # prior precisions, added once per parameter
DEP_WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0)  # RaFM's distillation weight c (als, mcmc)
RAFM_VARIANTS = ("paper", "authors", "cascade")
ETA = 3  # successive halving keeps the best 1/ETA of a rung
FIRST_RUNG_SHARE = 0.1  # the first rung trains a tenth of --iter: strongly regularised models start slowly
MCMC_FIRST_RUNG_SHARE = 0.2  # twice the burn-in: a chain's average needs some draws to be judged
DEFAULT_TRIALS = 27  # configurations per model and bracket


@dataclass
class Trial:
    """One configuration and how far it got."""

    number: int
    opts: object                  # rafmcli.options.Options
    bracket: int = 0
    epochs: int = 0
    best_epoch: int = 0
    value: float = math.nan       # the watched validation metric at the best epoch
    score: float = math.inf       # the same as a loss (lower is better)
    params: int = 0
    seconds: float = 0.0
    done: bool = False            # ran to --iter or stopped early (or diverged)
    diverged: bool = False
    rung: int = -1                # last rung completed
    alive: bool = True            # still in the race
    info: dict = field(default_factory=dict)

    def row(self):
        o = self.opts
        sgd = o.method not in COORDINATE
        distilled = o.model == "rafm" and len(o.ranks) > 1 and (not sgd or o.variant != "paper")
        return {"trial": self.number, "model": o.model, "ranks": ",".join(map(str, o.ranks)),
                "l2": o.reg_factors[0] if o.method != "mcmc" else math.nan,
                "learn_rate": o.learn_rate if sgd else math.nan,
                "variant": o.variant if sgd and o.model == "rafm" and len(o.ranks) > 1 else "-",
                "dependent_rate": (o.dependent_rate if sgd and o.model == "rafm" and o.variant == "paper"
                                   and o.dependent_rate is not None else math.nan),
                "init_stdev": o.init_stdev, "dependent_weight": o.dependent_weight if distilled else math.nan,
                "epochs": self.epochs, "best_epoch": self.best_epoch, "metric": self.value,
                "params": self.params, "seconds": self.seconds,
                "status": "diverged" if self.diverged else "done" if self.done else
                          "racing" if self.alive else f"out at rung {self.rung + 1}"}


def _stratified(rng, values, n):
    """n draws covering ``values`` as evenly as n allows, in random order (a Latin-hypercube column)."""
    reps = -(-n // len(values))
    column = [values[i] for i in rng.permutation(len(values))] * reps
    return [column[i] for i in rng.permutation(n)]


def sample_configurations(base, model, rank_sets, n, rng):
    """``n`` Options for ``model`` over the search space of ``base.method``."""
    if base.method in COORDINATE:
        return _coordinate_configurations(base, model, rank_sets, n, rng)
    lr0 = base.learn_rate
    regs = _stratified(rng, L2_GRID, n)
    lrs = _stratified(rng, [lr0 * s for s in LR_STEPS], n)
    ranks = _stratified(rng, rank_sets, n)
    variants = _stratified(rng, RAFM_VARIANTS, n)
    dep = _stratified(rng, DEP_RATE_STEPS, n)
    out = []
    for k in range(n):
        opts = replace(base, model=model, ranks=tuple(ranks[k]), reg_factors=(regs[k],), learn_rate=lrs[k],
                       dependent_rate=None, variant=DEFAULTS.variant)
        if model == "rafm" and len(opts.ranks) > 1:
            opts = replace(opts, variant=variants[k],
                           dependent_rate=lrs[k] * dep[k] if variants[k] == "paper" else None)
        out.append(opts)
    return out


def _coordinate_configurations(base, model, rank_sets, n, rng):
    """ALS and MCMC: ranks, init stdev, RaFM's distillation weight c and (ALS) the L2 weight."""
    ranks = _stratified(rng, rank_sets, n)
    stdevs = _stratified(rng, [base.init_stdev * s for s in INIT_STDEV_STEPS], n)
    weights = _stratified(rng, DEP_WEIGHTS, n)
    regs = _stratified(rng, ALS_L2_GRID, n)
    out = []
    for k in range(n):
        opts = replace(base, model=model, ranks=tuple(ranks[k]), init_stdev=stdevs[k])
        if model == "rafm" and len(opts.ranks) > 1:
            opts = replace(opts, dependent_weight=weights[k])
        if base.method == "als":
            opts = replace(opts, reg_factors=(regs[k],))
        out.append(opts)
    return out


def advance_coordinate(data, validation, opts, until, watch):
    """Run an ALS or MCMC trial from its seed to ``until`` iterations (MCMC: with the burn-in of
    the whole chain); returns its progress as :func:`_advance` does, and the result."""
    from rafmcli.options import burn_in_default
    from rafmcli.solvers.coordinate import train

    burn_in = burn_in_default(opts.iters) if opts.burn_in is None else opts.burn_in
    result = train(data, replace(opts, iters=until, burn_in=min(burn_in, until - 1)), validation=validation,
                   quiet=True, progress=False)
    history = result.history
    if opts.method == "mcmc":  # the running average: the last iteration's
        best_epoch = len(history)
    else:
        best_epoch = min(range(1, len(history) + 1),
                         key=lambda e: (metrics.loss_of(watch, history[e - 1][watch]), e))
    value = history[best_epoch - 1][watch]
    stopped = len(history) < until
    return {"diverged": False, "epochs": len(history), "best_epoch": best_epoch, "value": value,
            "score": metrics.loss_of(watch, value), "done": stopped or until >= opts.iters,
            "params": result.model.n_params}, result


# ---- worker processes ------------------------------------------------------------------------

_WORKER = {}


def _save_split(folder, name, data):
    arrays = {"labels": data.labels, "indptr": data.indptr, "indices": data.indices,
              "feature_ids": data.feature_ids, "counts": data.counts}
    if data.values is not None:
        arrays["values"] = data.values
    for key, value in arrays.items():
        np.save(os.path.join(folder, f"{name}.{key}.npy"), np.asarray(value))


def _load_split(folder, name, path):
    from rafmcli.io.reader import Dataset

    def part(key):
        file = os.path.join(folder, f"{name}.{key}.npy")
        return np.load(file, mmap_mode="r") if os.path.exists(file) else None

    return Dataset(path, part("labels"), part("indptr"), part("indices"), part("values"), part("feature_ids"),
                   part("counts"))


def _init_worker(folder):
    """A worker (rafmcli.solvers.pool): one thread for its kernels, the data memory-mapped."""
    from rafmcli import threads

    threads.set_default(1)
    _WORKER["folder"] = folder
    _WORKER["train"] = _load_split(folder, "train", "train")
    _WORKER["valid"] = _load_split(folder, "valid", "validation")


def _advance(job):
    """Train trial ``number`` to ``until`` epochs from its checkpoint; return its progress."""
    from rafmcli.solvers.sgd import Training

    number, opts, until, watch = job
    path = os.path.join(_WORKER["folder"], f"trial-{number}.pickle")
    start = time.perf_counter()
    if opts.method in COORDINATE:
        try:
            progress, _ = advance_coordinate(_WORKER["train"], _WORKER["valid"], opts, until, watch)
        except DivergedError:
            progress = {"diverged": True, "epochs": until, "best_epoch": 0, "value": math.nan, "score": math.inf,
                        "done": True, "params": 0}
        return {"number": number, **progress, "seconds": time.perf_counter() - start, "pid": os.getpid()}
    if os.path.exists(path):
        with open(path, "rb") as fh:
            run = pickle.load(fh)
        run.attach(_WORKER["train"], _WORKER["valid"])
    else:
        run = Training(_WORKER["train"], opts, _WORKER["valid"])
    diverged = False
    try:
        run.advance(until)
    except DivergedError:  # the trial ends; its best epoch before the divergence stands
        diverged, run.stopped = True, True
    with open(path + ".tmp", "wb") as fh:
        pickle.dump(run, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(path + ".tmp", path)
    return {"number": number, "diverged": diverged, "epochs": run.epoch + diverged, "best_epoch": run.best_epoch,
            "value": run.best_value, "score": run.best[0], "done": run.done,
            "seconds": time.perf_counter() - start, "params": run.model.n_params, "pid": os.getpid()}


# ---- the search ------------------------------------------------------------------------------

@dataclass
class Settings:
    """What `rafm tune` was asked for."""

    task: str
    models: tuple
    trials: int | None          # configurations per model per bracket; None with a budget: repeat brackets
    budget: float | None        # seconds, or None
    metric: str | None
    method: str
    iters: int
    early_stop: int
    seed: int
    workers: int
    top_rank: int | None = None  # every model's top rank, or None: searched from the data


class Search:
    """Successive halving over epochs for every model at once (see the module notes)."""

    def __init__(self, settings, train, validation, echo=None):
        from rafmcli import ranksets

        self.s = settings
        self.train, self.validation = train, validation
        self.echo = echo or (lambda text: None)
        self.watch = metrics.early_stop_metric(settings.task, settings.metric)
        self.trials = []
        self.rng = np.random.default_rng(settings.seed)
        self.rank_sets = {m: ranksets.candidates(train.counts, train.n_rows, m, settings.top_rank)
                          for m in settings.models}
        self.base = replace(DEFAULTS, task=settings.task, method=settings.method, iters=settings.iters,
                            early_stop=settings.early_stop, seed=settings.seed, metric=settings.metric, threads=1,
                            **{name: method_default(settings.method, name)
                               for name in ("learn_rate", "init_stdev", "reg_linear", "reg_factors")})
        self.started = time.perf_counter()
        self.folder = None
        self.pool = None
        self.interrupted = None     # "budget" or a signal's name, when the search was cut short
        self.processes = set()      # ids of the worker processes that trained epochs

    # configurations
    def _bracket(self, index, n):
        """n new configurations per model (bracket ``index``)."""
        from rafmcli import ranksets

        new = []
        for model in self.s.models:
            base = self.base
            first = []
            if index == 0:  # rafm train's defaults first: its ranks and rate, each L2 it races (sgd methods)
                choice = ranksets.choose(self.train.counts, self.train.n_rows, model, self.s.top_rank)
                l2 = L2_CHOICES if base.method not in COORDINATE else base.reg_factors
                first = [replace(base, model=model, ranks=choice.ranks, reg_factors=(c,)) for c in l2][:n]
            for opts in first + sample_configurations(base, model, self.rank_sets[model], n - len(first),
                                                      self.rng):
                new.append(Trial(len(self.trials) + len(new), opts, bracket=index))
        self.trials += new
        return new

    def _rungs(self, skip):
        """Epoch counts of the rungs: a tenth (mcmc: a fifth) of --iter times ETA^k, the last one --iter;
        ``skip`` first ones dropped."""
        share = MCMC_FIRST_RUNG_SHARE if self.s.method == "mcmc" else FIRST_RUNG_SHARE
        rungs, e = [], max(1, round(share * self.s.iters))
        while e < self.s.iters:
            rungs.append(e)
            e *= ETA
        rungs.append(self.s.iters)
        return rungs[min(skip, len(rungs) - 1):]

    # running
    def run(self):
        """Run the search; returns the trials (the caller ranks them). Ctrl-C and the budget
        end it early: ``interrupted`` then says why, and the trials so far stand."""
        from rafmcli.errors import Terminated

        self.folder = tempfile.mkdtemp(prefix="rafm-tune-")
        try:
            _save_split(self.folder, "train", self.train)
            _save_split(self.folder, "valid", self.validation)
            self._warm_up()
            self._start_pool()
            bracket = 0
            while True:
                n = self.s.trials or DEFAULT_TRIALS
                trials = self._bracket(bracket, n)
                self._race(trials, self._rungs(bracket % 3 if self.s.trials is None else 0), bracket)
                bracket += 1
                if self.s.trials is not None or self._out_of_time():
                    break
        except (KeyboardInterrupt, Terminated) as exc:
            self.interrupted = "interrupted" if isinstance(exc, KeyboardInterrupt) else exc
        except _OutOfTime:
            self.interrupted = "budget"
        finally:
            self._stop_pool()
        return self.trials

    def checkpoint(self, trial):
        """The trial's paused Training (data attached), or None."""
        path = os.path.join(self.folder, f"trial-{trial.number}.pickle")
        if not os.path.exists(path):
            return None
        with open(path, "rb") as fh:
            run = pickle.load(fh)
        run.attach(self.train, self.validation)
        return run

    def close(self):
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _out_of_time(self):
        return self.s.budget is not None and time.perf_counter() - self.started >= self.s.budget

    def _warm_up(self):
        """Compile (or load from numba's cache) the kernels once before the workers start."""
        from rafmcli.solvers.sgd import Training

        rows = np.arange(min(self.train.n_rows, 64))
        small = self.train.subset(rows)
        if self.base.method in COORDINATE:
            for model in self.s.models:
                ranks = (4, 16) if model != "fm" else (4,)
                advance_coordinate(small, small, replace(self.base, model=model, ranks=ranks, iters=2), 2, self.watch)
            return
        for model in self.s.models:
            ranks = (4, 16) if model != "fm" else (4,)
            for variant in (RAFM_VARIANTS if model == "rafm" else ("paper",)):
                Training(small, replace(self.base, model=model, ranks=ranks, variant=variant, iters=1),
                         small).advance(1)

    def _start_pool(self):
        from rafmcli.solvers.pool import Workers

        self.pool = Workers(self.s.workers, _init_worker, (self.folder,), _advance)

    def _stop_pool(self):
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def _race(self, trials, rungs, bracket):
        alive = list(trials)
        for r, until in enumerate(rungs):
            jobs = [(t.number, t.opts, until, self.watch) for t in alive if not t.done]
            self.echo(f"bracket {bracket + 1}, rung {r + 1}/{len(rungs)}: {len(alive)} trials to {until} epochs "
                      f"({len(jobs)} to train)")
            self._run_jobs(jobs)
            for t in alive:
                t.rung = r
            if r == len(rungs) - 1:
                break
            for model in self.s.models:
                mine = sorted((t for t in alive if t.opts.model == model), key=lambda t: (t.score, t.number))
                keep = max(1, math.ceil(len(mine) / ETA))
                for t in mine[keep:]:
                    t.alive = False
            alive = [t for t in alive if t.alive]
            best = self.best()
            if best is not None:
                self.echo(f"  best so far: {describe(best)}, validation {self.watch} {best.value:.4f}")
        for t in trials:
            t.alive = False

    def _run_jobs(self, jobs):
        by_number = {t.number: t for t in self.trials}
        deadline = None if self.s.budget is None else self.started + self.s.budget
        try:
            for result in self.pool.results(jobs, deadline):
                raise_lost()
                t = by_number[result["number"]]
                self.processes.add(result["pid"])
                t.seconds += result["seconds"]
                t.epochs = result["epochs"]
                t.params = result["params"]
                t.diverged = result["diverged"]
                t.best_epoch, t.value, t.score, t.done = (result["best_epoch"], result["value"], result["score"],
                                                          result["done"])
        except TimeoutError:
            raise _OutOfTime from None

    def best(self):
        """The trial with the best validation score so far (ties: the earlier trial), or None."""
        ranked = self.ranked()
        return ranked[0] if ranked and math.isfinite(ranked[0].score) else None

    def ranked(self):
        return sorted((t for t in self.trials if t.rung >= 0 or t.epochs), key=lambda t: (t.score, t.number))


class _OutOfTime(Exception):
    pass


def describe(trial):
    """A short line for a trial: model, ranks, L2, rate (and variant, rho_d; init stdev and c)."""
    row = trial.row()
    text = f"{row['model']} ranks {row['ranks']}"
    if not math.isnan(row["l2"]):
        text += f", L2 {row['l2']:g}"
    if not math.isnan(row["learn_rate"]):
        text += f", lr {row['learn_rate']:g}"
    else:
        text += f", init stdev {row['init_stdev']:g}"
    if not math.isnan(row["dependent_weight"]) and trial.opts.method in COORDINATE:
        text += f", c {row['dependent_weight']:g}"
    if row["variant"] != "-":
        text += f", {row['variant']}"
        if not math.isnan(row["dependent_rate"]):
            text += f" rho_d {row['dependent_rate']:g}"
    return text


def concat(a, b):
    """The rows of Datasets ``a`` then ``b`` as one Dataset (--refit: training plus validation rows)."""
    from rafmcli.io.reader import Dataset, feature_counts

    indices = np.concatenate([a.indices, b.indices])
    indptr = np.concatenate([a.indptr, a.indptr[-1] + np.asarray(b.indptr[1:])]).astype(np.int64)
    values = None
    if a.values is not None or b.values is not None:
        values = np.concatenate([a.row_values(), b.row_values()])
    ids, counts = feature_counts(indices, int(indices.max()) if indices.shape[0] else -1)
    return Dataset(a.path, np.concatenate([a.labels, b.labels]), indptr, indices, values, ids, counts)
