"""The group's held subscription login on the real proxy's credential route: the proxy presents its access
token, refreshes it before it expires and after a 401 (one refresh for any number of requests at once),
writes the rotated refresh token back by a rename, and answers a clear 401 when the login is revoked.
The token endpoint is the fake's, which revokes a login whose refresh token is used twice, as the real
one does.  Sandboxes themselves are in test_oauth_sandbox.py.
"""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import json
import os
import stat
import threading
import time

import pytest
from fake_anthropic import FakeAnthropic
from proxy_helpers import certs, connect_proxy, proxy, read_all  # noqa: F401  (fixtures)
from test_proxy_credentials import ROUTE_HOST, post, write_secrets

from chtop_tasks.agents.login_store import parse_login
from chtop_tasks.core.apiroute import PLACEHOLDER
from chtop_tasks.core.places import login_store_path


@pytest.fixture
def api(certs):
    server = FakeAnthropic(tls=certs, oauth=True)
    yield server
    server.close()


@pytest.fixture
def held(proxy, api, certs):
    """The proxy with the dev worktree's socket, no key in the secrets file, a login held for the group;
    (proxy, socket, store path).  The secrets file names the fake as the upstream and token endpoint."""
    write_secrets(f"ANTHROPIC_BASE_URL=https://api.anthropic.com:{api.port}\n"
                  f"CHTOP_OAUTH_TOKEN_URL=https://api.anthropic.com:{api.port}/v1/oauth/token\n"
                  f"CHTOP_API_CA_FILE={certs['ca']}\n")
    proxy.hosts_file.write_text(proxy.hosts_file.read_text() + "127.0.0.1 api.anthropic.com\n")
    store = login_store_path(proxy.group, "claude")
    hold(store, api.issue_login())
    ep = proxy.start("dev")
    return proxy, ep.socket_path, store


def hold(store, login: dict) -> None:
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(login))
    store.chmod(0o600)


def held_login(store):
    return parse_login(store.read_bytes(), str(store))


def messages_auth(api) -> list[str]:
    return [r["headers"].get("authorization", "") for r in api.requests if r["path"].endswith("/v1/messages")]


def test_the_held_login_is_refreshed_before_it_expires_and_written_back_by_a_rename(held, api):
    proxy, sock, store = held
    first = api.issue_login(expires_in=60)          # inside the proxy's margin: refreshed before use
    hold(store, first)
    inode = os.stat(store).st_ino
    status, head, body = post(sock, "/chtop-api/claude/v1/messages",
                              headers=f"Authorization: Bearer {PLACEHOLDER}\r\n")
    assert status == 200, head + body
    assert [r["outcome"] for r in api.refreshes] == ["refreshed"]
    assert api.refreshes[0]["refresh_token"] == first["claudeAiOauth"]["refreshToken"]
    now = held_login(store)
    assert now.refresh_token != first["claudeAiOauth"]["refreshToken"]        # the rotated one is kept
    assert messages_auth(api) == [f"Bearer {now.access_token}"]
    assert now.expires_at > time.time() + 3000 and now.subscription == "max"
    st = os.stat(store)
    assert st.st_ino != inode and stat.S_IMODE(st.st_mode) == 0o600            # renamed into place, 0600
    assert sorted(p.name for p in store.parent.iterdir()) == ["claude.json", "claude.lock"]
    rec = proxy.wait_record(lambda r: r.get("decision") == "refresh")
    assert rec["outcome"] == "refreshed" and rec["status"] == 200 and rec["agent"] == "claude"
    assert abs(rec["expires_at"] - now.expires_at) < 1
    logs = (proxy.group / ".chtop" / "net" / "requests.jsonl").read_text()
    logs += (proxy.group / ".chtop" / "net" / "proxy.log").read_text()
    for token in (now.access_token, now.refresh_token, first["claudeAiOauth"]["refreshToken"]):
        assert token not in logs and token.encode() not in head + body


