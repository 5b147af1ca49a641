"""Issue 8, the output side: what rafm writes, where, with which mode, and what it
leaves behind when a target, an option, a model file or a signal is hostile.

Every test runs the CLI and compares the directory before and after: names,
inodes, modes and contents (nothing left, nothing replaced). As root, special
files are made inside the test's own directory (``os.mknod``), never the
machine's /dev.
"""

import errno
import gc
import glob
import io
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile

import click
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT, child_env

from rafmcli.cli import main
from rafmcli.model import files as model_files

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="os.mknod of a character device needs root")
FAST = ["--model", "fm", "--dim", "4", "--iter", "2", "--quiet"]


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def listing(folder):
    """{name: (inode, type and mode, size, content digest)}: what 'nothing replaced' compares."""
    out = {}
    for name in sorted(os.listdir(folder)):
        st = os.lstat(os.path.join(folder, name))
        content = None
        if stat.S_ISREG(st.st_mode):
            with open(os.path.join(folder, name), "rb") as fh:
                content = hash(fh.read())
        out[name] = (st.st_ino, st.st_mode, st.st_size, content)
    return out


def error_line(result):
    """The one 'Error: ...' line of a failed command."""
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def train_args(sample, **outputs):
    args = ["train", "--task", "r", "--train", sample("regression.train"), *FAST]
    if "out" in outputs:
        args += ["--test", sample("regression.test")]
    for option, path in outputs.items():
        args += ["--" + option.replace("_", "-"), path]
    return args


def chardev(path, major, minor):
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


class FifoReader:
    """Reads everything written to a FIFO in a thread (the writer blocks until it opens)."""

    def __init__(self, path):
        os.mkfifo(path)
        self.path, self.data = path, b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with open(self.path, "rb") as fh:
            self.data = fh.read()

    def result(self):
        self.thread.join(10)
        return self.data


# class 3: special targets are written through, never renamed over

@ROOT_ONLY
def test_device_target_is_written_through_not_replaced(tmp_path, sample):
    null = tmp_path / "null"
    chardev(null, 1, 3)  # what /dev/null is, made inside the test's directory
    before = listing(tmp_path)
    result = run(train_args(sample, out=null, save_model=null, rlog=null))
    assert result.exit_code == 0, result.output
    assert listing(tmp_path) == before
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def test_fifo_and_symlink_targets_are_written_through(tmp_path, sample):
    (tmp_path / "log-target.tsv").write_text("old\n")
    os.chmod(tmp_path / "log-target.tsv", 0o640)
    os.symlink("log-target.tsv", tmp_path / "log.tsv")
    model_reader, pred_reader = FifoReader(tmp_path / "model.fifo"), FifoReader(tmp_path / "pred.fifo")
    before = listing(tmp_path)
    result = run(train_args(sample, out=tmp_path / "pred.fifo", save_model=tmp_path / "model.fifo",
                            rlog=tmp_path / "log.tsv"))
    assert result.exit_code == 0, result.output
    model_bytes, predictions = model_reader.result(), pred_reader.result()
    after = listing(tmp_path)
    assert set(after) == set(before)
    for name in ("model.fifo", "pred.fifo", "log.tsv"):
        assert after[name][:2] == before[name][:2], name  # same inode and type: not renamed over
    assert after["log-target.tsv"][:2] == before["log-target.tsv"][:2]  # written in place, mode kept
    assert (tmp_path / "log-target.tsv").read_text().startswith("epoch\tseconds\ttrain_loss")
    assert len(predictions.splitlines()) == 600  # the rows of regression.test
    saved = tmp_path / "copy.rafm"
    saved.write_bytes(model_bytes)
    model = model_files.load(str(saved))  # a streamed (unseekable) zip reads back
    assert model.kind == "fm" and model.ranks == (4,)


@ROOT_ONLY
def test_unwritable_device_is_one_line_error_and_nothing_committed(tmp_path, sample):
    chardev(tmp_path / "full", 1, 7)  # writes fail with ENOSPC, like /dev/full
    (tmp_path / "m.rafm").write_bytes(b"the previous model")
    before = listing(tmp_path)
    result = run(train_args(sample, out=tmp_path / "full", save_model=tmp_path / "m.rafm"))
    assert result.exit_code == 2
    assert error_line(result) == f"Error: {tmp_path / 'full'}: cannot write: No space left on device"
    assert listing(tmp_path) == before


@ROOT_ONLY
@pytest.mark.parametrize("command", ["dump", "dump json", "train --rlog"])
def test_an_output_written_as_it_goes_reports_a_full_device(tmp_path, sample, command):
    """`rafm dump` and --rlog write through a handle as they go: a full device gave a traceback."""
    chardev(tmp_path / "full", 1, 7)
    model = tmp_path / "m.rafm"
    assert run(["train", "--task", "r", "--train", sample("regression.train"), *FAST, "--save-model", model]
               ).exit_code == 0
    before = listing(tmp_path)
    args = {"dump": ["dump", "--model", model, "--out", tmp_path / "full"],
            "dump json": ["dump", "--model", model, "--format", "json", "--out", tmp_path / "full"],
            "train --rlog": train_args(sample, rlog=tmp_path / "full", save_model=model)}[command]
    result = run(args)
    assert result.exit_code == 2
    assert error_line(result) == f"Error: {tmp_path / 'full'}: cannot write: No space left on device"
    assert listing(tmp_path) == before


# class 4: every output checked before any work; all committed together or none

@pytest.mark.parametrize("option", ["out", "save_model", "rlog"])
@pytest.mark.parametrize("target,why", [("nodir/x", "no such directory (nodir)"),
                                        (".", "is a directory"),
                                        ("file.txt/x", "not a directory")])
def test_train_outputs_are_checked_before_any_work(tmp_path, sample, monkeypatch, option, target, why):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("a file\n")
    before = listing(tmp_path)
    others = {o: f"ok-{o}" for o in ("out", "save_model", "rlog") if o != option}
    args = train_args(sample, **others, **{option: target})
    args.remove("--quiet")
    result = run(args)
    assert result.exit_code == 2
    line = error_line(result)
    assert line.startswith(f"Error: Invalid value for '--{option.replace('_', '-')}': {target}: ")
    assert line.endswith(why) if why != "not a directory" else why in line.lower()
    assert "parameters" not in result.output  # no training happened
    assert listing(tmp_path) == before


def test_predict_output_is_checked_before_any_work(tmp_path, sample):
    model = tmp_path / "m.rafm"
    assert run(train_args(sample, save_model=model)).exit_code == 0
    before = listing(tmp_path)
    result = run(["predict", "--model", model, "--out", tmp_path / "nodir" / "p.txt", sample("regression.test")])
    assert result.exit_code == 2
    assert error_line(result).endswith(f"no such directory ({tmp_path / 'nodir'})")
    assert listing(tmp_path) == before


def test_a_late_failure_commits_no_output(tmp_path, sample, monkeypatch):
    """Predictions fail to write (disk full) after the model and log are staged:
    the old model stays, no new log appears, no temporary file is left."""
    (tmp_path / "m.rafm").write_bytes(b"the previous model")
    before = listing(tmp_path)

    def disk_full(fh, predictions):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("rafmcli.io.output.format_predictions", disk_full)
    result = run(train_args(sample, out=tmp_path / "p.txt", save_model=tmp_path / "m.rafm",
                            rlog=tmp_path / "log.tsv"))
    assert result.exit_code == 2
    assert error_line(result) == f"Error: {tmp_path / 'p.txt'}: cannot write: No space left on device"
    assert listing(tmp_path) == before


