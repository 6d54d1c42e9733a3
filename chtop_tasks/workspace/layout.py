"""The workspace model: from any path inside, where everything is.

Layout (the grouping dir holds the toplevel and its sibling worktrees)::

    <grouping>/<top>/          toplevel: main worktree of the container repo
    <grouping>/<top>/<repo>/   a plain clone per manifest repo
    <grouping>/<name>/         feature worktree of <top>
    <grouping>/<name>/<repo>/  git worktree of <top>/<repo>
    <grouping>/claude/         the group's agent login and the user's claude settings (never mounted)
    <grouping>/extern/         optional reference trees
    <grouping>/.chtop/         chtop's host-side state (proxy logs, ...; agents/<name>/: each
                               worktree's own agent config dir, see sandbox/agent_config.py)

Each checkout of a feature worktree has private git state (see
``quarantine.py``): ``<grouping>/.chtop/git/<name>/<repo>.git`` (``@top.git``
for the container repo), borrowing the shared store's objects.

Finding a workspace reads files only (no git processes), and never trusts a
worktree's ``.git`` pointer on its own: the private store it names must list
the checkout back and borrow from a toplevel of this group.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..core import agentfile
from ..core.errors import WorkspaceError
from ..core.places import STATE_DIR_NAME, login_dir, state_dir
from ..stores.storewalk import UNREADABLE, planted_entry
from .manifest import MANIFEST_NAME, Manifest, load_manifest
from .rootfind import MARKERS, check_grouping, find_root, toplevel_in_grouping  # noqa: F401  (this module's API too)

RESERVED_GROUP_NAMES = ("claude", "extern", STATE_DIR_NAME)
CONTAINER_STORE = "@top.git"       # '@' is not allowed in repo names: no clash


def private_store(grouping: Path, worktree: str, repo_name: str) -> Path:
    """A feature worktree checkout's private git store ("" names the container repo)."""
    return state_dir(grouping) / "git" / worktree / (f"{repo_name}.git" if repo_name else CONTAINER_STORE)


def shared_objects_of(store: Path) -> Path | None:
    """The shared objects dir a private ``store`` borrows (its alternates line), or None."""
    lines = (agentfile.read_text(store / "objects" / "info" / "alternates", limit=4096) or "").split("\n")
    return Path(lines[0].strip()) if lines and lines[0].strip() else None


@dataclass(frozen=True)
class Checkout:
    """One repo's checkout inside a workspace ("" names the container repo)."""

    name: str
    path: Path
    store: Path

    @property
    def label(self) -> str:
        return self.name or "(container)"


@dataclass(frozen=True)
class Workspace:
    grouping: Path
    toplevel: Path
    root: Path
    manifest: Manifest

    @property
    def is_toplevel(self) -> bool:
        return self.root == self.toplevel

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def policy_dir(self) -> Path:
        return self.toplevel / "sandbox"

    @property
    def login_dir(self) -> Path:
        return login_dir(self.grouping)

    @property
    def state_dir(self) -> Path:
        return state_dir(self.grouping)

    @property
    def venv_dir(self) -> Path:
        return self.root / ".venv"

    def reserved_names(self) -> tuple[str, ...]:
        return (self.toplevel.name,) + RESERVED_GROUP_NAMES

    def worktree_root(self, name: str) -> Path:
        return self.grouping / name

    def checkouts(self) -> list[Checkout]:
        """The container repo first, then the manifest repos in order."""
        result = [Checkout("", self.root, self.toplevel / ".git")]
        for repo in self.manifest.repos:
            result.append(Checkout(repo.name, self.root / repo.name, self.toplevel / repo.name / ".git"))
        return result

    def toplevel_branch(self) -> str:
        """The container repo's integration branch: what its toplevel has checked out."""
        head = (self.toplevel / ".git" / "HEAD").read_text().strip()
        if not head.startswith("ref: refs/heads/"):
            raise WorkspaceError(f"{self.toplevel} has a detached HEAD; check out its integration branch first.")
        return head[len("ref: refs/heads/"):]

    def integration_branch(self, checkout: "Checkout") -> str:
        return self.manifest.get(checkout.name).branch if checkout.name else self.toplevel_branch()

    def main_checkout_dir(self, checkout: "Checkout") -> Path:
        """Where ``checkout``'s repo has its integration branch checked out: in the toplevel."""
        return self.toplevel / checkout.name if checkout.name else self.toplevel

    def display(self, path: Path) -> str:
        """A path shown relative to the grouping dir (``dev/alpha``), the way users name them."""
        try:
            return str(Path(path).relative_to(self.grouping))
        except ValueError:
            return str(path)

    def for_root(self, root: Path) -> "Workspace":
        """The same group seen from another checkout (its own manifest)."""
        root = Path(root)
        return Workspace(self.grouping, self.toplevel, root, load_manifest(root / MANIFEST_NAME))


