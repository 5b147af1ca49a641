import os

import numpy as np
import pytest

from rafmcli.io import cache, reader
from rafmcli.io.reader import read_dataset


@pytest.fixture
def datafile(tmp_path):
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "d.libfm"
    path.write_text("1 1:0.5 3:1\n0 2:1\n1 1:2 4:1\n")
    return str(path)


def _no_parse(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("parsed although the cache should have answered")
    monkeypatch.setattr(reader, "parse_file", fail)


def test_hit_is_memory_mapped_and_equal(datafile, monkeypatch):
    first = read_dataset(datafile)
    _no_parse(monkeypatch)
    second = read_dataset(datafile)
    assert isinstance(second.indices, np.memmap)
    for name in ("labels", "indptr", "indices", "values", "feature_ids", "counts"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def test_no_cache_writes_nothing(datafile, tmp_path):
    read_dataset(datafile, use_cache=False)
    assert os.listdir(cache.default_dir()) == []


def test_cache_lives_outside_the_input_directory(datafile):
    before = set(os.listdir(os.path.dirname(datafile)))
    read_dataset(datafile)
    assert set(os.listdir(os.path.dirname(datafile))) == before
    assert os.listdir(cache.default_dir())


def test_stale_after_edit(datafile):
    read_dataset(datafile)
    with open(datafile, "a") as fh:
        fh.write("5 9:1\n")
    data = read_dataset(datafile)
    assert data.n_rows == 4 and data.labels[-1] == 5


def test_stale_after_touch_same_size(datafile):
    read_dataset(datafile)
    with open(datafile, "r+") as fh:
        fh.write("0")
    st = os.stat(datafile)
    os.utime(datafile, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert read_dataset(datafile).labels[0] == 0


def _entry(datafile):
    return cache._entry_dir(datafile, None)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "meta"])
def test_damaged_entry_is_rebuilt(datafile, damage):
    fresh = read_dataset(datafile, use_cache=False)
    read_dataset(datafile)
    target = os.path.join(_entry(datafile), "indices.npy")
    if damage == "truncate":
        with open(target, "r+b") as fh:
            fh.truncate(os.path.getsize(target) - 4)
    elif damage == "flip":
        with open(target, "r+b") as fh:
            fh.seek(-1, os.SEEK_END)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_END)
            fh.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "delete":
        os.remove(target)
    else:
        with open(os.path.join(_entry(datafile), "meta.json"), "w") as fh:
            fh.write("{not json")
    assert cache.load(datafile) is None
    data = read_dataset(datafile)
    np.testing.assert_array_equal(data.indices, fresh.indices)
    assert cache.load(datafile) is not None


def test_unwritable_cache_warns_and_reads(datafile, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("RAFM_CACHE_DIR", str(blocker / "sub"))
    data = read_dataset(datafile)
    assert data.n_rows == 3
    assert "cannot write cache" in capsys.readouterr().err
