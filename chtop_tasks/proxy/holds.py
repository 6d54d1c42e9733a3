"""Held requests and their watchers (``inv net.watch``).

While at least one watcher is attached, a blocked request is held open (up
to the hold time) and every watcher is told; the first answer lets all the
requests held for that host go on and be judged again.
"""

from __future__ import annotations

import asyncio
import json

from .aio import TIMEOUTS


class Holds:
    def __init__(self, loop: asyncio.AbstractEventLoop, hold_seconds: float):
        self.loop = loop
        self.hold_seconds = hold_seconds
        self.watchers: set = set()
        self._futures: dict[str, asyncio.Future] = {}

    def active(self) -> bool:
        """True when a blocked request should be held (someone is watching)."""
        return bool(self.watchers) and self.hold_seconds > 0

    def held(self) -> list[str]:
        return sorted(h for h, f in self._futures.items() if not f.done())

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
        fut = self._futures.get(host)
        if fut is None or fut.done():
            fut = self.loop.create_future()
            self._futures[host] = fut
            self.notify({"event": "blocked", "host": host, "port": port, "worktree": worktree,
                         "hold": self.hold_seconds})
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.hold_seconds)
        except TIMEOUTS:
            if self._futures.get(host) is fut:
                del self._futures[host]
            return "timeout"

    def decide(self, host: str, answer: str) -> None:
        fut = self._futures.pop(host, None)
        if fut is not None and not fut.done():
            fut.set_result(answer)

    def close(self) -> None:
        for w in list(self.watchers):
            w.close()
