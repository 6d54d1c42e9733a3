"""What ``worktree.delete`` keeps: every commit of a private store that the toplevel lacks.

Before a worktree's private store goes, the commits it names -- its branches, tags, stash (every
entry), each checkout's HEAD (a detached one too), and the reflog entries of the last
``REFLOG_DAYS`` days -- are read from its files as data: the store is the agent's, so no link is
followed, no read blocks, and sizes are bounded.  The commits no ref of the toplevel's store reaches
are fetched into it under ``refs/chtop/kept/NAME/...`` by the import's guarded ``git fetch``
(``transfer.fsckObjects`` on), one fetch per repo.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..core import agentfile
from ..core.errors import CommandFailed
from ..core.fanout import fan_out
from ..core.gitprobe import commits_missing_from
from ..core.gitrun import git
from ..stores.quarantine import KEPT_PREFIX, SHA_RE, packed_refs_read, read_packed_refs
from .layout import Checkout, Workspace, private_store

REFLOG_DAYS = 30          # git's own default for expiring unreachable reflog entries
MAX_REF_FILES = 5000      # an agent-made store with more is read only this far
# a ref name chtop repeats in a kept ref's name and in its messages; others are kept by sha
PLAIN_COMPONENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")      # of a ref name read without git
PLAIN_REF = re.compile(r"^refs/(heads|tags)/[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")


@dataclass(frozen=True)
class Tip:
    """A commit a private store names: ``source`` is ``refs/...``, ``HEAD``, ``stash@{N}`` or
    ``reflog`` (an older value of a ref); ``sha`` what it names (a commit or annotated tag)."""

    source: str
    sha: str

    @property
    def named(self) -> bool:
        return not self.source.startswith(("stash@", "reflog"))

    def describe(self) -> str:
        if self.source == "HEAD":
            return f"HEAD ({self.sha[:10]})"
        if self.source == "refs/stash":
            return "stash@{0}"
        if PLAIN_REF.match(self.source):
            kind, _, short = self.source[len("refs/"):].partition("/")
            return f"{'branch' if kind == 'heads' else 'tag'} {short}"
        if self.source.startswith("stash@"):
            return self.source
        return f"a reflog entry ({self.sha[:10]})"

    def kept_ref(self, name: str) -> str:
        if self.source == "HEAD" or self.source == "refs/stash" or PLAIN_REF.match(self.source):
            return f"{KEPT_PREFIX}/{name}/{self.source}"
        return f"{KEPT_PREFIX}/{name}/{self.sha}"


# -- reading the store's files (the agent's: data only) -------------------------------------------


def ref_files(root: Path, prefix: str, budget: list[int]) -> list[tuple[str, Path]]:
    """(ref name, path) of every regular file under ``root``; symlinks neither read nor entered."""
    found: list[tuple[str, Path]] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if budget[0] <= 0:
            break
        if entry.is_symlink():
            continue
        if entry.is_dir(follow_symlinks=False):
            found += ref_files(Path(entry.path), f"{prefix}{entry.name}/", budget)
        elif entry.is_file(follow_symlinks=False):
            budget[0] -= 1
            found.append((prefix + entry.name, Path(entry.path)))
    return found


def sha_in(path: Path) -> str | None:
    data = agentfile.read_bytes(path, limit=4096)
    text = data.decode("ascii", "replace").strip() if data is not None else ""
    return text if SHA_RE.match(text) else None


def packed_tips(store: Path) -> list[Tip]:
    data = agentfile.read_bytes(store / "packed-refs", limit=64 << 20) or b""
    tips = []
    for line in data.decode("utf-8", "replace").splitlines():
        sha, _, name = line.partition(" ")
        if SHA_RE.match(sha) and name.startswith("refs/"):
            tips.append(Tip(name.strip(), sha))
    return tips


def reflog_tips(path: Path, since: float | None, label: str) -> list[Tip]:
    """The values a reflog records (entries at or after ``since``; every entry when None),
    newest first, each named ``label`` (``stash`` numbers them as git does)."""
    data = agentfile.read_bytes(path, limit=64 << 20) or b""
    values = []
    for line in data.decode("utf-8", "replace").splitlines():
        head, _, _msg = line.partition("\t")
        fields = head.split(" ")
        if len(fields) < 4 or not SHA_RE.match(fields[1]):
            continue
        try:
            when = int(fields[-2])
        except ValueError:
            continue
        if since is None or when >= since:
            values.append(fields[1])
    values.reverse()
    if label == "stash":
        return [Tip(f"stash@{{{i}}}", sha) for i, sha in enumerate(values)]
    return [Tip("reflog", sha) for sha in values]


def store_tips(store: Path, now: float | None = None) -> list[Tip]:
    """Every commit the private ``store`` names, read from its files."""
    since = (now if now is not None else time.time()) - REFLOG_DAYS * 86400
    budget = [MAX_REF_FILES]
    tips = packed_tips(store)
    tips += [Tip(name, sha) for name, path in ref_files(store / "refs", "refs/", budget) if (sha := sha_in(path))]
    for name, path in ref_files(store / "logs", "", budget):
        tips += reflog_tips(path, None if name == "refs/stash" else since, "stash" if name == "refs/stash" else "")
    admins = [p for _, p in ref_files(store / "worktrees", "", budget)
              if p.name == "HEAD" and p.parent.parent == store / "worktrees"]
    for head in admins:
        sha = sha_in(head)
        if sha:
            tips.append(Tip("HEAD", sha))
        tips += reflog_tips(head.parent / "logs" / "HEAD", since, "")
        tips += [Tip(name, sha) for name, path in ref_files(head.parent / "refs", "refs/", budget)
                 if (sha := sha_in(path))]
    head_sha = sha_in(store / "HEAD")
    if head_sha:
        tips.append(Tip("HEAD", head_sha))
    return tips


# -- which of them the toplevel lacks -----------------------------------------------------------------


def host_refs(store: Path, prefix: str = "refs/") -> dict[str, str] | None:
    """ref -> sha of every ref named ``prefix...`` of a toplevel store (the host's: no sandbox writes
    it), read from its files as ``git for-each-ref`` lists them: a loose ref over a packed one, a
    symbolic ref left out (what it names is listed itself).  None where that reading could differ
    from git's: anything there that is not a plain file or directory, a value that is no sha, more
    than MAX_REF_FILES files, a packed-refs not read whole; the caller asks git then."""
    if not packed_refs_read(store):
        return None
    refs = {name: sha for sha, name, _ in read_packed_refs(store)[1] if name.startswith(prefix)}
    budget = [MAX_REF_FILES]

    def walk(path: Path, name: str) -> bool:
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            return True
        except OSError:
            return False
        for entry in entries:
            budget[0] -= 1
            if entry.name.endswith(".lock") and not entry.is_symlink():
                continue                  # a git writing that ref: git's own listing skips it too
            if budget[0] < 0 or entry.is_symlink() or not PLAIN_COMPONENT.match(entry.name):
                return False
            if entry.is_dir(follow_symlinks=False):
                if not walk(Path(entry.path), f"{name}{entry.name}/"):
                    return False
            elif not entry.is_file(follow_symlinks=False):
                return False
            else:
                text = (agentfile.read_text(entry.path, limit=4096) or "").strip()
                if SHA_RE.match(text):
                    refs[name + entry.name] = text
                elif not text.startswith("ref: refs/"):
                    return False
        return True
    root = store / prefix.rstrip("/")
    if os.path.lexists(root) and not (root.is_dir() and not root.is_symlink()):
        return None
    return refs if walk(root, prefix if prefix.endswith("/") else prefix + "/") else None


def shared_tips(shared: Path) -> list[str]:
    """What every ref of the toplevel's store names (kept refs included: those commits are safe):
    its files read as data where plain, else ``git for-each-ref``."""
    refs = host_refs(shared)
    if refs is not None:
        return sorted(set(refs.values()))
    out = git(shared, ["for-each-ref", "--format=%(objectname)"], toplevel_only=True).stdout
    return sorted(set(out.split()))


def commits_of(checkout_path: Path, shas: list[str]) -> dict[str, str]:
    """sha -> the commit it is or peels to, for those the checkout's object store has."""
    if not shas:
        return {}
    query = "".join(f"{sha}^{{commit}}\n" for sha in shas)
    out = git(checkout_path, ["cat-file", "--batch-check=%(objectname)"], input=query).stdout.splitlines()
    return {sha: line for sha, line in zip(shas, out, strict=True) if SHA_RE.match(line)}


