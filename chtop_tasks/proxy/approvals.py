"""Scoped approvals of blocked domains, and their audit log.

One decision (from ``inv net.allow``/``net.deny``, ``inv net.watch`` or
``inv dash``) has a scope:

- ``group``: the domain goes on ``sandbox/net-allow.txt`` (every worktree);
- ``worktree``: on that worktree's layer ``sandbox/worktrees/<name>/net-allow.txt``;
- ``for``: allowed for a while: a line in ``<group>/.chtop/net/allow-timed.jsonl``
  (for the group or one worktree) that stops matching at its expiry;
- ``once``: only the request(s) the proxy holds right now (while a watcher
  is attached) go through; the next one is blocked again;
- ``deny``: on ``sandbox/net-deny.txt`` (or the worktree's), never asked again.

Held requests are released at once after any decision.  Every decision
appends one JSON line to ``<group>/.chtop/net/decisions.jsonl``: when, who
(user and interface), domain, scope, worktree, ttl.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic import locked_for_update, write_atomic
from ..core.errors import ChtopError, Refused, UsageError
from ..core.places import check_worktree_name, command_for_group, default_policy_dir, is_dir_group, user_config_dir
from ..core.term import say
from ..workspace.targets import is_feature_worktree
from . import control_protocol
from .control import ensure_proxy, status, stop_proxy
from .hostmatch import BadHost, Entry, is_ip, parse_entry
from .logs import DECISIONS, net_dir, pending, pending_item, timed_allows_path
from .policy import NetPolicy, append_entry, list_path

SCOPES = ("group", "worktree", "for", "once", "deny")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``15m``, ``2h``, ``1d``, ``1h30m`` or a plain number of seconds."""
    spec = str(text).strip().lower()
    parts = _DURATION_PART.findall(spec)
    if not spec or "".join(n + u for n, u in parts) != spec.replace(" ", ""):
        raise UsageError(f"bad duration {text!r}: use e.g. 90s, 15m, 2h, 1d or 1h30m")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"bad duration {text!r}: must be longer than 0 s")
    return seconds


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class Decision:
    """What to do about one domain; computed (and checked) before anything is written."""

    domain: str                 # canonical host
    scope: str                  # one of SCOPES
    worktree: str | None = None
    ttl: float | None = None    # seconds, scope "for" only
    private: bool = False
    ports: frozenset[int] | None = None   # named ports (None: an allow covers 443 and 80)

    @property
    def spec(self) -> str:
        """The domain as its list line names it: with its ports, when it names any."""
        return Entry(self.domain, is_ip(self.domain), self.private, self.domain, self.ports).spec

    @property
    def label(self) -> str:
        where = f" for worktree {self.worktree}" if self.worktree else " for the group"
        if self.scope == "for":
            return f"allow for {format_duration(self.ttl)}{where}"
        if self.scope == "once":
            return "allow once (the held request only)"
        return {"group": "allow for the group", "worktree": f"allow for worktree {self.worktree}",
                "deny": "deny" + where}[self.scope]


def plan_decision(domain: str, *, worktree: str | None = None, once: bool = False, ttl: str | float | None = None,
                  private: bool = False, deny: bool = False) -> Decision:
    """The Decision the flags ask for, or UsageError (nothing is touched)."""
    if once and ttl:
        raise UsageError("--once and --for exclude each other: pick one")
    if deny and (once or ttl or private):
        raise UsageError("net.deny takes no --once, --for or --private")
    if worktree:
        check_worktree_name(worktree)
    spec = str(domain).strip() + (" private" if private else "")
    if any(c in spec for c in "\r\n#"):
        raise UsageError(f"bad entry {domain!r}: newline or '#' not allowed")
    try:
        entry = parse_entry(spec, allow_list=not deny)
    except BadHost as exc:
        raise UsageError(f"refused {domain!r}: {exc}") from None
    seconds = None
    if deny:
        scope = "deny"
    elif once:
        scope = "once"
    elif ttl:
        scope, seconds = "for", ttl if isinstance(ttl, (int, float)) else parse_duration(ttl)
    else:
        scope = "worktree" if worktree else "group"
    return Decision(entry.host, scope, worktree or None, seconds, private, entry.ports)


# -- where approvals may be written -------------------------------------------------------------

def require_worktree(group_dir: Path, worktree: str) -> None:
    """``--worktree NAME`` must name an existing feature worktree of this group."""
    if is_dir_group(group_dir):
        raise UsageError(f"--worktree {worktree}: the --dir group has no worktrees (run this in a workspace, "
                         "or leave out --worktree for the group's lists)")
    if not is_feature_worktree(group_dir, worktree):
        from ..workspace.suggest import require_feature_worktree

        try:
            require_feature_worktree(group_dir, worktree)
        except UsageError as exc:
            raise UsageError(f"--worktree {worktree}: {exc}") from None


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


