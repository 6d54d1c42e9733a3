"""The plain functions behind ``inv net.*`` (the tasks only parse flags)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..core.places import command_for_group
from ..core.term import inert_line
from ..workspace.targets import group_and_policy_for
from .control import status
from .hostmatch import authority_spec
from .logs import HUMAN, net_dir, read_records
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


REFUSED = ("blocked", "denied")
NON_PUBLIC = "resolves to non-public address"
NOT_FOR_BUILD = "not allowed for the venv build"     # policy.judge_build's refusal


def refusals_since(group_dir: Path, identity: str, since: float) -> list[dict]:
    """What the proxy refused ``identity`` (a worktree's name, or a venv build's identity) since
    ``since`` (a ``time.time()``): its blocked and denied requests, and allowed hosts it could not
    reach; the last record of each host and port, in the order they were first refused."""
    found: dict[tuple, dict] = {}
    for rec in read_records(group_dir):
        when = rec.get("time")
        if rec.get("worktree") != identity or not isinstance(when, (int, float)) or when < since:
            continue
        if rec.get("decision") in REFUSED or (rec.get("decision") == "allowed" and rec.get("status") == 502):
            key = (rec.get("host"), rec.get("port"))
            found[key] = rec      # a key keeps its first place in the dict
    return list(found.values())


def refusal_advice(rec: dict, *, worktree: str | None, build: bool) -> str:
    """One line for a refused request: the host, why, and the line or command that allows it.
    ``build``: the refusal was a venv build's, whose own allowance is ``sandbox/net-allow-build.txt``."""
    host = rec.get("host") or "?"
    port = rec.get("port") if isinstance(rec.get("port"), int) else 443
    spec = authority_spec(host, port)
    reason = str(rec.get("reason") or rec.get("decision"))
    if NON_PUBLIC in reason:
        fix = (f"if that is intended, add the line `{spec} private` to sandbox/net-allow-build.txt" if build
               else f"if that is intended: inv net.allow --private {spec}")
    elif build and rec.get("decision") in REFUSED and reason.startswith(NOT_FOR_BUILD):
        reason = ("not on the venv build's allowance (the index hosts pip and uv are configured for, and "
                  "sandbox/net-allow-build.txt)")
        fix = f"add the line `{spec}` to sandbox/net-allow-build.txt (builds only), or `inv net.allow {spec}`"
    elif rec.get("decision") == "denied":
        fix = "it is on a deny list (sandbox/net-deny.txt); remove it there to allow it"
    elif rec.get("decision") == "blocked":
        scope = f" --worktree {worktree}" if worktree else ""
        fix = f"allow it: inv net.allow{scope} {spec}"
    else:
        fix = "the host is allowed but could not be reached from this machine"
    return inert_line(f"the proxy refused {spec}: {reason}; {fix}")


def refusal_lines(group_dir: Path, identity: str, worktree: str, build: bool, since: float) -> list[str]:
    """``refusal_advice`` for each host the proxy refused ``identity`` since ``since``.  The proxy
    writes its log in batches, so a client may have its 403, and its sandbox end, before the record
    is on disk: asking the running proxy for its status first has it write what it queued."""
    status(group_dir)
    return [refusal_advice(rec, worktree=worktree, build=build)
            for rec in refusals_since(group_dir, identity, since)]


def main(argv: list[str]) -> int:
    """``python -m chtop_tasks.proxy.report GROUP_DIR WORKTREE SINCE``: what the proxy refused that
    worktree's sandbox since SINCE, a ``chtop:`` line each on stderr (``sbox.run``'s waiting shell
    asks it when the sandbox failed)."""
    if len(argv) != 3:
        print("usage: python -m chtop_tasks.proxy.report GROUP_DIR WORKTREE SINCE", file=sys.stderr)
        return 2
    for line in refusal_lines(Path(argv[0]), argv[1], argv[1], False, float(argv[2])):
        print(f"chtop: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
