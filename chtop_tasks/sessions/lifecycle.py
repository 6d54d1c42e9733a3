"""Starting, stopping, restoring and attaching a group's persistent agent sessions.

A session is a worktree's agent running in its sandbox inside a detached
tmux session on the group's own tmux server (``tmux.py``).  The host-side
record (``records.py``) says what was started and what the pane process saw
last; ``listing.py`` checks it against tmux, and ``restore_sessions`` starts
each lost one again with the agent's continue flag.
"""

from __future__ import annotations

import os
import secrets
import shlex
import sys
import time
from pathlib import Path

from ..core import runner, term
from ..core.errors import ChtopError, CommandFailed, Refused, UsageError
from ..core.term import say, warn
from ..sandbox.agent_config import check_user_settings, remove_session_state
from ..sandbox.once import VERBOSE_ENV, first_time
from ..workspace.targets import target_for
from . import records, tmux
from .listing import is_live, list_sessions, require_known_worktree, session_row

STOP_GRACE = 10.0
PANE_EXIT_WAIT = 5.0
SANDBOX_START_WAIT = 30.0   # seconds for the pane process to plan and start the agent's sandbox
FIRST_SECONDS = 4.0         # an agent that ends this soon after its sandbox starts failed to start
LAST_LINES = 12             # lines of its screen shown when an agent has exited


class SessionRunning(Refused):
    """This worktree's session already runs."""


def _package_parent() -> str:
    return str(Path(__file__).resolve().parents[2])


def _python_module(module: str, *args: str) -> list[str]:
    """argv running one of chtop's modules with this python and this chtop (PYTHONPATH set), from /:
    ``python -m`` puts its cwd first on sys.path, and a worktree's repo dirs are the agent's to write.
    It keeps its bytecode where this process does (tasks.py: never beside the agent-writable source),
    whatever environment the tmux server was started with."""
    cache = [f"PYTHONPYCACHEPREFIX={sys.pycache_prefix}"] if sys.pycache_prefix else []
    return ["env", "--chdir=/", f"PYTHONPATH={_package_parent()}", *cache, sys.executable, "-m", module, *args]


# -- start -----------------------------------------------------------------------------------------

def start_session(ws, agent: str = "claude", args: list[str] | None = None, continue_: bool = False) -> dict:
    """Start ``agent`` (with ``args``; ``continue_`` adds its continue flag) in feature worktree
    ``ws``'s sandbox inside a detached tmux session; return its row at once.

    SessionRunning when this worktree's session already runs (nothing started); the launch is
    checked first (agent installed, secrets, policy, proxy), so a bad one fails here with its error.
    """
    args = list(args or [])
    target = target_for(ws.root)                    # refuses the toplevel
    _clear_earlier_run(target)
    _check_launch(target, agent, args, continue_)
    socket = tmux.socket_path(target.group_dir, create=True)
    prefix, how = ([], "") if tmux.server_running(socket) else tmux.scope_prefix(target.group_dir)
    record = _new_record(target, agent, args, continue_, socket)
    _open_tmux_session(record, prefix)
    if how and first_time(target.group_dir, f"how the terminal server runs: {bool(prefix)}"):
        say(f"chtop: {how}")
    return _check_started(target.group_dir, record.worktree, record.session_id)


def _clear_earlier_run(target) -> None:
    """SessionRunning if the worktree's session runs; else what an earlier run left goes."""
    old = records.load(target.group_dir, target.name)
    if old is None:
        return
    if old.status == "running" and is_live(old):
        raise SessionRunning(f"worktree {target.name}'s session already runs ({old.tmux_session}, {old.agent}); "
                             f"nothing started.  Attach: inv session.attach --name {target.name}")
    _remove_container(old)
    remove_session_state(target.agent_home, old.session_id)


def _check_launch(target, agent: str, args: list[str], continue_: bool) -> None:
    """Plan the launch once here: errors (a broken policy, layout or claude settings file) surface
    now, in this terminal."""
    from ..agents.registry import agent_request, get_agent
    from ..sandbox import plan_request
    from ..sandbox.launcher import say_request

    command = get_agent(agent).argv(args, continue_)   # a continue flag the agent lacks is refused here
    check_user_settings(target)
    request = agent_request(agent, args, target.root, interactive=True, continue_=continue_)
    plan = plan_request(request)       # reads only: a broken policy or layout is refused here, in this terminal
    say_request(request, plan)      # the login advice and the limits warning: once per group
    print(f"chtop: {target.name}: the agent's command: {shlex.join(command)}", file=sys.stderr, flush=True)


def _new_record(target, agent: str, args: list[str], continue_: bool, socket: Path) -> records.Record:
    now = records.now()
    record = records.Record(
        worktree=target.name, root=str(target.root), group=str(target.group_dir),
        policy_dir=str(target.policy_dir), agent=agent, args=args, continue_=continue_,
        session_id=secrets.token_hex(8), tmux_socket=str(socket), tmux_session=tmux.session_name(target.name),
        started_at=now, since=now, agent_home=str(target.agent_home))
    records.save(target.group_dir, record)
    return record


def _open_tmux_session(record: records.Record, prefix: list[str]) -> None:
    """The detached tmux session running the pane process, handed this process's environment."""
    group, name = Path(record.group), record.worktree
    records.write_json_atomic(records.env_path(group, name), dict(os.environ))
    argv = tmux.new_session_argv(Path(record.tmux_socket), record.tmux_session, Path(record.root),
                                 _python_module("chtop_tasks.sessions.pane", str(group), name, record.session_id),
                                 _python_module("chtop_tasks.sessions.screenlog",
                                                str(records.log_path(group, name))))
    full = [*prefix, *argv]
    # the whole tmux line is some 600 characters: echoed the first time in a group (and under
    # CHTOP_VERBOSE), later one short line
    whole = first_time(group, "the tmux new-session line")
    if not whole:
        print(f"$ tmux new-session -d -s {record.tmux_session} …   [full command: {VERBOSE_ENV}=1]",
              file=sys.stderr, flush=True)
    try:
        runner.run(full, timeout=30, quiet=not whole)
    except CommandFailed:
        records.remove(group, name)
        raise


