import bz2
import gzip
import io
import json
import lzma
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from naive import csr_rows, read_plain_counted

from rafmcli.cli import main
from rafmcli.io import reader
from rafmcli.io.reader import parse_file, read_dataset

SPACES = [" ", "  ", "\t", " \t "]


def messy_text(rng, n_rows=300, ones=False):
    """A valid libFM text with every tolerated irregularity, and random values."""
    lines = []
    for _ in range(n_rows):
        kind = rng.random()
        if kind < 0.05:
            lines.append("# a whole-line comment: 1:2 3:4")
            continue
        if kind < 0.08:
            lines.append(rng.choice(["", "   ", "\t"]))
            continue
        label = rng.choice(["1", "-1", "0", f"{rng.normal():.6g}", "+3.5", "2e-3", ".5"])
        ids = rng.choice(5000, size=rng.integers(0, 12), replace=not ones and rng.random() < 0.2)
        toks = []
        for i in ids:
            if ones:
                toks.append(f"{i}:1" if rng.random() < 0.8 else f"{i}")
            else:
                v = rng.choice([f"{rng.normal():.7g}", "1", "0", f"{rng.uniform(0, 9):.3e}", "-2"])
                toks.append(f"{i}:{v}" if rng.random() < 0.9 else f"{i}")
        sep = [str(rng.choice(SPACES)) for _ in range(len(toks) + 1)]
        line = label + "".join(s + t for s, t in zip(sep, toks))
        if rng.random() < 0.2:
            line += rng.choice(SPACES)
        if rng.random() < 0.1:
            line += " # trailing comment 7:7"
        lines.append(line)
    eol = str(rng.choice(["\n", "\r\n", "\r"]))
    text = eol.join(lines)
    if rng.random() < 0.5:
        text += eol
    return text


def check_same(data, text):
    labels, rows, repeats = read_plain_counted(text)
    assert data.rows_with_repeats == repeats
    np.testing.assert_array_equal(data.labels, np.array(labels))
    assert csr_rows(data) == rows
    ids = sorted({i for row in rows for i, _ in row})
    np.testing.assert_array_equal(data.feature_ids, ids)
    counts = {i: 0 for i in ids}
    for row in rows:
        for i, _ in row:
            counts[i] += 1
    np.testing.assert_array_equal(data.counts, [counts[i] for i in ids])
    assert data.indices.dtype == np.int32 and data.labels.dtype == np.float64


@pytest.mark.parametrize("seed", range(6))
def test_matches_plain_reader(tmp_path, seed):
    rng = np.random.default_rng(seed)
    text = messy_text(rng, ones=seed % 3 == 0)
    path = tmp_path / "f.libfm"
    path.write_bytes(text.encode())
    data = parse_file(str(path))
    check_same(data, text)
    if seed % 3 == 0:
        assert data.values is None


@pytest.mark.parametrize("opener,ext", [(gzip.open, ".gz"), (bz2.open, ".bz2"), (lzma.open, ".xz")])
def test_compressed(tmp_path, opener, ext):
    text = messy_text(np.random.default_rng(11))
    path = tmp_path / ("f.libfm" + ext)
    with opener(path, "wb") as fh:
        fh.write(text.encode())
    check_same(parse_file(str(path)), text)


def test_tiny_blocks_cross_line_boundaries(tmp_path, monkeypatch):
    """Lines split across blocks, and lines longer than the block, parse the same."""
    monkeypatch.setattr(reader, "BLOCK_BYTES", 7)
    text = "\ufeff" + messy_text(np.random.default_rng(3), n_rows=80)
    path = tmp_path / "f.libfm"
    path.write_bytes(text.encode())
    check_same(parse_file(str(path)), text)


def test_hand_example(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"\xef\xbb\xbf# header\r\n1 7:0.5 3 2:0\r\n\r\n-2.5\t\t9:1e1  # note\r\n4 0:1")
    data = parse_file(str(path))
    np.testing.assert_array_equal(data.labels, [1.0, -2.5, 4.0])
    np.testing.assert_array_equal(data.indptr, [0, 2, 3, 4])
    np.testing.assert_array_equal(data.indices, [3, 7, 9, 0])
    np.testing.assert_array_equal(data.values, [1.0, 0.5, 10.0, 1.0])
    np.testing.assert_array_equal(data.feature_ids, [0, 3, 7, 9])
    np.testing.assert_array_equal(data.counts, [1, 1, 1, 1])


