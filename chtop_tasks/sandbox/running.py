"""Which of a group's sandboxes run now: ``podman ps`` for the group's label, nothing else.

Its own small module (``json``, ``subprocess``, ``places``): the busy checks of ``git.rebase-down``
and ``worktree.delete`` ask it without importing the launcher and everything a launch needs.  The
answer fails closed: podman failing is an error, never "none runs";
only podman missing altogether (no sandbox can run then) is "none".

Before podman is asked (a process of its own, on the critical path of those checks), the machine's
processes are: every running container has a ``conmon`` process that monitors it, started with
``-n NAME``, and a sandbox of a root is named ``chtop-<that root's name>-...`` (the launcher takes
its names from :func:`container_name_prefix`).  When no ``conmon`` has such a name, no sandbox of
that root runs, and podman is not asked.  Anything else -- such a name, a ``conmon`` whose name
cannot be read, another monitor (``conmonrs``), ``/proc`` unreadable -- asks podman, as before.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ..core.errors import CommandFailed
from ..core.places import UNSAFE_IN_NAME, group_id

LABEL = "chtop"
MONITORS = (b"conmon\n", b"conmonrs\n")       # /proc/PID/comm of a container's monitor


def slug(text: str) -> str:
    """``text`` as a container or host name part: runs of other characters made ``-``."""
    return UNSAFE_IN_NAME.sub("-", text).strip("-.") or "x"


def container_name_prefix(name: str) -> str:
    """How the name of every sandbox of target ``name`` (a worktree's name, a dir's) begins."""
    return f"chtop-{slug(name)}-"


def monitored_names(proc: Path = Path("/proc")) -> list[str] | None:
    """The container names the machine's ``conmon`` processes were started for; None when that cannot
    be told (``/proc`` unreadable, a monitor whose name is not on its command line)."""
    names = []
    try:
        pids = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/comm", "rb") as comm:
                if comm.read(32) not in MONITORS:
                    continue
            with open(f"{proc}/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read(1 << 16).split(b"\0")
        except FileNotFoundError:
            continue                        # ended meanwhile
        except OSError:
            return None
        if argv == [b""]:
            continue                        # a zombie (conmon forks, and its parent exits): monitors nothing
        name = next((argv[i + 1] for i, word in enumerate(argv[:-1]) if word in (b"-n", b"--name")), None)
        if name is None:
            return None
        names.append(name.decode("utf-8", "replace"))
    return names


def may_run_sandbox_of(root: Path, proc: Path = Path("/proc")) -> bool:
    """False only when no container monitor on this machine runs a container named as a sandbox of
    ``root`` would be (then none runs); True means podman must say."""
    names = monitored_names(proc)
    prefix = container_name_prefix(Path(root).name)
    return names is None or any(name.startswith(prefix) for name in names)


def ps_rows(group_dir: Path) -> list[dict]:
    """The running containers of a group as ``podman ps`` describes them: name, worktree, root,
    purpose, network, status, limits (from chtop's labels) and the command (its argv)."""
    argv = ["podman", "ps", "--filter", f"label={LABEL}.group_id={group_id(group_dir)}", "--format", "json"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except FileNotFoundError as exc:
        raise CommandFailed("podman is not installed") from exc
    if proc.returncode:
        raise CommandFailed(f"podman ps failed: {proc.stderr.strip()}")
    rows = []
    for item in json.loads(proc.stdout or "[]"):
        labels = item.get("Labels") or {}
        names = item.get("Names") or ["?"]
        rows.append({"name": names[0], "worktree": labels.get(f"{LABEL}.worktree", "?"),
                     "root": labels.get(f"{LABEL}.root", "?"),
                     "purpose": labels.get(f"{LABEL}.purpose", "?"),
                     "network": labels.get(f"{LABEL}.network", "?"), "status": item.get("Status", "?"),
                     "command": list(item.get("Command") or []),
                     "limits": labels.get(f"{LABEL}.limits", "?")})
    return rows


def sandboxes_in(group_dir: Path, root: Path) -> list[dict]:
    """The running sandboxes of ``group_dir`` whose root is ``root`` (none when podman is absent, or
    when no container monitor runs one named as they are)."""
    if not may_run_sandbox_of(root):
        return []
    try:
        rows = ps_rows(group_dir)
    except CommandFailed as exc:
        if "not installed" in str(exc):
            return []
        raise
    return [row for row in rows if row["root"] == str(root)]
