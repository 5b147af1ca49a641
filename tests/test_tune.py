"""`rafm tune`: the search space, successive halving, determinism, and the command end to end."""

import math
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli import ranksets
from rafmcli.cli import main
from rafmcli.io.reader import read_dataset
from rafmcli.model import files as model_file
from rafmcli.options import DEFAULTS, Options
from rafmcli.predict import predict_dataset
from rafmcli.solvers import tune as T


def run(args):
    return CliRunner().invoke(main, args)


def test_configurations_cover_the_grids_evenly_and_repeat_for_a_seed():
    base = Options(task="c", method="adam", learn_rate=0.001)
    sets = [(4, 16), (8, 32), (4, 16, 64)]
    a = T.sample_configurations(base, "rafm", sets, 24, np.random.default_rng(5))
    b = T.sample_configurations(base, "rafm", sets, 24, np.random.default_rng(5))
    assert a == b
    assert a != T.sample_configurations(base, "rafm", sets, 24, np.random.default_rng(6))
    regs = [o.reg_factors[0] for o in a]
    assert set(regs) == set(T.L2_GRID) and max(map(regs.count, set(regs))) <= 2  # 24 draws over 12 values
    assert {o.ranks for o in a} == set(sets) and all(regs.count(r) >= 1 for r in T.L2_GRID)
    assert {o.learn_rate for o in a} == {0.001 * s for s in T.LR_STEPS}
    assert {o.variant for o in a} == set(T.RAFM_VARIANTS)
    for o in a:  # rho_d only where the variant uses it (rafm train refuses it elsewhere)
        assert (o.dependent_rate is not None) == (o.variant == "paper")
    fm = T.sample_configurations(base, "fm", [(8,), (16,)], 6, np.random.default_rng(5))
    assert all(o.variant == DEFAULTS.variant and o.dependent_rate is None for o in fm)


def test_rank_candidates_follow_the_histogram():
    rng = np.random.default_rng(0)
    counts = np.concatenate([rng.integers(1, 20, 5000), rng.integers(200, 3000, 40)])
    top = ranksets.top_rank(counts, 100_000)
    assert top == 256  # 40 features reach 256 (not 512 for all 40); sqrt(100000) = 316
    assert ranksets.top_rank(counts, 3000) == 32  # sqrt(3000) = 54.8
    sets = ranksets.candidates(counts, 100_000, "rafm")
    assert all(s[-1] <= top and all(b in (4 * a, 16 * a) for a, b in zip(s, s[1:])) for s in sets)
    for s in sets:  # every upper level holds enough features of its own
        assert np.all(ranksets.level_sizes(counts, s)[1:] >= ranksets.MIN_TOP_FEATURES)
    assert ranksets.candidates(counts, 100_000, "fm") == [(d,) for d in (4, 8, 16, 32, 64, 128, 256)]


def test_a_given_top_rank_is_every_models_top():
    """--top-rank: FM gets that rank, RaFM every set ending in it whose levels hold features."""
    rng = np.random.default_rng(0)
    counts = np.concatenate([rng.integers(1, 20, 5000), rng.integers(200, 3000, 40)])
    assert ranksets.candidates(counts, 100_000, "fm", top=32) == [(32,)]
    sets = ranksets.candidates(counts, 100_000, "rafm", top=32)
    assert sorted(sets) == sorted([(4, 32), (8, 32), (16, 32), (4, 8, 32), (4, 16, 32), (8, 16, 32)])
    assert ranksets.choose(counts, 100_000, "rafm", top=32).ranks == (8, 32)
    assert ranksets.choose(counts, 100_000, "fm", top=32).ranks == (32,)


