"""SIGINT, SIGTERM and SIGHUP end a command cleanly: exit 128 + N, nothing left behind.

The handler raises :class:`~rafmcli.errors.Terminated`, so every ``finally:``
and ``with`` block on the way out runs (temporary output files, spooled
standard input). Once one signal is being handled, later ones are ignored so
that the clean-up itself cannot be cut short; a critical section such as
renaming staged outputs into place runs under :func:`held`, which defers a
signal to its end, and so do numba's steps that Python must not leave half done
(:func:`hold_through`). Python drops an exception raised where no caller can
catch it (a ``__del__``, a weakref or ctypes callback): a signal whose
Terminated was dropped is sent again a moment later (:func:`handled`). Signals
ignored when rafm starts (``nohup``) stay ignored. Once a command has put its
outputs in place (:func:`committed`), "128 + N: nothing written" can no longer hold:
signals are ignored from then on, to the process's end. Before a command starts,
the ``rafm`` process's own handler ends it at once (:func:`for_the_process`).

This module imports no more than the standard library's signal support, so that the
process can install its handler before it imports click and the commands.
"""

import functools
import os
import signal
import sys
import threading
from contextlib import contextmanager

HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
RESEND_SECONDS = 0.001  # from a Terminated that Python dropped to its signal sent again


class _State:
    held = 0            # nesting depth of held()
    pending = None      # a signal that arrived while held
    unwinding = False   # Terminated raised, or the block ending: the handler ignores signals
    dropped = None      # a signal whose Terminated Python dropped (handled() sends it again)
    raised = None       # the last signal whose Terminated the handler raised
    resend = ()         # the timers sending it
    committed = False   # the command's outputs are in place: the handler ignores signals
    inside = False      # in a handled() block (committed() means nothing outside one: the API)


_FIELDS = ("held", "pending", "unwinding", "dropped", "raised", "resend", "committed", "inside")


def _saved():
    return {name: getattr(_State, name) for name in _FIELDS}


def _restore(saved):
    for name, value in saved.items():
        setattr(_State, name, value)


_AT_START = _saved()  # the state outside any block


def _terminate(signum):
    from rafmcli.errors import Terminated

    _State.unwinding, _State.dropped, _State.raised = True, None, signum
    raise Terminated(signum)


def _handler(signum, frame):
    if _State.unwinding or _State.committed:
        return
    if _State.held:
        _State.pending = _State.pending or signum
        return
    _terminate(signum)


def _outside(signum, frame):
    os._exit(128 + signum)


def for_the_process():
    """Install the ``rafm`` process's handler for the times no command runs, from its own
    first lines (Python's start before them, about 0.07 s, is Python's): before a command
    starts (rafm imports click and its commands), and after one that wrote nothing, a
    signal ends the process at once with 128 + N, nothing written. After a command that
    put its outputs in place, :func:`handled` leaves the signals ignored instead: SIG_IGN
    outlasts the interpreter's shutdown (about 50 ms, where SIGTERM's default action gave
    143 with the outputs in place), which resets Python-level handlers to the default.
    Ignored signals stay ignored."""
    for s in HANDLED:
        if signal.getsignal(s) != signal.SIG_IGN:
            signal.signal(s, _outside)


