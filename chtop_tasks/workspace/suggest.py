"""What to say when a worktree name matches none: the group's worktrees, and the closest name."""

from __future__ import annotations

import difflib
from pathlib import Path


def no_worktree_message(grouping: Path, name: str) -> str:
    """``no worktree 'dve' (worktrees: dev, other); did you mean 'dev'?``"""
    from .quarantine import private_worktree_names  # only when there is something to say

    names = private_worktree_names(Path(grouping))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    listed = ", ".join(names) if names else "none yet"
    return f"no worktree {name!r} (worktrees: {listed})" + (f"; did you mean {close[0]!r}?" if close else "")
