"""What a host has, and chtop installed or updated there from this toplevel (never the internet).

The toplevel there mirrors this one: the container repo (chtop itself, with the manifest) at this
toplevel's commit on its branch, and each manifest repo's integration branch, pushed with git over
SSH into checkouts that take a push to their checked-out branch (``receive.denyCurrentBranch
updateInstead``: the checkout follows, and a dirty one refuses); then ``toplevel.init`` there
(dotfiles, excludes; it clones nothing that was pushed) and, once, its ``./bootstrap``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import ChtopError, Refused
from ..core.gitprobe import rev
from ..core.gitrun import git
from ..workspace.layout import Workspace
from .answers import BadAnswer
from .records import Host, path_problem
from .ssh import LONG_TIMEOUT, git_ssh_command, run_on

TOOLS = ("git", "python3", "podman", "tmux")
NEEDED = ("git", "python3")
_SHA = re.compile(r"^[0-9a-f]{40}$")

PROBE = 'for t in "$@"; do if command -v "$t" >/dev/null 2>&1; then echo "$t yes"; else echo "$t no"; fi; done'
PREPARE = ('set -e; mkdir -p "$1"; cd "$1"; [ -e .git ] || git init -q -b "$2" .; '
           'git config receive.denyCurrentBranch updateInstead; '
           'if [ -n "$3" ] && ! git config remote.origin.url >/dev/null; then git remote add origin "$3"; fi')
BRANCH_TIPS = ('while [ "$#" -gt 1 ]; do git -C "$1" rev-parse -q --verify "refs/heads/$2^{commit}" '
               '|| echo missing; shift 2; done')
VENV_PYTHON = ('p="${CHTOP_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/chtop/venv}/bin/python"; '
               'if [ -x "$p" ]; then echo "$p"; else command -v python3; fi')


@dataclass
class Mirror:
    """One checkout to mirror there: (local dir, remote dir, branch, tip, origin URL for it)."""
    local: object
    remote: str
    branch: str
    tip: str
    origin: str


def probe_tools(host: Host) -> dict[str, bool]:
    """Which of TOOLS the host has (its answer parsed as data)."""
    out = run_on(host, ["sh", "-c", PROBE, "sh", *TOOLS]).stdout
    found = {}
    for line in out.splitlines():
        name, _, answer = line.partition(" ")
        if name in TOOLS and answer in ("yes", "no"):
            found[name] = answer == "yes"
    if set(found) != set(TOOLS):
        raise BadAnswer(f"host {host.name}: the tool probe answered something else")
    return found


def refuse_missing_tools(host: Host, found: dict[str, bool]) -> list[str]:
    """Refuse a host without git or python3; the warnings for what it lacks beyond that."""
    missing = [t for t in NEEDED if not found[t]]
    if missing:
        raise Refused(f"host {host.name} lacks {', '.join(missing)}: install it there "
                      f"(Debian: sudo apt-get install {' '.join(missing)}) and run inv host.add again")
    return [f"host {host.name} has no {t}: " + ("no sandboxes there until it is installed" if t == "podman"
                                                else "no sessions there until it is installed")
            for t in ("podman", "tmux") if not found[t]]


def mirrors(ws: Workspace, host: Host) -> list[Mirror]:
    """The container repo and every manifest repo, at this toplevel's tips."""
    top = ws.toplevel
    out = [Mirror(top, host.toplevel, ws.toplevel_branch(), rev(top, "HEAD"), "")]
    for repo in ws.manifest.repos:
        out.append(Mirror(top / repo.name, f"{host.toplevel}/{repo.name}", repo.branch,
                          rev(top / repo.name, f"refs/heads/{repo.branch}"), repo.url))
    return out


def push_mirror(host: Host, mirror: Mirror) -> None:
    run_on(host, ["sh", "-c", PREPARE, "sh", mirror.remote, mirror.branch, mirror.origin])
    git(mirror.local, ["-c", f"core.sshCommand={git_ssh_command()}", "push", "--quiet",
                       f"{host.target}:{mirror.remote}", f"{mirror.tip}:refs/heads/{mirror.branch}"],
        quiet=False, toplevel_only=True, timeout=LONG_TIMEOUT)


def remote_inv(host: Host, *args: str, shown: bool = False, timeout: float | None = None, check: bool = True,
               quiet: bool = False):
    """``python -m invoke ARGS`` in the host's toplevel, with its recorded python."""
    return run_on(host, [host.python, "-m", "invoke", *args], host.toplevel, shown=shown, timeout=timeout,
                  check=check, quiet=quiet)


def push_checkouts(ws: Workspace, host: Host) -> None:
    """Push every checkout there; a checkout there with changes, or commits this toplevel lacks, refuses."""
    for mirror in mirrors(ws, host):
        try:
            push_mirror(host, mirror)
        except ChtopError as exc:
            raise ChtopError(f"host {host.name}: could not update {mirror.remote} there to {mirror.tip[:12]} "
                             f"(its checkout has changes, or commits this toplevel lacks):\n{exc}") from None


def init_there(host: Host) -> None:
    """``toplevel.init --no-venv`` there: dotfiles and excludes (every repo was pushed, none is cloned)."""
    remote_inv(host, "toplevel.init", "--no-venv", shown=True, timeout=LONG_TIMEOUT)


def run_bootstrap(host: Host) -> str:
    """``./bootstrap`` in the host's toplevel (it makes its own venv as an ordinary user); the
    python it leaves for chtop there."""
    run_on(host, ["./bootstrap"], host.toplevel, shown=True, timeout=LONG_TIMEOUT)
    python = run_on(host, ["sh", "-c", VENV_PYTHON]).stdout.strip()
    if path_problem(python):
        raise BadAnswer(f"host {host.name}: bootstrap left no python chtop can name ({python[:80]!r})")
    return python


def remote_branch_tips(host: Host, branches: list[tuple[str, str]]) -> list[str | None]:
    """The commit of each (dir there, branch) the host's checkouts hold (None: no such branch), in
    one call; its answer is data: one commit id or ``missing`` a line, one line per branch."""
    words = [word for pair in branches for word in pair]
    lines = run_on(host, ["sh", "-c", BRANCH_TIPS, "sh", *words]).stdout.splitlines()
    if len(lines) != len(branches) or any(line != "missing" and not _SHA.match(line) for line in lines):
        raise BadAnswer(f"host {host.name}: its branch tips are not one commit id (or 'missing') a branch")
    return [None if line == "missing" else line for line in lines]


def out_of_date(ws: Workspace, host: Host) -> list[Mirror]:
    """The checkouts whose branch there is not at this toplevel's tip (what ``host.update`` pushes)."""
    every = mirrors(ws, host)
    there = remote_branch_tips(host, [(m.remote, m.branch) for m in every])
    return [m for m, tip in zip(every, there, strict=True) if tip != m.tip]


def remote_version(host: Host) -> str:
    """The commit the host's toplevel has checked out (chtop's version there)."""
    out = run_on(host, ["git", "rev-parse", "HEAD"], host.toplevel).stdout.strip()
    if not _SHA.match(out):
        raise BadAnswer(f"host {host.name}: its chtop version is not a commit id")
    return out
