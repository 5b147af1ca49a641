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

The workers stay in rafm's process group, so the terminal's job control
applies to them as to rafm (Ctrl-Z stops them all, ``fg`` continues them
all, in the kernel). They ignore SIGINT, SIGTERM and SIGHUP: a signal sent to
the group (Ctrl-C, a hangup, ``kill -- -PGID``) is the parent's to act on,
and it stops them with SIGKILL, which nothing can ignore or block. They die
with the parent (Linux).
"""

import os
import pickle
import signal
import sys
import traceback
from contextlib import contextmanager
from multiprocessing import connection

import click

from rafmcli import signals

# blocked while workers start, where there is a signal mask (POSIX)
BLOCKED = set(signals.HANDLED) if hasattr(signal, "pthread_sigmask") else set()


class WorkerDied(click.ClickException):
    """A worker process ended without its result (killed: out of memory?): exit 1, nothing written."""

    def __init__(self, pid, exitcode, busy):
        if exitcode is not None and exitcode < 0:
            try:
                how = f"was killed by {signal.Signals(-exitcode).name}"
            except ValueError:
                how = f"was killed by signal {-exitcode}"
            if exitcode == -getattr(signal, "SIGKILL", 9):
                how += " (out of memory?)"
        else:
            how = f"exited with status {exitcode}"
        during = " before it finished its trial" if busy else ""
        super().__init__(f"worker process {pid} {how}{during}; nothing written")


class RemoteTraceback(Exception):
    """The traceback of a worker's exception, shown as the cause of the one the parent raises."""

    def __str__(self):
        return "\n" + self.args[0]


def die_with(parent):
    """SIGKILL when the parent's thread that started this process ends, with the parent or
    not (Linux: PR_SET_PDEATHSIG), so :class:`Workers` must be used and closed by the thread
    that made it; elsewhere nothing. Without it a worker whose parent was killed ran the
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
def _blocked():
    """BLOCKED blocked in this thread (and the children it starts); yields the mask before
    (None where there is no mask), which it restores."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED) if BLOCKED else None
    try:
        yield before
    finally:
        if BLOCKED:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _portable(exc):
    """``exc`` if it survives the trip through the pipe, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _serve(conn, parent, mask, initializer, initargs, work):
    """A worker's life: ignore the signals that are the parent's to act on, run
    ``initializer(*initargs)``, then answer each job read from ``conn`` with
    (True, work(job)) or (False, (the exception, its traceback)) until the parent
    closes the pipe.

    It starts with them blocked (:class:`Workers`): ignoring one discards it if it is
    pending, so a Ctrl-C while the worker started prints no KeyboardInterrupt traceback;
    the parent's ``mask`` is then restored."""
    for s in signals.HANDLED:
        signal.signal(s, signal.SIG_IGN)
    die_with(parent)
    if BLOCKED:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    initializer(*initargs)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the parent closed the pipe, or is gone
            return
        try:
            reply = (True, work(job))
        except Exception as exc:  # the parent raises it (MemoryError: one line, exit 2)
            reply = (False, (_portable(exc), traceback.format_exc()))
        try:
            conn.send(reply)
        except OSError:  # the parent is gone (where it does not take the worker with it)
            return


class Workers:
    """``n`` spawned worker processes, each running ``work`` on the jobs it is given.

    Started with SIGINT, SIGTERM and SIGHUP blocked (children inherit the mask) and the
    parent's own signals held until all have started; a signal meanwhile stops the ones
    started. multiprocessing's resource tracker starts first and keeps SIGHUP blocked (it
    ignores SIGINT and SIGTERM itself): a hangup killed it, and its replacement printed
    tracebacks."""

    def __init__(self, n, initializer, initargs, work):
        import multiprocessing
        from multiprocessing import resource_tracker

        context = multiprocessing.get_context("spawn")
        self.processes, self.pipes = [], []
        try:
            with signals.held(), _blocked() as mask:
                if BLOCKED:  # POSIX: the tracker unblocks SIGINT and SIGTERM when it starts one
                    resource_tracker.ensure_running()
                    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)
                for _ in range(n):
                    ours, theirs = context.Pipe()
                    self.pipes.append(ours)
                    args = (theirs, os.getpid(), mask, initializer, initargs, work)
                    process = context.Process(target=_serve, args=args, daemon=True)
                    process.start()
                    theirs.close()
                    self.processes.append(process)
        except BaseException:  # a signal held until the end of the block, too
            self.close()
            raise

    def results(self, jobs, deadline=None):
        """Yield ``work(job)`` for each job as the workers finish them (in any order).
        Raises the job's exception, :class:`WorkerDied`, or TimeoutError once
        ``time.perf_counter()`` passes ``deadline``; then, or if the caller stops early,
        the workers are stopped (an answer still to come could not be told from the
        answer to a later job)."""
        try:
            yield from self._results(jobs, deadline)
        except BaseException:
            self.close()
            raise

    def _results(self, jobs, deadline):
        import time

        if jobs and not self.processes:
            raise RuntimeError("the workers were stopped")
        waiting = list(reversed(jobs))
        busy = {}  # pipe -> its process
        idle = list(zip(self.pipes, self.processes))
        while waiting or busy:
            timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
            if timeout == 0.0:
                raise TimeoutError
            while waiting and idle:
                pipe, process = idle.pop()
                try:
                    pipe.send(waiting.pop())
                except OSError:  # its end is closed: the worker is gone
                    process.join()
                    raise WorkerDied(process.pid, process.exitcode, busy=False) from None
                busy[pipe] = process
            ready = connection.wait(list(busy) + [p.sentinel for p in busy.values()], timeout)
            if not ready:
                raise TimeoutError
            for pipe, process in list(busy.items()):
                if pipe not in ready and process.sentinel not in ready:
                    continue
                del busy[pipe]
                try:
                    ok, value = pipe.recv()  # a result sent before it died is still read
                except (EOFError, OSError):
                    process.join()
                    raise WorkerDied(process.pid, process.exitcode, busy=True) from None
                if not ok:
                    exc, text = value
                    raise exc from RemoteTraceback(text)
                idle.append((pipe, process))
                yield value

    def close(self):
        """Stop every worker (its pipe closed, SIGKILL: nothing shared can block it, nothing
        it inherited can ignore it) and wait for it."""
        for pipe in self.pipes:
            pipe.close()
        for process in self.processes:
            if process.exitcode is None:
                process.kill()
        for process in self.processes:
            process.join()
        self.processes, self.pipes = [], []
