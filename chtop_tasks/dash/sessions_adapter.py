"""The one door to agent sessions (``chtop_tasks.sessions``), for the dashboard and ``chtop go``.

The sessions package provides ``list_sessions(group_dir)`` (dicts with
``worktree``, ``agent``, ``state`` (working, waiting, idle, exited, lost),
``since`` (epoch), ``exit_status``, ``pending``), ``start_session(ws, agent,
args, continue_)``, ``stop_session(group_dir, name)`` and
``attach_argv(group_dir, name)``.  Where it is not installed the dashboard
shows no sessions and the session actions raise ``SessionsUnavailable``.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ChtopError

LIVE_STATES = ("working", "waiting", "idle")
DEFAULT_AGENT = "claude"


class SessionsUnavailable(ChtopError):
    exit_code = 3


def _module():
    try:
        from .. import sessions
    except ImportError:
        return None
    return sessions


def available() -> bool:
    return _module() is not None


def _require():
    mod = _module()
    if mod is None:
        raise SessionsUnavailable("agent sessions are not available in this chtop (no chtop_tasks.sessions); "
                                  "launch the agent by hand: cd into the worktree and run `inv sbox.claude`")
    return mod


def list_sessions(group_dir: Path) -> list[dict]:
    mod = _module()
    return [] if mod is None else list(mod.list_sessions(Path(group_dir)))


def session_of(group_dir: Path, worktree: str) -> dict | None:
    """The newest session of ``worktree`` (a live one first), or None."""
    mine = [s for s in list_sessions(group_dir) if s.get("worktree") == worktree]
    mine.sort(key=lambda s: (s.get("state") in LIVE_STATES, s.get("since") or 0), reverse=True)
    return mine[0] if mine else None


def session_name(session: dict) -> str:
    return str(session.get("name") or session.get("worktree"))


def start_session(ws, agent: str = DEFAULT_AGENT, args: list[str] | None = None, continue_: bool = False):
    return _require().start_session(ws, agent, list(args or []), continue_)


def stop_session(group_dir: Path, name: str):
    return _require().stop_session(Path(group_dir), name)


def attach_argv(group_dir: Path, name: str) -> list[str]:
    return list(_require().attach_argv(Path(group_dir), name))


def attach(group_dir: Path, name: str) -> int:
    """Attach this terminal to ``name``'s session; its status (an error saying why if the agent ends)."""
    return int(_require().attach(Path(group_dir), name))
