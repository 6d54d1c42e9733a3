"""Where the checkout around a path is: the one question ``inv`` answers before it knows which
checkout's chtop to run (``chtop_tasks/inv.py``).

It imports nothing of chtop but ``errors``: ``inv`` asks it with the installed chtop, then forgets
every chtop module and runs the checkout's own, so whatever this module imports is imported twice
(``layout``, which re-exports these names, brings ``places``, ``manifest`` and ``agentfile``: about
10 ms of every task in a feature worktree).  Reads only directory entries, as ``layout`` does.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ManifestError, NotInWorkspace, WorkspaceError

MANIFEST_NAME = "git_repositories.toml"
MARKERS = ("tasks.py", MANIFEST_NAME)


def is_checkout_root(path: Path) -> bool:
    return (path / ".git").exists() and all((path / m).is_file() for m in MARKERS)


def lacks_only_the_manifest(path: Path) -> bool:
    """A checkout of chtop (``.git``, ``tasks.py``, ``chtop_tasks/``) whose manifest is gone."""
    return ((path / ".git").exists() and (path / "tasks.py").is_file() and (path / "chtop_tasks").is_dir()
            and not (path / MANIFEST_NAME).exists())


def find_root(start: Path) -> Path:
    """The outermost enclosing dir that is a checkout of the container repo.

    The outermost, not the nearest: below a checkout root everything may be a repo dir the agent
    writes, where it can dress a subdirectory up as a checkout (its own ``.git``, ``tasks.py`` and
    manifest) for chtop to stop at."""
    start = Path(start).resolve()
    found = None
    for candidate in (start, *start.parents):
        if is_checkout_root(candidate) or lacks_only_the_manifest(candidate):
            found = candidate
    if found is not None and not is_checkout_root(found):
        raise ManifestError(
            f"{found} is a chtop checkout without its {MANIFEST_NAME}: the manifest lists the "
            f"workspace's repos.\nRestore it (git -C {found} checkout -- {MANIFEST_NAME}) or write one "
            "(README, 'The manifest')."
        )
    if found is not None:
        return found
    top = toplevel_in_grouping(start)
    if top is not None:
        return top          # the grouping dir itself: its toplevel
    raise NotInWorkspace(
        f"{start} is not inside a chtop workspace (no parent has {' and '.join(MARKERS)} and .git).\n"
        "Run this from the toplevel, a feature worktree, or a repo inside one."
    )


def toplevel_in_grouping(path: Path) -> Path | None:
    """When ``path`` is a grouping dir: its toplevel (the one child that is a checkout of the
    container repo with its own ``.git`` directory, in a grouping dir chtop accepts), else None."""
    try:
        children = sorted(path.iterdir())
    except OSError:
        return None
    tops = [c for c in children if c.is_dir() and not c.is_symlink() and (c / ".git").is_dir()
            and not (c / ".git").is_symlink() and is_checkout_root(c)]
    if len(tops) != 1:
        return None
    try:
        check_grouping(path, tops[0])
    except WorkspaceError:
        return None
    return tops[0]


def check_grouping(grouping: Path, toplevel: Path) -> None:
    home = Path(os.environ.get("HOME", "/nonexistent")).resolve()
    if grouping == home:
        raise WorkspaceError(
            f"the toplevel {toplevel} sits directly in $HOME; its sibling worktrees would land in $HOME.\n"
            f"Move it into a grouping dir, e.g.: mkdir ~/ch && mv {toplevel} ~/ch/"
        )
