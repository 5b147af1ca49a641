"""`rafm tune`: search each model's hyper-parameters on validation data, report and keep the winner."""

import math
import shlex
import sys
import time

import click

from rafmcli.cli.options import (
    BINARY_OUTPUT,
    INPUT,
    OUTPUT,
    SEED,
    FiniteFloatRange,
    distinct_files,
    no_cache_option,
    ranged,
    read,
)
from rafmcli.options import DEFAULTS as D
from rafmcli.options import METRICS, MODELS, STEP_METHODS

TUNE_METHODS = (*STEP_METHODS, "als", "mcmc")


class ModelList(click.ParamType):
    """Comma-separated models, each once."""

    name = "MODEL,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        models = tuple(v.strip() for v in value.split(","))
        bad = [m for m in models if m not in MODELS]
        if bad or not models or len(set(models)) != len(models):
            self.fail(f"expected distinct models from {', '.join(MODELS)} ({value})", param, ctx)
        return models


def _workers(threads, trials, models):
    """Worker processes: --threads (0 or none: every available core), but no more than the
    configurations of a bracket when --trials gives them (trials per model): more would idle."""
    from rafmcli.threads import available_cores

    workers = threads or available_cores()
    return min(workers, trials * len(models)) if trials else workers


@click.command()
@click.option("--task", type=click.Choice(["r", "c"]), required=True,
              help="r: regression (square loss); c: binary classification (logistic loss).")
@click.option("--train", "train_file", type=INPUT, required=True, help="Training file (libSVM/libFM text).")
@click.option("--validation", type=INPUT, help="Validation file every choice is made on.")
@click.option("--holdout", type=FiniteFloatRange(0, 0.5, min_open=True), default=D.holdout, show_default=True,
              help="Without --validation, the fraction of training rows held out to validate on.")
@click.option("--models", type=ModelList(), default=",".join(MODELS), show_default=True,
              help="Models to tune, each with the same number of configurations.")
@click.option("--trials", type=click.IntRange(1),
              help="Configurations per model (one bracket of successive halving).  [default: 27, or as many "
                   "brackets as --budget allows]")
@click.option("--budget", type=FiniteFloatRange(0, min_open=True),
              help="Minutes: stop then and keep the best trial so far.")
@click.option("--metric", type=click.Choice(METRICS),
              help="Validation metric that ranks the trials and stops each one early.  "
                   "[default: rmse for r, logloss for c]")
@click.option("--method", type=click.Choice(TUNE_METHODS), default=D.method, show_default=True,
              help="Method of every trial. sgd, adagrad, rowwise-adagrad, adam: L2 and the learning rate "
                   "(around the method's default) are searched; als: L2 and init stdev; mcmc: init stdev (it draws its "
                   "regularisation); ranks always, and RaFM's variant and rho_d (sgd methods) or its "
                   "distillation weight c (als, mcmc).")
@click.option("--top-rank", type=click.IntRange(1, 2**31 - 1),
              help="Compare the models at this top rank, as the RaFM paper's tables do: FM gets this rank, "
                   "RaFM and DiFacto rank sets ending in it (every lower power of two as a level).  "
                   "[default: top ranks searched from the data's histogram]")
@click.option("--iter", "iters", type=ranged("iters"), default=D.iters, show_default=True,
              help="Most epochs (als, mcmc: iterations) a trial trains (the last rung of successive halving); "
                   "an MCMC chain runs to its rung, ranked by its running average.")
@click.option("--early-stop", type=click.IntRange(1), default=D.early_stop, show_default=True,
              help="A trial stops after this many epochs without a better validation metric.")
@click.option("--table", type=OUTPUT, help="Write the leaderboard (every trial) as tab-separated values.")
@click.option("--save-model", type=BINARY_OUTPUT, help="Write the winning model to this file.")
@click.option("--refit", is_flag=True,
              help="Retrain the winner on training plus validation rows for its best number of epochs "
                   "before --save-model and --test.")
