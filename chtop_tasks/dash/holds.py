"""Keep a watcher attached to the group's proxy while the dashboard runs.

While a watcher is attached the proxy holds a blocked request open (up to
``CHTOP_PROXY_HOLD_SECONDS``) instead of refusing it at once, so an answer
from the dashboard lets the waiting request through.  Reconnects when the
proxy starts or restarts; each event from the proxy calls ``on_event``.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Callable

from ..places import runtime_dir

RETRY_SECONDS = 1.0


class HoldWatcher:
    def __init__(self, group_dir: Path, on_event: Callable[[dict], None]):
        self.group_dir = Path(group_dir)
        self.on_event = on_event
        self.attached = False
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="chtop-dash-watch", daemon=True)

    def start(self) -> "HoldWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._attach_and_read()
            except (OSError, ValueError):
                pass
            if self.attached:
                self.attached = False
                self.on_event({"event": "detached"})
            self._stop.wait(RETRY_SECONDS)

    def _attach_and_read(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(runtime_dir(self.group_dir) / "control.sock"))
            self._sock = sock
            sock.sendall(b'{"cmd": "watch"}\n')
            reader = sock.makefile("r", encoding="utf-8")
            reply = json.loads(reader.readline() or "{}")
            if not reply.get("ok"):
                return
            self.attached = True
            self.on_event({"event": "attached", "held": reply.get("held", [])})
            for line in reader:
                if self._stop.is_set():
                    return
                self.on_event(json.loads(line))
