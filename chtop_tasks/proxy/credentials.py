"""The credential route: a sandbox's API requests get the host's real credential on the way out.

Inside a sandbox an agent's base URL is ``http://127.0.0.1:3128/chtop-api/<agent>`` and its key is
``PLACEHOLDER``.  A request on that route, on a sandbox's connection only, loses every credential header
it came with, gets the one ``secrets.env`` holds (read for each request, never logged) and goes to the
agent's configured upstream, over TLS verified against the system CA store (plus ``CHTOP_API_CA_FILE``).
The answer streams back as it arrives, the credential's value masked wherever the upstream echoes it.
With no key or token in the secrets file, the group's held subscription login is the credential
(``oauth.py``: refreshed here, the request sent again once after a 401 when its body was kept).
See docs/credentials.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit

from ..core.apiroute import AUTH_SCHEMES, PREFIX, RELAY_PORT, ROUTE_HOSTS
from ..core.errors import ChtopError
from .aio import TIMEOUTS
from .hostmatch import BadHost, Entry, canonical_host, is_ip, parse_authority
from .messages import HOP_BY_HOP, Refusal, Request
from .oauth import Held, access_token, kept_body
from .policy import built_worktree

CA_FILE_VAR = "CHTOP_API_CA_FILE"
CREDENTIAL_HEADERS = {"proxy-authorization"} | {s.header.lower() for s in AUTH_SCHEMES.values()}
DROPPED = HOP_BY_HOP | CREDENTIAL_HEADERS | {"host", "accept-encoding", "te", "upgrade", "trailer"}
HOST_TCP_SOURCE = "tcp"         # the group's TCP port on the host (server._listen's key)
MAX_RESPONSE_HEAD = 64 * 1024
CHUNK = 64 * 1024
_AGENT = re.compile(r"[a-z][a-z0-9-]{0,19}\Z")


@dataclass(frozen=True)
class Routed:
    """A request on the credential route: the agent it names and what follows ``/chtop-api/<agent>``."""

    agent: str
    rest: str


@dataclass(frozen=True)
class Route:
    """Where a routed request goes and what it carries: never shown, never logged."""

    agent: str
    scheme: str
    host: str
    port: int
    base_path: str
    header: str
    value: str                  # the header's value: the secret, maybe with a prefix ("Bearer ")
    secret: str                 # masked in the answer wherever the upstream quotes it
    ca_file: str | None
    query: str = ""             # a query parameter the API reads a key from: dropped from the path
    login: Held | None = None   # the group's held login: ``value`` is its access token, refreshed here


def routed(req: Request, worktree: str | None, source: str) -> Routed | None:
    """The route ``req`` asks for; None when it is not a route request (proxied as before).

    Refusal for a route request that cannot have a credential: from the host's TCP port or a venv
    build's socket, with a ``Host`` other than the in-sandbox listener, or a path that leaves the prefix.
    """
    target = req.target
    if target.startswith(PREFIX):
        authority = None
    else:
        scheme, sep, after = target.partition("://")
        if not sep or scheme.lower() != "http":
            return None
        authority, slash, path = after.partition("/")
        if authority.lower() not in ROUTE_HOSTS or not ("/" + path).startswith(PREFIX):
            return None             # another host's URL: ordinary proxying, judged and without credential
        target = "/" + path
    hosts = [v for n, v in req.headers if n.lower() == "host"]
    if len(hosts) != 1 or hosts[0].lower() not in ROUTE_HOSTS or (authority and authority.lower() != hosts[0].lower()):
        raise Refusal(400, "bad-request", f"the credential route answers only for Host 127.0.0.1:{RELAY_PORT}")
    if source == HOST_TCP_SOURCE or built_worktree(worktree) is not None:
        raise Refusal(403, "blocked", "the credential route answers only an agent's sandbox")
    agent, _, rest = target[len(PREFIX):].partition("/")
    if not _AGENT.match(agent):
        raise Refusal(404, "bad-request", "no such credential route")
    rest = "/" + rest
    path = rest.split("?", 1)[0]
    segments = path.split("/")[1:]
    if "\\" in path or "%" in path or any(s in ("", ".", "..") for s in segments[:-1]) or segments[-1] in (".", ".."):
        raise Refusal(400, "bad-request", "the credential route takes a plain path (no '..', '%', '//' or '\\')")
    return Routed(agent, rest)


def _secrets() -> dict[str, str]:
    """The secrets file now.  Its errors are not passed on: a parse error quotes the bad line."""
    from ..agents.secrets import load_secrets

    try:
        return load_secrets()
    except ChtopError:
        raise Refusal(503, "route-error", "the secrets file cannot be read; any `inv sbox.*` on the host "
                                          "says why") from None


def upstream_of(url: str) -> tuple[str, str, int, str]:
    """``https://host[:port][/base]`` -> (scheme, host, port, base path without its trailing /)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.query:
        raise ValueError("not an http(s)://host[:port][/path] URL")   # (never echoed: it may hold a secret)
    host, port = parse_authority(parts.netloc, default_port=443 if parts.scheme == "https" else 80)
    return parts.scheme, host, port, parts.path.rstrip("/")


