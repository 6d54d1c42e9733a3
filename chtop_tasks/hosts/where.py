"""Where a worktree named in a task lives: here, or on the host chtop recorded for it.

A task given ``--name NAME`` (and no ``--host``) acts on the worktree of that name wherever it
is: this group's worktree ``NAME``, or the one the host records (``records.recorded_worktrees``:
written by ``worktree.create --host`` and by every answer of a host's ``worktree.list``) name.
``--host HOST`` names the place outright (``--host local``: this machine) and is checked against
the records; a name found in two places is refused, naming both.  A name found nowhere is looked
for once more on every host (their answers bounded, and recorded), then refused with the names
there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import Refused, UsageError
from ..core.fanout import fan_out
from ..core.places import check_worktree_name
from ..workspace.layout import Workspace
from ..workspace.suggest import no_worktree_message
from .records import LOCAL, Host, get_host, load_hosts, recorded_worktrees


class Nowhere(UsageError):
    """No worktree of that name here or on any host."""


@dataclass(frozen=True)
class Place:
    """Worktree ``name``: here at ``root``, or on ``host`` (its dir there: ``fleet.worktree_dir_there``)."""
    name: str
    root: Path | None = None
    host: Host | None = None

    @property
    def remote(self) -> bool:
        return self.host is not None

    def words(self) -> str:
        return f"on host {self.host.name} ({self.host.target})" if self.host else f"here ({self.root})"


def local_root(ws: Workspace, name: str) -> Path | None:
    """The root of this group's feature worktree ``name``, or None when there is none."""
    root = ws.worktree_root(name)
    if name in ws.reserved_names() or not (root / ".git").is_file():
        return None
    return root


def locate(ws: Workspace, name: str, host: str = "") -> Place:
    """Where worktree ``name`` is (``host``: the place the user named, checked); UsageError when it
    is nowhere, in two places, or not where ``host`` says."""
    check_worktree_name(name)
    root = local_root(ws, name)
    if host == LOCAL:
        if root is None:
            raise Nowhere(nowhere(ws, name, recorded_worktrees(), "here"))
        return Place(name, root=root)
    hosts, recorded = load_hosts(), recorded_worktrees()
    there = [hosts[h] for h, names in recorded.items() if name in names and h in hosts]
    if host:
        named = get_host(host)
        if there and named not in there:
            raise UsageError(f"worktree {name} is recorded on host {', '.join(h.name for h in there)}, "
                             f"not on {host} (--host {host}): run it as inv ... --name {name} "
                             f"(or --host {there[0].name}); inv worktree.list shows where each worktree is")
        return Place(name, host=named)
    places = ([Place(name, root=root)] if root else []) + [Place(name, host=h) for h in there]
    if not places:
        places, silent = look_on_hosts(name, hosts)
        if not places:
            raise Nowhere(nowhere(ws, name, recorded_worktrees(), "", silent))
    if len(places) > 1:
        flags = " or ".join(f"--host {p.host.name if p.host else LOCAL}" for p in places)
        raise UsageError(f"worktree {name} is in {len(places)} places: " + "; ".join(p.words() for p in places)
                         + f"; say which with {flags}")
    return places[0]


def look_on_hosts(name: str, hosts: dict[str, Host]) -> tuple[list[Place], list[str]]:
    """Every host asked for its worktrees (at once, each bounded; the answers recorded): the places
    named ``name``, and a line for each host that did not answer."""
    from .fleet import host_state

    states = fan_out(lambda h: host_state(h, ("worktrees",)), hosts.values())
    found = [Place(name, host=s.host) for s in states
             if s.reachable and any(wt["name"] == name for wt in s.worktrees)]
    return found, [s.error for s in states if not s.reachable]


def nowhere(ws: Workspace, name: str, recorded: dict[str, list[str]], only: str = "",
            silent: list[str] = ()) -> str:
    """``no_worktree_message`` over this machine's worktrees and the hosts' recorded ones (none with
    ``only``), a line for each host that did not answer, how to list them all and how to make it."""
    elsewhere = () if only else tuple(f"{h}:{n}" for h, names in recorded.items() for n in names)
    said = no_worktree_message(ws.grouping, name, elsewhere)
    said += "".join(f"\n{line} (its worktrees are not known here)" for line in silent)
    return said + f"\nlist them: inv worktree.list\nmake it: inv worktree.create --name {name} [--host HOST]"


def named_place(name: str, host: str, task: str) -> Place | None:
    """The place a task's ``--name``/``--host`` name (found from the current dir's group), or None
    when neither was given (the task acts where it runs)."""
    from ..workspace.layout import find_workspace

    if not name and not host:
        return None
    if not name:
        raise UsageError(f"{task} --host {host} needs --name NAME (the worktree there)")
    return locate(find_workspace(Path.cwd()), name, host)


def workspace_of(place: Place) -> Workspace:
    """This machine's worktree at ``place`` as a Workspace (the task runs as if in it)."""
    from ..workspace.layout import find_workspace

    return find_workspace(place.root)


def refuse_taken(ws: Workspace, name: str, host: str = "") -> None:
    """Before ``worktree.create`` here (or on ``host``): a name names one worktree, so one that is
    already here or recorded on another host is refused."""
    elsewhere = (["here"] if host and local_root(ws, name) else []) + \
        [f"on host {h}" for h, names in recorded_worktrees().items() if name in names and h != host]
    if elsewhere:
        raise Refused(f"worktree {name} is already {' and '.join(elsewhere)}: a name names one worktree, "
                      f"so pick another --name (inv worktree.list shows them all)")
