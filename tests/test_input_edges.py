"""Inputs at the edges (issue 8): files that change while read, pipes, FIFOs,
devices and sockets, empty files, signals while standard input is read.

Each test goes through the CLI and checks the exit status, the one-line
message and that nothing is left behind.
"""

import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.io import cache, reader

RAFM = [sys.executable, "-m", "rafmcli"]
ROWS = b"".join(b"%d %d:1 %d:0.5\n" % (i % 2, i % 7, 10 + i % 5) for i in range(200))


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def last_line(result):
    return result.output.strip().splitlines()[-1]


def listing(*dirs):
    return {str(d): sorted(os.listdir(d)) for d in dirs}


# ---------------------------------------------------------------- class 1


def _changes(path, how):
    if how in ("append", "append at eof"):
        with open(path, "ab") as fh:
            fh.write(ROWS)
    elif how == "truncate":
        os.truncate(path, len(ROWS) // 2)
    else:  # same size, new content
        with open(path, "r+b") as fh:
            fh.write(ROWS.replace(b":0.5", b":0.7"))


@pytest.mark.parametrize("how", ["append", "append at eof", "truncate", "rewrite"])
def test_file_changed_while_reading(tmp_path, monkeypatch, how):
    """Class 1: a file written to while rafm reads it is an error, whatever the change."""
    path = tmp_path / "grows.libfm"
    path.write_bytes(ROWS)
    os.utime(path, (1e9, 1e9))  # an old mtime, so any write moves it
    monkeypatch.setattr(reader, "BLOCK_BYTES", 256)
    real_fill, reads = reader._fill, []

    def fill(stream, view):
        got = real_fill(stream, view)
        reads.append(got)
        if (len(reads) == 1) if how != "append at eof" else (got == 0):
            _changes(path, how)
        return got

    monkeypatch.setattr(reader, "_fill", fill)
    cache_dir = os.environ["RAFM_CACHE_DIR"]
    before = listing(tmp_path, cache_dir)
    result = invoke("stats", path)
    assert result.exit_code == 2
    assert last_line(result) == f"Error: {path}: changed while reading"
    assert listing(tmp_path, cache_dir) == before


# ---------------------------------------------------------------- class 2


class FifoWriter:
    """Writes ``data`` into a FIFO once; then answers any later open with an
    empty stream, so that a reader opening it twice gets nothing (not a hang)."""

    def __init__(self, path, data):
        self.path, self.data, self.stop = path, data, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        with open(self.path, "wb") as fh:
            fh.write(self.data)
        while not self.stop.is_set():
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                time.sleep(0.005)

    def close(self):
        self.stop.set()
        self.thread.join()


@pytest.fixture
def fifo(tmp_path):
    writers = []

    def make(name, data):
        path = tmp_path / name
        os.mkfifo(path)
        writers.append(FifoWriter(path, data))
        return path

    yield make
    for w in writers:
        w.close()


def test_fifo_read_once(tmp_path, fifo):
    """Class 2: stats, train --validation and predict read a FIFO's rows once, all of them."""
    plain = tmp_path / "plain.libfm"
    plain.write_bytes(ROWS)
    expected = invoke("stats", "--json", plain).output
    assert invoke("stats", "--json", fifo("s.fifo", ROWS)).output == expected.replace(str(plain),
                                                                                     str(tmp_path / "s.fifo"))
    model = tmp_path / "m.rafm"
    result = invoke("train", "--task", "c", "--train", fifo("t.fifo", ROWS), "--validation", fifo("v.fifo", ROWS),
                    "--iter", "2", "--dim", "2", "--save-model", model)
    assert result.exit_code == 0, result.output
    assert "diverged" not in result.output
    out = tmp_path / "p.txt"
    result = invoke("predict", "--model", model, "--out", out, fifo("p.fifo", ROWS), plain)
    assert result.exit_code == 0, result.output
    assert len(out.read_text().split()) == 400
    for name in ("s.fifo", "t.fifo", "v.fifo", "p.fifo"):
        assert stat.S_ISFIFO(os.lstat(tmp_path / name).st_mode)
    only_plain = [os.path.basename(cache._entry_dir(str(plain), None))]
    assert os.listdir(os.environ["RAFM_CACHE_DIR"]) == only_plain, "only regular files are cached"


def test_fifo_with_a_bad_line(tmp_path, fifo):
    path = fifo("bad.fifo", ROWS + b"1 x:1\n" + ROWS)
    result = invoke("stats", path)
    assert result.exit_code == 2
    assert last_line(result) == f"Error: {path}:201: feature index is not a non-negative integer (x:1)"


@pytest.mark.skipif(not os.path.exists("/bin/bash"), reason="needs bash for process substitution")
def test_process_substitution_and_closed_stdin(tmp_path, sample):
    """Class 2: `rafm predict --model m <(cat test)` predicts every row; a closed stdin is an error."""
    model = tmp_path / "m.rafm"
    result = invoke("train", "--task", "r", "--train", sample("regression.train"), "--iter", "1",
                    "--save-model", model, "--quiet")
    assert result.exit_code == 0, result.output
    test = sample("regression.test")
    rafm = " ".join(map(shlex.quote, RAFM))
    script = (f"{rafm} predict --quiet --model {shlex.quote(str(model))} <(cat {shlex.quote(test)}) | wc -l; "
              f"{rafm} stats - <&-; echo status $?")
    done = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = done.stdout.split("\n")
    assert lines[0].strip() == "600"
    assert lines[1] == "status 2"
    assert done.stderr.strip() == "Error: <stdin>: cannot read: standard input is closed"


@pytest.fixture
def device(tmp_path):
    """A character device node made in tmp_path (needs CAP_MKNOD, so root)."""
    def make(name, major, minor):
        path = tmp_path / name
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
        except (PermissionError, OSError) as exc:
            pytest.skip(f"cannot make a device node here ({exc}); needs root with CAP_MKNOD")
        return path
    return make


def test_character_devices(tmp_path, device, monkeypatch):
    """Class 2: a null device reads as an empty file; an endless one (zero, urandom)
    fails fast with FILE:LINE; the nodes stay devices."""
    null, zero, rand = device("null", 1, 3), device("zero", 1, 5), device("urandom", 1, 9)
    result = invoke("stats", "--json", null)
    assert result.exit_code == 0 and '"rows": 0' in result.output
    result = invoke("train", "--task", "r", "--train", null)
    assert result.exit_code == 2 and last_line(result) == f"Error: {null}: no rows"
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 1 << 16)
    result = invoke("stats", zero)
    assert result.exit_code == 2 and last_line(result) == f"Error: {zero}:1: line longer than 1,048,576 bytes"
    result = invoke("stats", rand)
    assert result.exit_code == 2 and last_line(result).startswith(f"Error: {rand}:")
    assert last_line(result).isprintable()
    for path in (null, zero, rand):
        assert stat.S_ISCHR(os.lstat(path).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null", "urandom", "zero"]


def test_side_files_are_never_devices_nor_endless_pipes(tmp_path, device, fifo, sample, monkeypatch):
    """A model, --init-model, --meta, --levels, a libFM text model and a --rlog table on an
    endless device fail at once (zipfile read a model's /dev/zero "to the end" until memory ran
    out); a pipe is read up to side_files.PIPE_LIMIT bytes, then refused."""
    from rafmcli.io import side_files

    zero = device("zero", 1, 5)
    train, test = sample("regression.train"), sample("regression.test")
    implicit = sample("implicit.train")
    for args, what in ((("predict", "--model", zero, test), "model file"),
                       (("dump", "--model", zero), "model file"),
                       (("train", "--task", "r", "--train", train, "--init-model", zero), "model file"),
                       (("libfm", "-task", "r", "-method", "sgd", "-train", train, "-test", test, "-load_model", zero),
                        "model file"),
                       (("train", "--task", "implicit", "--train", implicit, "--meta", zero), "group file"),
                       (("train", "--task", "r", "--train", train, "--model", "rafm", "--ranks", "4,8",
                         "--levels", zero), "levels file"),
                       (("plot", zero, "-o", tmp_path / "c.png"), "--rlog file")):
        result = invoke(*args)
        assert result.exit_code == 2 and last_line(result) == f"Error: {zero}: a device, not a {what}", args
    model = tmp_path / "m.rafm"
    assert invoke("train", "--task", "r", "--train", train, "--iter", "1", "--save-model", model).exit_code == 0
    from_file = invoke("predict", "--model", model, test)
    from_pipe = invoke("predict", "--model", fifo("m.fifo", model.read_bytes()), test)  # read into memory
    assert from_pipe.exit_code == 0 and from_pipe.stdout == from_file.stdout
    model.unlink()
    monkeypatch.setattr(side_files, "PIPE_LIMIT", 1000)
    table = b"epoch\ttrain_loss\n" + b"".join(b"%d\t0.5\n" % e for e in range(1, 400))
    result = invoke("plot", fifo("long.fifo", table), "-o", tmp_path / "c.png")
    assert result.exit_code == 2
    assert last_line(result) == f"Error: {tmp_path / 'long.fifo'}: more than 1,000 bytes from a pipe: not a --rlog file"
    result = invoke("plot", fifo("short.fifo", table[:900]), "-o", tmp_path / "c.png")
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path)) == ["c.png", "long.fifo", "m.fifo", "short.fifo", "zero"]  # c: the short log
    assert stat.S_ISCHR(os.lstat(zero).st_mode)


