"""Private git state for each feature worktree, and the host-side import of its branch.

The rule: the agent owns its worktree's branch and nothing else.  The shared
stores (``<top>/.git``, ``<top>/<repo>/.git``) are read-only in every
sandbox.  Each checkout of a feature worktree ``W`` gets a private store
``C`` of its own instead (created by chtop, host-side)::

    <grouping>/.chtop/git/W/<repo>.git     (@top.git for the container repo)
        config          chtop's copy of the shared store's config (+ bare, hooksPath, gc.auto=0)  [pinned]
        hooks/ info/    empty / a copy of the shared store's info/ (excludes)                  [pinned]
        objects/        new objects; objects/info/alternates names the shared objects/         [info/ pinned]
        packed-refs     the integration branch, tags and remotes, copied from the shared store
        refs/ logs/     the agent's refs and reflogs
        worktrees/      [pinned]
          <id>/         the checkout's admin dir (HEAD, index, rebase state); its
                        commondir, gitdir and config.worktree [pinned]

Everything not pinned is the agent's (so ref deletions, ``pack-refs`` and
``gc`` work inside); pinned means read-only in the sandbox.

The checkout's ``.git`` file names ``C/worktrees/<id>`` on the host and
inside alike, so plain git on the host sees the agent's branch, index and
commits.  Work reaches the shared history only through :func:`import_branch`,
of ``refs/heads/W`` only: the objects it adds are copied into the shared store
by git run there, which reads ``C``'s objects (never its config) and checks
every object it writes (:func:`copy_objects`).  A rewritten branch keeps its
old tip under ``refs/chtop/kept/W/<sha>``: once imported, a commit is never
lost.  Host-side git never takes ``C`` as its ``GIT_DIR`` after the agent had
it: it enters through the pinned ``.git`` and ``commondir`` (git reads
``commondir`` from the admin dir only, never from the common dir).
"""

from __future__ import annotations

# shutil is imported only where a store is converted or cleaned up (_copy_ref, convert_checkout,
# _drop_stale_shared_admin): a git task's or a create's import of this module skips it, and bz2
# and lzma with it.
import fcntl
import os
import re
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..core import agentfile, atomic
from ..core.errors import ChtopError, CommandFailed, Refused, WorkspaceError
from ..core.fanout import fan_out
from ..core.gitprobe import commits_missing_from, rev
from ..core.gitrun import git, git_pipeline
from ..core.places import state_dir
from ..core.term import warn
from ..workspace.layout import (
    Checkout,
    Workspace,
    admin_dir_for,
    find_workspace,
    planted_file_problem,
    private_store,
    read_gitdir_file,
    verify_git_dirs,
)
from . import rebasemark

SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
KEPT_PREFIX = "refs/chtop/kept"
INCOMING_PREFIX = "refs/chtop/incoming"
# Pinned read-only in the sandbox (the rest of the store is the agent's): what
# host-side git would read as config, run, or follow to other objects.
PINNED_IN_STORE = ("config", "hooks", "info", "worktrees", "objects/info")
PINNED_IN_ADMIN = ("commondir", "gitdir", "config.worktree")


# -- where things are --------------------------------------------------------------------


def group_git_dir(grouping: Path) -> Path:
    return state_dir(grouping) / "git"


def store_of(ws: Workspace, checkout: Checkout) -> Path:
    return private_store(ws.grouping, ws.name, checkout.name)


def private_worktree_names(grouping: Path) -> list[str]:
    """The feature worktrees that have private stores (their root still has a .git file)."""
    base = group_git_dir(grouping)
    if not base.is_dir():
        return []
    return sorted(d.name for d in base.iterdir()
                  if d.is_dir() and not d.is_symlink() and (grouping / d.name / ".git").is_file())


# -- reading refs from files (no git process: the cheap "nothing new" check) -------------------


PACKED_REFS_MAX = 64 << 20


def read_packed_refs(gitdir: Path) -> tuple[str, list[tuple[str, str, str | None]]]:
    """(header line, [(sha, refname, peeled sha or None)]) of ``gitdir/packed-refs`` (nothing when
    it is missing, or not a regular file of at most PACKED_REFS_MAX bytes: the agent's may be a FIFO)."""
    text = agentfile.read_text(gitdir / "packed-refs", limit=PACKED_REFS_MAX)
    if text is None:
        return "", []
    header, entries = "", []
    for line in text.splitlines():
        if line.startswith("#"):
            header = line
        elif line.startswith("^") and entries:
            sha, name, _ = entries[-1]
            entries[-1] = (sha, name, line[1:].strip())
        elif " " in line:
            sha, name = line.split(" ", 1)
            entries.append((sha, name.strip(), None))
    return header, entries


