"""Worker processes for `rafm tune`, each with a pipe of its own.

multiprocessing.Pool shares one task queue among its workers, guarded by a lock.
A worker killed while it waited for a task died holding that lock, and the
parent's ``Pool.terminate`` then waited for it for ever; a worker killed
during a task (the out-of-memory killer) was replaced silently and its task
never came back, so the parent waited for ever too. Here each worker has its
own pipe: a job goes to an idle worker, its result comes back on that pipe,
and the parent waits on the pipes and on the processes' sentinels at once.
No lock is shared, so stopping the workers never blocks, and a worker that
dies ends the search with :class:`WorkerDied` instead of a hang.

The workers lead process groups of their own, so a signal sent to rafm's
group (Ctrl-C, a hangup, ``kill -- -PGID``) reaches the parent alone, which
stops them (SIGTERM). They die with the parent (Linux), and Ctrl-Z stops
them with it (:class:`Workers` forwards SIGTSTP and SIGCONT).
"""

import os
import signal
import sys
import traceback
from contextlib import contextmanager
from multiprocessing import connection

import click

from rafmcli import signals

# signals sent to a whole process group (Ctrl-C, a hangup, ``kill -- -PGID``); POSIX only
GROUP_SIGNALS = set(signals.HANDLED) if hasattr(signal, "pthread_sigmask") else set()
STOP = getattr(signal, "SIGTSTP", None)  # the terminal's Ctrl-Z (POSIX)
CLOSE_SECONDS = 10  # from a worker's SIGTERM to its SIGKILL


class WorkerDied(click.ClickException):
    """A worker process ended without its result (killed: out of memory?): exit 1, nothing written."""

    def __init__(self, pid, exitcode):
        if exitcode is not None and exitcode < 0:
            try:
                how = f"was killed by {signal.Signals(-exitcode).name}"
            except ValueError:
                how = f"was killed by signal {-exitcode}"
            if exitcode == -getattr(signal, "SIGKILL", 9):
                how += " (out of memory?)"
        else:
            how = f"exited with status {exitcode}"
        super().__init__(f"worker process {pid} {how} before it finished its trial; nothing written")


class RemoteTraceback(Exception):
    """The traceback of a worker's exception, shown as the cause of the one the parent raises."""

    def __str__(self):
        return "\n" + self.args[0]


def die_with(parent):
    """SIGKILL when the parent dies (Linux: PR_SET_PDEATHSIG), as a signal to the whole
    group once did; elsewhere nothing. Without it a worker whose parent was killed ran the
    task it had to its end."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before
        os._exit(1)


@contextmanager
def _group_signals_blocked():
    """GROUP_SIGNALS blocked in this thread (and the children it starts); yields the mask
    before (None where there is no mask), which it restores."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS) if GROUP_SIGNALS else None
    try:
        yield before
    finally:
        if GROUP_SIGNALS:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _serve(conn, parent, mask, initializer, initargs, work):
    """A worker's life: leave rafm's process group, run ``initializer(*initargs)``, then
    answer each job read from ``conn`` with (True, work(job)) or (False, the exception)
    until the parent closes the pipe.

    It starts with GROUP_SIGNALS blocked (:class:`Workers`): a SIGINT or SIGHUP the group
    got meanwhile is discarded (the parent had it too). SIGTERM, the parent's stop, gets its
    default action and is unblocked whatever rafm inherited (a supervisor that ignores or
    blocks it: the worker would never stop), so a pending one ends the worker at once; the
    rest of the parent's ``mask`` is restored."""
    if GROUP_SIGNALS:
        for s in GROUP_SIGNALS - {signal.SIGTERM}:
            signal.signal(s, signal.SIG_IGN)  # discards a pending one
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgrp()
        die_with(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, set(mask) - {signal.SIGTERM})
    initializer(*initargs)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        try:
            reply = (True, work(job))
        except Exception as exc:  # the parent raises it (MemoryError: one line, exit 2)
            reply = (False, (exc, traceback.format_exc()))
        conn.send(reply)


