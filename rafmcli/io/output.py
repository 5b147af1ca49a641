"""Output files: checked before any work, staged, committed together at the end.

Every file rafm writes (model, predictions, ``--rlog``, tables) goes through
an :class:`Outputs` transaction:

- A regular file, or a path that does not exist yet, is written to a
  temporary file beside it (``.NAME.XXXXXXXX.rafm-tmp``), flushed to disk and
  renamed over it at commit: readers see the old file or the new one, never
  half of one. A new file gets mode 0666 & ~umask; a replaced file keeps its
  mode (and its owner, where rafm may set it).
- Anything else that exists (a character device such as /dev/null, a FIFO, a
  process substitution ``>(cat)``, a socket) and every symbolic link is
  written through in place at commit, never renamed over: it is not ours to
  replace.
- ``-`` is standard output. A reader of a stream that goes away
  (``rafm predict ... | head``) ends the writing quietly: it has what it
  asked for.

Nothing is committed until every output is staged; write-through targets are
written first, then every rename happens at once (signals deferred). Any
failure, or SIGINT/SIGTERM/SIGHUP, removes every temporary file. An output
that cannot be written is ``FILE: cannot write: why`` (OutputError, exit 2).
"""

import contextlib
import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from rafmcli import signals
from rafmcli.errors import OutputError, printable

STDOUT = "-"
TEMP_SUFFIX = ".rafm-tmp"
PREDICTION_FORMAT = "%.9g"
_REPLACE, _THROUGH, _STDOUT = "replace", "through", "stdout"


def _stdout_closed():
    """True when the process was started with standard output closed (``>&-``)."""
    if sys.stdout is None:
        return True
    try:
        os.fstat(sys.stdout.fileno())
    except (AttributeError, ValueError):  # not a real file (a test runner's buffer): open
        return False
    except OSError:
        return True
    return False


def _stat(path):
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _kind(path, st):
    if path == STDOUT:
        return _STDOUT
    if os.path.islink(path) or (st is not None and not stat.S_ISREG(st.st_mode)):
        return _THROUGH
    return _REPLACE


def check_target(path):
    """Raise ValueError(why) if ``path`` cannot be written; call before any work.

    A directory is refused; a new or regular file needs an existing, writable
    directory (the rename happens there); a write-through target must be
    writable itself.
    """
    if path == STDOUT:
        if _stdout_closed():
            raise ValueError("standard output is closed")
        return
    fd = _inherited_fd(path)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            raise ValueError(f"file descriptor {fd} is not open") from None
        return
    try:
        st = _stat(path)
    except OSError as exc:
        raise ValueError((exc.strerror or str(exc)).lower()) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ValueError("is a directory")
    if st is not None and not os.access(path, os.W_OK):
        raise ValueError("permission denied")
    if st is not None and _kind(path, st) == _THROUGH:
        return
    target = os.path.realpath(path) if os.path.islink(path) else path  # a dangling link creates its target
    directory = os.path.dirname(target) or "."
    if not os.path.isdir(directory):
        raise ValueError(f"no such directory ({directory})")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"directory is not writable ({directory})")


_FD_LINK = re.compile(r"/(?:proc/self|proc/\d+|dev)/fd/(\d+)")


def _inherited_fd(path):
    """N when ``path`` is, or links to, ``/dev/fd/N`` or ``/proc/self/fd/N``
    (``/dev/stderr``...): rafm then writes to its own descriptor N, sharing the
    shell's file offset, instead of reopening (and truncating) what N names."""
    for _ in range(40):
        path = os.path.abspath(path)
        match = _FD_LINK.fullmatch(path)
        if match and (not path.startswith("/proc/") or path.split("/")[2] in ("self", str(os.getpid()))):
            return int(match.group(1))
        if not os.path.islink(path):
            return None
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    return None


