"""A host's approval queue, asked and answered from here: its own ``net.pending --json``,
``net.hold`` and ``net.allow``/``net.deny``, run by its chtop over ssh.

The host is a place, not a second implementation: the decision is taken by the host's own
``net.allow``/``net.deny`` (its lists, its proxy, its audit log).  What the host answers is a
stranger's data: its pending list is JSON checked against ``PENDING`` (types, lengths, and the
characters a host name, a host:port and a worktree name may have), so a row shown here, and the
domain a key sends back, can only be a name the proxy could have logged.
"""

from __future__ import annotations

from ..core.errors import ChtopError
from ..core.term import inert_line
from . import answers, install
from .records import Host
from .ssh import run_on

# a host as the proxy logs one: a DNS name (or a bare IPv4); an IPv6 address in brackets
HOST_PATTERN = r"(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]{2,45}\])"
HOST_NAME = answers.Matching(HOST_PATTERN, "a host name")
SPEC = answers.Matching(HOST_PATTERN + r"(?::[0-9]{1,5})?", "a host or host:port")

PENDING = [{"host": HOST_NAME, "port": int, "spec": SPEC, "worktree?": answers.WORKTREE_NAME,
            "count": int, "last": (int, float), "held": bool, "waiting": int}]

HOLD_SECONDS = 30          # one `net.hold` there: its watcher stays attached this long, then again


def ask_pending(host: Host, quiet: bool = False) -> list[dict]:
    """The host's blocked requests waiting for a decision, newest first, each checked; BadAnswer
    (nothing of it kept) when any part of the answer is not what was asked."""
    out = install.remote_inv(host, "net.pending", "--json", quiet=quiet).stdout
    items = answers.parse_answer(out, PENDING, f"host {host.name}: net.pending")
    for item in items:
        if not 0 < item["port"] < 65536:
            raise answers.BadAnswer(f"host {host.name}: net.pending: port {item['port']} is out of range")
    return items


def decision_args(domain: str, scope: str, worktree: str | None = None, ttl: str | None = None,
                  private: bool = False) -> list[str]:
    """The host's own ``net.allow``/``net.deny`` argv for one decision (the dash's scopes)."""
    if SPEC.problem(domain):
        raise ChtopError(f"{inert_line(domain)!r} is not a host or host:port", 2)
    if scope == "deny":
        return ["net.deny", domain]
    args = ["net.allow", domain]
    if scope in ("worktree", "once") and worktree:
        args += ["--worktree", worktree]
    if scope == "once":
        args.append("--once")
    if scope == "for":
        args += ["--for", ttl or "1h"]
    if private:
        args.append("--private")
    return args


def decide_there(host: Host, domain: str, scope: str, worktree: str | None = None, ttl: str | None = None,
                 private: bool = False) -> list[str]:
    """Carry out one decision on ``host`` with its own chtop; its output lines, inert (an error
    there is a ChtopError naming the host, with its stderr's tail)."""
    result = install.remote_inv(host, *decision_args(domain, scope, worktree, ttl, private), check=False,
                                quiet=True)
    lines = [inert_line(line) for line in result.stdout.splitlines() if line.strip()]
    if not result.ok:
        tail = " ".join(inert_line(line) for line in result.stderr.strip().splitlines()[-3:])
        raise ChtopError(f"host {host.name}: net decision failed (exit {result.returncode}): {tail}")
    return lines


def hold_there(host: Host, seconds: float = HOLD_SECONDS) -> None:
    """Keep a watcher attached to the host's proxy for ``seconds`` (its ``net.hold``), so its
    blocked requests are held until answered from here; returns when that time is over."""
    run_on(host, [host.python, "-m", "invoke", "net.hold", "--seconds", str(int(seconds))], host.toplevel,
           timeout=seconds + 30, quiet=True)
