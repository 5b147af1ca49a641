"""Prediction output at stream speed (issue 11): the numba writer's bytes are
C's %.9g for any float, NaN is never written, and unseen features are
counted in O(non-zeros) exactly as a plain count does."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.io import output
from rafmcli.io.reader import Dataset
from rafmcli.model import files as model_files
from rafmcli.model.layout import build
from rafmcli.predict import kernel_rows


def printf(values):
    """The reference: Python's %-formatting is C's printf (correctly rounded, half to even)."""
    return b"".join(b"%.9g\n" % v for v in values.tolist())


def written(values):
    fh = io.BytesIO()
    output.format_predictions(fh, values)
    return fh.getvalue()


def extremes(rng, n):
    """Random doubles of every magnitude and sign, exact ties at the 9th digit,
    powers of ten and their neighbours, zeros, denormals, infinities."""
    bits = rng.integers(0, 2**63 - 2**52, n, dtype=np.int64).view(np.float64)  # every finite double >= 0
    ties = (rng.integers(10**8, 10**9, n) + 0.5) * 2.0 ** rng.integers(-40, 40, n)
    p10 = 10.0 ** np.arange(-323, 309)
    special = [0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, np.inf, 1e-5, 1e-4,
               9.99999999e-5, 9.999999995e-5, 999999999.5, 999999998.5, 99999999.5, 1e9, 123456789.0]
    values = np.concatenate([bits, ties, rng.random(n), np.exp(rng.uniform(-40, 40, n)), p10,
                             np.nextafter(p10, 0), np.nextafter(p10, np.inf), special])
    return values * rng.choice([-1.0, 1.0], values.shape[0])


def test_writer_bytes_are_printf_g9(monkeypatch):
    rng = np.random.default_rng(11)
    values = extremes(rng, 20_000)
    assert written(values) == printf(values)
    monkeypatch.setattr(output, "FORMAT_BATCH", 1000)  # several batches, many chunks each
    monkeypatch.setattr(output, "FORMAT_CHUNK", 37)
    values = rng.permutation(values)
    assert written(values) == printf(values)
    assert written(np.array([-0.0, 0.0])) == b"-0\n0\n" and written(np.zeros(0)) == b""


def test_nan_is_never_written():
    fh = io.BytesIO()
    with pytest.raises(ValueError, match="1 predictions are NaN"):
        output.format_predictions(fh, np.array([0.5, np.nan, 2.0]))
    assert fh.getvalue() == b""


def test_a_model_predicting_nan_writes_nothing(tmp_path, sample):
    """Factors whose sums overflow float32 give NaN scores: exit 2, no prediction file."""
    model_path, out = tmp_path / "m.rafm", tmp_path / "p.txt"
    train = ["train", "--task", "r", "--model", "fm", "--dim", "4", "--iter", "1", "--quiet",
             "--train", sample("regression.train"), "--save-model", str(model_path)]
    assert CliRunner().invoke(main, train).exit_code == 0
    model = model_files.load(str(model_path))
    model.V[:] = 3e38
    model_files.save(model, str(model_path))
    result = CliRunner().invoke(main, ["predict", "--model", str(model_path), "--out", str(out),
                                       sample("regression.test")])
    assert result.exit_code == 2, result.output
    assert "the model predicts NaN for 600 rows (first: row 1)" in result.stderr
    assert not out.exists()


def test_unseen_features_counted_as_a_plain_count_does():
    rng = np.random.default_rng(3)
    known = rng.choice(5000, 700, replace=False)
    model = build("fm", "r", (4,), known, np.ones(700), 0.1, rng, 0.0, (0, 1))
    lengths = rng.integers(0, 12, 3000)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, 6000, indptr[-1]).astype(np.int32)
    values = rng.random(indptr[-1]).astype(np.float32)
    data = Dataset("d", np.zeros(3000), indptr, indices, values, np.zeros(0, np.int32), np.zeros(0))
    ptr, idx, val, unseen, distinct = kernel_rows(model, data)
    seen = np.isin(indices, known)
    assert unseen == (~seen).sum() and distinct == np.unique(indices[~seen]).shape[0]
    position = {int(i): j for j, i in enumerate(model.feature_ids)}
    for r in range(3000):
        a, b = indptr[r], indptr[r + 1]
        keep = seen[a:b]
        assert idx[ptr[r]:ptr[r + 1]].tolist() == [position[int(i)] for i in indices[a:b][keep]]
        np.testing.assert_array_equal(val[ptr[r]:ptr[r + 1]], values[a:b][keep])


@pytest.mark.parametrize("kind,ranks", [("rafm", (2, 5)), ("difacto", (2, 3, 7))])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_predicting_by_original_id_is_predicting_mapped_rows(monkeypatch, kind, ranks, n_threads):
    """predict_dataset maps ids inside the kernel (predict_scores_by_id): bit for bit the
    scores of the rows kernel_rows builds, and the same unseen counts; ids beyond the
    model's largest, empty rows, rows of unseen features only, an MCMC model's samples,
    any number of threads."""
    from rafmcli import predict as P
    from rafmcli.kernels import forward as F

    monkeypatch.setattr(F, "SMALL_PREDICTION", 0)
    monkeypatch.setattr(F, "PREDICTION_CHUNKS", 7)
    monkeypatch.setattr("rafmcli.threads._DEFAULT", {"threads": n_threads})
    rng = np.random.default_rng(len(ranks))
    known = rng.choice(5000, 700, replace=False)
    model = build(kind, "c", ranks, known, rng.integers(1, len(ranks) + 1, 700), 0.3, rng, 0.1, (0, 1))
    model.w[:] = rng.normal(0, 0.5, 700)
    model.samples = [(0.2, model.w * 0.5, model.V * 2), (model.w0, model.w, model.V)]
    lengths = rng.integers(0, 12, 3000)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, 6000, indptr[-1]).astype(np.int32)
    indices[indptr[5]:indptr[6]] = 5999  # a row of one unseen feature, repeated
    for values in (rng.random(indptr[-1]).astype(np.float32), None):
        data = Dataset("d", np.zeros(3000), indptr, indices, values, np.zeros(0, np.int32), np.zeros(0))
        rows = kernel_rows(model, data)
        for raw in (False, True):
            got = P._by_id(model, data, raw)
            want = P.margin_rows(model, rows) if raw else P.predict_rows(model, rows)
            np.testing.assert_array_equal(got.values, want)
            assert (got.unseen, got.unseen_distinct) == rows[3:]
            assert rows[3] > 0 and rows[4] < rows[3]


def growing_rows():
    """(model, Dataset): a RaFM{2,6} and 400 rows, each chunk's rows longer than the last's."""
    rng = np.random.default_rng(3)
    known = rng.choice(900, 300, replace=False)
    model = build("rafm", "c", (2, 6), known, rng.integers(1, 3, 300), 0.3, rng, 0.1, (0, 1))
    lengths = 1 + np.arange(400) // 10
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, 1000, indptr[-1]).astype(np.int32)
    data = Dataset("d", np.zeros(400), indptr, indices, rng.random(indptr[-1]).astype(np.float32),
                   np.zeros(0, np.int32), np.zeros(0))
    return model, data


BY_ID_CHECKED = r"""
import sys
import numpy as np
from rafmcli import predict as P, threads
from rafmcli.io.reader import Dataset
from rafmcli.kernels import forward as F
from rafmcli.model import files

