"""SIGINT, SIGTERM and SIGHUP end a command cleanly: exit 128 + N, nothing left behind.

The handler raises :class:`~rafmcli.errors.Terminated`, so every ``finally:``
and ``with`` block on the way out runs (temporary output files, spooled
standard input). Once one signal is being handled, later ones are ignored so
that the clean-up itself cannot be cut short; a critical section such as
renaming staged outputs into place runs under :func:`held`, which defers a
signal to its end, and so does numba's finalizing of a kernel's machine code
(:func:`hold_through_finalize`). Signals ignored when rafm starts (``nohup``)
stay ignored.
"""

import functools
import signal
import threading
from contextlib import contextmanager

from rafmcli.errors import Terminated

HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class _State:
    held = 0            # nesting depth of held()
    pending = None      # a signal that arrived while held
    unwinding = False   # Terminated already raised


def _handler(signum, frame):
    if _State.unwinding:
        return
    if _State.held:
        _State.pending = _State.pending or signum
        return
    _State.unwinding = True
    raise Terminated(signum)


@contextmanager
def handled():
    """Install the handler for the duration of a command (main thread only), then restore.

    A signal the parent told us to ignore stays ignored (``nohup`` ignores
    SIGHUP; a non-interactive shell's background jobs ignore SIGINT).
    """
    try:
        previous = {s: signal.signal(s, _handler) for s in HANDLED if signal.getsignal(s) != signal.SIG_IGN}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    _State.held, _State.pending, _State.unwinding = 0, None, False
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def held():
    """Defer SIGINT/SIGTERM/SIGHUP to the end of the block (which must be short)."""
    _State.held += 1
    try:
        yield
    finally:
        _State.held -= 1
        if not _State.held and _State.pending and not _State.unwinding:
            signum, _State.pending = _State.pending, None
            _State.unwinding = True
            raise Terminated(signum)


def hold_through_finalize(codegen):
    """Run numba's finalizing of a kernel's machine code (``numba.core.codegen``'s
    ``JITCodeLibrary._finalize_specific``, compiled or loaded from the cache) under
    :func:`held` on the main thread.

    LLVM calls Python back through ctypes there, to fetch or store the kernel's object
    code, and ctypes prints and drops an exception raised in a callback: Terminated
    raised there was lost (the command went on and exited 0) or left a kernel without
    its code, which crashed (SIGSEGV) when called. Held, the signal ends the command
    just after the finalize, a few milliseconds for a cached kernel and at most a few
    seconds for a compile. Other threads never run the handler. Without that method
    (another numba) nothing changes.
    """
    library = getattr(codegen, "JITCodeLibrary", None)
    finalize = getattr(library, "_finalize_specific", None)
    if finalize is None:
        return

    @functools.wraps(finalize)
    def finalize_held(self):
        if threading.current_thread() is not threading.main_thread():
            return finalize(self)
        with held():
            return finalize(self)

    library._finalize_specific = finalize_held
