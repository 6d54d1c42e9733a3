"""session.*: persistent agents in tmux sessions that outlive the terminal (logic in chtop_tasks/sessions/)."""

import os
import sys
import time
from pathlib import Path

from ..cli.taskdef import task
from ..core import term
from ..core.argv import remainder_args
from ..core.errors import UsageError, WorkspaceError
from ..core.runner import echo
from ..core.term import say
from ..workspace.targets import target_for
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


def _place(name, host: str, verb: str):
    """Where ``--name``/``--host`` say the worktree is (None: neither was given, this worktree)."""
    from ..hosts.where import named_place

    return named_place(name or "", host, f"session.{verb}")


def _there(place, *args: str, in_worktree: bool = False) -> int:
    """A session task run by the host's own chtop (in its worktree when ``in_worktree``)."""
    from ..hosts.fleet import task_there

    return task_there(place.host.name, *args, worktree=place.name if in_worktree else "")


NAME_HELP = "the worktree, here or on the host chtop recorded for it (default: the one you are in)"
HOST_HELP = "the host worktree --name is on (default: where chtop recorded it; 'local': this machine)"


def _age(since: float) -> str:
    seconds = max(0, int(time.time() - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


@task(help={"agent": "the agent CLI (default claude; see inv sbox.agent)",
            "continue_": "continue the agent's last conversation (its continue flag, e.g. claude --continue)",
            "host": HOST_HELP, "name": NAME_HELP})
@reports_errors
def start(c, agent="claude", continue_=False, host="", name=""):
    """Start this worktree's agent in its sandbox in a detached tmux session: inv session.start [-- ARGS]."""
    from ..hosts.where import workspace_of
    from ..sessions import start_session

    place = _place(name, host, "start")
    if place and place.remote:
        return _there(place, "session.start", "--agent", agent, *(["--continue"] if continue_ else []),
                      *(["--", *remainder_args()] if remainder_args() else []), in_worktree=True)
    if place is None:
        _this_worktree()
    row = start_session(workspace_of(place) if place else _workspace(), agent, remainder_args(), continue_)
    say(f"started {row['worktree']}: {row['agent']} in tmux session {row['session']}.  "
        f"Attach: inv session.attach   List: inv session.list")


@task(help={"name": NAME_HELP, "host": HOST_HELP + " (attached over ssh -t)"})
@reports_errors
def attach(c, name=None, host=""):
    """Attach this terminal to a worktree's session (detach: C-b d; the agent keeps running)."""
    from ..sessions import attach as attach_session

    place = _place(name, host, "attach")
    if place and place.remote:
        from ..hosts.fleet import attach_argv_there, must_answer

        must_answer(place.host.name)
        argv = attach_argv_there(place.host.name, place.name)
        echo(argv)
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    sys.stdout.flush()
    return attach_session(_workspace().grouping, _name_or_here(name))


@task(name="list", help={"json": "print this machine's sessions as a JSON list of objects (worktree, agent, state, since, ...)"})
@reports_errors
def list_(c, json=False):
    """Every session of this group (and of every host): worktree, agent, state, since, pending approvals."""
    from ..hosts.fleet import say_silent, session_states, silent_hosts
    from ..sessions import list_sessions
    from ..sessions.listing import rows_as_json

    rows = list_sessions(_workspace().grouping)
    if json:                             # this machine's only: what another host's chtop asks
        say(rows_as_json(rows))
        return
    hosts = session_states()
    if not rows and not any(state.sessions for state in hosts):
        say("no sessions (start one in a worktree: inv session.start)")
    column = f"{'local':16} " if hosts else ""
    for row in rows:
        say(column + _session_line(row))
    for state in hosts:
        for row in state.sessions:
            say(f"{state.host.name:16} " + _session_line(row))
    return say_silent(silent_hosts(hosts))


def _session_line(row: dict) -> str:
    state = f"exited ({row['exit_status']})" if row["state"] == "exited" else row["state"]
    pending = f"{row['pending']} pending approval(s)" if row["pending"] else ""
    return f"{row['worktree']:16} {row['agent']:8} {state:12} {_age(row['since']):10} {pending}".rstrip()


@task(help={"name": NAME_HELP, "all": "stop every session of the group (this machine's)",
            "grace": "seconds between SIGTERM and SIGKILL", "host": HOST_HELP})
@reports_errors
def stop(c, name=None, all=False, grace=10.0, host=""):  # noqa: A002 - --all is the flag's name
    """End a session's agent (SIGTERM, then SIGKILL after the grace period), its container and tmux session."""
    from ..sessions import stop_all, stop_session

    place = None if all else _place(name, host, "stop")
    if place and place.remote:
        return _there(place, "session.stop", "--name", place.name, "--grace", str(grace))
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


@task(help={"name": NAME_HELP, "raw": "the bytes as the terminal got them (control sequences kept)",
            "host": HOST_HELP + " (a host's log is shown inert; no --raw)"})
@reports_errors
def log(c, name=None, raw=False, host=""):
    """Show what a session's screen showed (its bounded log), also while nobody was attached."""
    from ..sessions import session_log

    place = _place(name, host, "log")
    if place and place.remote:
        if raw:
            raise UsageError("session.log of a host's worktree shows its log inert; --raw works on the host itself")
        return _there(place, "session.log", "--name", place.name)
    data = session_log(_workspace().grouping, _name_or_here(name), raw=raw)
    if not raw:                  # the agent's screen, made inert (--raw: the bytes, as asked)
        data = term.inert(data.decode(errors="replace")).encode()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
