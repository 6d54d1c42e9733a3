"""The net-allow.txt / net-deny.txt lists: read, re-read on change, judge, append.

Layers: the group lists in <policy_dir>/, plus an optional per-worktree
layer in <policy_dir>/worktrees/<name>/ (kept in the toplevel, which the
agent cannot write), plus allows for a while (``TimedAllows``: a JSON-lines
file in the group's state dir whose entries stop matching at their expiry).
Deny wins over allow in every layer combination.

A venv build's sandbox (``venv/sandboxed.py``) has its own socket, judged as ``build_identity(NAME)``:
the agent's layers of worktree NAME plus the build section, ``<policy_dir>/net-allow-build.txt``,
and the index hosts the host handed over when it opened that socket (``set_build_hosts``).  The
agent's own sockets never see either.  A request the build's lists do not allow is refused at once
(a build waits for no one's answer).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic import locked_for_update
from ..core.errors import PolicyError, UsageError
from ..core.places import check_worktree_name
from .hostmatch import DEFAULT_PORTS, BadHost, Entry, find_match, parse_entry

ALLOW = "net-allow.txt"
DENY = "net-deny.txt"
BUILD_ALLOW = "net-allow-build.txt"   # the build section: hosts for venv builds' sandboxes only
BUILD_MARK = "/build"                 # no worktree name holds a "/": the agent's identity never is one


def build_identity(worktree: str) -> str:
    """The identity of worktree ``worktree``'s venv-build socket at the proxy."""
    return check_worktree_name(worktree) + BUILD_MARK


def built_worktree(identity: str | None) -> str | None:
    """The worktree whose build ``identity`` is (``build_identity``), else None (an agent's, the group's)."""
    if identity is None or not identity.endswith(BUILD_MARK):
        return None
    return identity[: -len(BUILD_MARK)]


def list_path(policy_dir: Path, kind: str, worktree: str | None = None) -> Path:
    """Where a list lives: kind is 'allow' or 'deny'."""
    name = ALLOW if kind == "allow" else DENY
    if worktree is None:
        return Path(policy_dir) / name
    return Path(policy_dir) / "worktrees" / check_worktree_name(worktree) / name


def strip_comment(line: str) -> str:
    return line.split("#", 1)[0].strip()


def parse_list(text: str, *, allow_list: bool) -> tuple[list[Entry], list[str]]:
    """Entries and one message per refused line ("file:line: why" sans file)."""
    entries, errors = [], []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw)
        if not line:
            continue
        try:
            entries.append(parse_entry(line, allow_list=allow_list))
        except BadHost as exc:
            errors.append(f"line {lineno}: {line!r} ignored: {exc}")
    return entries, errors


