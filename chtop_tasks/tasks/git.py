"""git.*: git across every repo of this workspace at once."""

from ..argv import remainder_args
from ..taskdef import task
from ..term import say
from .common import lazy, reports_errors

gitops = lazy("workspace.gitops")
dotfiles = lazy("workspace.dotfiles")
layout = lazy("workspace.layout")
remotes = lazy("workspace.remotes")


@task
@reports_errors
def status(c):
    """git status in every repo, then how each branch relates to integration (-- ARGS pass through)."""
    return gitops.git_status(layout.find_workspace(), remainder_args())


@task(help={"integration": "each repo against its own integration branch (git diff --merge-base BRANCH)"})
@reports_errors
def diff(c, integration=False):
    """git diff in every repo (-- ARGS pass through, e.g. -- --stat)."""
    if integration:
        return gitops.git_diff_integration(layout.find_workspace(), remainder_args())
    return gitops.git_diff(layout.find_workspace(), remainder_args())


def sandbox_names(ws) -> list[str]:
    from ..sandbox.launcher import sandboxes_in

    return [row["name"] for row in sandboxes_in(ws.grouping, ws.root)]


@task(name="rebase-down", help={"dry_run": "print what would run, change nothing"})
@reports_errors
def rebase_down(c, dry_run=False):
    """In a worktree: rebase each repo's feature branch onto its integration branch."""
    ws = layout.find_workspace()
    code = gitops.rebase_down(ws, remainder_args(), dry_run=dry_run, running_sandboxes=sandbox_names)
    if not dry_run:
        written = dotfiles.refresh_workspace_files(ws)
        if written:
            say("re-rendered dotfiles: " + ", ".join(ws.display(p) for p in written))
    return code


@task(name="merge-up", help={"dry_run": "print what would run, change nothing",
                             "no_ff": "make a merge commit instead of --ff-only",
                             "expect": "REPO=SHA,... (the dry run's last line): refuse, moving nothing, "
                                       "unless exactly these tips land"})
@reports_errors
def merge_up(c, dry_run=False, no_ff=False, expect=None):
    """In a worktree: fast-forward each integration branch to this feature (in the toplevel)."""
    return gitops.merge_up(layout.find_workspace(), no_ff=no_ff, dry_run=dry_run, expect=expect)


@task
@reports_errors
def pull(c):
    """In the toplevel (or a worktree: acts on its toplevel): fetch every repo, fast-forward clean integration branches."""
    return remotes.pull(layout.find_workspace())


@task(help={"dry_run": "print what would be pushed, push nothing",
            "feature": "also push feature branch NAME of every repo that has it (never forced)"})
@reports_errors
def push(c, dry_run=False, feature=""):
    """Push each integration branch that is ahead of its remote (never forced), one line per repo."""
    return remotes.push(layout.find_workspace(), dry_run=dry_run, feature=feature)