def missing_commits(checkout_path: Path, commits: list[str], have: list[str]) -> list[str]:
    """The commits reachable from ``commits`` and from none of ``have``."""
    if not commits:
        return []
    query = "".join(f"{c}\n" for c in commits) + "".join(f"^{h}\n" for h in have)
    return git(checkout_path, ["rev-list", "--stdin"], input=query).stdout.split()


@dataclass(frozen=True)
class Unsaved:
    """A tip of a private store whose commits the toplevel lacks, and how many there are."""

    tip: Tip
    commits: int


def unsaved_tips(checkout_path: Path, store: Path, shared: Path, bases: list[str] = ()) -> list[Unsaved]:
    """The tips of ``store`` (checkout ``checkout_path``'s private store) that hold commits no ref
    of ``shared`` reaches; a reflog entry only when no named tip of the list holds it already, and
    only when some of its changes are in none of ``bases`` by patch-id (the tip a rebase-down
    replaced, once the rebased commits landed, holds nothing that would be lost).  Where a ref of
    ``shared`` reaches every tip (a worktree whose work all landed), one ``rev-list`` there says so."""
    tips = store_tips(store)
    have = shared_tips(shared)
    if held_by_refs(shared, {t.sha for t in tips}, have):
        return []
    commit = commits_of(checkout_path, sorted({t.sha for t in tips}))
    missing = set(missing_commits(checkout_path, sorted(set(commit.values())), have))
    named, older, seen = [], [], set()
    for tip in tips:
        if tip.sha in commit and commit[tip.sha] in missing and (tip.source, tip.sha) not in seen:
            seen.add((tip.source, tip.sha))
            (named if tip.named else older).append(tip)
    covered = set(missing_commits(checkout_path, sorted({commit[t.sha] for t in named}), have))
    found = [Unsaved(t, len(missing_commits(checkout_path, [commit[t.sha]], have))) for t in named]
    older = [t for t in older if commit[t.sha] not in covered]
    heads = independent(checkout_path, sorted({commit[t.sha] for t in older}))
    for tip in older:
        if commit[tip.sha] in heads:
            heads.discard(commit[tip.sha])
            if bases and not commits_missing_from(checkout_path, commit[tip.sha], list(bases)):
                continue
            found.append(Unsaved(tip, len(missing_commits(checkout_path, [commit[tip.sha]], have))))
    return found


