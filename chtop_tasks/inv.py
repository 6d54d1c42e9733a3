"""chtop's ``inv``: invoke's own program, with its search for ``tasks.py`` pinned to the checkout root.

invoke looks for ``tasks.py`` from the current directory upwards, and every repo dir of a worktree
(each of its subdirectories too) is writable from inside the sandbox: a ``tasks.py`` the agent
planted there would run first, as you.  So inside a chtop workspace this ``inv`` starts the search
at the checkout root chtop's own resolver finds (``layout.find_root``: the outermost chtop checkout
above the current directory, never one the agent dressed up below it), as ``--search-root`` would.
Everything else is invoke's (``--list``, ``--help``, completion, ``--version``, exit codes); an
explicit ``--search-root`` is yours; outside a workspace it is invoke as usual.

``./bootstrap`` links ``inv`` and ``invoke`` to this (the ``chtop-inv`` console script).  The
resolver's modules are dropped again before invoke loads the checkout's ``tasks.py``, which
imports that checkout's own ``chtop_tasks`` (not the installed one).
"""

from __future__ import annotations

import os
import sys

# Set for the tasks.py it pins (which takes it out of the environment again): see tasks.py.
PINNED_ENV = "CHTOP_INV_ROOT"


def pinned_search_root(cwd: str) -> str | None:
    """The checkout root around ``cwd``; None outside a chtop workspace (a broken one raises)."""
    from .errors import NotInWorkspace
    from .workspace.layout import find_root

    try:
        return str(find_root(cwd))
    except NotInWorkspace:
        return None


def forget_chtop_modules() -> None:
    for name in [n for n in sys.modules if n == "chtop_tasks" or n.startswith("chtop_tasks.")]:
        del sys.modules[name]


def program(search_root: str | None):
    from invoke import FilesystemLoader, Program, __version__

    class PinnedLoader(FilesystemLoader):
        def __init__(self, start=None, **kwargs):
            super().__init__(start=start or search_root, **kwargs)

    return Program(name="Invoke", binary="inv[oke]", binary_names=["invoke", "inv"], version=__version__,
                   loader_class=PinnedLoader)


def main() -> None:
    from .errors import ChtopError

    try:
        root = pinned_search_root(os.getcwd())
    except ChtopError as exc:
        print(f"inv: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    if root is not None:
        os.environ[PINNED_ENV] = root
    forget_chtop_modules()
    program(root).run()


if __name__ == "__main__":
    main()
