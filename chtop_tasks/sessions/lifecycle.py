"""Starting, listing, stopping and restoring a group's persistent agent sessions.

A session is a worktree's agent running in its sandbox inside a detached
tmux session on the group's own tmux server (``tmux.py``).  The host-side
record (``records.py``) says what was started and what the pane process saw
last; ``list_sessions`` checks it against tmux: a record that says running
whose tmux session is gone (the server was killed, the machine rebooted) is
``lost``, and ``restore_sessions`` starts each lost one again with the
agent's continue flag.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import sys
import time
from pathlib import Path

from .. import runner
from ..errors import ChtopError, CommandFailed, Refused, UsageError
from ..places import target_for
from ..term import say, warn
from . import agent_state, hooks, records, tmux
from .agent_state import STATES

STOP_GRACE = 10.0
PANE_EXIT_WAIT = 5.0


class SessionRunning(Refused):
    """This worktree's session already runs."""


def _package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])


def _python_module(module: str, *args: str) -> list[str]:
    """argv running one of chtop's modules with this python and this chtop (PYTHONPATH set)."""
    return ["env", f"PYTHONPATH={_package_parent()}", sys.executable, "-m", module, *args]


# -- the state of each session ---------------------------------------------------------------------

def _pending_by_worktree(group_dir: Path, policy_dirs: set[str]) -> dict[str, int]:
    """Blocked hosts awaiting approval, per worktree; {} when the proxy is not running."""
    from ..proxy.control import status
    from ..proxy.logs import pending
    from ..proxy.policy import Policy

    if status(group_dir) is None:
        return {}
    counts: dict[str, int] = {}
    for policy_dir in policy_dirs:
        try:
            items = pending(group_dir, Policy(Path(policy_dir)))
        except (ChtopError, OSError):
            continue
        for item in items:
            counts[item.get("worktree") or ""] = counts.get(item.get("worktree") or "", 0) + 1
    return counts


def _is_live(record: records.Record) -> bool:
    return tmux.has_session(Path(record.tmux_socket), record.tmux_session)


def session_row(record: records.Record, pending: int = 0) -> dict:
    """One session as the list shows it (``state`` computed against tmux)."""
    state, since = record.state, record.since or record.started_at
    if record.status == "exited":
        state = "exited"
    elif not _is_live(record):
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


def running_session(group_dir: Path, worktree: str) -> dict | None:
    """The worktree's session row when its tmux session is alive, else None."""
    record = records.load(Path(group_dir), worktree)
    if record is None or record.status != "running" or not _is_live(record):
        return None
    return session_row(record)


def refuse_delete_while_running(group_dir: Path, worktree: str) -> None:
    """For worktree.delete: Refused while the worktree's agent session runs."""
    row = running_session(group_dir, worktree)
    if row is not None:
        raise Refused(f"worktree {worktree} has a running agent session ({row['session']}: {row['agent']}, "
                      f"{row['state']}); stop it first:  inv session.stop --name {worktree}")


# -- start -----------------------------------------------------------------------------------------

