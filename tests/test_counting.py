"""Feature occurrence counting (kernels/counting.py): the distinct ids and n_i of
any indices, on any number of threads, as np.unique gives them."""

import numpy as np
import pytest

from rafmcli.io import reader
from rafmcli.kernels import counting


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("case", ["zipf", "dense", "sparse", "one id", "edges"])
def test_counts_are_np_unique_on_any_number_of_threads(monkeypatch, threads, case):
    monkeypatch.setattr(counting, "SMALL", 0)  # several ranges even on small inputs
    rng = np.random.default_rng(len(case) * 7 + threads)
    length = 1000
    if case == "zipf":
        indices = np.minimum(rng.zipf(1.3, 5000), length) - 1
    elif case == "dense":
        indices = rng.integers(0, length, 20_000)
    elif case == "sparse":  # most counters zero: ranges with no id at all
        indices = rng.choice([3, 4, 500, 998], 300)
    elif case == "one id":
        indices = np.full(77, 999)
    else:  # every range boundary and its neighbours, the table's last id
        bounds = [t * length // threads for t in range(1, threads)] + [length]
        indices = np.array([b + d for b in bounds for d in (-1, 0, 1) if 0 <= b + d < length] * 3)
    indices = indices.astype(np.int32)
    ids, n = counting.feature_counts_table(indices, length, threads)
    want_ids, want_n = np.unique(indices, return_counts=True)
    assert ids.dtype == np.int32 and n.dtype == np.int64
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(n, want_n)


def test_reader_counts_the_same_on_one_and_two_threads(monkeypatch):
    rng = np.random.default_rng(5)
    indices = rng.integers(0, 3_000_000, 200_000).astype(np.int32)
    one = reader.feature_counts(indices, int(indices.max()), 1)
    two = reader.feature_counts(indices, int(indices.max()), 2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(one[0], np.unique(indices))