def test_empty_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("# nothing\n\n")
    data = parse_file(str(path))
    assert data.n_rows == 0 and data.nnz == 0 and data.feature_ids.size == 0


def test_stdin(sample, monkeypatch):
    path = sample("regression.validation")
    with open(path, "rb") as fh:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(fh.read())))
    data = read_dataset("-")
    assert data.path == "<stdin>"
    check_same(data, open(path).read())


BAD = [
    ("1 2:3\nabc 1:1\n", 2, "label is not a number", "abc"),
    ("1 2:3\nnan 1:1\n", 2, "label is not a number", "nan"),
    ("1e999 1:1\n", 1, "label is not finite", "1e999"),
    ("1 2:x\n", 1, "value is not a number", "2:x"),
    ("1 2:nan\n", 1, "value is not a number", "2:nan"),
    ("1 2:inf\n", 1, "value is not a number", "2:inf"),
    ("1 2:1e39\n", 1, "value is not finite", "2:1e39"),
    ("1 2:1.5.2\n", 1, "value is not a number", "2:1.5.2"),
    ("1 -2:1\n", 1, "feature index is negative", "-2:1"),
    ("1 1.5:1\n", 1, "not a non-negative integer", "1.5:1"),
    ("1 a:1\n", 1, "not a non-negative integer", "a:1"),
    ("1 :1\n", 1, "missing feature index", ":1"),
    ("1 2147483648:1\n", 1, "exceeds 2147483647", "2147483648:1"),
    ("1 99999999999999999999999:1\n", 1, "exceeds 2147483647", "99999999999999999999999:1"),
    ("1 qid:3 1:1\n", 1, "qid tokens are not supported", "qid:3"),
    ("1 3:3e38 4:2 3:3e38\n", 1, "repeated feature index sum beyond float32", "3"),
    ("1 1:1\r2 x:1\r", 2, "not a non-negative integer", "x:1"),
    ("1 1:1\r\n\r\n\r2 x:1\r", 4, "not a non-negative integer", "x:1"),
    ("1 1:1\n\r2 x:1\n", 3, "not a non-negative integer", "x:1"),
    ("1 1:1\n\n# c\n2 2:1\n0 5:", 5, "missing value after ':'", "5:"),
    ("1 1:1\r\n2 5:1e\r\n", 2, "value is not a number", "5:1e"),
    ("1 1:1 2:3e+\n", 1, "value is not a number", "2:3e+"),
    # libFFM (issue 13)
    ("1 0:3:1 1:7:1\n0 3:1\n", 2, "libSVM/libFM token in a libFFM file", "3:1"),
    ("1 0:3:1\n0 1:7:1 4\n", 2, "libSVM/libFM token in a libFFM file", "4"),
    ("1 3:1\n\n0 1:7:1\n", 3, "libFFM token (field:index:value) in a libSVM/libFM file", "1:7:1"),
    ("1 0:3:1 1:7:1\n# 2:3:1\n0 2:3:0.5\n", 3, "feature 3 is in field 0 before this line", "2:3:0.5"),
    ("1 0:3:1 2:3:0 1:3:2\n", 1, "feature 3 is in field 0 and in field 1", "1:3:2"),
    ("1 1048576:3:1\n", 1, "field exceeds 1048575", "1048576:3:1"),
    ("1 99999999999:3:1\n", 1, "field exceeds 1048575", "99999999999:3:1"),
    ("1 -1:3:1\n", 1, "field is negative", "-1:3:1"),
    ("1 f:3:1\n", 1, "field is not a non-negative integer", "f:3:1"),
    ("1 :3:1\n", 1, "missing field before ':'", ":3:1"),
    ("1 1::1\n", 1, "missing feature index between", "1::1"),
    ("1 1:3.5:1\n", 1, "feature index is not a non-negative integer", "1:3.5:1"),
    ("1 1:-3:1\n", 1, "feature index is negative", "1:-3:1"),
    ("1 1:2147483648:1\n", 1, "exceeds 2147483647", "1:2147483648:1"),
    ("1 1:3:\n", 1, "missing value after ':'", "1:3:"),
    ("1 1:3:x\n", 1, "value is not a number", "1:3:x"),
    ("1 1:3:1:2\n", 1, "value is not a number", "1:3:1:2"),
    ("1 1:3:1e39\n", 1, "value is not finite", "1:3:1e39"),
]


