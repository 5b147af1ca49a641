"""Click parameter types and options shared by several commands.

Every number a user types is checked here, at parse time (click's usage
error, exit 2): floats are finite and in range, seeds fit 64 bits, outputs can
be written.
"""

import math

import click

from rafmcli.options import FLOAT32_MAX


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


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan, inf and -inf (nan passes every
    bound check, since it compares false with everything)."""

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):  # before the bounds: inf is no number, not one out of range
            self.fail(f"{value} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self):
        """click's words for the range, float32's largest as 3.40282e+38 (not 17 digits)."""
        return super()._describe_range().replace(repr(FLOAT32_MAX), f"{FLOAT32_MAX:g}")


def ranged(name):
    """The click type of the Options field ``name``'s range in options.RANGES, the table the
    API checks too: an integer or a finite float between its bounds."""
    from rafmcli.options import RANGES

    r = RANGES[name]
    kind = click.IntRange if r.integer else FiniteFloatRange
    return kind(r.low, r.high, min_open=r.low_open, max_open=r.high_open)


class SeedType(click.ParamType):
    """Any integer that fits 64 bits, -2^63..2^64-1. A negative seed s is
    s + 2^64, the unsigned value of its two's-complement bits (-1 is 2^64-1)."""

    name = "INTEGER"
    low, high = -(1 << 63), (1 << 64) - 1

    def convert(self, value, param, ctx):
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not an integer", param, ctx)
        if not self.low <= number <= self.high:
            self.fail(f"{value} does not fit 64 bits ({self.low}..{self.high})", param, ctx)
        return number % (1 << 64)


SEED = SeedType()


class FloatListType(click.ParamType):
    """Comma-separated non-negative floats that float32 holds."""

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
        if any(not math.isfinite(v) for v in out):
            self.fail(f"values must be finite ({value})", param, ctx)
        if any(v > FLOAT32_MAX for v in out):  # the kernels' float32 would make them inf
            self.fail(f"values must be at most {FLOAT32_MAX:g}, float32's largest ({value})", param, ctx)
        return out


FLOATS = FloatListType()


class GroupListType(click.ParamType):
    """Comma-separated group ids (non-negative integers)."""

    name = "G,G,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        tokens = [t.strip() for t in value.split(",")]
        if not all(t.isdigit() for t in tokens):
            self.fail(f"expected comma-separated group ids ({value})", param, ctx)
        return tuple(sorted({int(t) for t in tokens}))


GROUP_LIST = GroupListType()


class LevelType(click.ParamType):
    """A RaFM/DiFacto level of rafm embed/similar: a positive integer, or ``all`` (None)."""

    name = "N|all"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "all":
            return None
        if not str(value).strip().isdigit() or int(value) < 1:
            self.fail(f"expected a level 1, 2, ... or all ({value})", param, ctx)
        return int(value)


LEVEL = LevelType()
INPUT = click.Path(dir_okay=False, allow_dash=True)


class OutputPath(click.ParamType):
    """An output file, checked at parse time, before any work (see rafmcli.io.output):
    a new or regular file needs a writable directory, a device, FIFO or link must
    be writable, a directory is refused; ``-`` is standard output (must be open)."""

    name = "FILE"

    def __init__(self, stdout_ok=True):
        self.stdout_ok = stdout_ok

    def convert(self, value, param, ctx):
        from rafmcli.errors import printable
        from rafmcli.io.output import STDOUT, check_target

        if value == STDOUT and not self.stdout_ok:
            self.fail("a binary file cannot go to standard output; give a file name", param, ctx)
        try:
            check_target(value)
        except ValueError as exc:
            self.fail(str(exc) if value == STDOUT else f"{printable(value)}: {printable(str(exc))}", param, ctx)
        return value


OUTPUT = OutputPath()
BINARY_OUTPUT = OutputPath(stdout_ok=False)


def _opened(path, stream):
    """os.stat of what ``path`` opens (``-``: the file descriptor ``stream``), or None."""
    import os

    try:
        return os.fstat(stream) if path == "-" else os.stat(path)
    except OSError:
        return None


