"""The notifier beside a group's proxy: held requests pushed to the phone, answered with a tap.

``python -m chtop_tasks.notify.held --group-dir G --policy-dir P [--detach]``
(started by ``proxy.control.ensure_proxy`` when ``notify.toml`` exists; one
per group, under a lock).  It attaches to the proxy's control socket as a
watcher, like ``inv net.watch`` (so blocked requests are held meanwhile),
and is a host process: nothing of it is reachable from a sandbox.

- A request held ``held_after`` seconds and still held (no one answered at
  a terminal) is pushed once per domain and worktree, with one button per
  configured decision, each carrying its one-time code (``codes``).  ntfy
  takes three buttons a message: with all four decisions the message has the
  first two and "More…", whose tap pushes a second message with the others.
- The reply topic is read over one long-lived outbound connection
  (reconnecting with backoff, catching up from the last message seen); a
  reply's code names the offer and the decision, which is applied exactly as
  ``inv net.allow``/``net.deny`` would (audit log ``via: phone``).  A wrong,
  reused or expired code is logged and changes nothing.
- It ends when the proxy stops (the control connection closes).

What it does is logged to ``<group>/.chtop/net/notify.log``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import sys
import threading
import time
from pathlib import Path

from ..core.errors import ChtopError
from ..core.term import visible
from ..proxy import approvals, control_protocol
from ..proxy.control import NOTIFIER_LOCK
from ..proxy.hostmatch import authority_spec
from ..proxy.logs import net_dir
from . import codes, config, ntfy

LOG_NAME = "notify.log"
LABELS = {"once": "Allow once", "1h": "Allow 1h", "always": "Allow", "deny": "Deny", codes.MORE: "More…"}
ONE_HOUR = 3600.0
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
MAX_REPLY = 200          # longer replies are no code of ours
MAX_UNANSWERED = 10      # an agent asking for many domains at once does not flood the phone


def plan_for_button(domain: str, worktree: str | None, button: str, port: int | None = None) -> approvals.Decision:
    """The Decision a button stands for: what ``net.watch``'s keys o, t, a and d decide (an allow
    names the held request's port when it is not 443 or 80; a deny denies the host on every port)."""
    spec = authority_spec(domain, port) if isinstance(port, int) else domain
    if button == "once":
        return approvals.plan_decision(spec, worktree=worktree, once=True)
    if button == "1h":
        return approvals.plan_decision(spec, ttl=ONE_HOUR)
    if button == "deny":
        return approvals.plan_decision(domain, deny=True)
    return approvals.plan_decision(spec)


def held_title(host: str, worktree: str | None) -> str:
    return visible(f"{worktree or 'a sandbox'} wants {host}")[:200]


def held_message(event: dict) -> tuple[str, str]:
    """The title and text of a held-request notification: the worktree, the domain, a short line."""
    who = event.get("worktree") or "a sandbox"
    text = (f"chtop: {who} asks to reach {event['host']}:{event['port']}; "
            f"the request is held up to {event['hold']:g}s")
    return held_title(event["host"], event.get("worktree")), visible(text)[:400]


