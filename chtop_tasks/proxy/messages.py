"""HTTP proxy messages: parse a request head, build answers, judge a tunnel's first bytes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import tls
from .hostmatch import BadHost, authority_spec, canonical_host, parse_authority

_REQUEST_LINE = re.compile(r"^([A-Z]{1,20}) (\S{1,8000}) HTTP/1\.([01])$")
_HEADER = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\x00\n\r]*?)[ \t]*$")
TOKEN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization",
              "proxy-authenticate"}
_PHRASES = {200: "OK", 400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 502: "Bad Gateway",
            503: "Service Unavailable"}


class Refusal(Exception):
    """Answer the client with this status, log this decision and reason."""

    def __init__(self, status: int, decision: str, reason: str, body: str | None = None):
        super().__init__(reason)
        self.status, self.decision, self.reason = status, decision, reason
        self.body = body if body is not None else f"chtop egress proxy: {reason}\n"


@dataclass
class Request:
    method: str
    target: str
    minor: str
    headers: list


def parse_head(head: bytes, request_line: re.Pattern = _REQUEST_LINE) -> Request:
    """Request line + headers (CRLF-separated, already cut at the blank line).  The proxy's own
    requests take the upper-case methods; a tunnel's first request any token (``request_line``)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise Refusal(400, "bad-request", "non-ASCII bytes in the request head") from None
    lines = text.split("\r\n")
    m = request_line.match(lines[0])
    if not m:
        raise Refusal(400, "bad-request", "malformed request line")
    headers = []
    for line in lines[1:]:
        hm = _HEADER.match(line)
        if not hm:
            raise Refusal(400, "bad-request", "malformed header line")
        headers.append((hm.group(1), hm.group(2)))
    return Request(m.group(1), m.group(2), m.group(3), headers)


def reply_bytes(status: int, body: str, decision: str = "") -> bytes:
    data = body.encode("utf-8")
    head = (f"HTTP/1.1 {status} {_PHRASES.get(status, 'Error')}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\nX-Chtop-Proxy: {decision or status}\r\n\r\n")
    return head.encode("ascii") + data


def blocked_body(host: str, port: int, worktree: str | None, command: str = "inv") -> str:
    """The 403 body of a blocked request; ``command`` is what runs the tasks for this group on the
    host (``inv`` in a workspace, ``chtop`` for the --dir group, which has no worktree layers)."""
    spec = authority_spec(host, port)
    what = host if spec == host else f"port {port} of {host}"
    lines = [f"chtop egress proxy: blocked {host}:{port}",
             f"{what} is not on the allowlist (sandbox/net-allow.txt; an entry without ports allows 443 and 80).",
             "To approve it for every sandbox of this group, run on the host:",
             f"    {command} net.allow {spec}"]
    if worktree and command == "inv":
        lines += ["or, for this worktree only:", f"    inv net.allow --worktree {worktree} {spec}"]
    lines += ["then retry the request (or answer the prompt of `inv net.watch`)."]
    return "\n".join(lines) + "\n"


_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_TUNNEL_REQUEST_LINE = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}) (\S{1,8000}) HTTP/1\.([01])$")


def _looks_like_request_line(data: bytes) -> bool | None:
    """Do the bytes start like an HTTP request line: a token (any method, any case) then blanks,
    and ``HTTP/`` (any case) later on the line?  None while the first line is still incomplete
    and could become one (a bare token, without a blank or a line end yet, waits for more).
    Leading empty lines are skipped, as servers do."""
    line, newline, _ = data.partition(b"\n")
    n = 0
    while n < len(line) and line[n] in _TCHAR:
        n += 1
    if n == len(line):
        return None if not newline else False
    if n == 0 or line[n] not in b" \t" or any(b < 0x20 and b not in b"\t\r" or b >= 0x7F for b in line[n:]):
        return False                    # not a token, or control bytes no request line has
    return True if b"http/" in line[n:].lower() else (None if not newline else False)