def packed_refs_read(store: Path) -> bool:
    """Whether ``read_ref`` saw all of ``store``'s packed refs: none there, or a plain file it reads whole."""
    try:
        info = os.lstat(store / "packed-refs")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= PACKED_REFS_MAX


def read_ref(gitdir: Path, name: str) -> str | None:
    """The value of ``name`` (a sha, or ``ref: ...`` for a symref), loose first, or None."""
    text = agentfile.read_text(gitdir / name, limit=4096)
    if text is not None:
        return text.strip()
    for sha, ref, _ in read_packed_refs(gitdir)[1]:
        if ref == name:
            return sha
    return None


# -- making a private store --------------------------------------------------------------------


def store_config(shared: Path) -> str:
    """The shared store's config with chtop's settings last (the last value wins in git)."""
    text = (shared / "config").read_text()
    extra = "\n# chtop: this worktree's private store (see chtop_tasks/stores/quarantine.py)\n[core]\n\tbare = true\n"
    if "hookspath" not in text.lower():
        extra += f"\thooksPath = {shared / 'hooks'}\n"
    extra += "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n"
    return text.rstrip("\n") + "\n" + extra


def packed_refs_text(shared: Path, branch_tips: dict[str, str]) -> str:
    """Tags and remote-tracking refs of the shared store, plus ``branch_tips`` (name -> sha)."""
    header, entries = read_packed_refs(shared)
    lines: dict[str, list[str]] = {}
    for sha, name, peeled in entries:
        if name.startswith(("refs/tags/", "refs/remotes/")):
            lines[name] = [f"{sha} {name}"] + ([f"^{peeled}"] if peeled else [])
    for name, sha in branch_tips.items():
        lines[f"refs/heads/{name}"] = [f"{sha} refs/heads/{name}"]
    return packed_text(header, lines)


def packed_text(header: str, lines: dict[str, list[str]]) -> str:
    """A ``packed-refs`` file: the header, then each ref's lines sorted by name (git expects it)."""
    body = [line for name in sorted(lines) for line in lines[name]]
    return (header or "# pack-refs with: peeled fully-peeled sorted ") + "\n" + "".join(f"{x}\n" for x in body)


def write_store_files(store: Path, shared: Path, integration: str, integration_sha: str) -> None:
    """Everything of a fresh private store but its worktree admin dir."""
    store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    store.mkdir(mode=0o755)
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "logs/refs/heads", "hooks", "info",
                "worktrees"):
        (store / sub).mkdir(parents=True, exist_ok=True)
    (store / "HEAD").write_text(f"ref: refs/heads/{integration}\n")
    (store / "config").write_text(store_config(shared))
    (store / "objects" / "info" / "alternates").write_text(f"{shared / 'objects'}\n")
    (store / "packed-refs").write_text(packed_refs_text(shared, {integration: integration_sha}))
    copy_info(shared, store)


def copy_info(shared: Path, store: Path) -> None:
    """The shared ``info/`` files (exclude, attributes) into the private store's."""
    src = shared / "info"
    if not src.is_dir():
        return
    for entry in src.iterdir():
        if entry.is_file() and not entry.is_symlink():
            target = store / "info" / entry.name
            text = entry.read_bytes()
            if not target.is_file() or target.read_bytes() != text:
                target.write_bytes(text)      # a plain write: info/ is pinned read-only in the sandbox


def finish_admin_dir(admin: Path) -> None:
    """An empty ``config.worktree`` (pinned inside: never the agent's, whatever the extensions say),
    renamed over whatever was there (a link is replaced, never followed)."""
    atomic.write_atomic(admin / "config.worktree", "")


# A checkout's files written by as many of git's checkout workers as there are cores (git's own
# parallel checkout: it inflates and writes files in worker processes; 100 files or more, no filter
# on them).  git's default is one worker; one per core writes a checkout of a few hundred files
# faster, on 2 cores too.
PARALLEL_CHECKOUT = ["-c", "checkout.workers=0"]


