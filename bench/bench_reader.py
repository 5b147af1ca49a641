"""Reader benchmark: first-parse speed, cached re-open time, peak memory.

    python bench/bench_reader.py [--rows 2000000]

Writes bench/data/zipf-<rows>.libfm once (20 non-zeros a row, Zipf ids,
``python -m rafmcli.synth zipf``), then measures each figure in a fresh
process and prints a table. Peak memory is the process's high-water mark
(VmHWM) minus its resident size just before reading, against the bytes of
the arrays the reader returns.
"""

import json
import os
import subprocess
import sys
import tempfile

import click

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time
import numpy as np
from rafmcli.io import parse_kernel, reader

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

path, use_cache, warm = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
reader.parse_file(warm)                      # load compiled kernels first
base = rss("VmRSS")
t = time.perf_counter()
data = reader.read_dataset(path, use_cache=use_cache)
seconds = time.perf_counter() - t
arrays = sum(a.nbytes for a in (data.labels, data.indptr, data.indices, data.values,
                                data.feature_ids, data.counts) if a is not None)
print(json.dumps({"seconds": seconds, "peak": rss("VmHWM") - base, "arrays": arrays,
                  "rows": data.n_rows, "nnz": data.nnz}))
"""


def run_child(path, use_cache, warm, env):
    out = subprocess.run([sys.executable, "-c", CHILD, path, "1" if use_cache else "0", warm],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


@click.command()
@click.option("--rows", default=2_000_000, show_default=True)
def main(rows):
    data_dir = os.path.join(HERE, "data")
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, f"zipf-{rows}.libfm")
    if not os.path.exists(path):
        subprocess.run([sys.executable, "-m", "rafmcli.synth", "zipf", path, "--rows", str(rows),
                        "--nnz", "20", "--vocab", "1000000", "--task", "c"], check=True)
    size = os.path.getsize(path)
    warm = os.path.join(data_dir, "warm.libfm")
    with open(warm, "w") as fh:
        fh.write("1 1:1 2:0.5\n")
    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, RAFM_CACHE_DIR=cache_dir)
        nocache = run_child(path, False, warm, env)
        first = run_child(path, True, warm, env)
        again = run_child(path, True, warm, env)
    mb = size / 1e6
    print(f"file: {path}  {mb:.0f} MB, {nocache['rows']:,} rows, {nocache['nnz']:,} non-zeros")
    print(f"{'measure':<38}{'value':>14}  target")
    print(f"{'first parse, --no-cache (MB/s)':<38}{mb / nocache['seconds']:>14.1f}  >= 100")
    print(f"{'first parse + cache write (MB/s)':<38}{mb / first['seconds']:>14.1f}")
    print(f"{'cached re-open (s)':<38}{again['seconds']:>14.3f}  < 1")
    print(f"{'final arrays (MB)':<38}{nocache['arrays'] / 1e6:>14.1f}")
    print(f"{'peak memory while parsing (MB)':<38}{nocache['peak'] / 1e6:>14.1f}  < 2x arrays")
    print(f"{'peak / arrays':<38}{nocache['peak'] / nocache['arrays']:>14.2f}  < 2")


if __name__ == "__main__":
    main()
