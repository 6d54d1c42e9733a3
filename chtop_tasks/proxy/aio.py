"""asyncio helpers shared by the proxy's modules (Python 3.10 and later)."""

from __future__ import annotations

import asyncio
import contextlib


@contextlib.asynccontextmanager
async def _compat_timeout(delay: float):
    """asyncio.timeout for Python 3.10: cancel the task, raise TimeoutError."""
    task, fired = asyncio.current_task(), []
    handle = asyncio.get_running_loop().call_later(delay, lambda: (fired.append(1), task.cancel()))
    try:
        yield
    except asyncio.CancelledError:
        if fired:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


timeout = getattr(asyncio, "timeout", _compat_timeout)
TIMEOUTS = (TimeoutError, asyncio.TimeoutError)   # distinct classes before 3.11


class Deadlines:
    """Coarse timeouts for the many short waits of new connections (a request head, a first
    ClientHello): one timer ticks every ``tick`` seconds for all of them, instead of a timer handle
    made and cancelled for each (``asyncio.timeout`` costs several times more per wait under load; two
    in every tunnel's setup).  A wait ends with TimeoutError between ``seconds`` and ``seconds + tick`` after it began.

        with deadlines.within(10):
            await loop.sock_recv(conn, 65536)
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, tick: float = 0.25):
        self.loop, self.tick = loop, tick
        self.due: dict[asyncio.Task, float] = {}     # the tasks inside a ``within`` block, and when
        self.fired: set[asyncio.Task] = set()        # cancelled by the sweep, not yet out of it
        self._sweeping: asyncio.TimerHandle | None = None

    def within(self, seconds: float) -> _Within:
        return _Within(self, seconds)

    def _sweep(self) -> None:
        now = self.loop.time()
        for task, at in list(self.due.items()):
            if at <= now and task not in self.fired:
                self.fired.add(task)
                task.cancel()     # it waits inside its block (it is in ``due``): raised there
        self._sweeping = self.loop.call_later(self.tick, self._sweep) if self.due else None


class _Within:
    __slots__ = ("deadlines", "seconds", "task")

    def __init__(self, deadlines: Deadlines, seconds: float):
        self.deadlines, self.seconds, self.task = deadlines, seconds, None

    def __enter__(self):
        d = self.deadlines
        self.task = asyncio.current_task()
        d.due[self.task] = d.loop.time() + self.seconds
        if d._sweeping is None:
            d._sweeping = d.loop.call_later(d.tick, d._sweep)
        return self

    def __exit__(self, exc_type, exc, tb):
        d, task = self.deadlines, self.task
        del d.due[task]
        if task not in d.fired:
            return False
        d.fired.discard(task)
        if hasattr(task, "uncancel"):       # Python 3.11+: the cancel was ours, not a request to stop
            task.uncancel()
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            raise TimeoutError from None
        return False