def resolve(agent_name: str, group_dir: Path | None = None) -> Route:
    """The route of ``agent_name`` from the registry and the secrets file, read now; with no key or token
    of it there, the login ``group_dir`` holds (its ``value`` still to be filled: ``forward``)."""
    from ..agents.registry import load_registry, routed_token

    try:
        agent = load_registry().get(agent_name)
    except ChtopError:
        raise Refusal(503, "route-error", "the agents' registry cannot be read") from None
    secrets = _secrets()
    token = routed_token(agent, secrets) if agent is not None else None
    held = held_login(agent, secrets, group_dir) if token is None and agent is not None else None
    if token is None and held is None:
        raise Refusal(404, "route-error", f"no credential route for agent {agent_name!r} (no key or token of "
                                          f"it in the secrets file, or credentials_inside)")
    url = secrets.get(agent.api_base_env) or agent.api_upstream
    try:
        scheme, host, port, base = upstream_of(url)
    except (ValueError, BadHost) as exc:
        raise Refusal(502, "route-error", f"the upstream of {agent_name} ({agent.api_base_env} in the secrets "
                                          f"file, else api_upstream): {exc}") from None
    if held is not None:
        return Route(agent_name, scheme, host, port, base, "Authorization", "", "", held.ca_file, login=held)
    how = AUTH_SCHEMES[agent.api_auth[token]]
    secret = secrets[token]
    return Route(agent_name, scheme, host, port, base, how.header, how.value.format(secret), secret,
                 secrets.get(CA_FILE_VAR) or None, how.query)


def without_query_key(rest: str, name: str) -> str:
    """``rest`` without any query parameter ``name`` (a key a sandbox put in the URL, the placeholder at
    best): the real credential goes in the header only."""
    path, sep, query = rest.partition("?")
    if not name or not sep:
        return rest
    kept = [p for p in query.split("&") if unquote_plus(p.partition("=")[0]) != name]
    return path + ("?" + "&".join(kept) if kept else "")


def held_login(agent, secrets: dict[str, str], group_dir: Path | None) -> Held | None:
    """The group's held login of ``agent`` with where it is refreshed (the registry's
    ``oauth_token_url``, or the secrets file's ``CHTOP_OAUTH_TOKEN_URL``); None when it holds none."""
    from ..agents.login_store import holds_login
    from ..agents.registry import OAUTH_TOKEN_URL_VAR, login_token

    if group_dir is None or login_token(agent) is None or not holds_login(group_dir, agent.name):
        return None
    try:
        endpoint = upstream_of(secrets.get(OAUTH_TOKEN_URL_VAR) or agent.oauth_token_url)
    except (ValueError, BadHost) as exc:
        raise Refusal(502, "route-error", f"the token endpoint of {agent.name} ({OAUTH_TOKEN_URL_VAR} in the "
                                          f"secrets file, else oauth_token_url): {exc}") from None
    return Held(Path(group_dir), agent.name, endpoint, agent.oauth_client_id, secrets.get(CA_FILE_VAR) or None)


