"""The ``podman run`` argv for a mount plan: rootless by default, a user
namespace with idmapped mounts when run as root, and the entry wrapper that
gives a ``--network none`` container its way to the proxy (the hand-off of
its own listener, see ``proxy/fdpass.py``; a socat relay as the fallback).
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.apiroute import RELAY_PORT
from ..core.errors import ChtopError
from .mounts import Mount

INIT_PATHS = ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit", "/usr/libexec/catatonit/catatonit")
ENTRY_DIR = "/.chtop"          # in the skeleton (read-only root); files chtop puts there
ENTRY = f"{ENTRY_DIR}/entry.sh"
SHELLRC = f"{ENTRY_DIR}/shellrc"
GITCONFIG = f"{ENTRY_DIR}/gitconfig"     # GIT_CONFIG_GLOBAL inside (``gitconfig.py``)

# Gives the proxy a listener 127.0.0.1:PORT made in this network namespace
# (listen_handoff.py, SCM_RIGHTS: no relay hop), else -- no python3 or no
# hand-off socket -- starts a socat relay and waits (at most ~2 s) until it
# listens; then becomes the command.
ENTRY_SCRIPT = r"""#!/bin/sh
# chtop sandbox entry: $1 = proxy socket ("" for none), $2 = port, then the command.
sock=$1; port=$2; shift 2
if [ -n "$sock" ]; then
    if [ -S "${sock%/*}/handoff.sock" ] && [ -x /usr/bin/python3 ]; then
        /usr/bin/python3 -I -S /.chtop/listen_handoff.py "${sock%/*}/handoff.sock" "$port" || exit 125
    else
        socat TCP-LISTEN:"$port",bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"$sock" </dev/null >/dev/null 2>&1 &
        hex=$(printf '%04X' "$port"); i=0
        until grep -q "0100007F:$hex 00000000:0000 0A" /proc/net/tcp 2>/dev/null; do
            i=$((i + 1))
            if [ "$i" -gt 400 ]; then echo "chtop: the proxy relay did not start" >&2; exit 125; fi
            sleep 0.005
        done
    fi
fi
exec "$@"
"""
HANDOFF_SCRIPT = Path(__file__).resolve().parent.parent / "incontainer" / "listen_handoff.py"

# The sandbox shell's own rc, never the host's ~/.bashrc or ~/.profile (they export API keys and
# tokens, and are not mounted): a few interactive niceties, then the worktree's env.sh sets the env.
SHELLRC_SCRIPT = r"""# chtop sbox.shell rcfile (the host's ~/.bashrc is not read), then the worktree's .claude/env.sh
case $- in *i*)
    HISTCONTROL=ignoreboth
    shopt -s checkwinsize histappend
    if [ -r /usr/share/bash-completion/bash_completion ]; then . /usr/share/bash-completion/bash_completion; fi
    alias ls='ls --color=auto' grep='grep --color=auto' ;;
esac
if [ -n "$CLAUDE_ENV_FILE" ] && [ -f "$CLAUDE_ENV_FILE" ]; then . "$CLAUDE_ENV_FILE"; fi
PS1="(sbox) ${PS1:-\w \$ }"
"""


@dataclass
class Identity:
    """Who the agent is on the host."""

    rootful: bool
    uidmap: list[str] = field(default_factory=list)   # --uidmap/--gidmap/--user
    note: str | None = None
    host_uid: int | None = None      # rootful: the host uid the agent's processes run as
    host_gid: int | None = None
    ns_root: tuple[int, int] | None = None    # rootful: host uid/gid of the namespace's root
    tree_owner: tuple[int, int] | None = None  # rootful: the uid/gid the agent is inside and on its mounts

    @property
    def idmap(self) -> bool:
        """Rootful: the tree's bind mounts are idmapped (on-disk ids = the ids inside)."""
        return self.rootful


AGENT_RANGE = 65536
FREE_RANGE_START = 1 << 31         # above every useradd range and every ordinary uid


def identity_for(root: Path) -> Identity:
    """Rootless: podman's own user namespace (container root = you).

    As root: a user namespace over an unprivileged id range that no other
    user has (root's /etc/subuid entry, else a free block), so no process
    of the agent is ever host root or another user.  The agent runs inside
    as the uid/gid that owns the tree, and the tree's mounts are idmapped
    (``-v SRC:DST:rw,idmap``), so it can write what the tree's owner could
    and what it creates is owned by that owner on the host; /usr and /etc
    are not idmapped, so root's files there stay out of reach.
    """
    if os.geteuid() != 0:
        return Identity(False)
    st = root.stat()
    owner, group = st.st_uid, st.st_gid
    if owner >= AGENT_RANGE or group >= AGENT_RANGE:
        raise ChtopError(f"{root} is owned by uid {owner}/gid {group}, above {AGENT_RANGE - 1}: as root chtop "
                         "maps only that range into the sandbox; run chtop as the tree's owner (rootless)")
    ubase, gbase = agent_id_base("uid"), agent_id_base("gid")
    argv = [f"--uidmap=0:{ubase}:{AGENT_RANGE}", f"--gidmap=0:{gbase}:{AGENT_RANGE}"]
    if owner or group:
        argv.append(f"--user={owner}:{group}")
    note = (f"{ROOTFUL_NOTE} (host ids {ubase}..{ubase + AGENT_RANGE - 1}, "
            f"no other user's); the agent is uid {owner} inside, never host root, and what it writes in "
            f"{root} is owned by uid {owner} on the host")
    return Identity(True, argv, note, ubase + owner, gbase + group, (ubase, gbase), (owner, group))


