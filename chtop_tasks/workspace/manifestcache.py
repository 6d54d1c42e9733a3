"""A manifest's parsed table, kept so that a task does not import ``tomllib`` to read it again.

Importing ``tomllib`` (with ``datetime`` and the regexes its parser compiles) is 3.5-6 ms of every
git task on this project's 2-core machines; parsing the manifest itself, 0.3 ms.  The table is kept
marshalled in ``<group>/.chtop/parsed/``, a dir no sandbox sees, one file per manifest path,
keyed by the SHA-256 of the manifest's text: a changed text (an edit, a checkout, an agent's write
in its worktree) misses and is parsed again, so the table is always the one of the text just read.
Only a manifest of a group (its dir's parent has chtop's state dir) is kept; a table marshal cannot
hold (a TOML date) is not kept.  Reads take no link and no file but a regular one (``agentfile``);
writes go through a fresh file renamed in place.
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path

from .. import agentfile
from ..atomic import write_atomic_at
from ..digest import sha256
from ..places import STATE_DIR_NAME

CACHE_DIR_NAME = "parsed"
KEY_BYTES = 32


def cache_file(manifest: Path) -> Path | None:
    """Where ``manifest``'s table is kept: ``<group>/.chtop/parsed/<digest of its path>``, or None
    outside a group."""
    state = manifest.parent.parent / STATE_DIR_NAME
    if not state.is_dir() or state.is_symlink():
        return None
    return state / CACHE_DIR_NAME / sha256(str(manifest).encode()).hexdigest()[:32]


def kept_table(manifest: Path, text: str) -> dict | None:
    """The table kept for ``text`` at ``manifest``, or None (none kept, or kept for another text)."""
    path = cache_file(manifest)
    data = None if path is None else agentfile.read_bytes(path)
    if data is None or data[:KEY_BYTES] != sha256(text.encode()).digest():
        return None
    try:
        table = marshal.loads(data[KEY_BYTES:])
    except (EOFError, ValueError, TypeError):
        return None
    return table if isinstance(table, dict) else None


def keep_table(manifest: Path, text: str, table: dict) -> None:
    """Keep ``table``, parsed from ``text``, for the next read of ``manifest`` (best effort)."""
    path = cache_file(manifest)
    if path is None:
        return
    try:
        data = sha256(text.encode()).digest() + marshal.dumps(table)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            write_atomic_at(fd, path.name, data)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        pass            # a read-only group, a table marshal cannot hold: parsed again next time
