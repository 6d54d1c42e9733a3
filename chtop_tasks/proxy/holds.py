"""Held requests and their watchers (``inv net.watch``, ``inv dash``).

While at least one watcher is attached, a blocked request is held open (up
to the hold time) and every watcher is told.  Requests are held per (host,
worktree socket); a decision releases those of one host (on one worktree's
socket, when it names one), and each is then judged again.

One source (a worktree's sockets, or one --dir sandbox) may keep at most
``max_held`` requests held and ``max_prompts`` prompts open (holds it asked
first); past that its blocked requests are refused at once, so a flood of
them pins no more of the proxy and buries no other agent's prompt.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field


@dataclass
class Hold:
    """Requests for one host on one socket, held while a watcher decides."""

    future: asyncio.Future
    host: str
    port: int
    worktree: str | None
    opened_by: str | None = None       # the source whose request opened it (its prompt)
    since: float = field(default_factory=time.time)
    waiting: int = 0

    def describe(self) -> dict:
        return {"host": self.host, "port": self.port, "worktree": self.worktree,
                "since": self.since, "waiting": self.waiting}


class Holds:
    def __init__(self, loop: asyncio.AbstractEventLoop, hold_seconds: float, max_held: int = 32,
                 max_prompts: int = 8):
        self.loop = loop
        self.hold_seconds = hold_seconds
        self.max_held, self.max_prompts = max_held, max_prompts
        self.watchers: set = set()
        self._held: dict[tuple[str, str | None], Hold] = {}
        self._waiting_of: dict[str | None, int] = {}     # source -> its requests held now
        self._prompts_of: dict[str | None, int] = {}     # source -> open holds it opened

    def active(self) -> bool:
        """True when a blocked request should be held (someone is watching)."""
        return bool(self.watchers) and self.hold_seconds > 0

    def full(self, host: str, worktree: str | None, source: str | None) -> str | None:
        """Why a blocked request of ``source`` for ``host`` may not be held (None: it may, or
        nothing is held at all because no one watches)."""
        if not self.active():
            return None
        if self._waiting_of.get(source, 0) >= self.max_held:
            return f"{self.max_held} requests of this sandbox are held already"
        hold = self._held.get((host, worktree))
        if (hold is None or hold.future.done()) and self._prompts_of.get(source, 0) >= self.max_prompts:
            return f"{self.max_prompts} prompts of this sandbox are open already"
        return None

    def _count(self, counts: dict, source: str | None, step: int) -> None:
        left = counts.get(source, 0) + step
        if left > 0:
            counts[source] = left
        else:
            counts.pop(source, None)

    def _drop(self, key: tuple[str, str | None]) -> Hold:
        hold = self._held.pop(key)
        self._count(self._prompts_of, hold.opened_by, -1)
        return hold

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

    async def wait_for_answer(self, host: str, port: int, worktree: str | None,
                              client_gone: asyncio.Future | None = None, source: str | None = None) -> str:
        """Hold until a watcher answers for ``host`` (its answer), the hold time ends ("timeout") or
        the client leaves ("client left").  When the last request held for it ends unanswered, the
        watchers are told ("expired" / "gone") so they can take their prompt down."""
        key = (host, worktree)
        hold = self._held.get(key)
        if hold is None or hold.future.done():
            if hold is not None:
                self._drop(key)
            hold = Hold(self.loop.create_future(), host, port, worktree, source)
            self._held[key] = hold
            self._count(self._prompts_of, source, 1)
            self.notify({"event": "blocked", "host": host, "port": port, "worktree": worktree,
                         "hold": self.hold_seconds})
        hold.waiting += 1
        self._count(self._waiting_of, source, 1)
        answer_wait = asyncio.ensure_future(asyncio.shield(hold.future))
        gone = client_gone if client_gone is not None else self.loop.create_future()
        try:
            done, _ = await asyncio.wait({answer_wait, gone}, timeout=self.hold_seconds,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (answer_wait, gone):
                if not f.done():
                    f.cancel()
            hold.waiting -= 1
            self._count(self._waiting_of, source, -1)
        if answer_wait in done:
            return answer_wait.result()
        why = "client left" if gone in done else "timeout"
        if self._held.get(key) is hold and (why == "timeout" or hold.waiting == 0):
            self._drop(key)
            self.notify({"event": "expired" if why == "timeout" else "gone", "host": host, "worktree": worktree})
        return why

    def release(self, host: str, worktree: str | None, answer: str) -> int:
        """Answer the held requests for ``host`` (on ``worktree``'s socket only, when given)."""
        released = 0
        for key, hold in list(self._held.items()):
            if key[0] != host or (worktree is not None and key[1] != worktree):
                continue
            self._drop(key)
            if not hold.future.done():
                hold.future.set_result(answer)
                released += max(1, hold.waiting)
        return released

    def close(self) -> None:
        for w in list(self.watchers):
            w.close()
