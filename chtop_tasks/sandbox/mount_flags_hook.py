"""An OCI ``createRuntime`` hook that gives each bind volume the ``nosuid``/``nodev`` it asked for.

Rootful podman with a user namespace (``--uidmap``) has crun 1.8 bind every volume from a mount it
opened on the host, and remount it with the volume's options only when it is read-only: a
read-write volume keeps ``rw,relatime`` and loses ``nosuid,nodev``.  crun runs this hook as root on
the host once the container's mounts are made and before its first process starts.  It enters the
container's mount namespace and adds the flags with ``mount_setattr(2)``, which only sets them (it
never clears read-only or anything else, so a path that resolved elsewhere could only gain them),
then checks each volume with ``statvfs``.  Any failure exits non-zero, and crun then refuses to
start the container.

Run as ``python -I -S mount_flags_hook.py`` with the container's state on stdin; it imports
nothing of chtop's.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
SYS_MOUNT_SETATTR = 442             # the same number on every architecture (added in Linux 5.12)
AT_SYMLINK_NOFOLLOW = 0x100
MOUNT_ATTR = {"nosuid": 0x2, "nodev": 0x4}
ST_FLAG = {"nosuid": os.ST_NOSUID, "nodev": os.ST_NODEV}


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def wanted_flags(config: dict) -> list[tuple[str, tuple[str, ...]]]:
    """(path in the runtime's view, the flags asked for) of each bind mount of the bundle's config."""
    root = str((config.get("root") or {}).get("path") or "/").rstrip("/")
    out = []
    for mount in config.get("mounts") or []:
        options = mount.get("options") or []
        if mount.get("type") != "bind" and "bind" not in options and "rbind" not in options:
            continue
        flags = tuple(name for name in MOUNT_ATTR if name in options)
        if flags:
            out.append((root + mount["destination"], flags))
    return out


def enter_mount_namespace(pid: int, libc) -> None:
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the mount namespace of {pid}")
    finally:
        os.close(fd)


def add_flags(path: str, flags: tuple[str, ...], libc) -> None:
    attr = MountAttr(sum(MOUNT_ATTR[name] for name in flags), 0, 0, 0)
    if libc.syscall(SYS_MOUNT_SETATTR, -100, path.encode(), AT_SYMLINK_NOFOLLOW, ctypes.byref(attr),
                    ctypes.sizeof(attr)) != 0:
        raise OSError(ctypes.get_errno(), f"mount_setattr {path}")


def missing_flags(path: str, flags: tuple[str, ...]) -> list[str]:
    got = os.statvfs(path).f_flag
    return [name for name in flags if not got & ST_FLAG[name]]


def main() -> int:
    state = json.load(sys.stdin)
    with open(os.path.join(state["bundle"], "config.json")) as fh:
        config = json.load(fh)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        enter_mount_namespace(int(state["pid"]), libc)
        for path, flags in wanted_flags(config):
            if missing_flags(path, flags):
                add_flags(path, flags, libc)
            still = missing_flags(path, flags)
            if still:
                raise OSError(0, f"{path} is still without {','.join(still)}")
    except OSError as exc:
        print(f"chtop mount-flags hook: {exc.strerror or exc} ({exc.filename or ''}); "
              "the sandbox does not start without nosuid,nodev on its volumes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
