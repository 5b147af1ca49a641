"""The ``--levels`` file: ``feature level`` pairs that override Eq. 17's k_i.

One pair a line, fields split by blanks, ``#`` starts a comment, blank lines
are skipped; lines end at LF, CRLF or a lone CR and a UTF-8 byte-order mark is
ignored, as in data files. A feature is a decimal id 0..2147483647 (ASCII
digits only), a level an integer 1..m; each feature at most once. Anything
else is ``FILE:LINE: what (token)``, exit 2.
"""

import re
from typing import NamedTuple

import numpy as np

from rafmcli.errors import InputError, printable
from rafmcli.io.side_files import read_bytes

INT32_MAX = 2147483647
_LINE_END = re.compile(rb"\r\n|\r|\n")
_DIGITS = re.compile(rb"[0-9]+")


class LevelsOverride(NamedTuple):
    """Feature ids and the level each must take (1-based, paper Eq. 17's k_i)."""

    ids: np.ndarray
    levels: np.ndarray

    def absent(self, feature_ids):
        """How many of the named features are not among ``feature_ids`` (sorted)."""
        return int((~np.isin(self.ids, feature_ids)).sum())


def _bad(where, what, token):
    return InputError(f"{where}: {what} ({printable(token, 60)})")


def read_levels_file(path, m):
    """Parse ``path`` for a model of ``m`` levels; a bad line raises InputError naming it."""
    name = printable(path)
    text = read_bytes(path, "levels file")
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    ids, levels, seen = [], [], {}
    for line_no, line in enumerate(_LINE_END.split(text), 1):
        where = f"{name}:{line_no}"
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad(where, "not UTF-8 text", line[exc.start:exc.start + 8]) from None
        fields = line.split(b"#")[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            raise _bad(where, "expected 'feature level'", line.strip())
        feature, level = fields
        if not _DIGITS.fullmatch(feature):
            raise _bad(where, "feature is not a non-negative integer", feature)
        if int(feature) > INT32_MAX:
            raise _bad(where, "feature exceeds 2147483647", feature)
        if not _DIGITS.fullmatch(level) or not 1 <= int(level) <= m:
            raise _bad(where, f"level must be 1..{m}", level)
        if int(feature) in seen:
            raise _bad(where, f"feature already given on line {seen[int(feature)]}", feature)
        seen[int(feature)] = line_no
        ids.append(int(feature))
        levels.append(int(level))
    return LevelsOverride(np.asarray(ids, dtype=np.int64), np.asarray(levels, dtype=np.int64))
