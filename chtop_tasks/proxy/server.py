"""The egress proxy server: one asyncio (epoll) loop, splice()d tunnels.

Policy and naming live in policy.py/hostmatch.py, HTTP messages in
messages.py, the data path in tunnel.py; this module accepts, judges,
connects and answers, and serves the control socket.

Run as ``python -m chtop_tasks.proxy.server --group-dir G --policy-dir P
--port N --runtime-dir R [--detach]``; ``control.ensure_proxy`` does that.
Listens on 127.0.0.1:N, on R/group/proxy.sock, on R/wt/<name>/proxy.sock
for each worktree asked for, and on the control socket R/control.sock
(status, worktree sockets, watchers, stop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import resource
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..places import check_worktree_name
from . import fdpass
from .control import worktree_socket
from .hostmatch import BadHost, address_is_public, canonical_host, is_ip, parse_authority
from .logs import RequestLog, net_dir
from .messages import HOP_BY_HOP, TOKEN_BYTES, Refusal, Request, blocked_body, inspect_first, parse_head, reply_bytes
from .policy import Policy
from .tunnel import Mux, Tunnel


@contextlib.asynccontextmanager
async def _compat_timeout(delay: float):
    """asyncio.timeout for Python 3.10: cancel the task, raise TimeoutError."""
    task, fired = asyncio.current_task(), []
    handle = asyncio.get_running_loop().call_later(delay, lambda: (fired.append(1), task.cancel()))
    try:
        yield
    except asyncio.CancelledError:
        if fired:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


_timeout = getattr(asyncio, "timeout", _compat_timeout)
TIMEOUTS = (TimeoutError, asyncio.TimeoutError)   # distinct classes before 3.11
DNS_TTL = 30.0
def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class Config:
    group_dir: Path
    policy_dir: Path
    port: int
    runtime_dir: Path
    max_conns: int = field(default_factory=lambda: int(_env_float("CHTOP_PROXY_MAX_CONNS", 4096)))
    max_header: int = 16 * 1024
    header_timeout: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_HEADER_TIMEOUT", 10))
    connect_timeout: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_CONNECT_TIMEOUT", 10))
    hold_seconds: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_HOLD_SECONDS", 120))
    hello_timeout: float = 30.0
    hosts_file: str | None = field(default_factory=lambda: os.environ.get("CHTOP_PROXY_HOSTS_FILE"))


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


class Server:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.policy = Policy(cfg.policy_dir)
        self.log = RequestLog(net_dir(cfg.group_dir), line_buffered=False)
        self._flush_pending = False
        self.hosts = read_hosts_file(cfg.hosts_file) if cfg.hosts_file else None
        self.dns_cache: dict[str, tuple[float, list[str]]] = {}
        self.active = 0
        self.peak = 0
        self.counts: dict[str, int] = {}
        self.watchers: set = set()
        self.holds: dict[str, asyncio.Future] = {}
        self.listeners: dict[str, socket.socket] = {}
        self.worktree_sockets: dict[str, Path] = {}
        self.tunnels: set[Tunnel] = set()
        self.started = time.time()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None

    # ---- listening -------------------------------------------------------------
    def _listen(self, key: str, sock: socket.socket, worktree: str | None, tcp: bool):
        sock.setblocking(False)
        sock.listen(4096)
        self.listeners[key] = sock
        self.loop.add_reader(sock.fileno(), self._on_accept, sock, worktree, tcp)

    def _listen_unix(self, key: str, path: Path, worktree: str | None):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        os.chmod(path, 0o600)
        self._listen(key, sock, worktree, tcp=False)
        fdpass.open_handoff(self, key, path, worktree)    # the sandbox may hand over its own listener

    def listen_worktree(self, name: str) -> Path:
        check_worktree_name(name)
        path = worktree_socket(self.cfg.runtime_dir, name)
        key = "wt:" + name
        if key not in self.listeners or not path.exists():
            if key in self.listeners:
                self._unlisten(key)
            self._listen_unix(key, path, name)
            self.worktree_sockets[name] = path
            self._remember_worktrees()
        return path

    def _known_worktrees(self) -> list[str]:
        try:
            return json.loads((self.cfg.runtime_dir / "worktrees.json").read_text())
        except (OSError, ValueError):
            return []

    def _remember_worktrees(self):
        path = self.cfg.runtime_dir / "worktrees.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(self.worktree_sockets)))
        os.replace(tmp, path)

    def _unlisten(self, key: str):
        sock = self.listeners.pop(key)
        self.loop.remove_reader(sock.fileno())
        if sock.family == socket.AF_UNIX:
            try:
                os.unlink(sock.getsockname())
            except OSError:
                pass
        sock.close()

    def _on_accept(self, lsock: socket.socket, worktree: str | None, tcp: bool):
        for _ in range(128):
            try:
                conn, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:           # EMFILE/ENFILE: pause this listener a moment
                self.log.note(f"accept failed: {exc}; pausing accepts for 0.2 s")
                fd = lsock.fileno()
                self.loop.remove_reader(fd)
                self.loop.call_later(0.2, self._resume_accept, lsock, worktree, tcp)
                return
            client = f"{addr[0]}:{addr[1]}" if tcp else ("unix:" + (worktree or "group"))
            if self.active >= self.cfg.max_conns:
                try:
                    conn.send(reply_bytes(503, "chtop egress proxy: too many connections\n", "busy"))
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                conn.close()
                self._count("busy")
                continue
            conn.setblocking(False)
            if tcp:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.loop.create_task(self._handle(conn, client, worktree))

    def _resume_accept(self, lsock, worktree, tcp):
        if lsock.fileno() >= 0 and lsock in self.listeners.values():
            self.loop.add_reader(lsock.fileno(), self._on_accept, lsock, worktree, tcp)

    def _flush_log(self):
        self._flush_pending = False
        try:
            self.log.flush()
        except (OSError, ValueError):
            pass

    def _count(self, decision: str):
        self.counts[decision] = self.counts.get(decision, 0) + 1

    # ---- one connection ----------------------------------------------------------
    async def _read_head(self, conn: socket.socket) -> tuple[bytes, bytes]:
        buf = b""
        while True:
            chunk = await self.loop.sock_recv(conn, 65536)
            if not chunk:
                raise ConnectionResetError("closed before the request was complete")
            buf += chunk
            end = buf.find(b"\r\n\r\n")
            if end >= 0 and end + 4 <= self.cfg.max_header:
                return buf[:end], buf[end + 4 :]
            first = buf[:24].split(b" ", 1)[0]
            if any(b not in TOKEN_BYTES for b in first) or (b" " not in buf[:24] and len(buf) >= 24):
                raise Refusal(400, "bad-request", "garbage instead of an HTTP request")
            if len(buf) > self.cfg.max_header:
                raise Refusal(431, "bad-request", f"request head over {self.cfg.max_header} bytes")

    async def _handle(self, conn: socket.socket, client: str, worktree: str | None):
        rec = {"client": client, "worktree": worktree}
        t0 = time.monotonic()
        st: dict = {}
        try:
            try:
                async with _timeout(self.cfg.header_timeout):
                    head, rest = await self._read_head(conn)
            except TIMEOUTS:
                raise Refusal(408, "bad-request", "request head not sent in time") from None
            req = parse_head(head)
            rec["method"] = req.method
            if req.method == "CONNECT":
                await self._connect(conn, req, rest, rec, worktree, st)
            else:
                await self._plain(conn, req, rest, rec, worktree, st)
        except Refusal as r:
            rec.update(decision=r.decision, status=r.status, reason=r.reason)
            try:
                await self.loop.sock_sendall(conn, reply_bytes(r.status, r.body, r.decision))
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        except (ConnectionError, OSError) as exc:
            if "decision" not in rec and "method" not in rec:
                rec = None
            else:
                rec.setdefault("decision", "error")
                rec["reason"] = f"client connection: {exc}"
        except asyncio.CancelledError:
            if rec is not None:
                rec.setdefault("decision", "error")
                rec["reason"] = (rec.get("reason", "") + " (proxy stopping)").strip()
            raise
        finally:
            tunnel, upstream = st.get("tunnel"), st.get("upstream")
            if tunnel is not None:
                tunnel.close()
                self.tunnels.discard(tunnel)
                if rec is not None:
                    rec["bytes_up"] = tunnel.up.bytes + rec.pop("_sent", 0)
                    rec["bytes_down"] = tunnel.down.bytes
            for s in (conn, upstream):
                if s is not None:
                    s.close()
            self.active -= 1
            if rec is not None:
                rec["ms"] = round((time.monotonic() - t0) * 1000, 2)
                self._count(rec.get("decision", "error"))
                self.log.queue(rec)
                if not self._flush_pending:       # batch log writes, at most 0.1 s late
                    self._flush_pending = True
                    self.loop.call_later(0.1, self._flush_log)

    async def _judge(self, host: str, port: int, worktree: str | None, rec: dict):
        verdict = self.policy.judge(host, worktree)
        if verdict.decision == "blocked" and self.watchers and self.cfg.hold_seconds > 0:
            fut = self.holds.get(host)
            if fut is None or fut.done():
                fut = self.loop.create_future()
                self.holds[host] = fut
                self._notify({"event": "blocked", "host": host, "port": port,
                              "worktree": worktree, "hold": self.cfg.hold_seconds})
            try:
                answer = await asyncio.wait_for(asyncio.shield(fut), self.cfg.hold_seconds)
            except TIMEOUTS:
                answer = "timeout"
                if self.holds.get(host) is fut:
                    del self.holds[host]
            verdict = self.policy.judge(host, worktree)
            verdict.reason += f" (held for watch: {answer})"
        rec["reason"] = rec["rule"] = verdict.reason
        if verdict.decision == "denied":
            raise Refusal(403, "denied", verdict.reason,
                          f"chtop egress proxy: {host} is denied (sandbox/net-deny.txt)\n")
        if verdict.decision == "blocked":
            raise Refusal(403, "blocked", verdict.reason, blocked_body(host, port, worktree))
        return verdict

    async def _resolve(self, host: str, port: int) -> list[str]:
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
            async with _timeout(self.cfg.connect_timeout):
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

    async def _sock_connect(self, s: socket.socket, addr) -> None:
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
            async with _timeout(self.cfg.connect_timeout):
                await fut
        finally:
            self.loop.remove_writer(fd)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))

    async def _open_upstream(self, host: str, port: int, verdict, rec: dict) -> socket.socket:
        addrs = await self._resolve(host, port)
        if not verdict.entry.private:
            for addr in addrs:
                if not address_is_public(addr):
                    raise Refusal(
                        403, "blocked",
                        f"{host} resolves to non-public address {addr}; mark the entry "
                        f"'{verdict.entry.host} private' if that is intended")
        errors = []
        for addr in addrs:
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                await self._sock_connect(s, (addr, port))
            except (OSError, *TIMEOUTS) as exc:
                s.close()
                errors.append(f"{addr}: {exc or 'connect timed out'}")
                continue
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rec["upstream"] = addr
            return s
        raise Refusal(502, "allowed", f"cannot connect to {host}:{port}: " + "; ".join(errors))

    async def _connect(self, conn, req: Request, rest: bytes, rec: dict, worktree, st: dict):
        try:
            host, port = parse_authority(req.target)
        except BadHost as exc:
            raise Refusal(400, "bad-request", f"bad CONNECT target: {exc}") from None
        rec.update(host=host, port=port)
        verdict = await self._judge(host, port, worktree, rec)
        st["upstream"] = upstream = await self._open_upstream(host, port, verdict, rec)
        rec.update(decision="allowed", status=200)
        await self.loop.sock_sendall(conn, b"HTTP/1.1 200 Connection established\r\n\r\n")
        st["tunnel"] = tunnel = Tunnel(self.loop, self.mux, conn, upstream)
        self.tunnels.add(tunnel)
        tunnel.down.start()
        try:
            first = await self._client_hello(conn, rest, host, port)
        except Refusal as r:
            rec.update(decision=r.decision, status=200, reason=r.reason)
            tunnel.fail()
            return
        if first is None:
            tunnel.up.done = True
            try:
                upstream.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        else:
            if first:
                await self.loop.sock_sendall(upstream, first)
                rec["_sent"] = len(first)
            tunnel.up.start()
        tunnel.check_done()
        await tunnel.done

    async def _client_hello(self, conn, data: bytes, host: str, port: int) -> bytes | None:
        """The client's first bytes, once ``inspect_first`` is satisfied with them."""
        try:
            async with _timeout(self.cfg.hello_timeout):
                while not data or not inspect_first(data, host, port, self.cfg.max_header):
                    chunk = await self.loop.sock_recv(conn, 65536)
                    if not chunk:
                        return data or None
                    data += chunk
                return data
        except TIMEOUTS:
            if data:
                raise Refusal(400, "blocked", "incomplete TLS ClientHello or HTTP head") from None
        chunk = await self.loop.sock_recv(conn, 65536)      # a slow talker: judged alone
        if chunk and not inspect_first(chunk, host, port, self.cfg.max_header):
            raise Refusal(400, "blocked", "TLS ClientHello or HTTP head after the inspection window")
        return chunk or None

    async def _plain(self, conn, req: Request, rest: bytes, rec: dict, worktree, st: dict):
        target = req.target
        scheme, sep, after = target.partition("://")
        if not sep:
            raise Refusal(400, "bad-request", "not a proxy request (use absolute-form or CONNECT)")
        if scheme.lower() != "http":
            raise Refusal(400, "bad-request", f"scheme {scheme!r} not proxied (use CONNECT for https)")
        cut = min([i for i in (after.find("/"), after.find("?"), after.find("#")) if i >= 0],
                  default=len(after))
        authority, path = after[:cut], after[cut:].split("#", 1)[0]
        if not path.startswith("/"):
            path = "/" + path
        try:
            host, port = parse_authority(authority, default_port=80)
        except BadHost as exc:
            raise Refusal(400, "bad-request", f"bad URL host: {exc}") from None
        rec.update(host=host, port=port)
        host_headers = [v for n, v in req.headers if n.lower() == "host"]
        if len(host_headers) > 1:
            raise Refusal(400, "bad-request", "more than one Host header")
        if host_headers:
            try:
                same = parse_authority(host_headers[0], default_port=80) == (host, port)
            except BadHost:
                same = False
            if not same:
                raise Refusal(403, "blocked",
                              f"Host header {host_headers[0]!r} disagrees with URL host {authority!r}")
        verdict = await self._judge(host, port, worktree, rec)
        st["upstream"] = upstream = await self._open_upstream(host, port, verdict, rec)
        rec.update(decision="allowed")
        lines = [f"{req.method} {path} HTTP/1.{req.minor}"]
        if not host_headers:
            lines.append(f"Host: {authority}")
        lines += [f"{n}: {v}" for n, v in req.headers if n.lower() not in HOP_BY_HOP]
        lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + rest
        st["tunnel"] = tunnel = Tunnel(self.loop, self.mux, conn, upstream)
        self.tunnels.add(tunnel)
        try:
            await self.loop.sock_sendall(upstream, head)
        except OSError as exc:
            raise Refusal(502, "allowed", f"upstream {host}:{port} closed: {exc}") from None
        rec["_sent"] = len(head)
        tunnel.down.start()
        tunnel.up.start()
        await tunnel.done

    # ---- control socket ------------------------------------------------------------
    def _notify(self, event: dict):
        line = (json.dumps(event) + "\n").encode()
        for w in list(self.watchers):
            try:
                w.write(line)
            except Exception:
                self.watchers.discard(w)

    def info(self) -> dict:
        return {
            "ok": True, "pid": os.getpid(), "url": f"http://127.0.0.1:{self.cfg.port}",
            "socket": str(self.cfg.runtime_dir / "group" / "proxy.sock"),
            "worktree_sockets": {k: str(v) for k, v in self.worktree_sockets.items()},
            "group_dir": str(self.cfg.group_dir), "policy_dir": str(self.cfg.policy_dir),
            "started": self.started, "active": self.active, "peak": self.peak,
            "max_conns": self.cfg.max_conns,
            "counts": self.counts, "lists": self.policy.sizes(),
            "list_errors": self.policy.errors(), "watchers": len(self.watchers),
            "held": sorted(h for h, f in self.holds.items() if not f.done()),
            "allowed_once": sorted(self.policy.allowed_once),
        }

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        watching = False
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                    reply = self._command(msg, writer)
                except Exception as exc:  # a bad command must not kill the proxy
                    reply = {"ok": False, "error": str(exc)}
                if msg.get("cmd") == "watch" and reply.get("ok"):
                    watching = True
                writer.write((json.dumps(reply) + "\n").encode())
                await writer.drain()
                if msg.get("cmd") == "stop":
                    self.stopping.set()
        except (ConnectionError, ValueError):
            pass
        finally:
            if watching:
                self.watchers.discard(writer)
            writer.close()

    def _command(self, msg: dict, writer) -> dict:
        cmd = msg.get("cmd")
        if cmd in ("ping", "status"):
            return self.info()
        if cmd == "worktree":
            return {"ok": True, "socket": str(self.listen_worktree(str(msg.get("name"))))}
        if cmd == "watch":
            self.watchers.add(writer)
            held = sorted(h for h, f in self.holds.items() if not f.done())
            return {"ok": True, "held": held}
        if cmd == "decide":
            host = canonical_host(str(msg.get("host")))
            answer = str(msg.get("answer"))
            if answer not in ("allow-once", "allow-always", "deny", "ignore", "allow-worktree"):
                return {"ok": False, "error": f"unknown answer {answer!r}"}
            if answer == "allow-once":
                self.policy.allowed_once.add(host)
            self.log.note(f"WATCH    {host}: {answer}")
            self._flush_log()
            fut = self.holds.pop(host, None)
            if fut is not None and not fut.done():
                fut.set_result(answer)
            return {"ok": True}
        if cmd == "stop":
            return {"ok": True, "pid": os.getpid()}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    # ---- lifetime ------------------------------------------------------------------
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        self.mux = Mux(self.loop)
        self.stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self.loop.add_signal_handler(sig, self.stopping.set)
        rt = self.cfg.runtime_dir
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind(("127.0.0.1", self.cfg.port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                print(f"chtop-proxy: port 127.0.0.1:{self.cfg.port} is in use by another "
                      f"program; stop it or set CHTOP_PROXY_PORT to a free port", file=sys.stderr)
                return 2
            raise
        self._listen("tcp", tcp, None, tcp=True)
        self._listen_unix("group", rt / "group" / "proxy.sock", None)
        for name in self._known_worktrees():
            try:
                self.listen_worktree(name)
            except Exception as exc:
                self.log.note(f"cannot re-open the socket of worktree {name}: {exc}")
        control_path = rt / "control.sock"
        try:
            control_path.unlink()
        except FileNotFoundError:
            pass
        control = await asyncio.start_unix_server(self._control, path=str(control_path))
        os.chmod(control_path, 0o600)
        pid_file = net_dir(self.cfg.group_dir) / "proxy.pid"
        pid_file.write_text(f"{os.getpid()}\n")
        self.log.note(f"START    pid {os.getpid()} {self.info()['url']} socket "
                      f"{self.info()['socket']} policy {self.cfg.policy_dir}")
        for err in self.policy.errors():
            self.log.note(f"LIST     {err}")
        self.log.flush()
        await self.stopping.wait()
        control.close()
        for key in list(self.listeners):
            self._unlisten(key)
        for t in list(self.tunnels):
            t.fail()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        await asyncio.sleep(0.05)
        for w in list(self.watchers):
            w.close()
        for path in (control_path, pid_file):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.log.note(f"STOP     pid {os.getpid()} counts {self.counts}")
        self.log.close()
        return 0


def raise_nofile() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def detach():
    """Double fork so the proxy is nobody's child (no zombie for a live caller)."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="chtop-proxy", description="chtop egress proxy")
    ap.add_argument("--group-dir", required=True, type=Path)
    ap.add_argument("--policy-dir", required=True, type=Path)
    ap.add_argument("--port", required=True, type=int)
    ap.add_argument("--runtime-dir", required=True, type=Path)
    ap.add_argument("--detach", action="store_true")
    args = ap.parse_args(argv)
    if args.detach:
        detach()
    soft = raise_nofile()
    cfg = Config(args.group_dir, args.policy_dir, args.port, args.runtime_dir)
    cfg.max_conns = min(cfg.max_conns, max(16, (soft - 64) // 6))   # 2 sockets + 4 pipe fds each
    policy = Policy(cfg.policy_dir)
    try:
        policy.require()
    except Exception as exc:
        print(f"chtop-proxy: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(Server(cfg).run())


if __name__ == "__main__":
    sys.exit(main())