def test_a_401_refreshes_and_sends_the_request_again(held, api):
    proxy, sock, store = held
    api.expire_access_tokens()                      # the store still thinks it has an hour
    status, head, body = post(sock, "/chtop-api/claude/v1/messages?beta=true",
                              {"model": "m", "stream": True, "messages": [], "tools": [{"name": "t"}]})
    assert status == 200 and b"message_stop" in body, head + body
    assert api.unauthorized == 1 and [r["outcome"] for r in api.refreshes] == ["refreshed"]
    sent = [r for r in api.requests if r["path"].startswith("/v1/messages")]
    assert len(sent) == 2 and sent[0]["body"] == sent[1]["body"]                # the same request, sent again
    assert sent[1]["headers"]["authorization"] == f"Bearer {held_login(store).access_token}"
    rec = proxy.wait_record(lambda r: r.get("decision") == "injected")
    assert rec["status"] == 200 and "sent again after a refresh" in rec["reason"]


def test_ten_requests_at_once_across_an_expiry_make_one_refresh(held, api):
    proxy, sock, store = held
    api.expire_access_tokens()
    api.token_delay = 1.0               # a slow endpoint: every request reaches the lock while it refreshes
    answers: list[int] = []

    def one():
        answers.append(post(sock, "/chtop-api/claude/v1/messages")[0])

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == [200] * 10
    assert [r["outcome"] for r in api.refreshes] == ["refreshed"] and not api.revoked


def test_a_revoked_login_gets_a_clear_401_and_the_endpoint_is_not_asked_again(held, api):
    proxy, sock, store = held
    api.revoked = True                  # e.g. a copy of the login refreshed elsewhere
    for _ in range(3):
        status, head, body = post(sock, "/chtop-api/claude/v1/messages")
        assert status == 401, head + body
        assert b"inv agent.login" in body and b"on the host" in body
    assert [r["outcome"] for r in api.refreshes] == ["refused"]                # one try, no retry storm
    rec = proxy.wait_record(lambda r: r.get("decision") == "refresh")
    assert rec["outcome"] == "refused" and "invalid_grant" in rec["reason"]
    hold(store, api.issue_login())      # logged in again: the route works at once
    api.revoked = False
    assert post(sock, "/chtop-api/claude/v1/messages")[0] == 200


def test_no_token_of_the_login_comes_back_to_the_sandbox(held, api):
    proxy, sock, store = held
    status, head, body = post(sock, "/chtop-api/claude/v1/echo-credentials",
                              headers=f"Authorization: Bearer {PLACEHOLDER}\r\n")
    login = held_login(store)
    assert api.requests[-1]["headers"]["authorization"] == f"Bearer {login.access_token}"   # the upstream got it
    assert status == 401
    for token in (login.access_token, login.refresh_token):
        assert token.encode() not in head + body
    assert b"credential held by chtop" in body and b"credential held by chtop" in head


def test_a_key_in_the_secrets_file_comes_first(held, api, certs):
    proxy, sock, store = held
    write_secrets(f"ANTHROPIC_API_KEY=sk-ant-api03-the-key\nANTHROPIC_BASE_URL=https://api.anthropic.com:{api.port}\n"
                  f"CHTOP_API_CA_FILE={certs['ca']}\n")
    api.oauth = False
    assert post(sock, "/chtop-api/claude/v1/messages")[0] == 200
    assert api.requests[-1]["headers"]["x-api-key"] == "sk-ant-api03-the-key" and not api.refreshes


def test_a_streamed_body_that_was_not_kept_is_answered_401_and_the_next_request_has_a_new_token(held, api):
    proxy, sock, store = held
    api.expire_access_tokens()
    with connect_proxy(sock, timeout=30) as s:
        s.sendall(f"POST /chtop-api/claude/v1/messages HTTP/1.1\r\nHost: {ROUTE_HOST}\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n".encode())
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 401")
    assert [r["outcome"] for r in api.refreshes] == ["refreshed"]
    assert post(sock, "/chtop-api/claude/v1/messages")[0] == 200
