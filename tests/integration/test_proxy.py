"""The proxy process end to end, driven by raw-socket clients."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import eventually
from proxy_helpers import (  # noqa: F401  (fixtures)
    HTTPSServer,
    certs,
    connect_in_thread,
    connect_proxy,
    echo,
    fd_count,
    free_port,
    proxy,
    raw_request,
    read_all,
    read_head,
    tunnel,
)

from chtop_tasks.core.errors import ChtopError
from chtop_tasks.proxy import control, proxy_status, stop_proxy
from chtop_tasks.proxy.approvals import format_pending
from chtop_tasks.proxy.logs import read_records
from chtop_tasks.proxy.report import format_status

REPO = Path(__file__).resolve().parents[2]


def test_start_is_idempotent_and_status(proxy):
    ep = proxy.start()
    assert ep.url == proxy.url
    assert ep.socket_path.is_socket() and len(str(ep.socket_path)) < 100
    assert oct(ep.socket_path.parent.parent.stat().st_mode & 0o777) == "0o700"
    assert proxy.start() == ep
    assert proxy_status(proxy.group) == ep
    raw_request(proxy, b"CONNECT nope.example.org:443 HTTP/1.1\r\n\r\n")
    text, running = format_status(proxy.group)
    assert running and f"pid {ep.pid}" in text and proxy.url in text and str(ep.socket_path) in text
    assert "1 blocked" in text and "0 allowed" in text


def test_missing_allowlist_fails_closed(proxy):
    (proxy.policy / "net-allow.txt").unlink()
    with pytest.raises(ChtopError, match="net-allow.txt is missing"):
        proxy.start()
    assert proxy_status(proxy.group) is None


def test_port_taken_by_someone_else(proxy):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", proxy.port))
        squatter.listen()
        with pytest.raises(ChtopError, match="in use by another program"):
            proxy.start()


def test_port_is_derived_from_the_group_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("CHTOP_PROXY_PORT", raising=False)
    a, b = control.proxy_port(tmp_path / "a"), control.proxy_port(tmp_path / "b")
    assert a == control.proxy_port(tmp_path / "a") and a != b
    assert 20000 <= a < 32768   # below the ephemeral port range


def test_connect_tunnel_echo_and_half_close(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private")
    proxy.start()
    s = tunnel(proxy, f"echo.example.test:{echo.port}")
    s.sendall(b"hello through the tunnel")
    s.shutdown(socket.SHUT_WR)              # half-close: the echo must still come back
    assert read_all(s) == b"hello through the tunnel"
    s.close()
    rec = proxy.wait_record(lambda r: r.get("decision") == "allowed")
    assert rec["host"] == "echo.example.test" and rec["port"] == echo.port
    assert rec["bytes_up"] == rec["bytes_down"] == len(b"hello through the tunnel")
    for key in ("time", "client", "host", "port", "decision", "reason", "bytes_up", "bytes_down"):
        assert key in rec


def test_blocked_and_denied_answers(proxy, echo):
    proxy.deny("evil.example.test")
    proxy.start()
    status, body = raw_request(proxy, b"CONNECT other.example.test:443 HTTP/1.1\r\n\r\n")
    assert status == 403
    assert b"inv net.allow other.example.test" in body
    status, body = raw_request(proxy, b"CONNECT x.evil.example.test:443 HTTP/1.1\r\n\r\n")
    assert status == 403 and b"denied" in body and b"net.allow" not in body
    decisions = [(r["host"], r["decision"]) for r in proxy.wait_records(2)]
    assert ("other.example.test", "blocked") in decisions
    assert ("x.evil.example.test", "denied") in decisions
    assert echo.accepted == 0
    assert "other.example.test" in format_pending(proxy.group, proxy.policy)
    assert "evil" not in format_pending(proxy.group, proxy.policy)


def test_allowlist_change_applies_without_restart(proxy, echo):
    pid = proxy.start().pid
    target = f"CONNECT echo.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode()
    assert raw_request(proxy, target)[0] == 403
    proxy.allow(f"*.example.test:{echo.port} private")
    s = tunnel(proxy, f"echo.example.test:{echo.port}")
    s.close()
    assert proxy.pid() == pid
    assert "no blocked domains" in format_pending(proxy.group, proxy.policy)


def test_name_resolving_to_loopback_needs_private(proxy, echo):
    proxy.allow(f"loop.example.test:{echo.port}")
    proxy.start()
    status, body = raw_request(proxy, f"CONNECT loop.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode())
    assert status == 403 and b"non-public address 127.0.0.1" in body
    assert echo.accepted == 0


# Each of these must be refused (400/403) and never reach the echo server.
FOOLING = [
    "EVIL-echo.example.test:{port}",
    "echo.example.test.evil.net:{port}",
    "echo.example.test@other.example.test:{port}",
    "other.example.test:{port}@echo.example.test",
    "echo.example.test:{port}@other.example.test:{port}",
    "echo%2eexample.test:{port}",
    "other.example.test%00echo.example.test:{port}",
    "other.example.test\x00.echo.example.test:{port}",
    "echo.example.test",
    "echo.example.test:",
    "echo.example.test:0{port}0",
    "echo.example.test:+{port}",
    "127.0.0.1:{port}",
    "127.1:{port}",
    "2130706433:{port}",
    "0x7f.0.0.1:{port}",
    "0177.0.0.1:{port}",
    "[::ffff:127.0.0.1]:{port}",
    "[::1]:{port}",
    "[fe80::1%25lo]:{port}",
    "::1:{port}",
    "169.254.169.254:80",
    "[::ffff:169.254.169.254]:80",
]


@pytest.mark.parametrize("target", FOOLING)
def test_fooling_targets_refused(proxy, echo, target):
    proxy.allow(f"echo.example.test:{echo.port} private", "other.example.test.evil.net")
    proxy.start()
    status, _ = raw_request(proxy, f"CONNECT {target.format(port=echo.port)} HTTP/1.1\r\n\r\n".encode())
    assert status in (400, 403)
    assert echo.accepted == 0


@pytest.mark.parametrize("raw_line", [
    b"CONNECT echo.example.test :{port} HTTP/1.1",
    b"CONNECT echo.example.test:{port}\rX HTTP/1.1",
    b"CONNECT echo.example.test:{port} HTTP/1.1\nX: y",
])
def test_control_bytes_in_request_line(proxy, echo, raw_line):
    proxy.allow(f"echo.example.test:{echo.port} private")
    proxy.start()
    status, _ = raw_request(proxy, raw_line.replace(b"{port}", str(echo.port).encode()) + b"\r\n\r\n")
    assert status == 400 and echo.accepted == 0


@pytest.mark.parametrize("spelling", ["127.1", "2130706433", "0x7f.0.0.1", "[::ffff:127.0.0.1]"])
def test_listed_address_allows_every_spelling(proxy, echo, spelling):
    proxy.allow(f"127.0.0.1:{echo.port} private")
    proxy.start()
    s = tunnel(proxy, f"{spelling}:{echo.port}")
    s.sendall(b"x\n")               # a bare token would wait for a request line
    assert s.recv(2) == b"x\n"
    s.close()
    assert proxy.wait_record(lambda r: r.get("decision") == "allowed")["host"] == "127.0.0.1"


def _tls_client(sock, server_hostname, ca):
    ctx = ssl.create_default_context(cafile=str(ca))
    return ctx.wrap_socket(sock, server_hostname=server_hostname)


def _serve_file(tmp_path, certs, name, body, tls=True):
    """A local HTTP(S) server whose www root holds one file."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / name).write_text(body)
    return HTTPSServer(tmp_path / "www", certs, tls=tls)


