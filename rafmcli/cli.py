"""The `rafm` command: train, predict and stats.

Heavy modules (numba kernels, the reader) are imported inside command bodies
so that `rafm --help` starts fast and compiles nothing.
"""

import json
import sys

import click

from rafmcli import __version__


class RanksType(click.ParamType):
    """A comma-separated, strictly increasing list of positive ranks."""

    name = "D1,D2,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from rafmcli.levels import parse_ranks

        try:
            return parse_ranks(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


RANKS = RanksType()


class FloatListType(click.ParamType):
    """Comma-separated non-negative floats."""

    name = "R,R,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            out = tuple(float(t) for t in value.split(","))
        except ValueError:
            self.fail(f"expected comma-separated numbers ({value})", param, ctx)
        if any(not v >= 0 for v in out):
            self.fail(f"values must be non-negative ({value})", param, ctx)
        return out


FLOATS = FloatListType()
INPUT = click.Path(dir_okay=False, allow_dash=True)
OUTPUT = click.Path(dir_okay=False, writable=True, allow_dash=True)

no_cache_option = click.option(
    "--no-cache", is_flag=True,
    help="Parse the text every time; do not read or write the binary cache "
         "(kept in $RAFM_CACHE_DIR, default ~/.cache/rafm).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rafm")
def main():
    """Rank-aware factorization machines (RaFM), FM and DiFacto.

    Reads libSVM/libFM text files (label idx:value ...), trains a model,
    writes a model file and predictions. See `rafm COMMAND --help` and
    `man rafm`.
    """


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--ranks", type=RANKS, default="32,512", show_default=True,
              help="Rank set D_1<...<D_m whose levels, sizes and costs to report.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object ({\"files\": [...]}) instead of the report.")
@no_cache_option
def stats(files, ranks, as_json, no_cache):
    """Rows, features, labels, the feature-occurrence histogram and, for a
    rank set, each level's features and the size and per-row cost of FM(D_m),
    DiFacto and RaFM.
    """
    from rafmcli.reader import read_dataset
    from rafmcli.stats import file_stats, render_text

    reports = [file_stats(read_dataset(f, use_cache=not no_cache, progress=True), ranks)
               for f in files]
    if as_json:
        click.echo(json.dumps({"rafm_version": __version__, "files": reports}, indent=1))
        return
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower()
    bar = "█" if encoding.startswith("utf") else "#"
    click.echo("\n\n".join(render_text(r, bar) for r in reports))


def _read(path, no_cache, quiet):
    from rafmcli.reader import read_dataset

    return read_dataset(path, use_cache=not no_cache, progress=not quiet)


def _warn_unseen(name, occurrences, distinct):
    if occurrences:
        click.echo(f"rafm: {name}: {occurrences:,} occurrences of {distinct:,} features unseen in "
                   f"training contribute nothing", err=True)


@main.command()
@click.option("--task", type=click.Choice(["r", "c"]), required=True,
              help="r: regression (square loss); c: binary classification (logistic loss, label > 0 is positive).")
@click.option("--train", "train_file", type=INPUT, required=True, help="Training file (libSVM/libFM text).")
@click.option("--validation", type=INPUT,
              help="Validation file: metrics after each epoch, early stopping, best epoch kept.")
@click.option("--holdout", type=click.FloatRange(0, 0.5), default=0.1, show_default=True,
              help="Without --validation, the fraction of training rows held out to validate on; 0 trains on all rows for --iter epochs.")
@click.option("--test", type=INPUT, help="File to predict after training (needs --out).")
@click.option("--out", type=OUTPUT, help="Prediction file for --test, one value a line; - for stdout.")
@click.option("--save-model", type=OUTPUT, help="Write the trained model to this file.")
@click.option("--model", "model_kind", type=click.Choice(["fm", "rafm", "difacto"]), default="rafm",
              show_default=True, help="Model: FM, rank-aware FM, or DiFacto.")
@click.option("--dim", type=click.IntRange(1), help="Rank of an FM (same as --ranks D).  [default: 8 for fm]")
@click.option("--ranks", type=RANKS, help="Ranks D_1<...<D_m of rafm and difacto.  [default: 32,512]")
@click.option("--levels", "levels_file", type=click.Path(dir_okay=False),
              help="File of 'feature level' lines overriding the Eq. 17 level k_i of those features.")
@click.option("--method", type=click.Choice(["sgd", "adagrad", "adam"]), default="adagrad", show_default=True,
              help="Optimizer; adagrad and adam update lazily, only the rows a sample touches.")
@click.option("--iter", "iters", type=click.IntRange(1), default=100, show_default=True,
              help="Maximum number of epochs.")
@click.option("--learn-rate", type=click.FloatRange(0, min_open=True), default=0.05, show_default=True,
              help="Learning rate rho_f (free variables, bias, linear weights).")
@click.option("--dependent-rate", type=click.FloatRange(0, min_open=True),
              help="RaFM: learning rate rho_d of dependent variables (Algorithm 1).  [default: --learn-rate]")
@click.option("--variant", type=click.Choice(["paper", "joint"]), default="paper", show_default=True,
              help="RaFM training: paper (Algorithm 1) or joint (main loss plus distillation terms, one optimizer, as the authors' code).")
@click.option("--dependent-weight", type=click.FloatRange(0), default=1.0, show_default=True,
              help="RaFM joint variant: weight c_p of each distillation term.")