def upstream_head(req: Request, route: Route, rest: str) -> bytes:
    """The head sent upstream: no credential header from inside, the real one added, one request."""
    host = f"[{route.host}]" if ":" in route.host else route.host
    if route.port != (443 if route.scheme == "https" else 80):
        host += f":{route.port}"
    lines = [f"{req.method} {route.base_path}{without_query_key(rest, route.query)} HTTP/1.1", f"Host: {host}"]
    lines += [f"{n}: {v}" for n, v in req.headers if n.lower() not in DROPPED]
    lines += ["Accept-Encoding: identity", "Connection: close", f"{route.header}: {route.value}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Redactor:
    """Masks every occurrence of ``secret`` in a stream, keeping its length (framing stays right).

    Holds back only a tail that could be the start of the secret, so a stream is not delayed.
    """

    def __init__(self, secret: bytes):
        self.secret = secret
        self.mask = (b"[credential held by chtop's proxy]" * (len(secret) // 30 + 1))[: len(secret)]
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        data = (self.held + data).replace(self.secret, self.mask)
        keep = self._partial_tail(data)
        self.held = data[len(data) - keep:] if keep else b""
        return data[: len(data) - keep]

    def _partial_tail(self, data: bytes) -> int:
        for size in range(min(len(self.secret) - 1, len(data)), 0, -1):
            if self.secret.startswith(data[-size:]):
                return size
        return 0

    def flush(self) -> bytes:
        held, self.held = self.held, b""
        return held


_contexts: dict[str | None, ssl.SSLContext] = {}


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The system CA store (and ``ca_file``), verified names; made once per CA file."""
    ctx = _contexts.get(ca_file)
    if ctx is None:
        ctx = ssl.create_default_context()
        if ca_file:
            try:
                ctx.load_verify_locations(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise Refusal(502, "route-error", f"{CA_FILE_VAR} {ca_file}: {exc}") from None
        _contexts[ca_file] = ctx
    return ctx


def response_head(head: bytes, redactor: Redactor) -> tuple[bytes, int | None]:
    """The upstream's response head for the sandbox (its connection closed after it) and its status."""
    lines = head.split(b"\r\n")
    status = None
    m = re.match(rb"HTTP/1\.[01] (\d{3})", lines[0])
    if m:
        status = int(m.group(1))
    kept = [line for line in lines[1:] if line.split(b":", 1)[0].strip().lower().decode("latin-1")
            not in ("connection", "keep-alive", "proxy-connection")]
    out = b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"
    return out.replace(redactor.secret, redactor.mask), status


async def open_upstream(server, host: str, port: int, scheme: str, ca_file: str | None, rec: dict | None = None):
    """(reader, writer) of a connection to a configured upstream, TLS verified for ``https``."""
    entry = Entry(host=host, is_ip=is_ip(host), private=True, text=host)
    sock = await server.upstreams.open(canonical_host(host), port, entry, {} if rec is None else rec)
    try:
        return await asyncio.wait_for(asyncio.open_connection(
            sock=sock, ssl=tls_context(ca_file) if scheme == "https" else None,
            server_hostname=host if scheme == "https" else None), server.cfg.connect_timeout)
    except (OSError, ssl.SSLError, *TIMEOUTS) as exc:
        sock.close()
        raise Refusal(502, "route-error", f"upstream {host}:{port}: {exc or 'timed out'}") from None


async def forward(server, conn, req: Request, route_req: Routed, rest: bytes, rec: dict) -> None:
    """Send one routed request upstream with the credential and stream its answer back."""
    route = resolve(route_req.agent, server.cfg.group_dir)
    rec.update(host=route.host, port=route.port, path=route.base_path + route_req.rest.split("?", 1)[0],
               agent=route.agent, reason=f"credential route {route.agent}")
    if route.login is None:
        await _exchange(server, conn, req, route, route_req, rest, rec, follow=True)
        return
    opener = partial(open_upstream, server)
    body = await kept_body(server.loop, conn, req, rest)
    token = await access_token(server, route.login, opener)
    route = replace(route, value=f"Bearer {token}", secret=token)
    if await _exchange(server, conn, req, route, route_req, rest if body is None else body, rec,
                       follow=body is None, give_up_on_401=body is not None):
        if rec.get("status") == 401:       # the body could not be kept: the next request gets a new token
            with contextlib.suppress(Refusal):     # (a refused refresh is logged; the answer is already sent)
                await access_token(server, route.login, opener, failed=token)
        return
    token = await access_token(server, route.login, opener, failed=token)
    rec["reason"] += " (sent again after a refresh)"
    await _exchange(server, conn, req, replace(route, value=f"Bearer {token}", secret=token), route_req, body, rec, follow=False)


async def _exchange(server, conn, req: Request, route: Route, route_req: Routed, first: bytes, rec: dict, *,
                    follow: bool, give_up_on_401: bool = False) -> bool:
    """One request upstream and its answer streamed back; False (nothing sent back) when the upstream
    answered 401 and ``give_up_on_401``.  ``follow``: the rest of the body still comes from ``conn``."""
    loop = server.loop
    reader, writer = await open_upstream(server, route.host, route.port, route.scheme, route.ca_file, rec)
    rec["decision"] = "injected"
    redactor = Redactor(route.secret.encode("latin-1"))
    counts = {"up": 0, "down": 0}
    up = loop.create_task(_pump_up(loop, conn if follow else None, writer,
                                   upstream_head(req, route, route_req.rest) + first, counts))
    try:
        head, body = await _answer_head(reader)
        out, status = response_head(head, redactor)
        if status == 401 and give_up_on_401:
            return False
        rec["status"] = status
        await _pump_down(loop, reader, conn, out, body, redactor, counts)
        return True
    finally:
        up.cancel()
        writer.close()
        rec["bytes_up"], rec["bytes_down"] = rec.get("bytes_up", 0) + counts["up"], counts["down"]


async def _pump_up(loop, conn, writer, first: bytes, counts: dict) -> None:
    """The request (its head rewritten) and then whatever the sandbox sends (``conn``; None: nothing
    more), to the upstream."""
    data = first
    try:
        while data:
            writer.write(data)
            counts["up"] += len(data)
            await writer.drain()
            data = await loop.sock_recv(conn, CHUNK) if conn is not None else b""
    except (OSError, ConnectionError):
        return


async def _answer_head(reader) -> tuple[bytes, bytes]:
    """The upstream's answer head, and what came after it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = await _read(reader)
        if not chunk:
            raise Refusal(502, "route-error", "the upstream closed before its answer's head")
        buf += chunk
        if len(buf) > MAX_RESPONSE_HEAD:
            raise Refusal(502, "route-error", "the upstream's answer head is too large")
    head, _, body = buf.partition(b"\r\n\r\n")
    return head, body


async def _pump_down(loop, reader, conn, out: bytes, body: bytes, redactor: Redactor, counts: dict) -> None:
    """The upstream's answer (its head ``out`` already made) to the sandbox as it arrives, credential masked."""
    await loop.sock_sendall(conn, out + redactor.feed(body))
    counts["down"] += len(out) + len(body)
    while chunk := await _read(reader):
        counts["down"] += len(chunk)
        await loop.sock_sendall(conn, redactor.feed(chunk))
    await loop.sock_sendall(conn, redactor.flush())


async def _read(reader) -> bytes:
    try:
        return await reader.read(CHUNK)
    except (OSError, ssl.SSLError, ConnectionError):
        return b""
