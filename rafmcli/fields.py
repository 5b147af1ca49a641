"""Feature groups inferred from the rows, for data that comes without ``--meta`` or libFFM fields.

libSVM/libFM files rarely come with a group file, yet the Bayesian solver's
per-group priors (and SGDA's per-group L2) pay off: users and items are
different populations. A one-hot field's features never share a row, so:

1. the features are coloured so that no two of a colour share a row, fields
   first (:func:`rafmcli.kernels.fields.saturation_colouring`, DSatur), then
   each feature moves to the free colour that covers the most rows;
2. a feature is *forced* when no other colour free in all its rows covers
   half as many rows as its own: it fills that field's slot in its rows and
   could fill no other. A colour whose features are forced (all but
   ``MAX_LOOSE``), which holds at least two features and occurs in at least half
   the rows is a field (in data without fields a colour holds a few of the
   many features that could take it);
3. everything else (numeric columns and flags, alone in a colour; fragments of
   multi-hot sets such as genres, and the features whose colour they share;
   data without fields, where most features could take many colours) makes
   up one remaining group. No field found: one group, as without inference.

Features with identical rows (a user with a zip code of its own) cannot be
told apart by their rows; either may land in the other's field.
"""

from dataclasses import dataclass

import numpy as np

from rafmcli.io.groups import GroupAssignment

MOVE_PASSES = 4
RIVAL_SHARE = 0.5   # another free colour covering this share of the own colour's rows: not forced
MAX_LOOSE = 0.1     # a field has at most this share of features that are not forced
MIN_COVER = 0.5     # and occurs in at least this share of the rows


@dataclass(frozen=True)
class Inferred:
    """The groups found (``assignment``, columns in ``feature_ids`` order), the features per field
    (largest field first) and the features left in the remaining group (0: none)."""

    assignment: GroupAssignment
    field_sizes: tuple
    rest: int

    def describe(self):
        """One line for stderr."""
        if not self.field_sizes:
            return "one (no one-hot fields in the training rows)"
        sizes = ", ".join(f"{s:,}" for s in self.field_sizes)
        text = f"{len(self.field_sizes)} one-hot fields inferred from the training rows ({sizes} features)"
        if self.rest:
            text += f" and one of the other {self.rest:,}"
        return text


def groups_for(data, opts, groups=None, echo=None):
    """The feature groups a grouped solver (sgda, als, mcmc) runs with: ``groups`` when given
    (--meta, libFFM fields), else those inferred from ``data`` (``opts.auto_groups``, said through
    ``echo``), else one group."""
    from rafmcli.io.columns import columns_of
    from rafmcli.io.groups import single_group

    if groups is not None:
        return groups
    if not opts.auto_groups:
        return single_group(data.feature_ids.shape[0])
    found = infer(data, columns_of(data))
    if echo is not None:
        change = "--meta FILE or --no-auto-groups to change" if found.field_sizes else "--meta FILE to give them"
        echo(f"rafm: feature groups: {found.describe()}; {change}")
    return found.assignment


def infer(data, columns):
    """The :class:`Inferred` groups of ``data``'s features (``columns``: its CSC arrays)."""
    from rafmcli.kernels.fields import coverage_moves, saturation_colouring

    n = int(np.asarray(data.feature_ids).shape[0])
    counts = np.asarray(data.counts, dtype=np.int64)
    col = np.searchsorted(data.feature_ids, data.indices).astype(np.int32)
    by_count = np.argsort(-counts, kind="stable").astype(np.int32)
    rank = np.empty(n, dtype=np.int64)
    rank[by_count[::-1]] = np.arange(n)  # ties go to the more frequent feature
    colours, taken = saturation_colouring(np.asarray(data.indptr), col, columns.indptr, columns.rows, rank)
    cover, rival = coverage_moves(columns.indptr, columns.rows, colours, taken, by_count, MOVE_PASSES)
    own = np.where(colours >= 0, cover[np.maximum(colours, 0)] - counts, 0)
    loose = (colours < 0) | (rival >= RIVAL_SHARE * np.maximum(own, 1))
    fields = []
    for c in range(int(colours.max(initial=-1)) + 1):
        members = colours == c
        size = int(members.sum())
        if size >= 2 and cover[c] >= MIN_COVER * data.n_rows and loose[members].mean() <= MAX_LOOSE:
            fields.append((-size, c))
    fields.sort()
    if not fields:
        return Inferred(GroupAssignment(np.zeros(n, dtype=np.int32), 1), (), 0)
    group = np.full(n, len(fields), dtype=np.int32)
    for g, (_, c) in enumerate(fields):
        group[colours == c] = g
    rest = int((group == len(fields)).sum())
    return Inferred(GroupAssignment(group, len(fields) + (rest > 0)), tuple(-s for s, _ in fields), rest)
