"""`rafm stats`: rows, features, labels, histogram and what each model costs."""

import json
import os
import sys

import click

from rafmcli import __version__
from rafmcli.cli.options import BINARY_OUTPUT, RANKS, arguments, distinct_files, no_cache_option
from rafmcli.cli.plot import image_path


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--ranks", type=RANKS, default="32,512", show_default=True,
              help="Rank set D_1<...<D_m whose levels, sizes and costs to report.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object ({\"files\": [...]}) instead of the report.")
@click.option("--plot", "plot_path", type=BINARY_OUTPUT, callback=image_path,
              help="Also draw the feature-frequency histogram (log-log, the level boundaries of --ranks "
                   "marked) into this .png, .svg or .pdf file; needs matplotlib.")
@no_cache_option
def stats(files, ranks, as_json, plot_path, no_cache):
    """Rows, features, labels, the feature-occurrence histogram and, for a
    rank set, each level's features and the size and per-row cost of FM(D_m),
    DiFacto and RaFM.
    """
    import numpy as np

    from rafmcli.io.output import STDOUT, Outputs, check_target
    from rafmcli.io.reader import count_file
    from rafmcli.stats import file_stats, render_text, strict_json

    distinct_files(arguments("FILE", files), {"--plot": plot_path})
    try:
        check_target(STDOUT)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if plot_path:
        from rafmcli.plots import figure_class

        figure_class()  # matplotlib or exit 2, before reading anything
    datasets = [count_file(f, use_cache=not no_cache, progress=True) for f in files]
    with np.errstate(all="ignore"):  # every figure is checked; numpy's warnings are not for the user
        reports = [file_stats(data, ranks) for data in datasets]
    if as_json:
        text = json.dumps(strict_json({"rafm_version": __version__, "files": reports}), indent=1,
                          allow_nan=False)
    else:
        encoding = (getattr(sys.stdout, "encoding", None) or "").lower()
        bar = "█" if encoding.startswith("utf") else "#"
        text = "\n\n".join(render_text(r, bar) for r in reports)
    with Outputs() as outputs:
        outputs.write(STDOUT, lambda fh: fh.write(text + "\n"))
        if plot_path:
            import functools

            from rafmcli.plots import frequency_figure, image_format, write

            fig = frequency_figure([(os.path.basename(f), d.counts) for f, d in zip(files, datasets)], ranks)
            outputs.write(plot_path, functools.partial(write, fig, fmt=image_format(plot_path)), binary=True)