def inspect_first(data: bytes, host: str, port: int, max_head: int = 16384) -> bool:
    """Judge a tunnel's first client bytes: True (pass), False (need more), or Refusal.

    A TLS ClientHello must name the CONNECT host in its SNI (no domain
    fronting); an HTTP request's Host header must name it too (no
    virtual-host fronting on a shared address): any request line that
    starts with a token and names ``HTTP/`` counts, whatever its method or
    case.  Anything else passes.
    """
    if tls.looks_like_tls(data):
        try:
            sni = tls.server_name(data)
        except tls.NeedMore:
            return False
        except tls.BadHello as exc:
            raise Refusal(400, "blocked", f"malformed TLS ClientHello: {exc}") from None
        if sni is not None:
            try:
                same = canonical_host(sni) == host
            except BadHost:
                same = False
            if not same:
                raise Refusal(403, "blocked", f"SNI mismatch: CONNECT {host} but TLS SNI {sni!r}")
        return True
    head = data.lstrip(b"\r\n")
    http = _looks_like_request_line(head) if head else None
    if http is False:
        return True
    end, bare = head.find(b"\r\n\r\n"), head.find(b"\n\n")
    if bare >= 0 and (end < 0 or bare < end):
        raise Refusal(400, "blocked", "HTTP head in the tunnel ends lines with a bare LF")
    if end < 0 or http is None:
        if len(data) > max_head:
            raise Refusal(400, "blocked", "HTTP head in the tunnel too large")
        return False
    try:
        req = parse_head(head[:end], _TUNNEL_REQUEST_LINE)
    except Refusal as r:
        raise Refusal(400, "blocked", f"{r.reason} in the HTTP head in the tunnel") from None
    check_host_header(req, host, port, default_port=port, in_tunnel=True)
    return True


def check_host_header(req: Request, host: str, port: int, *, default_port: int, in_tunnel: bool,
                      url_authority: str = "") -> str | None:
    """The one Host-header rule: at most one, and it names ``host:port``; returns it (or None).

    Used for absolute-form requests (against the URL) and for the first
    HTTP request inside a tunnel (against the CONNECT target).
    """
    hosts = [v for n, v in req.headers if n.lower() == "host"]
    if len(hosts) > 1:
        if in_tunnel:
            raise Refusal(400, "blocked", "more than one Host header in the tunnel")
        raise Refusal(400, "bad-request", "more than one Host header")
    if not hosts:
        return None
    try:
        same = parse_authority(hosts[0], default_port=default_port) == (host, port)
    except BadHost:
        same = False
    if not same:
        where = (f"in the tunnel disagrees with CONNECT {host}:{port}" if in_tunnel
                 else f"disagrees with URL host {url_authority!r}")
        raise Refusal(403, "blocked", f"Host header {hosts[0]!r} {where}")
    return hosts[0]


@dataclass(frozen=True)
class PlainTarget:
    """An absolute-form ``http://`` request's target, split."""

    host: str
    port: int
    authority: str
    path: str


def plain_target(req: Request) -> PlainTarget:
    """The host, port and path of an absolute-form request; Refusal for anything else."""
    scheme, sep, after = req.target.partition("://")
    if not sep:
        raise Refusal(400, "bad-request", "not a proxy request (use absolute-form or CONNECT)")
    if scheme.lower() != "http":
        raise Refusal(400, "bad-request", f"scheme {scheme!r} not proxied (use CONNECT for https)")
    cut = min([i for i in (after.find("/"), after.find("?"), after.find("#")) if i >= 0], default=len(after))
    authority, path = after[:cut], after[cut:].split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    try:
        host, port = parse_authority(authority, default_port=80)
    except BadHost as exc:
        raise Refusal(400, "bad-request", f"bad URL host: {exc}") from None
    return PlainTarget(host, port, authority, path)


def forward_head(req: Request, target: PlainTarget, had_host_header: bool) -> bytes:
    """The origin-form head sent upstream: hop-by-hop headers dropped, one request per connection."""
    lines = [f"{req.method} {target.path} HTTP/1.{req.minor}"]
    if not had_host_header:
        lines.append(f"Host: {target.authority}")
    lines += [f"{n}: {v}" for n, v in req.headers if n.lower() not in HOP_BY_HOP]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
