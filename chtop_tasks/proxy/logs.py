"""The proxy's two logs: a human one and JSON lines, plus readers for them.

Both live in <group_dir>/.chtop/net/.  One JSON record per connection:
time, client, worktree, method, host, port, decision, status, reason,
bytes_up, bytes_down, ms.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..core.places import state_dir
from ..core.term import inert_line
from .hostmatch import authority_spec

HUMAN = "proxy.log"
JSONL = "requests.jsonl"
TIMED = "allow-timed.jsonl"       # allows for a while (see policy.TimedAllows)
DECISIONS = "decisions.jsonl"     # the approvals audit log (see approvals.py)
ROTATE_BYTES = 20 * 1024 * 1024


def net_dir(group_dir: Path) -> Path:
    return state_dir(group_dir) / "net"


def timed_allows_path(group_dir: Path) -> Path:
    return net_dir(group_dir) / TIMED


class RequestLog:
    """Append-only writer; rotates each file to .1 past ROTATE_BYTES."""

    def __init__(self, directory: Path, line_buffered: bool = True):
        self.line_buffered = line_buffered   # else the owner calls flush() soon after writes
        self._queue: list[dict] = []
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._human = self._open(HUMAN)
        self._json = self._open(JSONL)
        self._writes = 0

    def _open(self, name):
        return open(self.dir / name, "a", encoding="utf-8", buffering=1 if self.line_buffered else 65536)

    def flush(self):
        queued, self._queue = self._queue, []
        for rec in queued:
            self.record(rec)
        self._human.flush()
        self._json.flush()

    def queue(self, rec: dict) -> None:
        """Record later (at the next flush): keeps formatting off the hot path."""
        rec.setdefault("time", round(time.time(), 3))
        self._queue.append(rec)

    def _maybe_rotate(self):
        self._writes += 1
        if self._writes % 512:
            return
        for name, attr in ((HUMAN, "_human"), (JSONL, "_json")):
            path = self.dir / name
            try:
                if path.stat().st_size > ROTATE_BYTES:
                    getattr(self, attr).close()
                    os.replace(path, path.with_name(name + ".1"))
                    setattr(self, attr, self._open(name))
            except OSError:
                pass

    def note(self, text: str) -> None:
        """A human-only line (start, stop, list errors); what the agent sent in it (method, host,
        reason) is made inert, one line: `net.log` shows the file through `tail`."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._human.write(f"{stamp} {inert_line(text)}\n")

    def record(self, rec: dict) -> None:
        rec.setdefault("time", round(time.time(), 3))
        self._json.write(json.dumps(rec, separators=(",", ":")) + "\n")
        where = f" [{rec['worktree']}]" if rec.get("worktree") else ""
        target = f"{rec.get('host')}:{rec.get('port')}" if rec.get("host") else "-"
        extra = ""
        if rec.get("bytes_up") or rec.get("bytes_down"):
            extra = f" up={rec.get('bytes_up', 0)} down={rec.get('bytes_down', 0)}"
        self.note(
            f"{rec.get('decision', '?').upper():8} {rec.get('method', '-')} {target} "
            f"-> {rec.get('status', '-')}{where} {rec.get('reason', '')}{extra}"
        )
        self._maybe_rotate()

    def close(self):
        self.flush()
        self._human.close()
        self._json.close()


def read_records(group_dir: Path):
    """Every JSON record, oldest first (rotated file included); bad lines skipped."""
    d = net_dir(group_dir)
    for path in (d / (JSONL + ".1"), d / JSONL):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict):
                        yield rec
        except FileNotFoundError:
            continue


def pending_item(host: str, port, worktree: str | None) -> dict:
    """One blocked (host, port, worktree) waiting for a decision: ``spec`` is what ``net.allow``
    takes for it (the host, with the port when it is not 443 or 80)."""
    port = port if isinstance(port, int) else 443
    return {"host": host, "port": port, "spec": authority_spec(host, port), "worktree": worktree,
            "count": 0, "last": 0}


def pending(group_dir: Path, policy) -> list[dict]:
    """Blocked hosts (and ports) not yet allowed or denied: count and last seen, newest first."""
    seen: dict[tuple, dict] = {}
    for rec in read_records(group_dir):
        if rec.get("decision") != "blocked" or not rec.get("host"):
            continue
        fresh = pending_item(rec["host"], rec.get("port"), rec.get("worktree"))
        item = seen.setdefault((fresh["spec"], fresh["worktree"]), fresh)
        item["count"] += 1
        item["last"] = max(item["last"], rec.get("time", 0))
    out = []
    for item in seen.values():
        if policy.judge(item["host"], item["worktree"], item["port"]).decision == "blocked":
            out.append(item)
    out.sort(key=lambda i: i["last"], reverse=True)
    return out
