"""``git.merge-up --host HOST --name NAME``: another host's worktree, landed on this toplevel's
integration branches with the local import's checks and the local merge-up's landing.

The host's branch is a stranger's data.  Its chtop is asked (as data) whether the worktree there
is on its branch and clean, and where branch NAME of each of its toplevel's stores is; then that
one ref of each store (no tags, no other ref) is fetched over git's SSH transport, with the host
runner's ssh options, into a quarantine: a fresh bare repo under this group's ``.chtop/`` that
borrows the toplevel store's objects, with ``transfer.fsckObjects`` on, the pack kept whole and
its size capped (``prlimit --fsize``; ``host_fetch_max_mib`` in ``config.toml``).  The commit that
arrived must be the one the host named.  Nothing of the host runs here: a fetch brings no hook,
config or attribute of its, and the landing refuses chtop's own files and attributes that hand
files to a driver of your config as the local merge-up does (``landing.py``).

The plan is the local merge-up's (``gitloop.merge``: its checks of the toplevel checkouts, its steps, its
dry run, its outcome check), computed while git sees the quarantine's objects as an alternate
(``GIT_ALTERNATE_OBJECT_DIRECTORIES``, as git's own receive quarantine shows them to a pre-receive
hook), so a dry run or a refusal leaves this toplevel's stores as they were.  Only a real run
moves the objects into the toplevel's store, by a local fetch (fsck again), under
``refs/chtop/hosts/HOST/NAME`` (the tip last taken from there; one that the host rewrote keeps its
old tip as ``refs/chtop/host-kept/HOST/NAME/<sha>``), and lands them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core import runner
from ..core.errors import CommandFailed, Refused
from ..core.gitprobe import ahead_behind
from ..core.gitrun import HOST_GIT_OPTS, git
from ..core.places import check_worktree_name, read_user_config, state_dir
from ..core.term import say
from ..gitloop.merge import (
    format_expect,
    landed_on_integration,
    landing_branch_problems,
    landing_changes,
    landing_paths,
    landing_tree_problems,
    parse_expect,
    plan_merge_up,
    tips_problems,
    toplevel_checkout_problems,
)
from ..gitloop.status import Relation
from ..gitloop.steps import (
    check_outcome,
    dry_run_footer,
    per_relation,
    print_plan,
    problems_of,
    raise_if_problems,
    run_steps,
)
from ..stores.quarantine import SHA_RE, read_ref
from ..workspace.grouplock import holds_group_lock
from ..workspace.layout import Checkout, Workspace, verify_git_dirs
from . import install
from .fleet import ask_worktrees, local_version, worktree_dir_there
from .records import Host, get_host
from .ssh import LONG_TIMEOUT, git_ssh_command

LANDED_PREFIX = "refs/chtop/hosts"          # refs/chtop/hosts/HOST/NAME: the tip last taken from there
KEPT_PREFIX = "refs/chtop/host-kept"        # refs/chtop/host-kept/HOST/NAME/<sha>: one it rewrote
INCOMING_PREFIX = "refs/chtop/host-incoming"
QUARANTINE_REF = "refs/heads/incoming"
FETCH_MAX_MIB = 2048                        # config.toml: host_fetch_max_mib
ALTERNATES = "GIT_ALTERNATE_OBJECT_DIRECTORIES"


@dataclass
class Incoming:
    """One repo's branch NAME from the host: the commit its chtop named, the quarantine it was
    fetched into, and the commit that arrived there."""
    checkout: Checkout
    label: str
    announced: str
    quarantine: Path
    tip: str = ""


def fetch_max_bytes() -> int:
    _, config = read_user_config()
    value = config.get("host_fetch_max_mib", FETCH_MAX_MIB)
    good = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return int((value if good else FETCH_MAX_MIB) * 1024 * 1024)


# -- what the host says: the same chtop, its worktree clean and on its branch ----------------------

def refuse_another_chtop(top: Workspace, host: Host) -> None:
    there, here = install.remote_version(host), local_version(top)
    if there != here:
        raise Refused(f"merge-up --host {host.name}: nothing was changed, because host {host.name} runs chtop "
                      f"{there[:12]}, this toplevel {here[:12]}: inv host.update --name {host.name} first")


def remote_worktree_problems(host: Host, name: str, worktrees: list[dict]) -> list[str]:
    """Why the host's worktree ``name`` (from its ``worktree.list --json``, checked) cannot land."""
    where = f"{host.name}:{name}"
    wt = next((w for w in worktrees if w["name"] == name), None)
    if wt is None:
        return [f"host {host.name} has no worktree {name} (inv worktree.list lists them as {host.name}:NAME)"]
    if wt["problem"]:
        return [f"{where}: {wt['problem']}"]
    problems = []
    for repo in wt["repos"]:
        here = f"{where}/{repo['repo']}"
        if repo["problem"]:
            problems.append(f"{here}: {repo['problem']}")
        elif repo["branch"] != name:
            problems.append(f"{here}: on {repo['branch'] or 'a detached HEAD'} there, not {name}; check out {name} there")
        elif repo["dirty"]:
            problems.append(f"{here}: uncommitted changes or untracked files there; commit them there "
                            f"(inv git.status in {host.target}:{worktree_dir_there(host, name)}) and retry")
    return problems


