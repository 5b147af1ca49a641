"""`rafm plot`: training and validation curves per epoch from --rlog files, runs overlaid."""

import click

from rafmcli.cli.options import BINARY_OUTPUT, arguments, distinct_files


def image_path(ctx, param, value):
    """An output image whose name ends in .png, .svg or .pdf (checked before any work)."""
    from rafmcli.plots import image_format

    if value is not None:
        try:
            image_format(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


@click.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", type=BINARY_OUTPUT, required=True, callback=image_path,
              help="Image file: .png, .svg or .pdf.")
@click.option("--label", "labels", multiple=True,
              help="Legend label of each LOG, in order (repeat the option).  [default: the file names]")
def plot(logs, out, labels):
    """Plot training loss and validation metrics per epoch from --rlog files.

    One panel per column of the logs (train_loss, then rmse and mae, or
    logloss, auc and accuracy, ...), one line per LOG. Needs matplotlib
    (pip install 'rafm[plot]').
    """
    import functools
    import warnings

    from rafmcli.errors import InputError, printable
    from rafmcli.io.output import Outputs
    from rafmcli.plots import curves_figure, figure_class, image_format, read_log, write

    distinct_files(arguments("LOG", logs), {"--out": out})
    if len(labels) > len(logs):
        raise click.UsageError(f"{len(labels)} --label for {len(logs)} logs")
    figure_class()  # matplotlib or exit 2, before reading anything
    runs = [read_log(path, labels[k] if k < len(labels) else None) for k, path in enumerate(logs)]
    fig = curves_figure(runs)
    try:
        with Outputs() as outputs, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # matplotlib's overflows, reported below
            outputs.write(out, functools.partial(write, fig, fmt=image_format(out)), binary=True)
    except (ValueError, OverflowError) as exc:  # matplotlib: an axis spanning more than a float holds
        raise InputError(f"{', '.join(map(printable, logs))}: values too far apart to draw ({exc})") from None
