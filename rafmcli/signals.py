"""SIGINT, SIGTERM and SIGHUP end a command cleanly: exit 128 + N, nothing left behind.

The handler raises :class:`~rafmcli.errors.Terminated`, so every ``finally:``
and ``with`` block on the way out runs (temporary output files, spooled
standard input). Once one signal is being handled, later ones are ignored so
that the clean-up itself cannot be cut short; a critical section such as
renaming staged outputs into place runs under :func:`held`, which defers a
signal to its end, and so does numba's finalizing of a kernel's machine code
(:func:`hold_through_finalize`). Python drops an exception raised where no caller
can catch it (a ``__del__``, a weakref or ctypes callback); Terminated dropped
there is raised again a moment later (:func:`_unraisable`). Signals ignored when
rafm starts (``nohup``) stay ignored.
"""

import functools
import signal
import sys
import threading
from contextlib import contextmanager

from rafmcli.errors import Terminated

HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
REDELIVER_SECONDS = 0.001  # from Terminated dropped by Python to its SIGALRM


class _State:
    held = 0            # nesting depth of held()
    pending = None      # a signal that arrived while held
    unwinding = False   # Terminated already raised
    dropped = None      # a signal whose Terminated Python dropped, raised again by SIGALRM
    unraisable = None   # sys.unraisablehook before handled()


def _handler(signum, frame):
    if _State.unwinding:
        return
    if _State.held:
        _State.pending = _State.pending or signum
        return
    _State.unwinding = True
    raise Terminated(signum)


def _unraisable(unraisable):
    """sys.unraisablehook under :func:`handled`: Terminated raised where Python drops it is
    raised again REDELIVER_SECONDS later by SIGALRM, in whatever code runs then (again if
    that drops it too); any other exception goes to the previous hook. Without this the
    signal was lost and, the handler thinking the command was unwinding, so was every later one."""
    if isinstance(unraisable.exc_value, Terminated):
        _State.unwinding, _State.dropped = False, unraisable.exc_value.signum
        signal.setitimer(signal.ITIMER_REAL, REDELIVER_SECONDS)
    else:
        _State.unraisable(unraisable)


def _redeliver(_signum, frame):
    """SIGALRM: the dropped signal, handled as it arrives now."""
    dropped, _State.dropped = _State.dropped, None
    if dropped is not None:
        _handler(dropped, frame)


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
    alarm = hasattr(signal, "setitimer")
    if alarm:
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, _redeliver)
        _State.unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable
    _State.held, _State.pending, _State.unwinding, _State.dropped = 0, None, False, None
    try:
        yield
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.unraisablehook = _State.unraisable
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
