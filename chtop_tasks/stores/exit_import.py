"""``python -m chtop_tasks.stores.exit_import WORKTREE``: the import of a worktree's branch into
the shared stores once its sandbox has exited, run by ``sbox.run``'s waiting shell when the refs
show that the proxy daemon has not done it already (a failure is a warning: the next git task
retries it).  It lives here, not in ``sandbox``, so starting it loads only the workspace code."""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import ChtopError
from ..core.term import warn
from ..workspace.layout import find_workspace
from .quarantine import sync_worktree


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m chtop_tasks.stores.exit_import WORKTREE_ROOT", file=sys.stderr)
        return 2
    try:
        ws = find_workspace(Path(argv[0]))
        sync_worktree(ws, convert=False, refresh=False, walk=False)
    except ChtopError as exc:
        warn(f"importing the branch of {argv[0]} after its sandbox exited failed: {exc}\n"
             "The next `inv git.status` retries it.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
