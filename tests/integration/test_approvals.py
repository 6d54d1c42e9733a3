"""Scoped approvals against the real proxy: once, for a while, per worktree, and the audit log."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import json
import socket
import time

import pytest
from conftest import eventually
from proxy_helpers import certs, connect_in_thread, connect_proxy, echo, proxy, raw_request, read_head  # noqa: F401

from chtop_tasks.core.errors import Refused, UsageError
from chtop_tasks.proxy import approvals, control


def attach_watcher(proxy) -> socket.socket:
    """A control-socket watcher (what net.watch and dash attach): blocked requests are held meanwhile."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(control.runtime_dir(proxy.group) / "control.sock"))
    s.sendall(b'{"cmd": "watch"}\n')
    assert json.loads(s.makefile().readline())["ok"]
    return s


def wait_held(proxy, host: str, timeout: float = 60.0) -> list[dict]:
    return eventually(lambda: [h for h in control.status(proxy.group)["held"] if h["host"] == host],
                      f"a request for {host} held", timeout, interval=0.02,
                      explain=lambda: f"status: {control.status(proxy.group)}")


def decide_for_worktree(proxy, domain: str, via: str, **flags) -> list[str]:
    """A worktree-scoped decision on the bare proxy group of these tests (it has no workspace, so
    the existence check of ``decide_all`` is left out; test_proxy_tasks covers that check)."""
    return approvals.apply_decision(proxy.group, proxy.policy, approvals.plan_decision(domain, **flags), via)


def status_of(proxy, target: str, via=None) -> int:
    return raw_request(via or proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())[0]


@pytest.mark.slow
def test_allow_once_lets_the_held_request_through_and_blocks_the_next(proxy, echo, monkeypatch):
    monkeypatch.setenv("CHTOP_PROXY_HOLD_SECONDS", "10")     # time enough for the steps below on a busy machine
    proxy.start()
    target = f"echo.example.test:{echo.port}"
    with pytest.raises(Refused, match="no request for echo.example.test is held"):
        approvals.decide_all(proxy.group, proxy.policy, ["echo.example.test"], "cli", once=True)
    watcher = attach_watcher(proxy)
    try:
        t, result = connect_in_thread(proxy, target)
        held = wait_held(proxy, "echo.example.test")
        assert held[0]["waiting"] == 1 and held[0]["worktree"] is None
        pending = approvals.pending_requests(proxy.group, proxy.policy)
        assert [(p["host"], p["held"]) for p in pending] == [("echo.example.test", True)]
        lines = approvals.decide_all(proxy.group, proxy.policy, ["echo.example.test"], "cli",
                                     once=True, private=True)
        assert "1 held request(s) let through once" in lines[0]
        t.join(10)
        assert result == {"status": 200, "echo": b"ping\n"}
        # the next one is blocked again: held (a watcher is attached), then refused at the hold's end
        t0 = time.monotonic()
        assert status_of(proxy, target) == 403
        assert time.monotonic() - t0 >= 9.9
        rec = proxy.wait_record(lambda r: r.get("decision") == "allowed")
        assert "allowed once" in rec["reason"]
    finally:
        watcher.close()
    assert "echo.example.test" not in (proxy.policy / "net-allow.txt").read_text()


@pytest.mark.slow
def test_allow_for_a_while_expires_without_a_restart(proxy, echo):
    proxy.start()
    pid = proxy.pid()
    target = f"echo.example.test:{echo.port}"
    assert status_of(proxy, target) == 403
    decided = time.monotonic()
    lines = approvals.decide_all(proxy.group, proxy.policy, [target], "cli", ttl="6s", private=True)
    assert "allowed until" in lines[0] and "(6s)" in lines[0]
    with connect_proxy(proxy) as s:
        s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert read_head(s)[0] == 200
    rec = proxy.wait_record(lambda r: r.get("decision") == "allowed")
    assert "allowed for a while" in rec["reason"]
    assert approvals.pending_requests(proxy.group, proxy.policy) == []     # decided, for now
    eventually(lambda: status_of(proxy, target) == 403, "the 6s allowance to run out", timeout=30, interval=0.5)
    assert time.monotonic() - decided > 5                                  # not before its time (whole seconds)
    assert proxy.pid() == pid                                              # no restart
    assert [p["spec"] for p in approvals.pending_requests(proxy.group, proxy.policy)] == [target]


@pytest.mark.slow
def test_worktree_scope_applies_on_that_worktrees_socket_only(proxy, echo):
    proxy.start()
    feat = proxy.start("feat").socket_path
    other = proxy.start("other").socket_path
    target = f"wt.example.test:{echo.port}"
    decide_for_worktree(proxy, target, "cli", worktree="feat", private=True)
    assert (proxy.policy / "worktrees" / "feat" / "net-allow.txt").read_text() == f"{target} private\n"
    assert status_of(proxy, target, str(feat)) == 200
    assert status_of(proxy, target, str(other)) == 403
    assert status_of(proxy, target) == 403
    # for a while, one worktree only
    decide_for_worktree(proxy, f"echo.example.test:{echo.port}", "cli", worktree="other", ttl="1h", private=True)
    assert status_of(proxy, f"echo.example.test:{echo.port}", str(other)) == 200
    assert status_of(proxy, f"echo.example.test:{echo.port}", str(feat)) == 403


