"""The parallel parser (issue 11): blocks cut into parts and parsed on several
threads give exactly the arrays, and exactly the error lines, of one part
per block on one thread, wherever the cuts and the bad line fall."""

import numpy as np
import pytest
from naive import PlainError, read_plain_counted, read_plain_fields

from rafmcli.errors import InputError
from rafmcli.io import parse_kernel as K
from rafmcli.io import reader

SERIAL = {"BLOCK_BYTES": 1 << 20, "PART_BYTES": 1 << 30, "THREADS": 1}
PARALLEL = [{"BLOCK_BYTES": block, "PART_BYTES": part, "THREADS": 2}
            for block, part in [(64, 7), (1000, 50), (4096, 300), (1 << 20, 97)]]
FEW_BLOCKS = [PARALLEL[1], PARALLEL[3]]  # each block is a parallel launch: slow on a busy machine


def field_of(i):
    """The field of index i in the libFFM texts."""
    return (i * 7) % 5


def mixed_text(rng, n_rows, ffm=False):
    """Rows with blanks, comments, repeats and every line end (LF, CRLF, CR)
    mixed; with ``ffm``, libFFM tokens (field_of's fields)."""
    out = []
    for r in range(n_rows):
        kind = rng.random()
        if kind < 0.05:
            line = "# comment 1:2"
        elif kind < 0.08:
            line = str(rng.choice(["", "  ", "\t"]))
        else:
            ids = rng.integers(0, 300, size=rng.integers(0, 9))
            if ffm:
                toks = [f"{field_of(i)}:{i}:{rng.choice(['1', '0.5', '-2', '1e-3', '0'])}" for i in ids]
            else:
                toks = [f"{i}:{rng.choice(['1', '0.5', '-2', '1e-3', '0'])}" if rng.random() < 0.8 else f"{i}"
                        for i in ids]
            line = " ".join([str(rng.choice(["0", "1", "-1", "2.5"]))] + toks)
        out.append(line + str(rng.choice(["\n", "\r\n", "\r"])))
    return "".join(out).encode()


def parse(path, settings, monkeypatch):
    for name, value in settings.items():
        monkeypatch.setattr(reader, name, value)
    try:
        return reader.parse_file(str(path))
    except InputError as exc:
        return str(exc)


def same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    fields = ("labels", "indptr", "indices", "feature_ids", "counts")
    return (all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)
            and (a.feature_fields is None) == (b.feature_fields is None)
            and (a.feature_fields is None or np.array_equal(a.feature_fields, b.feature_fields))
            and (a.values is None) == (b.values is None)
            and (a.values is None or np.array_equal(a.values, b.values))
            and a.rows_with_repeats == b.rows_with_repeats)


@pytest.mark.parametrize("seed", range(4))
def test_parts_and_threads_give_the_same_arrays(tmp_path, monkeypatch, seed):
    path = tmp_path / "f.libfm"
    path.write_bytes(mixed_text(np.random.default_rng(seed), 400, ffm=seed % 2 == 1))
    reference = parse(path, SERIAL, monkeypatch)
    assert not isinstance(reference, str)
    assert (reference.feature_fields is None) == (seed % 2 == 0)
    if seed % 2:
        np.testing.assert_array_equal(reference.feature_fields, field_of(reference.feature_ids))
    for settings in PARALLEL:
        assert same(parse(path, settings, monkeypatch), reference), settings
    if seed % 2:  # the field table turns from an array into a hash table part-way
        monkeypatch.setattr(K, "DENSE_FIELDS", 150)
        assert same(parse(path, PARALLEL[0], monkeypatch), reference)


def test_a_bad_line_in_any_block_gives_the_same_error(tmp_path, monkeypatch):
    """A bad token on line L (every L, so in every block and part, before and
    after cuts) is reported as FILE:L by the serial and the parallel parser."""
    rng = np.random.default_rng(5)
    text = mixed_text(rng, 80)
    lines = text.splitlines(keepends=True)
    path = tmp_path / "damaged.libfm"
    for at in range(len(lines)):
        token = [b"x", b"3:y", b"-4", b"99999999999", b"1:1e39", b":2"][at % 6]
        bad = b"".join(lines[:at]) + b"1 " + token + b" " + b"".join(lines[at:])
        path.write_bytes(bytes(bad))
        with pytest.raises(PlainError) as plain:
            read_plain_counted(bytes(bad))
        serial = parse(path, SERIAL, monkeypatch)
        assert serial.startswith(f"{path}:{plain.value.line}: "), (at, serial)
        for settings in FEW_BLOCKS:
            assert parse(path, settings, monkeypatch) == serial, (at, settings)


def test_a_bad_libffm_line_in_any_block_gives_the_same_error(tmp_path, monkeypatch):
    """libFFM: a token of the wrong kind, a bad field, an index in a second
    field (across rows, within a row) on line L is FILE:L, wherever the blocks
    and parts are cut; the earlier lines' fields are checked before it."""
    rng = np.random.default_rng(6)
    text = f"1 {field_of(3)}:3:1\n".encode() + mixed_text(rng, 60, ffm=True)
    lines = text.splitlines(keepends=True)
    path = tmp_path / "damaged.ffm"
    bad_tokens = [f"{field_of(3) + 1}:3:1", "3:1", "4", "x:3:1", "2000000:3:1", f"0:5:1 {field_of(5) + 1}:5:2",
                  "1:2:", "1::2"]
    for at in range(len(lines)):
        token = bad_tokens[at % len(bad_tokens)].encode()
        bad = b"".join(lines[:at]) + b"1 " + token + b"\n" + b"".join(lines[at:])
        path.write_bytes(bytes(bad))
        with pytest.raises(PlainError) as plain:
            read_plain_fields(bytes(bad))
        serial = parse(path, SERIAL, monkeypatch)
        assert serial.startswith(f"{path}:{plain.value.line}: "), (at, token, serial)
        for settings in FEW_BLOCKS:
            assert parse(path, settings, monkeypatch) == serial, (at, settings)
        monkeypatch.setattr(K, "DENSE_FIELDS", 150 if at % 2 else 1 << 26)  # hash table part-way
        assert parse(path, PARALLEL[0], monkeypatch) == serial, at


def test_cuts_fall_after_line_ends_and_never_inside_crlf():
    rng = np.random.default_rng(0)
    for _ in range(200):
        body = rng.choice(np.frombuffer(b"ab\r\n ", dtype=np.uint8), size=rng.integers(1, 60))
        buf = np.concatenate([body, np.frombuffer(b"\n\0", dtype=np.uint8)])
        n = buf.shape[0] - 1
        cuts = K.split_lines(buf, n, int(rng.integers(1, 9)))
        assert cuts[0] == 0 and cuts[-1] == n and (np.diff(cuts) >= 0).all()
        for c in cuts[1:-1]:
            if 0 < c < n:
                assert buf[c - 1] in (10, 13) and not (buf[c - 1] == 13 and buf[c] == 10)