class ListFile:
    """One list file, re-read whenever its (inode, size, mtime) changes.

    A missing file reads as empty; ``required`` makes the owner refuse to
    start instead (see NetPolicy).
    """

    def __init__(self, path: Path, *, allow_list: bool):
        self.path = Path(path)
        self.allow_list = allow_list
        self._key = None
        self.entries: list[Entry] = []
        self.errors: list[str] = []

    def current(self) -> list[Entry]:
        try:
            st = os.stat(self.path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            key = None
        if key != self._key:
            self._key = key
            if key is None:
                self.entries, self.errors = [], []
            else:
                try:
                    text = self.path.read_text(encoding="utf-8", errors="replace")
                except OSError as exc:
                    text, self.errors = "", [f"cannot read: {exc}"]
                self.entries, self.errors = parse_list(text, allow_list=self.allow_list)
        return self.entries


class TimedAllows:
    """Allows that expire: JSON lines ``{"host", "worktree", "until", "private"}``.

    Re-read when the file changes; an entry past its ``until`` (epoch
    seconds) stops matching at once, with no restart.  A missing file holds
    nothing.
    """

    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self._key = None
        self.items: list[tuple[Entry, str | None, float]] = []

    def _reload(self) -> None:
        try:
            st = os.stat(self.path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
        except (FileNotFoundError, TypeError):
            key = None
        if key == self._key:
            return
        self._key, self.items = key, []
        if key is None:
            return
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
                entry = parse_entry(str(rec["host"]) + (" private" if rec.get("private") else ""))
                self.items.append((entry, rec.get("worktree"), float(rec["until"])))
            except (ValueError, KeyError, TypeError, BadHost):
                continue

    def live(self, worktree: str | None, now: float | None = None) -> list[Entry]:
        """The entries in force now for a request on ``worktree``'s socket (None: the group's)."""
        if self.path is None:
            return []
        self._reload()
        now = time.time() if now is None else now
        return [e for e, wt, until in self.items if until > now and (wt is None or wt == worktree)]

    def expiry(self, host: str, worktree: str | None) -> float | None:
        self._reload()
        ends = [until for e, wt, until in self.items
                if (wt is None or wt == worktree) and find_match([e], host) is not None]
        return max(ends, default=None)


@dataclass
class Verdict:
    decision: str                 # "allowed", "blocked" or "denied"
    entry: Entry | None = None    # the entry that decided it
    reason: str = ""
    layer: str = "group"          # "group", "worktree", "timed" or "once"


@dataclass
class NetPolicy:
    """The lists of one policy dir, with per-worktree layers and allows for a while."""

    policy_dir: Path
    timed_path: Path | None = None

    def __post_init__(self):
        self.policy_dir = Path(self.policy_dir)
        self.timed = TimedAllows(self.timed_path)
        self.allow = ListFile(list_path(self.policy_dir, "allow"), allow_list=True)
        self.deny = ListFile(list_path(self.policy_dir, "deny"), allow_list=False)
        self._layers: dict[str, tuple[ListFile, ListFile]] = {}
        self.build_allow = ListFile(self.policy_dir / BUILD_ALLOW, allow_list=True)
        self.build_hosts: dict[str, list[Entry]] = {}    # worktree -> the index hosts of its build

    def set_build_hosts(self, worktree: str, specs: list[str]) -> list[str]:
        """The index hosts worktree ``worktree``'s build may reach (the host read them from pip's and
        uv's config); returns one message per refused spec."""
        entries, errors = parse_list("\n".join(str(s) for s in specs), allow_list=True)
        self.build_hosts[check_worktree_name(worktree)] = entries
        return errors

    def require(self) -> None:
        """Fail closed: without net-allow.txt nothing starts."""
        if not self.allow.path.is_file():
            raise PolicyError(
                f"{self.allow.path} is missing; the proxy will not start without an "
                f"allowlist (copy chtop's sandbox/{ALLOW} there)"
            )

    def layer(self, worktree: str) -> tuple[ListFile, ListFile]:
        if worktree not in self._layers:
            self._layers[worktree] = (
                ListFile(list_path(self.policy_dir, "allow", worktree), allow_list=True),
                ListFile(list_path(self.policy_dir, "deny", worktree), allow_list=False),
            )
        return self._layers[worktree]

    def judge(self, host: str, worktree: str | None = None, port: int | None = None) -> Verdict:
        """Deny (any layer) > allow (group, worktree, for a while) > blocked, for ``host`` on
        ``port`` (None: whether the host is covered on some port).  A build's identity
        (``build_identity``) is judged by ``judge_build``."""
        built = built_worktree(worktree)
        if built is not None:
            return self.judge_build(host, built, port)
        layers = [("group", self.allow, self.deny)]
        if worktree is not None:
            wa, wd = self.layer(worktree)
            layers.append(("worktree", wa, wd))
        for name, _, deny in layers:
            hit = find_match(deny.current(), host, port, default_ports=None)
            if hit is not None:
                return Verdict("denied", hit, f"denied by {deny.path.name} ({name})", name)
        for name, allow, _ in layers:
            hit = find_match(allow.current(), host, port)
            if hit is not None:
                return Verdict("allowed", hit, f"allowed by {hit.text!r} ({name})", name)
        timed = self.timed.live(worktree)
        hit = find_match(timed, host, port)
        if hit is not None:
            until = time.strftime("%H:%M:%S", time.localtime(self.timed.expiry(host, worktree) or 0))
            return Verdict("allowed", hit, f"allowed for a while ({hit.spec}, until {until})", "timed")
        if port is not None:
            other = [e for _, allow, _ in layers for e in allow.current()] + timed
            hit = find_match(other, host)
            if hit is not None:
                return Verdict("blocked", None, f"port {port} not allowed ({hit.text!r} allows "
                               f"{', '.join(map(str, sorted(hit.ports or DEFAULT_PORTS)))})")
        return Verdict("blocked", None, "not on the allowlist")

    def judge_build(self, host: str, worktree: str, port: int | None = None) -> Verdict:
        """Worktree ``worktree``'s build: what its agent may reach, plus the build section and the
        index hosts; anything else is refused ("denied": no hold, a build waits for no answer)."""
        verdict = self.judge(host, worktree, port)
        if verdict.decision != "blocked":
            return verdict
        for name, entries in (("build", self.build_allow.current()), ("index", self.build_hosts.get(worktree, []))):
            hit = find_match(entries, host, port)
            if hit is not None:
                return Verdict("allowed", hit, f"allowed for the venv build by {hit.text!r} ({name})", "build")
        return Verdict("denied", None, f"not allowed for the venv build of {worktree} (the index hosts pip and "
                       f"uv are configured for, and {BUILD_ALLOW}): add it to the toplevel's sandbox/{BUILD_ALLOW}",
                       "build")

    def sizes(self) -> dict:
        return {"allow": len(self.allow.current()), "deny": len(self.deny.current())}

    def errors(self) -> list[str]:
        out = []
        for lf in [self.allow, self.deny, self.build_allow] + [f for pair in self._layers.values() for f in pair]:
            lf.current()
            out += [f"{lf.path}: {e}" for e in lf.errors]
        return out


def append_entry(path: Path, spec: str, *, allow_list: bool) -> tuple[bool, str]:
    """Add one entry to a list file, once, under an exclusive lock.

    Returns (changed, message).  Raises UsageError for a bad entry.  The
    file's existing lines and comments are kept byte for byte.
    """
    if any(c in spec for c in "\r\n#"):
        raise UsageError(f"bad entry {spec!r}: newline or '#' not allowed")
    try:
        entry = parse_entry(spec, allow_list=allow_list)
    except BadHost as exc:
        raise UsageError(f"refused {spec!r}: {exc}") from None
    text = entry.spec + (" private" if entry.private else "")
    with locked_for_update(path) as fh:
        existing = fh.read()
        entries, _ = parse_list(existing, allow_list=False)
        for old in entries:
            if old.host == entry.host and old.private == entry.private and old.ports == entry.ports:
                return False, f"{entry.spec}: already in {path}"
        prefix = "" if not existing or existing.endswith("\n") else "\n"
        fh.seek(0, os.SEEK_END)
        fh.write(prefix + text + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return True, f"{entry.spec}: added to {path}"