def test_sni_must_match_connect_host(proxy, certs, tmp_path):
    server = _serve_file(tmp_path, certs, "index.html", "hi")
    try:
        proxy.allow(f"tls.example.test:{server.port} private")
        proxy.start()
        raw = tunnel(proxy, f"tls.example.test:{server.port}")
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _tls_client(raw, "other.example.test", certs["ca"])    # fronting: SNI names another host
        raw.close()
        rec = proxy.wait_record(lambda r: "SNI mismatch" in r.get("reason", ""))
        assert rec["decision"] == "blocked"
        good = _tls_client(tunnel(proxy, f"tls.example.test:{server.port}"), "tls.example.test", certs["ca"])
        good.sendall(b"GET /index.html HTTP/1.0\r\nHost: tls.example.test\r\n\r\n")
        assert read_all(good).endswith(b"hi")
        good.close()
    finally:
        server.close()


def test_plain_http_and_host_header(proxy, certs, tmp_path):
    server = _serve_file(tmp_path, certs, "f.txt", "plain body", tls=False)
    try:
        proxy.allow(f"plain.example.test:{server.port} private")
        proxy.start()
        host = f"plain.example.test:{server.port}"
        status, body = raw_request(proxy, f"GET http://{host}/f.txt HTTP/1.1\r\nHost: {host}\r\n"
                                          "Proxy-Connection: keep-alive\r\n\r\n".encode(), to_close=True)
        assert status == 200 and body.endswith(b"plain body")
        status, _ = raw_request(proxy, f"GET http://{host}/f.txt HTTP/1.1\r\n"
                                       f"Host: other.example.test:{server.port}\r\n\r\n".encode())
        assert status == 403
        status, _ = raw_request(proxy, f"GET http://PLAIN.example.test.:{server.port}/f.txt HTTP/1.1\r\n"
                                       f"Host: {host}\r\n\r\n".encode())
        assert status == 200
        for bad in (f"GET http://u@{host}/ HTTP/1.1\r\n\r\n", f"GET http://plain%2eexample.test:{server.port}/ HTTP/1.1\r\n\r\n",
                    f"GET /f.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"):
            assert raw_request(proxy, bad.encode())[0] == 400
        assert proxy.wait_record(lambda r: "disagrees" in r.get("reason", ""))
    finally:
        server.close()


