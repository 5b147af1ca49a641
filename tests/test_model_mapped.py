"""Model files opened at stream speed (issue 11): stored members are mapped in place,
copy-on-write, and checked as a read checks them (CRC-32, finite values), piece by
piece on every core."""

import os
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest

from rafmcli.errors import InputError
from rafmcli.io import checksum
from rafmcli.model import files
from rafmcli.model.layout import CACHE_LINE, build


def test_crc32_combine_is_zlibs():
    rng = np.random.default_rng(1)
    data = rng.bytes(5000)
    for cut in (0, 1, 7, 64, 2500, 4999, 5000):
        a, b = data[:cut], data[cut:]
        assert checksum.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(data)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_crc32_in_pieces_on_threads_is_zlibs(monkeypatch, n_threads):
    """Binary-cache arrays are checksummed in pieces on every core (io/checksum.py): the
    pieces' CRCs combined are zlib's CRC of the whole, for any sizes around the pieces'."""
    monkeypatch.setattr(checksum, "PIECE", 100)
    monkeypatch.setattr("rafmcli.threads._DEFAULT", {"threads": n_threads})
    data = np.random.default_rng(n_threads).integers(0, 256, 2000, dtype=np.uint8)
    for size in (0, 1, 99, 100, 101, 399, 400, 401, 1234, 2000):
        assert checksum.crc32(data[:size]) == zlib.crc32(data[:size].tobytes()), size
    assert checksum.crc32(data.view(np.int32)) == zlib.crc32(data.tobytes())


def model_file(tmp_path, n_features=3000, ranks=(4, 32), name="m.rafm"):
    rng = np.random.default_rng(2)
    model = build("rafm", "r", ranks, rng.choice(10**6, n_features, replace=False),
                  rng.integers(1, 3, n_features), 0.1, rng, 0.5, (0, 5))
    model.w[:] = rng.normal(0, 1, n_features)
    files.save(model, str(tmp_path / name))
    return model, tmp_path / name


def test_stored_arrays_are_mapped_on_a_cache_line_and_copy_on_write(tmp_path):
    model, path = model_file(tmp_path)
    loaded = files.load(str(path), mapped=True)
    for name in ("feature_ids", "levels", "w", "V"):
        array = getattr(loaded, name)
        np.testing.assert_array_equal(array, getattr(model, name))
        base = array
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview) and type(base.obj).__name__ == "mmap", name  # mapped, not read
        assert array.ctypes.data % CACHE_LINE == 0 and array.flags.writeable
    before = path.read_bytes()
    loaded.V[:] = 7.0  # continued training writes into V: never into the file
    assert path.read_bytes() == before
    np.testing.assert_array_equal(files.load(str(path)).V, model.V)


