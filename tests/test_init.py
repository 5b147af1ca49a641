"""Factor initialisation (issue 11): float32 normal draws on every core, the
same for any number of threads, with the normal law's moments and tails."""

import math

import numpy as np

from rafmcli.kernels.random import CHUNK, fill_normal
from rafmcli.model.layout import build


def draws(n, stdev, key, threads):
    out = np.empty(n, dtype=np.float32)
    fill_normal(out, stdev, key, threads)
    return out


def test_same_draws_for_any_number_of_threads_and_new_ones_for_a_new_key():
    n = 3 * CHUNK + 123
    one = draws(n, 0.5, 7, 1)
    assert np.array_equal(one, draws(n, 0.5, 7, 2))
    assert not np.array_equal(one, draws(n, 0.5, 8, 1))
    assert not np.array_equal(one[:CHUNK], one[CHUNK:2 * CHUNK])  # chunks draw from their own streams


def test_draws_follow_the_normal_law():
    """Mean, variance, kurtosis, and the mass in bands up to the ziggurat's tail
    (|z| > 3.4426) within five standard errors."""
    n = 2_000_000
    z = draws(n, 2.0, 123, 2).astype(np.float64) / 2.0
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs((z**4).mean() - 3) < 5 * math.sqrt(96 / n)
    for lo, hi in [(0, 0.5), (0.5, 1), (1, 2), (2, 3), (3, 3.4426), (3.4426, 4), (4, np.inf)]:
        p = math.erfc(lo / math.sqrt(2)) - math.erfc(hi / math.sqrt(2))
        seen = np.count_nonzero((abs(z) >= lo) & (abs(z) < hi)) / n
        assert abs(seen - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-6, (lo, hi, seen, p)
    assert (z > 0).mean() - 0.5 < 5 * math.sqrt(0.25 / n)


def test_build_draws_factors_from_the_seed():
    def factors(seed):
        return build("fm", "r", (8,), np.arange(1000), np.ones(1000), 0.01, np.random.default_rng(seed),
                     0.0, (0, 1)).V

    first = factors(3)
    assert first.dtype == np.float32 and first.shape == (8000,)
    assert np.array_equal(first, factors(3)) and not np.array_equal(first, factors(4))
    assert abs(first.std() - 0.01) < 0.001