@click.option("--test", type=INPUT, help="File to predict with the winner only (needs --out); never used to choose.")
@click.option("--out", type=OUTPUT, help="Prediction file for --test; - for stdout.")
@click.option("--threads", type=click.IntRange(0), default=None,
              help="Trials trained at once, each in its own process; 0: every available core.  "
                   "[default: every available core]")
@click.option("--seed", type=SEED, default=D.seed, show_default=True,
              help="Seed of the configurations, the hold-out and every trial; the same seed gives the same "
                   "result whatever --threads.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@no_cache_option
def tune(task, train_file, validation, holdout, models, trials, budget, metric, method, top_rank, iters, early_stop,
         table, save_model, refit, test, out, threads, seed, quiet, no_cache):
    """Tune FM, RaFM and DiFacto on validation data, as the RaFM paper's experiments do.

    Every model gets the same number of configurations (L2 from the paper's
    grid, learning rate, ranks from the data's frequency histogram, and for
    RaFM the training variant and rho_d); they race by successive halving over
    epochs on the validation metric. Prints a leaderboard and the winner as a
    `rafm train` command line; --save-model, --table and --test/--out keep
    the results.
    """
    from rafmcli.errors import InputError, printable
    from rafmcli.metrics import early_stop_metric

    given = click.get_current_context().get_parameter_source("holdout") == click.core.ParameterSource.COMMANDLINE
    if validation and given:
        raise click.UsageError(f"--holdout {holdout:g} and --validation: the validation file takes the hold-out's "
                               f"place; give one of them")
    if test and not out:
        raise click.UsageError("--test needs --out FILE (or --out - for stdout)")
    if out and not test:
        raise click.UsageError("--out needs --test FILE")
    if refit and not (save_model or test):
        raise click.UsageError("--refit retrains the winner for --save-model or --test; give one of them")
    distinct_files({"--train": train_file, "--validation": validation, "--test": test},
                   {"--out": out, "--save-model": save_model, "--table": table})
    try:
        early_stop_metric(task, metric)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--metric") from None
    data = read(train_file, no_cache, quiet)
    if data.n_rows == 0:
        raise InputError(f"{train_file}: no rows")
    valid = read(validation, no_cache, quiet) if validation else None
    test_data = read(test, no_cache, quiet) if test else None
    from rafmcli.solvers.sgd import holdout_split

    if valid is None:
        data, valid = holdout_split(data, holdout, seed)
        if valid is None:
            raise InputError(f"{train_file}: too few rows to hold {holdout:g} of them out for validation")
    if valid.n_rows == 0:
        raise InputError(f"{validation}: no rows")
    from rafmcli.solvers.tune import Search, Settings

    settings = Settings(task=task, models=models, trials=trials, budget=budget * 60 if budget else None,
                        metric=metric, method=method, iters=iters, early_stop=early_stop, seed=seed,
                        workers=_workers(threads, trials, models), top_rank=top_rank)
    echo = (lambda text: None) if quiet else (lambda text: click.echo(f"rafm tune: {text}", err=True))
    search = Search(settings, data, valid, echo)
    if not quiet:
        shown = printable(validation) if validation else f"{valid.n_rows:,} held-out rows"
        where = f"validating on {shown}"
        workers = f"{settings.workers} worker process{'es' if settings.workers > 1 else ''}"
        click.echo(f"rafm tune: {', '.join(models)}; {where}; {workers}", err=True)
    try:
        search.run()
        if not quiet:
            n = len(search.processes)
            click.echo(f"rafm tune: {len(search.trials)} trials, {sum(t.epochs for t in search.trials):,} epochs "
                       f"trained in {n} worker process{'es' if n != 1 else ''}, "
                       f"{time.perf_counter() - search.started:.1f}s", err=True)
        report_to = sys.stderr if "-" in (out, table) else sys.stdout
        stopped = search.interrupted not in (None, "budget")
        _report(search, settings, train_file, validation, holdout, report_to)
        if stopped:
            click.echo("rafm tune: interrupted; nothing written", err=True)
            raise search.interrupted if isinstance(search.interrupted, BaseException) else KeyboardInterrupt
        winner = search.best()
        if winner is None:
            raise click.ClickException("no trial finished an epoch: nothing to keep")
        _finish(search, winner, data, valid, test_data, test, out, save_model, table, refit, quiet)
    finally:
        search.close()


def _report(search, settings, train_file, validation, holdout, fh):
    from rafmcli.solvers.tune import describe

    ranked = search.ranked()
    if search.interrupted == "budget":
        click.echo(f"rafm tune: the budget of {settings.budget / 60:g} minutes is spent", err=True)
    if not ranked:
        return
    shown = ranked[:10]
    for model in settings.models:  # each model's best, even below the top ten
        best = next((t for t in ranked if t.opts.model == model), None)
        if best is not None and best not in shown:
            shown.append(best)
    lines = [_leader_line(None, search.watch)] + [_leader_line(t.row(), search.watch) for t in shown]
    click.echo("\n".join(lines), file=fh)
    winner = search.best()
    if winner is not None:
        click.echo(f"\nbest: {describe(winner)}: validation {search.watch} {winner.value:.4f} at epoch "
                   f"{winner.best_epoch}", file=fh)
        click.echo(train_command(winner.opts, settings, train_file, validation, holdout), file=fh)


def _leader_line(row, watch):
    if row is None:
        return (f"{'trial':>5}  {'model':<8}{'ranks':<13}{'L2':>8}{'lr':>9}  {'variant':<8}{'rho_d':>8}"
                f"{'init':>7}{'c':>5}{'best ep':>8}{'valid ' + watch:>15}{'params':>12}{'seconds':>9}  status")

    def shown(name, spec):
        return "-" if math.isnan(row[name]) else format(row[name], spec)

    return (f"{row['trial']:>5}  {row['model']:<8}{row['ranks']:<13}{shown('l2', 'g'):>8}"
            f"{shown('learn_rate', 'g'):>9}  {row['variant']:<8}{shown('dependent_rate', 'g'):>8}"
            f"{row['init_stdev']:>7g}{shown('dependent_weight', 'g'):>5}{row['best_epoch']:>8}"
            f"{shown('metric', '.4f'):>15}{row['params']:>12,}{row['seconds']:>9.1f}  {row['status']}")


def train_command(opts, settings, train_file, validation, holdout):
    """The `rafm train` line that trains the trial's model again (bit for bit, one thread)."""
    from rafmcli.solvers.tune import COORDINATE

    q = shlex.quote
    words = ["rafm", "train", "--task", opts.task, "--train", q(train_file)]
    words += ["--validation", q(validation)] if validation else ["--holdout", f"{holdout:g}"]
    words += ["--model", opts.model, "--ranks", ",".join(map(str, opts.ranks)), "--method", opts.method]
    if opts.method in COORDINATE:
        words += ["--init-stdev", f"{opts.init_stdev:g}"]
        if opts.method == "als":
            words += ["--regular", f"{opts.reg_bias:g},{opts.reg_linear:g},{opts.reg_factors[0]:g}"]
        if opts.model == "rafm" and len(opts.ranks) > 1:
            words += ["--dependent-weight", f"{opts.dependent_weight:g}"]
    else:  # one thread: more would be Hogwild (ALS and MCMC give the same chain on any number)
        words += ["--threads", "1", "--learn-rate", f"{opts.learn_rate:g}",
                  "--regular", f"{opts.reg_bias:g},{opts.reg_linear:g},{opts.reg_factors[0]:g}"]
        if opts.model == "rafm" and len(opts.ranks) > 1:
            words += ["--variant", opts.variant]
            if opts.variant == "paper" and opts.dependent_rate is not None:
                words += ["--dependent-rate", f"{opts.dependent_rate:g}"]
    words += ["--iter", str(opts.iters)]
    if opts.method != "mcmc":
        words += ["--early-stop", str(opts.early_stop)]
    if settings.metric:
        words += ["--metric", settings.metric]
    words += ["--seed", str(opts.seed)]
    return " ".join(words)


def _finish(search, winner, data, valid, test_data, test, out, save_model, table, refit, quiet):
    import functools
    from dataclasses import replace

    from rafmcli.cli.options import warn_unseen
    from rafmcli.io.output import Outputs, format_predictions
    from rafmcli.model import files as model_files
    from rafmcli.predict import kernel_rows, predict_dataset
    from rafmcli.solvers.tune import COORDINATE

    model, predictions = None, None
    if (save_model or test_data is not None) and winner.opts.method in COORDINATE:
        model, predictions = _coordinate_winner(winner, data, valid, test_data, refit, quiet)
    elif save_model or test_data is not None:
        if refit:
            from rafmcli.solvers.sgd import train as run_training
            from rafmcli.solvers.tune import concat

            opts = replace(winner.opts, iters=max(winner.best_epoch, 1), early_stop=0)
            if not quiet:
                click.echo(f"rafm tune: refitting the winner on {data.n_rows + valid.n_rows:,} rows for "
                           f"{opts.iters} epochs", err=True)
            model, _ = run_training(concat(data, valid), opts, quiet=True, progress=False)
        else:
            model, _ = search.checkpoint(winner).result()
    if model is not None:
        model.info["training"]["tune"] = {"metric": search.watch, "validation": winner.value,
                                          "trials": len(search.trials), "refit": bool(refit)}
    with Outputs() as outputs:
        if table:
            outputs.write(table, functools.partial(_write_table, search))
        if save_model:
            outputs.write(save_model, functools.partial(model_files.write, model), binary=True)
        if test_data is not None:
            if predictions is None:
                predictions, unseen, distinct = predict_dataset(model, test_data)
            else:  # mcmc: the chain's average
                unseen, distinct = kernel_rows(model, test_data)[3:]
            warn_unseen(test, unseen, distinct)
            outputs.write(out, functools.partial(format_predictions, predictions=predictions), binary=True)


def _coordinate_winner(winner, data, valid, test_data, refit, quiet):
    """An ALS or MCMC winner trained again from its seed (as in its trial, or with ``refit`` on
    training plus validation rows for its best iteration count): (model, MCMC test predictions)."""
    from dataclasses import replace

    from rafmcli.solvers.coordinate import train
    from rafmcli.solvers.tune import concat

    opts = winner.opts
    if refit:
        opts = replace(opts, iters=max(winner.best_epoch, 1), early_stop=0)
        if not quiet:
            click.echo(f"rafm tune: refitting the winner on {data.n_rows + valid.n_rows:,} rows for "
                       f"{opts.iters} iterations", err=True)
        result = train(concat(data, valid), opts, test=test_data, quiet=True, progress=False)
    else:
        result = train(data, opts, validation=valid, test=test_data, quiet=True, progress=False)
    return result.model, result.test_predictions


TABLE_COLUMNS = ("trial", "model", "ranks", "l2", "learn_rate", "variant", "dependent_rate", "init_stdev",
                 "dependent_weight", "epochs",
                 "best_epoch", "metric", "params", "seconds", "status")


def _write_table(search, fh):
    fh.write("\t".join(c if c != "metric" else f"valid_{search.watch}" for c in TABLE_COLUMNS) + "\n")
    for t in search.ranked():
        row = t.row()
        cells = []
        for c in TABLE_COLUMNS:
            v = row[c]
            cells.append("NaN" if isinstance(v, float) and math.isnan(v) else f"{v:.10g}" if isinstance(v, float)
                         else str(v))
        fh.write("\t".join(cells) + "\n")