# -- acting --------------------------------------------------------------------------------------

def add_timed_allow(group_dir: Path, d: Decision, now: float | None = None) -> str:
    """Append one allow-for-a-while line (dropping expired ones) under a lock."""
    now = time.time() if now is None else now
    until = now + float(d.ttl)
    path = timed_allows_path(group_dir)
    with locked_for_update(path) as fh:
        kept = [line for line in fh.read().splitlines() if _still_live(line, now)]
        kept.append(json.dumps({"host": d.spec, "worktree": d.worktree, "until": round(until, 3),
                                "private": d.private, "added": round(now, 3)}))
        write_atomic(path, "".join(line + "\n" for line in kept))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(until))
    where = f" (worktree {d.worktree})" if d.worktree else ""
    return f"{d.spec}: allowed{where} until {stamp} ({format_duration(d.ttl)})"


def _still_live(line: str, now: float) -> bool:
    try:
        return float(json.loads(line)["until"]) > now
    except (ValueError, KeyError, TypeError):
        return False


def release_held(group_dir: Path, host: str, answer: str, worktree: str | None) -> int:
    """Tell the running proxy to answer its held requests for ``host``; 0 when none (or no proxy)."""
    try:
        reply = control_protocol.request(group_dir, control_protocol.decide_message(host, answer, worktree))
    except (OSError, ValueError):
        return 0
    if not reply.get("ok"):
        raise ChtopError(f"the proxy refused the decision for {host}: {reply.get('error')}")
    return int(reply.get("released", 0))


_RELEASE_ANSWER = {"group": "allow-always", "worktree": "allow-worktree", "for": "allow-for", "deny": "deny"}


def held_for(group_dir: Path, host: str, worktree: str | None) -> list[dict]:
    info = status(group_dir) or {}
    return [h for h in info.get("held", []) if h["host"] == host and (worktree is None or h["worktree"] == worktree)]


def apply_decision(group_dir: Path, policy_dir: Path, d: Decision, via: str) -> list[str]:
    """Carry out one decision: its list entry, its audit record, then the held requests it covers
    released (so a request it let through is always in the audit log); lines saying what changed."""
    if d.scope == "once":
        if not held_for(group_dir, d.domain, d.worktree):
            where = f" on worktree {d.worktree}'s socket" if d.worktree else ""
            raise Refused(
                f"no request for {d.domain}{where} is held right now, so there is nothing to allow once.\n"
                f"The proxy holds blocked requests only while `inv net.watch` or `inv dash` is attached; "
                f"to allow later requests use `inv net.allow {d.domain} --for 1h` (or without --for, for good)")
        record_decision(group_dir, d, via)     # audited before anything it allows goes through
        released = release_held(group_dir, d.domain, "allow-once-private" if d.private else "allow-once", d.worktree)
        return [f"{d.domain}: {released} held request(s) let through once; the next one is blocked again"]
    lines = [_write_list_entry(group_dir, policy_dir, d)]
    record_decision(group_dir, d, via)         # audited before the held requests it covers go through
    released = release_held(group_dir, d.domain, _RELEASE_ANSWER[d.scope], d.worktree)
    if released:
        lines.append(f"  {released} held request(s) released")
    if d.scope != "deny" and policy_for(group_dir, policy_dir).judge(d.domain, d.worktree).decision == "denied":
        lines.append(f"  note: {d.domain} is also denied (net-deny.txt wins)")
    return lines


def _write_list_entry(group_dir: Path, policy_dir: Path, d: Decision) -> str:
    if d.scope == "for":
        return add_timed_allow(group_dir, d)
    kind = "deny" if d.scope == "deny" else "allow"
    path = list_path(policy_dir, kind, d.worktree)
    if not path.exists() and d.worktree is None:
        raise ChtopError(f"{path} does not exist", 2)
    return append_entry(path, d.spec + (" private" if d.private else ""), allow_list=(kind == "allow"))[1]


def decide_all(group_dir: Path, policy_dir: Path, domains: list[str], via: str, **flags) -> list[str]:
    """Plan every domain first (a bad one changes nothing), then apply each."""
    if not domains:
        verb = "deny" if flags.get("deny") else "allow"
        raise UsageError(f"give at least one domain: inv net.{verb} DOMAIN...")
    decisions = [plan_decision(domain, **flags) for domain in domains]
    if flags.get("worktree"):
        require_worktree(group_dir, flags["worktree"])
    policy_dir = writable_policy_dir(group_dir, policy_dir)
    return [line for d in decisions for line in apply_decision(group_dir, policy_dir, d, via)]


# -- what is waiting, and the audit log ----------------------------------------------------------

