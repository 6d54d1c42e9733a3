"""git.*: git across every repo of this workspace at once."""

from ..cli.taskdef import task
from ..core.argv import remainder_args
from ..core.fanout import answered_before_leaving, in_background
from ..core.term import say
from .common import lazy, reports_errors

status_of = lazy("gitloop.status")
rebase = lazy("gitloop.rebase")
merge = lazy("gitloop.merge")
dotfiles = lazy("workspace.dotfiles")
layout = lazy("workspace.layout")
remotes = lazy("gitloop.remotes")
fleet = lazy("hosts.fleet")
host_merge = lazy("hosts.merge")
where = lazy("hosts.where")

NAME_HELP = "the worktree to act on, here or on the host chtop recorded for it (default: the one you are in)"
HOST_HELP = "the host worktree --name is on (default: where chtop recorded it; 'local': this machine)"


def passed_on() -> list[str]:
    return ["--", *remainder_args()] if remainder_args() else []


def named_place(name: str, host: str, task: str):
    """The place ``--name``/``--host`` name (``hosts.where``), or None when neither was given: the
    task then acts where it runs, and the hosts' records are not read."""
    return where.named_place(name, host, task) if name or host else None


def here_or_named(place):
    """The workspace a task acts on: worktree --name here, else the one around the current dir."""
    return where.workspace_of(place) if place else layout.find_workspace()


@task(help={"name": NAME_HELP, "host": HOST_HELP})
@reports_errors
def status(c, name="", host=""):
    """git status in every repo, then how each branch relates to integration (-- ARGS pass through)."""
    place = named_place(name, host, "git.status")
    if place and place.remote:
        return fleet.task_there(place.host.name, "git.status", *passed_on(), worktree=name)
    ws = here_or_named(place)
    code = status_of.git_status(ws, remainder_args())
    if ws.is_toplevel:                   # the whole group: every host's worktrees too
        lines, silent = fleet.status_lines()
        for line in lines:
            say(line)
        code = code or fleet.say_silent(silent)
    return code


@task(help={"integration": "each repo against its own integration branch (git diff --merge-base BRANCH)",
            "name": NAME_HELP, "host": HOST_HELP + " (a host's output is shown inert)"})
@reports_errors
def diff(c, integration=False, host="", name=""):
    """git diff in every repo (-- ARGS pass through, e.g. -- --stat)."""
    place = named_place(name, host, "git.diff")
    if place and place.remote:
        return fleet.task_there(place.host.name, "git.diff", *(["--integration"] if integration else []),
                                *passed_on(), worktree=name)
    if integration:
        return status_of.git_diff_integration(here_or_named(place), remainder_args())
    return status_of.git_diff(here_or_named(place), remainder_args())


def sandbox_names(ws) -> list[str]:
    from ..sandbox.running import sandboxes_in

    return [row["name"] for row in sandboxes_in(ws.grouping, ws.root)]


@task(name="rebase-down", help={"dry_run": "print what would run, change nothing",
                                "host": HOST_HELP + " (a host's rebase runs its own checks; inv host.update "
                                                    "first brings it this toplevel's integration branches)",
                                "name": NAME_HELP})
@reports_errors
def rebase_down(c, dry_run=False, host="", name=""):
    """In a worktree (or --name): rebase each repo's feature branch onto its integration branch."""
    place = named_place(name, host, "git.rebase-down")
    if place and place.remote:
        return fleet.task_there(place.host.name, "git.rebase-down", *(["--dry-run"] if dry_run else []),
                                *passed_on(), worktree=name)
    ws = here_or_named(place)
    # the toplevel's remote-tracking refs (read-only git there) are compared while the repos are checked
    unpulled = in_background(remotes.unpulled, ws)
    with answered_before_leaving(unpulled):
        code = rebase.rebase_down(ws, remainder_args(), dry_run=dry_run, running_sandboxes=sandbox_names)
    moved = unpulled()
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
                             "host": HOST_HELP + " (a host's branch is fetched over SSH into a quarantine "
                                                 "and checked as a local import is)",
                             "name": NAME_HELP,
                             "allow_self_edit": "let THIS landing change chtop's own code and policy (tasks.py, "
                                                "chtop_tasks/, sandbox/, the manifest, noxfile.py, the templates): "
                                                "the toplevel then runs what the agent wrote there, as you"})
@reports_errors
def merge_up(c, dry_run=False, no_ff=False, expect=None, host="", name="", allow_self_edit=False):
    """In a worktree (or --name): fast-forward each integration branch to this feature (in the toplevel)."""
    place = named_place(name, host, "git.merge-up")
    if place and place.remote:
        return host_merge.merge_up_there(layout.find_workspace(), place.host.name, name, no_ff=no_ff,
                                         dry_run=dry_run, expect=expect, allow_self_edit=allow_self_edit)
    return merge.merge_up(here_or_named(place), no_ff=no_ff, dry_run=dry_run, expect=expect,
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
