"""One push to the phone when a session's agent has waited for the user ``waiting_after`` seconds.

The message holds the worktree, the agent and the last lines of its screen
as inert text (control characters made visible, bounded); it has no action
buttons: a tap opens nothing on the host.  The next push comes only after the
agent has worked again and then waits again.
"""

from __future__ import annotations

import sys
import threading

from ..core.errors import ChtopError
from ..core.term import visible
from . import config, ntfy

SCREEN_LINES, LINE_CHARS, MESSAGE_CHARS = 8, 120, 800


def screen_tail(screen: str | None) -> str:
    """The last non-empty lines of the screen, each cut short, control characters made visible."""
    lines = [line.rstrip() for line in (screen or "").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    tail = [visible(line)[:LINE_CHARS] for line in lines[-SCREEN_LINES:]]
    return "\n".join(tail)[-MESSAGE_CHARS:]


def waiting_message(worktree: str, agent: str, screen: str | None) -> tuple[str, str]:
    title = visible(f"{worktree}: {agent} waits for you")[:200]
    tail = screen_tail(screen)
    return title, (tail or "(its screen is empty)") + f"\n\ninv session.attach --name {visible(worktree)}"


class WaitingAlert:
    """Watches one session's states (``observe`` on every poll); pushes once per wait."""

    def __init__(self, cfg: config.NotifyConfig, worktree: str, agent: str):
        self.cfg, self.worktree, self.agent = cfg, worktree, agent
        self.waiting_since: float | None = None
        self.sent = False

    def observe(self, state: str, now: float, screen: str | None) -> threading.Thread | None:
        """Note the state at ``now``; the thread pushing the message when this wait is due one."""
        if state != "waiting":
            self.waiting_since, self.sent = None, False
            return None
        if self.waiting_since is None:
            self.waiting_since = now
        if self.sent or now - self.waiting_since < self.cfg.waiting_after:
            return None
        self.sent = True
        title, text = waiting_message(self.worktree, self.agent, screen)
        thread = threading.Thread(target=self._push, args=(title, text), daemon=True)
        thread.start()
        return thread

    def _push(self, title: str, text: str) -> None:
        try:
            ntfy.publish(self.cfg, title, text, tags=["hourglass"])
        except ntfy.NtfyError as exc:
            print(f"chtop: phone notification: {exc}", file=sys.stderr, flush=True)


def for_session(worktree: str, agent: str) -> WaitingAlert | None:
    """The alert for a session when the user set up phone notifications, else None."""
    try:
        cfg = config.load()
    except ChtopError as exc:
        print(f"chtop: phone notifications off: {exc}", file=sys.stderr, flush=True)
        return None
    return WaitingAlert(cfg, worktree, agent) if cfg else None
