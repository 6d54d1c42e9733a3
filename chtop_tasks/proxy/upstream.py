"""Reaching the upstream: name resolution (DNS, or the test hosts file) and a checked connect.

A name that resolves to a non-public address is refused unless its allow
entry says ``private``; the proxy connects to the very address it checked.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import time
from pathlib import Path

from .aio import TIMEOUTS, timeout
from .hostmatch import address_is_public, canonical_host, is_ip
from .messages import Refusal

DNS_TTL = 30.0


def read_hosts_file(path: str) -> dict[str, list[str]]:
    """The test-only resolver: lines of 'address name...' like /etc/hosts."""
    table: dict[str, list[str]] = {}
    for raw in Path(path).read_text().splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) < 2:
            continue
        addr = canonical_host(words[0])
        for name in words[1:]:
            table.setdefault(canonical_host(name), []).append(addr)
    return table


class Upstreams:
    """Resolve and connect, with a short DNS cache and a connect timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connect_timeout: float, hosts_file: str | None = None):
        self.loop = loop
        self.connect_timeout = connect_timeout
        self.hosts = read_hosts_file(hosts_file) if hosts_file else None
        self.dns_cache: dict[str, tuple[float, list[str]]] = {}

    async def resolve(self, host: str, port: int) -> list[str]:
        if is_ip(host):
            return [host]
        if self.hosts is not None:
            addrs = self.hosts.get(host)
            if not addrs:
                raise Refusal(502, "allowed", f"cannot resolve {host}: not in the test hosts file")
            return addrs
        cached = self.dns_cache.get(host)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            async with timeout(self.connect_timeout):
                infos = await self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, *TIMEOUTS) as exc:
            raise Refusal(502, "allowed", f"cannot resolve {host}: {exc or 'timeout'}") from None
        addrs = []
        for info in infos:
            addr = info[4][0].split("%", 1)[0]
            if addr not in addrs:
                addrs.append(addr)
        if len(self.dns_cache) > 4096:
            self.dns_cache.clear()
        # a short cache: faster repeat tunnels, and one answer per name for a while
        # (a rebinding name cannot flip between a checked and an unchecked address)
        self.dns_cache[host] = (now + DNS_TTL, addrs)
        return addrs

    async def sock_connect(self, s: socket.socket, addr) -> None:
        """Non-blocking connect; loopback usually completes inside the syscall."""
        err = s.connect_ex(addr)
        if err == 0:
            return
        if err not in (errno.EINPROGRESS, errno.EAGAIN):
            raise OSError(err, os.strerror(err))
        try:
            s.getpeername()
            return                      # already connected: skip a trip round the loop
        except OSError:
            pass
        fut = self.loop.create_future()
        fd = s.fileno()
        self.loop.add_writer(fd, lambda: fut.done() or fut.set_result(None))
        try:
            async with timeout(self.connect_timeout):
                await fut
        finally:
            self.loop.remove_writer(fd)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))

    async def open(self, host: str, port: int, entry, rec: dict) -> socket.socket:
        """A connected socket to ``host:port`` as allowed by ``entry`` (its ``private`` flag)."""
        addrs = await self.resolve(host, port)
        if not entry.private:
            for addr in addrs:
                if not address_is_public(addr):
                    raise Refusal(
                        403, "blocked",
                        f"{host} resolves to non-public address {addr}; mark the entry "
                        f"'{entry.host} private' if that is intended")
        errors = []
        for addr in addrs:
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                await self.sock_connect(s, (addr, port))
            except (OSError, *TIMEOUTS) as exc:
                s.close()
                errors.append(f"{addr}: {exc or 'connect timed out'}")
                continue
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rec["upstream"] = addr
            return s
        raise Refusal(502, "allowed", f"cannot connect to {host}:{port}: " + "; ".join(errors))
