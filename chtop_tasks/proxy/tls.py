"""Just enough TLS to read the server name (SNI) from a ClientHello."""

from __future__ import annotations

MAX_HELLO = 64 * 1024


class NeedMore(Exception):
    """Not enough bytes yet to decide."""


class BadHello(ValueError):
    """Starts like TLS but is not a well-formed ClientHello."""


def looks_like_tls(data: bytes) -> bool:
    return bool(data) and data[0] == 0x16


def _handshake_bytes(data: bytes) -> bytes:
    """Concatenate handshake-record fragments until one whole message is in."""
    out = bytearray()
    pos = 0
    while True:
        if len(out) >= 4:
            need = 4 + int.from_bytes(out[1:4], "big")
            if len(out) >= need:
                return bytes(out[:need])
        if len(data) - pos < 5:
            raise NeedMore
        if data[pos] != 0x16 or data[pos + 1] != 0x03:
            raise BadHello("not a TLS handshake record")
        length = int.from_bytes(data[pos + 3 : pos + 5], "big")
        if length == 0 or length > 16384 + 2048:
            raise BadHello("bad TLS record length")
        if len(data) - pos - 5 < length:
            raise NeedMore
        out += data[pos + 5 : pos + 5 + length]
        pos += 5 + length


def server_name(data: bytes) -> str | None:
    """The SNI host_name of a ClientHello, or None when it carries none.

    Raises NeedMore while incomplete, BadHello when malformed or too big.
    """
    if len(data) > MAX_HELLO:
        raise BadHello("ClientHello too large")
    msg = _handshake_bytes(data)
    if msg[0] != 0x01:
        raise BadHello("first handshake message is not a ClientHello")
    body = memoryview(msg)[4:]
    try:
        p = 2 + 32                                   # version, random
        p += 1 + body[p]                             # session id
        p += 2 + int.from_bytes(body[p : p + 2], "big")   # cipher suites
        p += 1 + body[p]                             # compression methods
        if p == len(body):
            return None                              # no extensions at all
        end = p + 2 + int.from_bytes(body[p : p + 2], "big")
        if end > len(body):
            raise BadHello("extensions overrun the ClientHello")
        p += 2
        while p + 4 <= end:
            etype = int.from_bytes(body[p : p + 2], "big")
            elen = int.from_bytes(body[p + 2 : p + 4], "big")
            ext = body[p + 4 : p + 4 + elen]
            if len(ext) != elen:
                raise BadHello("extension overruns the ClientHello")
            p += 4 + elen
            if etype != 0:
                continue
            q = 2
            names = []
            while q + 3 <= len(ext):
                ntype, nlen = ext[q], int.from_bytes(ext[q + 1 : q + 3], "big")
                name = bytes(ext[q + 3 : q + 3 + nlen])
                q += 3 + nlen
                if ntype == 0:
                    names.append(name)
            if len(names) != 1:
                raise BadHello("server_name extension must name exactly one host")
            try:
                return names[0].decode("ascii")
            except UnicodeDecodeError:
                raise BadHello("non-ASCII server name") from None
        return None
    except IndexError:
        raise BadHello("truncated ClientHello") from None