# -- the fetch into a quarantine -------------------------------------------------------------------

@contextmanager
def quarantine_base(top: Workspace, host: Host, name: str):
    """A fresh dir for this run's quarantine repos, removed afterwards whatever happened."""
    parent = state_dir(top.grouping) / "host-merge"
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    base = Path(tempfile.mkdtemp(prefix=f"{host.name}-{name}-", dir=parent))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def make_quarantine(base: Path, checkout: Checkout) -> Path:
    """An empty bare repo (no template: no hooks) that borrows the toplevel store's objects."""
    repo = base / (f"{checkout.name}.git" if checkout.name else "@top.git")
    git(None, ["init", "--bare", "--quiet", "--template=", str(repo)])
    (repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (repo / "objects" / "info" / "alternates").write_text(f"{checkout.store / 'objects'}\n")
    return repo


def fetch_argv(host: Host, remote_dir: str, name: str, repo: Path, cap: int) -> list[str]:
    """``refs/heads/NAME`` of ``remote_dir`` there, only it, into ``repo``'s quarantine ref: every
    object checked, one pack of at most ``cap`` bytes, over ssh with the host runner's options."""
    return ["prlimit", f"--fsize={cap}", "git", *HOST_GIT_OPTS, f"--git-dir={repo}",
            "-c", "transfer.fsckObjects=true", "-c", "fetch.unpackLimit=1",
            "-c", f"core.sshCommand={git_ssh_command()}",
            "fetch", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance", "--no-recurse-submodules",
            "--quiet", f"{host.target}:{remote_dir}", f"+refs/heads/{name}:{QUARANTINE_REF}"]


def fetch_branches(top: Workspace, host: Host, name: str, base: Path) -> list[Incoming]:
    """Branch NAME of each of the host's toplevel stores, fetched into a quarantine each and checked
    to be the commit the host named; CommandFailed (nothing changed here) when a fetch fails,
    Refused when the host has no such branch or sent another commit."""
    pairs = list(zip(top.checkouts(), install.mirrors(top, host), strict=True))
    announced = install.remote_branch_tips(host, [(mirror.remote, name) for _, mirror in pairs])
    missing = [f"{host.name}:{mirror.remote}" for (_, mirror), sha in zip(pairs, announced, strict=True) if sha is None]
    if missing:
        raise Refused(f"merge-up --host {host.name}: nothing was changed, because there is no branch {name} in "
                      + ", ".join(missing) + f" (its chtop imports it from worktree {name} there)")
    cap, incoming = fetch_max_bytes(), []
    for (checkout, mirror), sha in zip(pairs, announced, strict=True):
        item = Incoming(checkout, f"{host.name}:{name}/{checkout.label}", sha, make_quarantine(base, checkout))
        result = runner.run(fetch_argv(host, mirror.remote, name, item.quarantine, cap), check=False,
                            timeout=LONG_TIMEOUT)
        if not result.ok:
            too_big = f" (a pack larger than {cap >> 20} MiB: host_fetch_max_mib in config.toml)" \
                if reached_cap(item.quarantine, cap) else ""
            raise CommandFailed(f"fetching {item.label} from host {host.name} failed{too_big}, so nothing was "
                                f"changed here:\n{result.error_tail(4)}")
        item.tip = read_ref(item.quarantine, QUARANTINE_REF) or ""
        if item.tip != sha or not SHA_RE.match(item.tip):
            raise Refused(f"merge-up --host {host.name}: nothing was changed, because {item.label}: the host named "
                          f"{sha} as branch {name}, but its git sent {item.tip or 'nothing'} (it moved meanwhile, "
                          f"or the host is not telling the truth); run it again, and look at the host if it repeats")
        incoming.append(item)
    return incoming


def reached_cap(repo: Path, cap: int) -> bool:
    """A file of ``repo``'s objects grew to the size cap (index-pack was stopped there)."""
    return any(path.is_file() and path.stat().st_size >= cap for path in (repo / "objects").rglob("*"))


@contextmanager
def objects_visible(repos: list[Path]):
    """Git run by this process sees the quarantines' objects too (as alternates), for the plan."""
    before = os.environ.get(ALTERNATES)
    # one entry per path, ':'-separated; git reads an entry in double quotes C-style (a ':' in a path)
    paths = [json.dumps(str(repo / "objects"), ensure_ascii=False) for repo in repos]
    os.environ[ALTERNATES] = ":".join(paths + ([before] if before else []))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ALTERNATES, None)
        else:
            os.environ[ALTERNATES] = before


