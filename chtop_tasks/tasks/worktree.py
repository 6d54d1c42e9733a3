"""worktree.*: named feature worktrees beside the toplevel."""

from ..cli.taskdef import task
from ..core.errors import UsageError
from ..core.term import say, warn
from .common import lazy, reports_errors, venv_builder

worktrees = lazy("workspace.worktrees")
layout = lazy("workspace.layout")
fleet = lazy("hosts.fleet")
where = lazy("hosts.where")


def required_name(name: str, verb: str) -> None:
    """--name is required; invoke's own check would exit 1, a usage error exits 2."""
    if not name:
        raise UsageError(f"worktree.{verb} needs --name NAME (e.g. inv worktree.{verb} --name dev)")


@task(help={"name": "worktree and branch name (required; makes ../NAME)", "no_venv": "skip building its .venv",
            "host": "make it on this recorded host (inv host.list), in the toplevel there"})
@reports_errors
def create(c, name="", no_venv=False, host=""):
    """Make ../NAME: a worktree of every repo on a new branch NAME, dotfiles, venv."""
    required_name(name, "create")
    ws = layout.find_workspace()
    where.refuse_taken(ws, name, host)       # a name names one worktree, here or on a host
    if host:
        return fleet.create_remote_worktree(ws, host, name, no_venv)
    new_ws = worktrees.create_worktree(ws, name, venv_builder(not no_venv))
    say(worktrees.closing_hints(new_ws))


@task(help={"name": "the worktree to delete (required)",
            "force": "delete despite uncommitted changes or untracked files (LOSES them); "
                     "unmerged branches, and commits only its private stores hold, are still kept",
            "host": "the host it is on (default: where chtop recorded it; 'local': this machine); "
                    "a host's own chtop checks and keeps, as here"})
@reports_errors
def delete(c, name="", force=False, host=""):
    """Delete ../NAME (here or on its host) after checking nothing would be lost (branches kept if unmerged)."""
    required_name(name, "delete")
    ws = layout.find_workspace()
    try:
        place = where.locate(ws, name, host)
    except where.Nowhere:
        if host:
            raise
        place = None                 # the local delete says so (or removes what a killed create left)
    if place and place.remote:
        return fleet.delete_remote_worktree(place.host.name, name, force)
    from ..sessions import refuse_while_in_use

    kept = worktrees.delete_worktree(ws, name, force=force, refuse_if_busy=refuse_while_in_use)
    say(f"deleted worktree {name}")
    for line in kept:
        warn(f"kept {line}")


@task(help={"json": "print this machine's worktrees as a JSON list (name, root, venv, repos: branch, ahead, ...)"})
@reports_errors
def list(c, json=False):  # noqa: A001 - the task's name is the interface
    """Every worktree of the group: each repo's branch, ahead/behind, dirty or clean (and every host's)."""
    ws = layout.find_workspace()
    if json:
        import json as json_

        say(json_.dumps(worktrees.worktree_records(ws), indent=1))
        return
    for line in worktrees.list_worktrees(ws):
        say(line)
    lines, silent = fleet.worktree_lines()
    for line in lines:
        say(line)
    return fleet.say_silent(silent)
