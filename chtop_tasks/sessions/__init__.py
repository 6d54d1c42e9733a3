"""Persistent agent sessions: a worktree's agent in its sandbox, inside a tmux session that
outlives the terminal, with a state read from the agent's own hooks (or its screen).

The stable API (the dashboard and the ``session.*`` tasks use it):

- ``list_sessions(group_dir) -> list[dict]``: one dict per session with ``worktree``, ``agent``,
  ``state`` (working, waiting, idle, exited, lost), ``since`` (epoch seconds), ``exit_status``
  (int or None), ``pending`` (egress approvals awaited for that worktree), and more;
- ``start_session(ws, agent, args, continue_) -> dict``: start it, return its row at once;
- ``stop_session(group_dir, name) -> dict``: end the agent, its container and tmux session;
- ``attach_argv(group_dir, name) -> list[str]``: the command that attaches a terminal to it;
- ``attach(group_dir, name) -> int``: attach this terminal until the user detaches, saying why the
  agent ended if it ends meanwhile;
- ``restore_sessions(ws)``, ``session_log(group_dir, name)``,
  ``refuse_while_in_use(wt)`` (worktree.delete's check: no session, no sandbox running).
"""

from importlib import import_module

# each name of the API, and the module that has it: imported when first asked for, so that
# worktree.delete's busy check (``refuse_while_in_use``) does not import the launch side
_WHERE = {"SessionRunning": "lifecycle", "attach": "lifecycle", "attach_argv": "lifecycle", "restore_sessions": "lifecycle",
          "start_session": "lifecycle", "stop_all": "lifecycle", "stop_session": "lifecycle",
          "list_sessions": "listing", "refuse_delete_while_running": "listing", "refuse_while_in_use": "listing",
          "running_session": "listing", "session_log": "screenlog"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