def attach_private_worktree(store: Path, path: Path, branch: str, start_sha: str, checkout: bool = True) -> None:
    """The checkout of ``branch`` at ``start_sha`` (one ``git worktree add``) on the private store
    ``write_store_files`` made (apart, so that the store can be written while ``path``'s parent is
    still being made); without ``checkout``, the checkout has no files yet: ``check_out_files``
    writes them."""
    git(store.parent, [*PARALLEL_CHECKOUT, f"--git-dir={store}", "worktree", "add", *([] if checkout else ["--no-checkout"]),
                       "-b", branch, str(path), start_sha], quiet=False)
    admin = admin_dir_for(store, path)
    if admin is None:
        raise CommandFailed(f"git worktree add made no admin dir for {path} in {store}")
    finish_admin_dir(admin)


NULL_SHA = "0" * 40


def check_out_files(path: Path, tip: str) -> None:
    """The files of a checkout ``attach_private_worktree`` made without them, as ``git worktree add``
    writes them: its ``reset --hard``, then the ``post-checkout`` hook (where your config has one)."""
    git(path, [*PARALLEL_CHECKOUT, "reset", "-q", "--hard", "--no-recurse-submodules"], quiet=False)
    git(path, ["hook", "run", "--ignore-missing", "post-checkout", "--", NULL_SHA, tip, "1"], quiet=False)


# -- keeping the integration branch current inside ---------------------------------------------


def refresh_integration(store: Path, shared: Path, integration: str) -> bool:
    """Make the private copy of ``integration`` the shared store's (True when it changed).

    Written host-side into ``packed-refs`` (renamed over); a loose copy the
    agent made is removed through directory fds that never follow a symlink.
    """
    copy_info(shared, store)
    head = store / "HEAD"
    if head.is_symlink() or not head.is_file():        # removed inside: git would not see a repo
        atomic.write_atomic(head, f"ref: refs/heads/{integration}\n")
    tip = read_ref(shared, f"refs/heads/{integration}")
    if tip is None or not SHA_RE.match(tip):
        return False
    loose = store / "refs" / "heads" / integration
    if read_ref(store, f"refs/heads/{integration}") == tip and not loose.is_symlink() and not loose.exists():
        return False
    header, entries = read_packed_refs(store)
    name = f"refs/heads/{integration}"
    kept = {ref: [f"{sha} {ref}"] + ([f"^{peeled}"] if peeled else []) for sha, ref, peeled in entries}
    kept[name] = [f"{tip} {name}"]          # the agent's other packed refs (its stash, tags) stay
    atomic.write_atomic(store / "packed-refs", packed_text(header, kept))
    remove_loose_ref(store, name)
    return True


