"""Whether the command a sandbox is to run, as the host finds it, lies inside what the sandbox sees.

The sandbox runs the host's own binaries, but sees only the host's /usr, /etc and the paths of
fs-allow.txt.  A CLI installed elsewhere (a ``uv tool`` whose interpreter lives under
``~/.local/share/uv/python``, a script in ``~/bin``) is found by the host and then fails inside with
"not found" or "bad interpreter".  The launch says so first, naming the file and the fix.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ..core import agentfile
from .mounts import MountPlan

HIDDEN = (None, "tmpfs")        # not mounted, or under the scratch home
MAX_INTERPRETERS = 3            # a script run by a script run by ...: followed this deep


def files_run(word: str, search_path: str | None) -> list[Path]:
    """The files ``word`` runs through, as the host finds it on ``search_path``: the command, the file
    its links lead to, and the interpreter a ``#!`` line names (``/usr/bin/env NAME``: NAME looked up),
    in turn.  Empty when the host does not find ``word``."""
    found = shutil.which(word, path=search_path)
    chain: list[Path] = []
    for _ in range(MAX_INTERPRETERS + 1):
        if found is None:
            break
        path = Path(os.path.abspath(found))
        real = Path(os.path.realpath(path))
        # the link itself must be seen too, unless a folder on its way is a link (/bin -> usr/bin: the
        # sandbox's own root has that link)
        linked_folder = os.path.realpath(path.parent) != str(path.parent)
        chain += [real] if path == real or linked_folder else [path, real]
        found = interpreter_of(real, search_path)
    return chain


def interpreter_of(script: Path, search_path: str | None) -> str | None:
    """The interpreter ``script``'s ``#!`` line names, looked up as the kernel and ``env`` would; None
    for a binary or an unreadable file."""
    first = first_line(script)
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return shutil.which(names[0], path=search_path) if names else None
    return words[0]


def first_line(path: Path) -> bytes:
    """The first line of ``path`` when it is a regular file; read without following a link or waiting
    on a FIFO (the command may be a file in the agent's worktree)."""
    try:
        fd = os.open(path, agentfile.OPEN_FLAGS)
    except OSError:
        return b""
    try:
        return os.read(fd, 256).split(b"\n", 1)[0] if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def unseen_note(word: str, plan: MountPlan, search_path: str | None) -> str | None:
    """A warning when a file ``word`` runs through is not inside the sandbox, else None."""
    hidden = [path for path in files_run(word, search_path) if plan.effective_mode(path) in HIDDEN]
    if not hidden:
        return None
    path = hidden[0]
    home = Path.home()
    parent = path.parent
    shown = f"~/{parent.relative_to(home)}" if parent.is_relative_to(home) else str(parent)
    return (f"{word}: {path} is not inside the sandbox, so {word} will not run there (the sandbox sees the "
            f"host's /usr, /etc and the paths of sandbox/fs-allow.txt). Install it under /usr (e.g. "
            f"/usr/local), or add a line `ro {shown}` (or a folder above it) to sandbox/fs-allow.txt")
