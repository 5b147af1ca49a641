"""Factor initialisation (issue 11): float32 normal draws on every core, the
same for any number of threads, with the normal law's moments and tails, against a
float64 Box-Muller of the same bits; and the epochs' row order (kernels/random.py
shuffled) against a plain-Python shuffle."""

import itertools
import math

import numpy as np

from rafmcli.kernels import random as R
from rafmcli.kernels.random import CHUNK, fill_normal
from rafmcli.model.layout import build

M64 = (1 << 64) - 1
M32 = np.uint64(0xFFFFFFFF)


def splitmix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


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
    """Mean, variance, kurtosis, and the mass in bands out to the transform's bound
    sqrt(48 ln 2) = 5.77 (u1 >= 2^-24), within five standard errors; none beyond it; and
    a pair's cosine and sine uncorrelated."""
    n = 2_000_000
    z = draws(n, 2.0, 123, 2).astype(np.float64) / 2.0
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs((z**4).mean() - 3) < 5 * math.sqrt(96 / n)
    for lo, hi in [(0, 0.01), (0.01, 0.5), (0.5, 1), (1, 2), (2, 3), (3, 4), (4, np.inf)]:
        p = math.erfc(lo / math.sqrt(2)) - math.erfc(hi / math.sqrt(2))
        seen = np.count_nonzero((abs(z) >= lo) & (abs(z) < hi)) / n
        assert abs(seen - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-6, (lo, hi, seen, p)
    assert abs((z > 0).mean() - 0.5) < 5 * math.sqrt(0.25 / n)
    assert abs(z).max() <= math.sqrt(48 * math.log(2)) * (1 + 1e-6)
    # a pair's cosine and sine (chunk halves) independent: z, z^2 and signs uncorrelated
    pairs = z[:n // CHUNK * CHUNK].reshape(-1, 2, CHUNK // 2)
    cos, sin = pairs[:, 0].ravel(), pairs[:, 1].ravel()
    bound = 5 / math.sqrt(cos.shape[0])
    for a, b in [(cos, sin), (cos**2, sin**2), (np.sign(cos), np.sign(sin))]:
        assert abs(np.corrcoef(a, b)[0, 1]) < bound


def lowbias32(x):
    """Wellons' lowbias32 on uint64 arrays holding 32-bit words."""
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & M32
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & M32
    return x ^ (x >> np.uint64(16))


def plain_draws(n, stdev, key):
    """Box and Muller in float64 with numpy's log, cos and sin, from the same words: chunk c
    keyed by SplitMix64, pair p from counters 2p and 2p + 1, cosines first, then sines."""
    out = []
    for c in range((n + CHUNK - 1) // CHUNK):
        k = splitmix(key ^ splitmix((c * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & M64))
        words = lowbias32((lowbias32(np.arange(CHUNK, dtype=np.uint64) ^ np.uint64(k & 0xFFFFFFFF))
                           + np.uint64(k >> 32)) & M32)
        a, b = words[0::2], words[1::2]
        rho = np.sqrt(-2 * np.log(((a >> np.uint64(8)) + 1) * 2.0**-24))
        theta = (b >> np.uint64(8)) * (2.0**-24 * math.pi / 2)
        cos = np.cos(theta) * (1 - 2.0 * (b & np.uint64(1)))
        sin = np.sin(theta) * (1 - 1.0 * (b & np.uint64(2)))
        out.append(np.concatenate([rho * cos, rho * sin]) * stdev)
    return np.concatenate(out)[:n]


def test_draws_are_box_muller_of_the_hashed_words():
    """The float32 kernel (series for ln, polynomials for cos and sin) against float64
    Box-Muller of the same words: within 2e-6 of stdev max(1, |z|) (float32 rounding reaches 5e-7)."""
    for n, stdev, key in [(5 * CHUNK + 77, 0.5, 2**63 - 5), (CHUNK, 3.0, 0), (10, 1.0, 99)]:
        expected = plain_draws(n, stdev, key)
        assert np.all(np.abs(draws(n, stdev, key, 2) - expected) <= 2e-6 * np.maximum(stdev, np.abs(expected)))


def test_fewer_draws_are_the_first_of_more():
    longer = draws(3 * CHUNK, 1.0, 5, 2)
    for n in (1, 2, CHUNK - 1, CHUNK + 1, 2 * CHUNK + 12345):
        assert np.array_equal(draws(n, 1.0, 5, 1), longer[:n])


def test_build_draws_factors_from_the_seed():
    def factors(seed):
        return build("fm", "r", (8,), np.arange(1000), np.ones(1000), 0.01, np.random.default_rng(seed),
                     0.0, (0, 1)).V

    first = factors(3)
    assert first.dtype == np.float32 and first.shape == (8000,)
    assert np.array_equal(first, factors(3)) and not np.array_equal(first, factors(4))
    assert abs(first.std() - 0.01) < 0.001


def below(state, bound):
    """Lemire's unbiased multiply-shift on SplitMix64's high 32 bits, in Python integers."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M64
        m = (splitmix(state) >> 32) * bound
        if (m & 0xFFFFFFFF) >= (1 << 32) % bound:
            return state, m >> 32


def plain_shuffle(n, key):
    order, state = list(range(n)), splitmix(key)
    for i in range(n - 1, 0, -1):
        state, j = below(state, i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def test_shuffled_is_the_plain_fisher_yates_shuffle():
    for n, key in [(0, 1), (1, 2), (2, 3), (7, 4), (1000, 5), (1000, 2**63 - 1)]:
        assert R.shuffled(n, key).tolist() == plain_shuffle(n, key)
        assert R.shuffled(n, key).dtype == np.int64
    assert R.shuffled(1000, 5).tolist() != R.shuffled(1000, 6).tolist()


def test_below_redraws_the_biased_values():
    """Near 2^32, 2^32 mod bound is a large share of the draws, so redraws happen often."""
    for bound in (3 << 30, (1 << 32) - 5, 1 << 32, 1, 7):
        state, py_state = np.uint64(11), 11
        for _ in range(200):
            state, value = R._below(np.uint64(state), np.uint64(bound))
            py_state, py_value = below(py_state, bound)
            assert (int(state), int(value)) == (py_state, py_value)
            assert 0 <= value < bound


def test_shuffled_draws_every_order_alike():
    """The 24 orders of four items over 24,000 keys: chi-square with 23 degrees of freedom
    below 49.7 (its 0.1% quantile is 49.73)."""
    seen = {p: 0 for p in itertools.permutations(range(4))}
    for key in range(24_000):
        seen[tuple(R.shuffled(4, key).tolist())] += 1
    assert sum((c - 1000) ** 2 / 1000 for c in seen.values()) < 49.7


def test_shuffled_beyond_lemire_max_is_numpys_permutation(monkeypatch):
    monkeypatch.setattr(R, "LEMIRE_MAX", 10)
    assert R.shuffled(50, 3).tolist() == np.random.default_rng(3).permutation(50).tolist()
