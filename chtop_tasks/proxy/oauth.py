"""The group's held subscription login on the credential route: its access token, refreshed by the proxy alone.

The login (``agents/login_store.py``) is read for each routed request.  Its access token is refreshed
before it expires (``MARGIN``) and after the upstream refused it (401), one refresh at a time: an asyncio
lock in this process and an flock on the store beside it (another proxy of the group), the store read
again under both, so a request that waited finds the new token and refreshes nothing.  The rotated
refresh token is written back by a rename.  A refresh the token endpoint refuses (revoked, reused) is
remembered: every later request gets the same 401 saying to run ``inv agent.login``, and the endpoint is
not asked again until the login changes.  No token is ever logged or sent to a sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.client
import io
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..agents.login_store import Login, read_login, rotated, write_login
from ..core.places import command_for_group, login_store_path
from .aio import TIMEOUTS
from .messages import Refusal, Request

MARGIN = 300                    # seconds before its expiry that an access token is refreshed
MAX_KEPT_BODY = 32 << 20        # a request body up to this size is kept, to be sent again after a refresh
MAX_TOKEN_ANSWER = 64 * 1024
FLOCK_POLL = 0.05               # seconds between tries of another proxy's store lock (the loop never blocks)


@dataclass(frozen=True)
class Held:
    """Where a group's held login is and where it is refreshed."""

    group_dir: Path
    agent: str
    token_endpoint: tuple[str, str, int, str]      # scheme, host, port, path
    client_id: str
    ca_file: str | None

    @property
    def path(self) -> Path:
        return login_store_path(self.group_dir, self.agent)


_locks: dict[Path, asyncio.Lock] = {}
_refused: dict[Path, str] = {}      # store -> the refresh token the endpoint refused (asked no more)


def relogin(held: Held, why: str) -> Refusal:
    inv = command_for_group(held.group_dir)
    return Refusal(401, "route-error", f"the group's {held.agent} subscription login {why}: run `{inv} agent.login` "
                                       f"on the host to log in again")


def _read(held: Held) -> Login:
    try:
        login = read_login(held.path)
    except (OSError, ValueError):
        raise relogin(held, "cannot be read") from None
    if login is None:
        raise relogin(held, "is gone")
    return login


def _current(login: Login, failed: str | None, now: float) -> bool:
    """Is the login's access token the one to use: fresh, and not the one the upstream just refused?"""
    return login.access_token != failed if failed is not None else login.expires_at - now > MARGIN


async def access_token(server, held: Held, opener, failed: str | None = None) -> str:
    """The access token to present now; refreshed first when it is about to expire, or is ``failed`` (the
    token the upstream answered 401 to).  ``opener(host, port, scheme, ca_file)`` reaches an upstream."""
    login = _read(held)
    if _current(login, failed, time.time()):
        return login.access_token
    async with _locks.setdefault(held.path, asyncio.Lock()):
        async with _store_locked(held.path):
            login = _read(held)            # another request (or proxy) may have refreshed it meanwhile
            if _current(login, failed, time.time()):
                return login.access_token
            if _refused.get(held.path) == login.refresh_token:
                raise relogin(held, "was refused by its token endpoint")
            return (await _refresh(server, held, login, opener)).access_token