def test_tune_top_rank_end_to_end(sample, tmp_path):
    """Every trial of `rafm tune --top-rank 16` tops out at rank 16, and RaFM searches lower levels."""
    table = tmp_path / "t.tsv"
    result = run(["tune", "--task", "r", "--train", sample("regression.train"), "--validation",
                  sample("regression.validation"), "--models", "fm,rafm", "--trials", "4", "--method", "mcmc",
                  "--iter", "4", "--top-rank", "16", "--threads", "1", "--quiet", "--table", str(table)])
    assert result.exit_code == 0, result.output
    rows = [line.split("\t") for line in table.read_text().splitlines()[1:]]
    ranks = {(r[1], r[2]) for r in rows}
    assert {k for m, k in ranks if m == "fm"} == {"16"}
    assert all(k.split(",")[-1] == "16" for m, k in ranks)
    assert len({k for m, k in ranks if m == "rafm"}) > 1


def test_concat_keeps_rows_and_counts(sample):
    a = read_dataset(sample("regression.train"))
    b = read_dataset(sample("regression.validation"))
    both = T.concat(a, b)
    assert both.n_rows == a.n_rows + b.n_rows
    np.testing.assert_array_equal(both.labels, np.concatenate([a.labels, b.labels]))
    r = a.n_rows + 5
    np.testing.assert_array_equal(both.indices[both.indptr[r]:both.indptr[r + 1]],
                                  b.indices[b.indptr[5]:b.indptr[6]])
    ids, counts = np.unique(np.concatenate([a.indices, b.indices]), return_counts=True)
    np.testing.assert_array_equal(both.feature_ids, ids)
    np.testing.assert_array_equal(both.counts, counts)


def tune_args(sample, tmp_path, tag, *extra):
    return ["tune", "--task", "r", "--train", sample("regression.train"), "--validation",
            sample("regression.validation"), "--trials", "3", "--iter", "6", "--table", str(tmp_path / f"{tag}.tsv"),
            *extra]


def test_threads_0_is_every_available_core(sample, tmp_path, monkeypatch):
    """`rafm tune --threads 0` runs a worker per available core (threads.available_cores: the
    affinity within a cgroup's quota), as `rafm train --threads 0` does; -1 is refused."""
    from rafmcli import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 1)
    result = run(["tune", "--task", "r", "--train", sample("regression.train"), "--validation",
                  sample("regression.validation"), "--trials", "1", "--iter", "1", "--threads", "0",
                  "--table", str(tmp_path / "t.tsv")])
    assert result.exit_code == 0, result.output
    assert "; 1 worker process\n" in result.output
    refused = run(["tune", "--task", "r", "--train", sample("regression.train"), "--threads", "-1"])
    assert refused.exit_code == 2 and "-1 is not in the range x>=0" in refused.output
    from rafmcli.cli.tune import _workers

    monkeypatch.setattr(threads, "available_cores", lambda: 8)  # no more workers than a bracket's trials
    assert [_workers(64, 1, ["fm"]), _workers(64, 2, ["fm", "rafm"]), _workers(0, 3, ["fm"]), _workers(0, None, ["fm"]),
            _workers(2, 27, ["fm"])] == [1, 4, 3, 8, 2]


def table_without_seconds(path):
    lines = [line.split("\t") for line in path.read_text().splitlines()]
    col = lines[0].index("seconds")
    return [row[:col] + row[col + 1:] for row in lines]


