"""The sandbox's listening socket, handed to the proxy (SCM_RIGHTS): no relay hop.

A ``--network none`` sandbox reaches the proxy only through the unix socket
mounted into it.  Instead of a relay process inside that copies every byte
from 127.0.0.1:3128 to the unix socket, the sandbox's entry creates its
listening socket 127.0.0.1:3128 in its own network namespace and passes
that one fd to the proxy over ``handoff.sock`` (next to the proxy socket);
the proxy then accepts the agent's connections on it itself, exactly as on
its own TCP port, judged as that worktree's.

The hand-off: the sandbox connects to ``handoff.sock``, sends ``MAGIC`` with
the fd as SCM_RIGHTS ancillary data, and reads ``OK``.  It keeps that unix
connection open for as long as the sandbox lives (a ``sleep`` holds it);
when it closes, the proxy closes the listener, so no socket of a finished
sandbox (and its network namespace) outlives it, and imports the worktree's
branch at once (the sandbox has ended: this is its exit import).

Everything the sandbox sends is hostile: the fd must be a listening TCP
stream socket (anything else is refused and closed), one fd per
connection, at most ``MAX_PASSED`` per socket at once, and at most
``MAX_PENDING`` connections waiting to send their message.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

HANDOFF_NAME = "handoff.sock"
MAGIC = b"CHTOP-LISTEN 1\n"
OK = b"OK\n"
MAX_PASSED = 16
MAX_PENDING = 64          # hand-off connections that have not sent their message yet
NOTE_EVERY = 1.0          # seconds: at most one "hand-off refused" log line this often


def handoff_path(proxy_socket: Path) -> Path:
    return Path(proxy_socket).with_name(HANDOFF_NAME)


def is_listening_tcp(sock: socket.socket) -> str | None:
    """None when ``sock`` is a listening TCP stream socket, else why not."""
    try:
        if not stat.S_ISSOCK(os.fstat(sock.fileno()).st_mode):
            return "not a socket"
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return f"not an inet socket ({sock.family!r})"
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) != socket.SOCK_STREAM:
            return "not a stream socket"
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return "not listening"
    except OSError as exc:
        return f"unusable: {exc}"
    return None


class Handoff:
    """One ``handoff.sock`` of the server: accepts hand-offs for ``worktree`` (None: the group)."""

    def __init__(self, server, key: str, path: Path, worktree: str | None):
        self.server = server
        self.key = f"{key}:handoff"
        self.path = Path(path)
        self.worktree = worktree
        self.passed: dict[int, str] = {}       # unix conn fd -> key of the listener it passed
        self.pending: set[int] = set()         # conns still to send their message
        self.serial = 0
        self._refused_since_note = 0           # refusals not yet in the log (at most a line a second)
        self._next_note = 0.0

    def open(self) -> None:
        server = self.server
        if self.key in server.listeners:
            server._unlisten(self.key)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.setblocking(False)
        sock.listen(64)
        server.listeners[self.key] = sock
        server.loop.add_reader(sock.fileno(), self._on_accept, sock)

    def _on_accept(self, lsock: socket.socket) -> None:
        for _ in range(16):
            try:
                conn, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.server.log.note(f"hand-off accept failed: {exc}")
                return
            if len(self.pending) >= MAX_PENDING:
                conn.close()
                self._note_refused(f"{MAX_PENDING} pending")
                continue
            conn.setblocking(False)
            self.pending.add(conn.fileno())
            self.server.loop.add_reader(conn.fileno(), self._on_hello, conn)

    def _drop(self, conn: socket.socket, why: str | None = None) -> None:
        self.pending.discard(conn.fileno())
        if why:
            self._note_refused(why)
        try:
            self.server.loop.remove_reader(conn.fileno())
        except (ValueError, OSError):
            pass
        conn.close()

    def _note_refused(self, why: str) -> None:
        """Log a refused hand-off: one line a second at most, the others counted into the next."""
        now = time.monotonic()
        if now < self._next_note:
            self._refused_since_note += 1
            return
        more = f" (and {self._refused_since_note} more refused since the last such line)" \
            if self._refused_since_note else ""
        self._refused_since_note, self._next_note = 0, now + NOTE_EVERY
        self.server.log.note(f"hand-off refused ({self.worktree or 'group'}): {why}{more}")

    def _on_hello(self, conn: socket.socket) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, len(MAGIC), 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            return self._drop(conn, f"read failed: {exc}")
        passed = [socket.socket(fileno=fd) for fd in fds]
        if data != MAGIC or len(passed) != 1:
            for s in passed:
                s.close()
            return self._drop(conn, None if not data else "not a hand-off message with one fd")
        lsock = passed[0]
        why = is_listening_tcp(lsock)
        if why is None and len(self.passed) >= MAX_PASSED:
            why = f"more than {MAX_PASSED} listeners at once"
        if why is not None:
            lsock.close()
            return self._drop(conn, why)
        self.pending.discard(conn.fileno())
        self.serial += 1
        lkey = f"{self.key}:{self.serial}"
        self.server._listen(lkey, lsock, self.worktree, tcp=True)
        self.passed[conn.fileno()] = lkey
        self.server.loop.remove_reader(conn.fileno())
        try:
            conn.send(OK)
        except OSError:
            return self._on_closed(conn)
        self.server.loop.add_reader(conn.fileno(), self._on_closed, conn)

    def _on_closed(self, conn: socket.socket) -> None:
        """The sandbox side went away (or sent more, which is not part of the protocol)."""
        try:
            if conn.recv(64):
                return                      # ignore chatter; only EOF/reset ends the hand-off
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        lkey = self.passed.pop(conn.fileno(), None)
        if lkey in self.server.listeners:
            self.server._unlisten(lkey)
        self._drop(conn)
        if lkey is not None:
            self.server.sandbox_ended(self.worktree)


def open_handoff(server, key: str, proxy_socket: Path, worktree: str | None) -> Handoff:
    """Listen on ``handoff.sock`` next to ``proxy_socket`` (called where the server opens it)."""
    handoff = Handoff(server, key, handoff_path(proxy_socket), worktree)
    handoff.open()
    return handoff