@contextlib.asynccontextmanager
async def _store_locked(path: Path):
    """An exclusive flock on ``<store>.lock``, polled so that the event loop never blocks on it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(FLOCK_POLL)
        yield
    finally:
        os.close(fd)                       # releases the flock


async def _refresh(server, held: Held, login: Login, opener) -> Login:
    """Trade the refresh token for new tokens, write them back, log one record; Refusal when refused."""
    scheme, host, port, path = held.token_endpoint
    rec = {"decision": "refresh", "method": "POST", "host": host, "port": port, "path": path,
           "agent": held.agent, "worktree": None}
    payload = {"grant_type": "refresh_token", "refresh_token": login.refresh_token, "client_id": held.client_id}
    if login.scopes:
        payload["scope"] = " ".join(login.scopes)
    try:
        status, answer = await _post_json(server, opener, held.token_endpoint, held.ca_file, payload)
    except Refusal as exc:
        rec.update(status=exc.status, outcome="failed", reason=f"refresh of the {held.agent} login: {exc.reason}")
        server.log.queue(rec)
        raise
    rec["status"] = status
    if status != 200 or not _token_answer(answer):
        code = _error_code(answer)
        if status in (400, 401, 403):
            _refused[held.path] = login.refresh_token
            rec.update(outcome="refused", reason=f"the token endpoint refused the {held.agent} login ({code})")
            server.log.queue(rec)
            raise relogin(held, f"was refused by its token endpoint ({code})")
        rec.update(outcome="failed", reason=f"the token endpoint answered {status} ({code})")
        server.log.queue(rec)
        raise Refusal(502, "route-error", f"refreshing the group's {held.agent} login: the token endpoint "
                                          f"answered {status} ({code}); the next request tries again")
    now = time.time()
    fresh = rotated(login, answer["access_token"], answer.get("refresh_token") or login.refresh_token,
                    float(answer["expires_in"]), now)
    write_login(held.path, fresh)
    _refused.pop(held.path, None)
    rec.update(outcome="refreshed", expires_at=round(fresh.expires_at, 3),
               reason=f"refreshed the {held.agent} login; its access token now expires at "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(fresh.expires_at))}")
    server.log.queue(rec)
    return fresh


def _token_answer(answer) -> bool:
    return (isinstance(answer, dict) and isinstance(answer.get("access_token"), str) and answer["access_token"]
            and isinstance(answer.get("expires_in"), (int, float)) and not isinstance(answer["expires_in"], bool)
            and isinstance(answer.get("refresh_token", ""), str))


def _error_code(answer) -> str:
    """The endpoint's error code (``invalid_grant``), letters and ``_`` only: nothing else is quoted."""
    code = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(code, dict):
        code = code.get("type")
    return code if isinstance(code, str) and re.fullmatch(r"[a-z_]{1,40}", code) else "no error code"


async def _post_json(server, opener, where: tuple[str, str, int, str], ca_file: str | None,
                     payload: dict) -> tuple[int, object]:
    """POST ``payload`` as JSON to the token endpoint; (status, the parsed answer or None)."""
    scheme, host, port, path = where
    data = json.dumps(payload).encode()
    authority = f"[{host}]" if ":" in host else host
    if port != (443 if scheme == "https" else 80):
        authority += f":{port}"
    head = (f"POST {path or '/'} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nAccept-Encoding: identity\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n").encode()
    reader, writer = await opener(host, port, scheme, ca_file)
    try:
        writer.write(head + data)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(MAX_TOKEN_ANSWER + 1), server.cfg.connect_timeout * 6)
        while len(raw) <= MAX_TOKEN_ANSWER and (more := await asyncio.wait_for(reader.read(MAX_TOKEN_ANSWER),
                                                                               server.cfg.connect_timeout * 6)):
            raw += more
    except (OSError, ConnectionError, *TIMEOUTS) as exc:
        raise Refusal(502, "route-error", f"the token endpoint {host}:{port}: {exc or 'timed out'}") from None
    finally:
        writer.close()
    return _parse_answer(raw)


class _Received:
    """The token endpoint's whole answer, as the socket ``http.client.HTTPResponse`` reads it from."""

    def __init__(self, raw: bytes):
        self._raw = raw

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self._raw)


def _parse_answer(raw: bytes) -> tuple[int, object]:
    """(status, the JSON body or None), read by the standard library's HTTP/1.x response parser (its
    status line, headers, Content-Length and chunked bodies)."""
    answer = http.client.HTTPResponse(_Received(raw))
    try:
        answer.begin()
        body = answer.read()
    except http.client.IncompleteRead as exc:       # cut short (or past MAX_TOKEN_ANSWER): its status stands
        body = exc.partial
    except (http.client.HTTPException, ValueError) as exc:
        raise Refusal(502, "route-error", f"the token endpoint's answer is not HTTP ({type(exc).__name__})") from None
    try:
        return answer.status, json.loads(body)
    except ValueError:
        return answer.status, None


async def kept_body(loop, conn, req: Request, rest: bytes) -> bytes | None:
    """The whole request body, read now so that it can be sent again after a refresh; None when it
    cannot be kept (chunked, or larger than ``MAX_KEPT_BODY``): then it streams as it comes."""
    headers = {n.lower(): v for n, v in req.headers}
    if "transfer-encoding" in headers:
        return None
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise Refusal(400, "bad-request", "a Content-Length that is not a number") from None
    if length > MAX_KEPT_BODY:
        return None
    while len(rest) < length:
        chunk = await loop.sock_recv(conn, 65536)
        if not chunk:
            raise ConnectionResetError("closed before the request body was complete")
        rest += chunk
    return rest[:length]