class _Stream:
    """A write-only view of a file, stdout or pipe that cannot seek (writers
    must stream: zipfile then writes data descriptors) and goes quiet once its
    reader has gone (EPIPE)."""

    def __init__(self, fh, is_stdout):
        self.fh, self.is_stdout, self.broken = fh, is_stdout, False

    def write(self, data):
        if not self.broken:
            try:
                self.fh.write(data)
            except BrokenPipeError:
                self._gone()
        return len(data)

    def flush(self):
        if not self.broken:
            try:
                self.fh.flush()
            except BrokenPipeError:
                self._gone()

    def writable(self):
        return True

    def close(self):
        self.flush()
        if not self.is_stdout:
            try:
                self.fh.close()
            except BrokenPipeError:
                pass

    def _gone(self):
        self.broken = True
        if self.is_stdout:  # the interpreter's final flush must not fail either
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


class _Reported:
    """A handle of :meth:`Outputs.open` whose failed writes (a full disk, /dev/full) are
    ``FILE: cannot write: why`` (OutputError), not a traceback."""

    def __init__(self, fh, path):
        self.fh, self.path = fh, path

    def write(self, data):
        with _writing(self.path):
            return self.fh.write(data)

    def flush(self):
        with _writing(self.path):
            self.fh.flush()

    def __getattr__(self, name):
        return getattr(self.fh, name)


@dataclass
class _Entry:
    path: str
    kind: str
    binary: bool
    encoding: str = "utf-8"    # of a text output
    tmp: str | None = None     # staged temporary file (regular targets)
    fh: object = None          # open handle (temp file or stream)
    writer: object = None      # deferred writer(fh) of a stream target


@contextlib.contextmanager
def _writing(path):
    """OSError while writing ``path`` -> OutputError ``path: cannot write: why``."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"{printable(path)}: cannot write: {exc.strerror or exc}") from None


def _mode_for(path):
    """(mode, owner or None): the replaced file's, or 0666 & ~umask for a new file."""
    st = _stat(path)
    if st is not None:
        return stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask, None


class Outputs:
    """The files one command writes, committed together at the end or not at all.

    ``with Outputs() as outputs:`` commits when the block ends normally (or
    raises one of ``commit_on``) and removes every temporary file when it
    raises anything else (or a signal arrives)::

        with Outputs() as outputs:
            log = outputs.open(rlog_path)                       # a file to write now
            ...
            outputs.write(model_path, partial(write_model, model), binary=True)
    """

    def __init__(self, commit_on=()):
        self._entries = []
        self.commit_on = commit_on  # exceptions after which what is staged is still committed

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None or issubclass(kind, self.commit_on):
            self.commit()
        else:
            self.abort()

    def open(self, path, binary=False, encoding="utf-8"):
        """A file object to write ``path``'s content into now.

        Regular targets get a temporary file; stream targets (write-through,
        ``-``) are opened now and written as the caller goes (a FIFO's reader
        sees a log line by line).
        """
        entry = self._stage(path, binary, encoding)
        if entry.kind != _REPLACE:
            with _writing(path):
                entry.fh = self._open_stream(entry)
        return _Reported(entry.fh, path)

    def write(self, path, writer, binary=False, encoding="utf-8"):
        """Stage ``writer(fh)`` as ``path``'s content: run now into a temporary
        file beside a regular target, or at commit for a stream target."""
        entry = self._stage(path, binary, encoding)
        if entry.kind == _REPLACE:
            with _writing(path):
                writer(entry.fh)
                self._finish_temp(entry)
        else:
            entry.writer = writer

    def commit(self):
        """Write the stream targets, then rename every staged file into place. A signal whose
        Terminated was lost is raised first, and again before the renames (signals.raise_lost)."""
        try:
            signals.raise_lost()
            for entry in self._entries:
                if entry.kind == _REPLACE:
                    continue
                with _writing(entry.path):
                    if entry.writer is not None:
                        entry.fh = entry.fh or self._open_stream(entry)
                        entry.writer(entry.fh)
                    entry.fh.close()
                    entry.fh = None
            staged = [e for e in self._entries if e.kind == _REPLACE]
            for entry in staged:
                with _writing(entry.path):
                    self._finish_temp(entry)
            signals.raise_lost()
            with signals.held():
                for entry in staged:
                    with _writing(entry.path):
                        mode, owner = _mode_for(entry.path)
                        if owner is not None and owner != (os.geteuid(), os.getegid()):
                            try:
                                os.chown(entry.tmp, *owner)
                            except OSError:
                                pass
                        os.chmod(entry.tmp, mode)
                        os.replace(entry.tmp, entry.path)
                    entry.tmp = None
                signals.committed()
        except BaseException:
            self.abort()
            raise
        self._entries = []

    def abort(self):
        """Remove every temporary file and close every stream; commit nothing."""
        entries, self._entries = self._entries, []
        with signals.held():
            for entry in entries:
                if entry.kind == _REPLACE and entry.fh is not None:
                    try:
                        entry.fh.close()
                    except OSError:
                        pass
                if entry.tmp is not None:
                    try:
                        os.unlink(entry.tmp)
                    except FileNotFoundError:
                        pass
        for entry in entries:
            if entry.kind != _REPLACE and entry.fh is not None:
                try:
                    entry.fh.close()
                except OSError:
                    pass

    def _stage(self, path, binary, encoding):
        path = os.fspath(path)
        with _writing(path):
            entry = _Entry(path, _kind(path, _stat(path)), binary, encoding)
            if entry.kind == _REPLACE:
                directory = os.path.dirname(os.path.abspath(path))
                name = os.path.basename(path)[:100]
                with signals.held():  # the temporary file is known before a signal can strike
                    fd, entry.tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=directory)
                    self._entries.append(entry)
                entry.fh = os.fdopen(fd, "wb") if binary else open(fd, "w", encoding=encoding)
            else:
                self._entries.append(entry)
        return entry

    @staticmethod
    def _open_stream(entry):
        if entry.kind == _STDOUT:
            fh = sys.stdout.buffer if entry.binary else sys.stdout
            return _Stream(fh, is_stdout=True)
        fd = _inherited_fd(entry.path)
        target = entry.path if fd is None else os.dup(fd)
        mode, encoding = ("wb", None) if entry.binary else ("w", entry.encoding)
        return _Stream(open(target, mode, encoding=encoding), is_stdout=False)

    @staticmethod
    def _finish_temp(entry):
        if entry.fh is not None:
            entry.fh.flush()
            os.fsync(entry.fh.fileno())
            entry.fh.close()
            entry.fh = None


