"""What to say when a worktree name matches none: the group's worktrees, and the closest name.

Every place that takes a worktree name (worktree.delete, session.* --name, net.* --worktree,
``chtop go``, the nox sessions) answers a wrong one with ``no_worktree_message``.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from ..core.errors import UsageError


def closest_worktree(grouping: Path, name: str) -> str | None:
    """The group's worktree whose name is closest to ``name`` (a likely typo of it), or None."""
    from ..stores.quarantine import private_worktree_names  # only when there is something to say

    close = difflib.get_close_matches(name, private_worktree_names(Path(grouping)), n=1, cutoff=0.6)
    return close[0] if close else None


def no_worktree_message(grouping: Path, name: str, elsewhere: tuple[str, ...] = ()) -> str:
    """``no worktree 'dve' in /home/u/ch (worktrees: dev, gpu1:rdev); did you mean 'dev'?``;
    ``elsewhere``: the group's worktrees on other hosts, as ``HOST:NAME``."""
    from ..stores.quarantine import private_worktree_names

    names = [*private_worktree_names(Path(grouping)), *elsewhere]
    bare = {known.split(":")[-1]: known for known in reversed(names)}       # a name here wins
    close = difflib.get_close_matches(name, list(bare), n=1, cutoff=0.6)
    listed = ", ".join(names) if names else "none yet"
    said = f"no worktree {name!r} in {grouping} (worktrees: {listed})"
    if close:
        where = bare[close[0]]
        said += f"; did you mean {close[0]!r}" + (f" ({where})" if ":" in where else "") + "?"
    return said


def require_feature_worktree(grouping: Path, name: str) -> None:
    """UsageError (with the closest name, or how to make it) unless ``name`` is a feature worktree."""
    from .targets import is_feature_worktree

    if not is_feature_worktree(Path(grouping), name):
        fix = "" if closest_worktree(grouping, name) else f"; make it with:  inv worktree.create --name {name}"
        raise UsageError(no_worktree_message(grouping, name) + fix)
