"""Training options and the one table of their defaults.

The dataclass field defaults below are the defaults of ``rafm train``, of the
Python code and of the man pages (tests compare them): change a default here
and nowhere else.
"""

from dataclasses import dataclass
from typing import NamedTuple

MODELS = ("fm", "rafm", "difacto")
# RaFM training variants (kernels/sgd.py): Algorithm 1, the authors' code, the cascade
VARIANTS = ("paper", "authors", "cascade")
METRICS = ("rmse", "mae", "logloss", "auc", "accuracy")  # rafmcli.metrics computes them
MAX_LEVELS = 127          # m: levels k_i are int8 in model files and kernels
MAX_RANK = 2**31 - 1      # D_k: D_k * D_{k+1} stays exact in int64 (Eq. 17)


@dataclass
class Options:
    """Everything that shapes a training run (the data comes separately)."""

    task: str = "r"
    model: str = "rafm"
    ranks: tuple | None = None  # None: from the training rows' frequency histogram (ranksets.choose)
    method: str = "adagrad"
    iters: int = 100
    learn_rate: float = 0.05  # adagrad, rowwise-adagrad; METHOD_DEFAULTS for others; raced (RATE_STEPS below)
    dependent_rate: float | None = None
    variant: str = "cascade"
    dependent_weight: float = 1.0
    reg_bias: float = 0.0
    reg_linear: float = 0.0
    reg_factors: tuple = (0.01,)  # when not given: raced on validation rows (L2_CHOICES below)
    init_stdev: float = 0.01
    bias: bool = True
    linear: bool = True
    seed: int = 1
    threads: int = 0  # 0: every available core (threads.for_work: fewer on small data)
    early_stop: int = 5
    metric: str | None = None  # validation metric for early stopping; None: rmse (r) / logloss (c)
    holdout: float = 0.1
    burn_in: int | None = None   # mcmc; None: iters // 10 (burn_in_default)
    keep_samples: int = 10
    keep_means: bool = True      # mcmc: kept samples are stretch means (False: draws)
    auto_groups: bool = True     # sgda, als, mcmc without --meta or libFFM fields: groups from the rows (fields.py)
    shared_precision: bool = True  # mcmc: groups share each prior precision, keep their own means (coordinate.py)
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    # --task implicit (Feat2Vec negative sampling; solvers/implicit.py)
    negatives: int = 5
    alpha1: float = 0.75
    alpha2: float = 0.75
    loss: str = "softmax"         # with nce: sampled softmax, consistent across groups (rafm-train(1))
    nce: bool = True
    reject_positives: bool = True
    regular_negatives: bool = True  # L2 in every scored row, or in the positive's only (rafm-train(1))
    negative_groups: tuple | None = None
    eval_group: int | None = None
    eval_share: float = 0.5  # at least this share of the positives resample eval_group
    top_k: int = 10


DEFAULTS = Options()

# rafm embed / similar --level: "all" puts each feature's vectors of every level side by side
# (rafmcli/embeddings.py), comparable across rare and frequent features; N: level N alone.
EMBED_LEVEL = "all"

# Without --regular or --learn-rate (the API: reg_factors=None, learn_rate=None), rafm train
# races the pairs of pairwise L2 in L2_CHOICES and learning rate in RATE_STEPS times the
# method's rate (what the user fixed is not raced) on its validation rows
# (solvers/sgd.race: every pair to RACE_FIRST_RUNG_SHARE of --iter epochs, the best RACE_KEEP
# of them on to --iter with early stopping, the best kept). Rungs of a fixed few epochs
# picked fast, weakly regularised pairs that peak early over strongly regularised ones
# still improving. Without validation rows, or with als/mcmc/sgda, it uses reg_factors and
# learn_rate (METHOD_DEFAULTS) as they are.
L2_CHOICES = (0.001, 0.01, 0.1)
RATE_STEPS = {"sgd": (0.5, 1.0, 2.0), "adagrad": (0.5, 1.0, 2.0), "rowwise-adagrad": (0.5, 1.0, 2.0),
              "adam": (1.0, 3.0, 10.0)}  # Adam at the authors' 0.001 is slow for per-row steps
RACE_FIRST_RUNG_SHARE = 0.1  # as rafm tune's first rung (solvers/tune.FIRST_RUNG_SHARE)
RACE_KEEP = 1 / 3
RACE_MAX_PARAMS = 150_000_000  # parameters of all the raced models at once; above: L2 alone, or no race

# AdaGrad's sums of squared gradients start here, as libffm's and xLearn's (TensorFlow's
# initial_accumulator_value): a coordinate's first steps are then about lr * g, as SGD's.
# From 0 every coordinate a row first touches moved by lr * sign(g), a full step whatever
# the gradient (5x the init stdev at the default rate), which rare features never recover.
ADAGRAD_START = 1.0
ADAGRAD_METHODS = ("adagrad", "rowwise-adagrad")  # their sums start at ADAGRAD_START
# stochastic-gradient methods with lazy per-row steps (kernels/sgd.py): they race, tune and train implicit data
STEP_METHODS = ("sgd", "adagrad", "rowwise-adagrad", "adam")
METHODS = (*STEP_METHODS, "sgda", "als", "mcmc")  # rafm train --method


