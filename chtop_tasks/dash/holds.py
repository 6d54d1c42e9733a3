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

from ..core.errors import ChtopError
from ..proxy import control_protocol

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
        try:
            sock, reply, rest = control_protocol.attach_watcher(self.group_dir)
        except ChtopError:           # no proxy (yet): try again shortly
            return
        with sock:
            self._sock = sock
            self.attached = True
            self.on_event({"event": "attached", "held": reply.get("held", [])})
            reader = sock.makefile("rb")
            pending = rest
            while not self._stop.is_set():
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self.on_event(json.loads(line))
                chunk = reader.read1(65536)
                if not chunk:
                    return
                pending += chunk