def _same_output(path, st, other_path, other_st):
    """Whether two outputs (paths and :func:`_opened` stats) are one: ``-`` twice, one path when
    neither exists yet, or one inode, but for a device or a named FIFO not reached through ``-``."""
    import os
    import stat

    if path == other_path == "-":
        return True
    if st is None or other_st is None:
        return st is other_st and path != "-" and os.path.realpath(path) == os.path.realpath(other_path)
    sink = stat.S_ISCHR(st.st_mode) or (stat.S_ISFIFO(st.st_mode) and "-" not in (path, other_path))
    return (st.st_dev, st.st_ino) == (other_st.st_dev, other_st.st_ino) and not sink


def arguments(name, paths):
    """{label: path} of a command's FILE... arguments: ``NAME`` alone, else ``NAME 1``, ``NAME 2``..."""
    return {name: paths[0]} if len(paths) == 1 else {f"{name} {n}": p for n, p in enumerate(paths, 1)}


def distinct_files(inputs, outputs, in_place=()):
    """Refuse an output that is one of the inputs (``--save-model`` naming the ``--train``
    file, through a link, another path or a redirection of ``-``), two outputs that are one
    file (``--out x --rlog x``, hard links, ``--out /dev/stdout --rlog -``) and ``-`` as two
    inputs (standard input is read once). ``inputs``, ``outputs``: {label: path or None}, a
    label being an option (``--train``) or an argument (``FILE``); ``in_place``: (output,
    input) label pairs that may be one file (a model continued in place: it is read whole
    before anything is written). Devices (``/dev/null``) may take several outputs, and a
    named FIFO too."""
    import stat

    dashes = [label for label, path in inputs.items() if path == "-"]
    if len(dashes) > 1:
        raise click.UsageError(f"{dashes[0]} and {dashes[1]} both name standard input (-), which can be read once")
    read = {label: _opened(path, 0) for label, path in inputs.items() if path is not None}
    seen = []  # (label, path, stat or None)
    for label, path in outputs.items():
        if path is None:
            continue
        st = _opened(path, 1)
        for other, other_path, other_st in seen:
            if _same_output(path, st, other_path, other_st):
                raise click.UsageError(f"{other} and {label} name the same output ({path})")
        seen.append((label, path, st))
        if st is None or not stat.S_ISREG(st.st_mode):
            continue
        for in_label, in_st in read.items():
            if in_st is not None and (in_st.st_dev, in_st.st_ino) == (st.st_dev, st.st_ino) \
                    and (label, in_label) not in in_place:
                raise click.UsageError(f"{label} names the input {in_label} ({path}): rafm never writes over "
                                       f"its inputs")


no_cache_option = click.option(
    "--no-cache", is_flag=True,
    help="Parse the text every time; do not read or write the binary cache "
         "(kept in $RAFM_CACHE_DIR, default ~/.cache/rafm).")


def read(path, no_cache, quiet):
    """A Dataset through the cache; unless ``quiet``, a progress bar and a word on repeated ids."""
    from rafmcli.io.reader import read_dataset

    data = read_dataset(path, use_cache=not no_cache, progress=not quiet)
    if not quiet:
        warn_repeats(data)
    return data


def warn_repeats(data):
    if data.rows_with_repeats:
        from rafmcli.errors import printable

        click.echo(f"rafm: {printable(data.path)}: {data.rows_with_repeats:,} rows repeat a feature index; "
                   f"the values of each repeated index were summed", err=True)


def warn_unseen(name, occurrences, distinct):
    if occurrences:
        from rafmcli.errors import printable

        click.echo(f"rafm: {printable(name)}: {occurrences:,} occurrences of {distinct:,} features unseen in "
                   f"training contribute nothing", err=True)


MODEL = click.Path(exists=True, dir_okay=False)
TOP_K = ranged("top_k")


def load_model(path, groups=False):
    """A model file; with ``groups``, one trained on implicit data (it knows its feature groups)."""
    from rafmcli.errors import InputError
    from rafmcli.model import files as model_files

    model = model_files.load(path)
    if groups and model.vocabulary is None:
        raise InputError(f"{path}: the model has no feature groups (train it with --task implicit)")
    return model


def check_group(model, path, group):
    """``group`` must hold features of the model."""
    from rafmcli.errors import InputError, printable

    if group >= model.vocabulary.n_groups or not (model.vocabulary.group_of == group).any():
        raise InputError(f"{printable(path)}: group {group} has no features in the model")
