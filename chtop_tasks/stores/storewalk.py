"""The walk of a private store for planted files, which re-reads only the directories that changed.

Host git opens a private store's files by itself, with plain ``open()``: a FIFO the agent made there
would block it, a link would make it read or write the file the link names.  So before host git
runs there, every entry of the store is checked to be a regular file or a directory.  A worktree's
store keeps every object its agent wrote loose (its ``gc.auto`` is 0): hundreds of commits make
256 object directories of thousands of files, and every task walked all of them.

A directory's entries change only together with its ctime, which no process can set: adding,
removing or renaming an entry (a file made a FIFO, a directory made a link) changes it.  So the walk
keeps, per store, each directory it found clean -- its inode, its ctime, its subdirectories -- and
the next walk re-reads a directory only when its inode or ctime moved; the others cost one
``lstat``.  A directory whose ctime is less than ``SETTLE_NS`` before the walk began is not kept (a
change in the same clock tick as the read would not move a coarse ctime), as git treats a racily
clean index.  What is kept lives in ``<group>/.chtop/walked/<worktree>/``, which no sandbox sees; a
missing or damaged record is a full walk.
"""

from __future__ import annotations

import marshal
import os
import stat
import time
from pathlib import Path

from ..core import agentfile
from ..core.atomic import write_private_file
from ..core.places import STATE_DIR_NAME

SETTLE_NS = 2_000_000_000
UNREADABLE = "an unreadable directory"     # what a walk finds where a directory's mode keeps it out
WALKED_DIR_NAME = "walked"


def walk_record_path(store: Path) -> Path | None:
    """``<group>/.chtop/walked/<worktree>/<store name>`` for a private store
    ``<group>/.chtop/git/<worktree>/<store name>``; None for any other dir (walked whole)."""
    worktree_dir = store.parent
    state = worktree_dir.parent.parent
    if worktree_dir.parent.name != "git" or state.name != STATE_DIR_NAME:
        return None
    return worktree_walk_records(state, worktree_dir.name) / store.name


def worktree_walk_records(state: Path, worktree: str) -> Path:
    """Where the walks of worktree ``worktree``'s stores are recorded (``state``: the group's state dir)."""
    return state / WALKED_DIR_NAME / worktree


def planted_entry(store: Path) -> tuple[Path, str] | None:
    """The first entry under ``store`` that is neither a regular file nor a directory (a FIFO, a
    socket, a device, a link), and what it is; None when there is none."""
    record_path = walk_record_path(store)
    known = read_walk_record(record_path) if record_path is not None else {}
    began = time.time_ns()
    clean: dict[str, tuple[int, int, tuple[str, ...]]] = {}
    try:
        top = os.lstat(store)
    except OSError:
        return None
    if not stat.S_ISDIR(top.st_mode):
        what = agentfile.non_regular(store)
        return (Path(store), what) if what else None
    pending = [("", top)]
    while pending:
        rel, st = pending.pop()
        path = f"{store}/{rel}" if rel else str(store)
        seen = known.get(rel)
        if isinstance(seen, tuple) and len(seen) == 3 and seen[:2] == (st.st_ino, st.st_ctime_ns):
            subdirs = seen[2]
        else:
            planted, subdirs = read_dir(path)
            if planted is not None:
                return planted
        if st.st_ctime_ns < began - SETTLE_NS:
            clean[rel] = (st.st_ino, st.st_ctime_ns, subdirs)
        if subdirs:
            planted = stat_subdirs(path, rel, subdirs, pending)
            if planted is not None:
                return planted
    if record_path is not None and clean != known:
        write_walk_record(record_path, clean)
    return None


def stat_subdirs(path: str, rel: str, names: tuple[str, ...], pending: list) -> tuple[Path, str] | None:
    """Each of ``path``'s subdirectories ``names``, ``lstat``ed through one descriptor of ``path`` (a
    lookup of one name each, not of the whole path: object directories are most of a store's), onto
    ``pending`` with its stat; the first that is no longer a directory and is no regular file either
    (a directory made a link, say), and what it is.  One removed meanwhile is passed over."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except PermissionError:
        return Path(path), UNREADABLE
    except OSError:
        what = agentfile.non_regular(path)             # made a link since its own lstat, or removed
        return (Path(path), what) if what and what != "a directory" else None
    try:
        for name in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except PermissionError:
                return Path(path), UNREADABLE          # its search bit taken off
            except OSError:
                continue                               # removed meanwhile
            if stat.S_ISDIR(st.st_mode):
                pending.append((f"{rel}/{name}" if rel else name, st))
                continue
            what = agentfile.non_regular(f"{path}/{name}")
            if what:
                return Path(f"{path}/{name}"), what
    finally:
        os.close(fd)
    return None


def read_dir(path: str) -> tuple[tuple[Path, str] | None, tuple[str, ...]]:
    """A directory's entries read once: the first that is no regular file or directory (and what it
    is), else None; and the names of its subdirectories.  One removed meanwhile is passed over; one
    that cannot be read (its mode changed inside) is itself the finding: git opens a file in it by
    name all the same, FIFO or not, where it may still search it."""
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except PermissionError:
        return (Path(path), UNREADABLE), ()
    except OSError:
        return None, ()
    subdirs = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            subdirs.append(entry.name)
        elif not entry.is_file(follow_symlinks=False):
            return (Path(entry.path), agentfile.non_regular(entry.path) or "not a regular file"), ()
    return None, tuple(subdirs)


def read_walk_record(path: Path) -> dict:
    data = agentfile.read_bytes(path, limit=16 << 20)
    if data is None:
        return {}
    try:
        record = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return {}
    return record if isinstance(record, dict) else {}


def write_walk_record(path: Path, record: dict) -> None:
    """Best effort: a record not written is a full walk next time."""
    try:
        write_private_file(path, marshal.dumps(record))
    except (OSError, ValueError):
        pass
