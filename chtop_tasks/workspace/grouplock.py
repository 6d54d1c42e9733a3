"""One chtop task at a time changes a group's worktrees and stores.

``worktree.create``, ``worktree.delete``, ``git.rebase-down`` and ``git.merge-up`` hold an
exclusive ``flock`` on ``<group>/.chtop/group.lock`` (host-side state no sandbox mounts).  A task
that finds it held says who holds it and waits; it never fails on it.  The kernel drops the lock
when its holder dies, so a killed task never blocks the next.  The import (the proxy's timer, the
dash) does not take it: it has its own per-worktree lock and only adds refs.  Within one thread
the lock is re-entrant (a task that holds it may call another that takes it).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sys
import threading
from pathlib import Path

from ..core.places import group_lock_path

_held = threading.local()


def holder_of(fd: int) -> str:
    """What the holder wrote into the lock file (``pid N: TASK``), or a placeholder."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text if text.startswith("pid ") and text.isprintable() else "holder not known yet"


@contextlib.contextmanager
def group_lock(grouping: Path, task: str):
    """Hold the group's lock for the block, waiting (with a message) while another task has it."""
    path = group_lock_path(grouping)
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    key = str(path)
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"chtop: waiting for another chtop task on this group ({holder_of(fd)})",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {task}\n".encode(), 0)
        depth[key] = 1
        try:
            yield
        finally:
            depth[key] = 0
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def holds_group_lock(task: str):
    """Decorator: the function (whose first argument is a Workspace) runs under ``group_lock``."""
    def wrap(fn):
        @functools.wraps(fn)
        def locked(ws, *args, **kwargs):
            with group_lock(ws.grouping, task):
                return fn(ws, *args, **kwargs)
        return locked
    return wrap
