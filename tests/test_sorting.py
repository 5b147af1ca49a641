import numpy as np
import pytest

from rafmcli.kernels.sorting import INSERTION_RUN, stable_argsort


@pytest.mark.parametrize("n", [0, 1, 2, INSERTION_RUN - 1, INSERTION_RUN, INSERTION_RUN + 1, 33, 100, 1000, 4097])
@pytest.mark.parametrize("dtype,span", [(np.int32, 5), (np.int32, 1 << 30), (np.int64, 3)])
def test_stable_argsort_is_numpys_stable_argsort(n, dtype, span):
    """Few distinct keys (many ties: stability shows) and many, sorted, reversed and random."""
    rng = np.random.default_rng(n + span)
    for keys in (rng.integers(-span, span, n), np.arange(n), np.arange(n)[::-1].copy(), np.zeros(n)):
        keys = keys.astype(dtype)
        np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))
