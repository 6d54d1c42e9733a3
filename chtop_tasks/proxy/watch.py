"""``inv net.watch``: prompt for each newly blocked domain.

While a watcher is attached, the proxy holds a blocked request open (up to
CHTOP_PROXY_HOLD_SECONDS) until the answer comes; the answer is applied
(list written, or allow-once sent) and the held request proceeds at once.
On a terminal one key answers (no Enter).  A prompt whose request expired or
whose client left is taken down; a request allowed here that the proxy then
refused anyway (a private address, an unreachable host) is reported.
"""

from __future__ import annotations

import json
import os
import select
import sys
import termios
import time
import tty
from pathlib import Path

from ..core.errors import ChtopError
from ..core.term import inert
from . import approvals, control_protocol
from .hostmatch import DEFAULT_PORTS, authority_spec
from .policy import append_entry, list_path

KEYS = {"o": "allow-once", "a": "allow-always", "d": "deny", "i": "ignore",
        "w": "allow-worktree", "t": "allow-for"}   # the prompt's keys for control_protocol.ANSWERS
ALLOW_FOR = 3600.0      # the "[t] allow for 1h" answer
# how each answer is audited (approvals.Decision scopes); "ignore" decides nothing
AUDIT_SCOPES = {"allow-once": "once", "allow-always": "group", "deny": "deny", "allow-worktree": "worktree",
                "allow-for": "for"}
ERASE_PROMPT = "\r\033[2K\033[1A\033[2K\r"   # a prompt's two lines, on a terminal
END_KEYS = (b"\x04",)           # Ctrl-D on a terminal in cbreak mode (no line discipline EOF)


def _prompt(event: dict) -> str:
    where = f" from worktree {event['worktree']}" if event.get("worktree") else ""
    extra = f"  [w] allow for {event['worktree']} only" if event.get("worktree") else ""
    return (f"\nBLOCKED {event['host']}:{event['port']}{where} (held up to {event['hold']:g}s)\n"
            f"  [o] allow once  [t] allow for 1h  [a] allow always  [d] deny always  [i] ignore{extra} ? ")


def ended_hold_text(event: dict) -> str:
    why = ("its hold time ran out: it was refused (403)" if event["event"] == "expired"
           else "its client gave up waiting")
    return f"{event['host']}: no answer needed any more, {why}"


def refused_anyway_text(event: dict) -> str:
    return (f"{event['host']}: allowed, but the proxy then refused the request anyway "
            f"({event.get('status')}: {event.get('reason')})")


def _held_ports(event: dict) -> frozenset[int] | None:
    """The port an allow at the prompt names: the held request's, unless an entry allows it anyway."""
    port = event.get("port")
    return None if not isinstance(port, int) or port in DEFAULT_PORTS else frozenset({port})


def apply_answer(policy_dir: Path, event: dict, answer: str, group_dir: Path | None = None) -> str:
    """Write the list an answer implies; return what changed.  An allow names the held request's
    port when it is not 443 or 80; a deny denies the host on every port."""
    host = event["host"]
    spec = authority_spec(host, event["port"]) if isinstance(event.get("port"), int) else host
    if answer == "allow-always":
        return append_entry(list_path(policy_dir, "allow"), spec, allow_list=True)[1]
    if answer == "deny":
        return append_entry(list_path(policy_dir, "deny"), host, allow_list=False)[1]
    if answer == "allow-worktree" and event.get("worktree"):
        return append_entry(list_path(policy_dir, "allow", event["worktree"]), spec,
                            allow_list=True)[1]
    if answer == "allow-once":
        return f"{host}: allowed once (this held request only; the next one is blocked again)"
    if answer == "allow-for" and group_dir is not None:
        return approvals.add_timed_allow(group_dir, approvals.Decision(host, "for", ttl=ALLOW_FOR,
                                                                       ports=_held_ports(event)))
    return f"{host}: left blocked"


def audit(group_dir: Path, event: dict, answer: str) -> None:
    """One audit line for a decision taken at the prompt."""
    scope = AUDIT_SCOPES.get(answer)
    if scope is not None:
        approvals.record_decision(group_dir, approvals.Decision(
            event["host"], scope, event.get("worktree") if scope in ("once", "worktree") else None,
            ALLOW_FOR if scope == "for" else None, ports=None if scope == "deny" else _held_ports(event)),
            "net.watch")


def watch(group_dir: Path, policy_dir: Path, stdin=None, stdout=None) -> int:
    """Attach to the proxy and prompt until stdin closes (0) or the proxy stops (1)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    sock, _, sbuf = control_protocol.attach_watcher(group_dir)
    queue: list[dict] = []
    prompting = None
    in_fd = stdin.fileno()
    on_terminal = os.isatty(in_fd)
    saved = termios.tcgetattr(in_fd) if on_terminal else None
    if on_terminal:
        tty.setcbreak(in_fd)         # one key answers; Ctrl-C still interrupts
    print("watching for blocked requests (Ctrl-D to stop) ...", file=stdout, flush=True)
    try:
        while True:
            if prompting is None and queue:
                prompting = queue.pop(0)
                print(inert(_prompt(prompting)), end="", file=stdout, flush=True)
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
                    elif msg.get("event") in ("expired", "gone"):
                        queue = [e for e in queue if e["host"] != msg["host"]]
                        if prompting is not None and prompting["host"] == msg["host"]:
                            erase = ERASE_PROMPT if stdout.isatty() else "\n"
                            print(f"{erase}  {inert(ended_hold_text(msg))}", file=stdout, flush=True)
                            prompting = None
                    elif msg.get("event") == "refused":
                        print(f"  {inert(refused_anyway_text(msg))}", file=stdout, flush=True)
            if in_fd in ready:
                chunk = os.read(in_fd, 1024)
                if not chunk or any(k in chunk for k in END_KEYS):
                    return 0
                for key in chunk.decode(errors="replace").lower():
                    if prompting is None:
                        break              # keys typed with no prompt up are dropped
                    if key.isspace():
                        continue
                    if on_terminal:
                        print(key, file=stdout, flush=True)     # cbreak does not echo
                    answer = KEYS.get(key)
                    if answer is None or (answer == "allow-worktree" and not prompting.get("worktree")):
                        print("  answer o, t, a, d, i" + (" or w" if prompting.get("worktree") else "")
                              + " ? ", end="", file=stdout, flush=True)
                        continue
                    try:
                        said = apply_answer(policy_dir, prompting, answer, group_dir)
                        audit(group_dir, prompting, answer)
                    except ChtopError as exc:
                        said, answer = f"{exc} (left blocked)", "ignore"
                    control_protocol.decide(sock, prompting["host"], answer)
                    print(f"  {inert(said)}", file=stdout, flush=True)
                    prompting = None
    finally:
        if saved is not None:
            termios.tcsetattr(in_fd, termios.TCSADRAIN, saved)
        sock.close()


def hold_open(group_dir: Path, seconds: float) -> int:
    """Keep a watcher attached for ``seconds`` without prompting (``net.hold``): meanwhile the proxy
    holds blocked requests open for an answer from elsewhere (the dashboard of another machine,
    through this host's ``net.allow``).  0 when the time ran out, 1 when the proxy stopped first."""
    sock, _, _ = control_protocol.attach_watcher(group_dir)
    deadline = time.monotonic() + seconds
    with sock:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([sock], [], [], left)
            if ready and not sock.recv(65536):          # its events are not needed: net.pending has them
                return 1
    return 0