def test_two_options_naming_one_file_are_refused(tmp_path, sample):
    before = listing(tmp_path)
    result = run(train_args(sample, out=tmp_path / "x", rlog=tmp_path / "x"))
    assert result.exit_code == 2
    assert error_line(result) == f"Error: --out and --rlog name the same output ({tmp_path / 'x'})"
    assert listing(tmp_path) == before


def _writing_over_an_input(tmp_path, sample, case):
    """(arguments, the input they would write over) of one command line of each kind."""
    import shutil

    data = tmp_path / "rows.libfm"
    shutil.copy(sample("regression.train"), data)
    model = tmp_path / "m.rafm"
    assert run(["train", "--task", "r", "--train", data, *FAST, "--save-model", model]).exit_code == 0
    link = tmp_path / "link"
    if case.endswith("symlink"):
        link.symlink_to(data)
    elif case.endswith("hard link"):
        os.link(data, link)
    return {
        "train --save-model TRAIN": (["train", "--task", "r", "--train", data, *FAST, "--save-model", data], data),
        "train --save-model via a symlink": (["train", "--task", "r", "--train", data, *FAST, "--save-model", link],
                                             data),
        "train --test F --out F": (["train", "--task", "r", "--train", sample("regression.train"), *FAST,
                                    "--test", data, "--out", data], data),
        "train --rlog via a hard link": (["train", "--task", "r", "--train", data, *FAST, "--rlog", link], data),
        "predict --out MODEL": (["predict", "--model", model, "--out", model, data], model),
        "predict --out FILE": (["predict", "--model", model, "--out", data, data], data),
        "dump --out MODEL": (["dump", "--model", model, "--out", model], model),
        "embed --out MODEL": (["embed", "--model", model, "--out", model], model),
        "tune --table TRAIN": (["tune", "--task", "r", "--train", data, "--table", data], data),
        "libfm -save_model TRAIN": (["libfm", "-task", "r", "-train", data, "-test", sample("regression.test"),
                                     "-out", tmp_path / "p", "-method", "sgd", "-iter", "2", "-save_model", data],
                                    data),
    }[case]


@pytest.mark.parametrize("case", ["train --save-model TRAIN", "train --save-model via a symlink",
                                  "train --test F --out F", "train --rlog via a hard link", "predict --out MODEL",
                                  "predict --out FILE", "dump --out MODEL", "embed --out MODEL",
                                  "tune --table TRAIN", "libfm -save_model TRAIN"])
def test_an_output_naming_an_input_is_refused(tmp_path, sample, case):
    """Only outputs were compared with each other: `--save-model` naming the --train file turned the
    data into a zip, exit 0. Now any output that is an input (by any path or link) is a usage
    error, before anything is read or written."""
    args, victim = _writing_over_an_input(tmp_path, sample, case)
    before = listing(tmp_path)
    result = run(args)
    assert result.exit_code == 2, result.output
    assert "names the input" in error_line(result) and "never writes over its inputs" in error_line(result)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("args", [["predict", "--model", "M", "-", "-"], ["stats", "-", "-"],
                                  ["train", "--task", "r", "--train", "-", "--validation", "-"]])
def test_standard_input_named_twice_is_refused(tmp_path, sample, args):
    """`-` twice read standard input once and then failed with a traceback (I/O on a closed file)."""
    model = tmp_path / "m.rafm"
    assert run(["train", "--task", "r", "--train", sample("regression.train"), *FAST, "--save-model", model]
               ).exit_code == 0
    result = CliRunner().invoke(main, [str(model) if a == "M" else a for a in args], input="1 1:1\n")
    assert result.exit_code == 2
    assert error_line(result).endswith("both name standard input (-), which can be read once")


def test_standard_output_by_two_names_is_refused(tmp_path, sample):
    """`--out /dev/stdout --rlog -` mixed the log and the predictions in one stream (`--out - --rlog -`
    was refused); two hard links to one file as two outputs are refused too."""
    with open(tmp_path / "stdout", "wb") as fh:
        result = subprocess.run([sys.executable, "-m", "rafmcli", *map(str, train_args(sample, out="/dev/stdout")),
                                 "--rlog", "-"], stdout=fh, stderr=subprocess.PIPE, text=True, env=child_env())
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        "Error: --out and --rlog name the same output (-)")
    assert (tmp_path / "stdout").read_bytes() == b""
    (tmp_path / "a").write_text("old")
    os.link(tmp_path / "a", tmp_path / "b")
    result = run(train_args(sample, out=tmp_path / "a", rlog=tmp_path / "b"))
    assert error_line(result) == f"Error: --out and --rlog name the same output ({tmp_path / 'b'})"
    assert (tmp_path / "a").read_text() == "old"


# class 5: new files follow the umask, replaced files keep their mode

def test_modes_follow_umask_and_replaced_files_keep_theirs(tmp_path, sample):
    old = os.umask(0o027)
    try:
        new = run(train_args(sample, out=tmp_path / "p.txt", save_model=tmp_path / "m.rafm",
                             rlog=tmp_path / "log.tsv"))
        assert new.exit_code == 0, new.output
        modes = {n: stat.S_IMODE(os.stat(tmp_path / n).st_mode) for n in ("p.txt", "m.rafm", "log.tsv")}
        assert modes == {"p.txt": 0o640, "m.rafm": 0o640, "log.tsv": 0o640}
        for name, mode in (("p.txt", 0o644), ("m.rafm", 0o600), ("log.tsv", 0o664)):
            os.chmod(tmp_path / name, mode)
        inodes = {n: os.stat(tmp_path / n).st_ino for n in modes}
        again = run(train_args(sample, out=tmp_path / "p.txt", save_model=tmp_path / "m.rafm",
                               rlog=tmp_path / "log.tsv"))
        assert again.exit_code == 0, again.output
    finally:
        os.umask(old)
    after = {n: stat.S_IMODE(os.stat(tmp_path / n).st_mode) for n in modes}
    assert after == {"p.txt": 0o644, "m.rafm": 0o600, "log.tsv": 0o664}
    assert all(os.stat(tmp_path / n).st_ino != inodes[n] for n in modes)  # replaced by rename
    assert sorted(os.listdir(tmp_path)) == ["log.tsv", "m.rafm", "p.txt"]


# class 14: SIGTERM and SIGHUP are handled like SIGINT

def _big_file(path, rows=20_000):
    """Rows of two features each seen once: an FM(64) of 40,000 features (10 MB of factors)."""
    rng = np.random.default_rng(0)
    ids = np.arange(2 * rows).reshape(rows, 2)
    labels = rng.normal(size=rows)
    with open(path, "w") as fh:
        fh.writelines(f"{y:.3f} {a}:1 {b}:1\n" for y, (a, b) in zip(labels, ids))


