"""`rafm libfm`: run a libFM command line with libFM's meaning (rafmcli.libfm translates it)."""

import shlex

import click

LIBFM_HELP = """Run a libFM command line: rafm libfm -task r -train FILE -test FILE -dim '1,1,8' ...

libFM's options and defaults: -task r|c, -train, -test (its metrics on
stderr), -out (optional), -validation (sgda only),
-dim 'k0,k1,k' (bias, linear, rank; 1,1,8), -iter (100), -method
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
                rafm_args = " ".join(shlex.quote(a) for a in translate(args).train_args)
                spelled = f"rafm train {rafm_args}"
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
    with train.make_context("rafm train", list(translation.train_args), parent=ctx) as sub:
        train.invoke(sub)
