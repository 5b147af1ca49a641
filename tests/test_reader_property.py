"""Property tests of the reader (issue 8): rafm reads exactly what a plain-Python
reader reads, and damage to a file is exit 0 or exit 2 with FILE:LINE.

Random valid rows (libSVM/libFM or libFFM, issue 13) are written with random blanks, comments, BOMs, line ends
(LF, CRLF, CR, mixed), repeated indices, compression and block sizes that cut
lines anywhere. The examples are derandomised so CI is repeatable; set
RAFM_HYPOTHESIS=explore for a longer random search.
"""

import bz2
import gzip
import json
import lzma
import os

import numpy as np
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive import MAX_FIELD, PlainError, csr_rows, read_plain_fields

from rafmcli.cli import main
from rafmcli.io import reader

EXPLORE = os.environ.get("RAFM_HYPOTHESIS") == "explore"
SETTINGS = settings(max_examples=2000 if EXPLORE else 80, derandomize=not EXPLORE, deadline=None,
                    database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                          HealthCheck.too_slow])
COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}

blanks = st.text(alphabet=" \t\x0b\x0c", min_size=1, max_size=3)
maybe_blanks = st.text(alphabet=" \t\x0b\x0c", max_size=2)
line_end = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def numbers(draw):
    """Decimal numbers within Clinger's exact range (<= 12 digits, |exp10| <= 22)."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.text(alphabet="0123456789", max_size=6))
    frac = draw(st.none() | st.text(alphabet="0123456789", max_size=6))
    if not whole and not frac:
        whole = "0"
    text = sign + whole + ("" if frac is None else "." + frac)
    if draw(st.booleans()):
        text += draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "+", "-"])) + str(draw(st.integers(0, 9)))
    return text


indices = st.one_of(st.integers(0, 12), st.integers(0, 2**31 - 1)).map(str) | st.integers(0, 99).map(lambda i: f"0{i}")
features = st.tuples(indices, st.none() | st.just("1") | numbers()).map(
    lambda f: f[0] if f[1] is None else f"{f[0]}:{f[1]}")
ffm_fields = st.one_of(st.just(None), st.integers(0, 4), st.sampled_from([MAX_FIELD, MAX_FIELD + 1]))


@st.composite
def ffm_features(draw, consistent):
    """``field:idx:value``; with ``consistent`` every index has one field (idx % 3),
    else a drawn one may clash with the index's field elsewhere or be too large."""
    idx = draw(indices)
    field = None if consistent else draw(ffm_fields)
    field = int(idx) % 3 if field is None else field
    return f"{field}:{idx}:{draw(st.just('1') | numbers())}"


comments = st.text(alphabet="abc 1:2#\t", max_size=8).map(lambda t: "#" + t)


@st.composite
def lines(draw, kind="svm"):
    """One line of a file of ``kind``: svm, ffm (one field per index) or ffm-any."""
    tokens = features if kind == "svm" else ffm_features(kind == "ffm")
    kind = draw(st.sampled_from(["row", "row", "row", "comment", "blank"]))
    if kind == "blank":
        return draw(maybe_blanks)
    if kind == "comment":
        return draw(maybe_blanks) + draw(comments)
    parts = [draw(maybe_blanks), draw(numbers())]
    for feature in draw(st.lists(tokens, max_size=8)):
        parts += [draw(blanks), feature]
    parts.append(draw(maybe_blanks))
    if draw(st.booleans()):
        parts.append(draw(comments))
    return "".join(parts)


@st.composite
def texts(draw, kinds=("svm", "svm", "ffm")):
    """A file's bytes (valid unless of kind ffm-any): lines with random line
    ends, maybe a BOM, maybe no final line end."""
    kind = draw(st.sampled_from(kinds))
    body = "".join(line + draw(line_end) for line in draw(st.lists(lines(kind), max_size=25)))
    if body and draw(st.booleans()):
        body = body.rstrip("\r\n")
    return (("\ufeff" if draw(st.booleans()) else "") + body).encode()


