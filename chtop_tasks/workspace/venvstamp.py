"""Whether a workspace's ``.venv`` is complete: a stamp its build writes last.

A venv whose build failed or was interrupted (Ctrl-C) has a ``bin/python`` and maybe an empty
site-packages; only the stamp says the build finished.  The build removes it before its first
step and writes it after its last.  The venv is the workspace's, which a sandbox may write, so
the stamp is read without following links, without blocking, and only its first bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core import agentfile
from ..core.atomic import write_atomic

STAMP_NAME = "chtop-build-complete"
STAMP_TEXT = "chtop: this venv's build finished\n"
_MAX = 256


def stamp_path(vdir: Path) -> Path:
    return Path(vdir) / STAMP_NAME


def _read_small(path: Path) -> bytes | None:
    """The first bytes of ``path`` when it is a small regular file (no link followed, no blocking)."""
    return agentfile.read_bytes(path, limit=_MAX)


def is_complete(vdir: Path) -> bool:
    """The venv's build finished: its stamp is a regular file saying so."""
    return _read_small(stamp_path(vdir)) == STAMP_TEXT.encode()


def venv_state(vdir: Path) -> str:
    """"complete", "incomplete" (there, but its build did not finish) or "missing"."""
    vdir = Path(vdir)
    if is_complete(vdir):
        return "complete"
    return "incomplete" if vdir.exists() or vdir.is_symlink() else "missing"


def clear_stamp(vdir: Path) -> None:
    """Before a build changes the venv: it is not complete until the build ends."""
    try:
        os.unlink(stamp_path(vdir))
    except FileNotFoundError:
        pass


def write_stamp(vdir: Path) -> None:
    """After the build's last step (renamed into place: never written through a planted link)."""
    write_atomic(stamp_path(vdir), STAMP_TEXT)
