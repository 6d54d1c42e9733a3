"""What the dashboard's keys do, as plain functions: the same calls and tasks as the CLI.

Approvals go through ``approvals`` (audited as interface ``dash``), those of another host's
requests through that host's own ``net.allow``/``net.deny`` (``hosts.approvals``);
rebase-down, merge-up, sbox.shell and worktree.create run the real ``inv``
tasks, so their checks and messages are the tasks' own: first with
``--dry-run`` (the plan, shown for confirmation), then for real in the
terminal while the dashboard is suspended.  On another host's row the same keys act there: attach
and shell are ``session.attach --host`` and ``chtop go --host`` (``ssh -t``), start/stop and the diff
the host's own ``session.*`` and ``git.diff`` (their words kept as data and shown inert), rebase-down
and merge-up the tasks here with ``--host HOST --name NAME``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..core import runner
from ..core.errors import ChtopError, UsageError
from ..hosts import approvals as host_approvals
from ..hosts import fleet
from ..hosts.records import Host
from ..hosts.ssh import LONG_TIMEOUT
from ..proxy import approvals
from ..workspace.layout import Workspace
from . import sessions_adapter
from .remote import RemoteRow

ALLOW_FOR_DEFAULT = "1h"
KEY_SCOPES = {"group": "allow for the group", "worktree": "allow for this worktree only",
              "once": "allow once (the held request only)", "for": "allow for a while", "deny": "deny for good"}


def decide(top: Workspace, item: dict, scope: str, ttl: str | None = None, private: bool = False) -> list[str]:
    """Carry out a decision on one pending request (a row of the pending pane).  An allow names its
    port when it is not 443 or 80 (``spec``: ``example.org:8443``); a deny denies the host on every port."""
    host, worktree = item["host"], item.get("worktree")
    if scope == "worktree" and not worktree:
        raise UsageError(f"{host} was asked for on the group socket, not a worktree's: allow it for the "
                         "group (g) or once (o) instead")
    flags = {"private": private and scope != "deny"}
    if scope == "worktree":
        flags["worktree"] = worktree
    elif scope == "once":
        flags.update(once=True, worktree=worktree)
    elif scope == "for":
        flags["ttl"] = ttl or ALLOW_FOR_DEFAULT
    elif scope == "deny":
        flags = {"deny": True}
    d = approvals.plan_decision(host if scope == "deny" else item.get("spec", host), **flags)
    return approvals.apply_decision(top.grouping, top.policy_dir, d, "dash")


def inv_argv(task: str, *args: str) -> list[str]:
    """The same task the user would type, run by this Python."""
    return [sys.executable, "-m", "invoke", task, *args]


def dry_run(cwd: Path, task: str, *args: str) -> tuple[str, bool]:
    """A task's ``--dry-run`` output (its plan, or why it refuses) and whether it may proceed
    (``args``: the task's own, e.g. ``--host gpu1 --name dev`` for another host's worktree)."""
    result = runner.run(inv_argv(task, *args, "--dry-run"), cwd=cwd, check=False, quiet=True, timeout=300)
    text = (result.stdout + result.stderr).strip()
    # the task's footer is for its command line; here the confirmation's key runs it
    return text.replace(CLI_RUN_HINT, "press y to run it").replace(CLI_EXPECT_HINT, "y lands exactly these tips:"), \
        result.ok


CLI_RUN_HINT = "run again without --dry-run"
CLI_EXPECT_HINT = "to land exactly these tips:"          # merge-up's; the line after it stays (EXPECT_LINE)


EXPECT_LINE = re.compile(r"inv git\.merge-up (?:--host \S+ --name \S+ )?--expect (\S+)")   # a host's too


def confirmed_argv(task: str, plan: str, *args: str) -> list[str]:
    """The real run of a task whose dry run ``plan`` was shown and confirmed: merge-up gets the tips
    that plan showed (``--expect``; empty when it showed none), so it lands those or refuses."""
    if task != "git.merge-up":
        return inv_argv(task, *args)
    found = EXPECT_LINE.search(plan)
    return inv_argv(task, *args, "--expect", found.group(1) if found else "")


def run_in_terminal(argv: list[str], cwd: Path, pause: bool = True) -> int:
    """Run a command on the real terminal (the app is suspended meanwhile), on a cleared screen."""
    if sys.stdout.isatty():
        print("\033[H\033[2J", end="", flush=True)
    result = runner.run(argv, cwd=cwd, check=False, capture=False, timeout=None, stdin=None)
    if pause:
        print(f"\n[exit {result.returncode}] press Enter to return to the dashboard", flush=True)
        try:
            input()
        except EOFError:
            pass
    return result.returncode


def attach_argv(top: Workspace, worktree: str, session: dict | None) -> list[str]:
    if session is None or session.get("state") not in sessions_adapter.LIVE_STATES:
        raise UsageError(f"no live agent session in {worktree}: start one with s")
    return sessions_adapter.attach_argv(top.grouping, sessions_adapter.session_name(session))


def start_session(wt: Workspace) -> str:
    sessions_adapter.start_session(wt, sessions_adapter.DEFAULT_AGENT, [], False)
    return f"started a {sessions_adapter.DEFAULT_AGENT} session in {wt.name}"


def stop_session(top: Workspace, worktree: str, session: dict | None) -> str:
    if session is None or session.get("state") not in sessions_adapter.LIVE_STATES:
        raise UsageError(f"no live agent session in {worktree}")
    sessions_adapter.stop_session(top.grouping, sessions_adapter.session_name(session))
    return f"stopped the session in {worktree}"


def decide_remote(host: Host, item: dict, scope: str, ttl: str | None = None, private: bool = False) -> list[str]:
    """A decision on a pending request of another host (a row its ``net.pending --json`` gave),
    taken there by its own ``net.allow``/``net.deny``: its lists, its proxy, its audit log."""
    worktree = item.get("worktree")
    if scope == "worktree" and not worktree:
        raise UsageError(f"{item['host']} was asked for on {host.name}'s group socket, not a worktree's: allow "
                         "it for the group (g) or once (o) instead")
    domain = item["host"] if scope == "deny" else item.get("spec", item["host"])
    lines = host_approvals.decide_there(host, domain, scope, worktree, ttl or ALLOW_FOR_DEFAULT, private)
    return [f"{host.name}: {line}" for line in lines]


# -- another host's worktree: the host's own tasks, over ssh (``hosts.fleet``), its words inert ------

def usable(row: RemoteRow) -> RemoteRow:
    """``row`` when it names a worktree there; else why its keys do nothing."""
    if not row.worktree:
        raise UsageError(f"host {row.host.name}: {row.error}: nothing there to act on")
    return row


def live_remote_session(row: RemoteRow) -> dict:
    session = usable(row).session
    if session is None or session.get("state") not in sessions_adapter.LIVE_STATES:
        raise UsageError(f"no live agent session in {row.host.name}:{row.worktree}: start one with s")
    return session


def remote_attach_argv(row: RemoteRow) -> list[str]:
    """``ssh -t`` into the host's ``session.attach`` (as ``inv session.attach --host``)."""
    live_remote_session(row)
    return fleet.attach_argv_there(row.host.name, row.worktree)