model_path, rows_path, out = sys.argv[1:4]
model = files.load(model_path)  # numpy's checks: only the prediction kernels compile here
rows = np.load(rows_path)
data = Dataset("d", np.zeros(400), rows["indptr"], rows["indices"], rows["values"], np.zeros(0, np.int32),
               np.zeros(0))
F.SMALL_PREDICTION, F.PREDICTION_CHUNKS = 0, 40
got = []
for n in (1, 2):
    threads.set_default(n)
    got.append(P._by_id(model, data, True).values)
np.save(out, np.stack(got))
"""


def test_prediction_buffers_grow_with_the_rows_of_later_chunks(tmp_path):
    """A worker claims chunks one at a time, and a later chunk may hold longer rows than any
    before: its row buffers grow. The by-id kernel runs with numba's bounds checks on (a fresh
    process and kernel cache, given the model and rows made here), so that a buffer too small
    is an IndexError, not a silent write past its end; on one and two threads it gives the
    mapped rows' scores."""
    from rafmcli import predict as P

    model, data = growing_rows()
    model_files.save(model, str(tmp_path / "m.rafm"))
    np.savez(tmp_path / "rows.npz", indptr=data.indptr, indices=data.indices, values=data.values)
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = tmp_path / "got.npy"
    result = subprocess.run([sys.executable, "-c", BY_ID_CHECKED, str(tmp_path / "m.rafm"), str(tmp_path / "rows.npz"),
                             str(out)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    want = P.margin_rows(model, P.kernel_rows(model, data))
    for got in np.load(out):
        # bounds checks change vectorisation, so float32 sums may round in another order (on AVX2
        # machines they do; with AVX-512 they did not): equal to float32 rounding, far from a wrong row
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_ids_too_sparse_for_a_table_are_predicted_through_mapped_rows():
    from rafmcli import predict as P

    rng = np.random.default_rng(4)
    model = build("fm", "r", (4,), np.array([3, 1 << 30]), np.ones(2), 0.3, rng, 0.0, (-9, 9))
    data = Dataset("d", np.zeros(2), np.array([0, 2, 3]), np.array([3, 1 << 30, 7], np.int32), None,
                   np.zeros(0, np.int32), np.zeros(0))
    assert P._by_id(model, data, False) is None
    found = P.predict_dataset(model, data, raw=True)
    V = model.V.reshape(2, 4)
    assert found.values[0] == pytest.approx(float(model.w.sum() + V[0] @ V[1]))
    assert found.values[1] == 0.0 and (found.unseen, found.unseen_distinct) == (1, 1)
