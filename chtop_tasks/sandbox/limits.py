"""Per-sandbox resource limits: ``sandbox/limits.txt`` and where the host can enforce them.

limits.txt      ``KEY VALUE`` per line, in the toplevel's ``sandbox/`` (the
                group's defaults) and optionally in
                ``sandbox/worktrees/<name>/limits.txt`` (that worktree's
                sandbox: each key it names replaces the group's).  Keys:

                memory      bytes with a k/m/g/t suffix (``8g``), or a percentage
                            of the host's memory (``50%``); the sandbox is killed
                            (exit 137) when it needs more (no swap beyond it)
                pids        the most processes/threads at once (a fork bomb stops there)
                cpus        CPU time as a number of cores (``1.5``)
                cpu-shares  relative weight when CPUs are contended (1024 = equal)

                ipc         ``private`` (the default: SysV segments and semaphores made
                            inside die with the sandbox, and the host's are not
                            visible) or ``host`` (the host's IPC namespace, for CUDA
                            IPC with processes outside; said at every launch)
                shm         the size of the sandbox's own ``/dev/shm`` (a size or a
                            share, like memory); by default half the memory limit
                            (half the host's memory without one)

                ``none`` removes a limit.  A missing file means no limits; a
                malformed line is an error naming the file and line.

Limits need the kernel's cgroup controllers: rootful podman sets them on
cgroup v1 and v2, rootless podman only on a cgroup v2 host (on v1 it ignores
them).  Where they cannot be enforced chtop says so at launch and in
``inv sbox.ps``, and does not pass them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import PolicyError
from ..core.places import check_worktree_name

LIMITS = "limits.txt"
KEYS = ("memory", "pids", "cpus", "cpu-shares", "ipc", "shm")
IPC_MODES = ("private", "host")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)b?$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    memory: int | None = None       # bytes
    pids: int | None = None
    cpus: float | None = None
    cpu_shares: int | None = None
    sources: tuple[str, ...] = ()   # the files they came from
    ipc: str = "private"            # or "host" (not a cgroup limit: passed wherever podman runs)
    shm: int | None = None          # bytes of /dev/shm (None: half the memory limit)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.memory, self.pids, self.cpus, self.cpu_shares))

    def describe(self) -> str:
        """``memory 256M, pids 32, cpus 1.5, cpu-shares 512`` (or ``none``)."""
        parts = []
        if self.memory is not None:
            parts.append(f"memory {human_bytes(self.memory)}")
        if self.pids is not None:
            parts.append(f"pids {self.pids}")
        if self.cpus is not None:
            parts.append(f"cpus {self.cpus:g}")
        if self.cpu_shares is not None:
            parts.append(f"cpu-shares {self.cpu_shares}")
        return ", ".join(parts) or "none"


def human_bytes(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        size = _UNITS[unit.lower()]
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B" if n < 1 << 20 else f"{n / (1 << 20):.0f}M"


def host_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _parse_value(key: str, value: str, where: str):
    if key == "ipc":
        if value not in IPC_MODES:
            raise PolicyError(f"{where}: bad ipc value {value!r} (private or host)")
        return value
    if value == "none":
        return None
    try:
        if key in ("memory", "shm"):
            if value.endswith("%"):
                pct = float(value[:-1])
                if not 0 < pct <= 100:
                    raise ValueError
                return max(int(host_memory() * pct / 100), 6 << 20)
            m = _SIZE.match(value)
            if not m:
                raise ValueError
            size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
            if size < 6 << 20:
                raise PolicyError(f"{where}: {key} {value} is below podman's minimum of 6m")
            return size
        if key == "pids" or key == "cpu-shares":
            number = int(value)
            if number < (2 if key == "cpu-shares" else 8):
                raise ValueError
            return number
        cpus = float(value)
        if cpus <= 0:
            raise ValueError
        return cpus
    except ValueError:
        raise PolicyError(f"{where}: bad {key} value {value!r} (e.g. memory 8g or 50%, pids 4096, cpus 1.5, "
                          "cpu-shares 1024, or none)") from None


def parse_limits(path: Path) -> dict[str, object]:
    """The keys ``path`` sets (a missing file sets none)."""
    if not path.is_file():
        return {}
    out: dict[str, object] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        where = f"{path}:{number}"
        parts = text.split()
        if len(parts) != 2 or parts[0] not in KEYS:
            raise PolicyError(f"{where}: expected 'KEY VALUE' with KEY one of {', '.join(KEYS)}, got: {text}")
        out[parts[0]] = _parse_value(parts[0], parts[1].lower(), where)
    return out


def worktree_limits_path(policy_dir: Path, worktree: str) -> Path:
    return Path(policy_dir) / "worktrees" / check_worktree_name(worktree) / LIMITS


def load_limits(policy_dir: Path, worktree: str | None = None) -> Limits:
    """The group's limits, with the worktree's layer (if any) replacing the keys it names."""
    files = [Path(policy_dir) / LIMITS]
    if worktree is not None:
        files.append(worktree_limits_path(policy_dir, worktree))
    merged: dict[str, object] = {}
    sources = []
    for path in files:
        layer = parse_limits(path)
        if layer:
            sources.append(str(path))
        merged.update(layer)
    return Limits(merged.get("memory"), merged.get("pids"), merged.get("cpus"), merged.get("cpu-shares"),
                  tuple(sources), merged.get("ipc") or "private", merged.get("shm"))


def why_not_enforced(rootful: bool, cgroup_root: Path = CGROUP_ROOT) -> str | None:
    """None when podman can enforce limits here, else why not (said at launch and in sbox.ps)."""
    unified = (cgroup_root / "cgroup.controllers").is_file()
    if unified:
        controllers = set((cgroup_root / "cgroup.controllers").read_text().split())
        missing = {"memory", "pids"} - controllers
        if missing:
            return f"this host's cgroup v2 has no {' or '.join(sorted(missing))} controller"
        return None
    if not rootful:
        return "rootless podman cannot set cgroup limits on this cgroup v1 host (run as root, or on cgroup v2)"
    missing = [c for c in ("memory", "pids") if not (cgroup_root / c).is_dir()]
    if missing:
        return f"this host mounts no cgroup v1 {' or '.join(missing)} controller"
    return None


def limit_args(limits: Limits) -> list[str]:
    """The podman flags; the memory limit includes swap (none beyond it)."""
    args = []
    if limits.memory is not None:
        args += [f"--memory={limits.memory}", f"--memory-swap={limits.memory}"]
    if limits.pids is not None:
        args.append(f"--pids-limit={limits.pids}")
    if limits.cpus is not None:
        args.append(f"--cpus={limits.cpus:g}")
    if limits.cpu_shares is not None:
        args.append(f"--cpu-shares={limits.cpu_shares}")
    return args


MQUEUE = Path("/dev/mqueue")
IPC_HOST_WARNING = ("ipc host ({sources}): this sandbox shares the host's SysV IPC and POSIX message queues; "
                    "segments made inside outlive it and its memory limit, and it sees the host's own")


def ipc_args(limits: Limits, mqueue: Path = MQUEUE) -> tuple[list[str], str | None]:
    """The podman IPC flags, and what to say at launch: private IPC with a /dev/shm of its own
    (``shm``, else half the memory limit, else half the host's memory), or the host's IPC where a
    limits file says ``ipc host`` (podman needs the host's /dev/mqueue for it)."""
    if limits.ipc == "host":
        where = " + ".join(limits.sources) or LIMITS
        if mqueue.is_dir():
            return ["--ipc=host"], IPC_HOST_WARNING.format(sources=where)
        note = f"ipc host ({where}): this host has no {mqueue} (which podman needs for it); IPC stays private"
    else:
        note = None
    shm = limits.shm or (limits.memory or host_memory()) // 2
    return ["--ipc=private", f"--shm-size={max(shm, 6 << 20)}"], note


def killed_note(status: int, limits: Limits) -> str | None:
    """What to tell the user when a sandbox with a memory limit was SIGKILLed (the OOM killer)."""
    if status == 137 and limits.memory is not None:
        return (f"the sandbox was killed (SIGKILL, exit 137): it most likely ran out of its memory limit "
                f"({human_bytes(limits.memory)}, from {' + '.join(limits.sources)})")
    return None