def _signal_when(tmp_path, args, ready, signum=signal.SIGTERM, timeout=120):
    """Run rafm; as soon as ready(names in tmp_path) holds, stop it, check ready
    still holds (the moment was caught), send ``signum``; (exit status, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "rafmcli", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env())
    deadline = time.monotonic() + timeout
    while not ready(os.listdir(tmp_path)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.0005)
    proc.send_signal(signal.SIGSTOP)
    caught = ready(os.listdir(tmp_path))
    proc.send_signal(signum)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=timeout)
    assert caught, "the process got past the moment before it was stopped"
    return proc.returncode, err.decode()


TRAIN_BIG = ["train", "--task", "r", "--train", "big.libfm", "--model", "fm", "--dim", "64", "--holdout", "0",
             "--save-model", "m.rafm", "--rlog", "log.tsv", "--quiet"]


def test_sigterm_during_training_leaves_nothing(tmp_path):
    _big_file(tmp_path / "big.libfm")
    before = listing(tmp_path)

    def two_epochs_logged(names):
        logs = [n for n in names if n.startswith(".log.tsv.")]
        return bool(logs) and len((tmp_path / logs[0]).read_text().splitlines()) >= 3

    status, err = _signal_when(tmp_path, TRAIN_BIG + ["--iter", "100000"], two_epochs_logged)
    assert (status, err) == (143, "")
    assert listing(tmp_path) == before


def test_sigterm_during_model_save_leaves_nothing(tmp_path):
    _big_file(tmp_path / "big.libfm")
    before = listing(tmp_path)
    status, err = _signal_when(tmp_path, TRAIN_BIG + ["--iter", "1"],
                               lambda names: any(n.startswith(".m.rafm.") for n in names))
    assert (status, err) == (143, "")
    assert listing(tmp_path) == before


def test_a_signal_anywhere_in_a_model_save_only_terminates(tmp_path, sample, monkeypatch):
    """The handler raises wherever the signal lands, even inside zipfile's or contextlib's own
    code: at every line a save runs, Terminated alone must come out, never the ValueError of a
    ZipFile closed with a member open (nor that error printed as "Exception ignored")."""
    from rafmcli import signals
    from rafmcli.errors import Terminated

    saved = tmp_path / "m.rafm"
    assert run(train_args(sample, save_model=saved)).exit_code == 0
    model = model_files.load(saved)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    at = {"line": 0, "signal_at": 0}

    def deliver(frame, event, arg):
        if event == "line":
            at["line"] += 1
            if at["line"] == at["signal_at"]:
                signals._handler(signal.SIGTERM, frame)
        return deliver

    escaped, caught = set(), None
    gc.disable()  # a ZipFile collected while tracing would see the test's signal in its __del__
    try:
        for signal_at in range(1, 100_000):
            at.update(line=0, signal_at=signal_at)
            signals._State.held, signals._State.pending, signals._State.unwinding = 0, None, False
            sys.settrace(deliver)
            try:
                model_files.write(model, io.BytesIO())
            except BaseException as exc:  # noqa: B036 - what escapes is the point
                caught = exc
            finally:
                sys.settrace(None)
            if caught is not None:
                escaped.add(type(caught))
                caught = None  # frees the save's frames (and an unclosed ZipFile) untraced
            if signal_at % 256 == 0:
                gc.collect()
            if at["line"] < signal_at:  # the save ran to its end without the signal
                break
        gc.collect()
    finally:
        gc.enable()
    # (a signal landing in the __del__ of an object the save just released is lost, as in any
    # Python program whose handler raises: that window is not this test's subject)
    assert signal_at > 100 and escaped == {Terminated}
    assert [u.exc_value for u in unraisable if u.exc_type is not Terminated] == []


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT])
def test_sighup_and_sigint_exit_128_plus_n(tmp_path, signum):
    _big_file(tmp_path / "big.libfm", rows=2_000)
    before = listing(tmp_path)
    status, err = _signal_when(tmp_path, TRAIN_BIG + ["--iter", "100000"],
                               lambda names: any(n.startswith(".log.tsv.") for n in names), signum=signum)
    assert (status, err) == (128 + signum, "")
    assert listing(tmp_path) == before


SIGNAL_IN_LLVM_CALLBACK = """
import os, signal, sys
from rafmcli import cli
cli.LeanNumba.install()  # as main does, so that numba.core.codegen loads with rafm's hooks
from numba.core import codegen
signum, at, finished = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
calls = [0]
for name in ("_object_getbuffer_hook", "_object_compiled_hook"):  # LLVM calls these through ctypes
    def hook(cls, *args, own=getattr(codegen.CPUCodeLibrary, name).__func__):
        calls[0] += 1
        if calls[0] == at:
            signal.getsignal(signum)(signum, None)  # the handler, as when the signal lands in the callback
            open(finished, "w").close()  # the callback went on: the handler did not raise in it
        return own(cls, *args)
    setattr(codegen.CPUCodeLibrary, name, classmethod(hook))
sys.argv = ["rafm", *sys.argv[4:]]
cli.main()
"""


@pytest.mark.parametrize("signum,at", [(signal.SIGTERM, 1), (signal.SIGINT, 3)])
def test_a_signal_while_llvm_calls_back_ends_the_command(tmp_path, sample, signum, at):
    """LLVM calls numba's Python back (ctypes) for each kernel's machine code, loaded or
    compiled, and ctypes drops what a callback raises: a signal there once let the command
    finish and exit 0, or left a kernel without code (SIGSEGV). Now it exits 128 + N, its
    output never written, and nothing printed: the signal waits for the callback's end
    (raised and dropped in it, it would be sent again, but the kernel would have no code)."""
    finished = tmp_path / "callback finished"
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run([sys.executable, "-c", SIGNAL_IN_LLVM_CALLBACK, str(int(signum)), str(at), str(finished),
                             *train_args(sample, save_model=out / "m.rafm")], capture_output=True, text=True,
                            env=child_env())
    assert (result.returncode, result.stderr) == (128 + signum, "")
    assert finished.exists() and os.listdir(out) == []


SIGNAL_IN_CACHE_WRITE = """
import contextlib, os, signal, sys
from rafmcli import cli, signals
from rafmcli.errors import Terminated
cli.LeanNumba.install()  # as main does, so that numba.core.caching loads with rafm's hooks
from numba.core import caching
own = caching.IndexDataCacheFile._open_for_write
@contextlib.contextmanager
def signalled(self, path):
    with own(self, path) as fh:
        yield fh
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # the handler, as when SIGTERM lands here
caching.IndexDataCacheFile._open_for_write = signalled
sys.path.insert(0, sys.argv[1])
import tiny
try:
    with signals.handled():
        tiny.plus_one(1)
except Terminated as exc:
    sys.exit(128 + exc.signum)
"""


def test_a_signal_while_numba_writes_its_cache_leaves_no_temporary_file(tmp_path):
    """numba writes a kernel's cache files through temporary files it removes on an Exception
    only: Terminated there left one in the cache directory. The write now finishes first."""
    (tmp_path / "tiny.py").write_text("from numba import njit\n\n\n@njit(cache=True)\ndef plus_one(x):\n"
                                      "    return x + 1\n")
    cache = tmp_path / "numba"
    result = subprocess.run([sys.executable, "-c", SIGNAL_IN_CACHE_WRITE, str(tmp_path)], capture_output=True,
                            text=True, env={**child_env(), "NUMBA_CACHE_DIR": str(cache)})
    assert (result.returncode, result.stderr) == (143, "")
    written = [os.path.basename(p) for p in glob.glob(str(cache / "**" / "*"), recursive=True) if os.path.isfile(p)]
    assert written and not [name for name in written if ".tmp" in name], written


SIGNAL_IN_DEL = """
import os, signal, sys
from rafmcli import cli, signals
from rafmcli.io import reader
signals.RESEND_SECONDS = float(sys.argv.pop(1))

class Dropped:
    def __del__(self):  # Python drops what __del__ raises
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # the handler, as when SIGTERM lands here

read = reader.read_dataset
def read_then_drop(*args, **kwargs):
    data = read(*args, **kwargs)
    Dropped()  # collected at once
    return data
