"""The plain functions behind ``inv net.*`` (the tasks only parse flags)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from ..errors import ChtopError, UsageError
from ..places import command_for_group, default_policy_dir, group_and_policy_for, is_dir_group, user_config_dir
from ..term import say
from .control import ensure_proxy, status, stop_proxy
from .logs import HUMAN, net_dir, pending
from .policy import Policy, append_entry, list_path


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
    if info["allowed_once"]:
        lines.append("once:     " + " ".join(info["allowed_once"]))
    lines += [f"warning:  {e}" for e in info["list_errors"]]
    return "\n".join(lines), True


def require_worktree(group_dir: Path, worktree: str) -> None:
    """``--worktree NAME`` must name an existing feature worktree of this group."""
    from ..places import user_config_dir
    from ..workspace.layout import find_workspace

    if Path(group_dir) == user_config_dir():
        raise UsageError(f"--worktree {worktree}: the --dir group has no worktrees (run this in a workspace, "
                         "or leave out --worktree for the group's lists)")
    root = Path(group_dir) / worktree
    try:
        ws = find_workspace(root) if (root / ".git").is_file() else None
    except ChtopError:
        ws = None
    if ws is None or ws.root != root or ws.is_toplevel:
        raise UsageError(f"--worktree {worktree}: no such worktree in {group_dir} "
                         f"(inv worktree.list shows them; inv worktree.create --name {worktree} makes it)")


def writable_policy_dir(group_dir: Path, policy_dir: Path) -> Path:
    """Where ``net.allow``/``net.deny`` write for this group.

    The --dir group reads chtop's shipped policy until the user has one of their own; the first
    write copies the shipped files to ``<config>/sandbox/`` (never overwriting one there), says
    so, and restarts the group's running proxy on the copy.  Other groups write where they read.
    """
    if not is_dir_group(group_dir) or Path(policy_dir).resolve() != default_policy_dir():
        return Path(policy_dir)
    own = user_config_dir() / "sandbox"
    own.mkdir(parents=True, exist_ok=True)
    copied = []
    for src in sorted(default_policy_dir().glob("*.txt")):
        if src.is_file() and not (own / src.name).exists():
            shutil.copyfile(src, own / src.name)
            copied.append(src.name)
    say(f"the --dir group now has its own policy: copied chtop's shipped {', '.join(copied) or 'files'} "
        f"to {own}/ (edit them there; chtop's later defaults will not replace them)")
    running = status(group_dir)
    if running and Path(running["policy_dir"]) != own.resolve():
        stop_proxy(group_dir)
        ensure_proxy(group_dir, own)
        say("restarted the --dir group's proxy on it (its open connections were cut)")
    return own


def add_entries(policy_dir: Path, specs: list[str], kind: str, worktree: str | None,
                group_dir: Path | None = None) -> list[str]:
    """Validate every entry first, then append each once; lines saying what changed."""
    if not specs:
        raise UsageError(f"give at least one domain: inv net.{kind} DOMAIN...")
    if worktree is not None and group_dir is not None:
        require_worktree(group_dir, worktree)
    if group_dir is not None:
        policy_dir = writable_policy_dir(group_dir, policy_dir)
    path = list_path(policy_dir, kind, worktree)
    if not path.exists() and worktree is None and kind == "allow":
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
    items = pending(group_dir, Policy(policy_dir))
    if not items:
        return "no blocked domains waiting for a decision"
    lines = [f"{'COUNT':>6}  {'LAST SEEN':19}  DOMAIN"]
    for item in items:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item["last"]))
        wt = f"  (worktree {item['worktree']})" if item["worktree"] else ""
        lines.append(f"{item['count']:>6}  {when}  {item['host']}{wt}")
    cmd = command_for_group(group_dir)
    lines.append(f"approve with `{cmd} net.allow DOMAIN`, refuse for good with `{cmd} net.deny DOMAIN`")
    return "\n".join(lines)


def log_path(group_dir: Path) -> Path:
    return net_dir(group_dir) / HUMAN
