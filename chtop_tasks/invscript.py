"""The ``chtop-inv`` script ``./bootstrap`` writes (``inv`` and ``invoke`` link to it): Python started
without its site step.

pip's console script starts Python as usual, and site runs every ``.pth`` file of site-packages
first: an editable install's import hook (chtop's own, 20 ms: it imports pathlib and
importlib.resources), a machine's own hooks (on these VMs a CA hook that imports certifi, 18 ms).
On these machines that is 50 of the 70 ms a bare ``python3 -c pass`` takes, before ``inv`` does
anything.  This script runs ``python -S`` and puts chtop's package dir on ``sys.path`` itself;
``inv.main_without_site`` adds site's directories without their ``.pth`` files, and runs site's whole
step only before invoke's program (``--list``, ``--help``, completion, any command line the fast
start leaves to invoke), which so sees the start it always saw.  A task on the fast or warm start
runs without the ``.pth`` files' hooks (and without ``sitecustomize``): chtop's tasks import only
the standard library and plain packages, and every Python they start (git hooks, pip, the sandbox's
tools) runs its own site as usual.

pip writes its own ``chtop-inv`` at every (re)install of chtop; ``./bootstrap`` writes this one over
it each time, after pip.  Either works; this one starts faster.

    python -m chtop_tasks.invscript SCRIPTS_DIR
"""

import os
import sys
from pathlib import Path

NAME = "chtop-inv"
# Linux reads at most this much of a ``#!`` line (BINPRM_BUF_SIZE, 256 since 5.1; 128 before)
SHEBANG_LIMIT = 127


def shebang(python: str) -> str:
    """``#!PYTHON -S``; for a path too long for the kernel or with a space, pip's ``/bin/sh``
    trampoline (the same file read as sh, then as Python)."""
    if len(python) + len("#! -S") <= SHEBANG_LIMIT and " " not in python:
        return f"#!{python} -S\n"
    return f"#!/bin/sh\n'''exec' \"{python}\" -S \"$0\" \"$@\"\n' '''\n"


def script_text(python: str, package_parent: str) -> str:
    """The script: ``python -S``, ``package_parent`` (the dir ``chtop_tasks`` is in) on ``sys.path``,
    then ``inv.main_without_site``."""
    return (f"{shebang(python)}"
            "# chtop's inv, written by ./bootstrap (chtop_tasks/invscript.py): Python without its site\n"
            "# step, which inv runs itself only when invoke's program is needed.\n"
            "import sys\n"
            f"sys.path.append({package_parent!r})\n"
            "try:\n"
            "    from chtop_tasks.inv import main_without_site\n"
            "except ImportError:  # a chtop_tasks from before this script, first on PYTHONPATH: site, then its main\n"
            "    import site\n"
            "    site.main()\n"
            "    from chtop_tasks.inv import main\n"
            "    sys.exit(main())\n"
            f"sys.exit(main_without_site({package_parent!r}))\n")


def package_parent() -> str:
    """The dir this ``chtop_tasks`` is in: an editable install's checkout, or site-packages."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def write(scripts_dir: str, python: str = sys.executable) -> str:
    """Write the script into ``scripts_dir`` (over pip's), by a rename: never half a script, never
    through a link planted there.  Returns its path."""
    from .atomic import write_atomic

    path = os.path.join(scripts_dir, NAME)
    write_atomic(Path(path), script_text(python, package_parent()), mode=0o755)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: python -m chtop_tasks.invscript SCRIPTS_DIR  (the dir of this Python's scripts, "
              "where pip put chtop-inv)", file=sys.stderr)
        return 2
    print(f"wrote {write(argv[0])}: chtop's inv, started without site's .pth files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