def take_in(top: Workspace, host: Host, name: str, item: Incoming) -> str | None:
    """The quarantine's commit into the toplevel's store (a local fetch, checked again), as
    ``refs/chtop/hosts/HOST/NAME``; the tip taken before, when the host has rewritten it since and
    the integration branch here lacks it (then kept)."""
    main_dir = top.main_checkout_dir(item.checkout)
    landed, incoming = f"{LANDED_PREFIX}/{host.name}/{name}", f"{INCOMING_PREFIX}/{host.name}/{name}"
    git(main_dir, ["-c", "transfer.fsckObjects=true", "fetch", "--no-tags", "--no-write-fetch-head",
                   "--no-auto-maintenance", "--no-recurse-submodules", "--quiet", str(item.quarantine),
                   f"+{QUARANTINE_REF}:{incoming}"])
    old = read_ref(item.checkout.store, landed)
    lines, kept = [f"update {landed} {item.tip}"], None
    if old and SHA_RE.match(old) and old != item.tip and not any(
            git(main_dir, ["merge-base", "--is-ancestor", old, newer], check=False).ok
            for newer in (item.tip, f"refs/heads/{top.integration_branch(item.checkout)}")):
        kept = f"{KEPT_PREFIX}/{host.name}/{name}/{old}"
        lines.append(f"update {kept} {old}")
    lines.append(f"delete {incoming}")
    git(main_dir, ["update-ref", "-m", f"chtop: merge-up --host {host.name} --name {name}", "--stdin"],
        input="\n".join(lines) + "\n")
    return kept


# -- the plan and the landing: the local merge-up's ---------------------------------------------------

def relation_of_tip(top: Workspace, checkout: Checkout, tip: str) -> Relation:
    """``tip`` against its integration branch here (where it lands)."""
    integ = top.integration_branch(checkout)
    ahead, behind = ahead_behind(top.main_checkout_dir(checkout), integ, tip)
    return Relation(checkout, tip, integ, ahead, behind, tip)


def landing_problems(top: Workspace, host: Host, name: str, rel: Relation, no_ff: bool,
                     allow_self_edit: bool = False, changes=None) -> list[str]:
    """What stops ``rel``'s tip landing here: the toplevel checkout off its integration branch, a
    change to chtop's own files (unless ``allow_self_edit``) or to what the host runs from a
    checkout, an attribute handing a file to a driver of your config, or (without ``no_ff``) no
    fast-forward.  ``changes``: ``landing_changes`` of ``rel``, when the caller has them already."""
    if not rel.ahead:
        return []
    problems = landing_branch_problems(top, rel) + landing_tree_problems(
        top, rel, rel.branch, allow_self_edit, f"inv git.merge-up --host {host.name} --name {name}", changes)
    if rel.behind and not no_ff:
        problems.append(f"{host.name}:{name}/{rel.checkout.label}: {rel.integration} here has {rel.behind} commit(s) "
                        f"the branch there lacks (not a fast-forward): inv host.update --name {host.name}, then "
                        f"inv git.rebase-down --host {host.name} --name {name}, and retry (or pass --no-ff)")
    return problems


