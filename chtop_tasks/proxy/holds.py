"""Held requests and their watchers (``inv net.watch``, ``inv dash``).

While at least one watcher is attached, a blocked request is held open (up
to the hold time) and every watcher is told.  Requests are held per (host,
worktree socket); a decision releases those of one host (on one worktree's
socket, when it names one), and each is then judged again.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from .aio import TIMEOUTS


@dataclass
class Hold:
    """Requests for one host on one socket, held while a watcher decides."""

    future: asyncio.Future
    host: str
    port: int
    worktree: str | None
    since: float = field(default_factory=time.time)
    waiting: int = 0

    def describe(self) -> dict:
        return {"host": self.host, "port": self.port, "worktree": self.worktree,
                "since": self.since, "waiting": self.waiting}


class Holds:
    def __init__(self, loop: asyncio.AbstractEventLoop, hold_seconds: float):
        self.loop = loop
        self.hold_seconds = hold_seconds
        self.watchers: set = set()
        self._held: dict[tuple[str, str | None], Hold] = {}

    def active(self) -> bool:
        """True when a blocked request should be held (someone is watching)."""
        return bool(self.watchers) and self.hold_seconds > 0

    def held(self) -> list[dict]:
        return sorted((h.describe() for h in self._held.values() if not h.future.done()),
                      key=lambda d: d["since"])

    def add_watcher(self, writer) -> None:
        self.watchers.add(writer)

    def drop_watcher(self, writer) -> None:
        self.watchers.discard(writer)

    def notify(self, event: dict) -> None:
        line = (json.dumps(event) + "\n").encode()
        for w in list(self.watchers):
            try:
                w.write(line)
            except Exception:
                self.watchers.discard(w)

    async def wait_for_answer(self, host: str, port: int, worktree: str | None) -> str:
        """Hold until a watcher answers for ``host`` (its answer) or the hold time ends ("timeout")."""
        key = (host, worktree)
        hold = self._held.get(key)
        if hold is None or hold.future.done():
            hold = Hold(self.loop.create_future(), host, port, worktree)
            self._held[key] = hold
            self.notify({"event": "blocked", "host": host, "port": port, "worktree": worktree,
                         "hold": self.hold_seconds})
        hold.waiting += 1
        try:
            return await asyncio.wait_for(asyncio.shield(hold.future), self.hold_seconds)
        except TIMEOUTS:
            if self._held.get(key) is hold:
                del self._held[key]
            return "timeout"
        finally:
            hold.waiting -= 1

    def release(self, host: str, worktree: str | None, answer: str) -> int:
        """Answer the held requests for ``host`` (on ``worktree``'s socket only, when given)."""
        released = 0
        for key, hold in list(self._held.items()):
            if key[0] != host or (worktree is not None and key[1] != worktree):
                continue
            del self._held[key]
            if not hold.future.done():
                hold.future.set_result(answer)
                released += max(1, hold.waiting)
        return released

    def close(self) -> None:
        for w in list(self.watchers):
            w.close()