def test_unreachable_upstream_is_502(proxy):
    dead = free_port()
    proxy.allow(f"dead.example.test:{dead},443 private")
    proxy.start()
    status, body = raw_request(proxy, f"CONNECT dead.example.test:{dead} HTTP/1.1\r\n\r\n".encode())
    assert status == 502 and b"cannot connect" in body
    status, body = raw_request(proxy, b"CONNECT unknown.dead.example.test:443 HTTP/1.1\r\n\r\n")
    assert status == 502 and b"cannot resolve" in body


def test_abuse_garbage_oversize_slow_and_busy(proxy, monkeypatch, echo):
    monkeypatch.setenv("CHTOP_PROXY_HEADER_TIMEOUT", "0.5")
    monkeypatch.setenv("CHTOP_PROXY_MAX_CONNS", "5")
    proxy.start()
    assert raw_request(proxy, b"\x16\x03\x01\x02\x00garbage")[0] == 400
    assert raw_request(proxy, os.urandom(64).replace(b" ", b"x"))[0] == 400
    assert raw_request(proxy, b"CONNECT a.example.test:443 HTTP/1.1\r\nX: " + b"a" * 20000)[0] == 431
    t0 = time.monotonic()
    with connect_proxy(proxy) as slow:
        slow.sendall(b"CONNECT a.example.test:443 HTTP/1.1\r\n")
        assert read_head(slow)[0] == 408
    assert time.monotonic() - t0 < 5
    idle = [connect_proxy(proxy) for _ in range(5)]
    # the proxy counts a connection once it has accepted it: ask until it has taken all five
    assert eventually(lambda: raw_request(proxy, b"CONNECT a.example.test:443 HTTP/1.1\r\n\r\n")[0] == 503,
                      "a 503 once the cap of 5 is reached")
    for s in idle:
        s.close()
    assert eventually(lambda: raw_request(proxy, b"CONNECT a.example.test:443 HTTP/1.1\r\n\r\n")[0] == 403,
                      "a 403 (not 503) once the idle connections are gone")


