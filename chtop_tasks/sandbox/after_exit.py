"""``python -m chtop_tasks.sandbox.after_exit WORKTREE``: what ``sbox.run``'s waiting shell runs
once podman has exited — the import of the worktree's branch into the shared stores (a failure is
a warning: the next git task retries it)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ChtopError
from ..term import warn
from ..workspace.layout import find_workspace
from ..workspace.quarantine import sync_worktree


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m chtop_tasks.sandbox.after_exit WORKTREE_ROOT", file=sys.stderr)
        return 2
    try:
        ws = find_workspace(Path(argv[0]))
        sync_worktree(ws, convert=False, refresh=False)
    except ChtopError as exc:
        warn(f"importing the branch of {argv[0]} after its sandbox exited failed: {exc}\n"
             "The next `inv git.status` there retries it.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
