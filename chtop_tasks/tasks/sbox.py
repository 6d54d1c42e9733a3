"""sbox.*: the worktree's sandbox (rootless podman, proxy-only network)."""

from pathlib import Path

from invoke import task

from .. import sandbox
from ..argv import remainder_args
from ..runner import format_command
from ..term import say
from .common import reports_errors

_COMMON_HELP = {
    "dir": "sandbox this directory instead of the current worktree (policy: ~/.config/chtop/sandbox)",
    "network": "proxy (default: no network but the egress proxy), host (host network, warned), "
               "open (host network, no proxy: debugging only, warned)",
    "allow_self_edit": "let the agent WRITE chtop's own code in this worktree (tasks.py, chtop_tasks/, "
                       "sandbox/, ...), which you later run on the host: review before running it",
}


def _plan(command, interactive, purpose, dir, network, allow_self_edit):
    target = sandbox.target_for(Path.cwd(), Path(dir) if dir else None)
    plan = sandbox.plan_launch(target, command, interactive=interactive, purpose=purpose, network=network,
                               allow_self_edit=allow_self_edit, cwd=Path.cwd())
    sandbox.show_warnings(plan)
    return plan


@task(help={**_COMMON_HELP, "dry_run": "print the podman command line and exit"})
@reports_errors
def run(c, dir=None, network="proxy", allow_self_edit=False, dry_run=False):  # noqa: A002
    """Run a command in this worktree's sandbox: inv sbox.run -- CMD [ARGS...]."""
    plan = _plan(remainder_args(), False, "run", dir, network, allow_self_edit)
    if dry_run:
        say(format_command(plan.argv))
        return 0
    return sandbox.run_plan(plan)


@task(help=_COMMON_HELP)
@reports_errors
def shell(c, dir=None, network="proxy", allow_self_edit=False):  # noqa: A002
    """Interactive bash in this worktree's sandbox (sees what the agent sees)."""
    from ..interactive import run_interactive

    plan = _plan(sandbox.shell_command(), True, "shell", dir, network, allow_self_edit)
    return run_interactive(plan.argv, plan.env)


@task(help={"dir": "list the --dir sandboxes (group ~/.config/chtop) instead of this workspace's"})
@reports_errors
def ps(c, dir=False):  # noqa: A002
    """The running sandboxes of this group: name, worktree, purpose, network, status."""
    rows = sandbox.list_sandboxes(sandbox.group_dir_for(Path.cwd(), dir))
    if not rows:
        say("no sandboxes running")
    for row in rows:
        say(f"{row['name']}\t{row['worktree']}\t{row['purpose']}\t{row['network']}\t{row['status']}\t"
            f"{row['command']}")
