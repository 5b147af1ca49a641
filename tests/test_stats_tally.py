"""`rafm stats` without the cache counts a file while it is parsed, without its
CSR arrays (reader.count_file): the same rows, labels, ids, counts, repeats,
fields and errors as the Dataset read_dataset builds, wherever blocks and parts
are cut and on any number of threads, also when the ids outgrow a table."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from test_parse_parallel import FEW_BLOCKS, PARALLEL, SERIAL, field_of, mixed_text, parse

from rafmcli.cli import main
from rafmcli.errors import InputError
from rafmcli.io import reader

FIELDS = ("labels", "feature_ids", "counts")


def tally(path, settings, monkeypatch):
    for name, value in settings.items():
        monkeypatch.setattr(reader, name, value)
    monkeypatch.setattr(reader, "SMALL_COUNT", 0)  # every block counted in id ranges on the threads
    try:
        return reader.count_file(str(path), use_cache=False)
    except InputError as exc:
        return str(exc)


def dataset(path, monkeypatch):
    """The reference: read_dataset's Dataset of ``path`` (or its error), parsed serially."""
    return parse(path, SERIAL, monkeypatch)


def assert_same(t, d):
    assert isinstance(t, reader.Tally)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(t, name), getattr(d, name), err_msg=name)
    assert t.feature_ids.dtype == d.feature_ids.dtype and t.counts.dtype == d.counts.dtype
    assert (t.n_rows, t.nnz, t.rows_with_repeats, t.path) == (d.n_rows, d.nnz, d.rows_with_repeats, d.path)
    assert (t.feature_fields is None) == (d.feature_fields is None)
    if d.feature_fields is not None:
        np.testing.assert_array_equal(t.feature_fields, d.feature_fields)


@pytest.mark.parametrize("seed", range(4))
def test_the_tally_is_the_datasets_counts(tmp_path, monkeypatch, seed):
    path = tmp_path / ("f.ffm" if seed % 2 else "f.libfm")
    path.write_bytes(mixed_text(np.random.default_rng(seed), 400, ffm=seed % 2 == 1))
    reference = dataset(path, monkeypatch)
    assert reference.nnz > 1000
    for settings in [SERIAL] + PARALLEL:
        assert_same(tally(path, settings, monkeypatch), reference)


@pytest.mark.parametrize("case", ["growing", "sparse from a later block", "sparse from the start", "empty"])
def test_ids_that_outgrow_a_table(tmp_path, monkeypatch, case):
    """The table grows with the largest id while the rule allows it; past it the
    counts so far become (id, count) pairs and later blocks are merged in."""
    rng = np.random.default_rng(9)
    rows = []
    for r in range(300):
        if case == "growing":
            ids = rng.integers(0, 100 * (r + 1), 4)
        elif case == "sparse from a later block":
            ids = rng.integers(0, 50, 4) if r < 150 else rng.choice([7, 2_000_000_000, 1_999_999_999, 5 << 24], 3)
        elif case == "sparse from the start":
            ids = rng.choice([3, 1 << 30, (1 << 30) + 1, 2_147_483_647], 2)
        else:
            ids = []
        rows.append(" ".join(["1"] + [f"{i}:1" for i in dict.fromkeys(int(i) for i in ids)]))
    path = tmp_path / "ids.libfm"
    path.write_text("\n".join(rows) + "\n")
    reference = dataset(path, monkeypatch)
    for settings in (PARALLEL[1], SERIAL):
        assert_same(tally(path, settings, monkeypatch), reference)
    if case.startswith("sparse"):
        monkeypatch.setattr(reader, "BLOCK_BYTES", 1000)
        counted = reader._Tally()
        real_add = counted.add
        monkeypatch.setattr(reader, "_Tally", lambda: counted)
        seen = []
        monkeypatch.setattr(counted, "add", lambda *a: (real_add(*a), seen.append(counted.entries is not None)))
        assert_same(reader.count_file(str(path), use_cache=False), reference)
        assert seen[-1] and (case == "sparse from the start") == seen[0]  # the table gave way to pairs