@pytest.mark.parametrize("text,line,what,token", BAD)
def test_rejections(tmp_path, text, line, what, token):
    path = tmp_path / "bad.libfm"
    path.write_text(text)
    result = CliRunner().invoke(main, ["stats", str(path)])
    assert result.exit_code == 2, result.output
    message = result.output.strip().splitlines()[-1]
    assert message.startswith(f"Error: {path}:{line}: ")
    assert what in message and message.endswith(f"({token})")


def test_rejection_in_compressed_file(tmp_path):
    path = tmp_path / "bad.libfm.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("1 1:1\n" * 1000 + "x 1:1\n")
    result = CliRunner().invoke(main, ["stats", str(path)])
    assert result.exit_code == 2
    assert f"{path}:1001: label is not a number (x)" in result.output


@pytest.mark.parametrize("content", [b"\x1f\x8b\x08\x00garbage", b"1 1:1\n"])
def test_damaged_gzip(tmp_path, content):
    path = tmp_path / "f.gz"
    path.write_bytes(gzip.compress(content * 50)[:-12] if content == b"1 1:1\n" else content)
    result = CliRunner().invoke(main, ["stats", str(path)])
    assert result.exit_code == 2
    assert f"{path}: cannot decompress" in result.output


def test_missing_file(tmp_path):
    result = CliRunner().invoke(main, ["stats", str(tmp_path / "nope.libfm")])
    assert result.exit_code == 2
    assert "nope.libfm" in result.output


def _stats(*args):
    return CliRunner().invoke(main, ["stats", *map(str, args)])


def test_lone_cr_ends_lines(tmp_path):
    """Class 16: old Mac files (CR only) read as rows, not as one row of labels-turned-features."""
    path = tmp_path / "mac.libfm"
    path.write_bytes(b"1 5:1\r0 6:1\r")
    data = parse_file(str(path))
    np.testing.assert_array_equal(data.labels, [1, 0])
    np.testing.assert_array_equal(data.indptr, [0, 1, 2])
    np.testing.assert_array_equal(data.indices, [5, 6])


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("block", [1, 2, 3, 5, 1 << 20])
def test_line_ends_agree_across_block_cuts(tmp_path, monkeypatch, eol, block):
    """Every line end, cut anywhere by the block boundary (a CRLF split in two
    included), numbers lines alike: the error names the same line."""
    monkeypatch.setattr(reader, "BLOCK_BYTES", block)
    lines = [b"1 1:1", b"", b"# c", b"2 2:2", b"0 x:1"]
    path = tmp_path / "f.libfm"
    path.write_bytes(eol.join(lines) + eol)
    result = _stats(path)
    assert result.exit_code == 2
    message = result.output.strip().splitlines()[-1]
    assert message == f"Error: {path}:5: feature index is not a non-negative integer (x:1)"
    path.write_bytes(eol.join(lines[:4]) + eol)
    data = parse_file(str(path))
    np.testing.assert_array_equal(data.labels, [1, 2])


def test_repeated_index_is_summed(tmp_path):
    """Class 18: one value per index, the sum of its values; zero sums dropped."""
    path = tmp_path / "rep.libfm"
    path.write_bytes(b"1 3:1 3:1\n0 3:0 3:1\n1 4:0.5 2 4:-0.5\n1 7 7 7 1:2\n")
    data = parse_file(str(path))
    assert csr_rows_of(data) == [[(3, 2.0)], [(3, 1.0)], [(2, 1.0)], [(1, 2.0), (7, 3.0)]]
    assert data.rows_with_repeats == 3
    assert data.counts.tolist() == [1, 1, 2, 1] and data.feature_ids.tolist() == [1, 2, 3, 7]


def csr_rows_of(data):
    from naive import csr_rows

    return csr_rows(data)


def test_repeats_in_a_ones_file_get_values(tmp_path, monkeypatch):
    """A file of 1s whose later block repeats an index: the earlier blocks' 1s
    are kept and the sum is stored."""
    monkeypatch.setattr(reader, "BLOCK_BYTES", 16)
    path = tmp_path / "ones.libfm"
    path.write_bytes(b"1 1 2:1\n" * 6 + b"0 5:1 5\n" + b"1 3\n" * 3)
    data = parse_file(str(path))
    assert data.values is not None
    assert csr_rows_of(data) == [[(1, 1.0), (2, 1.0)]] * 6 + [[(5, 2.0)]] + [[(3, 1.0)]] * 3
    assert data.rows_with_repeats == 1