class Notifier:
    def __init__(self, group_dir: Path, policy_dir: Path, cfg: config.NotifyConfig, log_path: Path | None = None):
        self.group_dir, self.policy_dir, self.cfg = Path(group_dir), Path(policy_dir), cfg
        self.log_path = log_path or net_dir(group_dir) / LOG_NAME
        self.offers = codes.Offers(cfg.secret)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.due: dict[tuple[str, str | None], tuple[float, dict, float]] = {}   # key -> (push at, event, held since)
        self.started = time.time()
        self.last_id: str | None = None

    def log(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {visible(text)}\n")

    # -- held requests -> notifications ----------------------------------------------------------
    def on_event(self, event: dict, now: float) -> None:
        key = (event.get("host"), event.get("worktree"))
        if event.get("event") == "blocked":
            since = float(event.get("since", now))
            self.due.setdefault(key, (since + self.cfg.held_after, event, since))
        elif event.get("event") in ("expired", "gone"):
            self.due.pop(key, None)
            with self.lock:
                self.offers.end(*key)
            self.log(f"hold ended: {key[0]}" + (f" [{key[1]}]" if key[1] else "")
                     + f" ({'its time ran out' if event['event'] == 'expired' else 'its client left'})")

    def next_due(self) -> float | None:
        return min((when for when, _, _ in self.due.values()), default=None)

    def push_due(self, now: float) -> None:
        for key, (when, event, since) in list(self.due.items()):
            if when > now:
                continue
            del self.due[key]
            if key not in self.still_held():
                continue                   # answered at a terminal meanwhile
            with self.lock:
                if self.offers.live(*key, now=now):
                    continue               # one notification per domain and worktree
                if self.offers.live_count(now) >= MAX_UNANSWERED:
                    self.log(f"not pushed: {key[0]} ({MAX_UNANSWERED} notifications await an answer already)")
                    continue
                first, more = config.button_layout(self.cfg.buttons)
                decisions = first + more + ((codes.MORE,) if more else ())
                offer = self.offers.make(key[0], key[1], decisions, since + float(event["hold"]))
                offer.port = event.get("port") if isinstance(event.get("port"), int) else None
            self.push(event, offer)

    def still_held(self) -> set[tuple[str, str | None]]:
        try:
            info = control_protocol.request(self.group_dir, {"cmd": "ping"})
        except (OSError, ValueError):
            return set()
        return {(h["host"], h["worktree"]) for h in info.get("held", [])}

    def actions(self, offer: codes.Offer, buttons: tuple[str, ...]) -> list[dict]:
        """The buttons' actions; "More…" leaves the notification up (its buttons stay usable)."""
        return [ntfy.http_action(self.cfg, LABELS[b], offer.codes[b], clear=(b != codes.MORE)) for b in buttons]

    def push(self, event: dict, offer: codes.Offer) -> None:
        title, text = held_message(event)
        first, more = config.button_layout(self.cfg.buttons)
        actions = self.actions(offer, first + ((codes.MORE,) if more else ()))
        try:
            ntfy.publish(self.cfg, title, text, actions, tags=["lock"])
        except ntfy.NtfyError as exc:
            with self.lock:
                offer.answered = True      # never delivered: the next hold of this domain is pushed anew
            self.log(f"could not push {title}: {exc}")
            return
        self.log(f"pushed: {title} (offer {offer.offer_id}, {', '.join(offer.codes)})")

    # -- replies -> decisions --------------------------------------------------------------------
    def on_reply(self, body: str, now: float | None = None) -> list[str] | None:
        """Apply the decision a reply's code stands for; None (logged) when the code is refused."""
        if len(body) > MAX_REPLY:
            self.log(f"ignored a reply: not a code of ours ({len(body)} characters)")
            return None
        with self.lock:
            try:
                offer, button = self.offers.redeem(body, now)
            except codes.Refusal as why:
                self.log(f"ignored a reply: {why} code {body.strip()[:40]!r}")
                return None
        if button == codes.MORE:
            return self.push_more(offer)
        where = f" [{offer.worktree}]" if offer.worktree else ""
        try:
            decision = plan_for_button(offer.domain, offer.worktree, button, offer.port)
            policy_dir = approvals.writable_policy_dir(self.group_dir, self.policy_dir)
            lines = approvals.apply_decision(self.group_dir, policy_dir, decision, "phone")
        except ChtopError as exc:
            self.log(f"reply {LABELS[button]!r} for {offer.domain}{where} not applied: {exc}")
            return None
        self.log(f"phone: {LABELS[button]} {offer.domain}{where}: " + "; ".join(line.strip() for line in lines))
        return lines

    def push_more(self, offer: codes.Offer) -> list[str] | None:
        """The second message of an offer: the choices past the first message's, same codes."""
        title = held_title(offer.domain, offer.worktree)
        _, more = config.button_layout(self.cfg.buttons)
        text = visible(f"chtop: more choices for {offer.domain}" + (f":{offer.port}" if offer.port else ""))
        try:
            ntfy.publish(self.cfg, title, text, self.actions(offer, more), tags=["lock"])
        except ntfy.NtfyError as exc:
            with self.lock:
                offer.more_asked = False       # not delivered: another tap on "More…" tries again
            self.log(f"could not push the other choices for {title}: {exc}")
            return None
        line = f"pushed the other choices: {title} (offer {offer.offer_id}, {', '.join(more)})"
        self.log(line)
        return [line]

    def listen(self) -> None:
        """Read the reply topic until stopped, reconnecting with backoff."""
        backoff = BACKOFF_FIRST
        while not self.stopping.is_set():
            since = self.last_id or str(int(self.started))
            try:
                for event in ntfy.subscribe(self.cfg, self.cfg.reply_topic, since=since):
                    if self.stopping.is_set():
                        return
                    kind = event.get("event")
                    if kind == "open":
                        backoff = BACKOFF_FIRST
                    elif kind == "message":
                        if event.get("id"):
                            self.last_id = str(event["id"])     # where to catch up from after a drop
                        self.on_reply(str(event.get("message", "")))
                self.log("the reply stream ended; reconnecting")
            except ntfy.NtfyError as exc:
                self.log(f"reply stream: {exc}; retrying in {backoff:g}s")
            if self.stopping.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> int:
        """Watch the proxy until it stops (0)."""
        sock, reply, buf = control_protocol.attach_watcher(self.group_dir)
        self.log(f"watching {self.group_dir} for held requests; pushing to {self.cfg.topic_url}")
        for hold in reply.get("held", []):          # held before we attached
            self.on_event(dict(hold, event="blocked", hold=hold_seconds()), time.time())
        threading.Thread(target=self.listen, daemon=True).start()
        try:
            while True:
                now = time.time()
                self.push_due(now)
                due = self.next_due()
                ready, _, _ = select.select([sock], [], [], None if due is None else max(0.0, due - now))
                if not ready:
                    continue
                chunk = sock.recv(65536)
                if not chunk:
                    self.log("the proxy stopped")
                    return 0
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        self.on_event(json.loads(line), time.time())
                    except (ValueError, AttributeError):
                        continue
        finally:
            self.stopping.set()
            sock.close()


def hold_seconds() -> float:
    """How long the proxy holds a request (its CHTOP_PROXY_HOLD_SECONDS, which we inherit)."""
    try:
        return float(os.environ.get("CHTOP_PROXY_HOLD_SECONDS", 120))
    except ValueError:
        return 120.0


def take_lock(group_dir: Path):
    """The group's notifier lock (an open file holding the flock), or None when one runs already."""
    nd = net_dir(group_dir)
    nd.mkdir(parents=True, exist_ok=True)
    fh = open(nd / NOTIFIER_LOCK, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m chtop_tasks.notify.held")
    ap.add_argument("--group-dir", required=True, type=Path)
    ap.add_argument("--policy-dir", required=True, type=Path)
    ap.add_argument("--detach", action="store_true", help="fork; the parent returns once the lock is held")
    args = ap.parse_args(argv)
    try:
        cfg = config.load()
    except ChtopError as exc:
        print(f"chtop notify: {exc}", file=sys.stderr, flush=True)
        return 2
    if cfg is None:
        return 0
    lock = take_lock(args.group_dir)
    if lock is None:
        return 0                      # this group's notifier runs already
    if args.detach and os.fork():
        return 0                      # the child holds the (inherited) lock
    if args.detach:
        os.setsid()
    try:
        return Notifier(args.group_dir, args.policy_dir, cfg).run()
    except ChtopError as exc:
        print(f"chtop notify: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
