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
imports that checkout's own ``chtop_tasks`` (not the installed one); when the installed one is that
checkout, they are kept (one import, not two).

``inv TASK --flag ...`` inside a workspace first tries the light task path (``faststart.py``): the
same pinned ``tasks.py`` runs, but only its prologue (the checkout first on ``sys.path``, private
bytecode), then the checkout's ``faststart`` runs the one task without importing invoke; a command
line it does not take on (read faststart.py) goes to invoke's program as before.
"""

import os
import sys

# Set for the tasks.py it pins (which takes it out of the environment again): see tasks.py.
PINNED_ENV = "CHTOP_INV_ROOT"
# The name the light task path runs tasks.py under: it then stops before importing the collection.
PROLOGUE = "chtop_prologue"


def pinned_search_root(cwd: str) -> str | None:
    """The checkout root around ``cwd``; None outside a chtop workspace (a broken one raises)."""
    from ..core.errors import NotInWorkspace
    from ..workspace.rootfind import find_root_path  # it alone: the checkout's own chtop is loaded after

    try:
        return find_root_path(cwd)
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
    """``inv``."""
    from ..core.errors import ChtopError

    try:
        root = pinned_search_root(os.getcwd())
    except ChtopError as exc:
        print(f"inv: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    if root is None and sys.argv[1:] and not sys.argv[1].startswith("-") and not invoke_tasks_above(os.getcwd()):
        say_not_in_workspace(os.getcwd())
    if root is not None:
        os.environ[PINNED_ENV] = root
        if sys.argv[1:] and not sys.argv[1].startswith("-"):
            fast_start(root, sys.argv[1:])
            os.environ[PINNED_ENV] = root     # the prologue took it; invoke's load of tasks.py checks it again
    forget_chtop_modules()
    program(root).run()


def invoke_tasks_above(cwd: str) -> bool:
    """Whether invoke would find a collection (``tasks.py`` or a ``tasks`` package) here or above."""
    path = cwd
    while True:
        if os.path.isfile(os.path.join(path, "tasks.py")) or os.path.isfile(os.path.join(path, "tasks", "__init__.py")):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def say_not_in_workspace(cwd: str) -> None:
    """Outside any workspace (and any invoke project), what to do instead of invoke's
    "Can't find any collection named 'tasks'!"; exits 2."""
    from ..core.errors import NotInWorkspace
    from ..workspace.rootfind import find_root_path

    try:
        find_root_path(cwd)
    except NotInWorkspace as exc:
        print(f"inv: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def is_this_checkout(root: str) -> bool:
    """Whether the chtop_tasks this script imported is the one in ``root`` (an install of that checkout)."""
    return os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))) == os.path.realpath(root)


def fast_start(root: str, argv: list[str]) -> None:
    """Run the one task ``argv`` names with the checkout's own code and exit; return when invoke must."""
    if not is_this_checkout(root):
        forget_chtop_modules()
    run_prologue(os.path.join(root, "tasks.py"))
    try:
        from chtop_tasks.cli import faststart  # the checkout's own: its prologue put it first on sys.path
    except ImportError:
        return                                # a checkout from before the light task path
    if faststart.run(argv, project=root):
        sys.exit(0)
    hint = getattr(faststart, "name_given_as_a_word", None)
    message = hint(argv) if hint is not None else None
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    faststart.drop_light_modules()


def run_prologue(path: str) -> None:
    """Run ``tasks.py`` as ``chtop_prologue``: it stops before importing the collection."""
    import runpy

    runpy.run_path(path, run_name=PROLOGUE)


if __name__ == "__main__":
    main()
