"""Training options and the one table of their defaults.

The dataclass field defaults below are the defaults of ``rafm train``, of the
Python code and of the man pages (tests compare them): change a default here
and nowhere else.
"""

from dataclasses import dataclass

DEFAULT_RANKS = {"fm": (8,), "rafm": (32, 512), "difacto": (32, 512)}


@dataclass
class Options:
    """Everything that shapes a training run (the data comes separately)."""

    task: str = "r"
    model: str = "rafm"
    ranks: tuple = DEFAULT_RANKS["rafm"]
    method: str = "adagrad"
    iters: int = 100
    learn_rate: float = 0.05
    dependent_rate: float | None = None
    variant: str = "paper"
    dependent_weight: float = 1.0
    reg_bias: float = 0.0
    reg_linear: float = 0.0
    reg_factors: tuple = (0.01,)
    init_stdev: float = 0.01
    bias: bool = True
    linear: bool = True
    seed: int = 1
    threads: int = 1
    early_stop: int = 5
    holdout: float = 0.1
    burn_in: int = 0
    keep_samples: int = 10
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    # --task implicit (Feat2Vec negative sampling; solvers/implicit.py)
    negatives: int = 5
    alpha1: float = 0.75
    alpha2: float = 0.75
    loss: str = "logistic"
    nce: bool = True
    reject_positives: bool = False
    negative_groups: tuple | None = None
    eval_group: int | None = None
    top_k: int = 10


DEFAULTS = Options()


def per_level(values, m):
    """A per-level tuple from one value (all levels) or m values."""
    values = tuple(values)
    if len(values) == 1:
        return values * m
    if len(values) != m:
        raise ValueError(f"expected 1 or {m} pairwise regularisation values, got {len(values)}")
    return values