def _check_started(group: Path, name: str, session_id: str) -> dict:
    """The new session's row once its agent has run for its first seconds; ChtopError with the
    agent's exit status and last lines when it ended by then (a missing login, an unreachable API)."""
    deadline, watching = time.monotonic() + SANDBOX_START_WAIT, False
    while True:
        record = _ended_or_current(group, name, session_id)
        if record.container and not watching:       # its sandbox starts now: watch the agent's first seconds
            deadline, watching = time.monotonic() + FIRST_SECONDS, True
        if time.monotonic() > deadline:
            return session_row(record)
        time.sleep(0.1)


def _ended_or_current(group: Path, name: str, session_id: str) -> records.Record:
    """The session's record while it runs; ChtopError saying why once it has ended."""
    record = records.load(group, name)
    if record is not None and record.session_id == session_id and record.status != "exited" \
            and not is_live(record):
        record = records.load(group, name)          # the pane records the exit just before it ends
    if record is None or record.session_id != session_id:
        raise ChtopError(f"the session record of {name} vanished while starting")
    if record.status == "exited":
        raise ChtopError(f"{name}'s agent ended within its first seconds, so no session runs; "
                         + exit_report(group, record))
    if not is_live(record):
        raise ChtopError(f"{name}'s tmux session ended at once; see: inv session.log --name {name}")
    return record


def exit_report(group: Path, record: records.Record) -> str:
    """Why an exited session ended: its exit status, the pane process's error, the last lines of
    its screen (made inert), and the commands that show more and start it again."""
    from .screenlog import session_log

    name = record.worktree
    parts = [f"exit status {record.exit_status}" + (f": {term.inert(record.error)}" if record.error else "")]
    try:
        text = session_log(group, name).decode(errors="replace")
    except ChtopError:
        text = ""
    lines = text.rstrip().splitlines()[-LAST_LINES:]
    if lines:
        parts.append("its last lines:\n" + "\n".join(f"  | {term.inert_line(line)}" for line in lines))
    parts.append(f"the whole log: inv session.log --name {name}    start it again: inv session.start")
    return "\n".join(parts)


# -- stop ------------------------------------------------------------------------------------------

def _podman(*args: str, check: bool = False, quiet: bool = False, timeout: float = 60):
    return runner.run(["podman", *args], check=check, quiet=quiet, timeout=timeout)


def _true_within(seconds: float, interval: float, condition) -> bool:
    """Whether ``condition()`` holds within ``seconds``, asked every ``interval`` seconds."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


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
        require_known_worktree(group_dir, name)
        raise UsageError(f"no session for worktree {name!r} in {group_dir} (inv session.list shows them)")
    row = session_row(record)
    record = records.load(group_dir, name) or record      # the pane may have recorded its container by now
    container_gone = False                                # seen to end after the SIGTERM
    if _container_exists(record.container):
        _podman("kill", "--signal", "TERM", record.container)
        container_gone = _true_within(grace, 0.25, lambda: not _container_exists(record.container))
        if not container_gone:
            warn(f"{name}: the agent did not end within {grace:g}s of SIGTERM; killing it")
            _podman("rm", "-f", "-t", "0", record.container)
    socket = Path(record.tmux_socket)
    pane_gone = _true_within(PANE_EXIT_WAIT, 0.1, lambda: not tmux.has_session(socket, record.tmux_session))
    if not pane_gone:
        tmux.kill_session(socket, record.tmux_session)
        pane_gone = not tmux.has_session(socket, record.tmux_session)
    if not container_gone:    # killed, or not there yet when asked: a starting pane may have made it since
        container_gone = not _container_exists(record.container)
    problems = ([] if container_gone else [f"container {record.container} is still there"]) + \
        ([] if pane_gone else [f"tmux session {record.tmux_session} is still there"])
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


# -- restore, attach --------------------------------------------------------------------------

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
        require_known_worktree(Path(group_dir), name)
        raise Refused(f"no session for worktree {name}; start one there:  inv session.start")
    row = session_row(record)
    if row["state"] == "lost":
        raise Refused(f"{name}'s session is lost (its terminal server is gone); bring it back:  inv session.restore")
    if row["state"] == "exited":
        raise Refused(f"{name}'s agent has exited ({row['exit_status']}); " + exit_report(Path(group_dir), record))
    return record


def attach_argv(group_dir: Path, name: str) -> list[str]:
    """The argv that puts the calling terminal on worktree ``name``'s session (see tmux.attach_argv)."""
    record = _live_record(group_dir, name)
    return tmux.attach_argv(Path(record.tmux_socket), record.tmux_session)


class AgentExited(ChtopError):
    """The agent of the attached session ended while the user watched it."""


def attach(group_dir: Path, name: str) -> int:
    """Put this terminal on worktree ``name``'s session until the user detaches (0, or tmux's own
    status); AgentExited, saying why, when the agent ends meanwhile (tmux shows only ``[exited]``)."""
    from ..core.passthrough import run_interactive

    record = _live_record(group_dir, name)
    status = run_interactive(tmux.attach_argv(Path(record.tmux_socket), record.tmux_session), pty=False)
    after = records.load(Path(group_dir), name)
    if after is not None and after.session_id == record.session_id and after.status == "exited":
        raise AgentExited(f"{name}'s agent has exited ({after.exit_status}); " + exit_report(Path(group_dir), after))
    return status
