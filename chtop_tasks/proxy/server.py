"""The egress proxy server: one asyncio (epoll) loop, splice()d tunnels.

This module accepts connections, reads the request head, judges it and
answers.  Its parts live beside it: the lists (policy.py, hostmatch.py), the
HTTP rules (messages.py), reaching the upstream (upstream.py), held
requests and watchers (holds.py), the control socket (control_protocol.py),
the data path (tunnel.py) and the credential route (credentials.py).

Run as ``python -m chtop_tasks.proxy.server --group-dir G --policy-dir P
--port N --runtime-dir R [--detach]``; ``control.ensure_proxy`` runs it under
``chtop_tasks.proxy.supervise``, which starts it again when it dies.
Listens on 127.0.0.1:N, on R/group/proxy.sock, on R/wt/<name>/proxy.sock
for each worktree asked for, and on the control socket R/control.sock
(status, worktree sockets, watchers, stop).
"""

from __future__ import annotations

import argparse
import asyncio
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

from ..core.places import check_worktree_name, command_for_group
from . import credentials, fdpass
from .acceptrate import AcceptRate
from .aio import TIMEOUTS, Deadlines
from .control import build_socket, session_runs, worktree_socket
from .control_protocol import ControlService
from .holds import Holds
from .hostmatch import BadHost, Entry, canonical_host, is_ip, parse_authority
from .logs import RequestLog, net_dir, timed_allows_path
from .messages import (
    TOKEN_BYTES,
    Refusal,
    Request,
    blocked_body,
    check_host_header,
    forward_head,
    inspect_first,
    parse_head,
    plain_target,
    reply_bytes,
)
from .policy import NetPolicy, Verdict, build_identity, built_worktree
from .supervise import detach
from .tunnel import Mux, Tunnel
from .upstream import Upstreams

ENDED_EVERY = 1.0      # seconds: at most one import round (and ENDED line) this often for ended sandboxes


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
    # per source (one worktree's sockets and listeners; for the group, one socket or one sandbox):
    # 0 means an eighth of max_conns
    max_conns_per_source: int = field(default_factory=
        lambda: int(_env_float("CHTOP_PROXY_MAX_CONNS_PER_WORKTREE", 0)))
    max_held_per_source: int = field(default_factory=
        lambda: int(_env_float("CHTOP_PROXY_MAX_HELD_PER_WORKTREE", 32)))
    max_prompts_per_source: int = field(default_factory=
        lambda: int(_env_float("CHTOP_PROXY_MAX_PROMPTS_PER_WORKTREE", 8)))
    # per source, as above: new connections a second (and at once), and hand-offs of a worktree's
    # (or the group's) hand-off socket; over it that source's listener waits (``acceptrate.py``).
    # 0 means no limit.  Far above what builds (pip's parallel downloads) and agents open.
    accept_rate: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_ACCEPT_RATE", 500))
    accept_burst: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_ACCEPT_BURST", 1000))
    handoff_rate: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_HANDOFF_RATE", 200))
    handoff_burst: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_HANDOFF_BURST", 400))
    max_header: int = 16 * 1024
    header_timeout: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_HEADER_TIMEOUT", 10))
    connect_timeout: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_CONNECT_TIMEOUT", 10))
    hold_seconds: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_HOLD_SECONDS", 120))
    hello_timeout: float = 30.0
    hosts_file: str | None = field(default_factory=lambda: os.environ.get("CHTOP_PROXY_HOSTS_FILE"))
    # seconds with no sandbox, connection, watcher or session before the proxy exits (0: never)
    idle_exit: float = field(default_factory=lambda: _env_float("CHTOP_PROXY_IDLE_EXIT", 300))