def start_session(ws, agent: str = "claude", args: list[str] | None = None, continue_: bool = False) -> dict:
    """Start ``agent`` (with ``args``; ``continue_`` adds its continue flag) in feature worktree
    ``ws``'s sandbox inside a detached tmux session; return its row at once.

    SessionRunning when this worktree's session already runs (nothing started); the launch is
    checked first (agent installed, secrets, policy, proxy), so a bad one fails here with its error.
    """
    from ..agents.registry import get_agent, prepare_launch
    from ..sandbox import show_warnings

    args = list(args or [])
    target = target_for(ws.root)                    # refuses the toplevel
    group, name = target.group_dir, target.name
    old = records.load(group, name)
    if old is not None and old.status == "running" and _is_live(old):
        raise SessionRunning(f"worktree {name}'s session already runs ({old.tmux_session}, {old.agent}); "
                             f"nothing started.  Attach: inv session.attach --name {name}")
    if old is not None:
        _remove_container(old)
        _clear_hook_state(target.config_dir, old.session_id)
    command = get_agent(agent).argv(args, continue_)   # a continue flag the agent lacks is refused here
    if agent in hooks.HOOKED_AGENTS:
        if hooks.install_hooks(target.config_dir):
            say(f"chtop: installed the session state hooks in {target.config_dir / 'settings.json'}")
        hooks.prepare_state_dir(target.config_dir)
    plan, notes = prepare_launch(agent, args, ws.root, interactive=True, continue_=continue_)
    for line in notes + [f"{name}: the agent's command: {shlex.join(command)}"]:
        print(f"chtop: {line}", file=sys.stderr, flush=True)
    show_warnings(plan)

    socket = tmux.socket_path(group, create=True)
    prefix, how = ([], "") if tmux.server_running(socket) else tmux.scope_prefix(group)
    session_id = secrets.token_hex(8)
    now = records.now()
    record = records.Record(
        worktree=name, root=str(ws.root), group=str(group), policy_dir=str(target.policy_dir), agent=agent,
        args=args, continue_=continue_, session_id=session_id, tmux_socket=str(socket),
        tmux_session=tmux.session_name(name), started_at=now, since=now,
        extra={"config_dir": str(target.config_dir)})
    records.save(group, record)
    records.write_json_atomic(records.env_path(group, name), dict(os.environ))
    argv = tmux.new_session_argv(socket, record.tmux_session, ws.root,
                                 _python_module("chtop_tasks.sessions.pane", str(group), name, session_id),
                                 _python_module("chtop_tasks.sessions.logwriter",
                                                str(records.log_path(group, name))))
    try:
        runner.run([*prefix, *argv], timeout=30)
    except CommandFailed:
        records.remove(group, name)
        raise
    if how:
        say(f"chtop: {how}")
    return _check_started(group, name, session_id)


def _check_started(group: Path, name: str, session_id: str) -> dict:
    """The new session's row; its error when the pane process could not launch the agent."""
    deadline = time.monotonic() + 2.0
    while True:
        record = records.load(group, name)
        if record is None or record.session_id != session_id:
            raise ChtopError(f"the session record of {name} vanished while starting")
        if record.status == "exited":
            raise ChtopError(f"{name}'s agent ended at once (exit {record.exit_status}): "
                             f"{record.error or 'see inv session.log --name ' + name}")
        if record.container or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if not _is_live(record) and record.status != "exited":
        raise ChtopError(f"{name}'s tmux session ended at once; see: inv session.log --name {name}")
    return session_row(record)


def _clear_hook_state(config_dir: Path, session_id: str) -> None:
    """Drop the state file an earlier run of this worktree's session left."""
    try:
        agent_state.hook_state_path(config_dir, session_id).unlink()
    except (OSError, ValueError):
        pass


# -- stop ------------------------------------------------------------------------------------------

def _podman(*args: str, check: bool = False, quiet: bool = False, timeout: float = 60):
    return runner.run(["podman", *args], check=check, quiet=quiet, timeout=timeout)


def _container_exists(name: str) -> bool:
    return bool(name) and _podman("container", "exists", name, quiet=True).ok


def _remove_container(record: records.Record) -> None:
    """A container of an earlier run that is still there (lost sessions) goes."""
    if _container_exists(record.container):
        _podman("rm", "-f", "-t", "0", record.container)