def rewrite(path, out, compression):
    """The archive at ``path`` written again by plain zipfile (no alignment), with ``compression``."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", compression) as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
    return out


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_archives_of_other_writers_load_the_same(tmp_path, compression):
    """Unaligned stored members are checked in place, then copied; compressed ones are read."""
    model, path = model_file(tmp_path)
    loaded = files.load(str(rewrite(path, tmp_path / "other.rafm", compression)), mapped=True)
    for name in ("feature_ids", "levels", "w", "V"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    assert loaded.V.ctypes.data % CACHE_LINE == 0


def data_offset(path, member):
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset + 26)
        name, extra = np.frombuffer(fh.read(4), np.uint16)
    return info.header_offset + 30 + int(name) + int(extra), info.file_size


@pytest.mark.parametrize("aligned", [True, False])
def test_damage_in_any_piece_of_a_mapped_member_is_found(tmp_path, monkeypatch, aligned):
    """A flipped byte anywhere in V (its CRC-32) and a NaN anywhere in it, checked in
    pieces of 4 KiB on every core: one line, as a read reports them."""
    monkeypatch.setattr(files, "CHECK_PIECE", 4096)
    model, path = model_file(tmp_path)
    if not aligned:
        path = rewrite(path, tmp_path / "plain.rafm", zipfile.ZIP_STORED)
    start, size = data_offset(path, "V.npy")
    good = path.read_bytes()
    rng = np.random.default_rng(3)
    n = model.V.shape[0]
    for where in [size - 4 * n, size - 4 * n + 100, size - 1, *rng.integers(size - 4 * n, size, 5)]:
        bad = bytearray(good)  # a byte of the array flipped (the .npy header's own checks come first)
        bad[start + where] ^= 0x10
        path.write_bytes(bytes(bad))
        with pytest.raises(InputError, match=r"damaged model file \(Bad CRC-32 for file 'V.npy'\)"):
            files.load(str(path), mapped=True)
    for where in [0, n - 1, *rng.integers(0, n, 3)]:
        broken = model.V.copy()
        broken[where] = np.nan
        model.V, kept = broken, model.V
        files.save(model, str(tmp_path / "nan.rafm"))
        model.V = kept
        nan_path = tmp_path / "nan.rafm"
        if not aligned:
            nan_path = rewrite(nan_path, tmp_path / "nan-plain.rafm", zipfile.ZIP_STORED)
        with pytest.raises(InputError, match=r"damaged model file \(V.npy holds values that are not finite\)"):
            files.load(str(nan_path), mapped=True)
    path.write_bytes(good)
    np.testing.assert_array_equal(files.load(str(path)).V, model.V)
    assert os.path.getsize(path) == len(good)


def owner(array):
    while isinstance(array, np.ndarray):
        array = array.base
    return array


def test_only_rafm_predict_maps_a_model_so_a_loaded_model_can_be_saved_over_its_file(tmp_path):
    """Loads read by default (the API, continued training, dump): saving a loaded model back
    over its own file, through a symlink (written in place), keeps it. Mapped, the save
    truncated the pages the arrays lived on: the process died of SIGBUS, the file left empty."""
    model, path = model_file(tmp_path, name="real.rafm")
    assert owner(files.load(str(path)).V) is None or type(owner(files.load(str(path)).V)).__name__ != "mmap"
    link = tmp_path / "link.rafm"
    link.symlink_to(path)
    code = ("import sys; from rafmcli.model import files; m = files.load(sys.argv[1]); "
            "files.save(m, sys.argv[1]); print(float(m.V.sum()))")
    done = subprocess.run([sys.executable, "-c", code, str(link)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    np.testing.assert_array_equal(files.load(str(path)).V, model.V)


@pytest.mark.parametrize("mapped", [False, True])
def test_a_model_loads_without_numba(tmp_path, mapped):
    """Models are checked with numpy and zlib, no numba (its import alone is 0.3-0.5 s),
    read or mapped: `rafm dump` and the API start fast, and `rafm predict` checks its
    model while numba starts on another thread (jit.preload). Mapped members' checks
    imported numba at every size before."""
    _, path = model_file(tmp_path, n_features=300)
    code = ("import sys; from rafmcli.model import files; files.load(sys.argv[1], mapped=sys.argv[2] == 'True'); "
            "print('numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(path), str(mapped)], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("spread", [4, 2**20])
def test_distinct_ids_agree_with_numpy_unique(spread):
    """:func:`files._ids_distinct` against np.unique, for dense ids (below 4 per id) and sparse
    ones (up to 2^20 per id), with and without one repeat anywhere."""
    rng = np.random.default_rng(spread)
    for n in (1, 2, 50, 3000):
        top = min(spread * n, 2**31 - 1)
        ids = rng.choice(top - 1, n, replace=False).astype(np.int32)
        ids[rng.integers(n)] = top - 1  # the largest id possible is among them
        cases = [ids]
        if n > 1:
            repeated = ids.copy()
            a, b = rng.choice(n, 2, replace=False)
            repeated[a] = repeated[b]
            cases.append(repeated)
        for case, distinct in zip(cases, (True, False)):
            assert np.unique(case).shape[0] == (n if distinct else n - 1)
            assert files._ids_distinct(case) == distinct, (spread, n)
    assert files._ids_distinct(np.empty(0, dtype=np.int32))


def patch_member(path, member, local_offset, central_offset, value):
    """Set a 2-byte field of ``member``'s local header and central directory entry."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
        central = zf.start_dir
    data = bytearray(path.read_bytes())
    data[info.header_offset + local_offset:info.header_offset + local_offset + 2] = value.to_bytes(2, "little")
    entry = data.index(b"PK\x01\x02" + data[central + 4:central + 8], central)  # first entry; find ours
    while data[entry + 46:entry + 46 + len(member)] != member.encode():
        entry = data.index(b"PK\x01\x02", entry + 4)
    data[entry + central_offset:entry + central_offset + 2] = value.to_bytes(2, "little")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("field,value,what", [(6, 1, "encrypted"), (8, 93, "compression")])
def test_an_encrypted_or_unknown_member_is_a_damaged_file(tmp_path, mapped, field, value, what):
    """zipfile's RuntimeError (encrypted) and NotImplementedError (compression method 93)
    are one line like any damage, not a traceback."""
    _, path = model_file(tmp_path)
    patch_member(path, "V.npy", field, field + 2, value)
    with pytest.raises(InputError, match=r"damaged model file \(") as caught:
        files.load(str(path), mapped=mapped)
    assert what in str(caught.value).lower() or "password" in str(caught.value).lower()


def test_rafm_predict_maps_its_model(tmp_path, monkeypatch, sample):
    from click.testing import CliRunner

    from rafmcli.cli import main

    _, path = model_file(tmp_path)
    calls, load = [], files.load
    monkeypatch.setattr(files, "load", lambda *args, **kwargs: calls.append(kwargs) or load(*args, **kwargs))
    result = CliRunner().invoke(main, ["predict", "--model", str(path), "--out", str(tmp_path / "p"),
                                       sample("regression.test")])
    assert result.exit_code == 0, result.output
    assert calls == [{"mapped": True}]