class Workers:
    """``n`` spawned worker processes, each running ``work`` on the jobs it is given.

    Started with the group's signals blocked (children inherit the mask): a Ctrl-C before a
    worker's initializer ran printed its KeyboardInterrupt traceback. multiprocessing's
    resource tracker starts first and keeps SIGHUP blocked (it ignores SIGINT and SIGTERM
    itself): a hangup killed it, and its replacement printed tracebacks. The parent's own
    signals wait (held) until the workers are started."""

    def __init__(self, n, initializer, initargs, work):
        import multiprocessing
        from multiprocessing import resource_tracker

        context = multiprocessing.get_context("spawn")
        self.processes, self.pipes = [], []
        self._previous_stop = None
        with signals.held(), _group_signals_blocked() as mask:
            if GROUP_SIGNALS:  # POSIX: the tracker unblocks SIGINT and SIGTERM when it starts one
                resource_tracker.ensure_running()
                signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
            try:
                for _ in range(n):
                    ours, theirs = context.Pipe()
                    args = (theirs, os.getpid(), mask, initializer, initargs, work)
                    process = context.Process(target=_serve, args=args, daemon=True)
                    process.start()
                    theirs.close()
                    self.processes.append(process)
                    self.pipes.append(ours)
            except BaseException:
                self.close()
                raise
        if STOP is not None:
            self._previous_stop = signal.signal(STOP, self._stop)

    def results(self, jobs, deadline=None):
        """Yield ``work(job)`` for each job as the workers finish them (in any order).
        Raises the job's exception, :class:`WorkerDied`, or TimeoutError once
        ``time.perf_counter()`` passes ``deadline``."""
        import time

        waiting = list(reversed(jobs))
        busy = {}  # pipe -> its process
        idle = list(zip(self.pipes, self.processes))
        while waiting or busy:
            while waiting and idle:
                pipe, process = idle.pop()
                try:
                    pipe.send(waiting.pop())
                except (BrokenPipeError, ConnectionResetError):
                    process.join()
                    raise WorkerDied(process.pid, process.exitcode) from None
                busy[pipe] = process
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready = connection.wait(list(busy) + [p.sentinel for p in busy.values()], timeout)
            if not ready:
                raise TimeoutError
            for pipe in [r for r in ready if r in busy]:
                process = busy.pop(pipe)
                try:
                    ok, value = pipe.recv()
                except (EOFError, ConnectionResetError):
                    process.join()
                    raise WorkerDied(process.pid, process.exitcode) from None
                if not ok:
                    exc, text = value
                    raise exc from RemoteTraceback(text)
                idle.append((pipe, process))
                yield value
            for pipe, process in busy.items():
                if process.sentinel in ready and not pipe.poll():
                    process.join()
                    raise WorkerDied(process.pid, process.exitcode)

    def close(self):
        """Stop every worker and wait for it: its pipe closed (an idle one returns), SIGTERM
        (nothing shared can block it), SIGKILL for one still there after CLOSE_SECONDS."""
        if self._previous_stop is not None:
            signal.signal(STOP, self._previous_stop)
            self._previous_stop = None
        for pipe in self.pipes:
            pipe.close()
        for process in self.processes:
            if process.exitcode is None:
                process.terminate()
        if STOP is not None:
            self._signal_workers(signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
        for process in self.processes:
            process.join(CLOSE_SECONDS)
            if process.exitcode is None:
                process.kill()
                process.join()
        self.processes, self.pipes = [], []

    def _stop(self, signum, frame):
        """Ctrl-Z: the workers are outside the terminal's process group, so stop them, then
        the parent as the terminal asked; when it is continued, continue them."""
        self._signal_workers(signal.SIGSTOP)
        handler = signal.signal(STOP, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), STOP)  # returns once continued (SIGCONT)
        finally:
            signal.signal(STOP, handler)
            self._signal_workers(signal.SIGCONT)

    def _signal_workers(self, signum):
        for process in self.processes:
            try:
                os.kill(process.pid, signum)
            except (ProcessLookupError, TypeError):  # gone, or not started
                continue
