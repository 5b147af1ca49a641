"""The --meta group file reader: libFM's format, strict errors, the extra group."""

import numpy as np
import pytest

from rafmcli.errors import InputError
from rafmcli.io.groups import read_groups, single_group


def write(tmp_path, data):
    path = tmp_path / "groups.txt"
    path.write_bytes(data)
    return str(path)


def test_line_n_is_feature_n(tmp_path):
    groups = read_groups(write(tmp_path, b"0\n0\n1\n2\n1\n"))
    assert groups.of_id.tolist() == [0, 0, 1, 2, 1]
    assert groups.n_named == 3


def test_crlf_bom_spaces_and_trailing_blank_lines(tmp_path):
    groups = read_groups(write(tmp_path, b"\xef\xbb\xbf1\r\n 0 \r\n1\r\n\r\n\n"))
    assert groups.of_id.tolist() == [1, 0, 1]
    assert groups.n_named == 2


def test_features_beyond_the_file_form_one_extra_group(tmp_path):
    groups = read_groups(write(tmp_path, b"0\n1\n1\n"))
    assigned = groups.assign(np.array([2, 0, 7, 3, 1]))
    assert assigned.group.tolist() == [1, 0, 2, 2, 1]
    assert (assigned.n_groups, assigned.beyond) == (3, 2)
    assert assigned.sizes().tolist() == [1, 2, 2]
    inside = groups.assign(np.array([0, 2]))
    assert (inside.n_groups, inside.beyond) == (2, 0)


def test_empty_groups_keep_their_numbers(tmp_path):
    groups = read_groups(write(tmp_path, b"0\n3\n3\n0\n"))
    assert groups.n_named == 4
    assert groups.assign(np.arange(4)).sizes().tolist() == [2, 0, 0, 2]


def test_single_group():
    assigned = single_group(4)
    assert assigned.group.tolist() == [0, 0, 0, 0] and assigned.n_groups == 1


@pytest.mark.parametrize("data,line,what,token", [
    (b"0\n\n1\n", 2, "expected a group id", "empty line"),
    (b"0\n1\nx\n", 3, "not a non-negative integer", "x"),
    (b"0\n-1\n", 2, "not a non-negative integer", "-1"),
    (b"0\n1.0\n", 2, "not a non-negative integer", "1.0"),
    (b"0\n1 2\n1\n", 2, "expected one group id", "1 2"),
    (b"0\n3\n1\n", 2, "group ids run from 0 to 2 in a file of 3 lines", "3"),
    (b"0\n99999999999999999999999\n", 2, "group ids run from 0 to 1", "99999999999999999999999"),
])
def test_bad_lines_name_file_line_and_token(tmp_path, data, line, what, token):
    path = write(tmp_path, data)
    with pytest.raises(InputError) as err:
        read_groups(path)
    assert err.value.exit_code == 2
    assert err.value.message.startswith(f"{path}:{line}: {what}")
    assert err.value.message.endswith(f"({token})")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot open"):
        read_groups(str(tmp_path / "absent.txt"))


def test_matches_a_plain_reader(tmp_path):
    ids = np.random.default_rng(0).integers(0, 40, 5000)
    path = write(tmp_path, "".join(f"{g}\n" for g in ids).encode())
    with open(path) as fh:
        plain = [int(line) for line in fh]
    assert read_groups(path).of_id.tolist() == plain