@contextmanager
def handled():
    """Install the handler for the duration of a command (main thread only), then restore.

    A signal the parent told us to ignore stays ignored (``nohup`` ignores
    SIGHUP; a non-interactive shell's background jobs ignore SIGINT).

    Under it, sys.unraisablehook sends the signal of a Terminated that Python dropped
    to the main thread again RESEND_SECONDS later (a timer thread), to be raised in
    whatever code runs then, again if that drops it too. (Lost, the signal also left the
    handler believing the command was unwinding, and every later one was ignored.) Other
    exceptions go to the hook before, but for those dropped while a signal ends the command.
    A signal dropped as the block ends is raised there, and so is one whose Terminated was
    swallowed (C code that clears whatever a Python callback raised: the handler raised,
    yet the command went on to its end, click's SystemExit included) or replaced by another
    exception (numba's C import turned one into ImportError): the command ends by the
    signal, not with that exception's traceback. Nested, an inner block leaves the outer's
    state as it found it.
    After :func:`committed` signals are ignored in the block, and where the block found
    :func:`for_the_process`'s handler it leaves them ignored.
    """
    from rafmcli.errors import Terminated

    try:
        previous = {s: signal.signal(s, _handler) for s in HANDLED if signal.getsignal(s) != signal.SIG_IGN}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    previous_hook, main, outer = sys.unraisablehook, threading.get_ident(), _saved()

    def resend_dropped(unraisable):
        if not isinstance(unraisable.exc_value, Terminated) or not hasattr(signal, "pthread_kill"):
            if _swallowed() is None:  # else a signal ends the command: what Python drops on the way out
                previous_hook(unraisable)  # (llvmlite's half-detached objects) is not shown
            return
        _State.dropped = unraisable.exc_value.signum
        timer = threading.Timer(RESEND_SECONDS, signal.pthread_kill, (main, _State.dropped))
        timer.daemon = True
        try:  # still unwinding: a signal while the timer starts cannot raise in this hook
            timer.start()
            _State.resend += (timer,)
        finally:
            _State.unwinding = False

    sys.unraisablehook = resend_dropped
    _restore({**_AT_START, "inside": True})
    swallowed = None
    try:
        yield
        swallowed = _swallowed()
    except Terminated:
        raise
    except BaseException:  # click's SystemExit ends every command, the ones that went well too
        swallowed = _swallowed()  # or C code replaced the Terminated with its own exception
        if swallowed is None:
            raise
    finally:
        _State.unwinding = True  # a signal from here on (or a timer's) is ignored
        for timer in _State.resend:
            timer.cancel()
            timer.join()  # a signal it sent has met the handler once this returns
        sys.unraisablehook = previous_hook
        committed_here = _State.committed
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if committed_here and h is _outside else h)
        dropped = None if committed_here else _State.dropped or swallowed
        _restore(outer)
        if dropped is not None:  # the outer block's state stays as it was (not unwinding)
            raise Terminated(dropped)


def _swallowed():
    """The signal whose Terminated the handler raised and something swallowed, or None: the
    handler raised (unwinding, not since dropped: that resets it), yet the command goes on
    or ends with another exception.
    Seen about once in 200 Ctrl-Cs while ``rafm tune`` imported its kernels: CPython clears
    the exception of a Python callback in places (``PyObject_HasAttr``, ``PyDict_GetItem``)."""
    if _State.inside and _State.unwinding and not _State.committed:
        return _State.raised
    return None


def raise_lost():
    """Raise now, on the main thread, a signal whose Terminated was lost: dropped by Python and
    not raised since (its resend is late), or swallowed (:func:`_swallowed`). Outputs.commit
    calls it before it renames anything, as the signal came first; long loops call it at each
    step (epochs, MCMC and ALS sweeps, tune's results, the reader's blocks), so that such a
    signal ends the command within a step rather than at its end, and later ones count again."""
    if threading.current_thread() is not threading.main_thread():
        return
    if _State.inside and _State.dropped is not None and not _State.unwinding:
        _terminate(_State.dropped)
    lost = _swallowed()
    if lost is not None:
        _terminate(lost)


def committed():
    """The command's outputs are in place (io.output.Outputs.commit, under :func:`held`): a
    signal held until now, or arriving later, is ignored; the command ends as it would.
    Nothing outside a :func:`handled` block (the Python API saving a model)."""
    if _State.inside:
        _State.committed, _State.pending = True, None


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
            _terminate(signum)


def hold_through(owner, name):
    """Run the method ``owner.name`` (numba's, where Python must not stop half way) under
    :func:`held` on the main thread, whose handler alone raises; nothing if ``owner`` has
    no such method (another numba version)."""
    method = getattr(owner, name, None)
    if method is None:
        return

    @functools.wraps(method)
    def method_held(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return method(*args, **kwargs)
        with held():
            return method(*args, **kwargs)

    setattr(owner, name, method_held)