class Range(NamedTuple):
    """The numbers an option takes: low..high (high None: no bound), an open end excluded."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False


FLOAT32_MAX = 3.4028234663852886e38  # rates, L2 and the init spread are float32 in the kernels

# The ranges of rafm train's numeric options: its click types (cli.options.ranged) and the API's
# checks (a ValueError) read this table; tests/test_api.py compares the two.
# reg_*: each value of --regular; negative_groups: each group. beta1, beta2 and eps are no
# options of rafm train: their ranges are those of Adam itself.
RANGES = {
    "iters": Range(1, integer=True),
    "learn_rate": Range(0, FLOAT32_MAX, low_open=True),
    "dependent_rate": Range(0, FLOAT32_MAX, low_open=True),
    "dependent_weight": Range(0, FLOAT32_MAX),
    "reg_bias": Range(0, FLOAT32_MAX),
    "reg_linear": Range(0, FLOAT32_MAX),
    "reg_factors": Range(0, FLOAT32_MAX),
    "init_stdev": Range(0, FLOAT32_MAX),
    "seed": Range(-(1 << 63), (1 << 64) - 1, integer=True),  # a negative s is s + 2^64
    "threads": Range(0, integer=True),
    "early_stop": Range(0, integer=True),
    "holdout": Range(0, 0.5),
    "burn_in": Range(0, integer=True),  # and, for mcmc, below iters
    "keep_samples": Range(1, integer=True),
    "beta1": Range(0, 1, high_open=True),
    "beta2": Range(0, 1, high_open=True),
    "eps": Range(0, low_open=True),
    "negatives": Range(1, integer=True),
    "alpha1": Range(0, 10),
    "alpha2": Range(0, 10),
    "negative_groups": Range(0, integer=True),
    "eval_group": Range(0, integer=True),
    "eval_share": Range(0, 1),
    "top_k": Range(1, integer=True),
}

# Defaults that differ by --method; the dataclass holds those of adagrad and rowwise-adagrad.
# sgda is plain SGD (no per-coordinate step sizes) and takes smaller steps; als and mcmc
# start from libFM's init_stdev; als's L2 weights are prior precisions (added once per
# parameter, as libFM's ALS), not per occurrence; mcmc averages its samples rather than
# picking an epoch, so it needs no hold-out, and weighs RaFM's distillation term twice (c = 2:
# of 0.5, 1, 2, 4, the best or within noise of it on ml-100k ids, side and click and on both
# samples; issue-10 notes, stop 18).
METHOD_DEFAULTS = {
    "sgd": {"learn_rate": 0.01},
    "adam": {"learn_rate": 0.001},  # the authors' (and Kingma and Ba's)
    "sgda": {"learn_rate": 0.01},
    "als": {"init_stdev": 0.1, "reg_linear": 10.0, "reg_factors": (10.0,)},
    "mcmc": {"init_stdev": 0.1, "holdout": 0.0, "dependent_weight": 2.0},
}

# Options a method has no use for: rafm train refuses them (exit 2) rather than ignore them.
# (als and mcmc take dependent_weight: the weight c of RaFM's distillation term.)
_SGD_ONLY = ("learn_rate", "dependent_rate", "variant")
_UNGROUPED = ("burn_in", "keep_samples", "keep_means", "auto_groups", "shared_precision")
METHOD_IGNORES = {
    "sgd": _UNGROUPED,
    "adagrad": _UNGROUPED,
    "rowwise-adagrad": _UNGROUPED,
    "adam": _UNGROUPED,
    "als": _SGD_ONLY + ("burn_in", "keep_samples", "keep_means", "shared_precision"),
    "mcmc": _SGD_ONLY + ("regular", "early_stop"),
    "sgda": ("dependent_rate", "variant", "dependent_weight", "regular", "burn_in", "keep_samples",
             "keep_means", "shared_precision"),
}


# --task implicit's options (Feat2Vec negative sampling): refused with another task
IMPLICIT_ONLY = ("negatives", "alpha1", "alpha2", "loss", "nce", "reject_positives", "regular_negatives",
                 "negative_groups", "eval_group", "eval_share", "top_k")


def method_default(method, name):
    """The default of option ``name`` (an Options field) under ``method``."""
    return METHOD_DEFAULTS.get(method, {}).get(name, getattr(DEFAULTS, name))


def burn_in_default(iters):
    """MCMC samples discarded before averaging when --burn-in is not given: a tenth of the chain."""
    return iters // 10


def regularisation(values, m, n_groups=None):
    """(reg_bias, reg_linear, reg_factors) from --regular's values.

    r0,r1,r2 (one each) or r0,r1,r2_1..r2_m (per level); with n_groups G
    (--meta), also libFM's r0,r1_1..r1_G,r2_1..r2_G (per group) or
    r0,r1_1..r1_G then r2 per group and level (group by group). Per-group
    forms give tuples: reg_linear [G], reg_factors [G*m], group-major.
    """
    values = tuple(float(v) for v in values)
    G = n_groups
    if G and len(values) == 1 + 2 * G and G > 1:
        return values[0], values[1:1 + G], tuple(r for r in values[1 + G:] for _ in range(m))
    if G and len(values) == 1 + G + G * m and G > 1:
        return values[0], values[1:1 + G], values[1 + G:]
    if len(values) == 3:
        return values[0], values[1], (values[2],) * m
    if len(values) == 2 + m:
        return values[0], values[1], values[2:]
    forms = ["r0,r1,r2"] + ([f"r0,r1,r2_1..r2_{m} ({2 + m} values)"] if m > 1 else [])
    if G and G > 1:
        forms += [f"r0,r1_1..r1_{G},r2_1..r2_{G} ({1 + 2 * G} values)"]
        if m > 1:
            forms += [f"r0,r1 per group,r2 per group and level ({1 + G + G * m} values)"]
    raise ValueError(f"expected {' or '.join(forms)}, got {len(values)} values")


def per_level(values, m):
    """A per-level tuple from one value (all levels) or m values."""
    values = tuple(values)
    if len(values) == 1:
        return values * m
    if len(values) != m:
        raise ValueError(f"expected 1 or {m} pairwise regularisation values, got {len(values)}")
    return values
