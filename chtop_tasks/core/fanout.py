"""Run one function over many items in a few threads (each item's work is mostly a subprocess).

Plain threads: each item's answer or error is all a caller needs, so there is no executor or
future to manage.
"""

from __future__ import annotations

import contextlib
import os
import threading

POOL_SIZE = max(1, min(os.cpu_count() or 1, 8))


def fan_out(func, items):
    """``func`` over ``items`` in up to POOL_SIZE threads, results in input order; once every item
    has run, the first failure in that order raises."""
    items = list(items)
    if len(items) <= 1:
        return [func(item) for item in items]
    outcomes: list = [None] * len(items)
    indexes = iter(range(len(items)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            try:
                outcomes[index] = (None, func(items[index]))
            except BaseException as exc:  # noqa: BLE001 - raised again below, in input order
                outcomes[index] = (exc, None)

    threads = [threading.Thread(target=work) for _ in range(min(POOL_SIZE, len(items)))]
    for thread in threads:
        thread.start()
    join_all(threads)
    for failure, _result in outcomes:
        if failure is not None:
            raise failure
    return [result for _failure, result in outcomes]


def join_all(threads) -> None:
    """Wait for every thread.  A Ctrl-C (which reaches the workers' git processes too) waits for them
    to end before it is raised, so the caller's undo runs after their writes; a second one raises at once."""
    interrupted = None
    for thread in threads:
        while thread.is_alive():
            try:
                thread.join()
            except KeyboardInterrupt:
                if interrupted is not None:
                    raise
                interrupted = KeyboardInterrupt()
    if interrupted is not None:
        raise interrupted


def in_background(func, *args):
    """Start ``func(*args)`` in a thread now; the returned function waits for it and returns its result,
    or raises what it raised (a check that waits on a process, run while other work goes on)."""
    outcome: list = []

    def work() -> None:
        try:
            outcome.append((None, func(*args)))
        except BaseException as exc:  # noqa: BLE001 - raised again by the waiter
            outcome.append((exc, None))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()

    def wait():
        thread.join()
        failure, result = outcome[0]
        if failure is not None:
            raise failure
        return result
    return wait


class StartedLater:
    """``in_background(func, *args)``, started by ``start()`` (called once a precondition holds, e.g.
    from inside another step); ``wait()`` as ``in_background``'s waiter.  A ``wait()`` with no
    ``start()`` is a mistake of the caller's, and raises."""

    def __init__(self, func, *args):
        self._call = (func, args)
        self._wait = None

    def start(self) -> None:
        if self._wait is None:
            func, args = self._call
            self._wait = in_background(func, *args)

    def wait(self):
        if self._wait is None:
            raise RuntimeError(f"{self._call[0].__name__} was never started")
        return self._wait()


@contextlib.contextmanager
def answered_before_leaving(wait):
    """Around work done while ``in_background``'s ``wait`` runs: when that work fails, the background
    one is still waited for (its processes end before the task does), its own failure dropped."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            wait()
        raise