# How the launch as root says what it does: said once per worktree (the same each launch), not at every one.
ROOTFUL_NOTE = "running as root: rootful podman with a user namespace"


def agent_id_base(kind: str = "uid", subfile: Path | None = None, used_ids: list[int] | None = None) -> int:
    """The first host id of the agents' range as root: root's /etc/sub{u,g}id entry when it has
    one of at least 65536 ids, else the first 65536-aligned block from 2**31 up that no
    /etc/sub{u,g}id entry (of any user) and no passwd/group id touches."""
    subfile = subfile or Path(f"/etc/sub{kind}")
    entries = _sub_entries(subfile)
    for name, start, count in entries:
        if name in ("root", "0") and count >= AGENT_RANGE:
            return start
    taken = [(start, start + count) for _, start, count in entries]
    used_ids = _passwd_ids(kind) if used_ids is None else used_ids
    base = FREE_RANGE_START
    while base + AGENT_RANGE < 1 << 32:
        end = base + AGENT_RANGE
        if not any(start < end and base < stop for start, stop in taken) and \
                not any(base <= i < end for i in used_ids):
            return base
        base += AGENT_RANGE
    raise ChtopError(f"no free block of {AGENT_RANGE} ids for the agents; add one for root to {subfile}")


def _sub_entries(path: Path) -> list[tuple[str, int, int]]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def _passwd_ids(kind: str) -> list[int]:
    import grp

    try:
        return [e.pw_uid for e in pwd.getpwall()] if kind == "uid" else [e.gr_gid for e in grp.getgrall()]
    except OSError:
        return []


def _hard(res) -> int:
    return resource.getrlimit(res)[1]


def _limit(value: int) -> str:
    return "-1:-1" if value == resource.RLIM_INFINITY else f"{value}:{value}"


def ulimit_args(rootful: bool) -> list[str]:
    """memlock as high as we may (unlimited where the host allows: CUDA pinned memory).

    Rootful: podman asks for limits above what the VM grants (crun: setrlimit
    ... Operation not permitted), and inside a user namespace nothing can be
    raised; so nofile/nproc are pinned at our hard nofile limit (podman's default nofile
    of 1048576 fails there with `crun: setrlimit RLIMIT_NOFILE: Operation not permitted`).
    """
    args = [f"--ulimit=memlock={_limit(_hard(resource.RLIMIT_MEMLOCK))}"]
    if rootful:
        nofile = _hard(resource.RLIMIT_NOFILE)
        nproc = min(_hard(resource.RLIMIT_NPROC), nofile)
        args += [f"--ulimit=nofile={_limit(nofile)}", f"--ulimit=nproc={_limit(nproc)}"]
    return args


# The host's own system trees: never idmapped as root (root's files there, /etc/shadow among
# them, keep their host owner, which the agent's namespace does not map).
HOST_SYSTEM_TREES = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def mount_args(mounts: list[Mount], identity: Identity | None = None) -> list[str]:
    """--tmpfs/--volume per mount; as root every bind mount but the host's system trees is
    idmapped, so the agent (the tree owner's uid inside) owns what that owner owns."""
    idmap = identity is not None and identity.idmap
    shared_tmp = identity is not None and identity.tree_owner not in (None, (0, 0))
    out = []
    for m in mounts:
        # nosuid,nodev on every mount: a setuid file or a device node in it does nothing inside (as
        # root, crun needs the hook of ``needs_mount_flags_hook`` to apply them to read-write volumes)
        if m.mode == "tmpfs":
            # a non-root agent inside cannot own a tmpfs (podman 4.3 has no uid=): sticky, all-writable
            out.append(f"--tmpfs={m.dst}:rw,nosuid,nodev,mode={'1777' if shared_tmp else '0700'}")
        elif m.mode == "tmpfs-ro":
            out.append(f"--tmpfs={m.dst}:ro,nosuid,nodev,mode=0500,size=4k")
        else:
            opts = ("ro" if m.mode == "ro" else "rw") + ",nosuid,nodev"
            if idmap and str(m.dst) not in HOST_SYSTEM_TREES:
                opts += ",idmap"
            out.append(f"--volume={m.src}:{m.dst}:{opts}")
    return out


# Where podman looks for OCI hooks when not told (``--hooks-dir`` replaces them: a GPU toolkit's hook
# installed there must still run).
DEFAULT_HOOKS_DIRS = (Path("/usr/share/containers/oci/hooks.d"), Path("/etc/containers/oci/hooks.d"))
MOUNT_FLAGS_HOOK = Path(__file__).with_name("mount_flags_hook.py")


