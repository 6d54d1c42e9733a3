"""A TOML file's parsed table, kept so that a task does not import ``tomllib`` to read it again.

Importing ``tomllib`` (with ``datetime`` and the regexes its parser compiles) is 3.5-6 ms of every
git task and launch on this project's 2-core machines; parsing the manifest or the agent registry
itself, 0.3 ms.  The table is kept marshalled in ``<group>/.chtop/parsed/``, a dir no sandbox
sees, one file per text, named and keyed by the SHA-256 of the text: a changed text (an edit, a
checkout, an agent's write in its worktree) misses and is parsed again, so the table is always the
one of the text just read; the same text anywhere (a new worktree's manifest, the toplevel's) is
parsed once.  A file per text an edit left behind stays, about 1 KB each.  A table marshal cannot
hold (a TOML date) is not kept.
Reads take no link and no file but a regular one (``agentfile``); writes go through a fresh file
renamed in place.
"""

from __future__ import annotations

import marshal
from hashlib import sha256
from pathlib import Path

from . import agentfile
from .atomic import write_private_file

CACHE_DIR_NAME = "parsed"
KEY_BYTES = 32


def parsed_table(text: str, state: Path | None, error) -> dict:
    """``text`` (a file's) as a table: the one kept for this very text in the group's
    state dir ``state`` (None: none is kept), else parsed by ``tomllib`` and kept.  Invalid TOML
    raises ``error(exc)``."""
    key = sha256(text.encode()).digest()
    path = cache_file(key, state)
    table = kept_table(path, key) if path is not None else None
    if table is not None:
        return table
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(exc) from exc
    if path is not None:
        keep_table(path, key, table)
    return table


def cache_file(key: bytes, state: Path | None) -> Path | None:
    """Where the table of the text whose digest is ``key`` is kept: ``<state>/parsed/<digest>``, or
    None (no state dir of a group there)."""
    if state is None or not state.is_dir() or state.is_symlink():
        return None
    return state / CACHE_DIR_NAME / key.hex()[:32]


def kept_table(path: Path, key: bytes) -> dict | None:
    """The table kept in ``path`` for the text whose digest is ``key``, or None (none kept, or kept
    for another text)."""
    data = agentfile.read_bytes(path)
    if data is None or data[:KEY_BYTES] != key:
        return None
    try:
        table = marshal.loads(data[KEY_BYTES:])
    except (EOFError, ValueError, TypeError):
        return None
    return table if isinstance(table, dict) else None


def keep_table(path: Path, key: bytes, table: dict) -> None:
    """Keep ``table`` in ``path`` for the next read of the text whose digest is ``key`` (best effort)."""
    try:
        write_private_file(path, key + marshal.dumps(table))
    except (OSError, ValueError):
        pass            # a read-only group, a table marshal cannot hold: parsed again next time
