"""Which sandbox target or group a path belongs to: a feature worktree of a workspace, or a --dir directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ChtopError, NotInWorkspace, UsageError, WorkspaceError
from ..core.places import (
    agent_home,
    check_dir_allowed,
    dir_agent_key,
    dir_group_policy_dir,
    login_dir,
    state_dir,
    user_config_dir,
    worktree_name_problem,
)
from .layout import Workspace, find_workspace


@dataclass(frozen=True)
class Target:
    """What a sandbox runs in: a feature worktree of a workspace, or a --dir directory."""

    kind: str                      # "worktree" or "dir"
    root: Path
    workspace: Workspace | None
    policy_dir: Path
    group_dir: Path
    agent_home: Path               # this target's own agent config, host-side (see sandbox/agent_config.py)
    note: str | None = None        # said at launch (e.g. "sandboxing the current directory")

    @property
    def name(self) -> str:
        return self.workspace.name if self.workspace else self.root.name

    @property
    def state_dir(self) -> Path:
        return self.workspace.state_dir if self.workspace else state_dir(self.group_dir)

    @property
    def config_dir(self) -> Path:
        """The agents' config dir in this target's sandboxes (CLAUDE_CONFIG_DIR): its own, read-write."""
        return self.agent_home / "config"

    @property
    def login_dir(self) -> Path:
        return login_dir(self.group_dir)


def dir_target(dir: Path, note: str | None = None) -> Target:  # noqa: A002 - --dir is the flag's name
    root = Path(dir).expanduser().resolve()
    if not root.is_dir():
        raise UsageError(f"--dir {dir}: not a directory")
    check_dir_allowed(root)
    group = user_config_dir()
    return Target("dir", root, None, dir_group_policy_dir(), group, agent_home(group, dir_agent_key(root)), note)


def target_for(cwd: Path, dir: Path | None = None) -> Target:  # noqa: A002
    """The worktree around ``cwd``, or ``dir`` (--dir mode).

    Outside any workspace with no ``dir``, the current directory is the target (as ``--dir .``,
    said in ``note``).  The toplevel is refused: it is never containerized.
    """
    if dir is not None:
        return dir_target(dir)
    try:
        ws = find_workspace(Path(cwd))
    except NotInWorkspace:
        return dir_target(cwd, f"not inside a chtop workspace: sandboxing the current directory "
                               f"{Path(cwd).resolve()} (as --dir .)")
    if ws.is_toplevel:
        raise WorkspaceError(
            f"{ws.root} is the toplevel: the sandbox runs only in a feature worktree "
            "(the toplevel is not containerized; the management commands run there).\n"
            "Make one and run from it:  inv worktree.create --name NAME && cd ../NAME"
        )
    return Target("worktree", ws.root, ws, ws.policy_dir, ws.grouping, agent_home(ws.grouping, ws.name))


def group_dir_for(cwd: Path, dir_mode: bool = False) -> Path:
    """The group of ``cwd``: its grouping dir (toplevel included), else the --dir group."""
    if dir_mode:
        return user_config_dir()
    try:
        return find_workspace(Path(cwd)).grouping
    except NotInWorkspace:
        return user_config_dir()


def is_feature_worktree(group_dir: Path, name: str) -> bool:
    """Is ``<group_dir>/<name>`` a feature worktree of the workspace there (not the toplevel)?"""
    root = Path(group_dir) / name
    if worktree_name_problem(name) or not (root / ".git").is_file():
        return False
    try:
        ws = find_workspace(root)
    except ChtopError:
        return False
    return ws.root == root.resolve() and not ws.is_toplevel


def group_and_policy_for(cwd: Path | None = None) -> tuple[Path, Path]:
    """(group dir, policy dir) for the ``net.*`` tasks: the workspace's, else the --dir group's."""
    try:
        ws = find_workspace(cwd)
        return ws.grouping, ws.policy_dir
    except NotInWorkspace:
        return user_config_dir(), dir_group_policy_dir()
