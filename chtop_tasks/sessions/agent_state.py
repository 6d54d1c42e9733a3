"""What the agent is doing: from its own hooks when it reports, else from its screen.

States: ``working``, ``waiting`` (for the user's input or a permission),
``idle`` (its turn ended), ``exited`` and ``lost`` (the last two are known
to the host, never to the agent).

Claude Code reports through chtop's hooks (``hooks.py``): a hook command
inside the sandbox writes one word to ``<agent config dir>/chtop-state/<session id>``.
That directory is writable by every agent of the group, so the file is
display data from a stranger: it is opened without following links or
blocking (no FIFO), must be a regular file, is read up to a few bytes, and
is used only if it is exactly one of the allowed words.  Nothing in it is
ever executed, sourced or taken as configuration.

Agents without hooks, and a hooked agent before its first report: the screen (``tmux capture-pane``) changing means
``working``; unchanged for ``IDLE_AFTER`` seconds means ``idle``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .. import agentfile

STATES = ("working", "waiting", "idle", "exited", "lost")
HOOK_STATES = ("working", "waiting", "idle", "exited")   # what an agent may report
STATE_DIR_NAME = "chtop-state"
MAX_STATE_BYTES = 32
IDLE_AFTER = 5.0
SESSION_ID = re.compile(r"^[a-z0-9]{8,32}$")


def hook_state_dir(config_dir: Path) -> Path:
    return Path(config_dir) / STATE_DIR_NAME


def hook_state_path(config_dir: Path, session_id: str) -> Path:
    if not SESSION_ID.match(session_id):
        raise ValueError(f"bad session id {session_id!r}")
    return hook_state_dir(config_dir) / session_id


@dataclass(frozen=True)
class Reported:
    state: str
    mtime: float


def read_reported(path: Path) -> Reported | None:
    """The state the agent reported in ``path``, or None (absent, not a small regular file,
    or not one of the allowed words)."""
    got = agentfile.read_regular(path, limit=MAX_STATE_BYTES)
    if got is None:
        return None
    raw, st = got
    word = raw.decode("ascii", errors="replace").strip()
    if word not in HOOK_STATES:
        return None
    return Reported(word, st.st_mtime)


class ScreenActivity:
    """The fallback: ``working`` while the screen changes, ``idle`` once it has stood still."""

    def __init__(self, idle_after: float = IDLE_AFTER):
        self.idle_after = idle_after
        self._digest: str | None = None
        self._changed_at = 0.0

    def observe(self, screen: str | None, now: float) -> str:
        digest = hashlib.sha256((screen or "").encode()).hexdigest()
        if digest != self._digest:
            self._digest = digest
            self._changed_at = now
        return "working" if now - self._changed_at < self.idle_after else "idle"


def current_state(reported: Reported | None, started_at: float, screen_state: str, hooked: bool = False) -> str:
    """The hook's word when the agent reported during this run, else what the screen says.

    A hooked agent that has not reported yet and whose screen stands still is ``waiting``: it shows
    a first-run question (claude's bypass-mode warning, folder trust) or its empty prompt."""
    if reported is not None and reported.mtime >= started_at - 1:
        return reported.state
    if hooked and screen_state == "idle":
        return "waiting"
    return screen_state
