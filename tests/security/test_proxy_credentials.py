"""The credential route of the real proxy: a sandbox's request gets the host's key on the way out, to the
configured upstream only, over verified TLS, streamed back with the key masked.

The "sandbox" here is a client of the worktree's socket (what a sandbox's relay connects to); the
upstream is the fake Messages API serving TLS with a test CA.  Sandboxes themselves are in
test_credentials_sandbox.py.
"""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import json

import pytest
from fake_anthropic import FakeAnthropic
from proxy_helpers import certs, connect_proxy, proxy, read_all, read_head  # noqa: F401  (fixtures)

from chtop_tasks.core.apiroute import PLACEHOLDER
from chtop_tasks.core.places import secrets_path
from chtop_tasks.proxy.credentials import Redactor

KEY = "sk-ant-api03-real-key-held-on-the-host-0123456789"
TOKEN = "sk-ant-oat01-real-oauth-token-held-on-the-host-98765"
ROUTE_HOST = "127.0.0.1:3128"


def write_secrets(text: str) -> None:
    path = secrets_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)


@pytest.fixture
def api(certs):
    server = FakeAnthropic(tls=certs)
    yield server
    server.close()


@pytest.fixture
def routed(proxy, api, certs):
    """The proxy with the dev worktree's socket; the secrets file names the fake as claude's upstream."""
    write_secrets(f"ANTHROPIC_API_KEY={KEY}\nANTHROPIC_BASE_URL=https://api.anthropic.com:{api.port}/base\n"
                  f"CHTOP_API_CA_FILE={certs['ca']}\n")
    proxy.hosts_file.write_text(proxy.hosts_file.read_text() + "127.0.0.1 api.anthropic.com\n")
    ep = proxy.start("dev")
    return proxy, ep.socket_path


def post(via, path: str, body: dict | None = None, headers: str = "", host: str = ROUTE_HOST,
         target: str | None = None) -> tuple[int, bytes, bytes]:
    """POST through ``via``; (status, whole answer head, body)."""
    data = json.dumps(body or {"model": "m", "messages": [], "tools": [{"name": "t"}]}).encode()
    head = (f"POST {target or path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{headers}\r\n").encode()
    with connect_proxy(via, timeout=30) as s:
        s.sendall(head + data)
        answer = read_all(s)
    top, _, rest = answer.partition(b"\r\n\r\n")
    status = int(top.split(b" ")[1]) if top else 0
    return status, top, rest


def test_the_fake_sees_the_real_key_and_the_sandbox_gets_the_stream(routed, api):
    proxy, sock = routed
    status, head, body = post(sock, "/chtop-api/claude/v1/messages?beta=true",
                              {"model": "m", "stream": True, "messages": [], "tools": [{"name": "t"}]},
                              headers=f"x-api-key: {PLACEHOLDER}\r\nAuthorization: Bearer forged\r\n"
                                      "Accept-Encoding: gzip\r\n")
    assert status == 200, head + body
    assert b"event: message_stop" in body and b"text/event-stream" in head
    seen = api.requests[-1]
    assert seen["path"] == "/base/v1/messages?beta=true"
    assert seen["headers"]["x-api-key"] == KEY
    assert "authorization" not in seen["headers"]
    assert seen["headers"]["host"] == f"api.anthropic.com:{api.port}"
    assert seen["headers"]["accept-encoding"] == "identity"
    rec = proxy.wait_record(lambda r: r.get("decision") == "injected")
    assert (rec["method"], rec["host"], rec["port"], rec["path"], rec["status"], rec["agent"]) == (
        "POST", "api.anthropic.com", api.port, "/base/v1/messages", 200, "claude")
    logs = proxy.group / ".chtop" / "net"
    for name in ("requests.jsonl", "proxy.log"):
        assert KEY not in (logs / name).read_text()


