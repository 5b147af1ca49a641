"""--levels files: data-file rules and messages (issue 8, class 13)."""

import os

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.model import files as model_file


@pytest.fixture
def train_file(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "train.libfm"
    rows = [f"{rng.normal():.3f} {a}:1 {10 + b}:1\n" for a, b in rng.integers(0, 10, (60, 2))]
    path.write_text("".join(rows))
    return path


def train(train_file, levels, out):
    return CliRunner().invoke(main, ["train", "--task", "r", "--train", str(train_file), "--ranks", "2,4",
                                     "--levels", str(levels), "--iter", "1", "--holdout", "0",
                                     "--save-model", str(out)])


BAD = [
    (b"1 2\n3 \xff\n", 2, "not UTF-8 text", "\\xff"),
    ("\u00b2 1\n".encode(), 1, "feature is not a non-negative integer", "\u00b2"),
    ("3 \u00b2\n".encode(), 1, "level must be 1..2", "\u00b2"),
    (b"3 1\n4 0\n", 2, "level must be 1..2", "0"),
    (b"3 3\n", 1, "level must be 1..2", "3"),
    (b"3 -1\n", 1, "level must be 1..2", "-1"),
    (b"3 1.0\n", 1, "level must be 1..2", "1.0"),
    (b"# f l\n\n3\n", 3, "expected 'feature level'", "3"),
    (b"3 1 2\n", 1, "expected 'feature level'", "3 1 2"),
    (b"-3 1\n", 1, "feature is not a non-negative integer", "-3"),
    (b"2147483648 1\n", 1, "feature exceeds 2147483647", "2147483648"),
    (b"3 1\r4 x\r", 2, "level must be 1..2", "x"),
    (b"3 1\r\n\r\n5 1\r\n3 2\r\n", 4, "feature already given on line 1", "3"),
    (b"\x00 1\n", 1, "feature is not a non-negative integer", "\\x00"),
]


@pytest.mark.parametrize("content,line,what,token", BAD)
def test_bad_levels_file(tmp_path, train_file, content, line, what, token):
    levels = tmp_path / "levels.txt"
    levels.write_bytes(content)
    before = sorted(os.listdir(tmp_path))
    result = train(train_file, levels, tmp_path / "m.rafm")
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [f"Error: {levels}:{line}: {what} ({token})"]
    assert sorted(os.listdir(tmp_path)) == before


def test_levels_file_like_a_data_file(tmp_path, train_file):
    """BOM, CRLF and comments read; a feature absent from training is counted on stderr, once."""
    levels = tmp_path / "levels.txt"
    levels.write_bytes(b"\xef\xbb\xbf# feature level\r\n3 2\r\n999 2  # not in training\r\n12345 1\r\n")
    out = tmp_path / "m.rafm"
    result = train(train_file, levels, out)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if str(levels) in line]
    assert notes == [f"rafm: {levels}: 2 of its 3 features do not occur in training; their levels are not used"]
    model = model_file.load(str(out))
    assert model.levels[model.feature_ids.tolist().index(3)] == 2


def test_levels_file_through_the_python_api(tmp_path, train_file):
    """The API reads the same files with the same rules (its errors are ValueError)."""
    from rafmcli.api import FMRegressor, read_data

    data, y = read_data(train_file, sparse=False)
    levels = tmp_path / "levels.txt"
    levels.write_bytes(b"3 2\r\n")
    FMRegressor(model="rafm", ranks=(2, 4), levels=str(levels), iters=1).fit(data, y)
    levels.write_bytes("\u00b2 1\n".encode())
    with pytest.raises(ValueError, match=r"levels.txt:1: feature is not a non-negative integer \(\u00b2\)"):
        FMRegressor(model="rafm", ranks=(2, 4), levels=str(levels), iters=1).fit(data, y)
