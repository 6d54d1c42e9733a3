"""git.*: git across every repo of this workspace at once."""

from ..argv import remainder_args
from ..errors import UsageError
from ..taskdef import task
from ..term import say
from .common import lazy, reports_errors

gitops = lazy("workspace.gitops")
dotfiles = lazy("workspace.dotfiles")
layout = lazy("workspace.layout")
remotes = lazy("workspace.remotes")
fleet = lazy("hosts.fleet")
host_merge = lazy("hosts.merge")


@task
@reports_errors
def status(c):
    """git status in every repo, then how each branch relates to integration (-- ARGS pass through)."""
    ws = layout.find_workspace()
    code = gitops.git_status(ws, remainder_args())
    if ws.is_toplevel:                   # the whole group: every host's worktrees too
        for line in fleet.status_lines():
            say(line)
    return code


def on_host(host: str, name: str, *args: str) -> int:
    """The host's own task, run in its worktree ``name`` (--host needs --name)."""
    if not name:
        raise UsageError(f"{args[0]} --host HOST needs --name NAME (the worktree there)")
    return fleet.task_there(host, *args, worktree=name)


@task(help={"integration": "each repo against its own integration branch (git diff --merge-base BRANCH)",
            "host": "the diff of worktree --name on this recorded host (its output inert)",
            "name": "with --host: the worktree there"})
@reports_errors
def diff(c, integration=False, host="", name=""):
    """git diff in every repo (-- ARGS pass through, e.g. -- --stat)."""
    if host:
        return on_host(host, name, "git.diff", *(["--integration"] if integration else []),
                       *(["--", *remainder_args()] if remainder_args() else []))
    if integration:
        return gitops.git_diff_integration(layout.find_workspace(), remainder_args())
    return gitops.git_diff(layout.find_workspace(), remainder_args())


def sandbox_names(ws) -> list[str]:
    from ..sandbox.running import sandboxes_in

    return [row["name"] for row in sandboxes_in(ws.grouping, ws.root)]


@task(name="rebase-down", help={"dry_run": "print what would run, change nothing",
                                "host": "rebase worktree --name on this recorded host (its own checks; "
                                        "inv host.update first brings it this toplevel's integration branches)",
                                "name": "with --host: the worktree there"})
@reports_errors
def rebase_down(c, dry_run=False, host="", name=""):
    """In a worktree: rebase each repo's feature branch onto its integration branch."""
    if host:
        return on_host(host, name, "git.rebase-down", *(["--dry-run"] if dry_run else []),
                       *(["--", *remainder_args()] if remainder_args() else []))
    ws = layout.find_workspace()
    code = gitops.rebase_down(ws, remainder_args(), dry_run=dry_run, running_sandboxes=sandbox_names)
    moved = remotes.unpulled(ws)
    if moved:
        say("the remotes have moved since the last git.pull:\n  " + "\n  ".join(moved)
            + f"\nbring them in, then rebase onto them:  cd {ws.toplevel} && inv git.pull && "
              f"cd {ws.root} && inv git.rebase-down")
    if not dry_run:
        written = dotfiles.refresh_workspace_files(ws)
        if written:
            say("re-rendered dotfiles: " + ", ".join(ws.display(p) for p in written))
    return code


@task(name="merge-up", help={"dry_run": "print what would run, change nothing",
                             "no_ff": "make a merge commit instead of --ff-only",
                             "expect": "REPO=SHA,... (the dry run's last line): refuse, moving nothing, "
                                       "unless exactly these tips land",
                             "host": "land worktree --name of this recorded host here: its branch fetched over "
                                     "SSH into a quarantine and checked as a local import is",
                             "name": "with --host: the worktree there",
                             "allow_self_edit": "let THIS landing change chtop's own code and policy (tasks.py, "
                                                "chtop_tasks/, sandbox/, the manifest, noxfile.py, the templates): "
                                                "the toplevel then runs what the agent wrote there, as you"})
@reports_errors
def merge_up(c, dry_run=False, no_ff=False, expect=None, host="", name="", allow_self_edit=False):
    """In a worktree: fast-forward each integration branch to this feature (in the toplevel); --host: a host's."""
    if host:
        if not name:
            raise UsageError("git.merge-up --host HOST needs --name NAME (the worktree there)")
        return host_merge.merge_up_there(layout.find_workspace(), host, name, no_ff=no_ff, dry_run=dry_run,
                                         expect=expect, allow_self_edit=allow_self_edit)
    return gitops.merge_up(layout.find_workspace(), no_ff=no_ff, dry_run=dry_run, expect=expect,
                           allow_self_edit=allow_self_edit)


@task
@reports_errors
def pull(c):
    """In the toplevel (or a worktree: acts on its toplevel): fetch every repo, fast-forward clean integration branches."""
    return remotes.pull(layout.find_workspace())


@task(help={"dry_run": "print what would be pushed, push nothing",
            "feature": "also push feature branch NAME of every repo that has it (never forced)",
            "toplevel": "also push the toplevel's own branch (chtop with your manifest commits) to its remote"})
@reports_errors
def push(c, dry_run=False, feature="", toplevel=False):
    """Push each repo's integration branch that is ahead of its remote (never forced), one line per repo."""
    return remotes.push(layout.find_workspace(), dry_run=dry_run, feature=feature, toplevel=toplevel)
