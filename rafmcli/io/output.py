"""Prediction files: one value a line, written whole or not at all."""

import contextlib
import os
import sys
import tempfile

import numpy as np

PREDICTION_FORMAT = "%.9g"


def write_predictions(path, predictions):
    """Write to ``path`` through a temporary file renamed into place; ``-`` is stdout.

    When the reader of stdout goes away (``rafm predict ... | head``) the rest
    is dropped quietly: the consumer has what it asked for.
    """
    if path == "-":
        try:
            np.savetxt(sys.stdout, predictions, fmt=PREDICTION_FORMAT)
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".rafm-out-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            np.savetxt(fh, predictions, fmt=PREDICTION_FORMAT)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def text_output(path, encoding="utf-8"):
    """A text handle for ``path`` whose content appears whole or not at all; ``-`` is stdout.

    The file is written beside ``path`` and renamed into place when the block
    ends without an exception. On stdout, a reader that goes away early ends
    the output quietly, as in :func:`write_predictions`.
    """
    if path == "-":
        try:
            yield sys.stdout
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".rafm-out-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
