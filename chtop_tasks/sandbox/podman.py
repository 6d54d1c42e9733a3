"""The ``podman run`` argv for a mount plan: rootless by default, a user
namespace when run as root, and the entry wrapper that starts the proxy
relay inside a ``--network none`` container.
"""

from __future__ import annotations

import os
import pwd
import resource
from dataclasses import dataclass, field
from pathlib import Path

from .mounts import Mount

RELAY_PORT = 3128
INIT_PATHS = ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit", "/usr/libexec/catatonit/catatonit")
ENTRY_DIR = "/.chtop"          # in the skeleton (read-only root); files chtop puts there
ENTRY = f"{ENTRY_DIR}/entry.sh"
SHELLRC = f"{ENTRY_DIR}/shellrc"

# Starts the relay 127.0.0.1:PORT -> proxy unix socket in the background,
# waits (at most ~2 s) until it listens, then becomes the command.
ENTRY_SCRIPT = r"""#!/bin/sh
# chtop sandbox entry: $1 = proxy socket ("" for none), $2 = relay port, then the command.
sock=$1; port=$2; shift 2
if [ -n "$sock" ]; then
    socat TCP-LISTEN:"$port",bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:"$sock" </dev/null >/dev/null 2>&1 &
    hex=$(printf '%04X' "$port"); i=0
    until grep -q "0100007F:$hex 00000000:0000 0A" /proc/net/tcp 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 400 ]; then echo "chtop: the proxy relay did not start" >&2; exit 125; fi
        sleep 0.005
    done
fi
exec "$@"
"""

# ~/.bashrc is the host's: its lines may name paths the sandbox does not mount (a venv's activate
# script, a conda hook), so its errors are not shown; the worktree's env.sh then sets the env.
SHELLRC_SCRIPT = r"""# chtop sbox.shell rcfile: ~/.bashrc (its errors hidden), then the worktree's .claude/env.sh
[ -f ~/.bashrc ] && . ~/.bashrc 2>/dev/null
if [ -n "$CLAUDE_ENV_FILE" ] && [ -f "$CLAUDE_ENV_FILE" ]; then . "$CLAUDE_ENV_FILE"; fi
PS1="(sbox) ${PS1:-\w \$ }"
"""


@dataclass
class Identity:
    """Who the agent is on the host."""

    rootful: bool
    uidmap: list[str] = field(default_factory=list)
    note: str | None = None
    host_uid: int | None = None      # rootful: the host uid the agent runs as
    host_gid: int | None = None


def identity_for(root: Path) -> Identity:
    """Rootless: podman's own user namespace (container root = you).

    As root: a user namespace mapping container root to the owner of the
    tree (never host root); a root-owned tree maps to an unprivileged
    subordinate range, so the agent cannot write it.
    """
    if os.geteuid() != 0:
        return Identity(False)
    st = root.stat()
    owner, group = st.st_uid, st.st_gid
    base = _subid_base(owner) or 100000
    if owner == 0:
        return Identity(True, [f"--uidmap=0:{base}:65536", f"--gidmap=0:{base}:65536"],
                        f"running as root: {root} is root-owned, so the agent runs as unprivileged uid {base} "
                        "in a user namespace and cannot write it; run chtop as the tree's owner (rootless)",
                        base, base)
    return Identity(True, [f"--uidmap=0:{owner}:1", f"--uidmap=1:{base}:65535",
                           f"--gidmap=0:{group}:1", f"--gidmap=1:{base}:65535"],
                    f"running as root: rootful podman with a user namespace; the agent is uid {owner} "
                    f"(the owner of {root}) on the host, never root", owner, group)


def _subid_base(uid: int) -> int | None:
    try:
        name = pwd.getpwuid(uid).pw_name
        for line in Path("/etc/subuid").read_text().splitlines():
            parts = line.split(":")
            if len(parts) == 3 and parts[0] in (name, str(uid)):
                return int(parts[1])
    except (OSError, KeyError, ValueError):
        pass
    return None


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


def mount_args(mounts: list[Mount]) -> list[str]:
    out = []
    for m in mounts:
        if m.mode == "tmpfs":
            out.append(f"--tmpfs={m.dst}:rw,mode=0700")
        elif m.mode == "tmpfs-ro":
            out.append(f"--tmpfs={m.dst}:ro,mode=0500,size=4k")
        else:
            opts = "ro" if m.mode == "ro" else "rw"
            out.append(f"--volume={m.src}:{m.dst}:{opts}")
    return out


def build_argv(*, name: str, labels: dict[str, str], mounts: list[Mount], skeleton: Path, workdir: Path,
               env_values: dict[str, str], env_names: list[str], devices: list[Path], network: str,
               proxy_socket: Path | None, interactive: bool, identity: Identity, hostname: str,
               command: list[str], image: str | None = None) -> list[str]:
    argv = ["podman", "run", "--rm", f"--name={name}", f"--hostname={hostname}"]
    for key, value in labels.items():
        argv.append(f"--label={key}={value}")
    argv += ["-it"] if interactive else ["-i"]
    argv += ["--network=host" if network in ("host", "open") else "--network=none"]
    argv += ["--read-only", "--security-opt=no-new-privileges"]
    if any(Path(p).exists() for p in INIT_PATHS):
        argv.append("--init")        # a real PID 1: forwards signals, reaps the relay, 128+sig on a kill
    if Path("/dev/mqueue").is_dir():   # --ipc host (CUDA IPC) needs the host's mqueue mount
        argv.append("--ipc=host")
    argv += identity.uidmap
    argv += ulimit_args(identity.rootful)
    if not identity.rootful:
        argv.append("--group-add=keep-groups")
    for dev in devices:
        argv.append(f"--device={dev}")
    argv += mount_args(mounts)
    for key, value in env_values.items():
        argv.append(f"--env={key}={value}")
    for key in env_names:          # values come from podman's own env (never echoed)
        argv.append(f"--env={key}")
    argv.append(f"--workdir={workdir}")
    if image:       # a local image is the root; the skeleton lends it only the entry files
        argv += [f"--volume={skeleton}{ENTRY_DIR}:{ENTRY_DIR}:ro", image]
    else:
        argv += ["--rootfs", str(skeleton)]
    argv += ["/bin/sh", ENTRY, str(proxy_socket or ""), str(RELAY_PORT)]
    argv += list(command)
    return argv


def write_entry_files(skeleton: Path) -> None:
    entry_dir = skeleton / ENTRY_DIR.lstrip("/")
    entry_dir.mkdir(parents=True, exist_ok=True)
    for rel, text in ((ENTRY, ENTRY_SCRIPT), (SHELLRC, SHELLRC_SCRIPT)):
        path = skeleton / rel.lstrip("/")
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(path)