def held_by_refs(shared: Path, shas: set[str], have: list[str]) -> bool:
    """True when ``shared`` (the toplevel's store: no sandbox writes it) has each of ``shas`` and
    some ref of it (``have``) reaches each: one ``git rev-list`` of the shas not in ``have``, which
    fails on an object the store lacks.  False: some tip may hold work (the caller asks in turn)."""
    left = sorted(shas - set(have))
    if not left:
        return True
    query = "".join(f"{sha}\n" for sha in left) + "".join(f"^{sha}\n" for sha in have)
    result = git(shared, ["rev-list", "--stdin"], input=query, check=False)
    return result.ok and not result.stdout.strip()


def independent(checkout_path: Path, commits: list[str]) -> set[str]:
    """Those of ``commits`` that are no ancestor of another."""
    if len(commits) < 2:
        return set(commits)
    return set(git(checkout_path, ["merge-base", "--independent", *commits]).stdout.split())


# -- keeping them ---------------------------------------------------------------------------------


def keep_unsaved(checkout_path: Path, shared: Path, name: str, unsaved: list[Unsaved]) -> list[tuple[Unsaved, str]]:
    """Fetch each unsaved tip into ``shared`` as a kept ref of worktree ``name``; (tip, ref) each."""
    if not unsaved:
        return []
    existing = dict(line.split(" ", 1)[::-1] for line in git(
        shared, ["for-each-ref", "--format=%(objectname) %(refname)", f"{KEPT_PREFIX}/{name}/"],
        toplevel_only=True).stdout.splitlines() if line)
    plan, used = [], set()
    for item in unsaved:
        ref = item.tip.kept_ref(name)
        if (ref in existing and existing[ref] != item.tip.sha) or ref in used:
            ref = f"{KEPT_PREFIX}/{name}/{item.tip.sha}"
        if ref in used:
            continue
        used.add(ref)
        plan.append((item, ref))
    argv = ["-c", "transfer.fsckObjects=true", "fetch", "--no-tags", "--no-write-fetch-head",
            "--no-auto-maintenance", "--no-recurse-submodules", "--quiet", str(checkout_path),
            *[f"{item.tip.sha}:{ref}" for item, ref in plan if existing.get(ref) != item.tip.sha]]
    if len(argv) > 9:
        result = git(shared, argv, check=False)
        if not result.ok:
            raise CommandFailed(f"keeping the commits of {checkout_path}'s private store in {shared} failed: "
                                f"{result.error_tail(3)}")
    for item, ref in plan:
        got = git(shared, ["rev-parse", "--verify", "--quiet", ref], check=False, toplevel_only=True)
        if got.stdout.strip() != item.tip.sha:
            raise CommandFailed(f"{shared}: {ref} is not {item.tip.sha} after fetching it from {checkout_path}")
    return plan