reader.read_dataset = read_then_drop
sys.argv = ["rafm", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.parametrize("resend", [0.001, 600.0])
def test_a_signal_raised_where_python_drops_it_still_ends_the_command(tmp_path, sample, resend):
    """Terminated raised in a __del__ (or a weakref or ctypes callback) is dropped by Python,
    with "Exception ignored in"; the command once trained on, exited 0 and ignored every later
    signal. It is raised again just after: exit 143, nothing written, nothing printed. A resend
    later than the command's end (a loaded machine) is raised before the outputs are renamed."""
    args = [str(resend), *train_args(sample, save_model=tmp_path / "m.rafm")]
    result = subprocess.run([sys.executable, "-c", SIGNAL_IN_DEL, *args], capture_output=True, text=True,
                            env=child_env())
    assert (result.returncode, result.stderr) == (143, "")
    assert os.listdir(tmp_path) == []


SIGNAL_OUTSIDE_THE_COMMAND = """
import atexit, os, signal, sys, time
signum, when = int(sys.argv[1]), sys.argv[2]

class WhileImportingClick:  # the rafm process imports click and its commands first
    def find_spec(self, name, path=None, target=None):
        if name == "click" and when == "before":
            os.kill(os.getpid(), signum)
        return None

sys.meta_path.insert(0, WhileImportingClick())
replace = os.replace
def replace_then_signal(src, dst):  # the outputs are renamed into place under signals.held()
    replace(src, dst)
    if when == "renamed" and str(dst).endswith("m.rafm"):  # not the input cache's files
        os.kill(os.getpid(), signum)
os.replace = replace_then_signal

def at_exit():  # the interpreter's shutdown (run last of the atexit functions)
    if when == "exiting":
        print(signal.getsignal(signum).name if signal.getsignal(signum) == signal.SIG_IGN else "a handler")
        sys.stdout.flush()
        os.kill(os.getpid(), signum)
        time.sleep(0.05)
atexit.register(at_exit)
sys.argv = ["rafm", *sys.argv[3:]]
from rafmcli.entry import run
run()
"""


def outside_the_command(signum, when, args):
    return subprocess.run([sys.executable, "-c", SIGNAL_OUTSIDE_THE_COMMAND, str(int(signum)), when, *map(str, args)],
                          capture_output=True, text=True, env=child_env())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_command_starts_ends_the_process_quietly(tmp_path, sample, signum):
    """While the rafm process imports click and its commands, SIGINT printed a KeyboardInterrupt
    traceback (exit 1) and SIGTERM's default action killed it: now 128 + N, nothing printed."""
    result = outside_the_command(signum, "before", train_args(sample, save_model=tmp_path / "m.rafm"))
    assert (result.returncode, result.stderr) == (128 + signum, "")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("when", ["renamed", "exiting"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_once_the_outputs_are_in_place_is_ignored(tmp_path, sample, signum, when):
    """Once the outputs are in place, rafm(1)'s "128 + N: nothing written" cannot hold: a signal
    held while they were renamed, or one while the process exits, is ignored and the status
    stays 0. Before, both gave 128 + N with the model in place. While exiting the signal is
    left at SIG_IGN: the interpreter's shutdown resets handlers written in Python to the
    default action (SIGTERM killed the process there), not SIG_IGN."""
    result = outside_the_command(signum, when, train_args(sample, save_model=tmp_path / "m.rafm"))
    assert (result.returncode, result.stderr) == (0, "")
    assert os.listdir(tmp_path) == ["m.rafm"]
    assert result.stdout == ("SIG_IGN\n" if when == "exiting" else "")


def test_a_signal_after_a_failed_command_ends_the_process_quietly(tmp_path):
    """Nothing was written: the signal ends the process with 128 + N after the command's one error line."""
    missing = tmp_path / "missing.libfm"
    result = outside_the_command(signal.SIGTERM, "exiting", ["stats", missing])
    assert result.returncode == 143
    assert result.stderr.splitlines() == [f"Error: {missing}: cannot open: No such file or directory"]


class DroppedError:
    """An object whose __del__ raises ``error()``, which Python drops (sys.unraisablehook)."""

    def __init__(self, error):
        self.error = error

    def __del__(self):
        raise self.error()


def test_exceptions_dropped_otherwise_reach_the_previous_hook(monkeypatch):
    """Under the handlers an exception Python drops that is not Terminated goes to the hook in
    place before (here, the test's), nested handlers too; afterwards that hook is back."""
    from rafmcli import signals

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with signals.handled():
        DroppedError(ValueError)
        with signals.handled():
            DroppedError(KeyError)
        DroppedError(OSError)
    DroppedError(TypeError)
    assert [type(u.exc_value) for u in seen] == [ValueError, KeyError, OSError, TypeError]
    assert sys.unraisablehook == seen.append


def test_what_python_drops_while_a_signal_ends_the_command_is_not_shown(monkeypatch):
    """A signal between the two steps of llvmlite's ObjectRef.detach leaves an object whose __del__
    raises AttributeError ("Exception ignored in ...", about 1 Ctrl-C in 100 near a command's end):
    while a signal ends the command, what Python drops is not shown; otherwise it is."""
    from rafmcli import signals
    from rafmcli.errors import Terminated

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with pytest.raises(Terminated):
        with signals.handled():
            DroppedError(KeyError)
            try:
                signals._handler(signal.SIGINT, None)
            finally:
                DroppedError(AttributeError)
    DroppedError(TypeError)
    assert [type(u.exc_value) for u in seen] == [KeyError, TypeError]


SIGNAL_THEN_DROPPED_ON_THE_WAY_OUT = """
import signal, sys
from rafmcli import cli

class HalfDetached:  # llvmlite's ObjectRef cut between the two steps of its detach
    def __del__(self):
        raise AttributeError("_as_parameter_")

class SignalInTheCommand:
    def find_spec(self, name, path=None, target=None):
        if name == "rafmcli.io.reader":
            left = HalfDetached()  # dropped with this frame, once the exit's traceback is released
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        return None

sys.meta_path.insert(0, SignalInTheCommand())
sys.argv = ["rafm", *sys.argv[1:]]
cli.main()
"""


def test_what_python_drops_after_the_signal_s_block_is_not_shown(tmp_path, sample):
    """The same when the object goes with the frames of the signal's traceback, after the command's
    block: exit 130, nothing printed."""
    result = subprocess.run([sys.executable, "-c", SIGNAL_THEN_DROPPED_ON_THE_WAY_OUT,
                             *train_args(sample, save_model=tmp_path / "m.rafm")], capture_output=True, text=True,
                            env=child_env())
    assert (result.returncode, result.stderr) == (130, "")
    assert os.listdir(tmp_path) == []


def test_an_inner_block_leaves_the_outer_one_handling_signals():
    """Nested, the inner handled() ends and the outer still raises on a signal (its state is
    left as the inner found it)."""
    from rafmcli import signals
    from rafmcli.errors import Terminated

    with pytest.raises(Terminated) as raised:
        with signals.handled():
            with signals.handled():
                pass
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # the handler, as when SIGTERM arrives
    assert raised.value.signum == signal.SIGTERM


def test_a_signal_dropped_as_the_command_ends_is_raised_there(monkeypatch):
    """Terminated dropped just before the end, before it could be sent again, is raised as the
    handlers are removed: the command still exits 128 + N."""
    from rafmcli import signals
    from rafmcli.errors import Terminated

    def terminated():
        signals._handler(signal.SIGHUP, None)  # raises Terminated, in a __del__

    monkeypatch.setattr(signals, "RESEND_SECONDS", 60.0)  # the block ends first
    with pytest.raises(Terminated) as raised:
        with signals.handled():
            DroppedError(terminated)
    assert raised.value.signum == signal.SIGHUP
    assert signals._State.resend == () and signals._State.dropped is None


def _swallowed_by_c(signum):
    """The handler run as CPython runs a Python callback whose exception it clears:
    PyObject_HasAttr on an object whose __getattr__ meets the signal (0: what it raised
    was cleared; 1: it raised nothing)."""
    import ctypes

    from rafmcli import signals

    class MeetsTheSignal:
        def __getattr__(self, name):
            signals._handler(signum, None)

    has_attr = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.py_object)(("PyObject_HasAttr",
                                                                                     ctypes.pythonapi))
    return has_attr(MeetsTheSignal(), "anything")


def test_a_signal_whose_terminated_was_swallowed_ends_the_command(tmp_path):
    """C code that clears what a Python callback raised swallowed a Terminated: the handler had
    raised, so later signals were ignored, and the command went on to write its outputs and exit 0
    (a review's Ctrl-C while `rafm tune` imported its kernels, 2 runs in 468). The signal is
    raised again before anything is renamed into place, and at the command's end."""
    from rafmcli import signals
    from rafmcli.errors import Terminated
    from rafmcli.io.output import Outputs

    with pytest.raises(Terminated) as raised:
        with signals.handled():
            assert _swallowed_by_c(signal.SIGINT) == 0
            signals._handler(signal.SIGTERM, None)  # ignored: the first is being handled
    assert raised.value.signum == signal.SIGINT
    with pytest.raises(Terminated) as raised:
        with signals.handled():
            with Outputs() as outputs:
                outputs.write(str(tmp_path / "model"), lambda fh: fh.write("weights"))
                assert _swallowed_by_c(signal.SIGHUP) == 0
    assert raised.value.signum == signal.SIGHUP
    assert os.listdir(tmp_path) == []
    with signals.handled():  # after a commit the outputs stand, as for any signal then
        with Outputs() as outputs:
            outputs.write(str(tmp_path / "model"), lambda fh: fh.write("weights"))
        assert _swallowed_by_c(signal.SIGHUP) == 1  # ignored: nothing raised
    assert os.listdir(tmp_path) == ["model"]


def test_a_swallowed_signal_outlasts_click_s_exit_and_a_nested_block(capsys):
    """click ends every command with SystemExit, the ones that went well too: the end of the block
    saw an exception and skipped its check. Nothing goes to a stream output either (it is written
    at the commit, before the renames). An inner block's swallowed signal, raised at its end, leaves
    the outer block handling signals."""
    from rafmcli import signals
    from rafmcli.errors import Terminated
    from rafmcli.io.output import Outputs

    with pytest.raises(Terminated) as raised:
        with signals.handled():
            with Outputs() as outputs:
                outputs.write("-", lambda fh: fh.write("predictions\n"))
                assert _swallowed_by_c(signal.SIGTERM) == 0
    assert raised.value.signum == signal.SIGTERM and capsys.readouterr().out == ""
    with pytest.raises(Terminated):
        with signals.handled():
            assert _swallowed_by_c(signal.SIGINT) == 0
            sys.exit(0)
    with pytest.raises(SystemExit):  # nothing swallowed: click's exit as it was
        with signals.handled():
            sys.exit(0)
    with signals.handled():
        with pytest.raises(Terminated):
            with signals.handled():
                assert _swallowed_by_c(signal.SIGINT) == 0
        assert not signals._State.unwinding
        with pytest.raises(Terminated):
            signals._handler(signal.SIGTERM, None)
        signals._State.unwinding = False  # the test caught it: not a swallowed one


def test_an_exception_that_replaced_a_terminated_ends_the_command_by_its_signal(tmp_path):
    """C code turned the handler's Terminated into an exception of its own (a review's Ctrl-C during
    numba's import: ImportError from numba._devicearray, exit 1 and a traceback, 1 run in 458): the
    command ends by the signal, nothing renamed into place. Without a signal, or after the commit
    (signals are ignored then), an exception goes on as it was."""
    from rafmcli import signals
    from rafmcli.errors import Terminated
    from rafmcli.io.output import Outputs

    def replaced(signum):
        try:
            signals._handler(signum, None)
        except Terminated:
            raise ImportError("numba._devicearray failed to import") from None

    with pytest.raises(Terminated) as raised:
        with signals.handled():
            with Outputs() as outputs:
                outputs.write(str(tmp_path / "model"), lambda fh: fh.write("weights"))
                replaced(signal.SIGINT)
    assert raised.value.signum == signal.SIGINT and os.listdir(tmp_path) == []
    with pytest.raises(ImportError):
        with signals.handled():
            raise ImportError("no signal")
    with pytest.raises(ImportError):
        with signals.handled():
            with Outputs() as outputs:
                outputs.write(str(tmp_path / "model"), lambda fh: fh.write("weights"))
            signals._handler(signal.SIGINT, None)  # ignored: the outputs are in place
            raise ImportError("after the commit")
    assert os.listdir(tmp_path) == ["model"]


def _swallowed_at_call(owner, name, call, signum, monkeypatch):
    """Make ``owner.name``'s ``call``-th call swallow ``signum`` first (:func:`_swallowed_by_c`);
    returns the list of its calls."""
    calls, original = [], getattr(owner, name)

    def swallowing(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            assert _swallowed_by_c(signum) == 0
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, swallowing)
    return calls


@pytest.mark.parametrize("method", ["adagrad", "als"])
def test_a_swallowed_signal_ends_training_at_the_next_step(sample, monkeypatch, method):
    """A swallowed Terminated left a long `rafm train` running to its end, and later signals were
    ignored meanwhile: the next epoch (SGD) or sweep (ALS, MCMC) raises it."""
    from rafmcli import signals
    from rafmcli.errors import Terminated
    from rafmcli.io.reader import read_dataset
    from rafmcli.options import Options
    from rafmcli.solvers import coordinate, sgd

    data = read_dataset(sample("regression.train"))
    opts = Options(task="r", model="fm", ranks=(4,), method=method, iters=50, early_stop=0)
    if method == "als":
        steps = _swallowed_at_call(coordinate, "sweep", 2, signal.SIGTERM, monkeypatch)
        train = lambda: coordinate.train(data, opts, quiet=True)  # noqa: E731
    else:
        steps = _swallowed_at_call(sgd.Training, "train_epoch", 2, signal.SIGTERM, monkeypatch)
        train = lambda: sgd.train(data, opts, quiet=True)  # noqa: E731
    with pytest.raises(Terminated) as raised:
        with signals.handled():
            train()
    assert raised.value.signum == signal.SIGTERM and len(steps) == 2


def test_a_swallowed_signal_ends_reading_at_the_next_block(tmp_path, monkeypatch):
    """The same for a long read: the next block raises it."""
    from rafmcli import signals
    from rafmcli.errors import Terminated
    from rafmcli.io import reader

    path = tmp_path / "rows.libfm"
    path.write_text("".join(f"1 {i}:1 {i + 1}:0.5\n" for i in range(200)))
    monkeypatch.setattr(reader, "BLOCK_BYTES", 256)
    blocks = _swallowed_at_call(reader, "_parse_block", 2, signal.SIGINT, monkeypatch)
    with pytest.raises(Terminated) as raised:
        with signals.handled():
            reader.read_dataset(str(path), use_cache=False)
    assert raised.value.signum == signal.SIGINT and len(blocks) == 2


def test_signals_once_the_outputs_are_in_place_are_ignored_in_the_block(monkeypatch):
    """After signals.committed() (the outputs renamed into place) neither a signal nor one
    Python dropped earlier ends the command; the outer block's state comes back after."""
    from rafmcli import signals
    from rafmcli.errors import Terminated

    def terminated():
        signals._handler(signal.SIGHUP, None)  # raises Terminated, in a __del__

    monkeypatch.setattr(signals, "RESEND_SECONDS", 60.0)  # the block ends first
    with pytest.raises(Terminated) as again:  # caught below, the outer's signal is raised again at its end
        with signals.handled():
            with signals.handled():
                DroppedError(terminated)
                assert signals._State.dropped == signal.SIGHUP
                signals.committed()
                signals._handler(signal.SIGTERM, None)
            assert not signals._State.committed
            with pytest.raises(Terminated):
                signals._handler(signal.SIGTERM, None)
    assert again.value.signum == signal.SIGTERM
    signals.committed()  # outside a block (the API saving a model): nothing
    assert not signals._State.committed


# class 19, outputs: '-' is stdout for text, refused for a model; a closed stdout is no traceback

def test_rlog_dash_is_stdout_and_model_dash_is_refused(tmp_path, sample, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(train_args(sample, rlog="-"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("epoch\tseconds\ttrain_loss\trmse\tmae\n1\t")
    refused = run(train_args(sample, save_model="-"))
    assert refused.exit_code == 2
    assert error_line(refused) == ("Error: Invalid value for '--save-model': a binary file cannot go to "
                                   "standard output; give a file name")
    assert os.listdir(tmp_path) == []


def _cli(args, **popen):
    return subprocess.Popen([sys.executable, "-m", "rafmcli", *map(str, args)], stderr=subprocess.PIPE,
                            env=child_env(), **popen)


def test_closed_stdout_is_a_clean_error(tmp_path, sample):
    model = tmp_path / "m.rafm"
    assert run(train_args(sample, save_model=model)).exit_code == 0
    for args in (["predict", "--model", model, sample("regression.test")], ["stats", sample("regression.test")]):
        proc = _cli(args, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
        _, err = proc.communicate()
        assert proc.returncode == 2, err
        assert err.decode().splitlines()[-1] == (
            "Error: Invalid value for '--out': standard output is closed" if args[0] == "predict"
            else "Error: standard output is closed")


@pytest.mark.parametrize("command", ["predict", "stats"])
def test_reader_gone_exits_quietly(tmp_path, sample, command):
    """``rafm stats ... | true``: the reader has closed the pipe before rafm writes."""
    model = tmp_path / "m.rafm"
    assert run(train_args(sample, save_model=model)).exit_code == 0
    args = (["predict", "--model", model, "--quiet"] if command == "predict" else ["stats"])
    proc = _cli(args + [sample("regression.test")], stdout=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate()
    assert (proc.returncode, err) == (0, b"")


def test_model_file_is_a_plain_zip(tmp_path, sample):
    """The shared writer still makes an archive any unzip reads (regression guard)."""
    assert run(train_args(sample, save_model=tmp_path / "m.rafm")).exit_code == 0
    with zipfile.ZipFile(tmp_path / "m.rafm") as zf:
        assert zf.testzip() is None
        assert sorted(zf.namelist()) == ["V.npy", "feature_ids.npy", "levels.npy", "model.json", "w.npy"]


# class 9: every float option finite and in range

@pytest.mark.parametrize("option,value,why", [
    ("--learn-rate", "nan", "nan is not a finite number"),
    ("--learn-rate", "inf", "inf is not a finite number"),
    ("--init-stdev", "nan", "nan is not a finite number"),
    ("--init-stdev", "inf", "inf is not a finite number"),
    ("--dependent-weight", "nan", "nan is not a finite number"),
    ("--dependent-rate", "inf", "inf is not a finite number"),
    ("--holdout", "nan", "nan is not a finite number"),
    ("--regular", "0,0,inf", "values must be finite (0,0,inf)"),
    ("--regular", "0,nan,1", "values must be non-negative (0,nan,1)"),
    ("--regular", "1e39,0,0", "values must be at most 3.40282e+38, float32's largest (1e39,0,0)"),
    ("--learn-rate", "1e39", "1e+39 is not in the range 0<x<=3.40282e+38."),
    ("--learn-rate", "0", "0.0 is not in the range 0<x<=3.40282e+38."),
    ("--init-stdev", "4e38", "4e+38 is not in the range 0<=x<=3.40282e+38."),
])
def test_float_options_must_be_finite(tmp_path, sample, option, value, why):
    before = listing(tmp_path)
    result = run(train_args(sample, save_model=tmp_path / "m.rafm") + [option, value])
    assert result.exit_code == 2
    assert error_line(result) == f"Error: Invalid value for '{option}': {why}"
    assert listing(tmp_path) == before


def test_a_bad_option_argument_or_command_is_one_line(tmp_path, sample):
    """Click's usage and help hint no longer come before the error (four lines): one line, exit 2,
    for a value out of range, a directory as output, a missing option with its list of choices, an
    unknown option or command and a usage check of the command's own; `rafm` alone still helps."""
    (tmp_path / "adir").mkdir()
    train = sample("regression.train")
    cases = [(["train", "--task", "r", "--train", train, "--iter", "0"],
              "Error: Invalid value for '--iter': 0 is not in the range x>=1."),
             (["train", "--task", "r", "--train", train, "--save-model", tmp_path / "adir"],
              f"Error: Invalid value for '--save-model': {tmp_path / 'adir'}: is a directory"),
             (["train", "--train", train], "Error: Missing option '--task'. Choose from: r, c, implicit"),
             (["train", "--bogus"], None), (["nosuch"], "Error: No such command 'nosuch'."),
             (["train", "--task", "r", "--train", train, "--validation", sample("regression.validation"),
               "--holdout", "0.2"], None)]
    for args, line in cases:
        result = run(args)
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
        assert result.output.startswith("Error: ") and (line is None or result.output.strip() == line)
    assert run([]).output.startswith("Usage: ")


def test_every_float_option_uses_the_finite_type():
    """No float option of any command is a bare click float (which takes nan)."""
    from rafmcli.cli.options import FiniteFloatRange

    floats = [(command.name, param.name, param.type) for command in main.commands.values()
              for param in command.params if isinstance(param.type, click.types.FloatParamType)]
    assert floats
    for command, name, kind in floats:
        assert isinstance(kind, FiniteFloatRange), (command, name)


# class 10: any 64-bit seed; a negative one is its two's-complement value

def test_seeds_fit_64_bits_and_negative_ones_map(tmp_path, sample):
    predictions = {}
    for seed in ("-1", "18446744073709551615", "-9223372036854775808", "0"):
        out = tmp_path / f"p{seed}.txt"
        result = run(train_args(sample, out=out) + ["--seed", seed])
        assert result.exit_code == 0, result.output
        predictions[seed] = out.read_text()
    assert predictions["-1"] == predictions["18446744073709551615"]  # -1 is 2^64-1
    assert predictions["-1"] != predictions["0"] != predictions["-9223372036854775808"]
    before = listing(tmp_path)
    for seed in ("18446744073709551616", "-9223372036854775809"):
        result = run(train_args(sample, out=tmp_path / "p.txt") + ["--seed", seed])
        assert result.exit_code == 2
        assert error_line(result) == (f"Error: Invalid value for '--seed': {seed} does not fit 64 bits "
                                      f"(-9223372036854775808..18446744073709551615)")
    assert listing(tmp_path) == before


# class 6 (and the stored side of 12): a damaged model header or array is one line, exit 2

@pytest.fixture(scope="module")
def good_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    sample = os.path.join(ROOT, "data_samples", "regression.train.libfm")
    result = run(["train", "--task", "r", "--ranks", "4,16", "--train", sample, "--iter", "2", "--quiet",
                  "--save-model", folder / "m.rafm", "--no-cache"])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(folder / "m.rafm") as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _npy(array):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def _load_npy(data):
    import io

    return np.lib.format.read_array(io.BytesIO(data))


def _header_change(change):
    import json

    def apply(members):
        header = json.loads(members["model.json"])
        changed = change(header)
        members["model.json"] = json.dumps(header if changed is None else changed).encode()
    return apply


def _array_change(name, change):
    def apply(members):
        members[name + ".npy"] = _npy(change(_load_npy(members[name + ".npy"])))
    return apply


DAMAGE = {
    "header is a list": (_header_change(lambda h: []), "header is not a JSON object"),
    "no ranks": (_header_change(lambda h: h.pop("ranks") and None), "header has no 'ranks'"),
    "no w0": (_header_change(lambda h: h.pop("w0") and None), "header has no 'w0'"),
    "ranks ab": (_header_change(lambda h: h.update(ranks="ab")),
                 "header 'ranks' must be 1 to 127 increasing positive integers (one for fm) (\"ab\")"),
    "w0 text": (_header_change(lambda h: h.update(w0="x")), "header 'w0' must be a finite number (\"x\")"),
    "w0 nan": (_header_change(lambda h: h.update(w0=float("nan"))), "header 'w0' must be a finite number (NaN)"),
    "kind": (_header_change(lambda h: h.update(model="svm")),
             "header 'model' must be one of fm, rafm, difacto (\"svm\")"),
    "sizes": (_header_change(lambda h: h.update(level_sizes=[h["level_sizes"][0], h["level_sizes"][0] + 1])),
              "header 'level_sizes' must be 2 non-increasing counts, the first n_features"),
    "levels int16": (_array_change("levels", lambda a: a.astype(np.int16)), "levels.npy is int16 of shape"),
    "w short": (_array_change("w", lambda a: a[:-1]), "w.npy is float32 of shape"),
    "V 2-D": (_array_change("V", lambda a: a.reshape(-1, 4)), "V.npy is float32 of shape"),
    "V float64": (_array_change("V", lambda a: a.astype(np.float64)), "V.npy is float64 of shape"),
    "level 3 of 2": (_array_change("levels", lambda a: np.where(a == 2, 3, a).astype(np.int8)),
                     "levels.npy holds levels outside 1..2"),
    "level wrapped": (_array_change("levels", lambda a: np.full_like(a, -56)), "levels.npy holds levels outside 1..2"),
    "ids repeated": (_array_change("feature_ids", lambda a: np.zeros_like(a)),
                     "feature_ids.npy holds negative or repeated ids"),
    "w nan": (_array_change("w", lambda a: np.full_like(a, np.nan)), "w.npy holds values that are not finite"),
    "no V": (lambda members: members.pop("V.npy"), "no V.npy"),
    "V truncated": (lambda members: members.update({"V.npy": members["V.npy"][:-7]}), "V.npy is truncated"),
    "V longer": (lambda members: members.update({"V.npy": members["V.npy"] + bytes(4)}),
                 "V.npy has bytes beyond its array"),
    "link": (_header_change(lambda h: h.update(link="cauchy")), "header 'link' must be logit or probit (\"cauchy\")"),
    "samples without arrays": (_header_change(lambda h: h.update(samples=3)), "no sample_w0.npy"),
    "classes": (_header_change(lambda h: h.update(classes=3)), "header 'classes' must be a JSON list (3)"),
    "version text": (_header_change(lambda h: h.update(format_version="2")), 'format_version is not an integer ("2")'),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_model_is_one_line_exit_2(tmp_path, sample, good_model, damage):
    change, what = DAMAGE[damage]
    members = dict(good_model)
    change(members)
    with zipfile.ZipFile(tmp_path / "bad.rafm", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    before = listing(tmp_path)
    result = run(["predict", "--model", tmp_path / "bad.rafm", "--out", tmp_path / "p.txt",
                  sample("regression.test")])
    assert result.exit_code == 2
    assert error_line(result).startswith(f"Error: {tmp_path / 'bad.rafm'}: damaged model file ({what}")
    assert error_line(result).endswith(")")
    assert listing(tmp_path) == before


# class 11: sizes checked before allocation; class 12: at most 127 levels (int8)

@pytest.mark.parametrize("options,why", [
    (["--model", "fm", "--dim", "2000000000"],
     "Error: a fm model with ranks 2000000000 on 933 features would have 1,866,000,000,934 parameters, 3 copies of "
     "them while training (20.4 TiB), more than the "),
    (["--ranks", "1,99999999999999999999"],
     "Error: Invalid value for '--ranks': a rank must be at most 2147483647 (99999999999999999999)"),
    (["--model", "fm", "--dim", "99999999999999999999"],
     "Error: Invalid value for '--dim': 99999999999999999999 is not in the range 1<=x<=2147483647."),
    (["--ranks", ",".join(map(str, range(1, 201)))],
     "Error: Invalid value for '--ranks': at most 127 ranks (levels), not 200"),
])
def test_sizes_and_levels_are_checked_before_allocation(tmp_path, sample, options, why):
    before = listing(tmp_path)
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--quiet",
                  "--save-model", tmp_path / "m.rafm", *options])
    assert result.exit_code == 2
    assert error_line(result).startswith(why)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("options,copies,features", [(["--method", "sgd", "--holdout", "0"], 1, 963),
                                                      (["--method", "adagrad", "--holdout", "0"], 2, 963),
                                                      (["--method", "adam"], 4, 933),
                                                      (["--method", "mcmc", "--keep-samples", "3"], 6, 963),
                                                      (["--method", "mcmc", "--keep-samples", "3", "--keep-draws",
                                                        "--validation", "V"], 4, 963)])
def test_the_memory_check_counts_what_training_holds(sample, monkeypatch, options, copies, features):
    """Only the parameters were counted: an FM(3,000,000) of 10 GiB passed on a 23 GiB machine, and
    training (AdaGrad's sums, the best epoch's copy) was killed by the kernel. Each V-sized array a
    method holds counts: on a machine of just under copies + 1 such arrays it trains, just under
    copies it is refused."""
    params = 1 + features + features * 64  # FM(64) on the sample's features (held out: 933 of 963)
    for room, refused in ((copies + 0.9, False), (copies - 0.1, True)):
        monkeypatch.setattr(os, "sysconf", lambda name, room=room: 1 if name == "SC_PAGE_SIZE" else int(
            4 * params * room))
        result = run(["train", "--task", "r", "--train", sample("regression.train"), "--quiet", "--iter", "4",
                      "--model", "fm", "--dim", "64",
                      *[sample("regression.validation") if o == "V" else o for o in options]])
        assert (result.exit_code == 2) == refused, result.output
        if refused:
            assert error_line(result).startswith(
                f"Error: a fm model with ranks 64 on {features} features would have {params:,} parameters"
                + (f", {copies} copies of them while training" if copies > 1 else " ("))


def test_stats_takes_127_levels_and_refuses_200(sample):
    ok = run(["stats", "--json", "--ranks", ",".join(map(str, range(1, 128))), sample("regression.train")])
    assert ok.exit_code == 0, ok.output
    assert '"level": 127' in ok.output
    refused = run(["stats", "--ranks", ",".join(map(str, range(1, 201))), sample("regression.train")])
    assert refused.exit_code == 2
    assert error_line(refused) == "Error: Invalid value for '--ranks': at most 127 ranks (levels), not 200"


# class 17: strict JSON, no numpy warnings

def _strict_loads(text):
    import json

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_stats_json_is_strict_and_warning_free(tmp_path):
    import warnings

    data = tmp_path / "huge.libfm"
    data.write_text("1.7e308 1:1\n1.7e308 2:1\n1.6e308 3:1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail the command
        result = run(["stats", "--json", data])
    assert result.exit_code == 0, result.output
    labels = _strict_loads(result.output)["files"][0]["labels"]
    assert labels["mean"] == pytest.approx(1.7e308 / 3 * 2 + 1.6e308 / 3, rel=1e-6)  # the sum overflows


def test_strict_json_turns_non_finite_into_null():
    from rafmcli.stats import strict_json

    value = {"a": [1.0, float("inf"), {"b": float("nan")}], "c": (float("-inf"), 2), "d": "x"}
    assert strict_json(value) == {"a": [1.0, None, {"b": None}], "c": [None, 2], "d": "x"}


# class 19, numba: an unwritable HOME and install directory fall back to a private cache

def test_unwritable_home_falls_back_to_a_private_numba_cache(tmp_path):
    import shutil

    package = tmp_path / "pkg"
    shutil.copytree(os.path.join(ROOT, "rafmcli"), package / "rafmcli", ignore=shutil.ignore_patterns("__pycache__"))
    for sub in ("io", "kernels"):
        (package / "rafmcli" / sub / "__pycache__").write_text("")  # numba cannot cache beside the source
    (tmp_path / "home").write_text("")  # HOME is a file: no ~/.cache/numba, even for root
    (tmp_path / "tmp").mkdir()
    (tmp_path / "empty.libfm").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(package))
    result = subprocess.run([sys.executable, "-m", "rafmcli", "stats", "--no-cache", "empty.libfm"], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    fallback = tmp_path / "tmp" / f"rafm-numba-{os.getuid()}"
    assert result.stderr.splitlines() == [
        f"rafm: warning: numba cannot cache compiled kernels beside rafm or in {tmp_path}/home/.cache/numba; "
        f"using {fallback} (set NUMBA_CACHE_DIR to choose)"]
    assert "rows         0" in result.stdout
    assert fallback.is_dir() and stat.S_IMODE(fallback.stat().st_mode) == 0o700


def test_a_diverged_run_keeps_only_its_log(tmp_path, sample):
    (tmp_path / "m.rafm").write_bytes(b"the previous model")
    before = listing(tmp_path)
    result = run(train_args(sample, save_model=tmp_path / "m.rafm", rlog=tmp_path / "log.tsv")
                 + ["--learn-rate", "1e30", "--method", "sgd"])
    assert result.exit_code == 3
    assert error_line(result).startswith("Error: training diverged in epoch 1")
    after = listing(tmp_path)
    assert after.pop("log.tsv") and after == before
    assert (tmp_path / "log.tsv").read_text() == "epoch\tseconds\ttrain_loss\trmse\tmae\n"


def test_damaged_implicit_group_values_are_refused(tmp_path, sample):
    samples = os.path.join(ROOT, "data_samples")
    result = run(["train", "--task", "implicit", "--ranks", "4,16", "--meta", os.path.join(samples, "implicit.meta"),
                  "--train", sample("implicit.train"), "--iter", "1", "--holdout", "0", "--quiet",
                  "--save-model", tmp_path / "good.rafm"])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "good.rafm") as zf:
        good = {name: zf.read(name) for name in zf.namelist()}
    damages = {
        "value_ptr.npy": (lambda a: a[::-1].copy(), "group_ptr.npy or value_ptr.npy is not a run of offsets"),
        "group_of.npy": (lambda a: a + 1000, "the group values (group_of, value_features, value_x, value_count) "
                                             "are out of range"),
        "value_x.npy": (lambda a: a[:-1], "value_x.npy is float32 of shape"),
    }
    for member, (change, what) in damages.items():
        members = dict(good, **{member: _npy(change(_load_npy(good[member])))})
        bad = tmp_path / "bad.rafm"
        with zipfile.ZipFile(bad, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        before = listing(tmp_path)
        result = run(["dump", "--model", bad, "--format", "json", "--out", tmp_path / "dump.json"])
        assert result.exit_code == 2, (member, result.output)
        assert error_line(result).startswith(f"Error: {bad}: damaged model file ({what}"), member
        assert listing(tmp_path) == before


@pytest.mark.parametrize("method", ["adagrad", "rowwise-adagrad"])
@pytest.mark.parametrize("keep", [-1, 0])  # one value short; none (a method's sums missing corrupted memory)
def test_damaged_optimizer_state_is_refused(tmp_path, sample, method, keep):
    result = run(train_args(sample, save_model=tmp_path / "good.rafm") + ["--save-state", "--method", method])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(tmp_path / "good.rafm") as zf:
        good = {name: zf.read(name) for name in zf.namelist()}
    v1 = _load_npy(good["state_V1.npy"])
    assert v1.shape[0] > 0
    bad = tmp_path / "bad.rafm"
    with zipfile.ZipFile(bad, "w") as zf:
        for name, data in dict(good, **{"state_V1.npy": _npy(v1[:keep])}).items():
            zf.writestr(name, data)
    before = listing(tmp_path)
    result = run(train_args(sample, save_model=tmp_path / "next.rafm") + ["--init-model", bad, "--method", method])
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: {bad}: damaged model file (state_V1.npy has {v1[:keep].shape[0]} "
                                  f"values, not {v1.shape[0]} as {method} keeps, or values that are not finite)")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("args,why", [
    (["train", "--negatives", "7"], "--negatives applies to --task implicit only"),
    (["train", "--no-nce"], "--no-nce applies to --task implicit only"),
    (["train", "--eval-group", "3"], "--eval-group applies to --task implicit only"),
    (["train", "--holdout", "0.3", "--validation", "V"],
     "--holdout 0.3 and --validation: the validation file takes the hold-out's place; give one of them"),
    (["tune", "--holdout", "0.3", "--validation", "V"],
     "--holdout 0.3 and --validation: the validation file takes the hold-out's place; give one of them"),
])
def test_options_that_would_be_ignored_are_refused(tmp_path, sample, args, why):
    """--task r took --negatives, --eval-group, --loss... and --validation dropped --holdout 0.3, without
    a word, where --burn-in without mcmc was refused: now all are usage errors."""
    args = [args[0], "--task", "r", "--train", sample("regression.train"), "--iter", "1", "--quiet",
            *[sample("regression.validation") if a == "V" else a for a in args[1:]]]
    result = run(args)
    assert result.exit_code == 2 and error_line(result) == f"Error: {why}"
    ok = run(["train", "--task", "r", "--train", sample("regression.train"), "--validation",
              sample("regression.validation"), "--holdout", "0", *FAST])  # no hold-out: nothing ignored
    assert ok.exit_code == 0, ok.output


def test_a_run_diverged_by_its_initial_factors_names_init_stdev(sample):
    """--init-stdev 1e30 diverged with "try a smaller --learn-rate" alone."""
    result = run(["train", "--task", "r", "--train", sample("regression.train"), "--init-stdev", "1e30", "--iter", "2",
                  "--quiet"])
    assert result.exit_code == 3
    assert error_line(result).endswith("try a smaller --learn-rate (now 0.1) or --init-stdev (now 1e+30)")


def test_a_model_continued_in_place_and_redirections_of_dash(tmp_path, sample):
    """--save-model over --init-model continues a model in place (it is read whole first): allowed,
    as before. `-` redirected from or to an input is that input: `--train - < d --save-model d`
    and `predict d >> d` wrote over d."""
    import shutil

    model = tmp_path / "m.rafm"
    assert run(["train", "--task", "r", "--train", sample("regression.train"), *FAST, "--save-model", model]
               ).exit_code == 0
    again = run(["train", "--task", "r", "--train", sample("regression.validation"), *FAST, "--init-model", model,
                 "--save-model", model])
    assert again.exit_code == 0, again.output
    data = tmp_path / "d.libfm"
    shutil.copy(sample("regression.test"), data)
    before = listing(tmp_path)
    with open(data, "rb") as stdin:
        result = subprocess.run([sys.executable, "-m", "rafmcli", "train", "--task", "r", "--train", "-", *FAST,
                                 "--save-model", str(data)], stdin=stdin, capture_output=True, text=True,
                                env=child_env())
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        f"Error: --save-model names the input --train ({data}): rafm never writes over its inputs")
    with open(data, "ab") as stdout:
        result = subprocess.run([sys.executable, "-m", "rafmcli", "predict", "--model", str(model), str(data)],
                                stdout=stdout, stderr=subprocess.PIPE, text=True, env=child_env())
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        "Error: --out names the input FILE (-): rafm never writes over its inputs")
    assert listing(tmp_path) == before
