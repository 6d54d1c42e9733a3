"""The group's proxy supervisor: runs the daemon as its child and starts it again when it dies.

    python -m chtop_tasks.proxy.supervise --group-dir G --policy-dir P --port N --runtime-dir R [--detach]

``control.ensure_proxy`` starts this (detached); it starts
``chtop_tasks.proxy.server`` with the same arguments.  When the daemon exits
on its own (killed, OOM, a bug) the supervisor starts it again at once, with
the same sockets and paths; each sandbox's hand-off holder
(incontainer/listen_handoff.py) then hands its listener to the new daemon.
It stops when the daemon exits 0 (``inv net.stop``: SIGTERM to the daemon or
to this process) or 2 (a setting no restart fixes), and gives up after
``MAX_FAST_FAILS`` exits in a row within ``FAST_SECONDS`` of their start.
Restarts are recorded in <group>/.chtop/net/supervisor.json (host-owned;
``inv net.status`` shows them).  No bytes pass through it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..core.atomic import write_atomic
from .control import SUPERVISOR_PID as PID_NAME
from .logs import net_dir

STATE_NAME = "supervisor.json"
FAST_SECONDS = 5.0       # a daemon that dies sooner than this after its start counts as a fast failure
MAX_FAST_FAILS = 8       # in a row: then the supervisor gives up (and says so in its state)
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 5.0
SETTINGS_ERROR = 2       # the daemon's exit status for a port in use or unusable lists


def detach():
    """Double fork so the proxy is nobody's child (no zombie for a live caller)."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)


def why_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def read_state(group_dir: Path) -> dict:
    """The supervisor's record ({} when none or unreadable): pid, restarts, last_reason, last_at."""
    try:
        with open(net_dir(group_dir) / STATE_NAME, "rb") as fh:
            data = json.loads(fh.read(64 * 1024))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Supervisor:
    def __init__(self, group_dir: Path, server_argv: list[str]):
        self.group_dir = group_dir
        self.argv = [sys.executable, "-m", "chtop_tasks.proxy.server", *server_argv]
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.state = {"pid": os.getpid(), "restarts": 0, "last_reason": None, "last_at": None}

    def _on_signal(self, signum, _frame):
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def _save(self) -> None:
        write_atomic(net_dir(self.group_dir) / STATE_NAME, json.dumps(self.state) + "\n")

    def _restarted(self, reason: str) -> None:
        self.state.update(restarts=self.state["restarts"] + 1, last_reason=reason, last_at=time.time())
        self._save()
        print(f"chtop-proxy-supervisor: the proxy {reason}; starting it again", file=sys.stderr, flush=True)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        pid_file = net_dir(self.group_dir) / PID_NAME
        write_atomic(pid_file, f"{os.getpid()}\n")
        self._save()
        fast, rc = 0, 0
        try:
            while not self.stopping:
                started = time.monotonic()
                self.child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, cwd="/")
                rc = self.child.wait()
                if self.stopping or rc in (0, SETTINGS_ERROR):
                    break
                fast = fast + 1 if time.monotonic() - started < FAST_SECONDS else 0
                if fast >= MAX_FAST_FAILS:
                    self.state.update(last_reason=f"{why_it_ended(rc)}; gave up after {fast} fast "
                                      f"failures", last_at=time.time())
                    self._save()
                    break
                self._restarted(why_it_ended(rc))
                time.sleep(min(BACKOFF_MAX, BACKOFF_FIRST * (2 ** fast)) if fast else 0)
        finally:
            try:
                if pid_file.read_text().strip() == str(os.getpid()):
                    pid_file.unlink()
            except OSError:
                pass
        return max(rc, 0)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="chtop-proxy-supervisor")
    ap.add_argument("--group-dir", required=True, type=Path)
    ap.add_argument("--detach", action="store_true")
    args, _ = ap.parse_known_args(argv)
    if args.detach:
        detach()
    return Supervisor(args.group_dir, [a for a in argv if a != "--detach"]).run()


if __name__ == "__main__":
    sys.exit(main())