@pytest.mark.slow
def test_no_fd_leak_after_thousands_of_connections(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private")
    pid = proxy.start().pid

    def one_of_each_kind(i: int) -> None:
        if i % 3 == 0:
            s = tunnel(proxy, f"echo.example.test:{echo.port}")
            s.sendall(b"p\n")
            assert s.recv(2) == b"p\n"
            s.close()
        elif i % 3 == 1:
            assert raw_request(proxy, b"CONNECT blocked.example.org:443 HTTP/1.1\r\n\r\n")[0] == 403
        else:
            with connect_proxy(proxy) as c:        # hang up mid-request
                c.sendall(b"CONNECT echo.exa")

    def fds() -> list[str]:
        out = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
        return sorted(out)

    for i in range(30):                            # warm: whatever the proxy opens once, it opens now
        one_of_each_kind(i)
    eventually(lambda: control.status(proxy.group)["active"] == 0, "the warm-up connections closed")
    before = fds()
    for i in range(1500):
        one_of_each_kind(i)
    eventually(lambda: fd_count(pid) <= len(before), f"the proxy back to its {len(before)} fds", timeout=20,
               explain=lambda: f"new fds: {sorted(set(fds()) - set(before))}")
    after = fds()
    assert len(after) <= len(before), f"new fds: {sorted(set(after) - set(before))} (before {len(before)})"
    assert proxy_status(proxy.group) is not None


def test_a_bulk_tunnel_carries_every_byte_both_ways_as_its_pipes_grow(proxy, echo):
    """32 MiB up and back through one tunnel: past the first 64 KiB read each pump's pipe grows to
    1 MiB mid-stream (tunnel.Pump._grow_pipe), with data in it; nothing is lost or reordered."""
    import hashlib
    import threading

    proxy.allow(f"echo.example.test:{echo.port} private")
    proxy.start()
    data = b"\x01" + os.urandom(32 * 2**20 - 1)          # not a bare token: no request line awaited
    s = tunnel(proxy, f"echo.example.test:{echo.port}", timeout=60)

    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    sender.start()
    got = hashlib.sha256()
    size = 0
    while chunk := s.recv(1 << 20):
        got.update(chunk)
        size += len(chunk)
    sender.join(30)
    s.close()
    assert size == len(data) and got.digest() == hashlib.sha256(data).digest()
    record = eventually(lambda: next((r for r in reversed(list(read_records(proxy.group)))
                                      if r.get("bytes_down")), None), "the tunnel's log record", 10)
    assert record["bytes_up"] == record["bytes_down"] == len(data)


def test_sigterm_stops_cleanly_and_kill9_recovers(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private")
    ep = proxy.start()
    os.kill(ep.pid, signal.SIGTERM)
    eventually(lambda: not control._is_our_proxy(ep.pid, proxy.group), "the proxy gone after SIGTERM", timeout=10)
    assert proxy_status(proxy.group) is None
    assert not control._is_our_proxy(ep.pid, proxy.group)
    assert not (proxy.group / ".chtop/net/proxy.pid").exists()
    assert "STOP" in (proxy.group / ".chtop/net/proxy.log").read_text()
    ep2 = proxy.start()
    supervisor = control._our_supervisor(proxy.group)
    os.kill(supervisor, signal.SIGKILL)                             # all of it dies (a reboot, an OOM of both)
    os.kill(ep2.pid, signal.SIGKILL)
    assert control._wait_gone(ep2.pid, proxy.group, b"chtop_tasks.proxy.server", 5)
    assert (proxy.group / ".chtop/net/proxy.pid").exists()         # stale pid file and sockets
    assert proxy_status(proxy.group) is None
    ep3 = proxy.start()
    assert ep3.pid != ep2.pid and ep3.url == ep.url
    s = tunnel(proxy, f"echo.example.test:{echo.port}")
    s.close()
    assert stop_proxy(proxy.group) == ep3.pid
    assert stop_proxy(proxy.group) is None


def test_a_pid_file_naming_someone_elses_live_process_is_never_signalled(proxy, echo):
    """A stale proxy.pid / supervisor.pid that names a live process which is not this group's proxy
    (the pid was reused): start and stop leave it alone, and a start still works."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        net = proxy.group / ".chtop" / "net"
        net.mkdir(parents=True, exist_ok=True)
        for name in ("proxy.pid", "supervisor.pid"):
            (net / name).write_text(f"{bystander.pid}\n")
        assert stop_proxy(proxy.group) is None
        ep = proxy.start()
        assert ep.pid != bystander.pid
        (net / "supervisor.pid").write_text(f"{bystander.pid}\n")
        assert stop_proxy(proxy.group) == ep.pid
        assert bystander.poll() is None                            # never signalled
    finally:
        bystander.kill()
        bystander.wait()


def test_unix_sockets_and_worktree_layer(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private")
    proxy.allow(f"wt.example.test:{echo.port} private", worktree="feat")
    group_ep = proxy.start()
    wt_ep = proxy.start("feat")
    assert wt_ep.socket_path.name == "proxy.sock" and wt_ep.socket_path.parent.name == "feat"
    assert wt_ep.socket_path.parent != group_ep.socket_path.parent
    target = f"CONNECT wt.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode()
    status, body = raw_request(str(group_ep.socket_path), target)
    assert status == 403 and b"--worktree" not in body
    assert raw_request(proxy, target)[0] == 403
    s = tunnel(str(wt_ep.socket_path), f"wt.example.test:{echo.port}")
    s.sendall(b"w\n")
    assert s.recv(2) == b"w\n"
    s.close()
    s = tunnel(str(group_ep.socket_path), f"echo.example.test:{echo.port}")
    s.close()
    status, body = raw_request(str(wt_ep.socket_path), b"CONNECT x.example.org:443 HTTP/1.1\r\n\r\n")
    assert status == 403 and b"inv net.allow --worktree feat x.example.org" in body
    assert proxy.wait_record(lambda r: r.get("worktree") == "feat" and r["decision"] == "allowed")
    # the worktree socket survives a restart of the proxy (same path, same dir)
    stop_proxy(proxy.group)
    proxy.start()
    assert wt_ep.socket_path.is_socket()
    s = tunnel(str(wt_ep.socket_path), f"wt.example.test:{echo.port}")
    s.close()


def _watcher(proxy):
    code = ("import sys; from chtop_tasks.proxy.watch import watch; "
            "sys.exit(watch(sys.argv[1], sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-u", "-c", code, str(proxy.group), str(proxy.policy)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert "watching" in proc.stdout.readline()
    eventually(lambda: control.status(proxy.group)["watchers"] >= 1, "the watcher attached", timeout=10)
    return proc


def _read_until(stream, text):
    lines = []
    while True:
        line = stream.readline()
        assert line, "watcher exited; it printed:\n" + "".join(lines)
        lines.append(line)
        if text in line:
            return "".join(lines)


@pytest.mark.slow
def test_watch_holds_and_completes_on_approval(proxy, echo):
    proxy.start()
    target = f"echo.example.test:{echo.port}"
    # no watcher: refused at once
    t0 = time.monotonic()
    assert raw_request(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())[0] == 403
    assert time.monotonic() - t0 < 30                   # not held: a hold lasts 120 s
    watcher = _watcher(proxy)
    try:
        t, result = connect_in_thread(proxy, target, b"held\n")
        _read_until(watcher.stdout, "BLOCKED echo.example.test")
        assert control.status(proxy.group)["held"]              # the proxy holds it
        assert t.is_alive() and "status" not in result          # held, not refused
        # "allow always" writes the list; the name resolves to 127.0.0.1 so the
        # entry still lacks `private` -> refused as non-public.  Approve with the
        # private-capable list instead: allow once plus a private entry.
        proxy.allow(f"echo.example.test:{echo.port} private")
        watcher.stdin.write("o\n")
        watcher.stdin.flush()
        t.join(10)
        assert result == {"status": 200, "echo": b"held\n"}
        assert "allowed once" in _read_until(watcher.stdout, "allowed")
        # allow always: written to the list once
        t, result = connect_in_thread(proxy, "other.example.test:443")
        _read_until(watcher.stdout, "BLOCKED other.example.test")
        watcher.stdin.write("a\n")
        watcher.stdin.flush()
        t.join(10)
        assert result["status"] == 403            # now allowed, but 127.0.0.1 without `private`
        assert "other.example.test" in (proxy.policy / "net-allow.txt").read_text().splitlines()
        rec = proxy.wait_record(lambda r: r.get("host") == "other.example.test")
        assert "non-public" in rec["reason"]
        # deny always
        t, result = connect_in_thread(proxy, "evil.example.org:443")
        _read_until(watcher.stdout, "BLOCKED evil.example.org")
        watcher.stdin.write("d\n")
        watcher.stdin.flush()
        t.join(10)
        assert result["status"] == 403
        assert "evil.example.org" in (proxy.policy / "net-deny.txt").read_text()
    finally:
        watcher.stdin.close()
        assert watcher.wait(10) == 0


def test_watch_hold_times_out(proxy, monkeypatch):
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", "0.5")
    proxy.start()
    watcher = _watcher(proxy)
    try:
        t0 = time.monotonic()
        status, body = raw_request(proxy, b"CONNECT slow.example.org:443 HTTP/1.1\r\n\r\n")
        assert status == 403 and 0.4 < time.monotonic() - t0 < 5
        assert b"inv net.allow slow.example.org" in body
    finally:
        watcher.stdin.close()
        watcher.wait(10)


def raise_fd_limit(needed: int) -> None:
    """Raise this process's soft open-file limit toward the hard one (the proxy inherits it), or skip."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files; the hard limit is {hard} (raise it: ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


@pytest.mark.slow
def test_a_thousand_concurrent_tunnels(proxy, echo):
    """More tunnels than select() could watch (fds above 1024): all must work."""
    raise_fd_limit(4096)       # 1000 client sockets here, 2000+ in the proxy (ulimit -n is often 1024)
    proxy.allow(f"echo.example.test:{echo.port} private")
    pid = proxy.start().pid
    socks = [tunnel(proxy, f"echo.example.test:{echo.port}", timeout=30) for _ in range(1000)]
    for i, s in enumerate(socks):
        s.sendall(b"%d;" % i)
    for i, s in enumerate(socks):
        want = b"%d;" % i
        got = b""
        while len(got) < len(want):
            got += s.recv(64)
        assert got == want
    assert control.status(proxy.group)["active"] == 1000
    assert fd_count(pid) > 2000
    for s in socks:
        s.close()


def test_plain_http_inside_a_tunnel_must_name_the_connect_host(proxy, certs, tmp_path):
    server = _serve_file(tmp_path, certs, "f.txt", "vhost body", tls=False)
    try:
        proxy.allow(f"plain.example.test:{server.port} private")
        proxy.start()
        target = f"plain.example.test:{server.port}"
        s = tunnel(proxy, target)
        s.sendall(f"GET /f.txt HTTP/1.1\r\nHost: other.example.test:{server.port}\r\n\r\n".encode())
        assert read_all(s) == b""                       # fronting another vhost: cut off
        s.close()
        rec = proxy.wait_record(lambda r: "in the tunnel disagrees" in r.get("reason", ""))
        assert rec["decision"] == "blocked" and rec["bytes_down"] == 0
        s = tunnel(proxy, target)
        s.sendall(b"G")                                 # split across packets: still judged
        time.sleep(0.1)
        s.sendall(f"ET /f.txt HTTP/1.0\r\nHost: {target}\r\n\r\n".encode())
        assert read_all(s).endswith(b"vhost body")
        s.close()
    finally:
        server.close()


@pytest.mark.parametrize("first", [
    b"PROPFIND /f.txt HTTP/1.1\r\nHost: other.example.test\r\n\r\n",
    b"get /f.txt HTTP/1.1\r\nHost: other.example.test\r\n\r\n",
    b"X-Made-Up /f.txt HTTP/1.1\r\nHost: other.example.test\r\n\r\n",
    b"\r\nGET /f.txt HTTP/1.1\r\nHost: other.example.test\r\n\r\n",         # a leading empty line
    b"GET\t/f.txt\tHTTP/1.1\r\nHost: other.example.test\r\n\r\n",
    b"GET /f.txt HTTP/1.1\nHost: other.example.test\n\n",                   # bare LF
    b"get /f.txt http/1.1\r\nHost: other.example.test\r\n\r\n",
])
def test_every_request_line_in_a_tunnel_must_name_the_connect_host(proxy, certs, tmp_path, first):
    """Any token as the method, in any case: the first request in a tunnel names the CONNECT host."""
    server = _serve_file(tmp_path, certs, "f.txt", "vhost body", tls=False)
    try:
        proxy.allow(f"plain.example.test:{server.port} private")
        proxy.start()
        s = tunnel(proxy, f"plain.example.test:{server.port}")
        s.sendall(first)
        assert read_all(s) == b""                       # cut off before the upstream answered
        s.close()
        rec = proxy.wait_record(lambda r: r.get("host") == "plain.example.test" and "bytes_down" in r)
        assert rec["decision"] == "blocked" and rec["bytes_down"] == 0 and rec["bytes_up"] == 0
    finally:
        server.close()


def test_a_tunnel_passes_any_method_naming_its_host_and_non_http_bytes(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private")
    proxy.start()
    target = f"echo.example.test:{echo.port}"
    for first in (f"PROPFIND / HTTP/1.1\r\nHost: {target}\r\n\r\n".encode(),
                  f"m-search / HTTP/1.1\r\nhost: {target}\r\n\r\n".encode(),
                  b"SSH-2.0-OpenSSH_9.2\r\n", b"PING\r\n", b"\x00\x01binary"):
        s = tunnel(proxy, target)
        s.sendall(first)
        s.shutdown(socket.SHUT_WR)
        assert read_all(s) == first                   # reached the (echo) upstream whole
        s.close()


def test_one_worktree_cannot_hold_more_than_its_share(proxy, monkeypatch):
    """Per worktree: connections over its cap get 503 while another worktree's still pass; with a
    watcher attached, blocked requests over its held cap or prompts over its prompt cap are refused
    at once, while another worktree's are still held and prompted."""
    from chtop_tasks.proxy import control_protocol

    monkeypatch.setenv("CHTOP_PROXY_MAX_CONNS", "40")
    monkeypatch.setenv("CHTOP_PROXY_MAX_CONNS_PER_WORKTREE", "6")
    monkeypatch.setenv("CHTOP_PROXY_MAX_HELD_PER_WORKTREE", "3")
    monkeypatch.setenv("CHTOP_PROXY_MAX_PROMPTS_PER_WORKTREE", "2")
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", "8")
    flood, calm = str(proxy.start("flood").socket_path), str(proxy.start("calm").socket_path)
    idle = [connect_proxy(flood) for _ in range(6)]
    eventually(lambda: control.status(proxy.group)["active"] >= 6, "the proxy to accept the six idle connections")
    with connect_proxy(flood) as s:                    # answered at accept, before it sends anything
        status, body = read_head(s)
    assert status == 503 and b"too many connections from flood" in body
    assert raw_request(calm, b"CONNECT a.example.org:443 HTTP/1.1\r\n\r\n")[0] == 403   # judged, not busy
    for s in idle:
        s.close()

    def held():
        return control.status(proxy.group)["held"]

    watcher, _, _ = control_protocol.attach_watcher(proxy.group)
    try:
        threads = [connect_in_thread(flood, f"h{i}.example.org:443") for i in range(2)]   # two prompts
        eventually(lambda: len(held()) >= 2, "two prompts held", timeout=10, explain=held)
        t0 = time.monotonic()
        status, body = raw_request(flood, b"CONNECT h9.example.org:443 HTTP/1.1\r\n\r\n")    # a third prompt
        assert status == 403 and time.monotonic() - t0 < 5
        threads.append(connect_in_thread(flood, "h0.example.org:443"))    # no new prompt: held (3rd)
        eventually(lambda: sum(h["waiting"] for h in held()) >= 3, "three requests held", timeout=10, explain=held)
        assert raw_request(flood, b"CONNECT h1.example.org:443 HTTP/1.1\r\n\r\n")[0] == 403   # a 4th held
        rec = proxy.wait_record(lambda r: "requests of this sandbox are held" in r.get("reason", ""))
        assert rec["worktree"] == "flood"
        assert proxy.wait_record(lambda r: "prompts of this sandbox are open" in r.get("reason", ""))
        threads.append(connect_in_thread(calm, "c.example.org:443"))       # the other worktree: held
        eventually(lambda: any(h["worktree"] == "calm" for h in held()), "the calm worktree's request held",
                   timeout=10, explain=held)
    finally:
        watcher.close()
    for t, result in threads:
        t.join(20)
        assert result["status"] == 403                  # held, then expired


def test_an_entry_allows_443_and_80_unless_it_names_ports(proxy, echo):
    """``CONNECT api.anthropic.com:22`` was allowed by the entry ``api.anthropic.com``: an entry
    without ports now allows 443 and 80 only; ``host:port`` entries (net.allow too) allow those;
    a deny entry without ports denies every port; net.pending names a blocked port."""
    from chtop_tasks.proxy import approvals

    with open(proxy.hosts_file, "a") as fh:
        fh.write("127.0.0.1 api.anthropic.com\n")
    proxy.allow("api.anthropic.com private", "echo.example.test private")
    proxy.start()
    for port in (22, echo.port):
        status, body = raw_request(proxy, f"CONNECT api.anthropic.com:{port} HTTP/1.1\r\n\r\n".encode())
        assert status == 403 and f"inv net.allow api.anthropic.com:{port}".encode() in body, body
    rec = proxy.wait_record(lambda r: r.get("port") == 22)
    assert rec["decision"] == "blocked" and "port 22 not allowed" in rec["reason"] and "443, 80" not in rec["reason"]
    status, body = raw_request(proxy, f"GET http://echo.example.test:{echo.port}/ HTTP/1.1\r\n\r\n".encode())
    assert status == 403 and echo.accepted == 0
    text = format_pending(proxy.group, proxy.policy)
    assert f"api.anthropic.com:{port}" in text and "api.anthropic.com:22" in text, text
    approvals.decide_all(proxy.group, proxy.policy, [f"echo.example.test:{echo.port},8443"], "cli", private=True)
    ports = ",".join(map(str, sorted({echo.port, 8443})))
    assert f"echo.example.test:{ports} private\n" in (proxy.policy / "net-allow.txt").read_text()
    s = tunnel(proxy, f"echo.example.test:{echo.port}")
    s.sendall(b"ok\n")
    assert s.recv(3) == b"ok\n"
    s.close()
    assert raw_request(proxy, b"CONNECT echo.example.test:8080 HTTP/1.1\r\n\r\n")[0] == 403  # named or 443/80 only
    proxy.deny("echo.example.test")                                # a deny without ports: every port
    assert raw_request(proxy, f"CONNECT echo.example.test:{echo.port} HTTP/1.1\r\n\r\n".encode())[0] == 403
    assert proxy.wait_record(lambda r: r.get("decision") == "denied")["port"] == echo.port


def test_coarse_deadlines_time_out_late_by_at_most_a_tick_and_leave_the_rest_alone():
    """aio.Deadlines (the request head's and the first ClientHello's timeouts): a wait past its
    time ends with TimeoutError within a tick of it; a wait that finishes in time leaves its task
    uncancelled afterwards; a cancel from elsewhere (the proxy stopping) stays a cancel."""
    import asyncio

    from chtop_tasks.proxy.aio import Deadlines

    async def scenario():
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop, tick=0.1)
        began = loop.time()
        with pytest.raises(TimeoutError):
            with deadlines.within(0.3):
                await loop.create_future()                  # never answered
        waited = loop.time() - began
        with deadlines.within(5):
            await asyncio.sleep(0.05)                       # in time
        await asyncio.sleep(0.3)                            # no late cancel lands here
        stopped = asyncio.ensure_future(_wait_within(deadlines))
        await asyncio.sleep(0.05)
        stopped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopped
        return waited, deadlines.due, deadlines.fired

    waited, due, fired = asyncio.run(scenario())
    assert 0.3 <= waited < 0.3 + 0.1 + 0.1                  # one tick late at most (plus scheduling)
    assert not due and not fired


async def _wait_within(deadlines):
    import asyncio

    with deadlines.within(5):
        await asyncio.sleep(10)


def test_a_refusal_is_reported_as_soon_as_the_client_has_its_403(proxy):
    """A sandbox whose curl got its 403 may end, and its launcher read the log, before the proxy's
    batched log write: ``refusal_lines`` asks the running proxy to write what it queued first."""
    from chtop_tasks.proxy.report import refusal_lines

    wt_ep = proxy.start("dev")
    since = time.time()
    for _ in range(5):
        status, _ = raw_request(str(wt_ep.socket_path), b"CONNECT refused-here.example:443 HTTP/1.1\r\n\r\n")
        assert status == 403
        lines = refusal_lines(proxy.group, "dev", "dev", False, since)
        assert any("the proxy refused refused-here.example: " in line for line in lines), lines