@holds_group_lock("git.merge-up")
def merge_up_there(ws: Workspace, host_name: str, name: str, no_ff: bool = False, dry_run: bool = False,
                   expect: str | None = None, allow_self_edit: bool = False) -> int:
    """Land worktree ``name`` of host ``host_name`` on this toplevel's integration branches."""
    top = ws.for_root(ws.toplevel)
    check_worktree_name(name)
    host = get_host(host_name)
    what = f"merge-up --host {host.name}"
    expected = parse_expect(top, expect) if expect is not None else None
    verify_git_dirs(top)
    refuse_another_chtop(top, host)
    raise_if_problems(remote_worktree_problems(host, name, ask_worktrees(host)), what)
    with quarantine_base(top, host, name) as base:
        incoming = fetch_branches(top, host, name, base)
        tips = {item.checkout.name: item.tip for item in incoming}
        with objects_visible([item.quarantine for item in incoming]):
            rels = [relation_of_tip(top, item.checkout, item.tip) for item in incoming]
            changes = per_relation(lambda rel: landing_changes(top, rel, rel.branch) if rel.ahead else [])
            touched = per_relation(lambda rel: landing_paths(top, rel, rel.branch, changes(rel)) if rel.ahead else set())
            raise_if_problems(problems_of(rels, lambda rel: landing_problems(top, host, name, rel, no_ff, allow_self_edit,
                                                                             changes(rel)),
                                          lambda rel: toplevel_checkout_problems(top, rel, rel.branch, touched(rel))),
                              what)
        to_land = {rel.checkout.name: rel.branch for rel in rels if rel.ahead}
        if expected is not None:
            raise_if_problems(tips_problems(top, expected, to_land), what)
        steps = plan_merge_up(top, rels, no_ff, to_land)
        for step in steps:
            if "-m" in step.argv:
                step.argv[step.argv.index("-m") + 1] = f"Merge branch '{name}' of host {host.name}"
        say(f"merge-up from {host.name}:{name} into {top.toplevel}"
            + (" (dry run: nothing will be changed):" if dry_run else ":"))
        print_plan(top, rels, steps, "land", dry_run)
        if dry_run:
            say(dry_run_footer(steps))
            if to_land:
                say(f"to land exactly these tips: inv git.merge-up --host {host.name} --name {name} "
                    f"--expect {format_expect(top, to_land)}")
            return 0
        for item in incoming:
            kept = take_in(top, host, name, item)
            if kept:
                say(f"{item.label} was rewritten there; its tip taken before is kept as {kept}")
    run_steps(steps, lambda step: CommandFailed(
        f"merge into {top.display(step.cwd)} failed (see git's message above); repos already merged stay merged. "
        f"inv host.update --name {host.name}, then inv git.rebase-down --host {host.name} --name {name}, and retry."))
    check_outcome(top, steps, landed_on_integration, what,
                  relation=lambda ws, checkout: relation_of_tip(top, checkout, tips[checkout.name]))
    for step in steps:
        say(f"landed {host.name}:{name}/{step.checkout.label} at {to_land[step.checkout.name]}")
    landed = [f"{rel.checkout.label} {rel.ahead}" for rel in rels if rel.ahead]
    if not landed:
        say(f"landed nothing: every integration branch here already has {host.name}:{name}")
        return 0
    total = sum(rel.ahead for rel in rels)
    say(f"landed {host.name}:{name}: {', '.join(landed)} commit{'s' if total != 1 else ''}")
    say(f"bring {host.name} up to date: inv host.update --name {host.name}, "
        f"then inv git.rebase-down --host {host.name} --name {name}")
    return 0
