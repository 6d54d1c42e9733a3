"""The plain functions behind ``inv net.*`` (the tasks only parse flags)."""

from __future__ import annotations

import time
from pathlib import Path

from ..places import command_for_group, group_and_policy_for
from .control import status
from .logs import HUMAN, net_dir
from .supervise import read_state


def locate(start: Path | None = None) -> tuple[Path, Path]:
    """(group_dir, policy_dir) of the workspace we are in; outside one, the --dir group's."""
    return group_and_policy_for(start)


def format_status(group_dir: Path) -> tuple[str, bool]:
    """Human status text, and whether the proxy runs."""
    info = status(group_dir)
    if not info:
        return (f"proxy: not running (group {group_dir}); start it with "
                f"`{command_for_group(group_dir)} net.start`"), False
    counts = info["counts"]
    lines = [
        f"proxy:    running, pid {info['pid']}, up {time.time() - info['started']:.0f}s",
        f"url:      {info['url']}",
        f"socket:   {info['socket']}",
    ]
    sockets = info["worktree_sockets"]
    for name, path in sorted(sockets.items()):
        if (Path(group_dir) / name).is_dir():
            lines.append(f"          {path}  (worktree {name})")
    gone = sum(1 for name in sockets if not (Path(group_dir) / name).is_dir())
    if gone:
        lines.append(f"          ({gone} socket(s) of deleted worktrees not shown)")
    lines += [
        f"policy:   {info['policy_dir']}  ({info['lists']['allow']} allowed, "
        f"{info['lists']['deny']} denied entries)",
        "requests: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in
                                 ("allowed", "blocked", "denied", "bad-request", "busy", "error")),
        f"open:     {info['active']} connections (peak {info['peak']}, cap {info.get('max_conns')}, "
        f"{info.get('max_conns_per_source')} per worktree or sandbox), "
        f"{info['watchers']} watcher(s)",
    ]
    for hold in info.get("held", []):
        where = f" (worktree {hold['worktree']})" if hold.get("worktree") else ""
        lines.append(f"held:     {hold['host']}:{hold['port']}{where}, {hold['waiting']} request(s) "
                     f"for {time.time() - hold['since']:.0f}s")
    lines += restart_lines(group_dir, info.get("sandboxes", 0))
    lines += [f"warning:  {e}" for e in info["list_errors"]]
    return "\n".join(lines), True


def restart_lines(group_dir: Path, sandboxes: int) -> list[str]:
    """The sandboxes served, and the supervisor's restarts of the daemon (from its state file)."""
    lines = [f"sandboxes: {sandboxes} hand their listener to this proxy (they survive its restarts)"]
    state = read_state(group_dir)
    restarts = state.get("restarts")
    if isinstance(restarts, int) and restarts > 0:
        when = state.get("last_at")
        ago = f", {time.time() - when:.0f}s ago" if isinstance(when, (int, float)) else ""
        lines.append(f"restarts: {restarts} (last: {str(state.get('last_reason'))[:200]}{ago})")
    return lines


def log_path(group_dir: Path) -> Path:
    return net_dir(group_dir) / HUMAN
