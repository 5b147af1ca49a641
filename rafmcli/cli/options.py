"""Click parameter types and options shared by several commands."""

import click


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


def read(path, no_cache, quiet):
    """A Dataset through the cache, with a progress bar unless ``quiet``."""
    from rafmcli.io.reader import read_dataset

    return read_dataset(path, use_cache=not no_cache, progress=not quiet)


def warn_unseen(name, occurrences, distinct):
    if occurrences:
        click.echo(f"rafm: {name}: {occurrences:,} occurrences of {distinct:,} features unseen in "
                   f"training contribute nothing", err=True)