def test_tune_end_to_end(sample, tmp_path, threads_on_small_data):
    """Leaderboard, table, winner's command line, saved model and test predictions agree, and the
    result does not depend on the number of worker processes; the command line gives the model on
    any machine (no Hogwild: even where the rows would pay for more threads)."""
    saved, out = tmp_path / "best.rafm", tmp_path / "pred.txt"
    one = run(tune_args(sample, tmp_path, "one", "--threads", "1", "--quiet"))
    assert one.exit_code == 0, one.output
    two = run(tune_args(sample, tmp_path, "two", "--threads", "2", "--save-model", str(saved),
                        "--test", sample("regression.test"), "--out", str(out)))
    assert two.exit_code == 0, two.output
    assert "rung 1/" in two.stderr and "best so far" in two.stderr  # progress on stderr
    assert one.stderr == "" and "rafm tune" not in two.stdout  # --quiet is quiet; stdout holds results
    assert "trained in 2 worker processes" in two.stderr  # trials ran in two processes at once
    assert (tmp_path / "two.tsv").read_text().splitlines()[0].split("\t") == [
        "trial", "model", "ranks", "l2", "learn_rate", "variant", "dependent_rate", "init_stdev", "dependent_weight",
        "epochs", "best_epoch", "valid_rmse", "params", "seconds", "status"]
    assert one.stdout.splitlines()[0].split() == ["trial", "model", "ranks", "L2", "lr", "variant", "rho_d", "init",
                                                  "c", "best", "ep", "valid", "rmse", "params", "seconds", "status"]
    assert table_without_seconds(tmp_path / "one.tsv") == table_without_seconds(tmp_path / "two.tsv")
    table = table_without_seconds(tmp_path / "two.tsv")
    header, rows = table[0], table[1:]
    assert header[:3] == ["trial", "model", "ranks"] and "valid_rmse" in header
    assert len(rows) == 9 and sorted(r[1] for r in rows) == ["difacto"] * 3 + ["fm"] * 3 + ["rafm"] * 3
    metric = [float(r[header.index("valid_rmse")]) for r in rows]
    assert metric == sorted(metric)  # ranked, best first
    # the winner: as the leaderboard says, as its command line trains it, as saved
    command = next(line for line in one.stdout.splitlines() if line.startswith("rafm train "))
    assert f"validation rmse {metric[0]:.4f}" in one.stdout
    model = model_file.load(str(saved))
    assert model.info["training"]["tune"]["validation"] == pytest.approx(metric[0], abs=1e-6)
    assert model.info["training"]["validation"]["rmse"] == pytest.approx(metric[0], abs=1e-6)
    again = tmp_path / "again.rafm"
    result = run(shlex.split(command)[1:] + ["--save-model", str(again), "--quiet"])
    assert result.exit_code == 0, result.output
    test = read_dataset(sample("regression.test"))
    np.testing.assert_array_equal(predict_dataset(model_file.load(str(again)), test)[0],
                                  predict_dataset(model, test)[0])
    np.testing.assert_allclose(np.loadtxt(out), predict_dataset(model, test)[0], rtol=1e-8)


def test_refit_trains_on_both_for_the_best_epoch_count(sample, tmp_path):
    saved = tmp_path / "refit.rafm"
    result = run(["tune", "--task", "c", "--train", sample("classification.train"), "--models", "rafm",
                  "--trials", "2", "--iter", "4", "--threads", "1", "--refit", "--save-model", str(saved),
                  "--metric", "auc", "--quiet"])
    assert result.exit_code == 0, result.output
    model = model_file.load(str(saved))
    assert model.info["training"]["tune"]["refit"] and model.info["training"]["tune"]["metric"] == "auc"
    assert model.info["training"]["epochs"] == model.info["options"]["iters"] >= 1
    full = read_dataset(sample("classification.train"))
    assert set(model.feature_ids.tolist()) == set(full.feature_ids.tolist())  # held-out rows included


@pytest.mark.parametrize("args,words", [
    (["--refit"], "--refit retrains the winner"),
    (["--metric", "auc"], "not a regression metric"),
    (["--models", "fm,ffm"], "expected distinct models"),
    (["--models", "fm,fm"], "expected distinct models"),
    (["--test", "x"], "--test needs --out"),
    (["--trials", "0"], "--trials"),
])
def test_bad_options(sample, args, words):
    result = run(["tune", "--task", "r", "--train", sample("regression.train"), *args])
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_budget_stops_the_search(sample):
    tr = read_dataset(sample("regression.train"))
    va = read_dataset(sample("regression.validation"))
    settings = T.Settings(task="r", models=("fm",), trials=None, budget=1e-9, metric=None, method="adagrad",
                          iters=5, early_stop=5, seed=1, workers=1)
    search = T.Search(settings, tr, va)
    try:
        search.run()
    finally:
        search.close()
    assert search.interrupted == "budget" and search.best() is None


