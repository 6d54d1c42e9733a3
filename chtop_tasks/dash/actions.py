"""What the dashboard's keys do, as plain functions: the same calls and tasks as the CLI.

Approvals go through ``approvals`` (audited as interface ``dash``), those of another host's
requests through that host's own ``net.allow``/``net.deny`` (``hosts.approvals``);
rebase-down, merge-up, sbox.shell and worktree.create run the real ``inv``
tasks, so their checks and messages are the tasks' own: first with
``--dry-run`` (the plan, shown for confirmation), then for real in the
terminal while the dashboard is suspended.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .. import runner
from ..errors import UsageError
from ..hosts import approvals as host_approvals
from ..hosts.records import Host
from ..proxy import approvals
from ..workspace.layout import Workspace
from . import sessions_adapter

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


def dry_run(cwd: Path, task: str) -> tuple[str, bool]:
    """A task's ``--dry-run`` output (its plan, or why it refuses) and whether it may proceed."""
    result = runner.run(inv_argv(task, "--dry-run"), cwd=cwd, check=False, quiet=True, timeout=300)
    text = (result.stdout + result.stderr).strip()
    # the task's footer is for its command line; here the confirmation's key runs it
    return text.replace(CLI_RUN_HINT, "press y to run it").replace(CLI_EXPECT_HINT, "y lands exactly these tips:"), \
        result.ok


CLI_RUN_HINT = "run again without --dry-run"
CLI_EXPECT_HINT = "to land exactly these tips:"          # merge-up's; the line after it stays (EXPECT_LINE)


EXPECT_LINE = re.compile(r"inv git\.merge-up --expect (\S+)")


def confirmed_argv(task: str, plan: str) -> list[str]:
    """The real run of a task whose dry run ``plan`` was shown and confirmed: merge-up gets the tips
    that plan showed (``--expect``; empty when it showed none), so it lands those or refuses."""
    if task != "git.merge-up":
        return inv_argv(task)
    found = EXPECT_LINE.search(plan)
    return inv_argv(task, "--expect", found.group(1) if found else "")


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