def test_a_long_lived_oauth_token_goes_as_a_bearer(routed, api, certs):
    proxy, sock = routed
    write_secrets(f"CLAUDE_CODE_OAUTH_TOKEN={TOKEN}\nANTHROPIC_API_KEY={KEY}\n"
                  f"ANTHROPIC_BASE_URL=https://api.anthropic.com:{api.port}\nCHTOP_API_CA_FILE={certs['ca']}\n")
    status, head, body = post(sock, "/chtop-api/claude/v1/messages",
                              headers=f"Authorization: Bearer {PLACEHOLDER}\r\n")
    assert status == 200, head + body
    seen = api.requests[-1]["headers"]
    assert seen["authorization"] == f"Bearer {TOKEN}" and "x-api-key" not in seen


def test_an_upstream_that_quotes_the_key_sends_back_only_a_mask(routed, api):
    proxy, sock = routed
    status, head, body = post(sock, "/chtop-api/claude/v1/echo-credentials", headers=f"x-api-key: {PLACEHOLDER}\r\n")
    assert status == 401
    assert api.requests[-1]["headers"]["x-api-key"] == KEY      # the upstream did get it
    assert KEY.encode() not in head + body
    assert b"credential held by chtop" in body and b"credential held by chtop" in head
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                 .split(b":")[1])
    assert len(body) == length, "the mask keeps the length: Content-Length still right"


def test_the_stream_is_not_buffered(routed, api):
    proxy, sock = routed
    with connect_proxy(sock, timeout=30) as s:
        s.sendall(f"POST /chtop-api/claude/v1/slow-stream HTTP/1.1\r\nHost: {ROUTE_HOST}\r\n"
                  "Content-Length: 0\r\n\r\n".encode())
        status, rest = read_head(s)
        while b"\n\n" not in rest:          # the first event arrives while the upstream still holds the rest
            rest += s.recv(65536)
        assert status == 200 and b'"first": true' in rest
        api.release.set()
        rest += read_all(s)
    assert b"message_stop" in rest


def test_a_forged_host_or_another_host_never_gets_the_key(routed, api, certs):
    proxy, sock = routed
    path = "/chtop-api/claude/v1/messages"
    count = len(api.requests)
    status, _, body = post(sock, path, host="api.anthropic.com")
    assert status == 400 and b"answers only for Host 127.0.0.1:3128" in body
    status, _, body = post(sock, path, target=f"http://{ROUTE_HOST}{path}", host="evil.example.test")
    assert status == 400
    # an absolute URL for another (allowed) host is ordinary proxying: the placeholder, never the key
    other = FakeAnthropic()
    try:
        proxy.allow(f"other.example.test:{other.port} private")
        status, _, _ = post(sock, path, target=f"http://other.example.test:{other.port}{path}",
                            host=f"other.example.test:{other.port}", headers=f"x-api-key: {PLACEHOLDER}\r\n")
        assert status == 200
        assert other.requests[-1]["headers"]["x-api-key"] == PLACEHOLDER
    finally:
        other.close()
    assert len(api.requests) == count


def test_the_route_answers_only_a_sandbox_and_only_plain_paths(routed, api):
    proxy, sock = routed
    count = len(api.requests)
    status, _, body = post(proxy, "/chtop-api/claude/v1/messages")         # the host's TCP port
    assert status == 403 and b"only an agent's sandbox" in body
    for bad in ("/chtop-api/claude/../../admin", "/chtop-api/claude/v1/%2e%2e/x", "/chtop-api/claude//x"):
        status, _, _ = post(sock, bad)
        assert status == 400, bad
    status, _, body = post(sock, "/chtop-api/nosuch/v1/messages")
    assert status == 404
    assert len(api.requests) == count


def test_tls_is_verified_against_the_configured_store(routed, api):
    proxy, sock = routed
    write_secrets(f"ANTHROPIC_API_KEY={KEY}\nANTHROPIC_BASE_URL=https://api.anthropic.com:{api.port}\n")
    status, _, body = post(sock, "/chtop-api/claude/v1/messages")
    assert status == 502 and b"CERTIFICATE_VERIFY_FAILED" in body
    assert not api.requests


