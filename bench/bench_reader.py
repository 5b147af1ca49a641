"""Reader benchmark: whole-command `rafm stats` speed, cached re-open, peak memory.

    python bench/bench_reader.py [--rows 2000000] [--repeats 3] [--baseline DIR] [--ffm]

Writes bench/data/zipf13-<rows>.libfm once: 20 distinct ids a row drawn from
Zipf(1.3) over 20M ids (``python -m rafmcli.synth zipf --vocab 20000000
--exponent 1.3``), 282 MB for 2M rows. Every figure is measured in fresh
processes (``--repeats`` of them; the median and, in brackets, the range):

* ``rafm stats --no-cache FILE`` as a whole command (start-up, parsing,
  counting, histograms, levels, printing): wall seconds, MB/s, peak RSS;
* the parse alone in-process (``read_dataset``, kernels already loaded), and
  its peak memory above the process's size before reading against the bytes
  of the arrays it returns (the target is below 2x);
* what ``rafm stats --no-cache`` does in-process (``count_file``: the parse
  counted block by block, no CSR arrays; trees before issue 11's stop 18: -);
* ``rafm stats FILE`` and ``read_dataset`` from the cache (entry written
  once beforehand).

``--baseline DIR`` runs the same commands with another rafm checkout (say
``git archive main | tar -x -C DIR``) side by side, for before/after tables.
``--ffm`` adds the parse of the file's libFFM twin (bench/data/zipf13-<rows>.ffm,
each token ``field:index:1`` with field = index mod 39, written once by awk):
fields parsed and checked, one field per index, in a hash table.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import click

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PARSE = r"""
import json, sys, time
from rafmcli.io import reader

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

path, use_cache, warm = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
if sys.argv[2] == "count":  # what rafm stats --no-cache does (a tree without count_file: nothing)
    if not hasattr(reader, "count_file"):
        print("{}")
        sys.exit()
    reader.count_file(warm, use_cache=False)
    t = time.perf_counter()
    reader.count_file(path, use_cache=False)
    print(json.dumps({"seconds": time.perf_counter() - t}))
    sys.exit()
reader.read_dataset(warm, use_cache=False)   # load compiled kernels first
base = rss("VmRSS")
t = time.perf_counter()
data = reader.read_dataset(path, use_cache=use_cache)
seconds = time.perf_counter() - t
arrays = sum(a.nbytes for a in (data.labels, data.indptr, data.indices, data.values,
                                data.feature_ids, data.counts) if a is not None)
print(json.dumps({"seconds": seconds, "peak": rss("VmHWM") - base, "arrays": arrays,
                  "rows": data.n_rows, "nnz": data.nnz, "features": int(data.feature_ids.shape[0])}))
"""


def data_file(rows):
    path = os.path.join(HERE, "data", f"zipf13-{rows}.libfm")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([sys.executable, "-m", "rafmcli.synth", "zipf", path, "--rows", str(rows), "--nnz", "20",
                        "--vocab", "20000000", "--exponent", "1.3", "--task", "c", "--seed", "1"],
                       check=True, env=dict(os.environ, PYTHONPATH=ROOT))
    return path


def ffm_file(path):
    """The libFFM twin of ``path``: field = index mod 39 for every token."""
    twin = path[:-len(".libfm")] + ".ffm"
    if not os.path.exists(twin):
        script = '{ line = $1; for (i = 2; i <= NF; i++) { split($i, a, ":"); line = line " " (a[1] % 39) ":" $i } ' \
                 'print line }'
        with open(twin + ".tmp", "w") as out:
            subprocess.run(["awk", script, path], stdout=out, check=True)
        os.replace(twin + ".tmp", twin)
    return twin


def timed(args, env):
    """(wall seconds, peak RSS bytes, stdout) of one process.

    It runs in the tree of ``env``'s PYTHONPATH: ``python -m`` and ``-c`` put the working
    directory first on sys.path, so from another checkout's root a baseline would import
    that checkout's rafmcli instead of its own."""
    tree = env.get("PYTHONPATH")
    t = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=tree if tree and os.path.isdir(tree) else None)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{err.decode()}")
    return time.perf_counter() - t, usage.ru_maxrss * 1024, out


def spread(values, fmt):
    s = sorted(values)
    return f"{fmt(statistics.median(s))} ({fmt(s[0])}-{fmt(s[-1])})"


