"""`rafm stats`: rows, features, labels, histogram and what each model costs."""

import json
import sys

import click

from rafmcli import __version__
from rafmcli.cli.options import RANKS, no_cache_option


@click.command()
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
    from rafmcli.io.output import STDOUT, Outputs, check_target
    from rafmcli.io.reader import read_dataset
    from rafmcli.stats import file_stats, render_text

    try:
        check_target(STDOUT)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    reports = [file_stats(read_dataset(f, use_cache=not no_cache, progress=True), ranks)
               for f in files]
    if as_json:
        text = json.dumps({"rafm_version": __version__, "files": reports}, indent=1)
    else:
        encoding = (getattr(sys.stdout, "encoding", None) or "").lower()
        bar = "█" if encoding.startswith("utf") else "#"
        text = "\n\n".join(render_text(r, bar) for r in reports)
    with Outputs() as outputs:
        outputs.write(STDOUT, lambda fh: fh.write(text + "\n"))