@click.option("--regular", type=FLOATS, default="0,0,0.01", show_default=True,
              help="L2 regularisation r0,r1,r2: bias, linear, pairwise; r2 may be one value per level (r0,r1,r2_1,...,r2_m). Applied when a feature occurs.")
@click.option("--init-stdev", type=click.FloatRange(0), default=0.01, show_default=True,
              help="Standard deviation of the normal initialisation of the factors.")
@click.option("--bias/--no-bias", default=True, show_default=True, help="Use the bias w0.")
@click.option("--linear/--no-linear", default=True, show_default=True, help="Use the linear weights w_i.")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Random seed (initialisation, row order, hold-out); --threads 1 is bit-for-bit reproducible.")
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
              help="Training threads (lock-free Hogwild SGD over rows when > 1).")
@click.option("--early-stop", type=click.IntRange(0), default=5, show_default=True,
              help="Stop after this many epochs without a better validation metric (RMSE or logloss); 0: never.")
@click.option("--rlog", type=OUTPUT, help="Tab-separated log, one row per epoch: epoch, seconds, train_loss, validation metrics.")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary on stderr.")
@no_cache_option
def train(task, train_file, validation, holdout, test, out, save_model, model_kind, dim, ranks,
          levels_file, method, iters, learn_rate, dependent_rate, variant, dependent_weight, regular,
          init_stdev, bias, linear, seed, threads, early_stop, rlog, quiet, no_cache):
    """Train FM, RaFM or DiFacto on a libSVM/libFM file.

    Each feature gets its rank level by the log-nearest rule (paper Eq. 17)
    from its number of occurrences in the training file. Progress goes to
    stderr; predictions (--test, --out) and the model (--save-model) are
    written only when training succeeds.
    """
    from rafmcli.errors import InputError
    from rafmcli.levels import read_levels_file
    from rafmcli.trainer import Options, holdout_split, per_level

    if dim is not None and ranks is not None:
        raise click.UsageError("give --dim or --ranks, not both")
    ranks = (dim,) if dim is not None else ranks or ((8,) if model_kind == "fm" else (32, 512))
    if model_kind == "fm" and len(ranks) > 1:
        raise click.UsageError("an FM has one rank: use --dim D (or --model rafm/difacto)")
    if test and not out:
        raise click.UsageError("--test needs --out FILE (or --out - for stdout)")
    if out and not test:
        raise click.UsageError("--out needs --test FILE")
    if len(regular) < 3:
        raise click.BadParameter("expected r0,r1,r2 (or r0,r1,r2_1,...,r2_m)", param_hint="--regular")
    try:
        reg_factors = per_level(regular[2:], len(ranks))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--regular") from None
    if threads > 1:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    levels_override = read_levels_file(levels_file, len(ranks)) if levels_file else None
    data = _read(train_file, no_cache, quiet)
    if data.n_rows == 0:
        raise InputError(f"{train_file}: no rows to train on")
    valid = _read(validation, no_cache, quiet) if validation else None
    test_data = _read(test, no_cache, quiet) if test else None
    if valid is None and holdout > 0:
        data, valid = holdout_split(data, holdout, seed)
        if valid is not None and not quiet:
            click.echo(f"rafm: validating on {valid.n_rows:,} held-out training rows ({holdout:g}); "
                       f"--validation FILE or --holdout 0 to change", err=True)
    opts = Options(task=task, model=model_kind, ranks=tuple(ranks), method=method, iters=iters,
                   learn_rate=learn_rate, dependent_rate=dependent_rate, variant=variant,
                   dependent_weight=dependent_weight, reg_bias=regular[0], reg_linear=regular[1],
                   reg_factors=reg_factors, init_stdev=init_stdev, bias=bias, linear=linear,
                   seed=seed, threads=threads, early_stop=early_stop)
    from rafmcli import model as model_file
    from rafmcli.output import write_predictions
    from rafmcli.predict import predict_dataset
    from rafmcli.trainer import train as run_training

    model, _ = run_training(data, opts, validation=valid, levels_override=levels_override,
                            rlog=rlog, quiet=quiet, echo=lambda m: click.echo(m, err=True))
    if save_model:
        model_file.save(model, save_model)
    if test_data is not None:
        predictions, unseen, distinct = predict_dataset(model, test_data)
        _warn_unseen(test, unseen, distinct)
        write_predictions(out, predictions)


@main.command()
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Model file written by rafm train --save-model.")
@click.option("--out", type=OUTPUT, default="-", show_default=True,
              help="Prediction file, one value a line in input order; - for stdout.")
@click.option("--quiet", is_flag=True, help="No progress bar and no warnings on stderr.")
@click.argument("files", nargs=-1, required=True, type=INPUT)
@no_cache_option
def predict(model_path, out, quiet, files, no_cache):
    """Predict every row of FILE... with a saved model.

    Writes probabilities (classification) or values clipped to the training
    targets' range (regression), one a line, files in the order given.
    Features the model never saw contribute nothing.
    """
    import numpy as np

    from rafmcli import model as model_file
    from rafmcli.output import write_predictions
    from rafmcli.predict import predict_dataset

    model = model_file.load(model_path)
    datasets = [_read(f, no_cache, quiet) for f in files]
    parts = []
    for name, data in zip(files, datasets):
        predictions, unseen, distinct = predict_dataset(model, data)
        if not quiet:
            _warn_unseen(name, unseen, distinct)
        parts.append(predictions)
    write_predictions(out, np.concatenate(parts))
