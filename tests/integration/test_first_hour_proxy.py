"""The proxy as a new user meets it: net.watch answered with one key, prompts that go away with
their request, allows that were refused anyway, deny of a public suffix, and the status of an
allowed plain-HTTP request in requests.jsonl (a real proxy, real sockets, a real pty)."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import os
import sys
import threading

import pytest
from conftest import REPO_ROOT, eventually
from proxy_helpers import EchoServer, HTTPSServer, connect_proxy, proxy, raw_request, read_head  # noqa: F401

pexpect = pytest.importorskip("pexpect")


def spawn_watcher(p):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from chtop_tasks.proxy.watch import watch; sys.exit(watch(Path(sys.argv[2]), Path(sys.argv[3])))")
    child = pexpect.spawn(sys.executable, ["-c", code, str(REPO_ROOT), str(p.group), str(p.policy)],
                          env=dict(os.environ), timeout=30, encoding="utf-8")
    child.expect("watching")
    return child


def held_connect(p, target, result):
    def client():
        with connect_proxy(p, timeout=30) as s:
            s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            result["status"] = read_head(s)[0]
    t = threading.Thread(target=client)
    t.start()
    return t


def test_one_key_answers_without_enter(proxy):
    echo = EchoServer()
    try:
        proxy.start()
        child = spawn_watcher(proxy)
        result = {}
        t = held_connect(proxy, f"127.0.0.2:{echo.port}", result)
        child.expect(r"BLOCKED 127\.0\.0\.2")
        child.expect_exact("? ")
        child.send("o")                       # no Enter
        child.expect("allowed once")
        t.join(30)
        assert result["status"] == 403        # 127.0.0.2 is private and not marked so: refused anyway
        child.expect("allowed, but the proxy then refused the request anyway")
        child.expect("non-public address")
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        echo.close()


def test_a_prompt_goes_away_when_its_hold_expires(proxy, monkeypatch):
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", "1")
    proxy.start()
    child = spawn_watcher(proxy)
    result = {}
    t = held_connect(proxy, "pypi.example.test:443", result)
    child.expect(r"BLOCKED pypi\.example\.test")
    t.join(30)
    assert result["status"] == 403
    child.expect_exact("\r\x1b[2K\x1b[1A\x1b[2K\r  pypi.example.test: no answer needed any more, its hold time ran out")
    child.send("a")                             # a late key answers nothing
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    assert "pypi.example.test" not in (proxy.policy / "net-allow.txt").read_text()


def test_a_prompt_goes_away_when_its_client_leaves(proxy):
    proxy.start()
    child = spawn_watcher(proxy)
    s = connect_proxy(proxy, timeout=30)
    s.sendall(b"CONNECT other.example.test:443 HTTP/1.1\r\n\r\n")
    child.expect(r"BLOCKED other\.example\.test")
    s.close()
    child.expect("other.example.test: no answer needed any more, its client gave up waiting")
    child.sendcontrol("d")
    child.expect(pexpect.EOF)


def test_deny_of_a_public_suffix_is_refused(initialized):
    g = initialized
    before = (g.toplevel / "sandbox" / "net-deny.txt").read_text()
    for bad in ("com", "co.uk", "*.github.io"):
        result = g.inv(g.toplevel, "net.deny", bad, check=False)
        assert result.returncode == 2 and "is a public suffix" in result.stderr, result.stderr
    assert (g.toplevel / "sandbox" / "net-deny.txt").read_text() == before


def test_allowed_plain_http_has_a_status_in_the_log(proxy, tmp_path):

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "f.txt").write_text("plain body")
    server = HTTPSServer(tmp_path / "www", {}, tls=False)
    try:
        proxy.allow(f"plain.example.test:{server.port} private")
        proxy.start()
        host = f"plain.example.test:{server.port}"
        for path, want in (("/f.txt", 200), ("/missing", 404)):
            status, body = raw_request(proxy, f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
                                       to_close=True)
            assert status == want
        def allowed_gets():
            return [r for r in proxy.records() if r.get("method") == "GET" and r.get("decision") == "allowed"]

        def both_logged():
            gets = allowed_gets()
            return gets if len(gets) >= 2 else None
        got = eventually(both_logged, "both GETs logged", timeout=10, explain=allowed_gets)
        assert [r.get("status") for r in got] == [200, 404]
    finally:
        server.close()


@pytest.mark.parametrize("watch_first", [False, True])
def test_chtop_net_tasks_manage_the_dir_group(tmp_path, monkeypatch, hermetic, watch_first):
    """Outside a workspace: start, allow (seeds the user's own policy), status, pending, stop."""
    import subprocess

    from proxy_helpers import free_port

    from chtop_tasks.core.places import default_policy_dir, user_config_dir
    from chtop_tasks.proxy import stop_proxy

    shipped = (default_policy_dir() / "net-allow.txt").read_text()
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(port := free_port()))
    project = tmp_path / "proj"
    project.mkdir()
    chtop = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
             "from chtop_tasks.cli.chtop import main; main()", str(REPO_ROOT)]

    def run(*args, code=0):
        result = subprocess.run([*chtop, *args], cwd=project, capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        assert result.returncode == code, result.stdout + result.stderr
        return result.stdout

    group = user_config_dir()
    try:
        assert "start it with `chtop net.start`" in run("net.status", code=3)
        assert run("net.start").strip() == f"http://127.0.0.1:{port}"
        status, body = raw_request(f"{group_sock(group)}", b"CONNECT blocked.example.org:443 HTTP/1.1\r\n\r\n")
        assert status == 403 and b"chtop net.allow blocked.example.org" in body
        assert b"inv net.allow" not in body and b"--worktree" not in body
        assert "  chtop net.allow DOMAIN " in run("net.pending")
        if watch_first:      # net.watch writes answers too: it makes the user's own lists before attaching
            out = run("net.watch")
            assert "copied chtop's shipped" in out and "restarted" in out
            assert "already" not in run("net.allow", "blocked.example.org")
        else:
            out = run("net.allow", "blocked.example.org")
        own = group / "sandbox"
        assert "copied chtop's shipped" in out and str(own) in out and "restarted" in out
        assert (own / "net-allow.txt").read_text().endswith("blocked.example.org\n")
        assert (own / "fs-allow.txt").is_file()
        assert (default_policy_dir() / "net-allow.txt").read_text() == shipped     # chtop's own: untouched
        assert f"policy:   {own}" in run("net.status")
        status, _ = raw_request(f"{group_sock(group)}", b"CONNECT blocked.example.org:443 HTTP/1.1\r\n\r\n")
        assert status != 403
        assert "added to" in run("net.deny", "ugc.example.org") and "copied" not in run("net.deny", "x.example.org")
        refused = subprocess.run([*chtop, "net.allow", "--worktree", "x", "a.example.org"], cwd=project,
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "the --dir group has no worktrees" in refused.stderr
        assert "stopped proxy" in run("net.stop")
        watch = subprocess.run([*chtop, "net.watch"], cwd=project, capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
        assert watch.returncode == 3 and "start it with `chtop net.start`" in watch.stderr
    finally:
        stop_proxy(group)


def group_sock(group):
    from chtop_tasks.core.places import runtime_dir

    return runtime_dir(group) / "group" / "proxy.sock"
