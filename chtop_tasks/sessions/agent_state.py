"""What the agent is doing: from its own hooks when it reports, else from its screen.

States: ``working``, ``waiting`` (for the user's input or a permission),
``idle`` (its turn ended), ``exited`` and ``lost`` (the last two are known
to the host, never to the agent).

Claude Code reports through chtop's hooks (``sandbox/agent_settings.py``): a hook command
inside the sandbox writes one word to ``$CLAUDE_CONFIG_DIR/chtop-state/<session id>``; there the
session's own state dir is mounted (``places.session_state_dir``; no other session's is).  The
agent writes it, so the file is display data from a stranger: it is opened without following
links or blocking (no FIFO), must be a regular file, is read up to a few bytes, and is used only
if it is exactly one of the allowed words.  Nothing in it is ever executed, sourced or taken as
configuration.

Agents without hooks, and a hooked agent before its first report: the screen (``tmux capture-pane``) changing means
``working``; unchanged for ``IDLE_AFTER`` seconds means ``idle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from ..core import agentfile
from ..core.places import session_state_dir

STATES = ("working", "waiting", "idle", "exited", "lost")
HOOK_STATES = ("working", "waiting", "idle", "exited")   # what an agent may report
MAX_STATE_BYTES = 32
IDLE_AFTER = 5.0


def hook_state_path(home: Path, session_id: str) -> Path:
    """Where session ``session_id``'s hooks report, on the host (``home``: its target's agent home)."""
    return session_state_dir(home, session_id) / session_id


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
        digest = sha256((screen or "").encode()).hexdigest()
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
