"""host.*: other machines, each with its own chtop, reached over SSH (logic in chtop_tasks/hosts/)."""

from ..cli.taskdef import task
from ..core.term import say, warn
from .common import lazy, reports_errors

fleet = lazy("hosts.fleet")
layout = lazy("workspace.layout")


@task(help={"name": "the host's name here (letters, digits, _ -; not 'local')",
            "ssh_target": "anything ssh accepts: an alias of ~/.ssh/config, user@host, ...",
            "group": "the grouping dir on the host (default ch, in the login dir); its toplevel is "
                     "GROUP/<this toplevel's dir name>",
            "python": "a python on the host that already has chtop's deps: use it and skip ./bootstrap there"})
@reports_errors
def add(c, name, ssh_target, group="ch", python=""):
    """Record a host: check it over SSH, install chtop there from this toplevel (git over SSH), bootstrap it."""
    for line in fleet.add_host(layout.find_workspace(), name, ssh_target, group, python):
        say(line)


@task(name="list")
@reports_errors
def list_(c):
    """Every host: reachable or not, its chtop version against this one's, its worktrees and sessions."""
    lines, silent = fleet.host_lines(layout.find_workspace())
    for line in lines:
        say(line)
    return 1 if silent else 0


@task(help={"name": "the host to update", "all": "every recorded host"})
@reports_errors
def update(c, name="", all=False):  # noqa: A002 - --all is the flag's name
    """Bring chtop on a host (or --all) to this toplevel's commit and integration branches."""
    lines, failed = fleet.update_hosts(layout.find_workspace(), name, all)
    for line in lines:
        say(line)
    return 1 if failed else 0


@task(help={"name": "the host to forget",
            "force": "forget the host even when it cannot be checked or holds unlanded work "
                     "(nothing on it is deleted; that work stays only there)"})
@reports_errors
def remove(c, name, force=False):
    """Forget a host; refused while its worktrees hold commits not merged up (there or here)."""
    line = fleet.remove_host(name, force, layout.find_workspace())
    (warn if force else say)(line)
