"""Where the checkout around a path is: the one question ``inv`` answers before it knows which
checkout's chtop to run (``chtop_tasks/cli/inv.py``).

It imports nothing of chtop but ``errors``: ``inv`` asks it with the installed chtop, then forgets
every chtop module and runs the checkout's own, so the question is answered before any workspace
model is loaded (``layout`` re-exports these names).  Reads only directory entries, as ``layout`` does.

It answers with ``os.path`` (``find_root_path``); ``find_root`` and ``toplevel_in_grouping`` give
the same answers as Paths.
"""

import os
from typing import TYPE_CHECKING

from ..core.errors import ManifestError, NotInWorkspace, WorkspaceError

if TYPE_CHECKING:
    from pathlib import Path

MANIFEST_NAME = "git_repositories.toml"
MARKERS = ("tasks.py", MANIFEST_NAME)


def is_checkout_root(path) -> bool:
    return os.path.exists(os.path.join(path, ".git")) and all(os.path.isfile(os.path.join(path, m)) for m in MARKERS)


def lacks_only_the_manifest(path) -> bool:
    """A checkout of chtop (``.git``, ``tasks.py``, ``chtop_tasks/``) whose manifest is gone."""
    return (os.path.exists(os.path.join(path, ".git")) and os.path.isfile(os.path.join(path, "tasks.py"))
            and os.path.isdir(os.path.join(path, "chtop_tasks"))
            and not os.path.exists(os.path.join(path, MANIFEST_NAME)))


def find_root(start) -> "Path":
    """``find_root_path`` as a Path."""
    from pathlib import Path

    return Path(find_root_path(start))


def find_root_path(start) -> str:
    """The outermost enclosing dir that is a checkout of the container repo.

    The outermost, not the nearest: below a checkout root everything may be a repo dir the agent
    writes, where it can dress a subdirectory up as a checkout (its own ``.git``, ``tasks.py`` and
    manifest) for chtop to stop at."""
    start = os.path.realpath(start)
    found = None
    for candidate in self_and_parents(start):
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
    top = toplevel_path_in_grouping(start)
    if top is not None:
        return top          # the grouping dir itself: its toplevel
    raise NotInWorkspace(
        f"{start} is not inside a chtop workspace (no parent has {' and '.join(MARKERS)} and .git).\n"
        "Run this from the toplevel, a feature worktree, or a repo inside one.\n" + where_your_group_is()
    )


def where_your_group_is() -> str:
    """Where the user's group is, from ``group =`` in their chtop config; else how to name it there."""
    from ..core.errors import ChtopError
    from ..core.places import read_user_config

    try:
        path, data = read_user_config()
    except (ChtopError, OSError) as exc:
        return f"(Your chtop config cannot be read: {exc})"
    group = data.get("group")
    if not isinstance(group, str) or not group.strip():
        return (f"To have `chtop go NAME` take you into a worktree from anywhere, name your grouping "
                f'dir in {path}, e.g. the line:  group = "~/ch"')
    grouping = os.path.expanduser(group)
    top = toplevel_path_in_grouping(grouping)
    if top is None:
        return f"Your group ({path}: group = {group!r}) has no chtop toplevel in {grouping}."
    return f"Your group ({path}: group = {group!r}):  cd {top}    or:  chtop go NAME"


def self_and_parents(path: str):
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def toplevel_in_grouping(path) -> "Path | None":
    """``toplevel_path_in_grouping`` as a Path."""
    from pathlib import Path

    top = toplevel_path_in_grouping(os.fspath(path))
    return None if top is None else Path(top)


def toplevel_path_in_grouping(path: str) -> str | None:
    """When ``path`` is a grouping dir: its toplevel (the one child that is a checkout of the
    container repo with its own ``.git`` directory, in a grouping dir chtop accepts), else None."""
    try:
        children = [os.path.join(path, name) for name in sorted(os.listdir(path))]
    except OSError:
        return None
    tops = [c for c in children if os.path.isdir(c) and not os.path.islink(c)
            and os.path.isdir(os.path.join(c, ".git")) and not os.path.islink(os.path.join(c, ".git"))
            and is_checkout_root(c)]
    if len(tops) != 1:
        return None
    try:
        check_grouping(path, tops[0])
    except WorkspaceError:
        return None
    return tops[0]


def check_grouping(grouping, toplevel) -> None:
    home = os.path.realpath(os.environ.get("HOME", "/nonexistent"))
    if os.fspath(grouping) == home:
        raise WorkspaceError(
            f"the toplevel {toplevel} sits directly in $HOME; its sibling worktrees would land in $HOME.\n"
            f"Move it into a grouping dir, e.g.: mkdir ~/ch && mv {toplevel} ~/ch/"
        )
