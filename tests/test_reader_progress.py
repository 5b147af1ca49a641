"""The reader's progress bar (tqdm, disable=None: on a terminal only) is not even
imported when standard error is a pipe or a file; on a terminal it is made."""

import os
import pty
import subprocess
import sys

CODE = r"""
import sys
from rafmcli.io import reader
reader.PROGRESS_MIN_BYTES = 1
reader.read_dataset(sys.argv[1], use_cache=False, progress=True)
print("tqdm" in sys.modules)
"""


def test_tqdm_is_imported_for_a_terminal_only(tmp_path):
    data = tmp_path / "f.libfm"
    data.write_text("1 3:1\n" * 100)
    piped = subprocess.run([sys.executable, "-c", CODE, str(data)], capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.strip() == "False" and piped.stderr == ""
    master, slave = pty.openpty()
    try:
        shown = subprocess.run([sys.executable, "-c", CODE, str(data)], stdout=subprocess.PIPE, stderr=slave,
                               text=True, timeout=300)
    finally:
        os.close(slave)
        os.close(master)
    assert shown.returncode == 0 and shown.stdout.strip() == "True"
