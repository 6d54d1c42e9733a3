"""session.*: persistent agents in tmux sessions that outlive the terminal (logic in chtop_tasks/sessions/)."""

import os
import sys
import time
from pathlib import Path

from .. import term
from ..argv import remainder_args
from ..errors import UsageError, WorkspaceError
from ..places import target_for
from ..runner import echo
from ..taskdef import task
from ..term import say
from .common import reports_errors


def _workspace():
    from ..workspace.layout import find_workspace

    return find_workspace(Path.cwd())


def _this_worktree() -> str:
    """The worktree around the current directory; the toplevel and non-workspace dirs are refused."""
    target = target_for(Path.cwd())
    if target.kind != "worktree":
        raise WorkspaceError(f"{Path.cwd()} is not inside a chtop workspace: sessions run in a feature worktree")
    return target.name


def _name_or_here(name):
    return name if name else _this_worktree()


def _required_name(name, verb: str) -> str:
    if not name:
        raise UsageError(f"session.{verb} --host HOST needs --name NAME (the worktree there)")
    return name


def _there(host: str, name, *args: str, in_worktree: bool = False) -> int:
    """A session task run by the host's own chtop (in its worktree ``name`` when ``in_worktree``)."""
    from ..hosts.fleet import task_there

    if not host:
        raise UsageError("--name works with --host here; in this machine's worktree, run it there (cd ../NAME)")
    _required_name(name, args[0].split(".")[1])
    return task_there(host, *args, worktree=name if in_worktree else "")


def _age(since: float) -> str:
    seconds = max(0, int(time.time() - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


@task(help={"agent": "the agent CLI (default claude; see inv sbox.agent)",
            "continue_": "continue the agent's last conversation (its continue flag, e.g. claude --continue)",
            "host": "start it on this recorded host, in worktree --name there",
            "name": "with --host: the worktree there"})
@reports_errors
def start(c, agent="claude", continue_=False, host="", name=""):
    """Start this worktree's agent in its sandbox in a detached tmux session: inv session.start [-- ARGS]."""
    from ..sessions import start_session

    if host or name:
        return _there(host, name, "session.start", "--agent", agent, *(["--continue"] if continue_ else []),
                      *(["--", *remainder_args()] if remainder_args() else []), in_worktree=True)
    _this_worktree()
    row = start_session(_workspace(), agent, remainder_args(), continue_)
    say(f"started {row['worktree']}: {row['agent']} in tmux session {row['session']}.  "
        f"Attach: inv session.attach   List: inv session.list")


@task(help={"name": "the worktree whose session to attach (default: this one)",
            "host": "attach over ssh -t to the session on this recorded host (needs --name)"})
@reports_errors
def attach(c, name=None, host=""):
    """Attach this terminal to a worktree's session (detach: C-b d; the agent keeps running)."""
    from ..sessions import attach as attach_session

    if host:
        from ..hosts.fleet import attach_argv_there

        argv = attach_argv_there(host, _required_name(name, "attach"))
        echo(argv)
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    sys.stdout.flush()
    return attach_session(_workspace().grouping, _name_or_here(name))


@task(name="list", help={"json": "print this machine's sessions as a JSON list of objects (worktree, agent, state, since, ...)"})
@reports_errors
def list_(c, json=False):
    """Every session of this group (and of every host): worktree, agent, state, since, pending approvals."""
    from ..hosts.fleet import session_states
    from ..sessions import list_sessions
    from ..sessions.listing import rows_as_json

    rows = list_sessions(_workspace().grouping)
    if json:                             # this machine's only: what another host's chtop asks
        say(rows_as_json(rows))
        return
    hosts = session_states()
    if not rows and not hosts:
        say("no sessions (start one in a worktree: inv session.start)")
    column = f"{'local':16} " if hosts else ""
    for row in rows:
        say(column + _session_line(row))
    for state in hosts:
        if not state.reachable:
            say(f"{state.host.name:16} unreachable: {state.error}")
        for row in state.sessions:
            say(f"{state.host.name:16} " + _session_line(row))


def _session_line(row: dict) -> str:
    state = f"exited ({row['exit_status']})" if row["state"] == "exited" else row["state"]
    pending = f"{row['pending']} pending approval(s)" if row["pending"] else ""
    return f"{row['worktree']:16} {row['agent']:8} {state:12} {_age(row['since']):10} {pending}".rstrip()


@task(help={"name": "the worktree whose session to stop (default: this one)", "all": "stop every session of the group",
            "grace": "seconds between SIGTERM and SIGKILL",
            "host": "stop the session of worktree --name on this recorded host"})
@reports_errors
def stop(c, name=None, all=False, grace=10.0, host=""):  # noqa: A002 - --all is the flag's name
    """End a session's agent (SIGTERM, then SIGKILL after the grace period), its container and tmux session."""
    from ..sessions import stop_all, stop_session

    if host:
        return _there(host, name, "session.stop", "--name", _required_name(name, "stop"), "--grace", str(grace))
    group = _workspace().grouping
    rows = stop_all(group, float(grace)) if all else [stop_session(group, _name_or_here(name), float(grace))]
    for row in rows:
        say(f"stopped {row['worktree']} ({row['agent']})")
    if not rows:
        say("no sessions to stop")


@task
@reports_errors
def restore(c):
    """Start every lost session of this group again (after a reboot), with the agent's continue flag."""
    from ..sessions import restore_sessions

    started = restore_sessions(_workspace())
    for row in started:
        say(f"restored {row['worktree']}: {row['agent']} {' '.join(row['args'])}(continued) in {row['session']}")
    if not started:
        say("no lost sessions to restore")


@task(help={"name": "the worktree whose log to show (default: this one)",
            "raw": "the bytes as the terminal got them (control sequences kept)",
            "host": "the log of worktree --name's session on this recorded host (inert; no --raw)"})
@reports_errors
def log(c, name=None, raw=False, host=""):
    """Show what a session's screen showed (its bounded log), also while nobody was attached."""
    from ..sessions import session_log

    if host:
        if raw:
            raise UsageError("session.log --host shows the host's log inert; --raw works on the host itself")
        return _there(host, name, "session.log", "--name", _required_name(name, "log"))
    data = session_log(_workspace().grouping, _name_or_here(name), raw=raw)
    if not raw:                  # the agent's screen, made inert (--raw: the bytes, as asked)
        data = term.inert(data.decode(errors="replace")).encode()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
