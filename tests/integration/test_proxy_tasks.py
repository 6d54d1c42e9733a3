"""The inv net.* tasks in a real workspace (as a user runs them)."""

from __future__ import annotations

import socket

import pytest
from conftest import eventually
from proxy_helpers import ProxyUnderTest, free_port, raw_request  # noqa: F401

from chtop_tasks.proxy import stop_proxy


@pytest.mark.slow
def test_net_tasks_end_to_end(with_dev, monkeypatch):
    g = with_dev
    port = free_port()
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(port))
    top = g.toplevel
    try:
        url = g.inv(top, "net.start").stdout.strip()
        assert url == f"http://127.0.0.1:{port}"
        assert g.inv(top, "net.start").stdout.strip() == url            # idempotent
        assert g.inv(top, "net.url").stdout.strip() == url
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"CONNECT blocked.example.org:443 HTTP/1.1\r\n\r\n")
            assert b" 403 " in s.recv(4096)
        status = g.inv(top, "net.status").stdout
        assert "running" in status and url in status and "proxy.sock" in status
        assert "1 blocked" in status
        pending = g.inv(top, "net.pending").stdout
        assert "blocked.example.org" in pending and "     1  " in pending
        out = g.inv(top, "net.allow", "blocked.example.org", "--", "b.example.org", "*.c.example.org").stdout
        assert out.count("added to") == 3
        assert "already in" in g.inv(top, "net.allow", "BLOCKED.example.org.").stdout
        allow_file = (top / "sandbox" / "net-allow.txt").read_text()
        assert allow_file.startswith("# net-allow.txt")                # comments kept
        assert allow_file.endswith("blocked.example.org\nb.example.org\nc.example.org\n")
        assert "no blocked domains" in g.inv(top, "net.pending").stdout
        for bad in ("https://x.example.org/", "com", "x.example.org/p", "a*b.example.org"):
            r = g.inv(top, "net.allow", bad, check=False)
            assert r.returncode == 2, r.stderr
            assert "refused" in r.stderr
        assert "added to" in g.inv(top, "net.deny", "ugc.example.org").stdout
        r = g.inv(top, "net.allow", "--worktree", "dev", "only-dev.example.org")
        assert (top / "sandbox" / "worktrees" / "dev" / "net-allow.txt").read_text() == "only-dev.example.org\n"
        r = g.inv(top, "net.allow", "--worktree", "nosuch", "x.example.org", check=False)
        assert r.returncode == 2 and "--worktree nosuch: no worktree 'nosuch' in " in r.stderr
        assert not (top / "sandbox" / "worktrees" / "nosuch").exists()
        assert "BLOCKED" in g.inv(top, "net.log").stdout
        assert "stopped proxy" in g.inv(top, "net.stop").stdout
        r = g.inv(top, "net.status", check=False)
        assert r.returncode == 3 and "not running" in r.stdout
    finally:
        stop_proxy(g.grouping)


@pytest.mark.slow
def test_net_watch_in_a_terminal(initialized, monkeypatch):
    """inv net.watch in a pty: a held CONNECT completes once answered 'o'."""
    import os
    import sys
    import threading

    import pexpect
    from proxy_helpers import EchoServer, read_head

    g = initialized
    port = free_port()
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(port))
    echo = EchoServer()
    (g.toplevel / "sandbox" / "net-allow.txt").write_text(f"127.0.0.1:{echo.port} private\n")
    try:
        g.inv(g.toplevel, "net.start")
        child = pexpect.spawn(sys.executable, ["-m", "invoke", "net.watch"], cwd=str(g.toplevel),
                              env=dict(os.environ), timeout=60, encoding="utf-8")
        child.expect("watching")
        result = {}

        def client():
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(f"CONNECT 127.0.0.2:{echo.port} HTTP/1.1\r\n\r\n".encode())
                result["status"] = read_head(s)[0]
        t = threading.Thread(target=client)
        t.start()
        child.expect(r"BLOCKED 127\.0\.0\.2")
        child.expect(r"\?")
        child.sendline("i")
        t.join(60)
        assert result["status"] == 403        # ignored: refused, after being held
        child.expect("left blocked")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        stop_proxy(g.grouping)
        echo.close()


