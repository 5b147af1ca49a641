"""Errors that end a command with a one-line message and a fixed exit status.

Exit statuses: 1 internal error, 2 bad input (usage, data, an output that
cannot be written), 3 training diverged, 128+N killed by signal N (SIGINT,
SIGTERM, SIGHUP; see :mod:`rafmcli.cli`).
"""

import click


class InputError(click.ClickException):
    """Bad input file or option value: ``FILE:LINE: what (token)``, exit 2."""

    exit_code = 2


class OutputError(click.ClickException):
    """An output cannot be written: ``FILE: cannot write: why``, exit 2; no output is committed."""

    exit_code = 2


class DivergedError(click.ClickException):
    """Training produced a NaN or infinite loss: exit 3, nothing written."""

    exit_code = 3


class Terminated(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived: unwinds every ``finally:`` (temporary
    files, spooled input), then the command exits with 128 + ``signum``.

    A BaseException, like KeyboardInterrupt, so that ``except Exception``
    cannot swallow it.
    """

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def printable(text, limit=None):
    """``text`` (str, or bytes read as UTF-8) safe for a one-line message.

    Bytes that are not UTF-8, control characters (NUL, CR, ESC, ...) and other
    unprintable characters are escaped as ``\\x00``, ``\\u2028``; past
    ``limit`` characters the rest becomes ``...``.
    """
    if isinstance(text, str):
        try:  # a name or line Python decoded with surrogateescape: its bytes again
            text = text.encode("utf-8", errors="surrogateescape")
        except UnicodeEncodeError:
            pass
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="backslashreplace")
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    if limit is not None and len(shown) > limit:
        shown = shown[:limit - 3] + "..."
    return shown
