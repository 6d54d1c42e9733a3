"""The plain functions behind ``inv net.*`` (the tasks only parse flags)."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import ChtopError, UsageError
from ..places import group_and_policy_for
from .control import status
from .logs import HUMAN, net_dir
from .policy import Policy, append_entry, list_path


def locate(start: Path | None = None) -> tuple[Path, Path]:
    """(group_dir, policy_dir) of the workspace we are in; outside one, the --dir group's."""
    return group_and_policy_for(start)


def format_status(group_dir: Path) -> tuple[str, bool]:
    """Human status text, and whether the proxy runs."""
    info = status(group_dir)
    if not info:
        return f"proxy: not running (group {group_dir}); start it with `inv net.start`", False
    counts = info["counts"]
    lines = [
        f"proxy:    running, pid {info['pid']}, up {time.time() - info['started']:.0f}s",
        f"url:      {info['url']}",
        f"socket:   {info['socket']}",
    ]
    for name, path in sorted(info["worktree_sockets"].items()):
        lines.append(f"          {path}  (worktree {name})")
    lines += [
        f"policy:   {info['policy_dir']}  ({info['lists']['allow']} allowed, "
        f"{info['lists']['deny']} denied entries)",
        "requests: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in
                                 ("allowed", "blocked", "denied", "bad-request", "busy", "error")),
        f"open:     {info['active']} connections (peak {info['peak']}, cap {info.get('max_conns')}), "
        f"{info['watchers']} watcher(s)",
    ]
    for hold in info.get("held", []):
        where = f" (worktree {hold['worktree']})" if hold.get("worktree") else ""
        lines.append(f"held:     {hold['host']}:{hold['port']}{where}, {hold['waiting']} request(s) "
                     f"for {time.time() - hold['since']:.0f}s")
    lines += [f"warning:  {e}" for e in info["list_errors"]]
    return "\n".join(lines), True


def add_entries(policy_dir: Path, specs: list[str], kind: str, worktree: str | None) -> list[str]:
    """Validate every entry first, then append each once; lines saying what changed."""
    if not specs:
        raise UsageError(f"give at least one domain: inv net.{kind} DOMAIN...")
    path = list_path(policy_dir, kind, worktree)
    if not path.exists() and worktree is None:
        raise ChtopError(f"{path} does not exist", 2)
    from .hostmatch import BadHost, parse_entry
    for spec in specs:
        try:
            parse_entry(spec, allow_list=(kind == "allow"))
        except BadHost as exc:
            raise UsageError(f"refused {spec!r}: {exc}") from None
    out = []
    policy = Policy(policy_dir)
    for spec in specs:
        changed, message = append_entry(path, spec, allow_list=(kind == "allow"))
        out.append(message)
        host = parse_entry(spec, allow_list=False).host
        if kind == "allow" and policy.judge(host, worktree).decision == "denied":
            out.append(f"  note: {host} is also denied (net-deny.txt wins)")
    return out


def format_pending(group_dir: Path, policy_dir: Path) -> str:
    from .approvals import format_pending as pending_with_scopes

    return pending_with_scopes(group_dir, policy_dir)


def log_path(group_dir: Path) -> Path:
    return net_dir(group_dir) / HUMAN