def test_hashed_ids_are_sorted_once_not_once_a_block(tmp_path, monkeypatch):
    """Past the table, each block's ids are sorted alone and all of them merged once: the ids
    np.unique sees add up to a few times the entries, not entries times blocks."""
    rng = np.random.default_rng(4)
    rows = [" ".join(["0"] + [f"{i}:1" for i in sorted(set(rng.integers(0, 2**31 - 1, 3).tolist()))])
            for _ in range(600)]
    path = tmp_path / "hashed.libfm"
    path.write_text("\n".join(rows) + "\n")
    reference = dataset(path, monkeypatch)
    sorted_ids = []
    real_unique = np.unique

    def unique(a, *args, **kwargs):
        sorted_ids.append(np.asarray(a).shape[0])
        return real_unique(a, *args, **kwargs)

    blocks = []
    real_add = reader._Tally.add
    monkeypatch.setattr(reader._Tally, "add", lambda self, *a: (blocks.append(1), real_add(self, *a)))
    monkeypatch.setattr(reader, "BLOCK_BYTES", 200)
    monkeypatch.setattr(np, "unique", unique)
    counted = reader.count_file(str(path), use_cache=False)
    monkeypatch.setattr(np, "unique", real_unique)
    assert_same(counted, reference)
    assert len(blocks) > 50 and sum(sorted_ids) <= 3 * reference.nnz


def test_a_bad_line_in_any_block_gives_the_readers_error(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    lines = mixed_text(rng, 40).splitlines(keepends=True)
    path = tmp_path / "damaged.libfm"
    for at in range(len(lines)):
        token = [b"x", b"3:y", b"-4", b"99999999999", b"1:1e39", b":2"][at % 6]
        path.write_bytes(b"".join(lines[:at]) + b"1 " + token + b" " + b"".join(lines[at:]))
        expected = dataset(path, monkeypatch)
        assert isinstance(expected, str) and expected.startswith(f"{path}:")
        for settings in FEW_BLOCKS:
            assert tally(path, settings, monkeypatch) == expected, (at, settings)


def test_stats_reports_the_same_without_the_cache_and_from_stdin(tmp_path, monkeypatch):
    monkeypatch.setenv("RAFM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(reader, "BLOCK_BYTES", 4096)
    path = tmp_path / "f.libfm"
    path.write_bytes(mixed_text(np.random.default_rng(3), 2000))
    runs = []
    for args, stdin in ((["stats", "--json", str(path)], None), (["stats", "--json", "--no-cache", str(path)], None),
                        (["stats", "--json", "-"], path.read_bytes())):
        result = CliRunner().invoke(main, args, input=stdin)
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)["files"][0]
        runs.append({k: v for k, v in report.items() if k != "file"})
    assert list(tmp_path.joinpath("cache").iterdir())  # the first run went through the cache
    assert runs[0]["rows"] > 1500 and runs[0]["histogram"]
    assert runs[1] == runs[0] and runs[2] == runs[0]


@pytest.mark.parametrize("ranks", [(32, 512), (1, 2, 8, 32), (3,)])  # ties n_i^2 = D_k D_k+1 at 4, 16
@pytest.mark.parametrize("case", ["libsvm", "libffm", "sparse ids", "no ids"])
def test_stats_from_the_table_are_the_datasets(tmp_path, monkeypatch, ranks, case):
    """file_stats of a Tally (one pass over its table of n_i: levels, histogram, ids)
    is file_stats of the Dataset (levels, buckets and totals from its ids and counts)."""
    from rafmcli.stats import file_stats

    rng = np.random.default_rng(len(case))
    path = tmp_path / "f.libfm"
    if case == "sparse ids":
        path.write_text("".join(f"1 {i}:1 2000000000:1\n" for i in rng.integers(0, 9, 50)))
    elif case == "no ids":
        path.write_text("1\n0\n")
    else:
        hot = f"1 {field_of(7)}:7:1 {field_of(8)}:8:1\n" if case == "libffm" else "1 7:1 8:1\n"
        path.write_bytes(mixed_text(rng, 300, ffm=case == "libffm") + hot.encode() * 200)  # counts up to ~250
    t, d = tally(path, PARALLEL[1], monkeypatch), dataset(path, monkeypatch)
    assert (t.table is None) == (case == "sparse ids")
    assert file_stats(t, ranks) == file_stats(d, ranks)
