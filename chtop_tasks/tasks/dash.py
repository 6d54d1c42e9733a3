"""dash: mission control, one screen for every worktree, agent and pending approval."""

import sys

from ..cli.taskdef import task
from ..core.errors import UsageError
from .common import lazy, reports_errors

layout = lazy("workspace.layout")


@task(help={"interval": "seconds between refreshes (default 2)"})
@reports_errors
def dash(c, interval=2.0):
    """Mission control: worktrees, agents, pending approvals and diffs on one live screen."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("inv dash needs a terminal (run it in a terminal or a tmux pane)")
    from ..dash.app import run_dash

    return run_dash(layout.find_workspace(), float(interval))
