"""How fast one source (a worktree, a --dir sandbox, one socket) may open connections or hand-offs.

A token bucket per source: ``rate`` a second, ``burst`` at once.  Over it, the proxy stops
accepting on that source's listener for a while (``pause_for``) instead of accepting and
closing: the flood waits in the kernel's backlog and costs the proxy nothing, while every other
source's listeners go on.  A paused flood gets one log line per ``NOTE_EVERY`` seconds, the pauses
in between counted into it.
"""

from __future__ import annotations

import time

MIN_PAUSE = 0.1       # seconds: a pause refills a batch, so a flood costs one wake-up per batch, not per connection
NOTE_EVERY = 10.0     # seconds: at most one "paused" line per source this often
MAX_SOURCES = 1024    # buckets kept; full ones are forgotten past this (a --dir group's sandboxes come and go)


class AcceptRate:
    """The buckets of one accept path (new connections, or hand-offs); ``rate`` 0 means no limit."""

    def __init__(self, rate: float, burst: float, what: str, setting: str, note):
        self.rate = max(rate, 0.0)
        self.burst = max(burst, 1.0)
        self.what = what              # "new connections", "hand-offs"
        self.setting = setting        # the variable that sets ``rate``, named in the log line
        self._note = note             # RequestLog.note
        self._buckets: dict[str, tuple[float, float]] = {}     # source -> (tokens, when)
        self._pauses: dict[str, int] = {}                      # pauses not yet in the log
        self._next_note: dict[str, float] = {}

    def _tokens(self, source: str, now: float) -> float:
        tokens, when = self._buckets.get(source, (self.burst, now))
        return min(self.burst, tokens + (now - when) * self.rate)

    def take(self, source: str, now: float | None = None) -> float:
        """0.0, with one token taken, when ``source`` may open one more now; else how many seconds
        until it may."""
        if not self.rate:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens = self._tokens(source, now)
        if tokens >= 1.0:
            self._buckets[source] = (tokens - 1.0, now)
            if len(self._buckets) > MAX_SOURCES:
                self._forget_full(now)
            return 0.0
        self._buckets[source] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def give_back(self, source: str) -> None:
        """The token of an accept that found nothing to accept."""
        if self.rate and source in self._buckets:
            tokens, when = self._buckets[source]
            self._buckets[source] = (min(self.burst, tokens + 1.0), when)

    def pause_for(self, source: str, wait: float) -> float:
        """How long to stop accepting from ``source`` (a batch's worth at least); notes the pause."""
        self._pauses[source] = self._pauses.get(source, 0) + 1
        now = time.monotonic()
        if now >= self._next_note.get(source, 0.0):
            count = self._pauses.pop(source)
            self._next_note[source] = now + NOTE_EVERY
            self._note(f"accepts from {source} paused: more than {self.rate:g} {self.what} a second "
                       f"(burst {self.burst:g}; {self.setting} sets it); {count} pause(s) since the last such line")
        return max(wait, MIN_PAUSE)

    def _forget_full(self, now: float) -> None:
        for source in [s for s in self._buckets if self._tokens(s, now) >= self.burst]:
            del self._buckets[source]
            self._next_note.pop(source, None)
            self._pauses.pop(source, None)
