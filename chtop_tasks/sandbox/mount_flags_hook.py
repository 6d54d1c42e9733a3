"""An OCI ``createRuntime`` hook that gives each bind volume the ``nosuid``/``nodev`` it asked for.

Rootful podman with a user namespace (``--uidmap``) has crun 1.8 bind every volume from a mount it
opened on the host, and remount it with the volume's options only when it is read-only: a
read-write volume keeps ``rw,relatime`` and loses ``nosuid,nodev``.  crun runs this hook as root on
the host once the container's mounts are made and before its first process starts.  It enters the
container's mount namespace and adds the flags with ``mount_setattr(2)``, which only sets them (it
never clears read-only or anything else, so a path that resolved elsewhere could only gain them),
then checks each volume with ``statvfs``.  Any failure exits non-zero, and crun then refuses to
start the container.

Run as ``python -I -S mount_flags_hook.py VOLUMES_JSON`` with the container's state on stdin:
VOLUMES_JSON (written by the launch in its host-owned run dir) lists each volume's path in the
runtime's view; the state gives the container's pid.  It imports nothing of chtop's.
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


FLAGS = ("nosuid", "nodev")


def volume_paths(listed_path: str, state: dict) -> list[str]:
    """Each volume's path in the runtime's view: its destination under the container's root (the
    skeleton the launch named, else the root the bundle's config names: a local image's)."""
    with open(listed_path) as fh:
        listed = json.load(fh)
    root = listed["root"]
    if root is None:
        with open(os.path.join(state["bundle"], "config.json")) as fh:
            root = json.load(fh)["root"]["path"]
    return [str(root).rstrip("/") + str(dst) for dst in listed["destinations"]]


def main(argv: list[str]) -> int:
    state = json.load(sys.stdin)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        volumes = volume_paths(argv[1], state)
        enter_mount_namespace(int(state["pid"]), libc)
        for path, flags in ((volume, FLAGS) for volume in volumes):
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
    sys.exit(main(sys.argv))