def remote_shell_argv(row: RemoteRow) -> list[str]:
    """``chtop go NAME --host HOST``: ``ssh -t`` into a login shell in the worktree there."""
    return fleet.go_argv_there(usable(row).host.name, row.worktree)


def remote_task_args(row: RemoteRow) -> tuple[str, ...]:
    """The flags that point a task here at the row's worktree there (``--host H --name N``)."""
    return ("--host", usable(row).host.name, "--name", row.worktree)


def said_there(row: RemoteRow, task: str, result) -> str:
    """The last line the host's task said (its words, made inert where shown), or why it failed."""
    lines = [line for line in (result.stdout + "\n" + result.stderr).splitlines()
             if line.strip() and not line.startswith("$ ")]
    last = lines[-1] if lines else ""
    if not result.ok:
        raise ChtopError(f"{row.host.name}: {task} failed (exit {result.returncode}): {last}")
    return f"{row.host.name}: {last or task + ' done'}"


def remote_start_session(row: RemoteRow) -> str:
    """The host's own ``session.start`` in the worktree there (its default agent, as ``s`` here)."""
    if row.session is not None and row.session.get("state") in sessions_adapter.LIVE_STATES:
        raise UsageError(f"{row.host.name}:{row.worktree} already has a live session: attach with a")
    result = fleet.task_output_there(usable(row).host, "session.start", "--agent", sessions_adapter.DEFAULT_AGENT,
                                     worktree=row.worktree, timeout=LONG_TIMEOUT)
    return said_there(row, "session.start", result)


def remote_stop_session(row: RemoteRow) -> str:
    live_remote_session(row)
    result = fleet.task_output_there(row.host, "session.stop", "--name", row.worktree, timeout=LONG_TIMEOUT)
    return said_there(row, "session.stop", result)


def remote_diff(row: RemoteRow, full: bool) -> str:
    """The host's own ``git.diff --integration`` of the worktree there (``-- --stat`` unless ``full``)."""
    if not row.worktree:
        return f"host {row.host.name}: {row.error}"
    result = fleet.task_output_there(row.host, "git.diff", "--integration", *([] if full else ["--", "--stat"]),
                                     worktree=row.worktree)
    if not result.ok:
        return f"cannot diff {row.host.name}:{row.worktree} there (exit {result.returncode}): {result.error_tail()}"
    return result.stdout.strip() or "no changes"
