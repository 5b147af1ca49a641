"""Feature groups: libFM's ``--meta`` file (line n holds the group id of feature n),
or the fields of a libFFM training file (``label field:idx:value``: group = field).

Groups give the Bayesian solver its per-group priors and the SGD, SGDA and
ALS solvers their per-group regularisation; negative sampling resamples one
group at a time. A group is a field of the data (user, item, genre, ...):
features of a one-hot group never share a row.

The file: one non-negative integer per line, line 1 for feature 0 (libFM's
convention, also for 1-based data: line 1 then names an unused feature 0).
Blank lines at the end are ignored; CRLF and a UTF-8 byte-order mark are
accepted. Group ids run from 0 to N-1 in a file of N lines, so no group
table outgrows the features. Features beyond the file form one extra group.
"""

from dataclasses import dataclass

import numpy as np

from rafmcli.errors import InputError, printable
from rafmcli.io.side_files import read_bytes


@dataclass(frozen=True)
class Groups:
    """The parsed file: ``of_id[n]`` is the group of feature id n; ``n_named`` = max id + 1."""

    path: str
    of_id: np.ndarray
    n_named: int

    def assign(self, feature_ids):
        """The :class:`GroupAssignment` of ``feature_ids`` (original ids, any order)."""
        ids = np.asarray(feature_ids, dtype=np.int64)
        inside = ids < self.of_id.shape[0]
        group = np.full(ids.shape, self.n_named, dtype=np.int32)
        group[inside] = self.of_id[ids[inside]]
        beyond = int((~inside).sum())
        return GroupAssignment(group, self.n_named + (beyond > 0), beyond)


@dataclass(frozen=True)
class GroupAssignment:
    """Groups of a model's features.

    ``group[j]`` is the group of feature j (0 .. n_groups-1); ``beyond`` of
    them were past the end of the file and make up the last group.
    """

    group: np.ndarray
    n_groups: int
    beyond: int = 0

    def sizes(self):
        """Features per group."""
        return np.bincount(self.group, minlength=self.n_groups).astype(np.int64)


@dataclass(frozen=True)
class FieldGroups:
    """Groups read from a libFFM file: ``fields[j]`` is the field of feature ``ids[j]``
    (sorted ids); group ids are the field numbers, so ``n_named`` = largest field + 1."""

    path: str
    ids: np.ndarray
    fields: np.ndarray
    n_named: int

    @classmethod
    def of(cls, data):
        """The fields of a parsed libFFM file (a reader Dataset), or None for libSVM/libFM."""
        if data.feature_fields is None:
            return None
        fields = np.asarray(data.feature_fields, dtype=np.int32)
        n_named = int(fields.max()) + 1 if fields.shape[0] else 0
        return cls(data.path, np.asarray(data.feature_ids), fields, n_named)

    def assign(self, feature_ids):
        """The :class:`GroupAssignment` of ``feature_ids``; ids the file lacks form one extra group."""
        ids = np.asarray(feature_ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, ids), max(self.ids.shape[0] - 1, 0))
        inside = self.ids[at] == ids if self.ids.shape[0] else np.zeros(ids.shape, dtype=bool)
        group = np.full(ids.shape, self.n_named, dtype=np.int32)
        group[inside] = self.fields[at[inside]]
        beyond = int((~inside).sum())
        return GroupAssignment(group, self.n_named + (beyond > 0), beyond)


    def check(self, name, data):
        """Another file read with these groups (validation, test): where it is libFFM too, a
        feature it shares with the training file must be in the same field there; else
        ``InputError`` at the first line that puts one in another field."""
        if data.feature_fields is None or not self.ids.shape[0]:
            return
        ids = np.asarray(data.feature_ids)
        at = np.minimum(np.searchsorted(self.ids, ids), self.ids.shape[0] - 1)
        bad = (self.ids[at] == ids) & (self.fields[at] != np.asarray(data.feature_fields))
        if not bad.any():
            return
        from rafmcli.errors import printable
        from rafmcli.io.reader import data_line_number

        entry = int(np.flatnonzero(np.isin(data.indices, ids[bad]))[0])
        row = int(np.searchsorted(data.indptr, entry, side="right")) - 1
        idx = int(data.indices[entry])
        j = int(np.searchsorted(ids, idx))
        line = data_line_number(name, row) if name != "-" else None
        where = f"{printable(name)}:{line}" if line else f"{printable(name)}: row {row + 1}"
        raise InputError(f"{where}: feature {idx} is in field {int(data.feature_fields[j])} here but in field "
                         f"{int(self.fields[at[j]])} in {printable(self.path)}, whose fields are the groups")


def single_group(n_features):
    """All features in group 0: what every solver uses without ``--meta``."""
    return GroupAssignment(np.zeros(n_features, dtype=np.int32), 1, 0)


def read_groups(path):
    """Parse a group file; a bad line raises ``InputError`` as ``FILE:LINE: what (token)``."""
    raw = read_bytes(path, "group file")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    tokens = [line.strip() for line in lines]
    try:
        if not all(t.isdigit() and len(t) < 19 for t in tokens):
            raise ValueError
        of_id = np.array(tokens, dtype=np.int64) if tokens else np.zeros(0, np.int64)
        if of_id.shape[0] and of_id.max() >= of_id.shape[0]:
            raise ValueError
    except ValueError:
        raise _first_bad_line(path, tokens) from None
    n_named = int(of_id.max()) + 1 if of_id.shape[0] else 0
    return Groups(path, of_id.astype(np.int32), n_named)


def _first_bad_line(path, tokens):
    for n, token in enumerate(tokens, 1):
        if not token:
            return InputError(f"{printable(path)}:{n}: expected a group id (empty line)")
        if not token.isdigit():
            what = "expected one group id" if len(token.split()) > 1 else "not a non-negative integer"
            return InputError(f"{printable(path)}:{n}: {what} ({_shown(token)})")
        if int(token) >= len(tokens):
            return InputError(f"{printable(path)}:{n}: group ids run from 0 to {len(tokens) - 1} in a file of "
                              f"{len(tokens)} lines ({_shown(token)})")
    raise AssertionError("no bad line")


def _shown(token):
    text = token.decode("utf-8", errors="replace")
    return text if len(text) <= 60 else text[:57] + "..."
