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

``inv TASK --flag ...`` inside a workspace first tries the fast start (``faststart.py``): the same
pinned ``tasks.py`` runs, but only its prologue (the checkout first on ``sys.path``, private
bytecode), then the checkout's ``faststart`` runs the one task without importing invoke; a command
line it does not take on (read faststart.py) goes to invoke's program as before.

The ``inv`` script ``./bootstrap`` writes (``invscript.py``) starts Python without its site step
(``python -S``) and calls ``main_without_site``: site's directories go on ``sys.path`` as site would
put them, but their ``.pth`` files (an editable install's import hook, a machine's own hooks: 40 ms of
a 70 ms start on these VMs) are run only when invoke's program is needed (``complete_site``); a fast
or warm start runs without them.
"""

import os
import sys

# Set for the tasks.py it pins (which takes it out of the environment again): see tasks.py.
PINNED_ENV = "CHTOP_INV_ROOT"
# The name the fast start runs tasks.py under: it then stops before importing the collection.
PROLOGUE = "chtop_prologue"


def pinned_search_root(cwd: str) -> str | None:
    """The checkout root around ``cwd``; None outside a chtop workspace (a broken one raises)."""
    from .errors import NotInWorkspace
    from .workspace.rootfind import find_root_path  # it alone: what this imports, the task imports again

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


# the site dirs whose .pth files add_site_dirs passed over, in site's order: complete_site runs them
PTH_DIRS: list[str] = []


def add_site_dirs() -> None:
    """The directories site would add (the venv's or the base's site-packages, the user's), without
    running their ``.pth`` files: what ``site.main`` does but for those, under ``python -S``."""
    import site

    def pass_over(sitedir, name, known_paths):
        if sitedir not in PTH_DIRS:
            PTH_DIRS.append(sitedir)
        return known_paths

    run_pth, site.addpackage = site.addpackage, pass_over
    try:
        known = site.venv(site.removeduppaths())
        if site.ENABLE_USER_SITE is None:
            site.ENABLE_USER_SITE = site.check_enableusersite()
        site.addsitepackages(site.addusersitepackages(known))
    finally:
        site.addpackage = run_pth


def complete_site() -> None:
    """The rest of site's step after ``add_site_dirs``, before invoke's program, which then runs as
    in any other start: each site dir's ``.pth`` files, once, in site's order; ``exit`` and the other
    builtins site defines; ``sitecustomize`` and ``usercustomize``."""
    if not sys.flags.no_site:
        return
    import site

    for sitedir in PTH_DIRS:
        site.addsitedir(sitedir)
    PTH_DIRS.clear()
    site.setquit()
    site.setcopyright()
    site.sethelper()
    if not sys.flags.isolated:
        site.enablerlcompleter()
    site.execsitecustomize()
    if site.ENABLE_USER_SITE:
        site.execusercustomize()


def main_without_site(package_parent: str) -> None:
    """``inv`` from the script ``invscript.py`` writes (``python -S``), which put ``package_parent``
    (where this chtop_tasks lives: an editable install's checkout) on ``sys.path`` to import this: it
    goes after site's directories, as an editable install's import hook comes after them."""
    if sys.path[-1] == package_parent:
        sys.path.pop()
    add_site_dirs()
    if package_parent not in sys.path:     # (where PYTHONPATH names it, it stays where that put it)
        sys.path.append(package_parent)
    main()


def main(found_root: str | None = None) -> None:
    """``inv``.  ``found_root``: the checkout root, found already from this cwd (the warm launcher's
    child: its client found it, and the server checked it is its own)."""
    from .errors import ChtopError

    try:
        root = found_root or pinned_search_root(os.getcwd())
    except ChtopError as exc:
        print(f"inv: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    if root is None and sys.argv[1:] and not sys.argv[1].startswith("-") and not invoke_tasks_above(os.getcwd()):
        say_not_in_workspace(os.getcwd())
    if root is not None:
        one_task = bool(sys.argv[1:]) and not sys.argv[1].startswith("-")
        if one_task:
            warm_start(root)
        os.environ[PINNED_ENV] = root
        if one_task:
            fast_start(root, sys.argv[1:])
            os.environ[PINNED_ENV] = root     # the prologue took it; invoke's load of tasks.py checks it again
    complete_site()
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
    from .errors import NotInWorkspace
    from .workspace.rootfind import find_root_path

    try:
        find_root_path(cwd)
    except NotInWorkspace as exc:
        print(f"inv: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def is_this_checkout(root: str) -> bool:
    """Whether the chtop_tasks this script imported is the one in ``root`` (an install of that checkout)."""
    return os.path.realpath(os.path.dirname(os.path.dirname(__file__))) == os.path.realpath(root)


def fast_start(root: str, argv: list[str]) -> None:
    """Run the one task ``argv`` names with the checkout's own code and exit; return when invoke must."""
    if not is_this_checkout(root):
        forget_chtop_modules()
    run_prologue(os.path.join(root, "tasks.py"))
    try:
        from chtop_tasks import faststart  # the checkout's own: its prologue put it first on sys.path
    except ImportError:
        return                                # a checkout from before the fast start
    if faststart.run(argv, project=root):
        sys.exit(0)
    hint = getattr(faststart, "name_given_as_a_word", None)
    message = hint(argv) if hint is not None else None
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    faststart.drop_light_modules()


def warm_start(root: str) -> None:
    """A launch task on a terminal, or a daily git task of a feature worktree, goes to the checkout's
    warm launcher (``warmstart/``) and exits with its status; return when it runs here (no launcher
    yet: one is started for the next)."""
    from .warmstart import wire

    if not wire.wanted(sys.argv[1:], os.environ, root):
        return
    from .warmstart.client import launched

    status = launched(root, sys.argv)
    if status is not None:
        sys.exit(status)


def run_prologue(path: str) -> None:
    """Run ``tasks.py`` as ``chtop_prologue`` (it stops before importing the collection), as
    ``runpy.run_path`` would run it (compiled from its source, ``__file__`` set) without importing
    runpy and pkgutil (about 1 ms)."""
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec", dont_inherit=True)
    exec(code, {"__name__": PROLOGUE, "__file__": path, "__builtins__": __builtins__})


if __name__ == "__main__":
    main()