def remove_loose_ref(gitdir: Path, name: str) -> None:
    """Unlink ``gitdir/name`` walking the path with O_NOFOLLOW dir fds (a symlinked dir stops it)."""
    parts = name.split("/")
    fd = os.open(gitdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                return
            os.close(fd)
            fd = nxt
        try:
            os.unlink(parts[-1], dir_fd=fd)
        except IsADirectoryError:
            pass
        except OSError:
            pass
    finally:
        os.close(fd)


# -- the import ------------------------------------------------------------------------------------


@dataclass
class Imported:
    """What one import did: ``kept`` is the old tip kept when the branch was rewritten."""

    checkout: Path
    branch: str
    old: str | None
    new: str
    kept: str | None = None


def _locked(worktree_git_dir: Path):
    """``.chtop/git/<name>/.lock``, held while a worktree is converted or imported."""
    lock = open(worktree_git_dir / ".lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def has_news(store: Path, shared: Path, branch: str) -> bool:
    """Whether ``import_branch`` has anything to do for ``branch`` (or to refuse): False when it would
    answer "nothing new" from its first two reads (the branch gone inside, or at the shared tip)."""
    ref = f"refs/heads/{branch}"
    if (store / ref).is_symlink():
        return True
    new = read_ref(store, ref)
    return new is not None and new != read_ref(shared, ref)


def import_branch(checkout_path: Path, store: Path, shared: Path, branch: str,
                  host_rewrite_bases: list[str] | None = None, present_tips: tuple[str, ...] = (),
                  walked: bool = False, stopped_rebase: tuple[str, str] | None = None) -> Imported | None:
    """Bring ``branch`` from the private store into ``shared`` (None when there is nothing new).

    The "nothing new" answer reads two ref files and runs no process.  The
    caller holds the worktree's lock (``sync_worktree`` does).  ``host_rewrite_bases``: chtop
    itself rewrote the branch on the host (rebase-down); the old tip is kept only if some of its
    commits are in neither the new tip nor these branches (by id or patch-id).  ``present_tips``:
    branches of ``shared`` (the integration branch); when the new tip is one's commit (a rebase-down
    with no commits of its own ends there), the shared store has it and all it reaches already, and
    the ref moves without a fetch.  ``walked``: the caller walked ``store`` for planted files just
    before, under the same lock (a second walk closes no race).  ``stopped_rebase``: the host's record
    of a rebase-down of this branch that stopped on a conflict (``rebasemark``); the user finishing
    it by hand is the host's rewrite too.
    """
    ref = f"refs/heads/{branch}"
    if (store / ref).is_symlink():      # (has_news says True here, so that this refusal is made)
        # git would read the file it names as the ref: refuse to let a planted link steer the fetch
        raise CommandFailed(f"{store / ref} is a symlink (written inside the sandbox); not imported. "
                            f"Remove it and commit again: rm {store / ref}")
    new = read_ref(store, ref)
    if new is None:
        return None           # deleted inside: the shared store keeps its copy
    old = read_ref(shared, ref)
    if new == old:
        return None
    if (shared / "HEAD").read_text().strip() == f"ref: {ref}":
        raise CommandFailed(f"{shared.parent} has {branch} checked out; the import of worktree {branch} "
                            f"would move it under you. Check out its integration branch there.")
    planted = None if walked else planted_file_problem(store)   # git would block on a FIFO there, or follow a link
    if planted:
        raise CommandFailed(f"{branch} is not imported from {checkout_path}: {planted}")
    tips = [tip for name in present_tips if (tip := read_ref(shared, f"refs/heads/{name}")) and SHA_RE.match(tip)]
    keep = None
    if SHA_RE.match(new) and new in tips:
        # a branch tip of the host's own store (with all it reaches): nothing to fetch, nothing to check
        got, incoming = f"{new}^{{commit}}", None
    elif SHA_RE.match(new):
        keep = copy_objects(store, shared, new, [old, *tips] if old and SHA_RE.match(old) else tips,
                            f"importing {branch} from {checkout_path}")
        got, incoming = f"{new}^{{commit}}", None
    else:
        incoming = f"{INCOMING_PREFIX}/{branch}"
        result = git(shared, _fetch_args(checkout_path, f"+{ref}:{incoming}"), check=False)
        if not result.ok:
            raise CommandFailed(f"importing {branch} from {checkout_path} into {shared} failed: "
                                f"{result.error_tail(3)}")
        if read_ref(shared, incoming) == old:       # the host's store, the ref fetch just wrote: data
            git(shared, ["update-ref", "-d", incoming])
            return None
        got = f"{incoming}^{{commit}}"       # what was fetched, as a commit: git fails on anything else
    try:
        kept = None
        if old and rewritten(shared, old, got, host_rewrite_bases, f"importing {branch} from {checkout_path}") \
                and not rebasemark.finishes(shared, old, got, stopped_rebase):
            kept = f"{KEPT_PREFIX}/{branch}/{old}"
        lines = [f"update {ref} {got} {old}" if old else f"create {ref} {got}"]
        lines += [f"update {kept} {old}"] if kept else []
        lines += [f"delete {incoming}"] if incoming else []
        git(shared, ["update-ref", "-m", f"chtop: import {branch} from its sandbox", "--stdin"],
            input="\n".join(lines) + "\n")
    finally:
        if keep is not None:
            keep.unlink(missing_ok=True)     # the ref holds the objects now (or the import failed)
    new = read_ref(shared, ref)
    return Imported(checkout_path, branch, old, new if new and SHA_RE.match(new) else rev(shared, ref), kept)


UNPACK_LIMIT = 100      # git's transfer.unpackLimit: a smaller pack is stored as loose objects, as fetch does
PACK_HEADER = 12        # "PACK", the version, the object count: big-endian 32-bit words


def copy_objects(store: Path, shared: Path, new: str, exclude: list[str], what: str) -> Path | None:
    """Copy the objects commit ``new`` reaches and ``exclude`` (commits of ``shared``) do not, from the
    private ``store`` into ``shared``, every one of them checked; the ``.keep`` file that guards a new
    pack from a repack until a ref holds it (the caller removes it), or None.

    Two git processes, where ``git fetch`` from the checkout starts six (fetch, a shell,
    upload-pack, pack-objects, index-pack, a connectivity rev-list).  ``pack-objects``, in
    ``shared``, reads the private store's objects as objects through
    ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` (none of the store's config, hooks or refs is read; its
    ``objects/info`` is pinned, and the store was walked for planted links and FIFOs first).  As
    fetch does, fewer than ``UNPACK_LIMIT`` objects are written loose (``unpack-objects``: a pack
    per import would soon have git's automatic gc repack the whole store), more as a pack
    (``index-pack``); either runs in ``shared`` alone with ``--strict``, which names every object
    by the hash of its content, checks each as fsck does (``transfer.fsckObjects``) and that each
    object it links to is in the pack or already in ``shared``: an object of the agent's whose
    content is not what its name says leaves its name missing, and nothing lands that ``shared``
    cannot complete.  The branch then moves with ``update-ref``, which writes nothing but a commit
    to it."""
    revs = "".join(f"{line}\n" for line in [new, "--not", *exclude])
    result = git_pipeline(
        shared, ["pack-objects", "--revs", "--stdout", "--delta-base-offset", "-q"], taker_for_pack,
        input=revs.encode(), first_env={"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(store / "objects")},
        head=PACK_HEADER, check=False)
    if not result.ok:
        raise CommandFailed(f"{what} into {shared} failed: {result.error_tail(3)}")
    if "index-pack" not in result.argv:
        return None
    name = result.stdout.split()[-1] if result.stdout.split() else ""
    if not SHA_RE.match(name):
        raise CommandFailed(f"{what} into {shared}: git index-pack said {result.stdout.strip()!r}, not its pack")
    return shared / "objects" / "pack" / f"pack-{name}.keep"


def taker_for_pack(header: bytes) -> list[str] | None:
    """The git that stores the pack whose header is ``header`` in the repo it runs in, checked; None
    for no objects (or no pack: pack-objects failed, and says why)."""
    if len(header) < PACK_HEADER or header[:4] != b"PACK":
        return None
    version, count = int.from_bytes(header[4:8], "big"), int.from_bytes(header[8:12], "big")
    if count == 0:
        return None
    given = f"--pack_header={version},{count}"
    if count < UNPACK_LIMIT:
        return ["unpack-objects", "--strict", "-q", given]
    return ["index-pack", "--stdin", "--strict", "--keep=chtop: import from a sandbox", given]


def _fetch_args(checkout_path: Path, refspec: str) -> list[str]:
    """``git fetch`` of one refspec from the checkout, every object it receives checked (fsck)."""
    return ["-c", "transfer.fsckObjects=true", "fetch", "--no-tags", "--no-write-fetch-head", "--no-auto-maintenance",
            "--no-recurse-submodules", "--quiet", str(checkout_path), refspec]


def rewritten(shared: Path, old: str, got: str, host_rewrite_bases: list[str] | None, what: str) -> bool:
    """Whether importing ``got`` (a commit expression) over ``old`` loses commits of ``old``, so its tip
    is kept: ``old`` is no ancestor of ``got`` (one ``rev-list``, which also fails when ``got`` is no
    commit: the import fails then), and, where chtop's own rebase-down rewrote the branch, some commit
    of ``old`` is in neither ``got`` nor those bases (by id or patch-id)."""
    result = git(shared, ["rev-list", "--max-count=1", old, f"^{got}"], check=False)
    if not result.ok:
        raise CommandFailed(f"{what} into {shared} failed: {result.error_tail(3)}")
    if not result.stdout.strip():
        return False                     # a fast-forward (or the same commit)
    return not (host_rewrite_bases and not commits_missing_from(shared, old, [got, *host_rewrite_bases]))


def owned_by_me(path: Path) -> bool:
    try:
        return path.stat().st_uid == os.geteuid()
    except OSError:
        return False


# -- workspaces made before private stores ------------------------------------------------------


def legacy_admin(checkout: Checkout) -> Path | None:
    """The shared store's admin dir this checkout's .git still names, or None."""
    try:
        admin = read_gitdir_file(checkout.path / ".git")
    except WorkspaceError:
        return None
    if admin.parent == checkout.store / "worktrees" and admin_dir_for(checkout.store, checkout.path) == admin:
        return admin
    return None


def _carried_branches(old_admin: Path, worktree: str) -> list[str]:
    """The worktree's own branch, the branch its HEAD is on and the one a rebase is on."""
    names = [worktree]
    for rel in ("HEAD", "rebase-merge/head-name", "rebase-apply/head-name"):
        text = (agentfile.read_text(old_admin / rel, limit=4096) or "").strip()
        text = text[len("ref: "):] if text.startswith("ref: ") else text
        if text.startswith("refs/heads/") and text[len("refs/heads/"):] not in names:
            names.append(text[len("refs/heads/"):])
    return names


def _copy_ref(shared: Path, store: Path, name: str) -> None:
    """A ref of the shared store, and its reflog, into a fresh private store (files: nothing runs)."""
    value = read_ref(shared, name)
    if value is None or not SHA_RE.match(value):
        return
    target = store / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(value + "\n")
    log = shared / "logs" / name
    if log.is_file() and not log.is_symlink():
        import shutil

        (store / "logs" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, store / "logs" / name)


def convert_checkout(ws: Workspace, checkout: Checkout, integration: str) -> Path:
    """Move a checkout made before private stores onto one, losing nothing.

    The admin dir (HEAD, index, ORIG_HEAD, rebase-merge/, logs/HEAD, ...) is
    copied, the branches it stands on and ``refs/stash`` with their reflogs
    are copied, ``.git`` is pointed at the copy, and only then is the old
    admin dir removed (so the shared store no longer has the branch checked
    out).  An interrupted run leaves the old layout working and is redone.
    """
    old_admin = legacy_admin(checkout)
    assert old_admin is not None
    planted = planted_file_problem(old_admin)      # it was the agent's: copied, a link would be written through
    if planted:
        raise WorkspaceError(f"{checkout.path} is not moved onto private git state: {planted}")
    import shutil

    shared, store = checkout.store, store_of(ws, checkout)
    if store.exists():
        shutil.rmtree(store)          # an interrupted conversion: no .git names it yet
    tip = read_ref(shared, f"refs/heads/{integration}")
    if tip is None:
        raise WorkspaceError(f"{shared}: no branch {integration!r} (the integration branch) to convert against")
    write_store_files(store, shared, integration, tip)
    admin = store / "worktrees" / old_admin.name
    shutil.copytree(old_admin, admin, symlinks=True)
    atomic.write_atomic(admin / "commondir", "../..\n")
    finish_admin_dir(admin)
    for branch in _carried_branches(old_admin, ws.name):
        _copy_ref(shared, store, f"refs/heads/{branch}")
    _copy_ref(shared, store, "refs/stash")
    _relink_submodules(old_admin, admin)
    atomic.write_atomic(checkout.path / ".git", f"gitdir: {admin}\n")
    shutil.rmtree(old_admin)
    return store


def _relink_submodules(old_admin: Path, admin: Path) -> None:
    """Submodule gitdirs moved with the admin dir: re-point their checkouts' relative links."""
    modules = admin / "modules"
    if not modules.is_dir():
        return
    for dirpath, _dirs, files in os.walk(modules):
        if "config" not in files or "HEAD" not in files:
            continue
        new_gitdir = Path(dirpath)
        old_gitdir = old_admin / new_gitdir.relative_to(admin)
        got = git(None, ["config", "--file", str(new_gitdir / "config"), "core.worktree"], check=False)
        if not got.ok or not got.stdout.strip():
            continue
        sub = Path(os.path.normpath(old_gitdir / got.stdout.strip()))
        if not (sub / ".git").is_file():
            continue
        git(None, ["config", "--file", str(new_gitdir / "config"), "core.worktree",
                   os.path.relpath(sub, new_gitdir)])
        atomic.write_atomic(sub / ".git", f"gitdir: {os.path.relpath(new_gitdir, sub)}\n")


def _drop_stale_shared_admin(checkout: Checkout) -> None:
    """A conversion interrupted after ``.git`` moved: the shared store's old entry goes."""
    worktrees = checkout.store / "worktrees"
    if legacy_admin(checkout) is None and worktrees.is_dir() and any(worktrees.iterdir()):
        stale = admin_dir_for(checkout.store, checkout.path)
        if stale is not None:
            import shutil

            shutil.rmtree(stale)


# -- what host tasks, launches and the proxy daemon call -------------------------------------------


def sync_worktree(ws: Workspace, *, convert: bool = True, refresh: bool = True,
                  strict: bool = False, walk: bool = True, rewritten_by_host: bool = False,
                  on_verified=None) -> list[Imported]:
    """Convert old checkouts, refresh the integration branches inside, import the branch.

    Every host task that reads or moves branches calls this first; so do
    launches (before the container starts) and sandbox exits.  ``walk``: check the private stores
    for planted links and FIFOs first (the proxy's timer and the exit import skip it: they check a
    store only when there is something to import from it).  A failed
    import is a warning, or (``strict``: tasks that land or delete work) an
    error once every repo was tried.  One lock per worktree keeps a task and
    the proxy daemon's timer from working on it at once.  ``rewritten_by_host``: chtop's own
    rebase-down just rewrote the branches (see ``import_branch``'s ``host_rewrite_bases``).
    """
    if ws.is_toplevel:
        return []
    checkouts = [c for c in ws.checkouts() if (c.path / ".git").exists()]
    mine = [c for c in checkouts if owned_by_me(c.store)]
    if not mine:          # git (and chtop) never act on another user's repo: its owner's tasks do
        if convert and any(legacy_admin(c) is not None for c in checkouts):
            raise Refused(f"{ws.root} still uses the shared stores' git state, and they belong to another "
                          f"user; run `inv git.status` in {ws.root} as their owner first (that moves it "
                          "onto private git state)")
        verify_git_dirs(ws)
        if on_verified is not None:
            on_verified()
        return []
    lock_dir = group_git_dir(ws.grouping) / ws.name
    lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _locked(lock_dir):
        return _sync_locked(ws, mine, convert, refresh, strict, walk, rewritten_by_host, on_verified)


def _sync_locked(ws: Workspace, mine: list[Checkout], convert: bool, refresh: bool,
                 strict: bool, walk: bool, rewritten_by_host: bool = False, on_verified=None) -> list[Imported]:

    legacy = [c for c in mine if legacy_admin(c) is not None]
    if convert:
        for checkout in legacy:
            convert_checkout(ws, checkout, ws.integration_branch(checkout))
            print(f"chtop: {checkout.path}: moved onto private git state {store_of(ws, checkout)} "
                  f"(the shared store is read-only in the sandbox now)", file=sys.stderr, flush=True)
        legacy = []
    verify_git_dirs(ws, walk=walk)
    if on_verified is not None:
        on_verified()
    outcomes = _synced_checkouts(ws, [c for c in mine if c not in legacy and store_of(ws, c).is_dir()],
                                 refresh, rewritten_by_host, walk)
    done, failures = [], []
    for checkout, outcome in outcomes:
        if isinstance(outcome, str):
            failures.append(outcome)
        elif outcome is not None:
            imported = outcome
            done.append(imported)
            if imported.kept and rewritten_by_host:
                warn(f"{checkout.path}: rebase-down left some commits of {ws.name}'s old tip out of the new "
                     f"one (by patch-id too); the old tip is kept in {checkout.store.parent} as {imported.kept}")
            elif imported.kept:
                warn(f"{checkout.path}: branch {ws.name} was rewritten inside; its old tip is kept in "
                     f"{checkout.store.parent} as {imported.kept}")
    if failures and strict:
        raise CommandFailed("importing the worktree's branch failed, so nothing was changed:\n  "
                            + "\n  ".join(failures))
    for line in failures:
        warn(line)
    return done


def _synced_checkouts(ws: Workspace, checkouts: list[Checkout], refresh: bool, rewritten_by_host: bool,
                      walked: bool) -> list[tuple[Checkout, Imported | str | None]]:
    """Each repo's refresh and, where its branch has something new, its import; a failed import is
    its message.  The refreshes and the "nothing new" reads are file work only and run in turn; the
    imports (each waiting on its git processes) run in parallel threads.  A thread per repo for file
    work alone only adds its start and the GIL passed back and forth at every system call, on every
    launch and git task, where nothing was committed inside.  A refresh that fails is
    raised once every repo was tried.  ``walked``: the private stores were just walked for planted
    files (``verify_git_dirs``)."""
    outcomes: list = [None] * len(checkouts)
    news, failure = [], None
    for index, checkout in enumerate(checkouts):
        try:
            _refresh_checkout(ws, checkout, refresh)
            if has_news(store_of(ws, checkout), checkout.store, ws.name):
                news.append(index)
        except Exception as exc:  # noqa: BLE001 - raised below, once every repo was tried
            failure = failure or exc
    imported = fan_out(lambda index: _import_checkout(ws, checkouts[index], rewritten_by_host, walked), news)
    for index, outcome in zip(news, imported, strict=True):
        outcomes[index] = outcome
    if failure is not None:
        raise failure
    return list(zip(checkouts, outcomes, strict=True))


def _refresh_checkout(ws: Workspace, checkout: Checkout, refresh: bool) -> None:
    _drop_stale_shared_admin(checkout)
    if refresh:
        refresh_integration(store_of(ws, checkout), checkout.store, ws.integration_branch(checkout))


def _import_checkout(ws: Workspace, checkout: Checkout, rewritten_by_host: bool, walked: bool) -> Imported | str | None:
    """One repo's import of the worktree's branch (``import_branch``); a failure is its message."""
    try:
        bases = [ws.integration_branch(checkout)] if rewritten_by_host else None
        stopped = rebasemark.stopped_rebase(ws.grouping, ws.name, checkout.name)
        imported = import_branch(checkout.path, store_of(ws, checkout), checkout.store, ws.name, bases,
                                 (ws.integration_branch(checkout),), walked=walked, stopped_rebase=stopped)
    except CommandFailed as exc:
        return str(exc)
    if imported is not None and stopped is not None:
        rebasemark.forget(ws.grouping, ws.name, checkout.name)      # the branch moved on: the record is done
    return imported


def branch_ref_pairs(ws: Workspace) -> list[tuple[Path, Path]]:
    """(private store's, shared store's) loose ref file of branch ``W``, per repo of worktree ``W`` that
    has private git state and is the caller's: where they hold the same sha there is nothing to import
    (``sbox.run``'s waiting shell reads them so, as data, to skip starting Python)."""
    if ws.is_toplevel:
        return []
    ref = f"refs/heads/{ws.name}"
    pairs = []
    for checkout in ws.checkouts():
        store = store_of(ws, checkout)
        if (checkout.path / ".git").exists() and store.is_dir() and owned_by_me(checkout.store):
            pairs.append((store / ref, checkout.store / ref))
    return pairs


def sync_group(grouping: Path, note=warn, timeout: float = 20.0,
               busy: dict[str, threading.Thread] | None = None) -> list[Imported]:
    """Import every feature worktree's branch of the group (the proxy daemon's timer).

    Each worktree's import runs in a thread of its own and is waited for at most
    ``timeout`` seconds: one whose git dir blocks (a FIFO swapped in after the checks, a git that
    hangs) is noted and left to finish, while the others go on; ``busy`` keeps such threads from one
    call to the next, and a worktree whose import still runs is skipped."""
    done: list[Imported] = []
    busy = {} if busy is None else busy

    def one(name: str) -> None:
        try:
            done.extend(sync_worktree(find_workspace(grouping / name), convert=False, refresh=False, walk=False))
        except ChtopError as exc:
            note(f"import of worktree {name} skipped: {exc}")

    for name in private_worktree_names(grouping):
        if name in busy and busy[name].is_alive():
            continue
        worker = threading.Thread(target=one, args=(name,), name=f"chtop-import-{name}", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            busy[name] = worker
            note(f"import of worktree {name} still running after {timeout:g}s (its git state may block: "
                 f"`inv git.status` in {grouping / name} says where); the group's other worktrees go on")
        else:
            busy.pop(name, None)
    return done


IMPORT_INTERVAL = 2.0
IMPORT_TIMEOUT = 20.0      # per worktree, per round of the timer


class ImportTimer:
    """A thread that imports the group's branches every ``interval`` seconds, and at once when woken
    (the proxy wakes it when a sandbox's hand-off connection closes: the sandbox has ended)."""

    def __init__(self, grouping: Path, note, interval: float = IMPORT_INTERVAL, timeout: float = IMPORT_TIMEOUT):
        self.grouping, self.note, self.interval, self.timeout = grouping, note, interval, timeout
        self._busy: dict[str, threading.Thread] = {}
        self._woken = threading.Event()
        self._stopped = False
        threading.Thread(target=self._loop, name="chtop-import", daemon=True).start()

    def wake(self) -> None:
        self._woken.set()

    def stop(self) -> None:
        self._stopped = True
        self._woken.set()

    def _loop(self) -> None:
        while True:
            self._woken.wait(self.interval)
            self._woken.clear()
            if self._stopped:
                return
            try:
                for imp in sync_group(self.grouping, self.note, self.timeout, self._busy):
                    self.note(f"IMPORT   {imp.branch} {imp.old or '(new)'} -> {imp.new} from {imp.checkout}"
                              + (f", old tip kept as {imp.kept}" if imp.kept else ""))
            except Exception as exc:  # noqa: BLE001 - the proxy must outlive any import problem
                self.note(f"IMPORT   failed: {exc}")