def test_a_bad_secrets_line_is_not_quoted_to_the_sandbox(routed, api):
    proxy, sock = routed
    write_secrets(f"ANTHROPIC_API_KEY {KEY}\n")
    status, _, body = post(sock, "/chtop-api/claude/v1/messages")
    assert status == 503 and KEY.encode() not in body


def test_the_mask_covers_a_key_split_across_reads():
    r = Redactor(b"sk-secret-123")
    out = b"".join([r.feed(b"error: sk-sec"), r.feed(b"ret-1"), r.feed(b"23 was bad\n\n"), r.flush()])
    assert b"sk-secret-123" not in out and len(out) == len(b"error: sk-secret-123 was bad\n\n")
    assert r.feed(b"data: {}\n\n") == b"data: {}\n\n"          # nothing held back at an event's end


# -- the other agents: kimi (Moonshot, OpenAI-style Bearer), codex (OpenAI, Bearer) and gemini (Google,
# x-goog-api-key) -------------------------------------------------------------------------------------

KIMI_KEY = "sk-kimi-real-key-held-on-the-host-24680"
GEMINI_KEY = "AIzaSy-real-gemini-key-held-on-the-host-13579"
OPENAI_KEY = "sk-proj-real-openai-key-held-on-the-host-11223"
KEY_OF = {"kimi": KIMI_KEY, "gemini": GEMINI_KEY, "claude": TOKEN, "codex": OPENAI_KEY}


@pytest.fixture
def others(proxy, api, certs):
    """The proxy with the dev worktree's socket; the secrets file names the fake as each agent's upstream
    (at the real API's host name, mapped to the fake), with a base path for kimi as Moonshot's has."""
    write_secrets(f"KIMI_API_KEY={KIMI_KEY}\nKIMI_BASE_URL=https://api.moonshot.ai:{api.port}/v1\n"
                  f"GEMINI_API_KEY={GEMINI_KEY}\n"
                  f"GOOGLE_GEMINI_BASE_URL=https://generativelanguage.googleapis.com:{api.port}\n"
                  f"CLAUDE_CODE_OAUTH_TOKEN={TOKEN}\nANTHROPIC_BASE_URL=https://api.anthropic.com:{api.port}\n"
                  f"OPENAI_API_KEY={OPENAI_KEY}\nOPENAI_BASE_URL=https://api.openai.com:{api.port}/v1\n"
                  f"CHTOP_API_CA_FILE={certs['ca']}\n")
    proxy.hosts_file.write_text(proxy.hosts_file.read_text() + "127.0.0.1 api.moonshot.ai "
                                "generativelanguage.googleapis.com api.anthropic.com api.openai.com\n")
    ep = proxy.start("dev")
    return proxy, ep.socket_path


FORGED = (f"Authorization: Bearer {PLACEHOLDER}\r\nx-api-key: forged-anthropic\r\n"
          f"x-goog-api-key: {PLACEHOLDER}\r\n")


def assert_bearer_alone(proxy, api, agent: str, key: str, host: str, path: str) -> None:
    """The upstream's last request went to ``host`` ``path`` with ``key`` as its Bearer and none of the
    forged headers of the other agents' schemes; the proxy logged it injected, answered 200."""
    seen = api.requests[-1]
    assert seen["path"] == path
    assert seen["headers"]["authorization"] == f"Bearer {key}"
    assert "x-api-key" not in seen["headers"] and "x-goog-api-key" not in seen["headers"]
    assert seen["headers"]["host"] == f"{host}:{api.port}"
    rec = proxy.wait_record(lambda r: r.get("decision") == "injected" and r.get("agent") == agent)
    assert (rec["host"], rec["path"], rec["status"]) == (host, path, 200)


def test_kimi_gets_its_key_as_a_bearer_under_moonshots_base_path(others, api):
    proxy, sock = others
    status, head, body = post(sock, "/chtop-api/kimi/chat/completions", headers=FORGED)
    assert status == 200, head + body
    assert_bearer_alone(proxy, api, "kimi", KIMI_KEY, "api.moonshot.ai", "/v1/chat/completions")