def parse_with_blocks(path, block):
    """Blocks of ``block`` bytes, cut into parts of about a third of a block."""
    saved = reader.BLOCK_BYTES, reader.PART_BYTES
    reader.BLOCK_BYTES, reader.PART_BYTES = block, max(1, block // 3)
    try:
        return reader.parse_file(str(path))
    finally:
        reader.BLOCK_BYTES, reader.PART_BYTES = saved


@SETTINGS
@given(text=texts(), ext=st.sampled_from(list(COMPRESS)), block=st.sampled_from([1, 2, 3, 7, 64, 1 << 20]))
def test_valid_files_read_as_the_plain_reader_reads_them(tmp_path, text, ext, block):
    path = tmp_path / ("f.libfm" + ext)
    path.write_bytes(COMPRESS[ext](text))
    data = parse_with_blocks(path, block)
    labels, rows, repeats, fields = read_plain_fields(text)
    np.testing.assert_array_equal(data.labels, labels)
    assert csr_rows(data) == rows
    assert data.rows_with_repeats == repeats
    ids, counts = np.unique([i for row in rows for i, _ in row], return_counts=True)
    np.testing.assert_array_equal(data.feature_ids, ids)
    np.testing.assert_array_equal(data.counts, counts)
    assert (data.values is None) == all(v == 1 for row in rows for _, v in row)
    assert (data.feature_fields is None) == (fields is None)
    if fields is not None:
        assert dict(zip(data.feature_ids.tolist(), data.feature_fields.tolist())) == fields


edits = st.tuples(st.sampled_from(["replace", "insert", "delete", "truncate"]), st.floats(0, 1),
                  st.sampled_from(list(b"0123456789:#.-+eE \t\n\r") + [0, 0x1b, 0xff, ord("x")]))


def damage(data, changes):
    data = bytearray(data)
    for kind, where, byte in changes:
        at = int(where * len(data))
        if kind == "insert":
            data[at:at] = bytes([byte])
        elif not data:
            continue
        elif kind == "replace":
            data[min(at, len(data) - 1)] = byte
        elif kind == "delete":
            del data[min(at, len(data) - 1)]
        else:
            del data[at:]
    return bytes(data)


@SETTINGS
@given(text=texts(("svm", "svm", "ffm-any")), changes=st.lists(edits, min_size=1, max_size=3))
def test_damaged_files_read_or_fail_on_the_right_line(tmp_path, text, changes):
    """Damaged libSVM files, and libFFM files whose fields may clash (an index
    in two fields, a field too large) or that damage turns into mixed files."""
    bad = damage(text, changes)
    path = tmp_path / "damaged.libfm"
    path.write_bytes(bad)
    result = CliRunner().invoke(main, ["stats", "--json", "--no-cache", str(path)])
    try:
        labels, rows, repeats, _ = read_plain_fields(bad)
    except PlainError as exc:
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"Error: {path}:{exc.line}: "), result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr[:-1].isprintable()
        return
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["files"][0]
    assert (report["rows"], report["nonzeros"], report["rows_with_repeats"]) == (
        len(labels), sum(map(len, rows)), repeats)


@SETTINGS
@given(text=texts(), ext=st.sampled_from([".gz", ".bz2", ".xz"]), changes=st.lists(edits, min_size=1, max_size=2))
def test_damaged_compressed_files_fail_cleanly(tmp_path, text, ext, changes):
    path = tmp_path / ("damaged.libfm" + ext)
    path.write_bytes(damage(COMPRESS[ext](text), changes))
    result = CliRunner().invoke(main, ["stats", "--no-cache", str(path)])
    assert result.exit_code in (0, 2), result.output  # an uncaught exception would be 1
    if result.exit_code == 2:
        assert result.stderr.startswith((f"Error: {path}: cannot decompress: ", f"Error: {path}:")), result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr[:-1].isprintable()
