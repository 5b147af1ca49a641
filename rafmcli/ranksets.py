"""Rank sets from the data: the candidates `rafm tune` searches and `rafm train`'s default.

Eq. 17 gives feature i the level whose rank is nearest its count n_i on a log
scale: a rank D is worth having when there are features seen about D times
or more, because n_i rows is what estimates a vector of D numbers. So the
ranks come from the histogram of n_i:

* the top rank D_max is the largest power of two that at least
  ``MIN_TOP_FEATURES`` features reach (n_i >= D), capped at sqrt(rows) (a
  model of more numbers than rows support overfits whatever the counts) and
  at ``MAX_RANK`` (the paper's largest);
* rank sets are powers of two up to D_max, levels a factor 4 or 16 apart
  (the paper's sets S_1-S_3 are 16 and 4 apart), two or three levels, each
  top level holding at least ``MIN_TOP_FEATURES`` features by Eq. 17.

A given top rank (`rafm tune --top-rank`, for comparing models at the same
D_max as the paper's tables do) replaces the rule's D_max, and then every
lower power of two may be a level: a fixed top leaves few sets 4 or 16 apart.
"""

from dataclasses import dataclass

import numpy as np

from rafmcli.levels import assign_levels, summarize

MIN_RANK = 4
MAX_RANK = 512
MIN_TOP_FEATURES = 8  # fewer features on a level than this hardly change a model
STEPS = (4, 16)  # D_{k+1} / D_k of two-level sets; three-level sets step by 4


def powers_of_two(lo, hi):
    out, d = [], lo
    while d <= hi:
        out.append(d)
        d *= 2
    return out


def top_rank(counts, n_rows):
    """D_max: the largest power of two in [MIN_RANK, MAX_RANK] reached by MIN_TOP_FEATURES
    features (n_i >= D) and at most sqrt(rows); MIN_RANK at least."""
    counts = np.sort(np.asarray(counts, dtype=np.int64))[::-1]
    reached = int(counts[MIN_TOP_FEATURES - 1]) if counts.shape[0] >= MIN_TOP_FEATURES else 0
    cap = min(MAX_RANK, reached, int(np.sqrt(max(n_rows, 1))))
    return max((d for d in powers_of_two(MIN_RANK, MAX_RANK) if d <= cap), default=MIN_RANK)


def level_sizes(counts, ranks):
    """Features whose top level is k (k = 1..m) by Eq. 17."""
    return np.bincount(assign_levels(counts, ranks), minlength=len(ranks) + 1)[1:]


def usable(counts, ranks):
    """Every level above the first holds at least MIN_TOP_FEATURES features of its own."""
    return bool(np.all(level_sizes(counts, ranks)[1:] >= MIN_TOP_FEATURES))


def candidates(counts, n_rows, model, top=None):
    """The rank sets `rafm tune` searches for ``model``: FM ranks, or two- and three-level sets;
    with ``top``, only sets whose top rank is ``top`` (FM: that rank alone)."""
    if top is not None:
        return _candidates_under(counts, model, top)
    top = top_rank(counts, n_rows)
    ranks = powers_of_two(MIN_RANK, top)
    if model == "fm":
        return [(d,) for d in ranks]
    sets = [(d, d * s) for s in STEPS for d in ranks if d * s <= top]
    sets += [(d, 4 * d, 16 * d) for d in ranks if 16 * d <= top]
    sets = [s for s in sets if usable(counts, s)]
    return sets or [(top,)]


def _candidates_under(counts, model, top):
    """Rank sets ending in ``top``: every lower power of two as level 1, and three levels
    (d, e, top) with powers of two d < e < top."""
    if model == "fm":
        return [(top,)]
    lower = [d for d in powers_of_two(MIN_RANK, top) if d < top]
    sets = [(d, top) for d in lower] + [(d, e, top) for d in lower for e in lower if d < e]
    sets = [s for s in sets if usable(counts, s)]
    return sets or [(top,)]


@dataclass
class Choice:
    """A rank set chosen from the data, and the reason in words."""

    ranks: tuple
    why: str


def choose(counts, n_rows, model, top=None):
    """`rafm train`'s ranks when neither --ranks nor --dim is given (see module notes); with
    ``top``, the same rule under that top rank."""
    n_features = int(np.asarray(counts).shape[0])
    if top is None:
        top = top_rank(counts, n_rows)
        reach = int((np.asarray(counts) >= top).sum())
        basis = (f"{reach:,} of {n_features:,} features occur at least {top} times in {n_rows:,} rows "
                 f"(top rank: the largest power of two reached by {MIN_TOP_FEATURES}+ features, "
                 f"at most sqrt(rows))")
    else:
        basis = f"top rank {top} as given"
    if model == "fm":
        return Choice((top,), basis)
    for step in (16, 4):
        ranks = (top // step, top)
        if ranks[0] >= MIN_RANK and usable(counts, ranks):
            sizes = level_sizes(counts, ranks)
            return Choice(ranks, f"{basis}; level 2 (n_i > {int(np.sqrt(ranks[0] * top))}) holds "
                                 f"{sizes[1]:,} features")
    return Choice((top,), f"{basis}; no lower level would hold {MIN_TOP_FEATURES}+ features of its own")


def thin_levels(counts, n_rows, ranks, share=0.01):
    """Levels (1-based) above the first whose own features make less than ``share`` of the
    non-zeros: their extra rank hardly changes the model (a warning, not an error)."""
    levels = assign_levels(counts, ranks)
    summary = summarize(levels, counts, n_rows, ranks)
    occupancy = np.append(summary.occupancy, 0.0)
    own = occupancy[:-1] - occupancy[1:]  # non-zeros a row of features whose top level is k
    total = max(summary.occupancy[0], 1e-12)
    return [(k + 1, int(summary.top[k]), float(own[k] / total)) for k in range(1, len(ranks))
            if summary.top[k] < MIN_TOP_FEATURES or own[k] / total < share]