def test_codex_gets_its_key_as_a_bearer_on_the_responses_api(others, api):
    proxy, sock = others
    status, head, body = post(sock, "/chtop-api/codex/responses", {"model": "m", "input": [], "stream": True},
                              headers=FORGED)
    assert status == 200, head + body
    assert_bearer_alone(proxy, api, "codex", OPENAI_KEY, "api.openai.com", "/v1/responses")
    logs = proxy.group / ".chtop" / "net"
    assert all(OPENAI_KEY not in (logs / name).read_text() for name in ("requests.jsonl", "proxy.log"))


def test_gemini_gets_its_key_as_x_goog_api_key_and_a_key_in_the_query_is_dropped(others, api):
    proxy, sock = others
    path = f"/chtop-api/gemini/v1beta/models/gemini-x:streamGenerateContent?alt=sse&key={PLACEHOLDER}"
    status, head, body = post(sock, path, {"contents": [], "bytes": 20000}, headers=FORGED)
    assert status == 200, head + body
    assert b"text/event-stream" in head and body.count(b"content_block_delta") >= 10
    assert body.endswith(b"message_stop\"}\n\n")
    seen = api.requests[-1]
    assert seen["path"] == "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
    assert seen["headers"]["x-goog-api-key"] == GEMINI_KEY
    assert "authorization" not in seen["headers"] and "x-api-key" not in seen["headers"]
    assert seen["headers"]["host"] == f"generativelanguage.googleapis.com:{api.port}"
    logs = proxy.group / ".chtop" / "net"
    for name in ("requests.jsonl", "proxy.log"):
        text = (logs / name).read_text()
        assert GEMINI_KEY not in text and KIMI_KEY not in text


@pytest.mark.parametrize("agent", ["kimi", "gemini", "claude", "codex"])
def test_an_upstream_that_quotes_the_bare_key_sends_back_only_a_mask(others, api, agent):
    """A Bearer token is masked on its own, not only with its ``Bearer `` prefix."""
    proxy, sock = others
    status, head, body = post(sock, f"/chtop-api/{agent}/v1/echo-credentials?key=x", headers=FORGED)
    assert status == 401
    assert KEY_OF[agent] in api.requests[-1]["headers"].values() or \
        f"Bearer {KEY_OF[agent]}" in api.requests[-1]["headers"].values()
    assert KEY_OF[agent].encode() not in head + body
    assert b"credential held by chtop" in body and b"credential held by chtop" in head


def test_gemini_a_forged_host_or_another_host_never_gets_the_key(others, api):
    proxy, sock = others
    path = "/chtop-api/gemini/v1beta/models/m:generateContent"
    count = len(api.requests)
    status, _, body = post(sock, path, host="generativelanguage.googleapis.com")
    assert status == 400 and b"answers only for Host 127.0.0.1:3128" in body
    other = FakeAnthropic()
    try:
        proxy.allow(f"other.example.test:{other.port} private")
        status, _, _ = post(sock, path, target=f"http://other.example.test:{other.port}{path}?key={PLACEHOLDER}",
                            host=f"other.example.test:{other.port}", headers=FORGED)
        assert status == 200
        seen = other.requests[-1]
        assert seen["path"].endswith(f"?key={PLACEHOLDER}")          # ordinary proxying: left as it came
        assert seen["headers"]["x-goog-api-key"] == PLACEHOLDER
        assert GEMINI_KEY not in json.dumps(other.requests)
    finally:
        other.close()
    assert len(api.requests) == count


def test_only_the_query_parameter_that_carries_a_key_is_dropped():
    from chtop_tasks.proxy.credentials import without_query_key

    assert without_query_key("/m:x?alt=sse&key=p", "key") == "/m:x?alt=sse"
    assert without_query_key("/m:x?key=p", "key") == "/m:x"
    assert without_query_key("/m:x?%6Bey=p&keys=1&alt=sse&key", "key") == "/m:x?keys=1&alt=sse"
    assert without_query_key("/m:x?key=p", "") == "/m:x?key=p"        # a scheme without one: as it came
    assert without_query_key("/v1/messages", "key") == "/v1/messages"
