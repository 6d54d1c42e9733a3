"""The state of a group's sessions: each record checked against tmux, with its pending approvals.

A record that says running whose tmux session is gone (the server was killed, the machine
rebooted) is ``lost``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import ChtopError, CommandFailed, Refused
from ..core.term import warn
from ..sandbox.running import sandboxes_in
from . import records, tmux
from .agent_state import STATES


def _pending_by_worktree(group_dir: Path, policy_dirs: set[str]) -> dict[str, int]:
    """Blocked hosts awaiting approval, per worktree; {} when the proxy is not running."""
    from ..proxy.control import status
    from ..proxy.logs import pending
    from ..proxy.policy import NetPolicy

    if status(group_dir) is None:
        return {}
    counts: dict[str, int] = {}
    for policy_dir in policy_dirs:
        try:
            items = pending(group_dir, NetPolicy(Path(policy_dir)))
        except (ChtopError, OSError):
            continue
        for item in items:
            counts[item.get("worktree") or ""] = counts.get(item.get("worktree") or "", 0) + 1
    return counts


def is_live(record: records.Record) -> bool:
    return tmux.has_session(Path(record.tmux_socket), record.tmux_session)


def session_row(record: records.Record, pending: int = 0) -> dict:
    """One session as the list shows it (``state`` computed against tmux)."""
    state, since = record.state, record.since or record.started_at
    if record.status == "exited":
        state = "exited"
    elif not is_live(record):
        state = "lost"
        try:
            since = records.record_path(Path(record.group), record.worktree).stat().st_mtime
        except OSError:
            pass
    if state not in STATES:
        state = "working"
    return {"worktree": record.worktree, "agent": record.agent, "state": state, "since": float(since),
            "exit_status": record.exit_status if state == "exited" else None, "pending": pending,
            "session": record.tmux_session, "started_at": record.started_at, "continue": record.continue_,
            "args": list(record.args), "container": record.container, "error": record.error,
            "root": record.root}


def list_sessions(group_dir: Path) -> list[dict]:
    """Every session of the group, one dict each, by worktree name.

    Keys: ``worktree``, ``agent``, ``state`` (working, waiting, idle, exited, lost), ``since``
    (epoch seconds of the last change), ``exit_status`` (int once exited, else None), ``pending``
    (egress approvals awaited for that worktree; 0 when the proxy is not running), plus
    ``session`` (the tmux session), ``started_at``, ``continue``, ``args``, ``container``, ``error``,
    ``root``.
    """
    found = records.load_all(Path(group_dir))
    pending = _pending_by_worktree(Path(group_dir), {r.policy_dir for r in found})
    return [session_row(r, pending.get(r.worktree, 0)) for r in found]


def require_known_worktree(group_dir: Path, name: str) -> None:
    """UsageError with the closest name when ``name`` is no worktree of the group (a typo)."""
    from ..core.places import is_dir_group
    from ..workspace.targets import is_feature_worktree

    if not is_dir_group(Path(group_dir)) and not is_feature_worktree(Path(group_dir), name):
        from ..workspace.suggest import require_feature_worktree

        require_feature_worktree(Path(group_dir), name)


def running_session(group_dir: Path, worktree: str) -> dict | None:
    """The worktree's session row when its tmux session is alive, else None."""
    record = records.load(Path(group_dir), worktree)
    if record is None or record.status != "running" or not is_live(record):
        return None
    return session_row(record)


def refuse_delete_while_running(group_dir: Path, worktree: str) -> None:
    """For worktree.delete: Refused while the worktree's agent session runs."""
    row = running_session(group_dir, worktree)
    if row is not None:
        raise Refused(f"worktree {worktree} has a running agent session ({row['session']}: {row['agent']}, "
                      f"{row['state']}); stop it first:  inv session.stop --name {worktree}")



def refuse_running_sandboxes(wt) -> None:
    """A sandbox still running in the worktree would be left working in a deleted tree: refuse,
    even with --force, naming each container and how to stop it."""
    try:
        running = sandboxes_in(wt.grouping, wt.root)
    except CommandFailed as exc:       # podman broken here: no sandbox can run either
        warn(f"could not check for sandboxes running in {wt.root}: {exc}")
        return
    if running:
        names = [row["name"] for row in running]
        raise Refused(f"refusing to delete {wt.root}: {len(names)} sandbox(es) still run in it: "
                      + ", ".join(f"{row['name']} ({row['purpose']}, {row['status']})" for row in running)
                      + f"\nEnd the agent or shell in it, or stop it:  podman stop {' '.join(names)}")


def refuse_while_in_use(wt) -> None:
    """worktree.delete's precondition: nothing runs in worktree ``wt`` (no session, no sandbox)."""
    refuse_delete_while_running(wt.grouping, wt.name)
    refuse_running_sandboxes(wt)


def rows_as_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1)
