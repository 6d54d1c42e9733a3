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
connection; the caps (``Handoff``) count per sandbox.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # only the proxy's server, which imports it itself, runs the hand-off's loop
    import asyncio

HANDOFF_NAME = "handoff.sock"
MAGIC = b"CHTOP-LISTEN 1\n"
OK = b"OK\n"
MAX_PASSED = 256          # listeners held for one hand-off socket (the --dir group's serves all its sandboxes)
MAX_PENDING = 64          # hand-off connections that have not sent their message yet
MAX_PASSED_PER_SANDBOX = 2
MAX_PENDING_PER_SANDBOX = 4
HELLO_SECONDS = 5.0       # a hand-off connection sends its message within this, or is closed
NS_GET_PARENT = 0xB702    # ioctl: the parent of a pid namespace (linux/nsfs.h)
NS_DEPTH = 32             # pid namespaces nest at most 32 deep
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


def sandbox_of(conn: socket.socket) -> str:
    """Which sandbox a hand-off connection comes from: the outermost pid namespace of its peer
    below the proxy's own, i.e. its container's (namespaces the agent makes inside nest under it,
    so it cannot pose as another sandbox); "host" for a peer in the proxy's own pid namespace,
    "unknown" when the peer is gone or cannot be read."""
    try:
        pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        own = os.stat("/proc/self/ns/pid").st_ino
        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "unknown"
    try:
        for _ in range(NS_DEPTH):
            ino = os.fstat(fd).st_ino
            if ino == own:
                return "host"
            try:
                parent = fcntl.ioctl(fd, NS_GET_PARENT)
            except OSError:                 # its parent is not in our view: this is the outermost
                return f"pidns:{ino}"
            outer = os.fstat(parent).st_ino == own
            os.close(fd)
            fd = parent
            if outer:
                return f"pidns:{ino}"
        return "unknown"
    finally:
        os.close(fd)


class Handoff:
    """One ``handoff.sock`` of the server: accepts hand-offs for ``worktree`` (None: the group).

    Its caps count per sandbox (``sandbox_of``), so that one agent cannot block another's launch
    on a socket they share (the --dir group's): at most ``MAX_PENDING_PER_SANDBOX`` connections
    waiting to send their message, each for ``HELLO_SECONDS``, and ``MAX_PASSED_PER_SANDBOX``
    listeners held; ``MAX_PENDING`` and ``MAX_PASSED`` bound the socket as a whole."""

    def __init__(self, server, key: str, path: Path, worktree: str | None):
        self.server = server
        self.key = f"{key}:handoff"
        self.path = Path(path)
        self.worktree = worktree
        self.passed: dict[int, tuple[str, str]] = {}     # unix conn fd -> (sandbox, listener key)
        self.pending: dict[int, tuple[str, asyncio.TimerHandle]] = {}   # conns still to send theirs
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

    @staticmethod
    def _count_of(table: dict, who: str) -> int:
        """Entries of ``who`` in ``pending`` or ``passed`` (both keep the sandbox first)."""
        return sum(1 for entry in table.values() if entry[0] == who)

    def _on_accept(self, lsock: socket.socket) -> None:
        rate = self.server.handoff_rate
        for _ in range(16):
            wait = rate.take(self.key)
            if wait:            # a hand-off loop: it waits in the backlog (``acceptrate.py``)
                self.server.loop.remove_reader(lsock.fileno())
                self.server.loop.call_later(rate.pause_for(self.key, wait), self._resume, lsock)
                return
            try:
                conn, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                rate.give_back(self.key)
                return
            except OSError as exc:
                self.server.log.note(f"hand-off accept failed: {exc}")
                return
            who = sandbox_of(conn)
            if len(self.pending) >= MAX_PENDING or self._count_of(self.pending, who) >= MAX_PENDING_PER_SANDBOX:
                conn.close()
                self._note_refused(f"too many hand-offs pending (sandbox {who})")
                continue
            conn.setblocking(False)
            late = self.server.loop.call_later(HELLO_SECONDS, self._too_late, conn)
            self.pending[conn.fileno()] = (who, late)
            self.server.loop.add_reader(conn.fileno(), self._on_hello, conn)

    def _resume(self, lsock: socket.socket) -> None:
        if self.server.listeners.get(self.key) is lsock:
            self.server.loop.add_reader(lsock.fileno(), self._on_accept, lsock)

    def _too_late(self, conn: socket.socket) -> None:
        if conn.fileno() in self.pending:
            self._drop(conn, f"no hand-off message within {HELLO_SECONDS:g} s")

    def _drop(self, conn: socket.socket, why: str | None = None) -> None:
        waiting = self.pending.pop(conn.fileno(), None)
        if waiting is not None:
            waiting[1].cancel()
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
        who = self.pending[conn.fileno()][0]
        why = is_listening_tcp(lsock)
        if why is None and len(self.passed) >= MAX_PASSED:
            why = f"more than {MAX_PASSED} listeners at once"
        if why is None and self._count_of(self.passed, who) >= MAX_PASSED_PER_SANDBOX:
            why = f"sandbox {who} has {MAX_PASSED_PER_SANDBOX} listeners handed over already"
        if why is not None:
            lsock.close()
            return self._drop(conn, why)
        self.pending.pop(conn.fileno())[1].cancel()
        self.serial += 1
        lkey = f"{self.key}:{self.serial}"
        # a worktree's listeners share its cap; each --dir sandbox's has its own
        self.server._listen(lkey, lsock, self.worktree, tcp=True,
                            source=None if self.worktree else f"sandbox {who}")
        self.passed[conn.fileno()] = (who, lkey)
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
        _, lkey = self.passed.pop(conn.fileno(), (None, None))
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
