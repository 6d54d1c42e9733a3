"""Writing a file so that readers never see half of it and a planted symlink is never followed:
a fresh temp file in the same dir, renamed over the path; one read-modify-write of a file at a
time, across processes (``locked_for_update``).  Reading a file an agent could have written is
``agentfile``'s."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


def write_atomic(path: Path, text: str, *, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
    """Replace ``path`` with ``text`` (mode ``mode``; owned by ``owner`` when given, as root):
    ``write_atomic_at`` in its dir."""
    path = Path(path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic_at(fd, path.name, text.encode("utf-8", "replace"), mode=mode, owner=owner)
    finally:
        os.close(fd)


def write_atomic_at(dir_fd: int, name: str, data: bytes, *, mode: int = 0o600,
                    owner: tuple[int, int] | None = None) -> None:
    """Replace ``name`` in the directory open as ``dir_fd`` with ``data`` by a rename: for a dir an
    agent can write, opened without following a link, so nothing it plants meanwhile redirects it."""
    tmp = f".{name}.{os.urandom(6).hex()}"     # secrets.token_hex(6), without importing it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_private_file(path: Path, data: bytes) -> None:
    """Replace ``path``, in a host-only dir chtop keeps (made, mode 0700, when missing), with ``data``
    (mode 0600): its dir opened without following a link, the file renamed into place
    (``write_atomic_at``)."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        write_atomic_at(fd, path.name, data)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked_for_update(path: Path):
    """``path`` open for reading and appending (made, and its dir, when missing), at its start,
    under an exclusive flock for the block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.seek(0)
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
