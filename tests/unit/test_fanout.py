"""fan_out: results in input order, every item run, the first failure in input order raised."""

from __future__ import annotations

import threading
import time

import pytest

from chtop_tasks.core.fanout import POOL_SIZE, StartedLater, fan_out


def test_results_come_back_in_input_order_from_several_threads():
    seen = set()

    def slow_square(n):
        seen.add(threading.get_ident())
        time.sleep(0.05 * (5 - n % 5))       # later items finish first
        return n * n

    assert fan_out(slow_square, range(10)) == [n * n for n in range(10)]
    assert len(seen) == min(POOL_SIZE, 10) or POOL_SIZE == 1


def test_every_item_runs_and_the_first_failure_in_input_order_raises():
    ran = []

    def check(n):
        ran.append(n)
        if n in (2, 5):
            time.sleep(0.1 if n == 2 else 0)  # item 5 fails first in time, item 2 first in order
            raise ValueError(f"item {n}")
        return n

    with pytest.raises(ValueError, match="item 2"):
        fan_out(check, range(8))
    assert sorted(ran) == list(range(8))


def test_one_item_runs_in_this_thread():
    assert fan_out(lambda _: threading.get_ident(), ["x"]) == [threading.get_ident()]


def test_a_ctrl_c_waits_for_the_workers_before_it_is_raised():
    """The workers' git processes get the same Ctrl-C; the caller's undo must run after their writes.
    The Ctrl-C comes once the caller waits in ``join_all``, and Python's own handler takes it: a
    process started in the background by a shell without job control inherits SIGINT ignored (and
    then Python installs no handler), as a CI runner's may."""
    import os
    import signal
    import sys

    from conftest import eventually

    from chtop_tasks.core.fanout import join_all

    caller, finished = threading.get_ident(), []

    def caller_joins() -> bool:
        frame = sys._current_frames().get(caller)
        while frame is not None and frame.f_code is not join_all.__code__:
            frame = frame.f_back
        return frame is not None

    def work(delay):
        if delay == 0.3:
            eventually(caller_joins, "the caller waiting for its workers", timeout=30)
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(delay)
        finished.append(delay)

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fan_out(work, [0.3, 0.4])
    finally:
        signal.signal(signal.SIGINT, saved)
    assert sorted(finished) == [0.3, 0.4]


def test_started_later_runs_from_its_start_and_a_wait_without_start_raises():
    ran, threads = [], set(threading.enumerate())
    later = StartedLater(lambda n: ran.append(n) or n * 2, 21)
    assert ran == [] and set(threading.enumerate()) <= threads    # no thread runs, or waits to, before start()
    later.start()
    later.start()                                     # a second start starts nothing more
    assert later.wait() == 42 and ran == [21]
    with pytest.raises(RuntimeError, match="never started"):
        StartedLater(lambda: None).wait()
