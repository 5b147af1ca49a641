"""Errors that end a command with a one-line message and a fixed exit status.

Exit statuses: 1 internal error, 2 bad input (usage or data), 3 training
diverged.
"""

import click


class InputError(click.ClickException):
    """Bad input file or option value: ``FILE:LINE: what (token)``, exit 2."""

    exit_code = 2


class DivergedError(click.ClickException):
    """Training produced a NaN or infinite loss: exit 3, nothing written."""

    exit_code = 3
