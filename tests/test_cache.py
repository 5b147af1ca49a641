import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
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
    monkeypatch.setattr(reader, "_parse", fail)


def test_hit_is_memory_mapped_and_equal(datafile, monkeypatch):
    first = read_dataset(datafile)
    _no_parse(monkeypatch)
    second = read_dataset(datafile)
    assert isinstance(second.indices, np.memmap)
    for name in ("labels", "indptr", "indices", "values", "feature_ids", "counts"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def test_libffm_fields_are_cached_and_checked(tmp_path, monkeypatch):
    """Format 3 keeps a libFFM file's fields; an entry whose fields disagree in
    size with its features is damaged and rebuilt; a subset keeps the fields."""
    path = tmp_path / "d.ffm"
    path.write_text("1 0:1:0.5 2:3:1\n0 1:2:1\n1 0:1:2 2:4:1\n")
    first = read_dataset(str(path))
    np.testing.assert_array_equal(first.feature_fields, [0, 1, 2, 2])
    cached = read_dataset(str(path))
    assert isinstance(cached.feature_fields, np.memmap)
    np.testing.assert_array_equal(cached.feature_fields, first.feature_fields)
    sub = cached.subset([1, 2])
    np.testing.assert_array_equal(sub.feature_ids, [1, 2, 4])
    np.testing.assert_array_equal(sub.feature_fields, [0, 1, 2])
    entry = cache._entry_dir(str(path), None)
    np.save(os.path.join(entry, "feature_fields.npy"), np.zeros(2, np.int32))
    meta = json.load(open(os.path.join(entry, "meta.json")))
    meta["arrays"]["feature_fields"]["shape"] = [2]
    meta["arrays"]["feature_fields"]["crc32"] = cache._crc(np.zeros(2, np.int32))
    json.dump(meta, open(os.path.join(entry, "meta.json"), "w"))
    assert cache.load(str(path), cache.identity(str(path))) is None


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


def _meta(datafile):
    with open(os.path.join(_entry(datafile), "meta.json")) as fh:
        return json.load(fh)


def _write_meta(datafile, meta):
    with open(os.path.join(_entry(datafile), "meta.json"), "w") as fh:
        fh.write(meta if isinstance(meta, str) else json.dumps(meta))


def _flip_last_byte(path):
    with open(path, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _wrong_dtype(datafile):
    """indices stored as int64 with a meta.json that agrees (CRC included)."""
    entry = _entry(datafile)
    wide = np.load(os.path.join(entry, "indices.npy")).astype(np.int64)
    np.save(os.path.join(entry, "indices.npy"), wide)
    meta = _meta(datafile)
    meta["arrays"]["indices"] = {"dtype": "int64", "shape": list(wide.shape), "crc32": cache._crc(wide)}
    _write_meta(datafile, meta)


DAMAGE = {
    "truncate": lambda d: os.truncate(os.path.join(_entry(d), "indices.npy"),
                                      os.path.getsize(os.path.join(_entry(d), "indices.npy")) - 4),
    "flip": lambda d: _flip_last_byte(os.path.join(_entry(d), "indices.npy")),
    "delete": lambda d: os.remove(os.path.join(_entry(d), "indices.npy")),
    "empty labels": lambda d: open(os.path.join(_entry(d), "labels.npy"), "w").close(),
    "meta not json": lambda d: _write_meta(d, "{not json"),
    "meta null": lambda d: _write_meta(d, "null"),
    "meta empty": lambda d: _write_meta(d, ""),
    "arrays a list": lambda d: _write_meta(d, {**_meta(d), "arrays": []}),
    "arrays missing": lambda d: _write_meta(d, {"identity": _meta(d)["identity"]}),
    "spec not a dict": lambda d: _write_meta(d, {**_meta(d), "arrays": {**_meta(d)["arrays"], "labels": 3}}),
    "unknown array": lambda d: _write_meta(d, {**_meta(d), "arrays": {**_meta(d)["arrays"], "x": {}}}),
    "no repeat count": lambda d: _write_meta(d, {k: v for k, v in _meta(d).items() if k != "rows_with_repeats"}),
    "wrong dtype": _wrong_dtype,
    "meta a directory": lambda d: (os.remove(os.path.join(_entry(d), "meta.json")),
                                   os.mkdir(os.path.join(_entry(d), "meta.json"))),
    "entry a file": lambda d: (shutil.rmtree(_entry(d)), open(_entry(d), "w").close()),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_entry_is_rebuilt_with_one_warning(datafile, damage):
    """Class 7: whatever is wrong with an entry, the command reads the text
    again, warns once and rewrites the entry; never "Aborted!" or a traceback."""
    fresh = read_dataset(datafile, use_cache=False)
    assert CliRunner().invoke(main, ["stats", datafile]).exit_code == 0
    DAMAGE[damage](datafile)
    result = CliRunner().invoke(main, ["stats", "--json", datafile])
    assert result.exit_code == 0, result.output
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"rafm: warning: damaged cache entry for {datafile} (")
    assert json.loads(result.stdout)["files"][0]["nonzeros"] == fresh.nnz
    again = CliRunner().invoke(main, ["stats", datafile])
    assert again.exit_code == 0 and again.stderr == ""
    data = cache.load(datafile, cache.identity(datafile))
    np.testing.assert_array_equal(data.indices, fresh.indices)
    np.testing.assert_array_equal(data.values, fresh.values)


def test_other_version_is_stale_without_warning(datafile, capsys):
    read_dataset(datafile)
    meta = _meta(datafile)
    meta["identity"]["format"] = 1
    _write_meta(datafile, meta)
    assert read_dataset(datafile).n_rows == 3
    assert capsys.readouterr().err == ""
    assert _meta(datafile)["identity"]["format"] == cache.FORMAT


def test_replaced_file_with_same_size_and_mtime_is_stale(datafile):
    """A file replaced by another of the same size and mtime (cp -p, rsync) is a new inode."""
    read_dataset(datafile)
    st = os.stat(datafile)
    other = datafile + ".new"
    with open(other, "w") as fh:
        fh.write("7 1:0.5 3:1\n0 2:1\n1 1:2 4:1\n")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, datafile)
    assert read_dataset(datafile).labels[0] == 7


def test_unwritable_cache_warns_and_reads(datafile, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("RAFM_CACHE_DIR", str(blocker / "sub"))
    data = read_dataset(datafile)
    assert data.n_rows == 3
    assert "cannot write cache" in capsys.readouterr().err


def test_an_entry_stored_by_another_run_meanwhile_stands_without_a_warning(datafile, monkeypatch, capsys):
    """Two runs storing one file's entry at once: the rename of the later one finds the earlier's
    entry in place ('Directory not empty'); it keeps that entry, says nothing and leaves no
    temporary directory (three parallel `rafm stats` on a fresh cache printed a warning)."""
    real_replace = os.replace

    def other_run_first(src, dst):
        if os.path.basename(src).startswith(".tmp-") and os.path.isdir(src):
            shutil.copytree(src, dst)  # the other run's entry, renamed into place just before ours
        return real_replace(src, dst)

    monkeypatch.setattr(cache.os, "replace", other_run_first)
    first = read_dataset(datafile)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(cache.os, "replace", real_replace)
    entry = cache._entry_dir(datafile, None)
    assert not [n for n in os.listdir(os.path.dirname(entry)) if n.startswith(".tmp-")]
    _no_parse(monkeypatch)
    np.testing.assert_array_equal(read_dataset(datafile).indices, first.indices)  # the entry serves