def test_every_decision_is_audited_and_bad_flags_change_nothing(proxy):
    before = (proxy.policy / "net-allow.txt").read_text()
    for flags in ({"once": True, "ttl": "2h"}, {"ttl": "soon"}, {"ttl": "0s"}, {"worktree": "../x"}):
        with pytest.raises(UsageError):
            approvals.decide_all(proxy.group, proxy.policy, ["a.example.org"], "cli", **flags)
    with pytest.raises(UsageError, match="refused 'com'"):
        approvals.decide_all(proxy.group, proxy.policy, ["a.example.org", "com"], "cli")
    assert (proxy.policy / "net-allow.txt").read_text() == before          # planned first: nothing written
    assert approvals.read_decisions(proxy.group) == []
    approvals.decide_all(proxy.group, proxy.policy, ["A.example.org."], "cli")
    decide_for_worktree(proxy, "b.example.org", "dash", worktree="feat", ttl="90m")
    approvals.decide_all(proxy.group, proxy.policy, ["c.example.org"], "net.watch", deny=True)
    recs = approvals.read_decisions(proxy.group)
    assert [(r["domain"], r["scope"], r["worktree"], r["ttl"], r["via"]) for r in recs] == [
        ("a.example.org", "group", None, None, "cli"),
        ("b.example.org", "for", "feat", 5400.0, "dash"),
        ("c.example.org", "deny", None, None, "net.watch")]
    assert all(r["user"] and r["when"] and r["time"] > 0 for r in recs)
    text = approvals.format_decisions(proxy.group)
    assert "b.example.org" in text and "1h30m" not in text and "90m" in text and "(dash)" in text


def test_durations():
    assert approvals.parse_duration("2h") == 7200
    assert approvals.parse_duration("1h30m") == 5400
    assert approvals.parse_duration("45") == 45
    assert approvals.format_duration(7200) == "2h"
    for bad in ("", "2x", "h", "-1h", "2h 3q"):
        with pytest.raises(UsageError):
            approvals.parse_duration(bad)


@pytest.mark.slow
def test_net_watch_offers_allow_for_a_while_and_audits_it(proxy, echo):
    from test_proxy import _read_until, _watcher

    proxy.start()
    watcher = _watcher(proxy)
    try:
        t, result = connect_in_thread(proxy, f"echo.example.test:{echo.port}", b"held\n")
        prompt = _read_until(watcher.stdout, "BLOCKED echo.example.test")
        watcher.stdin.write("t\n")
        watcher.stdin.flush()
        said = _read_until(watcher.stdout, "allowed until")
        t.join(10)
    finally:
        watcher.stdin.close()
        watcher.wait(10)
    assert "BLOCKED echo.example.test" in prompt and "[t] allow for 1h" in said
    assert result["status"] == 403          # allowed, but the name resolves to 127.0.0.1 (no `private`)
    rec = proxy.wait_record(lambda r: r.get("host") == "echo.example.test")
    assert "non-public" in rec["reason"] and "allowed for a while" in rec["rule"]
    assert [(r["scope"], r["ttl"], r["via"]) for r in approvals.read_decisions(proxy.group)] == [
        ("for", 3600.0, "net.watch")]


@pytest.mark.slow
def test_scoped_allow_tasks_as_a_user_runs_them(with_dev, monkeypatch):
    from proxy_helpers import free_port

    g = with_dev
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(free_port()))
    top = g.toplevel
    out = g.inv(top, "net.allow", "x.example.org", "--for", "2h", "--worktree", "dev").stdout
    assert "x.example.org: allowed (worktree dev) until" in out and "(2h)" in out
    r = g.inv(top, "net.allow", "y.example.org", "--once", check=False)
    assert r.returncode == 3 and "nothing to allow once" in r.stderr
    r = g.inv(top, "net.allow", "y.example.org", "--once", "--for", "1h", check=False)
    assert r.returncode == 2 and "exclude each other" in r.stderr
    r = g.inv(top, "net.allow", "y.example.org", "--for", "soon", check=False)
    assert r.returncode == 2 and "bad duration" in r.stderr
    g.inv(top, "net.deny", "z.example.org")
    table = g.inv(top, "net.log", "--decisions").stdout.splitlines()
    assert table[0].split() == ["WHEN", "WHO", "SCOPE", "WORKTREE", "TTL", "DOMAIN"]
    assert table[1].split()[-4:] == ["for", "dev", "2h", "x.example.org"]
    assert table[2].split()[-4:] == ["deny", "-", "-", "z.example.org"] and "(cli)" in table[2]
    assert len(table) == 3                                   # the refused calls decided nothing


def test_a_request_refused_just_now_is_pending_at_once(proxy):
    """The proxy writes its log in batches (at most 0.1 s late): net.pending asks for its status
    first, which writes out what is queued, so a refusal it has answered is never missed."""
    proxy.start()
    for i in range(3):
        assert status_of(proxy, f"fresh{i}.example.test:443") == 403
        assert f"fresh{i}.example.test" in [p["host"] for p in approvals.pending_requests(proxy.group, proxy.policy)]


def test_allow_given_a_url_names_its_host_and_changes_nothing(initialized):
    """`inv net.allow https://pypi.org/simple` (what a client's error shows): refused, naming the
    host to give instead; the list is untouched."""
    g = initialized
    allow = g.toplevel / "sandbox" / "net-allow.txt"
    before = allow.read_text()
    for given, meant in (("https://pypi.org/simple", "pypi.org"), ("http://mirror.example:8443/x", "mirror.example:8443"),
                         ("files.example.org/pkg", "files.example.org")):
        r = g.inv(g.toplevel, "net.allow", given, check=False)
        assert r.returncode == 2, r.stderr
        assert f"did you mean `{meant}`?" in r.stderr, r.stderr
    assert allow.read_text() == before