def read_gitdir_file(dot_git: Path) -> Path:
    """The target of a ``.git`` pointer file (``gitdir: PATH``), resolved."""
    text = agentfile.read_text(dot_git, limit=4096)
    if text is None:
        raise WorkspaceError(f"{dot_git}: expected a regular .git file")
    text = text.strip()
    if not text.startswith("gitdir:") or "\n" in text:
        raise WorkspaceError(f"{dot_git}: not a git pointer file (expected one 'gitdir: PATH' line)")
    target = Path(text[len("gitdir:"):].strip())
    if not target.is_absolute():
        target = dot_git.parent / target
    return Path(os.path.normpath(target))


def admin_dir_for(store: Path, checkout: Path) -> Path | None:
    """The store's worktrees/<id> dir whose ``gitdir`` names ``checkout/.git``."""
    worktrees = store / "worktrees"
    if not worktrees.is_dir():
        return None
    want = checkout / ".git"
    for admin in sorted(worktrees.iterdir()):
        text = agentfile.read_text(admin / "gitdir", limit=4096)
        if text is None:
            continue
        if Path(os.path.normpath(text.strip())) == want:
            return admin
    return None


def _toplevel_of_private(root: Path, admin: Path) -> Path | None:
    """The toplevel a private store's admin dir leads to (None when it is not one of ours)."""
    store = admin.parent.parent
    grouping = root.parent
    if admin.parent.name != "worktrees" or store != private_store(grouping, root.name, ""):
        return None
    objects = shared_objects_of(store)
    if objects is None or objects.name != "objects" or objects.parent.name != ".git":
        return None
    toplevel = objects.parent.parent
    if toplevel.parent != grouping or admin_dir_for(store, root) != admin:
        return None
    return toplevel


def toplevel_of(root: Path) -> Path:
    """The main worktree of the container repo that ``root`` belongs to."""
    dot_git = root / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        return root
    admin = read_gitdir_file(dot_git)
    private = _toplevel_of_private(root, admin)
    if private is not None:
        return private
    store = admin.parent.parent
    toplevel = store.parent
    if store.name != ".git" or admin.parent.name != "worktrees" or admin_dir_for(store, root) != admin:
        raise WorkspaceError(
            f"{root}/.git points at {admin}, which is not a worktree of a toplevel in this group.\n"
            "The workspace layout is broken (or the .git file was tampered with); "
            "recreate the worktree with `inv worktree.create`."
        )
    return toplevel


def find_workspace(start: Path | None = None) -> Workspace:
    """The workspace around ``start`` (default: the current directory)."""
    root = find_root(Path.cwd() if start is None else start)
    toplevel = toplevel_of(root)
    grouping = toplevel.parent
    check_grouping(grouping, toplevel)
    if root != toplevel and root.parent != grouping:
        raise WorkspaceError(
            f"{root} is a worktree of {toplevel} but not its sibling; chtop worktrees live in {grouping}/."
        )
    return Workspace(grouping, toplevel, root, load_manifest(root / MANIFEST_NAME))


# Files git opens by name in a checkout (plain open(), which a FIFO blocks): .gitignore while it
# walks for untracked files, .gitattributes for a file's attributes, .gitmodules for submodules.  A
# link git does not follow there; a directory fails at once.  Deeper ones only a bounded wait covers.
OPENED_BY_NAME = (".gitignore", ".gitattributes", ".gitmodules")
BLOCKING_KINDS = ("a FIFO", "a socket", "a device", "not a regular file")


def planted_in_checkout(checkout_dir: Path) -> str | None:
    """Why host git would block in ``checkout_dir``: a FIFO, socket or device at its top where git
    opens a file by that name, with the command that removes it; else None."""
    for name in OPENED_BY_NAME:
        path = checkout_dir / name
        kind = agentfile.non_regular(path)
        if kind in BLOCKING_KINDS:
            return (f"{path}: {kind} where git opens a file by that name (host git would wait on it for "
                    f"ever); remove it: rm {shlex.quote(str(path))}")
    return None


