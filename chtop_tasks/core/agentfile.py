"""Reading a file the agent could have written (anything under a worktree, a private git store or
an admin dir): never through a symlink, never blocking, only a regular file, only a bounded size.

A plain ``open()`` of a FIFO the agent made blocks until someone writes to it (a host task, the
dashboard or the proxy daemon's import timer would hang); one of a symlink reads whatever host
file it names.  So the file is opened with ``O_NOFOLLOW|O_NONBLOCK``, checked to be a regular file
on the open fd (the way OpenSSH's ``safe_path`` checks before it trusts a file), and read up to
``limit`` bytes.  Anything else is ``None``: to the caller, the file is not there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_BYTES = 1 << 20
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def read_regular(path: Path | str, *, limit: int = MAX_BYTES) -> tuple[bytes, os.stat_result] | None:
    """(contents, fstat of the open fd) when ``path`` is a regular file (not a link) of at most
    ``limit`` bytes, else None."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return None if len(data) > limit else (data, st)


def read_bytes(path: Path | str, *, limit: int = MAX_BYTES) -> bytes | None:
    """The contents of ``path`` when it is a regular file (not a link) of at most ``limit`` bytes."""
    got = read_regular(path, limit=limit)
    return None if got is None else got[0]


def read_text(path: Path | str, *, limit: int = MAX_BYTES) -> str | None:
    """``read_bytes`` decoded as UTF-8 (bad bytes replaced)."""
    data = read_bytes(path, limit=limit)
    return None if data is None else data.decode("utf-8", errors="replace")


def non_regular(path: Path | str) -> str | None:
    """What ``path`` is when it exists but is not a regular file ("a FIFO", "a symlink", ...), else None.

    For files a host git process opens by itself (chtop cannot hand it a safe fd): checked before
    git runs, so a planted FIFO is refused with its name instead of hanging git."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a regular file"
