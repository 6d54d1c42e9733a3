"""Persistent agent sessions: a worktree's agent in its sandbox, inside a tmux session that
outlives the terminal, with a state read from the agent's own hooks (or its screen).

The stable API (the dashboard and the ``session.*`` tasks use it):

- ``list_sessions(group_dir) -> list[dict]``: one dict per session with ``worktree``, ``agent``,
  ``state`` (working, waiting, idle, exited, lost), ``since`` (epoch seconds), ``exit_status``
  (int or None), ``pending`` (egress approvals awaited for that worktree), and more;
- ``start_session(ws, agent, args, continue_) -> dict``: start it, return its row at once;
- ``stop_session(group_dir, name) -> dict``: end the agent, its container and tmux session;
- ``attach_argv(group_dir, name) -> list[str]``: the command that attaches a terminal to it;
- ``restore_sessions(ws)``, ``session_log(group_dir, name)``,
  ``refuse_while_in_use(wt)`` (worktree.delete's check: no session, no sandbox running).
"""

from .lifecycle import SessionRunning, attach_argv, restore_sessions, start_session, stop_all, stop_session
from .listing import list_sessions, refuse_delete_while_running, refuse_while_in_use, running_session
from .screenlog import session_log

__all__ = ["SessionRunning", "attach_argv", "list_sessions", "refuse_delete_while_running", "refuse_while_in_use", "restore_sessions",
           "running_session", "session_log", "start_session", "stop_all", "stop_session"]
