"""Peak memory while parsing (issue 11 target 2: below twice the arrays): the
per-block scratch arrays live in small pages and are gone before counting."""

import time
import weakref

import numpy as np
import pytest

from rafmcli.io import reader


def test_scratch_is_in_small_pages_and_freed_before_counting(tmp_path, monkeypatch):
    made, alive = [], []
    small_pages, feature_counts = reader.small_pages, reader.feature_counts

    def tracked(n, dtype):
        array = small_pages(n, dtype)
        made.append(weakref.ref(array))
        return array

    def counting(*args, **kwargs):
        waited = time.monotonic()  # a pool thread drops its last work item just after finishing it
        while any(ref() is not None for ref in made) and time.monotonic() - waited < 2:
            time.sleep(0.01)
        alive.append(sum(ref() is not None for ref in made))
        return feature_counts(*args, **kwargs)

    monkeypatch.setattr(reader, "small_pages", tracked)
    monkeypatch.setattr(reader, "feature_counts", counting)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 1 << 12)  # several blocks
    rng = np.random.default_rng(1)
    path = tmp_path / "d.libfm"
    path.write_text("".join(f"1 {' '.join(f'{i}:1' for i in rng.choice(500, 5, replace=False))}\n"
                            for _ in range(2000)))
    data = reader.read_dataset(str(path), use_cache=False)
    assert data.n_rows == 2000 and data.nnz == 10_000
    assert made and alive == [0]


def test_small_pages_are_never_huge():
    """MADV_NOHUGEPAGE: the kernel backs each 4 KiB page written, not a 2 MiB page per region."""
    array = reader.small_pages(8 << 20, np.uint8)
    array[::4096] = 1
    start = array.ctypes.data
    with open("/proc/self/smaps") as fh:
        lines = fh.read().splitlines()
    for k, line in enumerate(lines):
        fields = line.split()
        if "-" in fields[0] and all(c in "0123456789abcdef-" for c in fields[0]):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= start < hi:
                block = lines[k + 1:k + 30]
                break
    else:
        pytest.fail("no mapping holds the array")
    eligible = [ln for ln in block if ln.startswith("THPeligible:")]
    if not eligible:
        pytest.skip("this kernel reports no THPeligible")
    assert eligible[0].split()[1] == "0"