def policy_for(group_dir: Path, policy_dir: Path) -> NetPolicy:
    """The policy the proxy applies: lists, worktree layers and the allows for a while."""
    return NetPolicy(policy_dir, timed_allows_path(group_dir))


def pending_requests(group_dir: Path, policy_dir: Path, info: dict | None = None,
                     blocked: list[dict] | None = None) -> list[dict]:
    """Blocked and not yet decided, newest first: host, port, spec (what ``net.allow`` takes),
    worktree, count, last, held, waiting.

    ``blocked`` is the log's blocked requests per (host, worktree) when the
    caller keeps them (the dashboard reads the log incrementally); else the
    log is read here.  Held requests (known only to the running proxy until
    they finish) are merged in; ``info`` is the proxy's status when the
    caller has it.
    """
    policy = policy_for(group_dir, policy_dir)
    info = status(group_dir) if info is None else info     # first: the proxy writes out its log then
    if blocked is None:
        undecided = pending(group_dir, policy)
    else:
        undecided = [dict(i) for i in blocked
                     if policy.judge(i["host"], i["worktree"], i.get("port")).decision == "blocked"]
    def key(item: dict) -> tuple:      # host:port apart (``spec``: the port named unless 443 or 80)
        return (item.get("spec", item["host"]), item["worktree"])

    items = {key(i): dict(i, held=False, waiting=0) for i in undecided}
    for hold in (info or {}).get("held", []):
        fresh = pending_item(hold["host"], hold.get("port"), hold["worktree"])
        item = items.setdefault(key(fresh), fresh)
        item.update(held=True, waiting=hold["waiting"], last=max(item["last"], hold["since"]))
        item["count"] += hold["waiting"]
    return sorted(items.values(), key=lambda i: i["last"], reverse=True)


def who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def decisions_path(group_dir: Path) -> Path:
    return net_dir(group_dir) / DECISIONS


def record_decision(group_dir: Path, d: Decision, via: str, now: float | None = None) -> dict:
    """Append one line to the audit log and return it."""
    now = time.time() if now is None else now
    rec = {"time": round(now, 3), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
           "user": who(), "via": via, "domain": d.spec, "scope": d.scope, "worktree": d.worktree,
           "ttl": d.ttl, "private": d.private}
    with locked_for_update(decisions_path(group_dir)) as fh:
        fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return rec


def read_decisions(group_dir: Path) -> list[dict]:
    try:
        text = decisions_path(group_dir).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def format_decisions(group_dir: Path, lines: int = 40) -> str:
    recs = read_decisions(group_dir)[-lines:]
    if not recs:
        return f"no decisions yet ({decisions_path(group_dir)})"
    rows = [f"{'WHEN':19}  {'WHO':22}  {'SCOPE':8}  {'WORKTREE':12}  {'TTL':5}  DOMAIN"]
    for r in recs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("time", 0)))
        ttl = format_duration(r["ttl"]) if r.get("ttl") else "-"
        rows.append(f"{when}  {(str(r.get('user')) + ' (' + str(r.get('via')) + ')'):22}  {r.get('scope', '?'):8}  "
                    f"{r.get('worktree') or '-':12}  {ttl:5}  {r.get('domain')}")
    return "\n".join(rows)


SCOPE_CHOICES = [
    ("{cmd} net.allow DOMAIN", "every worktree of the group, for good"),
    ("{cmd} net.allow DOMAIN --worktree NAME", "that worktree only"),
    ("{cmd} net.allow DOMAIN --for 2h", "for a while (add --worktree NAME for one worktree)"),
    ("{cmd} net.allow DOMAIN --once", "only the request held now (while net.watch or dash is attached)"),
    ("{cmd} net.deny DOMAIN", "refuse for good, never asked again"),
]


def scope_choices(group_dir: Path) -> list[tuple[str, str]]:
    """The commands that decide, spelled with the command that works for this group (inv or chtop)."""
    cmd = command_for_group(group_dir)
    return [(text.format(cmd=cmd), what) for text, what in SCOPE_CHOICES]


def format_pending(group_dir: Path, policy_dir: Path) -> str:
    items = pending_requests(group_dir, policy_dir)
    if not items:
        return "no blocked domains waiting for a decision"
    lines = [f"{'COUNT':>6}  {'LAST SEEN':19}  {'HELD':4}  DOMAIN"]
    for item in items:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item["last"]))
        wt = f"  (worktree {item['worktree']})" if item["worktree"] else ""
        lines.append(f"{item['count']:>6}  {when}  {'yes' if item['held'] else 'no':4}  "
                     f"{item.get('spec', item['host'])}{wt}")
    choices = scope_choices(group_dir)
    width = max(len(cmd) for cmd, _ in choices)
    lines.append("decide with:")
    lines += [f"  {cmd:{width}}  # {what}" for cmd, what in choices]
    return "\n".join(lines)
