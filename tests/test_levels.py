import numpy as np
import pytest

from rafmcli.levels import assign_levels, parse_ranks, summarize


def brute_levels(counts, ranks):
    """argmin_k |log n - log D_k| with ties to the lower level; n = 0 -> level 1."""
    out = []
    for n in counts:
        if n == 0:
            out.append(1)
            continue
        dist = [abs(np.log(n) - np.log(d)) for d in ranks]
        out.append(1 + int(np.argmin(np.round(dist, 12))))
    return out


def test_boundary_32_512_at_128():
    counts = [0, 1, 31, 32, 100, 127, 128, 129, 512, 10**9]
    assert assign_levels(counts, (32, 512)).tolist() == [1, 1, 1, 1, 1, 1, 1, 2, 2, 2]


def test_three_levels_by_hand():
    # boundaries sqrt(8*64) = 22.6 and sqrt(64*512) = 181.0
    counts = [1, 22, 23, 181, 182, 5000]
    assert assign_levels(counts, (8, 64, 512)).tolist() == [1, 1, 2, 2, 3, 3]


def test_exact_tie_goes_lower():
    # 4 * 16 = 64 = 8^2: n = 8 is equally far from 4 and 16 in log scale
    assert assign_levels([8, 9], (4, 16)).tolist() == [1, 2]


def test_single_rank_is_all_level_one():
    assert assign_levels([0, 5, 10**6], (64,)).tolist() == [1, 1, 1]


@pytest.mark.parametrize("ranks", [(32, 512), (8, 64, 512), (32, 64, 128, 256, 512), (2, 3, 5, 7, 11)])
def test_matches_log_argmin(ranks):
    counts = np.random.default_rng(0).zipf(1.3, 5000) % 100000
    assert assign_levels(counts, ranks).tolist() == brute_levels(counts, ranks)


def test_summary_and_parameter_counts():
    # 5 features in 4 rows, ranks {2, 8}: boundary 4 occurrences
    counts = np.array([1, 2, 4, 5, 9])
    levels = assign_levels(counts, (2, 8))
    assert levels.tolist() == [1, 1, 1, 2, 2]
    s = summarize(levels, counts, n_rows=4, ranks=(2, 8))
    assert s.size.tolist() == [5, 2]
    assert s.top.tolist() == [3, 2]
    np.testing.assert_allclose(s.occupancy, [21 / 4, 14 / 4])
    linear = 5 + 1
    assert s.params("fm") == 8 * 5 + linear
    assert s.params("rafm") == 2 * 5 + 8 * 2 + linear
    assert s.params("difacto") == 2 * 5 + 6 * 2 + linear
    assert s.cost("fm") == pytest.approx(8 * 21 / 4)
    assert s.cost("rafm") == pytest.approx(2 * 21 / 4 + 8 * 14 / 4)
    assert s.cost("difacto") == pytest.approx(2 * 21 / 4 + 6 * 14 / 4)


@pytest.mark.parametrize("text", ["", "32,32", "512,32", "0,4", "a,b", "32,,512", "-4"])
def test_bad_ranks(text):
    with pytest.raises(ValueError):
        parse_ranks(text)


def test_good_ranks():
    assert parse_ranks("32,512") == (32, 512)
    assert parse_ranks("8") == (8,)
