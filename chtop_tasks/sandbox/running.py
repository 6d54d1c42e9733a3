"""Which of a group's sandboxes run now: ``podman ps`` for the group's label, nothing else.

Its own small module (``json``, ``subprocess``, ``places``): the busy checks of ``git.rebase-down``
and ``worktree.delete`` ask it without importing the launcher and everything a launch needs (about
30 ms of every such task).  The answer fails closed: podman failing is an error, never "none runs";
only podman missing altogether (no sandbox can run then) is "none".
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ..errors import CommandFailed
from ..places import group_id

LABEL = "chtop"


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
    """The running sandboxes of ``group_dir`` whose root is ``root`` (none when podman is absent)."""
    try:
        rows = ps_rows(group_dir)
    except CommandFailed as exc:
        if "not installed" in str(exc):
            return []
        raise
    return [row for row in rows if row["root"] == str(root)]