def source_cap(cfg: Config) -> int:
    """Connections one source may hold open: ``max_conns_per_source``, else an eighth of the
    global cap (at least 8); never above the global cap."""
    cap = cfg.max_conns_per_source or max(8, cfg.max_conns // 8)
    return max(1, min(cap, cfg.max_conns))


def once_verdict(host: str, answer: str) -> Verdict:
    """An "allow once" answer lets the held request through, and nothing later."""
    private = answer == "allow-once-private"
    entry = Entry(host=host, is_ip=is_ip(host), private=private, text=host)
    return Verdict("allowed", entry, "allowed once" + (" (private)" if private else ""), "once")


class Server:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.policy = NetPolicy(cfg.policy_dir, timed_allows_path(cfg.group_dir))
        self.log = RequestLog(net_dir(cfg.group_dir), line_buffered=False)
        self._flush_pending = False
        self.active = 0
        self.peak = 0
        self.per_source: dict[str, int] = {}    # open connections of each source
        self.source_cap = source_cap(cfg)
        self.counts: dict[str, int] = {}
        self.holds: Holds | None = None
        self.upstreams: Upstreams | None = None
        self.listeners: dict[str, socket.socket] = {}
        self.worktree_sockets: dict[str, Path] = {}
        self.handoffs: dict[str, fdpass.Handoff] = {}     # one per unix socket
        self.tunnels: set[Tunnel] = set()
        # the connections' tasks: the loop keeps only a weak reference to a task, and one waiting on an
        # upstream's stream (which its transport holds weakly too) would be collected mid-request
        self.handlers: set[asyncio.Task] = set()
        self.started = time.time()
        self.importing = None           # the ImportTimer, once running
        self._ended: dict[str, int] = {}    # worktree -> sandbox ends not yet imported
        self._ended_round: asyncio.TimerHandle | None = None
        self._last_ended_round = -ENDED_EVERY
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self.last_busy = time.monotonic()     # the last sign of use (see ``_check_idle``)
        self.unpaced: set[str] = set()       # sources without an accept rate (the host's TCP port)
        self.accept_rate = AcceptRate(cfg.accept_rate, cfg.accept_burst, "new connections",
                                      "CHTOP_PROXY_ACCEPT_RATE", self.log.note)
        self.handoff_rate = AcceptRate(cfg.handoff_rate, cfg.handoff_burst, "hand-offs",
                                       "CHTOP_PROXY_HANDOFF_RATE", self.log.note)

    # ---- listening -------------------------------------------------------------
    def _listen(self, key: str, sock: socket.socket, worktree: str | None, tcp: bool, source: str | None = None,
                capped: bool = True):
        """Accept on ``sock`` as ``worktree``'s (None: the group's).  Its connections count against
        the cap of ``source``: the worktree's (all its sockets and listeners together), else the one
        given (a --dir sandbox's), else this socket's own; only the global cap, and no rate limit, when
        not ``capped`` (the host's TCP port, which no sandbox reaches)."""
        sock.setblocking(False)
        sock.listen(4096)
        self.listeners[key] = sock
        source = source or (f"wt:{worktree}" if worktree else key)
        cap = self.source_cap if capped else self.cfg.max_conns
        if not capped:
            self.unpaced.add(source)
        self.loop.add_reader(sock.fileno(), self._on_accept, sock, worktree, tcp, source, cap)

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
        self.handoffs[key] = fdpass.open_handoff(self, key, path, worktree)   # the sandbox's own listener

    def open_worktree(self, name: str) -> Path:
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

    def open_build(self, name: str, hosts: list[str]) -> Path:
        """Worktree ``name``'s venv-build socket (a dir of its own, which the agent's sandboxes never
        mount), judged as ``build_identity(name)`` with ``hosts`` (its index hosts) allowed; not
        remembered across restarts (a build's sandbox lives for one build)."""
        path = build_socket(self.cfg.runtime_dir, name)
        errors = self.policy.set_build_hosts(name, hosts)
        for error in errors:
            self.log.note(f"build hosts of {name}: {error}")
        key = "build:" + name
        if key not in self.listeners or not path.exists():
            if key in self.listeners:
                self._unlisten(key)
            self._listen_unix(key, path, build_identity(name))
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

    def _on_accept(self, lsock: socket.socket, worktree: str | None, tcp: bool, source: str, cap: int):
        for _ in range(128):
            wait = 0.0 if source in self.unpaced else self.accept_rate.take(source)
            if wait:            # over its rate: the rest waits in the backlog, at no cost to the others
                self.loop.remove_reader(lsock.fileno())
                self.loop.call_later(self.accept_rate.pause_for(source, wait), self._resume_accept,
                                     lsock, worktree, tcp, source, cap)
                return
            try:
                conn, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                self.accept_rate.give_back(source)
                return
            except OSError as exc:           # EMFILE/ENFILE: pause this listener a moment
                self.log.note(f"accept failed: {exc}; pausing accepts for 0.2 s")
                fd = lsock.fileno()
                self.loop.remove_reader(fd)
                self.loop.call_later(0.2, self._resume_accept, lsock, worktree, tcp, source, cap)
                return
            client = f"{addr[0]}:{addr[1]}" if tcp else ("unix:" + (worktree or "group"))
            mine = self.per_source.get(source, 0)
            if self.active >= self.cfg.max_conns or mine >= cap:
                self._busy(conn, source if mine >= cap else None)
                continue
            conn.setblocking(False)
            if tcp:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.active += 1
            self.last_busy = time.monotonic()
            self.per_source[source] = mine + 1
            self.peak = max(self.peak, self.active)
            handler = self.loop.create_task(self._handle(conn, client, worktree, source))
            self.handlers.add(handler)
            handler.add_done_callback(self.handlers.discard)

    def _busy(self, conn: socket.socket, source: str | None) -> None:
        """503 at once: the proxy is full, or ``source`` has its own cap's worth open."""
        why = (f"too many connections from {source.removeprefix('wt:')} ({self.source_cap} open; "
               f"each worktree or sandbox has its own cap)" if source else "too many connections")
        try:
            conn.send(reply_bytes(503, f"chtop egress proxy: {why}\n", "busy"))
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.close()
        self._count("busy")

    def _resume_accept(self, lsock, worktree, tcp, source, cap):
        if lsock.fileno() >= 0 and lsock in self.listeners.values():
            self.loop.add_reader(lsock.fileno(), self._on_accept, lsock, worktree, tcp, source, cap)

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

    async def _handle(self, conn: socket.socket, client: str, worktree: str | None, source: str):
        rec = {"client": client, "worktree": worktree}
        t0 = time.monotonic()
        st: dict = {"source": source}
        try:
            try:
                with self.deadlines.within(self.cfg.header_timeout):
                    head, rest = await self._read_head(conn)
            except TIMEOUTS:
                raise Refusal(408, "bad-request", "request head not sent in time") from None
            req = parse_head(head)
            rec["method"] = req.method
            if req.method == "CONNECT":
                await self._connect(conn, req, rest, rec, worktree, st)
            elif (route := credentials.routed(req, worktree, source)) is not None:
                await credentials.forward(self, conn, req, route, rest, rec)
            else:
                await self._plain(conn, req, rest, rec, worktree, st)
        except Refusal as r:
            rec.update(decision=r.decision, status=r.status, reason=r.reason)
            if rec.get("_allowed_after_hold"):      # the watcher said allow: tell it this still failed
                self.holds.notify({"event": "refused", "host": rec.get("host"), "status": r.status,
                              "reason": r.reason})
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
            left = self.per_source[source] - 1
            if left:
                self.per_source[source] = left
            else:
                del self.per_source[source]
            if rec is not None:
                rec.pop("_allowed_after_hold", None)
                rec["ms"] = round((time.monotonic() - t0) * 1000, 2)
                self._count(rec.get("decision", "error"))
                self.log.queue(rec)
                if not self._flush_pending:       # batch log writes, at most 0.1 s late
                    self._flush_pending = True
                    self.loop.call_later(0.1, self._flush_log)

    async def _judge(self, host: str, port: int, worktree: str | None, rec: dict, conn=None, source=None):
        verdict = self.policy.judge(host, worktree, port)
        full = self.holds.full(host, worktree, source) if verdict.decision == "blocked" else None
        if full:
            verdict.reason += f" (not held: {full})"
        elif verdict.decision == "blocked" and self.holds.active():
            gone, stop_watching = self._client_gone(conn) if conn is not None else (None, None)
            try:
                answer = await self.holds.wait_for_answer(host, port, worktree, gone, source)
            finally:
                if stop_watching is not None:
                    stop_watching()
            verdict = self.policy.judge(host, worktree, port)
            if verdict.decision == "blocked" and answer.startswith("allow-once"):
                verdict = once_verdict(host, answer)
            verdict.reason += f" (held for watch: {answer})"
            if verdict.decision == "allowed":
                rec["_allowed_after_hold"] = True
        rec["reason"] = rec["rule"] = verdict.reason
        if verdict.decision == "denied":
            raise Refusal(403, "denied", verdict.reason,
                          f"chtop egress proxy: {host} is " + (f"{verdict.reason}\n" if verdict.layer == "build"
                                                               else "denied (sandbox/net-deny.txt)\n"))
        if verdict.decision == "blocked":
            raise Refusal(403, "blocked", verdict.reason,
                          blocked_body(host, port, worktree, command_for_group(self.cfg.group_dir)))
        return verdict

    def _client_gone(self, conn: socket.socket):
        """A future set when the held client closes its connection (it sent nothing more), and the
        function that stops watching.  A client that sends data early is not watched further."""
        fut = self.loop.create_future()
        fd = conn.fileno()
        watching = [True]

        def stop():
            if watching[0]:
                watching[0] = False
                self.loop.remove_reader(fd)

        def readable():
            try:
                data = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            stop()
            if not data and not fut.done():
                fut.set_result(True)

        self.loop.add_reader(fd, readable)
        return fut, stop

    async def _connect(self, conn, req: Request, rest: bytes, rec: dict, worktree, st: dict):
        try:
            host, port = parse_authority(req.target)
        except BadHost as exc:
            raise Refusal(400, "bad-request", f"bad CONNECT target: {exc}") from None
        rec.update(host=host, port=port)
        verdict = await self._judge(host, port, worktree, rec, conn, st["source"])
        st["upstream"] = upstream = await self.upstreams.open(host, port, verdict.entry, rec)
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
            with self.deadlines.within(self.cfg.hello_timeout):
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
        target = plain_target(req)
        rec.update(host=target.host, port=target.port)
        had_host = check_host_header(req, target.host, target.port, default_port=80, in_tunnel=False,
                                     url_authority=target.authority) is not None
        verdict = await self._judge(target.host, target.port, worktree, rec, conn, st["source"])
        st["upstream"] = upstream = await self.upstreams.open(target.host, target.port, verdict.entry, rec)
        rec.update(decision="allowed")
        head = forward_head(req, target, had_host) + rest
        st["tunnel"] = tunnel = Tunnel(self.loop, self.mux, conn, upstream)
        self.tunnels.add(tunnel)
        try:
            await self.loop.sock_sendall(upstream, head)
        except OSError as exc:
            raise Refusal(502, "allowed", f"upstream {target.host}:{target.port} closed: {exc}") from None
        rec["_sent"] = len(head)
        tunnel.up.start()
        rec["status"] = await self._response_status(upstream, tunnel)
        tunnel.down.start()
        await tunnel.done

    async def _response_status(self, upstream: socket.socket, tunnel: Tunnel) -> int | None:
        """The upstream's HTTP status, peeked (left in the socket for the client) once it answers."""
        ready = self.loop.create_future()
        fd = upstream.fileno()
        self.loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait({ready, tunnel.done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.loop.remove_reader(fd)
            if not ready.done():
                ready.cancel()
        try:
            first = upstream.recv(16, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return None
        if first[:7] in (b"HTTP/1.", b"HTTP/2 ") and first[8:9] == b" " and first[9:12].isdigit():
            return int(first[9:12])
        return None

    # ---- what the control socket asks ---------------------------------------------
    def info(self) -> dict:
        return {
            "ok": True, "pid": os.getpid(), "url": f"http://127.0.0.1:{self.cfg.port}",
            "socket": str(self.cfg.runtime_dir / "group" / "proxy.sock"),
            "worktree_sockets": {k: str(v) for k, v in self.worktree_sockets.items()},
            "group_dir": str(self.cfg.group_dir), "policy_dir": str(self.cfg.policy_dir),
            "started": self.started, "active": self.active, "peak": self.peak,
            "max_conns": self.cfg.max_conns, "max_conns_per_source": self.source_cap,
            "counts": self.counts, "lists": self.policy.sizes(),
            "list_errors": self.policy.errors(), "watchers": len(self.holds.watchers) if self.holds else 0,
            "held": self.holds.held() if self.holds else [],
            "sandboxes": sum(len(h.passed) for h in self.handoffs.values()),
        }

    def status(self) -> dict:
        """``info``, once the queued log records are written: whoever asks first and then reads the
        log (``net.pending`` right after a refusal) sees every request answered so far."""
        self._flush_log()
        self.last_busy = time.monotonic()      # someone asks (a launch's ensure_proxy does, first)
        return self.info()

    def decided(self, host: str, worktree: str | None, answer: str) -> int:
        """A decision: release the held requests for ``host`` (on ``worktree``'s socket only, when
        given), each judged again; log it; how many were released."""
        host = canonical_host(host)
        if worktree is not None:
            worktree = check_worktree_name(str(worktree))
        released = self.holds.release(host, worktree, answer)
        self.log.note(f"DECIDE   {host}{f' [{worktree}]' if worktree else ''}: {answer} "
                      f"({released} held request(s) released)")
        self._flush_log()
        return released

    def sandbox_ended(self, worktree: str | None) -> None:
        """A sandbox's hand-off connection closed: it has ended, so import its branch now
        (``sbox.run`` starts no Python after podman exits; this is its exit import).  Ends are
        coalesced: at most one ENDED line and one import round every ``ENDED_EVERY`` seconds,
        however fast hand-offs open and close (the first end of a quiet while is imported at once)."""
        if worktree is None or self.importing is None or built_worktree(worktree) is not None:
            return      # a venv build's sandbox commits nothing (and its launcher imports after it)
        self._ended[worktree] = self._ended.get(worktree, 0) + 1
        if self._ended_round is None:
            delay = max(0.0, self._last_ended_round + ENDED_EVERY - time.monotonic())
            self._ended_round = self.loop.call_later(delay, self._import_ended)

    def _import_ended(self) -> None:
        self._ended_round = None
        self._last_ended_round = time.monotonic()
        ended, self._ended = self._ended, {}
        if not ended:
            return
        names = ", ".join(sorted(ended))
        count = sum(ended.values())
        if count == 1:
            self.log.note(f"ENDED    the sandbox of worktree {names}: importing its branch now")
        else:
            self.log.note(f"ENDED    {count} sandbox hand-offs of worktree(s) {names} since the last "
                          f"round: importing now")
        self._flush_log()
        self.importing.wake()

    # ---- lifetime ------------------------------------------------------------------
    def in_use(self) -> bool:
        """Whether anything still needs the proxy: a sandbox's listener, an open connection, a
        watcher (``net.watch``, ``dash``), or a running session of the group, its agent between
        sandboxes too (its pane process holds the session lease; no session code is read)."""
        if self.active or any(h.passed for h in self.handoffs.values()):
            return True
        if self.holds is not None and self.holds.watchers:
            return True
        return session_runs(self.cfg.group_dir)

    def _check_idle(self) -> None:
        """Exit (status 0: the supervisor lets it be) once unused for ``idle_exit`` seconds."""
        if self.in_use():
            self.last_busy = time.monotonic()
        elif time.monotonic() - self.last_busy >= self.cfg.idle_exit:
            self.log.note(f"IDLE     no sandbox, connection, watcher or session for "
                          f"{self.cfg.idle_exit:g} s: exiting (the next launch starts it again)")
            self.stopping.set()
            return
        self.loop.call_later(min(30.0, max(0.2, self.cfg.idle_exit / 4)), self._check_idle)

    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        self.mux = Mux(self.loop)
        self.deadlines = Deadlines(self.loop)
        self.holds = Holds(self.loop, self.cfg.hold_seconds, self.cfg.max_held_per_source,
                           self.cfg.max_prompts_per_source)
        self.upstreams = Upstreams(self.loop, self.cfg.connect_timeout, self.cfg.hosts_file)
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
        self._listen("tcp", tcp, None, tcp=True, capped=False)
        self._listen_unix("group", rt / "group" / "proxy.sock", None)
        for name in self._known_worktrees():
            try:
                self.open_worktree(name)
            except Exception as exc:
                self.log.note(f"cannot re-open the socket of worktree {name}: {exc}")
        control_path = rt / "control.sock"
        try:
            control_path.unlink()
        except FileNotFoundError:
            pass
        control = await asyncio.start_unix_server(ControlService(self).serve, path=str(control_path))
        os.chmod(control_path, 0o600)
        pid_file = net_dir(self.cfg.group_dir) / "proxy.pid"
        pid_file.write_text(f"{os.getpid()}\n")
        self.log.note(f"START    pid {os.getpid()} {self.info()['url']} socket "
                      f"{self.info()['socket']} policy {self.cfg.policy_dir}")
        for err in self.policy.errors():
            self.log.note(f"LIST     {err}")
        self.log.flush()
        from ..stores.quarantine import ImportTimer  # agents' branches into the shared stores
        self.importing = ImportTimer(self.cfg.group_dir, lambda msg: self.loop.call_soon_threadsafe(
            lambda: (self.log.note(msg), self.log.flush())))
        if self.cfg.idle_exit > 0:
            self.last_busy = time.monotonic()
            self._check_idle()
        await self.stopping.wait()
        self.importing.stop()
        control.close()
        for key in list(self.listeners):
            self._unlisten(key)
        for t in list(self.tunnels):
            t.fail()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        await asyncio.sleep(0.05)
        self.holds.close()
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
    policy = NetPolicy(cfg.policy_dir)
    try:
        policy.require()
    except Exception as exc:
        print(f"chtop-proxy: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(Server(cfg).run())


if __name__ == "__main__":
    sys.exit(main())
