import bz2
import gzip
import io
import lzma
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from naive import csr_rows, read_plain

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
        ids = rng.choice(5000, size=rng.integers(0, 12), replace=False)
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
    eol = "\r\n" if rng.random() < 0.5 else "\n"
    text = eol.join(lines)
    if rng.random() < 0.5:
        text += eol
    return text


def check_same(data, text):
    labels, rows = read_plain(text)
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
    ("1 3:1 4:2 3:5\n", 1, "duplicate feature index", "3:5"),
    ("3 3:1 4:2 # 4:1\n1 3:1 3:1\n", 2, "duplicate feature index", "3:1"),
    ("1 1:1\n\n# c\n2 2:1\n0 5:", 5, "missing value after ':'", "5:"),
    ("1 1:1\r\n2 5:1e\r\n", 2, "value is not a number", "5:1e"),
    ("1 1:1 2:3e+\n", 1, "value is not a number", "2:3e+"),
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
