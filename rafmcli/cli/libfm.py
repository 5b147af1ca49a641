"""`rafm libfm`: run a libFM command line with libFM's meaning (rafmcli.libfm translates it)."""

import functools
import shlex

import click

from rafmcli.cli.options import INPUT, MODEL, OUTPUT

LIBFM_HELP = """Run a libFM command line: rafm libfm -task r -train FILE -test FILE -dim '1,1,8' ...

libFM's options and defaults: -task r|c, -train, -test (its metrics on
stderr), -out (optional), -validation (sgda only),
-dim 'k0,k1,k' (bias, linear, rank; 1,1,8), -iter (100; 0 with -load_model:
predict -test with the model, no training), -method
sgd|sgda|als|mcmc (mcmc; sgda needs -validation), -learn_rate (0.1, sgd), -regular (r or r0,r1,r2; 0), -init_stdev
(0.1), -meta, -rlog, -save_model (text, libFM's layout),
-load_model (libFM's text or a rafm model), -seed, -verbosity, -cache_size
(accepted, not needed). -relation is refused. Files may also be libFFM
(label field:index:value, which libFM cannot read): their fields are then
the groups of mcmc and als, as a -meta file's would be (-meta overrides
them). See man rafm-libfm.
"""


TEST_METRICS = "rafm.libfm.test_metrics"  # click meta key: rafm train reports --test's metrics, --out optional


def test_report(task, name, labels, predictions):
    """The stderr line of a test file's metrics (libFM's Test=)."""
    from rafmcli.errors import printable
    from rafmcli.metrics import evaluate

    shown = " ".join(f"{k} {v:.6g}" for k, v in evaluate(task, labels, predictions).items())
    return f"rafm: test {printable(name)}: {shown} ({len(labels):,} rows)"


class LibfmAwareCommand(click.Command):
    """A command that answers a single-dash libFM option (``-task``) with its rafm spelling."""

    def parse_args(self, ctx, args):
        from rafmcli.libfm import LibfmError, looks_like_libfm, translate

        token = looks_like_libfm(args)
        if token is not None:
            try:
                translation = translate(args)
                rafm_args = " ".join(shlex.quote(a) for a in translation.train_args)
                spelled = "rafm predict --help" if translation.predict_only else f"rafm train {rafm_args}"
            except LibfmError:
                spelled = "rafm train --help"
            raise click.UsageError(f"{token} is libFM's spelling: run `rafm libfm {shlex.join(args)}`, "
                                   f"or in rafm's: `{spelled}`", ctx)
        return super().parse_args(ctx, args)


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": ["--help"]},
               help=LIBFM_HELP)  # no -h: click would read -method as -m -e -t -h ...
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def libfm(ctx, args):
    from rafmcli.cli.train import train
    from rafmcli.libfm import LibfmError, translate

    if not args:
        click.echo(ctx.get_help())
        return
    try:
        translation = translate(list(args))
    except LibfmError as exc:
        raise click.UsageError(str(exc), ctx) from None
    if translation.help:
        click.echo(ctx.get_help())
        return
    for note in translation.notes:
        click.echo(f"rafm: {note}", err=True)
    ctx.meta[TEST_METRICS] = True
    command, name = (predict_only, "-iter 0") if translation.predict_only else (train, "rafm train")
    with command.make_context(name, list(translation.train_args), parent=ctx) as sub:
        command.invoke(sub)


@click.command()
@click.option("--task", type=click.Choice(["r", "c"]), required=True)
@click.option("--train", "train_file", type=INPUT, required=True)
@click.option("--test", type=INPUT, required=True)
@click.option("--out", type=OUTPUT)
@click.option("--init-model", type=MODEL, required=True)
@click.option("--dump-model", type=OUTPUT)
@click.option("--dim", type=click.IntRange(1), required=True)
def predict_only(task, train_file, test, out, init_model, dump_model, dim):
    """libFM's -iter 0 -load_model: predict --test with the model (FM of rank --dim), write --out and
    --dump-model, the test metrics on stderr; a model without a target range (libFM's text) clips to
    [min, max] of the --train targets, as libFM does."""
    from rafmcli.cli.options import distinct_files, read, warn_unseen
    from rafmcli.io.output import Outputs, format_predictions
    from rafmcli.model import continued, dump
    from rafmcli.model import files as model_files
    from rafmcli.predict import predict_dataset

    distinct_files({"-train": train_file, "-test": test, "-load_model": init_model},
                   {"-out": out, "-save_model": dump_model}, in_place={("-save_model", "-load_model")})
    model = model_files.load(init_model, text_ok=True)
    continued.settle(model, init_model, task, "fm", (dim,))
    if task == "r" and not model.target_min <= model.target_max:
        labels = read(train_file, False, False).labels
        model.target_min, model.target_max = float(labels.min()), float(labels.max())
    data = read(test, False, False)
    found = predict_dataset(model, data)
    warn_unseen(test, found.unseen, found.unseen_distinct)
    report = test_report(task, test, data.labels, found.values)
    with Outputs() as outputs:
        if out:
            outputs.write(out, functools.partial(format_predictions, predictions=found.values), binary=True)
        if dump_model:
            dump.check_dense(model, dump_model)
            outputs.write(dump_model, functools.partial(dump.write_text, model))
    click.echo(report, err=True)
