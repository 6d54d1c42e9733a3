"""The mount plan as data: what the container sees, and how.

The rule behind it: nothing the user later runs on the host may be writable
from inside.  So:

* the toplevel, with every repo's shared git store in it, is read-only
  whole: no shared objects, refs, logs, packed-refs, config, hooks or admin
  dir can be written;
* each checkout's private git store (``<grouping>/.chtop/git/<name>/<repo>.git``,
  see ``stores/quarantine.py``) is read-write for the agent's refs,
  objects, reflogs and admin dir, with what host-side git would read as
  config or run pinned read-only: ``config``, ``hooks/``, ``info/``,
  ``worktrees/``, ``objects/info/`` (the alternates), and the admin dir's
  ``commondir``, ``gitdir`` and ``config.worktree``;
* the worktree root is read-only and each of its entries is its own mount:
  read-write for the work (the repo dirs, docs, ...), read-only for what the
  host runs (``.git``, ``.envrc``, ``.venv``, ``.claude``, chtop's own code
  and policy).  New top-level files cannot be created and no entry can be
  renamed (``rename(2)`` of a mount point is EBUSY);
* inside each read-write repo dir its ``.git`` pointer (and ``.envrc``,
  ``.venv``, ``.claude`` if present) is pinned read-only the same way;
* every directory between a read-write mount root and a pinned path is
  bind-mounted onto itself, so no parent of a pin can be renamed either.
* the agents' config dir (``CLAUDE_CONFIG_DIR``) is this target's own
  (``<group>/.chtop/agents/<key>/config``), mounted alone: never its parent, another target's,
  or the group's login dir; its ``settings.json`` (chtop's hooks, the user's settings) is a
  host-written file mounted read-only over it, and a session's hook state dir is mounted only
  into that session's sandbox (``agent_config.py``);

Every path appears at its host path, so git metadata resolves.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core import agentfile
from ..stores.quarantine import PINNED_IN_ADMIN, PINNED_IN_STORE
from ..workspace.pins import HOST_EXECUTED, MANAGEMENT

# a venv's pyvenv.cfg is a few lines; more is not one
PYVENV_CFG_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Mount:
    src: Path | None     # None for a tmpfs
    dst: Path
    mode: str            # "ro", "rw" or "tmpfs"
    why: str

    @property
    def depth(self) -> int:
        return len(self.dst.parts)


class MountPlan:
    """An ordered set of mounts keyed by destination (a later add replaces)."""

    def __init__(self):
        self._by_dst: dict[Path, Mount] = {}
        self.warnings: list[str] = []

    def add(self, src, dst, mode, why) -> None:
        dst = as_path(dst)
        self._by_dst[dst] = Mount(None if src is None else as_path(src), dst, mode, why)

    def get(self, dst) -> Mount | None:
        return self._by_dst.get(as_path(dst))

    def remove(self, dst) -> None:
        self._by_dst.pop(as_path(dst), None)

    def mounts(self) -> list[Mount]:
        """Shallow first (podman applies them in this order too)."""
        return sorted(self._by_dst.values(), key=lambda m: (m.depth, str(m.dst)))

    def enclosing(self, path: Path) -> Mount | None:
        """The deepest mount strictly above ``path``: its nearest parent that is a mount (a lookup per
        level, where comparing with every mount made a plan's checks quadratic in its ~70 mounts)."""
        for parent in as_path(path).parents:
            mount = self._by_dst.get(parent)
            if mount is not None:
                return mount
        return None

    def effective_mode(self, path: Path) -> str | None:
        """How ``path`` is reachable inside: the mode of the deepest mount covering it."""
        mount = self.get(path)
        if mount is None:
            mount = self.enclosing(path)
        return None if mount is None else mount.mode


def as_path(path) -> Path:
    """``path`` as a Path, not made again when it is one (a plan makes some 400 of them: a new Path
    parses its string again)."""
    return path if isinstance(path, Path) else Path(path)


def is_within(path: Path, parent: Path) -> bool:
    """``path`` is ``parent`` or below it (lexically; both absolute and normalised)."""
    p, q = str(path), str(parent)
    return p == q or p.startswith(q if q.endswith("/") else q + "/")


def pin(plan: MountPlan, path: Path, why: str) -> None:
    """Mount an existing ``path`` read-only onto itself (not a symlink: one lstat)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if not stat.S_ISLNK(mode):
        plan.add(path, path, "ro", why)


def rename_proof(plan: MountPlan) -> None:
    """Self-mount every directory between a read-write mount root and a pin.

    A pin is a mount point (rename gives EBUSY), but its parents are plain
    directories in the read-write mount and could be renamed away, leaving a
    writable stand-in at the old path.  Making each of them a mount point
    too closes that.
    """
    for mount in list(plan.mounts()):
        if mount.mode != "ro" or mount.src is None:
            continue
        parent = plan.enclosing(mount.dst)
        if parent is None or parent.mode != "rw":
            continue
        between = mount.dst.parent
        while between != parent.dst and is_within(between, parent.dst):
            if plan.get(between) is None:
                plan.add(between, between, "rw", f"rename-proof parent of {mount.dst.name}")
            between = between.parent


def store_mounts(plan: MountPlan, store: Path, admin: Path | None) -> None:
    """A checkout's private git store: rw, with what host git reads as config or runs pinned.

    The shared store it borrows objects from stays under the read-only
    toplevel.  ``packed-refs`` and the rest of the store's top are the
    agent's own (ref deletions and ``git gc`` work); git never reads a
    ``commondir`` from a common dir, and host-side git enters the store only
    through the pinned ``.git`` file and admin ``commondir``.
    """
    plan.add(store, store, "rw", "this checkout's private git store (its refs and objects)")
    for name in PINNED_IN_STORE:
        pin(plan, store / name, f"private store {name} (host git reads it)")
    if admin is not None and admin.is_dir():
        plan.add(admin, admin, "rw", "this checkout's admin dir (HEAD, index)")
        for name in PINNED_IN_ADMIN:
            pin(plan, admin / name, f"admin {name} (redirects host git if rewritten)")
    allow_mounts_below(plan, store, "private git stores")


def allow_mounts_below(plan: MountPlan, path: Path, what: str) -> None:
    """A read-only tmpfs mask above ``path`` becomes a private one: it could not hold the mount
    points of ``path``, and an empty private tmpfs shows nothing more."""
    for mount in plan.mounts():
        if mount.mode == "tmpfs-ro" and is_within(path, mount.dst):
            plan.add(None, mount.dst, "tmpfs", f"{mount.why} ({what} mounted below)")


def checkout_dir_mounts(plan: MountPlan, root: Path, protected: tuple[str, ...], why: str) -> None:
    """A read-only ``root`` whose every entry is its own mount: rw except ``protected``."""
    plan.add(root, root, "ro", why)
    for entry in sorted(root.iterdir()):
        if entry.is_symlink():
            continue  # resolves to a target the plan mounts (or not) on its own
        if entry.name in protected:
            plan.add(entry, entry, "ro", f"host runs it: {entry.name}")
        else:
            plan.add(entry, entry, "rw", "work")


def repo_dir_pins(plan: MountPlan, repo_dir: Path) -> None:
    for name in HOST_EXECUTED:
        pin(plan, repo_dir / name, f"host runs it: {repo_dir.name}/{name}")


def venv_base_prefix(venv: Path, home: Path) -> Path | None:
    """The base interpreter's prefix from ``.venv/pyvenv.cfg`` (``home`` is its bin dir), when it
    is one.  The agent can write that file (a ``--dir`` directory is writable inside, so is a
    feature worktree's ``.venv`` during a build inside): it is read as ``agentfile`` reads, and its
    prefix is taken only when it holds a Python standard library (``lib/python3.*/os.py``, the
    landmark CPython's own startup looks for) and is neither ``/`` nor above the user's ``home``;
    else nothing is mounted for it (a host dir the agent names is never mounted)."""
    if venv.is_symlink():
        return None
    text = agentfile.read_text(venv / "pyvenv.cfg", limit=PYVENV_CFG_LIMIT)
    for line in (text or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            bin_dir = Path(value.strip())
            prefix = Path(os.path.realpath(bin_dir.parent if bin_dir.name == "bin" else bin_dir))
            return prefix if _is_python_prefix(prefix, home) else None
    return None


def _is_python_prefix(prefix: Path, home: Path) -> bool:
    if prefix == Path("/") or is_within(Path(os.path.realpath(home)), prefix):
        return False
    return any(os.path.isfile(p) for p in prefix.glob("lib/python3*/os.py"))


def _is_worktree_root(path: Path) -> bool:
    return (path / ".git").is_file() and not (path / ".git").is_symlink()


def _admit_policy_path(plan: MountPlan, path: Path, mode: str, where: str, ctx: "MountContext") -> None:
    """One fs-allow path, with the group's own files kept out of reach."""
    real = Path(os.path.realpath(path))
    for state in ctx.state_dirs:
        if is_within(real, state) or is_within(path, state):
            plan.warnings.append(f"{where}: {path} is chtop's host-side state; never mounted")
            return
    if mode == "rw":
        for guarded in ctx.guarded:
            inside = is_within(real, guarded)
            if is_within(guarded, real) or (inside and not _rw_ok_inside(real, ctx)):
                plan.warnings.append(
                    f"{where}: rw {path} would make the group's own files writable; mounted read-only"
                )
                mode = "ro"
                break
    plan.add(real, path, mode, f"fs-allow {where}")
    if mode == "rw" and ctx.grouping is not None and is_within(real, ctx.grouping):
        # a sibling worktree opened rw by policy: pin what the host runs in it
        rel = real.relative_to(ctx.grouping)
        if rel.parts:
            sibling = ctx.grouping / rel.parts[0]
            if _is_worktree_root(sibling):
                pin_checkout(plan, sibling, ctx.self_edit, ctx.repo_names)
    for state in ctx.state_dirs:
        if state.exists() and is_within(state, real) and state != real:
            plan.add(None, state, "tmpfs-ro", "mask chtop's host-side state")


def _rw_ok_inside(real: Path, ctx: "MountContext") -> bool:
    """rw below a guarded dir is fine only in this root, the config dir or a sibling worktree."""
    if is_within(real, ctx.root) or is_within(real, ctx.config_dir):
        return True
    if ctx.grouping is not None and is_within(real, ctx.grouping):
        rel = real.relative_to(ctx.grouping)
        if rel.parts and (ctx.grouping / rel.parts[0]) != ctx.toplevel:
            return _is_worktree_root(ctx.grouping / rel.parts[0])
    return False


def pin_checkout(plan: MountPlan, root: Path, self_edit: bool, repo_names) -> None:
    """Pin read-only what the host runs from a checkout that is mounted rw."""
    names = HOST_EXECUTED + (() if self_edit else MANAGEMENT)
    for name in names:
        pin(plan, root / name, f"host runs it: {name}")
    for repo in repo_names:
        if (root / repo).is_dir():
            repo_dir_pins(plan, root / repo)


@dataclass
class MountContext:
    kind: str                    # "worktree" or "dir"
    root: Path
    config_dir: Path
    home: Path
    grouping: Path | None = None
    toplevel: Path | None = None
    repo_names: tuple[str, ...] = ()
    stores: tuple[tuple[Path, Path | None], ...] = ()   # (store, this worktree's admin dir)
    extern: Path | None = None
    guarded: tuple[Path, ...] = ()       # rw below/above these is downgraded to ro
    state_dirs: tuple[Path, ...] = ()    # never mounted
    proxy_dir: Path | None = None
    self_edit: bool = False
    image_trees: tuple[Path, ...] = ()   # trees a local image has its own copy of (not bound from the host)
    agent_mounts: tuple = ()             # (src, dst, mode, why) inside config_dir (agent_config.py)
    build_rw: tuple[Path, ...] = ()      # venv.build only: the .venv and the group's build cache, writable
    build_ro: tuple[Path, ...] = ()      # venv.build only: the base interpreter's prefix, uv's binary


def plan_mounts(ctx: MountContext, fs_rules) -> MountPlan:
    """The whole mount plan for one launch (see the module docstring)."""
    plan = MountPlan()
    if Path("/usr") not in ctx.image_trees:
        plan.add("/usr", "/usr", "ro", "host toolchain (the container's /usr)")
    if Path("/etc") not in ctx.image_trees:
        plan.add("/etc", "/etc", "ro", "host /etc")
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_dir() and not top.is_symlink():
            plan.add(top, top, "ro", "host toolchain (not merged into /usr)")
    plan.add(None, ctx.home, "tmpfs", "scratch home, gone at exit")

    for rule in fs_rules:
        for path in rule.paths:
            _admit_policy_path(plan, path, rule.mode, rule.where, ctx)

    if ctx.kind == "worktree":
        _worktree_mounts(plan, ctx)
    else:
        _dir_mounts(plan, ctx)

    allow_mounts_below(plan, ctx.config_dir, "this target's agent config dir")
    plan.add(ctx.config_dir, ctx.config_dir, "rw", "this target's own agent config dir (no other's)")
    for src, dst, mode, why in ctx.agent_mounts:
        plan.add(src, dst, mode, why)
    if ctx.proxy_dir is not None:
        plan.add(ctx.proxy_dir, ctx.proxy_dir, "ro", "egress proxy socket dir")
    prefix = venv_base_prefix(ctx.root / ".venv", ctx.home)
    if prefix is not None and not is_within(prefix, Path("/usr")) and prefix.is_dir():
        # wherever it lives: under the scratch home (root's pyenv in /root) it would be hidden
        if plan.effective_mode(prefix) in (None, "tmpfs"):
            plan.add(prefix, prefix, "ro", "the venv's base interpreter")
    build_mounts(plan, ctx)
    rename_proof(plan)
    return plan


def build_mounts(plan: MountPlan, ctx: MountContext) -> None:
    """A venv build's own mounts (``venv/sandboxed.py``): its ``.venv`` and cache writable, its base
    interpreter readable; never a link, never chtop's state dir itself."""
    for path in ctx.build_ro:
        if plan.effective_mode(path) in (None, "tmpfs") and (path.is_dir() or path.is_file()) and not path.is_symlink():
            plan.add(path, path, "ro", "venv.build: the venv's base interpreter, or uv")
    for path in ctx.build_rw:
        if path.is_dir() and not path.is_symlink() and path not in ctx.state_dirs:
            plan.add(path, path, "rw", "venv.build only: the venv, or the group's build cache")


def _worktree_mounts(plan: MountPlan, ctx: MountContext) -> None:
    assert ctx.toplevel is not None
    plan.add(ctx.toplevel, ctx.toplevel, "ro", "toplevel (its working files and git stores)")
    if ctx.extern is not None and ctx.extern.is_dir():
        plan.add(ctx.extern, ctx.extern, "ro", "extern/ reference trees")
    for store, admin in ctx.stores:
        store_mounts(plan, store, admin)
    protected = HOST_EXECUTED + (() if ctx.self_edit else MANAGEMENT)
    if ctx.self_edit:
        plan.add(ctx.root, ctx.root, "rw", "this worktree (self-edit: chtop's code writable)")
        for name in protected:
            pin(plan, ctx.root / name, f"host runs it: {name}")
        if not os.path.lexists(ctx.root / "__pycache__"):    # else the agent could make it, with bytecode in
            plan.add(None, ctx.root / "__pycache__", "tmpfs-ro", "host runs it: __pycache__ (none yet)")
    else:
        checkout_dir_mounts(plan, ctx.root, protected, "this worktree's root (entries mounted one by one)")
    for repo in ctx.repo_names:
        repo_dir = ctx.root / repo
        if repo_dir.is_dir() and not repo_dir.is_symlink():
            plan.add(repo_dir, repo_dir, "rw", f"repo {repo}")
            repo_dir_pins(plan, repo_dir)


def _dir_mounts(plan: MountPlan, ctx: MountContext) -> None:
    plan.add(ctx.root, ctx.root, "rw", "the --dir directory")
    repo_dir_pins(plan, ctx.root)
    dot_git = ctx.root / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        # its own store: rw so commits work, with config and hooks/ pinned
        plan.add(dot_git, dot_git, "rw", "the directory's git store (commits)")
        for name in ("config", "hooks", "commondir", "info"):
            pin(plan, dot_git / name, f"git {name} (runs on the host)")
