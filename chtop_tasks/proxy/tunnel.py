"""Tunnels: two splice() pumps per connection, their events from a second epoll set."""

from __future__ import annotations

import fcntl
import os
import select
import socket

PIPE_SIZE = 1024 * 1024
# A read shorter than this drained the socket (small messages): skip the
# splice that would only say EAGAIN.  Longer ones are bulk: read on while
# data keeps coming, rather than a trip through the event loop per chunk.
BULK_READ = 64 * 1024
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


class Mux:
    """A second epoll set for tunnel fds, drained by one asyncio reader callback.

    Tunnels move most of the events; dispatching them straight from
    ``epoll.poll`` costs a fraction of asyncio's per-callback handles.
    """

    IN = select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR | select.EPOLLRDHUP
    OUT = select.EPOLLOUT | select.EPOLLHUP | select.EPOLLERR

    def __init__(self, loop):
        self.ep = select.epoll()
        self.handlers: dict[int, list] = {}
        self.loop = loop
        loop.add_reader(self.ep.fileno(), self._run)

    def _set(self, fd: int, idx: int, cb) -> None:
        h = self.handlers.get(fd)
        if h is None:
            if cb is None:
                return
            h = self.handlers[fd] = [None, None]
            h[idx] = cb
            self.ep.register(fd, self._mask(h))
            return
        h[idx] = cb
        mask = self._mask(h)
        if mask:
            self.ep.modify(fd, mask)
        else:
            del self.handlers[fd]
            self.ep.unregister(fd)

    @staticmethod
    def _mask(h) -> int:
        return (select.EPOLLIN | select.EPOLLRDHUP if h[0] else 0) | (select.EPOLLOUT if h[1] else 0)

    def add_reader(self, fd, cb):
        self._set(fd, 0, cb)

    def remove_reader(self, fd):
        self._set(fd, 0, None)

    def add_writer(self, fd, cb):
        self._set(fd, 1, cb)

    def remove_writer(self, fd):
        self._set(fd, 1, None)

    def _run(self):
        for fd, ev in self.ep.poll(0, 512):
            h = self.handlers.get(fd)
            try:
                if h is not None and h[0] is not None and ev & self.IN:
                    h[0]()
                    h = self.handlers.get(fd)
                if h is not None and h[1] is not None and ev & self.OUT:
                    h[1]()
            except Exception as exc:  # never let one tunnel stop the loop
                self.loop.call_exception_handler({"message": "tunnel callback failed",
                                                  "exception": exc})

    def close(self):
        self.loop.remove_reader(self.ep.fileno())
        self.ep.close()


class Pump:
    """One direction of a tunnel: src socket -> pipe -> dst socket via splice()."""

    def __init__(self, tunnel, src: socket.socket, dst: socket.socket):
        self.tunnel, self.loop = tunnel, tunnel.mux
        self.src, self.dst = src.fileno(), dst.fileno()
        self.dst_sock = dst
        self.pr = self.pw = -1          # the pipe is made on first data (cheap short tunnels)
        self.grown = False              # and grown to PIPE_SIZE on the first bulk read
        self.buffered = 0
        self.bytes = 0
        self.eof = False
        self.done = False
        self.reading = False
        self.writing = False

    def start(self):
        self._read_on()

    def _read_on(self):
        if not self.reading:
            self.loop.add_reader(self.src, self._on_readable)
            self.reading = True

    def _read_off(self):
        if self.reading:
            self.loop.remove_reader(self.src)
            self.reading = False

    def _make_pipe(self):
        self.pr, self.pw = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def _grow_pipe(self):
        """Bulk data: the pipe grows from the kernel's 64 KiB to PIPE_SIZE (only then: most
        tunnels move a few small messages, and the fcntl cost each of them a share of its setup)."""
        self.grown = True
        try:
            fcntl.fcntl(self.pw, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass

    def _on_readable(self):
        if self.pw < 0:
            self._make_pipe()
        for _ in range(32):
            try:
                n = os.splice(self.src, self.pw, PIPE_SIZE, flags=SPLICE_FLAGS)
            except BlockingIOError:
                return
            except OSError:
                return self.tunnel.fail()
            if n == 0:
                self.eof = True
                self._read_off()
                if not self.buffered:
                    self._finish()
                return
            self.buffered += n
            self.bytes += n
            if not self._flush() or n < BULK_READ:
                return
            if not self.grown:
                self._grow_pipe()

    def _flush(self) -> bool:
        while self.buffered:
            try:
                m = os.splice(self.pr, self.dst, self.buffered, flags=SPLICE_FLAGS)
            except BlockingIOError:
                self._read_off()
                if not self.writing:
                    self.loop.add_writer(self.dst, self._on_writable)
                    self.writing = True
                return False
            except OSError:
                self.tunnel.fail()
                return False
            self.buffered -= m
        return True

    def _on_writable(self):
        if not self._flush():
            return
        self.loop.remove_writer(self.dst)
        self.writing = False
        if self.eof:
            self._finish()
        else:
            self._read_on()

    def _finish(self):
        """Source said EOF and everything is through: pass the half-close on."""
        try:
            self.dst_sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.done = True
        self.tunnel.check_done()

    def stop(self):
        self._read_off()
        if self.writing:
            self.loop.remove_writer(self.dst)
            self.writing = False

    def close(self):
        self.stop()
        for fd in (self.pr, self.pw):
            if fd >= 0:
                os.close(fd)
        self.pr = self.pw = -1


class Tunnel:
    """Two pumps; ``done`` resolves once both directions ended (or one failed)."""

    def __init__(self, loop, mux: Mux, client: socket.socket, upstream: socket.socket):
        self.loop, self.mux = loop, mux
        self.client, self.upstream = client, upstream
        self.done = loop.create_future()
        self.down = Pump(self, upstream, client)
        self.up = Pump(self, client, upstream)
        self.up_started = False
        self.failed = False

    def check_done(self):
        if self.down.done and self.up.done and not self.done.done():
            self.done.set_result(True)

    def fail(self):
        self.failed = True
        self.down.stop()
        self.up.stop()
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if not self.done.done():
            self.done.set_result(False)

    def close(self):
        self.down.close()
        self.up.close()