def test_repeats_reported_by_stats_and_train(tmp_path):
    path = tmp_path / "rep.libfm"
    path.write_bytes(b"1 3:1 3:1\n0 4:1\n1 4 4 5\n0 5:1\n" * 3)
    text = _stats(path)
    assert text.exit_code == 0
    assert "repeats      6 rows repeat a feature index (values summed)" in text.output
    as_json = _stats("--json", path)
    assert json.loads(as_json.output)["files"][0]["rows_with_repeats"] == 6
    plain = tmp_path / "plain.libfm"
    plain.write_bytes(b"1 3:1\n0 4:1\n")
    assert "\nrepeats " not in _stats(plain).output
    assert json.loads(_stats("--json", plain).output)["files"][0]["rows_with_repeats"] == 0
    result = CliRunner().invoke(main, ["train", "--task", "c", "--train", str(path), "--validation", str(plain),
                                       "--iter", "1", "--dim", "2"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "repeat" in line]
    assert warnings == [f"rafm: {path}: 6 rows repeat a feature index; the values of each repeated index "
                        f"were summed"]


@pytest.mark.parametrize("ext", [".bz2", ".gz", ".xz"])
def test_plain_text_with_a_compressed_name(tmp_path, ext):
    """Class 19: a plain-text file named .bz2 cannot be decompressed (not 'cannot read')."""
    path = tmp_path / ("plain.libfm" + ext)
    path.write_bytes(b"1 1:1\n" * 20)
    result = _stats(path)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(f"Error: {path}: cannot decompress: ")


@pytest.mark.parametrize("content,token", [
    (b"1 2:3\n\x00 1:1\n", "\\x00"),
    (b"1 2:3\n\x1b[31m 1:1\n", "\\x1b[31m"),
    (b"1 2:3\n\xff\xfe 1:1\n", "\\xff\\xfe"),
    (b"1 2:\x00\x07\n", "2:\\x00\\x07"),
])
def test_control_bytes_are_escaped_in_messages(tmp_path, content, token):
    """Class 19: NUL, escape and non-UTF-8 bytes from the input never reach the terminal raw."""
    path = tmp_path / "ctl.libfm"
    path.write_bytes(content)
    result = CliRunner().invoke(main, ["stats", str(path)])
    assert result.exit_code == 2
    message = result.output.strip().splitlines()[-1]
    assert message.endswith(f"({token})") and message.isprintable()


def test_fill_never_writes_out_of_bounds():
    """Class 1: parse_block given arrays too short for its block stops with
    ERR_FULL and leaves every byte beyond them untouched (libFFM fields too)."""
    from rafmcli.io import parse_kernel as K

    for body in (b"1 1:2 2:3\n0 3:4 4:5 5:6\n1 7:1\n", b"1 0:1:2 0:2:3\n0 1:3:4 1:4:5 2:5:6\n1 3:7:1\n"):
        text = np.frombuffer(body, dtype=np.uint8).copy()
        guard = -7
        for rows, tokens in [(1, 10), (10, 3), (2, 4)]:
            labels = np.full(rows + 5, guard, dtype=np.float64)
            indptr = np.full(rows + 6, guard, dtype=np.int64)
            indices = np.full(tokens + 5, guard, dtype=np.int32)
            values = np.full(tokens + 5, guard, dtype=np.float32)
            fields = np.full(tokens + 5, guard, dtype=np.int32)
            indptr[0] = 0
            code, line, *_ = K.parse_block(text, len(text), 0, 0, labels[:rows], indptr[:rows + 1],
                                            indices[:tokens], values[:tokens], fields[:tokens], K.FMT_NONE)
            assert code == K.ERR_FULL
            assert (labels[rows:] == guard).all() and (indptr[rows + 1:] == guard).all()
            assert (indices[tokens:] == guard).all() and (values[tokens:] == guard).all()
            assert (fields[tokens:] == guard).all()


def test_values_zero_in_float32_are_dropped(tmp_path):
    """A value that rounds to 0 in float32 is a zero: not stored, not counted."""
    path = tmp_path / "tiny.libfm"
    text = "1 3:1e-50 4:1 5:-1e-46 6:1e-45\n"
    path.write_text(text)
    data = parse_file(str(path))
    check_same(data, text)
    assert data.feature_ids.tolist() == [4, 6]