@pytest.mark.slow
def test_net_stop_asks_for_force_while_sandboxes_run_and_net_restart_keeps_them(with_dev, monkeypatch):
    """A sandbox's hand-off holder (the real listen_handoff.py) on the group's proxy: net.stop
    refuses, saying how many it would strand; net.restart replaces the proxy and the holder hands
    its listener to the new one; net.stop --force stops it anyway."""
    import os

    from proxy_helpers import launch_holder

    from chtop_tasks.proxy import control

    g = with_dev
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(free_port()))
    top = g.toplevel
    holder = None
    try:
        g.inv(top, "net.start")
        holder, port = launch_holder(control.proxy_status(g.grouping))
        old = control.proxy_status(g.grouping).pid
        r = g.inv(top, "net.stop", check=False)
        assert r.returncode == 2 and "1 running sandbox(es)" in r.stderr and "--force" in r.stderr, r.stderr
        assert control.proxy_status(g.grouping).pid == old                   # changed nothing
        out = g.inv(top, "net.restart").stdout
        new = control.proxy_status(g.grouping).pid
        assert f"restarted proxy: pid {old} -> {new}" in out and new != old
        eventually(lambda: control.sandboxes_served(g.grouping) == 1, "the holder to come back", timeout=10,
                   explain=lambda: g.inv(top, "net.status").stdout)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:   # and its listener works
            s.sendall(b"CONNECT blocked.example.org:443 HTTP/1.1\r\n\r\n")
            assert b" 403 " in s.recv(4096)
        assert "sandboxes: 1 hand their listener" in g.inv(top, "net.status").stdout
        out = g.inv(top, "net.stop", "--force").stdout
        assert f"stopped proxy pid {new} (1 running sandbox(es)" in out
        assert control.proxy_status(g.grouping) is None
    finally:
        if holder is not None:
            os.kill(holder, 9)
        stop_proxy(g.grouping)


def test_a_refusal_is_said_with_its_reason_and_the_line_that_allows_it(tmp_path):
    """What a failed launch prints for each refused host (read back from the proxy's own log):
    one line per host and port, the proxy's reason, and what allows it; the agent's host name
    shown inert."""
    import time

    from chtop_tasks.proxy.logs import RequestLog, net_dir
    from chtop_tasks.proxy.policy import build_identity
    from chtop_tasks.proxy.report import refusal_advice, refusals_since

    log = RequestLog(net_dir(tmp_path))
    before = time.time() - 1
    log.record({"time": before - 10, "worktree": "dev", "host": "old.example", "port": 443, "decision": "blocked"})
    log.record({"worktree": build_identity("dev"), "host": "pypi.org", "port": 443, "decision": "blocked",
                "status": 403, "reason": "pypi.org resolves to non-public address 10.1.2.3; mark the entry "
                                         "'pypi.org private' if that is intended"})
    log.record({"worktree": "dev", "host": "evil\x1b[2J.example", "port": 8443, "decision": "blocked", "status": 403,
                "reason": "not on the allowlist"})
    log.record({"worktree": "dev", "host": "evil\x1b[2J.example", "port": 8443, "decision": "blocked", "status": 403,
                "reason": "not on the allowlist"})
    log.record({"worktree": "other", "host": "x.example", "port": 443, "decision": "blocked"})
    log.close()
    built = refusals_since(tmp_path, build_identity("dev"), before)
    assert [refusal_advice(r, worktree="dev", build=True) for r in built] == [
        "the proxy refused pypi.org: pypi.org resolves to non-public address 10.1.2.3; mark the entry "
        "'pypi.org private' if that is intended; if that is intended, add the line `pypi.org private` to "
        "sandbox/net-allow-build.txt"]
    agent = [refusal_advice(r, worktree="dev", build=False) for r in refusals_since(tmp_path, "dev", before)]
    assert agent == ["the proxy refused evil^[[2J.example:8443: not on the allowlist; allow it: "
                     "inv net.allow --worktree dev evil^[[2J.example:8443"], agent