def test_socket_path_and_socket_stdin(tmp_path):
    """Class 2: a socket file is refused at once; a socket on standard input is read like a pipe."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = tmp_path / "s.sock"
    server.bind(str(path))
    try:
        result = invoke("stats", path)
    finally:
        server.close()
    assert result.exit_code == 2
    assert last_line(result).startswith(f"Error: {path}: is a socket")
    ours, theirs = socket.socketpair()
    child = subprocess.Popen([*RAFM, "stats", "--json", "-"], stdin=theirs, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    theirs.close()
    ours.sendall(ROWS)
    ours.shutdown(socket.SHUT_WR)
    out, err = child.communicate(timeout=120)
    ours.close()
    assert child.returncode == 0, err
    assert '"rows": 200' in out


# ---------------------------------------------------------------- class 8


@pytest.mark.parametrize("content", [b"", b"# only a comment\r\n\r\n"])
@pytest.mark.parametrize("role", ["train", "validation", "validation with holdout"])
def test_empty_file_has_no_rows(tmp_path, role, content):
    """Class 8: an empty training or validation file is `FILE: no rows`, exit 2, nothing written."""
    empty = tmp_path / "empty.libfm"
    empty.write_bytes(content)
    good = tmp_path / "good.libfm"
    good.write_bytes(ROWS)
    args = ["train", "--task", "r", "--save-model", tmp_path / "m.rafm", "--rlog", tmp_path / "log.tsv",
            "--test", good, "--out", tmp_path / "p.txt"]
    if role == "train":
        args += ["--train", empty, "--validation", good]
    else:
        args += ["--train", good, "--validation", empty]
    if role == "validation with holdout":
        args += ["--holdout", "0"]  # no hold-out (one beside --validation is refused)
    before = listing(tmp_path)
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"Error: {empty}: no rows"]
    assert listing(tmp_path) == before


# ---------------------------------------------------------------- class 15


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_reading_stdin_leaves_nothing_in_tmpdir(tmp_path, signum):
    """Class 15: standard input is parsed as it arrives, never spooled to $TMPDIR;
    a signal in the middle of it leaves $TMPDIR as it was and prints no traceback."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir))
    child = subprocess.Popen([*RAFM, "stats", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
    # A blocking write of more than a pipe holds returns only once rafm is reading.
    child.stdin.write(ROWS * 400)
    child.stdin.flush()
    assert child.poll() is None
    child.send_signal(signum)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signum, err
    assert b"Traceback" not in err
    assert os.listdir(tmpdir) == []


def test_stdin_reads_in_one_pass_without_a_spool(monkeypatch):
    """Standard input is parsed as it streams in: no temporary file is made for it."""
    import tempfile

    made = []
    for name in ("NamedTemporaryFile", "TemporaryFile", "mkstemp", "mkdtemp"):
        def record(*args, _real=getattr(tempfile, name), **kwargs):
            if kwargs.get("dir") is None:  # numba checks its own cache directory with dir=
                made.append(kwargs)
            return _real(*args, **kwargs)
        monkeypatch.setattr(tempfile, name, record)
    result = CliRunner().invoke(main, ["stats", "--json", "--no-cache", "-"], input=ROWS)
    assert result.exit_code == 0 and '"rows": 200' in result.output
    assert '"nonzeros_per_row": 2.0' in result.output
    assert made == []


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_an_empty_compressed_name_reads_as_an_empty_file(tmp_path, suffix):
    """A 0-byte .gz read as no rows, a 0-byte .bz2 or .xz failed with "cannot decompress": all three
    are empty files now (`FILE: no rows` for train)."""
    empty = tmp_path / f"rows.libfm{suffix}"
    empty.write_bytes(b"")
    result = invoke("train", "--task", "r", "--train", empty)
    assert result.exit_code == 2 and result.output.splitlines() == [f"Error: {empty}: no rows"]


def test_side_file_lines_end_as_a_text_file_reads_them():
    """io.side_files.text_lines: LF, CRLF and a lone CR end a line, as Python's universal
    newlines; a blank line stays; nothing follows a last line end."""
    from rafmcli.io.side_files import text_lines

    assert text_lines(b"a\r\nb\rc\n\nd", "ascii") == ["a", "b", "c", "", "d"]
    assert text_lines(b"a\n", "ascii") == ["a"] and text_lines(b"", "ascii") == []
    assert text_lines(b"x\xff\n", "utf-8", "surrogateescape") == ["x\udcff"]
    import io

    sample = b"1\r\n2\r3\n\n4\n"
    assert text_lines(sample, "ascii") == [line.rstrip("\n") for line in io.StringIO(sample.decode(), newline=None)]
