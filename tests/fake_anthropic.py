"""A scripted local fake of the Anthropic Messages API, for driving the real ``claude`` CLI in tests.

Usage::

    from fake_anthropic import FakeAnthropic, text, bash

    api = FakeAnthropic([bash("sleep 20"), text("done")])   # listens on 127.0.0.1:api.port
    env = {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-test"}
    ...                                                      # run claude with env
    api.turns_served        # how many script turns were answered
    api.wait_for_turns(2)   # block until two were (AssertionError after a timeout)
    api.requests            # every request: {"method", "path", "body" (parsed JSON or None), "headers"}
    api.conversations()     # the "messages" list of each scripted POST /v1/messages
    api.close()

The script is a list of turns.  Each ``POST /v1/messages`` that belongs to
the conversation (a request that offers tools, i.e. the main agent loop)
takes the next turn; when the script is used up, the answer is the text
``FakeAnthropic.DONE``.  A turn is ``text("...")`` (stop_reason
``end_turn``) or ``bash("cmd")`` (a ``tool_use`` of the ``Bash`` tool,
stop_reason ``tool_use``; the CLI runs the command and sends its result in
the next request).  Side requests the CLI makes (titles, topic detection,
summaries: no tools offered) get a short text answer and do not use up a
turn.  The script may instead be a function of the request body that returns the turn (each
conversation answered by its own state, for sessions at once).  Both ``stream: true`` (server-sent events: ``message_start``,
``content_block_start``, ``content_block_delta`` with ``text_delta`` or
``input_json_delta``, ``content_block_stop``, ``message_delta``,
``message_stop``) and plain JSON answers are spoken.
``/v1/messages/count_tokens`` answers a token count; any other GET/HEAD/POST
gets ``200 {}``.  ``FakeAnthropic(script, tls=certs)`` serves HTTPS with ``certs`` ({"cert", "key"}).

Paths for the credential route's tests and bench: ``.../echo-credentials`` answers 401 quoting the
credentials it got (each credential header's value, a Bearer token without its prefix, a ``key`` query
parameter) in its body and an ``X-Echo`` header, the way a careless gateway might; ``.../slow-stream``
sends one event, then waits for ``api.release`` before the rest; ``.../sse-bytes`` (and Gemini's
``...:streamGenerateContent``) streams text deltas of about ``{"bytes": N}`` bytes in all (4096 when
the body does not say).

``FakeAnthropic(oauth=True)`` behaves like Anthropic's subscription logins: ``api.issue_login()`` is a login
in claude's ``.credentials.json`` shape; ``POST /v1/oauth/token`` (grant_type refresh_token) trades a
refresh token for new tokens, each refresh token once: a second use of one revokes the whole login, as
the real endpoint does (which is how copies of a login refreshing apart log each other out); an unknown,
used or revoked one gets ``400 invalid_grant``.  ``POST /v1/messages`` then answers 401 to a missing,
unknown, expired or revoked access token.  ``api.expire_access_tokens()`` expires every access token
issued so far, now; ``api.refreshes`` lists the token requests (``{"refresh_token", "outcome"}``);
``api.token_delay`` holds each token answer that many seconds (a slow endpoint).
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from conftest import eventually
from fake_http import JsonHandler, RecordingServer, Turn, text

MODEL = "claude-fake-1"


def bash(command: str) -> Turn:
    """A model turn that calls the Bash tool with ``command``."""
    return Turn("bash", command)


def _usage() -> dict:
    return {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def _blocks(turn: Turn, ident: str) -> tuple[list[dict], str]:
    if turn.kind == "bash":
        return [{"type": "tool_use", "id": f"toolu_{ident}", "name": "Bash",
                 "input": {"command": turn.value, "description": "run a command"}}], "tool_use"
    return [{"type": "text", "text": turn.value}], "end_turn"


def _message(blocks: list[dict], stop: str, ident: str, model: str) -> dict:
    return {"id": f"msg_{ident}", "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": _usage()}


def _sse_events(blocks: list[dict], stop: str, ident: str, model: str):
    """The streaming events of one message, in the order the API sends them."""
    start = _message([], None, ident, model)
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 5}}
    yield "message_stop", {"type": "message_stop"}


class FakeAnthropic(RecordingServer):
    """The fake API server: ``FakeAnthropic(script)``, then ``.url``; ``.close()`` at the end."""

    DONE = "The fake API has no more turns."

    def __init__(self, script: list[Turn] | Callable[[dict], Turn] | None = None, host: str = "127.0.0.1", tls: dict | None = None,
                 oauth: bool = False):
        self.script = script if callable(script) else list(script or [])
        self.oauth = oauth
        self.access_tokens: dict[str, float] = {}     # access token -> its expiry (time.time())
        self.refresh_tokens: dict[str, bool] = {}     # refresh token -> used already
        self.revoked = False
        self.refreshes: list[dict] = []
        self.unauthorized = 0                          # Messages requests answered 401
        self.token_lifetime = 3600
        self.token_delay = 0.0
        self.release = threading.Event()
        self.requests: list[dict] = []
        self.turns_served = 0
        self.served_at: list[float] = []      # time.monotonic() as each script turn was answered
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        server = self

        class Handler(JsonHandler):
            def do_HEAD(self):
                server._log(self.command, self.path, None, self.headers)
                self._json({})

            def do_GET(self):
                server._log(self.command, self.path, None, self.headers)
                self._json({})

            def _echo_credentials(self):
                got = [self.headers.get(k) or "" for k in ("x-api-key", "authorization", "x-goog-api-key")]
                got = [v.removeprefix("Bearer ") for v in got if v]
                got += parse_qs(urlsplit(self.path).query).get("key", [])
                data = json.dumps({"type": "error", "error": {"message": f"invalid credentials: {got}"}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Echo", " ".join(got))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _slow_stream(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"event: ping\ndata: {\"first\": true}\n\n")
                self.wfile.flush()
                server.release.wait(60)
                self.wfile.write(b"event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n")
                self.close_connection = True

            def _sse_bytes(self, body):
                size = body.get("bytes", 4096) if isinstance(body, dict) else 4096
                event = (b"event: content_block_delta\ndata: " + json.dumps({
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "x" * 900}}).encode() + b"\n\n")
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for _ in range(max(1, size // len(event))):
                    self.wfile.write(event)
                self.wfile.write(b"event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n")
                self.close_connection = True

            def do_POST(self):
                body = self._body()
                server._log(self.command, self.path, body, self.headers)
                path = self.path.split("?")[0]
                if server.oauth and path.endswith("/v1/oauth/token"):
                    status, answer = server._token(body)
                    return self._json(answer, status)
                if server.oauth and path.endswith(("/v1/messages", "/v1/messages/count_tokens")):
                    why = server._access_refused(self.headers.get("authorization") or "")
                    if why:
                        return self._json({"type": "error", "error": {"type": "authentication_error",
                                                                      "message": why}}, 401)
                if path.endswith("/echo-credentials"):
                    return self._echo_credentials()
                if path.endswith("/slow-stream"):
                    return self._slow_stream()
                if path.endswith(("/sse-bytes", ":streamGenerateContent")):
                    return self._sse_bytes(body)
                if path.endswith("/v1/messages/count_tokens"):
                    return self._json({"input_tokens": 10})
                if not path.endswith("/v1/messages") or not isinstance(body, dict):
                    return self._json({})
                blocks, stop, ident = server._answer(body)
                model = body.get("model") or MODEL
                if not body.get("stream"):
                    return self._json(_message(blocks, stop, ident, model))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event, data in _sse_events(blocks, stop, ident, model):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        self.serve(Handler, host, tls)

    def _answer(self, body: dict) -> tuple[list[dict], str, str]:
        ident = f"{next(self._ids):06d}"
        if not body.get("tools"):                       # a side request: title, topic, summary
            return [{"type": "text", "text": "Fake title"}], "end_turn", ident
        with self._lock:
            if callable(self.script):
                turn = self.script(body)
            else:
                turn = self.script[self.turns_served] if self.turns_served < len(self.script) else text(self.DONE)
            self.turns_served += 1
            self.served_at.append(time.monotonic())
        blocks, stop = _blocks(turn, ident)
        return blocks, stop, ident

    def _new_tokens(self, lifetime: float) -> tuple[str, str]:
        access, refresh = f"sk-ant-oat01-fake-{secrets.token_hex(16)}", f"sk-ant-ort01-fake-{secrets.token_hex(16)}"
        self.access_tokens[access] = time.time() + lifetime
        self.refresh_tokens[refresh] = False
        return access, refresh

    def issue_login(self, expires_in: float = 3600) -> dict:
        """A fresh login, in claude's ``.credentials.json`` shape."""
        with self._lock:
            access, refresh = self._new_tokens(expires_in)
        return {"claudeAiOauth": {"accessToken": access, "refreshToken": refresh,
                                  "expiresAt": int((time.time() + expires_in) * 1000),
                                  "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}

    def expire_access_tokens(self) -> None:
        """Every access token issued so far expires now (the login itself stays good)."""
        with self._lock:
            for token in self.access_tokens:
                self.access_tokens[token] = 0.0

    def _access_refused(self, authorization: str) -> str | None:
        token = authorization.removeprefix("Bearer ")
        with self._lock:
            expiry = self.access_tokens.get(token)
            why = ("OAuth token revoked" if self.revoked else "Invalid bearer token" if expiry is None
                   else "OAuth token has expired" if expiry <= time.time() else None)
            self.unauthorized += why is not None
        return why

    def _token(self, body) -> tuple[int, dict]:
        time.sleep(self.token_delay)
        token = body.get("refresh_token") if isinstance(body, dict) else None
        with self._lock:
            if not isinstance(body, dict) or body.get("grant_type") != "refresh_token" or not body.get("client_id"):
                outcome, answer = "bad request", (400, {"error": "invalid_request"})
            elif self.revoked or token not in self.refresh_tokens:
                outcome, answer = "refused", (400, {"error": "invalid_grant"})
            elif self.refresh_tokens[token]:
                self.revoked = True                     # a refresh token used twice: the whole login goes
                outcome, answer = "reused: login revoked", (400, {"error": "invalid_grant"})
            else:
                self.refresh_tokens[token] = True
                access, refresh = self._new_tokens(self.token_lifetime)
                outcome, answer = "refreshed", (200, {"token_type": "Bearer", "access_token": access,
                                                      "refresh_token": refresh, "expires_in": self.token_lifetime,
                                                      "scope": body.get("scope", "")})
            self.refreshes.append({"refresh_token": token, "outcome": outcome})
        return answer

    def wait_for_turns(self, count: int, timeout: float = 120.0) -> None:
        """Return once ``count`` script turns were served; AssertionError after ``timeout`` seconds."""
        eventually(lambda: self.turns_served >= count, f"the fake API to serve {count} turns", timeout, interval=0.2,
                   explain=lambda: f"it served {self.turns_served}; last requests: "
                                   f"{[r['path'] for r in self.requests[-5:]]}")

    def conversations(self) -> list[list]:
        """The ``messages`` of every conversation request (tools offered), in order."""
        with self._lock:
            return [r["body"]["messages"] for r in self.requests
                    if isinstance(r["body"], dict) and r["body"].get("tools") and "messages" in r["body"]]

    def close(self) -> None:
        self.release.set()
        super().close()
