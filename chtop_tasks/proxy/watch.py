"""``inv net.watch``: prompt for each newly blocked domain (Appendix F, B and C).

While a watcher is attached, the proxy holds a blocked request open (up to
CHTOP_PROXY_HOLD_SECONDS) until the answer comes; the answer is applied
(list written, or allow-once sent) and the held request proceeds at once.
"""

from __future__ import annotations

import json
import os
import select
import sys
from pathlib import Path

from ..errors import ChtopError
from . import approvals, control_protocol
from .policy import append_entry, list_path

KEYS = {"o": "allow-once", "a": "allow-always", "d": "deny", "i": "ignore",
        "w": "allow-worktree", "t": "allow-for", "": "ignore"}   # the prompt's keys for control_protocol.ANSWERS
ALLOW_FOR = 3600.0      # the "[t] allow for 1h" answer
# how each answer is audited (approvals.Decision scopes); "ignore" decides nothing
AUDIT_SCOPES = {"allow-once": "once", "allow-always": "group", "deny": "deny", "allow-worktree": "worktree",
                "allow-for": "for"}


def _prompt(event: dict) -> str:
    where = f" from worktree {event['worktree']}" if event.get("worktree") else ""
    extra = f"  [w] allow for {event['worktree']} only" if event.get("worktree") else ""
    return (f"\nBLOCKED {event['host']}:{event['port']}{where} (held up to {event['hold']:g}s)\n"
            f"  [o] allow once  [t] allow for 1h  [a] allow always  [d] deny always  [i] ignore{extra} ? ")


def apply_answer(policy_dir: Path, event: dict, answer: str, group_dir: Path | None = None) -> str:
    """Write the list an answer implies; return what changed."""
    host = event["host"]
    if answer == "allow-always":
        return append_entry(list_path(policy_dir, "allow"), host, allow_list=True)[1]
    if answer == "deny":
        return append_entry(list_path(policy_dir, "deny"), host, allow_list=False)[1]
    if answer == "allow-worktree" and event.get("worktree"):
        return append_entry(list_path(policy_dir, "allow", event["worktree"]), host,
                            allow_list=True)[1]
    if answer == "allow-once":
        return f"{host}: allowed once (this held request only; the next one is blocked again)"
    if answer == "allow-for" and group_dir is not None:
        return approvals.add_timed_allow(group_dir, approvals.Decision(host, "for", ttl=ALLOW_FOR))
    return f"{host}: left blocked"


def audit(group_dir: Path, event: dict, answer: str) -> None:
    """One audit line for a decision taken at the prompt."""
    scope = AUDIT_SCOPES.get(answer)
    if scope is not None:
        approvals.record_decision(group_dir, approvals.Decision(
            event["host"], scope, event.get("worktree") if scope in ("once", "worktree") else None,
            ALLOW_FOR if scope == "for" else None), "net.watch")


def watch(group_dir: Path, policy_dir: Path, stdin=None, stdout=None) -> int:
    """Attach to the proxy and prompt until stdin closes (0) or the proxy stops (1)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    sock, _, sbuf = control_protocol.attach_watcher(group_dir)
    queue: list[dict] = []
    prompting = None
    ibuf = b""
    in_fd = stdin.fileno()
    print("watching for blocked requests (Ctrl-D to stop) ...", file=stdout, flush=True)
    try:
        while True:
            if prompting is None and queue:
                prompting = queue.pop(0)
                print(_prompt(prompting), end="", file=stdout, flush=True)
            ready, _, _ = select.select([sock, in_fd], [], [])
            if sock in ready:
                chunk = sock.recv(65536)
                if not chunk:
                    print("\nthe proxy stopped", file=stdout, flush=True)
                    return 1
                sbuf += chunk
                while b"\n" in sbuf:
                    line, sbuf = sbuf.split(b"\n", 1)
                    msg = json.loads(line)
                    if msg.get("event") == "blocked":
                        known = [e["host"] for e in queue] + ([prompting["host"]] if prompting else [])
                        if msg["host"] not in known:
                            queue.append(msg)
            if in_fd in ready:
                chunk = os.read(in_fd, 1024)
                if not chunk:
                    return 0
                ibuf += chunk
                while b"\n" in ibuf and prompting is not None:
                    line, ibuf = ibuf.split(b"\n", 1)
                    key = line.decode(errors="replace").strip().lower()[:1]
                    answer = KEYS.get(key)
                    if answer is None or (answer == "allow-worktree" and not prompting.get("worktree")):
                        print("  answer o, a, d, i" + (" or w" if prompting.get("worktree") else "")
                              + " ? ", end="", file=stdout, flush=True)
                        continue
                    try:
                        said = apply_answer(policy_dir, prompting, answer, group_dir)
                        audit(group_dir, prompting, answer)
                    except ChtopError as exc:
                        said, answer = f"{exc} (left blocked)", "ignore"
                    control_protocol.decide(sock, prompting["host"], answer)
                    print(f"  {said}", file=stdout, flush=True)
                    prompting = None
                if prompting is None:
                    ibuf = b""
    finally:
        sock.close()