FORMAT_BATCH = 1 << 20  # predictions formatted at a time (24 bytes of buffer each)
FORMAT_CHUNK = 1 << 14  # predictions a thread formats in one go


def format_predictions(fh, predictions):
    """One prediction a line into the binary file ``fh``, byte for byte as
    ``PREDICTION_FORMAT`` (C's ``printf("%.9g")``) writes them, formatted on
    every core (kernels/format.py). NaN has no line: ValueError, nothing written."""
    from rafmcli import threads
    from rafmcli.kernels.format import LINE_MAX, format_lines

    values = np.ascontiguousarray(predictions, dtype=np.float64)
    if np.isnan(values).any():
        raise ValueError(f"{int(np.isnan(values).sum()):,} predictions are NaN")
    n = values.shape[0]
    out = np.empty((min(n, FORMAT_BATCH) + 64) * LINE_MAX, dtype=np.uint8)
    for start in range(0, n, FORMAT_BATCH):
        part = values[start:start + FORMAT_BATCH]
        chunks = min(64, part.shape[0] // FORMAT_CHUNK + 1)
        ends = np.empty(chunks, dtype=np.int64)
        threads.spread(format_lines, chunks, part, chunks, out, ends)
        stride = (part.shape[0] // chunks + 1) * LINE_MAX
        for c in range(chunks):
            fh.write(out[c * stride:ends[c]])


def write_predictions(path, predictions):
    """Write a prediction file on its own (``-`` is standard output)."""
    with Outputs() as outputs:
        outputs.write(path, lambda fh: format_predictions(fh, predictions), binary=True)


@contextlib.contextmanager
def text_output(path, encoding="utf-8"):
    """A text handle for ``path`` alone, committed whole when the block ends
    without an exception (an :class:`Outputs` of one file); ``-`` is stdout."""
    with Outputs() as outputs:
        yield outputs.open(path, encoding=encoding)