# -- a worktree's stores, for worktree.delete ------------------------------------------------------


def unsaved_in_worktree(wt: Workspace, checkouts: list[Checkout]) -> dict[Checkout, list[Unsaved]]:
    """Per checkout with a private store: its tips whose commits the toplevel's store lacks."""
    def one(checkout: Checkout) -> list[Unsaved]:
        store = private_store(wt.grouping, wt.name, checkout.name)
        if (store.is_dir() and not store.is_symlink() and (checkout.path / ".git").is_file()
                and checkout.store.is_dir()):
            integration = wt.integration_branch(checkout)
            return unsaved_tips(checkout.path, store, checkout.store, [integration])
        return []
    found = fan_out(one, checkouts)          # read-only git, each repo in a thread of its own
    return {checkout: unsaved for checkout, unsaved in zip(checkouts, found, strict=True) if unsaved}


def unsaved_problems(wt: Workspace, unsaved: dict[Checkout, list[Unsaved]]) -> list[str]:
    return [f"{wt.display(checkout.path)}: commits only its private store holds: "
            + ", ".join(f"{u.tip.describe()} ({u.commits} commit{'s' if u.commits != 1 else ''})" for u in items)
            for checkout, items in unsaved.items()]


def keep_worktree_commits(wt: Workspace, unsaved: dict[Checkout, list[Unsaved]]) -> list[str]:
    """Keep every unsaved tip in its repo's toplevel store; one line per kept ref."""
    lines = []
    for checkout, items in unsaved.items():
        for item, ref in keep_unsaved(checkout.path, checkout.store, wt.name, items):
            lines.append(f"{wt.display(checkout.store.parent)}: {ref} ({item.tip.describe()} of "
                         f"{wt.display(checkout.path)}, {item.commits} commit{'s' if item.commits != 1 else ''} "
                         f"the toplevel had nowhere else)")
    return lines


# -- kept refs that are no longer needed --------------------------------------------------------------


def kept_refs_missing(shared: Path, name: str, integration: str) -> list[tuple[str, str, int]]:
    """(ref, sha, commits of it not in ``integration`` by id or patch-id) per ``refs/chtop/kept/NAME/...``
    ref of ``shared`` (read-only)."""
    refs = host_refs(shared, f"{KEPT_PREFIX}/{name}/")
    if refs is None:
        out = git(shared, ["for-each-ref", "--format=%(objectname) %(refname)", f"{KEPT_PREFIX}/{name}/"],
                  toplevel_only=True).stdout
        refs = {ref: sha for sha, _, ref in (line.partition(" ") for line in out.splitlines())}
    return [(ref, sha, len(commits_missing_from(shared, sha, [integration]))) for ref, sha in sorted(refs.items())]


def prune_kept(shared: Path, name: str, integration: str,
               status: list[tuple[str, str, int]] | None = None) -> tuple[list[str], list[tuple[str, int]]]:
    """Drop the ``refs/chtop/kept/NAME/...`` refs of ``shared`` whose commits are all in
    ``integration`` (by id or patch-id: ``git cherry``); (dropped, [(still kept, commits not in it)]).
    ``status``: ``kept_refs_missing``'s answer, when the caller has it already."""
    dropped, kept = [], []
    for ref, sha, missing in kept_refs_missing(shared, name, integration) if status is None else status:
        if missing:
            kept.append((ref, missing))
        else:
            git(shared, ["update-ref", "-d", ref, sha], quiet=False, toplevel_only=True)
            dropped.append(ref)
    return dropped, kept


def prune_worktree_kept(wt: Workspace, checkouts: list[Checkout], integration_of) -> tuple[list[str], list[str]]:
    """``prune_kept`` in every repo of the worktree: (lines saying what went, lines saying what stays
    and why)."""
    gone, stays = [], []
    present = [c for c in checkouts if (c.store / "refs").is_dir()]
    # the read-only part in a thread per repo; the deletions (echoed) one repo after another
    statuses = fan_out(lambda c: kept_refs_missing(c.store, wt.name, integration_of(c)), present)
    for checkout, status in zip(present, statuses, strict=True):
        integ = integration_of(checkout)
        dropped, kept = prune_kept(checkout.store, wt.name, integ, status)
        here = wt.display(checkout.store.parent)
        gone += [f"{here}: dropped {ref} (its commits are all in {integ}, by id or patch-id)" for ref in dropped]
        stays += [f"{here}: {ref} (an earlier tip of {wt.name}: {n} commit{'s' if n != 1 else ''} not in {integ}, "
                  "by id or patch-id)"
                  for ref, n in kept]
    return gone, stays
