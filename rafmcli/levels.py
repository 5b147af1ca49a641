"""Rank levels k_i (paper Eq. 17) and what a rank set costs.

Levels are 1-based as in the paper: k_i in 1..m, F_k = {i : k_i >= k}.
"""

from dataclasses import dataclass

import numpy as np

from rafmcli.kernels import read_only
from rafmcli.options import MAX_LEVELS, MAX_RANK


def parse_ranks(text):
    """``"32,512"`` -> (32, 512); 1 to MAX_LEVELS ranks, strictly increasing, in 1..MAX_RANK."""
    try:
        ranks = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"ranks must be comma-separated integers ({text})") from None
    if not ranks or min(ranks) < 1 or any(b <= a for a, b in zip(ranks, ranks[1:])):
        raise ValueError(f"ranks must be positive and strictly increasing ({text})")
    if len(ranks) > MAX_LEVELS:
        raise ValueError(f"at most {MAX_LEVELS} ranks (levels), not {len(ranks)}")
    if ranks[-1] > MAX_RANK:
        raise ValueError(f"a rank must be at most {MAX_RANK} ({ranks[-1]})")
    return ranks


def assign_levels(counts, ranks):
    """Eq. 17: k_i = argmin_k |log n_i - log D_k|, ties to the lower level, n_i = 0 -> 1.

    Level k is passed once n_i exceeds the geometric mean sqrt(D_k D_{k+1});
    the comparison n_i^2 > D_k D_{k+1} is exact in integers.
    """
    from rafmcli.kernels.counting import assign_levels as kernel

    return kernel(*read_only(counts), level_bounds(ranks))


@dataclass
class LevelSummary:
    """Per level k (index k-1): D_k, |F_k|, features whose top level is k, n(F_k)."""

    ranks: tuple
    size: np.ndarray
    top: np.ndarray
    occupancy: np.ndarray
    n_features: int

    def params(self, model):
        """Parameters including bias and linear weights (Proposition 1 for RaFM)."""
        linear = self.n_features + 1
        d = np.asarray(self.ranks, dtype=np.int64)
        if model == "fm":
            return int(d[-1] * self.n_features + linear)
        if model == "rafm":
            return int((d * self.size).sum() + linear)
        return int((np.diff(d, prepend=0) * self.size).sum() + linear)

    def cost(self, model):
        """Expected pairwise multiply-adds per row: Sum_k D_k n(F_k) (Corollary 4)."""
        d = np.asarray(self.ranks, dtype=np.float64)
        if model == "fm":
            return float(d[-1] * self.occupancy[0])
        if model == "rafm":
            return float((d * self.occupancy).sum())
        return float((np.diff(d, prepend=0) * self.occupancy).sum())


def summarize(levels, counts, n_rows, ranks):
    """|F_k|, top-level counts and n(F_k) = Sum_{i in F_k} n_i / rows."""
    from rafmcli.kernels.counting import level_totals

    m = len(ranks)
    top, per_level = level_totals(*read_only(levels, counts), m)
    return summary_of_totals(top, per_level, n_rows, ranks, int(levels.shape[0]))


def summary_of_totals(top, per_level, n_rows, ranks, n_features):
    """The LevelSummary of the features whose top level is k (``top``) and their occurrences."""
    size = np.cumsum(top[::-1])[::-1]
    occupancy = np.cumsum(per_level[::-1])[::-1] / max(n_rows, 1)
    return LevelSummary(tuple(ranks), size, top, occupancy, n_features)


def level_bounds(ranks):
    """D_k D_{k+1}: level k + 1 starts where n_i^2 exceeds it (Eq. 17)."""
    return np.array([lo * hi for lo, hi in zip(ranks, ranks[1:])], dtype=np.int64)