def test_ctrl_c_reports_the_best_so_far_and_writes_nothing(sample, tmp_path):
    table = tmp_path / "t.tsv"
    proc = subprocess.Popen([sys.executable, "-m", "rafmcli", "tune", "--task", "r", "--train",
                             sample("regression.train"), "--trials", "12", "--iter", "200", "--early-stop", "200",
                             "--threads", "1", "--table", str(table)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    seen = ""
    while "best so far" not in seen and time.time() < deadline:
        seen += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "best: " in stdout and "rafm train --task r" in stdout
    assert "interrupted; nothing written" in stderr
    assert os.listdir(tmp_path) == []
    assert not math.isnan(float(stdout.split("validation rmse ")[1].split()[0]))


def children(pid):
    """{pid: command line} of ``pid``'s children (Linux /proc)."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            if parent == pid:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    found[int(entry)] = fh.read().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def signal_masks(pid):
    """{"SigBlk": mask, "SigIgn": mask, "SigCgt": mask} of a process (Linux /proc; bit N - 1 is
    signal N); {} once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return {ln.split(":")[0]: int(ln.split()[1], 16) for ln in fh if ln[:6] in ("SigBlk", "SigIgn", "SigCgt")}
    except (FileNotFoundError, ProcessLookupError):
        return {}


def bits(*signums):
    return sum(1 << (s - 1) for s in signums)


GROUP = bits(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def tune_with_workers(sample, tmp_path, session=True, ignored=()):
    """A ``rafm tune`` process in a session of its own (or, not ``session``, a process group of
    its own in this session: a job a shell could stop), started with the ``ignored`` signals
    ignored, once its two workers have started (they ignore SIGINT, SIGTERM and SIGHUP, and
    have none of them blocked): (process, [worker pids], the resource tracker's pid)."""
    def start():
        os.setsid() if session else os.setpgrp()
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-m", "rafmcli", "tune", "--task", "r", "--train",
                             sample("regression.train"), "--trials", "12", "--iter", "200", "--early-stop", "200",
                             "--threads", "2", "--table", str(tmp_path / "t.tsv")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=start)
    seen = ""
    deadline = time.time() + 120
    while "rung 1" not in seen and time.time() < deadline:
        seen += proc.stderr.readline()

    def started():
        kids = children(proc.pid)
        workers = [pid for pid, line in kids.items() if "spawn_main" in line]
        masks = [signal_masks(pid) for pid in workers]
        ready = len(workers) == 2 and all(m and m["SigIgn"] & GROUP == GROUP and not m["SigBlk"] & GROUP
                                          for m in masks)
        return ready, kids, workers

    wait_for(lambda: started()[0], 60)
    ready, kids, workers = started()
    tracker = [pid for pid, line in kids.items() if "resource_tracker" in line]
    if not (ready and len(tracker) == 1):
        proc.kill()
        pytest.fail(f"not two workers ignoring the group's signals and one tracker: {kids}")
    return proc, workers, tracker[0]


def state(pid):
    """A process's state letter (R, S, T stopped, Z zombie...), or "gone" (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def running(pids):
    """Those of ``pids`` still running (not gone, not a zombie)."""
    return [pid for pid in pids if state(pid) not in ("gone", "Z")]


def stopped(proc, workers, stop, status):
    """Run ``stop()`` on a tune process from :func:`tune_with_workers` and wait for it: it ends
    with ``status``, says it wrote nothing, prints no traceback and leaves no worker running.
    Its stderr."""
    try:
        stop()
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == status, stderr
    assert "interrupted; nothing written" in stderr and "Traceback" not in stderr, stderr
    assert running(workers) == []
    return stderr


def wait_for(condition, seconds=30):
    """Poll ``condition()`` until it is true or ``seconds`` pass; its last value."""
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_whole_process_group_ends_tune_cleanly(sample, tmp_path, signum):
    """A hangup, Ctrl-C or ``kill -- -PGID`` reaches every process of rafm's group. It killed
    multiprocessing.Pool's workers, and one that died holding the task queue's lock left the
    parent's Pool.terminate waiting for ever; a hangup killed multiprocessing's resource tracker
    too, and its replacement printed tracebacks. The workers now ignore these signals (the
    parent stops them) and the tracker keeps SIGHUP blocked: 128 + N, nothing written, nothing
    but rafm's own lines on stderr, no worker left."""
    proc, workers, tracker = tune_with_workers(sample, tmp_path)

    def signal_the_group():
        assert signal_masks(tracker)["SigBlk"] & bits(signal.SIGHUP)
        os.killpg(proc.pid, signum)

    stderr = stopped(proc, workers, signal_the_group, 128 + signum)
    assert "resource_tracker" not in stderr, stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_worker_that_dies_ends_tune_with_one_line(sample, tmp_path):
    """A worker killed during its trial (the out-of-memory killer) was replaced silently by
    multiprocessing.Pool, and the parent waited for its lost task for ever. Now tune says
    which worker died and how, exit 1, nothing written, and stops the other worker."""
    proc, workers, _ = tune_with_workers(sample, tmp_path)
    victim = min(workers)
    try:
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    assert f"Error: worker process {victim} was killed by SIGKILL (out of memory?) before it finished its trial; " \
           "nothing written" in stderr
    assert "Traceback" not in stderr
    assert os.listdir(tmp_path) == []
    assert running(workers) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_ctrl_z_stops_the_workers_with_tune_and_continues_them(sample, tmp_path):
    """Ctrl-Z (SIGTSTP to the job's process group) reached the parent alone while the workers
    led groups of their own: they went on training. In rafm's group they stop with it and go
    on when it is continued (``fg``, ``bg``: SIGCONT), all in the kernel."""
    proc, workers, _ = tune_with_workers(sample, tmp_path, session=False)
    everyone = [proc.pid, *workers]

    def stop_continue_terminate():
        os.killpg(proc.pid, signal.SIGTSTP)
        assert wait_for(lambda: [state(pid) for pid in everyone] == ["T"] * 3), [state(pid) for pid in everyone]
        os.killpg(proc.pid, signal.SIGCONT)
        assert wait_for(lambda: all(state(pid) in "RSD" for pid in everyone)), [state(pid) for pid in everyone]
        proc.terminate()

    stopped(proc, workers, stop_continue_terminate, 143)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_workers_stop_though_rafm_was_started_ignoring_sigterm(sample, tmp_path):
    """A supervisor that starts rafm with SIGTERM ignored: spawned workers inherit that, and a
    stop by SIGTERM did nothing (the parent waited for them for ever). They are stopped with
    SIGKILL: Ctrl-C ends tune at once with nothing left running."""
    proc, workers, _ = tune_with_workers(sample, tmp_path, ignored=[signal.SIGTERM])

    def interrupt():
        assert signal_masks(proc.pid)["SigIgn"] & bits(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)

    stopped(proc, workers, interrupt, 130)


WAITS_FOR_EVER = """
import os, subprocess, sys, time
code = ("import sys, time; from rafmcli.solvers.pool import die_with; die_with(int(sys.argv[1])); "
        "print(flush=True); time.sleep(600)")
child = subprocess.Popen([sys.executable, "-c", code, str(os.getpid())], stdout=sys.stdout)
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_tune_workers_die_with_their_parent():
    """Out of the parent's group, a worker is not killed with it and ran its task to the end:
    die_with ends it with the parent."""
    parent = subprocess.Popen([sys.executable, "-c", WAITS_FOR_EVER], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    try:
        parent.stdout.readline()  # the worker has called die_with
        parent.kill()
        parent.wait()
        deadline = time.time() + 10
        while running([worker]) and time.time() < deadline:
            time.sleep(0.05)
        assert running([worker]) == []
    finally:
        if running([worker]):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.skipif(os.geteuid() != 0, reason="os.mknod of a character device needs root")
def test_outputs_are_one_transaction(sample, tmp_path):
    """--table, --save-model and --out are committed together: when one cannot be written (a
    device made in the test's folder that fails every write, as /dev/full) none is."""
    import stat

    os.mknod(tmp_path / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    (tmp_path / "m.rafm").write_bytes(b"the previous model")
    result = run(["tune", "--task", "r", "--train", sample("regression.train"), "--models", "fm", "--trials", "1",
                  "--iter", "2", "--threads", "1", "--quiet", "--table", str(tmp_path / "t.tsv"), "--save-model",
                  str(tmp_path / "m.rafm"), "--test", sample("regression.test"), "--out", str(tmp_path / "full")])
    assert result.exit_code == 2 and "full: cannot write" in result.output, result.output
    assert sorted(os.listdir(tmp_path)) == ["full", "m.rafm"]
    assert (tmp_path / "m.rafm").read_bytes() == b"the previous model"


def test_a_diverging_trial_keeps_its_best_epoch(sample, tmp_path, monkeypatch):
    """A trial that diverges after good epochs ends there with the score of its best epoch and a
    checkpoint that restores that epoch (it is not thrown away as a failure)."""
    from rafmcli.errors import DivergedError
    from rafmcli.solvers.sgd import Training

    real = Training.advance

    def two_then_diverge(self, until, *args, **kwargs):
        real(self, 2)
        raise DivergedError("diverged")

    monkeypatch.setattr(Training, "advance", two_then_diverge)
    monkeypatch.setattr(T, "_WORKER", {"folder": str(tmp_path), "train": read_dataset(sample("regression.train")),
                                       "valid": read_dataset(sample("regression.validation"))})
    opts = Options(task="r", model="fm", ranks=(4,), iters=10)
    result = T._advance((0, opts, 5, "rmse"))
    assert result["diverged"] and result["done"] and result["best_epoch"] in (1, 2)
    assert math.isfinite(result["score"]) and result["value"] == pytest.approx(result["score"])
    import pickle

    with open(tmp_path / "trial-0.pickle", "rb") as fh:
        run = pickle.load(fh)
    run.attach(T._WORKER["train"], T._WORKER["valid"])
    model, _ = run.result()
    assert model.info["training"]["validation"]["rmse"] == pytest.approx(result["value"])


def test_an_mcmc_rung_sees_the_start_of_the_full_chain(sample):
    """A trial run to a rung ranks by the running average the whole chain has at that iteration
    (same draws, the whole chain's burn-in)."""
    from rafmcli.solvers.coordinate import train

    data = read_dataset(sample("regression.train"))
    valid = read_dataset(sample("regression.validation"))
    opts = Options(task="r", model="rafm", ranks=(2, 4), method="mcmc", iters=20, init_stdev=0.1)  # burn-in 2
    chain = [row["rmse"] for row in train(data, opts, validation=valid, quiet=True, progress=False).history]
    progress, _ = T.advance_coordinate(data, valid, opts, 5, "rmse")
    assert (progress["value"], progress["best_epoch"], progress["done"]) == (chain[4], 5, False)
    assert len(set(chain)) == len(chain)  # the average moves: the rung's value is that iteration's


def test_tune_mcmc_end_to_end(sample, tmp_path):
    """`rafm tune --method mcmc`: init stdev and c searched, no learning rate or L2; the winner's
    printed `rafm train` line gives the --test predictions (the chain's average, not its kept
    samples') bit for bit."""
    out, again = tmp_path / "tuned.txt", tmp_path / "again.txt"
    result = run(["tune", "--task", "r", "--train", sample("regression.train"), "--validation",
                  sample("regression.validation"), "--models", "fm,rafm", "--method", "mcmc", "--trials", "3",
                  "--iter", "12", "--threads", "1", "--test", sample("regression.test"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[1:7]]
    assert {r[1] for r in rows} == {"fm", "rafm"} and all(r[3] == r[4] == "-" for r in rows)  # no L2, no lr
    assert len({r[7] for r in rows}) > 1  # init stdev searched
    command = next(line for line in result.stdout.splitlines() if line.startswith("rafm train "))
    assert "--method mcmc" in command and "--learn-rate" not in command and "--early-stop" not in command
    result = run(shlex.split(command)[1:] + ["--test", sample("regression.test"), "--out", str(again), "--quiet"])
    assert result.exit_code == 0, result.output
    assert out.read_text() == again.read_text()
