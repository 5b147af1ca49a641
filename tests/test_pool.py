"""rafmcli.solvers.pool: tune's worker processes, one pipe each (the whole command: test_tune.py)."""

import multiprocessing
import pickle
import threading
import time
from contextlib import contextmanager

import pytest

from rafmcli.solvers import pool


def test_every_job_is_answered_once_whichever_worker_takes_it():
    workers = pool.Workers(2, int, (), abs)  # builtins: nothing for the spawned workers to import
    try:
        assert sorted(workers.results(list(range(-20, 0)))) == list(range(1, 21))
        assert sorted(workers.results([-3])) == [3]  # and again: the workers wait for more
    finally:
        workers.close()
    assert multiprocessing.active_children() == []


def test_a_jobs_exception_is_raised_with_the_workers_traceback():
    workers = pool.Workers(1, int, (), int)
    try:
        answers = workers.results(["7", "not a number"])
        assert next(answers) == 7
        with pytest.raises(ValueError, match="not a number") as raised:
            next(answers)
        assert isinstance(raised.value.__cause__, pool.RemoteTraceback)
        assert "Traceback" in str(raised.value.__cause__)
    finally:
        workers.close()


def test_after_an_exception_the_workers_are_stopped_not_reused():
    """A worker still busy when another's job raised answered a later call's job with its old
    answer: the workers are stopped instead, and a later call says so."""
    workers = pool.Workers(2, int, (), eval)
    try:
        with pytest.raises(ZeroDivisionError):
            list(workers.results(["__import__('time').sleep(0.5) or 'slow'", "1/0"]))
        assert multiprocessing.active_children() == []
        with pytest.raises(RuntimeError, match="stopped"):
            list(workers.results(["'fresh'"]))
    finally:
        workers.close()


def test_a_deadline_passed_stops_the_workers():
    workers = pool.Workers(1, int, (), abs)
    with pytest.raises(TimeoutError):
        list(workers.results([-1], deadline=time.perf_counter() - 1))
    assert multiprocessing.active_children() == []


def test_closing_stops_a_busy_worker_though_it_ignores_sigterm():
    """Workers ignore SIGTERM (a signal to rafm's group is the parent's to act on): stopped by
    it, a busy one would run its job to the end. SIGKILL stops it now."""
    workers = pool.Workers(1, int, (), time.sleep)
    ended = threading.Event()

    def wait_out():
        with pytest.raises(TimeoutError):  # the job is sent, then the deadline stops the workers
            list(workers.results([600], deadline=time.perf_counter() + 1))
        ended.set()

    thread = threading.Thread(target=wait_out, daemon=True)
    thread.start()
    assert ended.wait(120)
    assert multiprocessing.active_children() == []


def test_workers_run_from_a_thread_other_than_the_main_one():
    """A signal handler can only be set in the main thread: one set when the workers started
    raised there, after they had started, and left them running."""
    found = []
    thread = threading.Thread(target=lambda: found.extend(_answers(pool.Workers(2, int, (), abs), [-1, -2])))
    thread.start()
    thread.join(120)
    assert sorted(found) == [1, 2]
    assert multiprocessing.active_children() == []


def _answers(workers, jobs):
    try:
        return list(workers.results(jobs))
    finally:
        workers.close()


def test_a_signal_held_while_the_workers_start_stops_the_ones_started(monkeypatch):
    """rafm holds its signals while the workers start and raises one at the end of that block:
    raised outside the cleanup, it left the workers started running (and Search never had them
    to stop)."""
    @contextmanager
    def held_then_interrupted():
        yield
        raise KeyboardInterrupt

    monkeypatch.setattr(pool.signals, "held", held_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        pool.Workers(2, int, (), abs)
    assert multiprocessing.active_children() == []


class _TwoArguments(Exception):
    def __init__(self, what, how):
        super().__init__(f"{what} {how}")


def test_exceptions_that_cannot_cross_the_pipe_become_runtime_errors():
    """A worker sends its exception pickled: one that does not pickle killed the worker (reported
    as its death), one that pickles but cannot be rebuilt raised TypeError in the parent."""
    unpicklable = ValueError(lambda: None)
    for exc, name in ((unpicklable, "ValueError"), (_TwoArguments("a", "b"), "_TwoArguments: a b")):
        sent = pool._portable(exc)
        assert isinstance(sent, RuntimeError) and name in str(sent)
        pickle.loads(pickle.dumps(sent))
    fine = ValueError("x")
    assert pool._portable(fine) is fine


def test_a_worker_that_died_is_named_with_its_signal():
    assert str(pool.WorkerDied(12, -9, busy=True)) == \
        "worker process 12 was killed by SIGKILL (out of memory?) before it finished its trial; nothing written"
    assert str(pool.WorkerDied(12, -11, busy=False)) == "worker process 12 was killed by SIGSEGV; nothing written"
    assert str(pool.WorkerDied(12, 3, busy=False)) == "worker process 12 exited with status 3; nothing written"
