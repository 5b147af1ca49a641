"""The small files read whole beside the data (--meta, --levels, libFM text models, --rlog
tables) and the model files: never a device, never a pipe without end.

/dev/zero as a group file, a model or a log would otherwise be read until memory ran out
(zipfile reads a model's last bytes "to the end").
"""

import os
import re
import stat

from rafmcli.errors import InputError, printable

PIPE_LIMIT = 1 << 30  # bytes read from a pipe or FIFO before it is refused
_LINE_END = re.compile("\r\n|\r|\n")


def is_regular(path, what):
    """Whether ``path`` is a regular file; a character or block device (/dev/zero, a terminal) is
    the InputError ``FILE: a device, not a WHAT``. A path that cannot be looked at counts as
    regular: its open says why."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return True
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise InputError(f"{printable(path)}: a device, not a {what}")
    return stat.S_ISREG(mode)


def read_bytes(path, what):
    """All of ``path``, a ``what`` ("group file"): a regular file whole, a pipe up to
    PIPE_LIMIT bytes; a device, a longer pipe or a file that cannot be read is an InputError."""
    regular = is_regular(path, what)
    try:
        with open(path, "rb") as fh:
            raw = fh.read() if regular else fh.read(PIPE_LIMIT + 1)
    except OSError as exc:
        raise InputError(f"{printable(path)}: cannot open: {exc.strerror or exc}") from None
    if len(raw) > PIPE_LIMIT and not regular:
        raise InputError(f"{printable(path)}: more than {PIPE_LIMIT:,} bytes from a pipe: not a {what}")
    return raw


def text_lines(raw, encoding, errors="strict"):
    """The lines of ``raw`` decoded, without their ends, as a text file's iteration finds them
    (universal newlines: \\n, \\r\\n and \\r end a line; no line after a last end). Split, not
    io.StringIO, which keeps four bytes a character."""
    lines = _LINE_END.split(raw.decode(encoding, errors))
    if lines[-1] == "":
        lines.pop()
    return lines