@click.command()
@click.option("--rows", default=2_000_000, show_default=True)
@click.option("--repeats", default=3, show_default=True, help="fresh processes per figure")
@click.option("--baseline", type=click.Path(file_okay=False, exists=True),
              help="another rafm checkout to run side by side")
@click.option("--ffm", is_flag=True, help="also parse the file's libFFM twin (this checkout only)")
def main(rows, repeats, baseline, ffm):
    path = data_file(rows)
    twin = ffm_file(path) if ffm else None
    mb = os.path.getsize(path) / 1e6
    warm = os.path.join(HERE, "data", "warm.libfm")
    with open(warm, "w") as fh:
        fh.write("1 1:1 2:0.5\n")
    trees = [("rafm", ROOT)] + ([("baseline", os.path.abspath(baseline))] if baseline else [])
    results = {}
    with tempfile.TemporaryDirectory() as cache_dir:
        for name, tree in trees:
            env = dict(os.environ, PYTHONPATH=tree, RAFM_CACHE_DIR=os.path.join(cache_dir, name))
            rafm = [sys.executable, "-m", "rafmcli"]
            timed(rafm + ["stats", "--no-cache", warm], env)  # compile or load the kernels once
            r = results[name] = {}
            runs = [timed(rafm + ["stats", "--no-cache", path], env) for _ in range(repeats)]
            r["stats"] = [w for w, _, _ in runs]
            r["stats_rss"] = [m for _, m, _ in runs]
            parses = [json.loads(timed([sys.executable, "-c", PARSE, path, "0", warm], env)[2]) for _ in range(repeats)]
            r["parse"] = [p["seconds"] for p in parses]
            r["ratio"] = [p["peak"] / p["arrays"] for p in parses]
            r["info"] = parses[0]
            counts = [json.loads(timed([sys.executable, "-c", PARSE, path, "count", warm], env)[2])
                      for _ in range(repeats)]
            if counts[0]:
                r["count"] = [c["seconds"] for c in counts]
            timed(rafm + ["stats", path], env)  # writes the cache entry
            runs = [timed(rafm + ["stats", path], env) for _ in range(repeats)]
            r["cached"] = [w for w, _, _ in runs]
            r["cached_rss"] = [m for _, m, _ in runs]
            r["reopen"] = [json.loads(timed([sys.executable, "-c", PARSE, path, "1", warm], env)[2])["seconds"]
                           for _ in range(repeats)]
            if twin and name == "rafm":
                r["parse_ffm"] = [json.loads(timed([sys.executable, "-c", PARSE, twin, "0", warm], env)[2])["seconds"]
                                  for _ in range(repeats)]
    info = results["rafm"]["info"]
    print(f"file: {path}  {mb:.0f} MB, {info['rows']:,} rows, {info['nnz']:,} non-zeros, "
          f"{info['features']:,} features; arrays {info['arrays'] / 1e6:.0f} MB")
    print(f"{repeats} fresh processes a figure: median (fastest-slowest); {os.cpu_count()} cores")
    rows_out = [
        ("rafm stats --no-cache, whole command (MB/s)", "stats", lambda s: mb / s, ">= 200"),
        ("  wall seconds", "stats", lambda s: s, ""),
        ("  peak RSS (MB)", "stats_rss", lambda b: b / 1e6, ""),
        ("parse alone, in-process (MB/s)", "parse", lambda s: mb / s, ""),
        ("  peak memory / arrays", "ratio", lambda x: x, "< 2"),
        ("stats' counting pass alone, in-process (MB/s)", "count", lambda s: mb / s, ""),
        ("rafm stats from the cache, whole command (s)", "cached", lambda s: s, ""),
        ("  peak RSS (MB)", "cached_rss", lambda b: b / 1e6, ""),
        ("cached re-open, in-process (s)", "reopen", lambda s: s, "< 1"),
    ]
    if twin:
        rows_out.append((f"parse alone, libFFM twin of {os.path.getsize(twin) / 1e6:.0f} MB (MB/s)", "parse_ffm",
                         lambda s: os.path.getsize(twin) / 1e6 / s, ""))
    head = f"{'measure':<46}" + "".join(f"{name:>26}" for name, _ in trees) + "  target"
    print(head)
    for label, key, conv, target in rows_out:
        cells = "".join(f"{spread([conv(v) for v in results[name][key]], lambda x: f'{x:,.2f}'):>26}"
                        if key in results[name] else f"{'-':>26}" for name, _ in trees)
        print(f"{label:<46}{cells}  {target}")


if __name__ == "__main__":
    main()