def stop_session(group_dir: Path, name: str, grace: float = STOP_GRACE) -> dict:
    """End worktree ``name``'s agent: SIGTERM to its container, SIGKILL after ``grace`` seconds, then
    its tmux session; the record goes (the log stays).  Returns the row it had."""
    group_dir = Path(group_dir)
    record = records.load(group_dir, name)
    if record is None:
        raise UsageError(f"no session for worktree {name!r} in {group_dir} (inv session.list shows them)")
    row = session_row(record)
    record = records.load(group_dir, name) or record      # the pane may have recorded its container by now
    if _container_exists(record.container):
        _podman("kill", "--signal", "TERM", record.container)
        deadline = time.monotonic() + grace
        while _container_exists(record.container) and time.monotonic() < deadline:
            time.sleep(0.25)
        if _container_exists(record.container):
            warn(f"{name}: the agent did not end within {grace:g}s of SIGTERM; killing it")
            _podman("rm", "-f", "-t", "0", record.container)
    socket = Path(record.tmux_socket)
    deadline = time.monotonic() + PANE_EXIT_WAIT
    while tmux.has_session(socket, record.tmux_session) and time.monotonic() < deadline:
        time.sleep(0.1)
    if tmux.has_session(socket, record.tmux_session):
        tmux.kill_session(socket, record.tmux_session)
    problems = []
    if _container_exists(record.container):
        problems.append(f"container {record.container} is still there")
    if tmux.has_session(socket, record.tmux_session):
        problems.append(f"tmux session {record.tmux_session} is still there")
    if problems:
        raise ChtopError(f"stopping {name}: " + "; ".join(problems))
    records.remove(group_dir, name)
    return row


def stop_all(group_dir: Path, grace: float = STOP_GRACE) -> list[dict]:
    """Stop every session of the group; one that fails does not keep the others running."""
    stopped, failed = [], []
    for record in records.load_all(Path(group_dir)):
        try:
            stopped.append(stop_session(group_dir, record.worktree, grace))
        except ChtopError as exc:
            failed.append(str(exc))
    if failed:
        raise ChtopError("\n".join(failed))
    return stopped


# -- restore, attach, log --------------------------------------------------------------------------

def restore_sessions(ws) -> list[dict]:
    """Start every lost session of ``ws``'s group again, with the agent's continue flag (and none of
    the original ARGS: a first prompt is not sent twice).  Worktrees deleted since are dropped."""
    from ..workspace.layout import find_workspace

    started = []
    for row in list_sessions(ws.grouping):
        if row["state"] != "lost":
            continue
        root = ws.worktree_root(row["worktree"])
        if not root.is_dir():
            warn(f"{row['worktree']}: the worktree is gone ({root}); dropping its session record")
            records.remove(ws.grouping, row["worktree"])
            continue
        started.append(start_session(find_workspace(root), row["agent"], [], continue_=True))
    return started


def _live_record(group_dir: Path, name: str) -> records.Record:
    record = records.load(Path(group_dir), name)
    if record is None:
        raise Refused(f"no session for worktree {name}; start one there:  inv session.start")
    row = session_row(record)
    if row["state"] == "lost":
        raise Refused(f"{name}'s session is lost (its terminal server is gone); bring it back:  inv session.restore")
    if row["state"] == "exited":
        raise Refused(f"{name}'s agent has exited ({row['exit_status']}); see inv session.log --name {name}, "
                      f"start it again with inv session.start")
    return record


def attach_argv(group_dir: Path, name: str) -> list[str]:
    """The argv that puts the calling terminal on worktree ``name``'s session (see tmux.attach_argv)."""
    record = _live_record(group_dir, name)
    return tmux.attach_argv(Path(record.tmux_socket), record.tmux_session)


_CONTROL = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


def session_log(group_dir: Path, name: str, raw: bool = False) -> bytes:
    """What worktree ``name``'s session showed (the bounded screen log), oldest first;
    terminal control sequences removed unless ``raw``."""
    path = records.log_path(Path(group_dir), name)
    rotated = path.with_name(path.name + ".1")
    if not path.exists() and not rotated.exists():
        raise UsageError(f"no session log for worktree {name} ({path})")
    data = b"".join(p.read_bytes() for p in (rotated, path) if p.exists())
    if raw:
        return data
    text = _CONTROL.sub(b"", data.replace(b"\r\n", b"\n"))
    return text.replace(b"\r", b"\n")


def rows_as_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1)
