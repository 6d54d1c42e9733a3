"""The container's root: a skeleton directory owned by the user.

No image is pulled.  The skeleton holds empty mount points; the host's /usr
and /etc are mounted over it read-only (so the toolchain and glibc always
match the host), and the container runs with a read-only root.  Each launch
gets its own (a per-run dir in chtop's host-side state dir, which is never
mounted into a sandbox; as root under /tmp/chtop-rootfs-0), removed when the
sandbox exits.
"""

from __future__ import annotations

import os
from pathlib import Path

from .mounts import Mount

BASE_DIRS = ("usr", "etc", "tmp", "proc", "dev", "sys", "root", "run", "var/tmp", "home")


def _covered(dst: Path, dsts: set[Path]) -> bool:
    """True when a shallower mount (one of ``dsts``, every mount's destination) provides ``dst``'s
    parent (crun makes it there)."""
    return any(parent in dsts for parent in dst.parents)


def ensure_skeleton(skel: Path, mounts: list[Mount], extra_paths=()) -> Path:
    """Create (idempotently) the skeleton with a mount point for every mount."""
    skel.mkdir(parents=True, exist_ok=True, mode=0o755)
    for rel in BASE_DIRS:
        (skel / rel).mkdir(parents=True, exist_ok=True)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        link = skel / name
        if host.is_symlink():
            target = os.readlink(host)
            if not link.is_symlink() or os.readlink(link) != target:
                if link.is_symlink() or link.is_file():
                    link.unlink()
                if not link.exists():
                    link.symlink_to(target)
        elif host.is_dir():
            link.mkdir(exist_ok=True)
    dsts = {mount.dst for mount in mounts}
    for mount in mounts:
        if _covered(mount.dst, dsts):
            continue
        _mount_point(skel, mount.dst, is_dir=mount.src is None or mount.src.is_dir())
    for path in map(Path, extra_paths):
        if path not in dsts and not _covered(path, dsts):
            _mount_point(skel, path, is_dir=path.is_dir())
    return skel


def _mount_point(skel: Path, dst: Path, is_dir: bool) -> None:
    point = skel / dst.relative_to("/")
    if is_dir:
        if point.is_file() or point.is_symlink():
            point.unlink()
        point.mkdir(parents=True, exist_ok=True)
    else:
        if point.is_dir() and not point.is_symlink():
            point.rmdir()
        point.parent.mkdir(parents=True, exist_ok=True)
        point.touch(exist_ok=True)


# -- per-run dirs: <runs>/<container name>/{pid,root/} -------------------------------------------
# Each launch gets its own skeleton root, removed when the sandbox exits; a run that was killed
# before it could clean up is removed by the next launch of the group (its launcher is gone
# and podman has no container of that name).

PID_FILE = "launcher.pid"


def claim_run_dir(run_dir: Path, mode: int = 0o700) -> None:
    """Make ``run_dir`` (fresh) and record the launching process in it.  As root the namespace's
    unprivileged root must traverse it to the skeleton: ``mode`` 0755 then."""
    for _ in range(3):              # the last run of the group may remove the parent meanwhile
        run_dir.parent.mkdir(parents=True, exist_ok=True, mode=mode)
        try:
            run_dir.mkdir(mode=mode)
            break
        except FileNotFoundError:
            continue
    (run_dir / PID_FILE).write_text(f"{os.getpid()}\n")


def remove_run_dir(run_dir: Path) -> None:
    """Remove ``run_dir``, and the group's runs dir when it was the last one in it."""
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        run_dir.parent.rmdir()
    except OSError:
        pass


def _launcher_alive(run_dir: Path) -> bool:
    try:
        pid = int((run_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        # no pid yet: a launch that is just starting, or one killed right after mkdir
        try:
            import time

            return time.time() - run_dir.stat().st_mtime < 60
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_run_dirs(runs: Path) -> list[Path]:
    """The run dirs under ``runs`` whose launcher has died (their container may still run)."""
    try:
        entries = sorted(runs.iterdir())
    except OSError:
        return []
    return [d for d in entries if d.is_dir() and not d.is_symlink() and not _launcher_alive(d)]
