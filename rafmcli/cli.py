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