def needs_mount_flags_hook(identity: Identity) -> bool:
    """Rootful with a user namespace: crun 1.8 drops nosuid,nodev from read-write volumes there
    (``mount_flags_hook.py``); rootless podman applies them itself."""
    return identity.rootful and bool(identity.uidmap)


def hooks_dir_args(hooks_dir: Path | None) -> list[str]:
    """podman's ``--hooks-dir`` flags (global ones, taken after ``run`` too): ours, then the default
    dirs that exist."""
    if hooks_dir is None:
        return []
    return [f"--hooks-dir={d}" for d in (hooks_dir, *DEFAULT_HOOKS_DIRS) if d == hooks_dir or d.is_dir()]


def write_mount_flags_hook(hooks_dir: Path, skeleton: Path | None, mounts) -> None:
    """The hook's OCI description (``createRuntime``, every container started with this dir), run by
    this interpreter, isolated, and the volumes it makes nosuid,nodev: the root they are mounted under
    (the skeleton; None for a local image's root, which the hook reads from the bundle) and each bind
    mount's destination, written in the host-owned run dir: crun 1.8 does not always name a bundle."""
    hooks_dir.mkdir(mode=0o700, exist_ok=True)
    volumes = {"root": str(skeleton) if skeleton is not None else None,
               "destinations": [str(m.dst) for m in mounts if m.mode not in ("tmpfs", "tmpfs-ro")]}
    listed = hooks_dir.parent / "hook-volumes.json"       # beside the dir: podman reads every .json in it
    listed.write_text(json.dumps(volumes) + "\n")
    python = os.path.realpath(sys.executable)
    spec = {"version": "1.0.0", "when": {"always": True}, "stages": ["createRuntime"],
            "hook": {"path": python, "args": [python, "-I", "-S", str(MOUNT_FLAGS_HOOK),
                                              str(listed)]}}
    (hooks_dir / "chtop-mount-flags.json").write_text(json.dumps(spec) + "\n")


def build_argv(*, name: str, labels: dict[str, str], mounts: list[Mount], skeleton: Path, workdir: Path,
               env_values: dict[str, str], env_names: list[str], devices: list[Path], network: str,
               proxy_socket: Path | None, interactive: bool, identity: Identity, hostname: str,
               command: list[str], image: str | None = None, limits: list[str] | None = None,
               seccomp_profile: Path | None = None, ipc: list[str] | None = None,
               hooks_dir: Path | None = None) -> list[str]:
    argv = ["podman", "run", "--rm", *hooks_dir_args(hooks_dir), f"--name={name}", f"--hostname={hostname}"]
    for key, value in labels.items():
        argv.append(f"--label={key}={value}")
    argv += ["-it"] if interactive else ["-i"]
    argv += ["--network=host" if network in ("host", "open") else "--network=none"]
    argv += ["--read-only", "--security-opt=no-new-privileges", "--cap-drop=all"]
    if seccomp_profile is not None:      # podman's default, with no way to set a setuid/setgid bit
        argv.append(f"--security-opt=seccomp={seccomp_profile}")
    if any(Path(p).exists() for p in INIT_PATHS):
        argv.append("--init")        # a real PID 1: forwards signals, reaps the relay, 128+sig on a kill
    argv += list(ipc or ())
    argv += identity.uidmap
    argv += ulimit_args(identity.rootful)
    argv += list(limits or ())
    if not identity.rootful:
        argv.append("--group-add=keep-groups")
    for dev in devices:
        argv.append(f"--device={dev}")
    argv += mount_args(mounts, identity)
    for key, value in env_values.items():
        argv.append(f"--env={key}={value}")
    for key in env_names:          # values come from podman's own env (never echoed)
        argv.append(f"--env={key}")
    argv.append(f"--workdir={workdir}")
    if image:       # a local image is the root; the skeleton lends it only the entry files
        argv += [f"--volume={skeleton}{ENTRY_DIR}:{ENTRY_DIR}:ro,nosuid,nodev", image]
    else:
        argv += ["--rootfs", str(skeleton)]
    argv += ["/bin/sh", ENTRY, str(proxy_socket or ""), str(RELAY_PORT)]
    argv += list(command)
    return argv


def write_entry_files(skeleton: Path, gitconfig: str = "") -> None:
    entry_dir = skeleton / ENTRY_DIR.lstrip("/")
    entry_dir.mkdir(parents=True, exist_ok=True)
    files = ((ENTRY, ENTRY_SCRIPT, 0o755), (SHELLRC, SHELLRC_SCRIPT, 0o755),
             (f"{ENTRY_DIR}/listen_handoff.py", HANDOFF_SCRIPT.read_text(), 0o755), (GITCONFIG, gitconfig, 0o644))
    for rel, text, mode in files:
        path = skeleton / rel.lstrip("/")
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(mode)
            tmp.replace(path)