def checkout_problem(ws: Workspace, checkout: Checkout, walk: bool = True) -> str | None:
    """Why ``checkout``'s .git does not point where the layout says, or a file planted at its top
    would block host git (``planted_in_checkout``), or None; with ``walk``, also the first link,
    FIFO or device in its private store (``planted_file``)."""
    dot_git = checkout.path / ".git"
    if not dot_git.exists() and not dot_git.is_symlink():
        return f"{checkout.path}: missing (no .git)"
    if ws.is_toplevel:
        if dot_git.is_symlink() or not dot_git.is_dir():
            return f"{dot_git}: expected the repo's own .git directory"
        return None
    planted = planted_in_checkout(checkout.path)
    if planted:
        return planted
    try:
        admin = read_gitdir_file(dot_git)
    except WorkspaceError as exc:
        return str(exc)
    private = private_store(ws.grouping, ws.name, checkout.name)
    if admin.parent == private / "worktrees":
        store = private
        if shared_objects_of(private) != checkout.store / "objects":
            return f"{private}/objects/info/alternates: does not name {checkout.store / 'objects'}"
    elif admin.parent == checkout.store / "worktrees":
        store = checkout.store     # made before private stores: converted by the next task or launch
    else:
        return f"{dot_git}: points at {admin}, expected a worktree entry in {private}/worktrees/"
    if admin_dir_for(store, checkout.path) != admin:
        return f"{dot_git}: points at {admin}, whose gitdir does not name {dot_git}"
    commondir = admin / "commondir"
    text = agentfile.read_text(commondir, limit=4096)
    if text is None:
        return f"{commondir}: unreadable (or not a regular file)"
    common = Path(os.path.normpath(admin / text.strip()))
    if common != store or commondir.is_symlink():
        return f"{commondir}: points at {common}, expected {store}"
    if store == private and walk:
        return planted_file_problem(store)
    return None


def planted_file(store: Path) -> tuple[Path, str] | None:
    """The first entry under ``store`` that is neither a regular file nor a directory (a FIFO, a
    socket, a device, a symlink), and what it is; None when there is none.

    Host git opens the files of a private store (and of the admin dirs in it) by itself, with plain
    open(): a FIFO made inside would block it (holding the worktree's lock), a link would make it
    read, or write, the file it names.  Git never makes any of these in a store, so none is allowed
    anywhere in it.  ``storewalk`` re-reads only the directories that changed since the last walk.
    """
    return planted_entry(store)


def planted_file_problem(store: Path) -> str | None:
    """``planted_file`` said as a refusal, with the command that fixes it."""
    found = planted_file(store)
    if found is None:
        return None
    path, what = found
    if what == UNREADABLE:
        return (f"{path} is {what} (its mode was changed inside the sandbox): chtop cannot see what is in "
                f"it, and host git still opens files there by name (a FIFO would block it), so chtop runs no "
                f"git in this worktree. Make it readable: chmod u+rwx {path}")
    return (f"{path} is {what}, not a regular file (made inside the sandbox): host git would block on "
            f"it or follow it, so chtop runs no git in this worktree. Remove it: rm {path}")


def verify_git_dirs(ws: Workspace, names: list[str] | None = None, walk: bool = True) -> None:
    """Refuse when a checkout's .git does not point where the layout says.

    A feature worktree's checkout must name the admin dir of its own private
    store (whose ``commondir`` leads back to that store, and whose alternates
    name the toplevel's store), or -- until it is converted -- an admin dir of
    the toplevel's store that lists it back.  An agent that rewrites a
    ``.git`` file or a ``commondir`` could point host-side git at a config of
    its own, whose ``core.fsmonitor`` runs any command: so every git command
    chtop runs on the host is preceded by this check.
    """
    problems = []
    for checkout in ws.checkouts():
        if names is not None and checkout.name not in names:
            continue
        if checkout.name and not checkout.path.exists():
            continue  # absent repos are reported by the operation itself
        problem = checkout_problem(ws, checkout, walk)
        if problem:
            problems.append(problem)
    if problems:
        raise WorkspaceError(
            "refusing to run git: a checkout's git dir is not the one the workspace layout says:\n  "
            + "\n  ".join(problems)
            + "\nInspect these by hand before trusting them (they may have been tampered with)."
        )
