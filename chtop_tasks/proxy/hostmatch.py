"""Canonical host names and list matching: pure functions, no I/O.

Everything the proxy compares goes through ``canonical_host`` first, so
that case, a trailing dot, IDN spellings, and the many spellings of an IP
address (``127.1``, ``2130706433``, ``0x7f.0.0.1``, ``[::ffff:127.0.0.1]``,
zone ids) all reduce to one string before a list is consulted.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_HEX = re.compile(r"^[0-9a-f]*$")
_OCT = re.compile(r"^[0-7]*$")
_FORBIDDEN = set("@/\\?#%\"'<>^`{|}")
_psl = None
DEFAULT_PORTS = frozenset({443, 80})     # what an allow entry that names no port allows


class BadHost(ValueError):
    """A host or authority that must not be used (the message says why)."""


@dataclass(frozen=True)
class Entry:
    """One line of a net-allow.txt / net-deny.txt list."""

    host: str            # canonical domain, or canonical IP address
    is_ip: bool
    private: bool        # the line says non-public addresses are intended
    text: str            # the line as written (without comment)
    ports: frozenset[int] | None = None   # named ports; None: DEFAULT_PORTS (allow), every port (deny)

    @property
    def spec(self) -> str:
        """The entry as a list line writes it, without ``private``: ``host`` or ``host:8443,8080``."""
        if self.ports is None:
            return self.host
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{','.join(str(p) for p in sorted(self.ports))}"


def _public_suffixes():
    """The public suffix list (loaded on first use: a launch that only checks the lists exist
    does not pay for it, nor for idna)."""
    global _psl
    if _psl is None:
        from publicsuffixlist import PublicSuffixList

        _psl = PublicSuffixList()
    return _psl


def _idna():
    import idna

    return idna


def _check_chars(raw: str) -> None:
    for ch in raw:
        if ord(ch) <= 0x20 or ord(ch) == 0x7F:
            raise BadHost(f"control character or space in host {raw!r}")
        if ch in _FORBIDDEN:
            raise BadHost(f"character {ch!r} not allowed in host {raw!r}")


def _ipv4_number(part: str) -> int:
    """One dotted part, as inet_aton/WHATWG read it (0x hex, 0 octal)."""
    if part.startswith(("0x", "0X")):
        digits, base = part[2:].lower(), 16
        ok = _HEX.match(digits)
    elif len(part) > 1 and part.startswith("0"):
        digits, base = part[1:], 8
        ok = _OCT.match(digits)
    else:
        digits, base = part, 10
        ok = digits.isdigit() and digits.isascii()
    if not ok:
        raise BadHost(f"malformed IPv4 number {part!r}")
    return int(digits, base) if digits else 0


def _ends_in_number(host: str) -> bool:
    parts = host.split(".")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    last = parts[-1]
    if last.isascii() and last.isdigit():
        return True
    return last.lower().startswith("0x") and bool(_HEX.match(last[2:].lower()))


def parse_ipv4(host: str) -> ipaddress.IPv4Address:
    """Any spelling inet_aton accepts: 127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4 or "" in parts:
        raise BadHost(f"malformed IPv4 address {host!r}")
    nums = [_ipv4_number(p) for p in parts]
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        raise BadHost(f"IPv4 address out of range {host!r}")
    value = nums[-1]
    for i, n in enumerate(nums[:-1]):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def parse_ipv6(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv6 literal (brackets optional); zone id dropped, IPv4-mapped unwrapped."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise BadHost(f"unbalanced brackets in {text!r}")
        text = text[1:-1]
    addr_text, _, zone = text.partition("%")
    if "%" in text and not zone:
        raise BadHost(f"empty zone id in {text!r}")
    try:
        addr = ipaddress.IPv6Address(addr_text)
    except ValueError:
        raise BadHost(f"malformed IPv6 address {text!r}") from None
    mapped = addr.ipv4_mapped
    return mapped if mapped is not None else addr


@functools.lru_cache(maxsize=4096)
def canonical_host(raw: str) -> str:
    """The one spelling of a host we compare: punycode domain or plain IP.

    Raises BadHost for anything that is not a plain host name or address.
    """
    if not isinstance(raw, str) or not raw:
        raise BadHost("empty host")
    if len(raw) > 300:
        raise BadHost("host name too long")
    if raw.startswith("[") or raw.count(":") >= 2:
        if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in raw):
            raise BadHost(f"control character or space in host {raw!r}")
        return str(parse_ipv6(raw))
    _check_chars(raw)
    if ":" in raw:
        raise BadHost(f"port or colon in host {raw!r}")
    idna = None if raw.isascii() and "xn--" not in raw.lower() else _idna()
    if raw.isascii():
        mapped = raw.lower()        # what UTS-46 mapping does to ASCII
    else:
        try:
            mapped = idna.uts46_remap(raw, std3_rules=False, transitional=False)
        except idna.IDNAError as exc:
            raise BadHost(f"invalid international name {raw!r}: {exc}") from None
        _check_chars(mapped)
    if _ends_in_number(mapped):
        return str(parse_ipv4(mapped))
    host = mapped[:-1] if mapped.endswith(".") else mapped
    if not host:
        raise BadHost("empty host")
    labels = []
    for label in host.split("."):
        if not label:
            raise BadHost(f"empty label in {raw!r}")
        if not label.isascii():
            try:
                label = idna.encode(label, uts46=False).decode("ascii")
            except idna.IDNAError as exc:
                raise BadHost(f"invalid international name {raw!r}: {exc}") from None
        elif label.startswith("xn--"):
            try:
                idna.decode(label)
            except idna.IDNAError:
                raise BadHost(f"invalid punycode label {label!r}") from None
        label = label.lower()
        if not _LABEL.match(label):
            raise BadHost(f"invalid label {label!r} in {raw!r}")
        labels.append(label)
    host = ".".join(labels)
    if len(host) > 253:
        raise BadHost("host name too long")
    return host


@functools.lru_cache(maxsize=4096)
def is_ip(host: str) -> bool:
    """True when a canonical host is an IP address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def parse_authority(target: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` (CONNECT target, URL authority) -> (canonical host, port)."""
    if "@" in target:
        raise BadHost("userinfo (user@) is not allowed in the target")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in target):
        raise BadHost("control character or space in the target")
    if target.startswith("["):
        end = target.find("]")
        if end < 0:
            raise BadHost("unbalanced brackets in the target")
        host_part, rest = target[: end + 1], target[end + 1 :]
        if rest and not rest.startswith(":"):
            raise BadHost(f"junk after IPv6 address in {target!r}")
        port_text = rest[1:] if rest else None
    else:
        host_part, sep, port_text = target.rpartition(":")
        if not sep:
            host_part, port_text = target, None
        if ":" in host_part:
            raise BadHost("IPv6 address must be in brackets")
    if port_text is None:
        if default_port is None:
            raise BadHost(f"missing port in {target!r}")
        port = default_port
    else:
        if not _PORT.match(port_text):
            raise BadHost(f"bad port {port_text!r}")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise BadHost(f"port out of range {port}")
    return canonical_host(host_part), port


@functools.lru_cache(maxsize=4096)
def address_is_public(addr: str) -> bool:
    """False for loopback, private, link-local (cloud metadata), reserved..."""
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def authority_spec(host: str, port: int) -> str:
    """How an allow entry names ``host`` on ``port``: the host alone for a default port."""
    if port in DEFAULT_PORTS:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split_ports(spec: str) -> tuple[str, frozenset[int] | None]:
    """``host``, ``host:8443``, ``host:8443,8080``, ``[v6]:8443`` -> (host, ports or None)."""
    if spec.startswith("["):
        end = spec.find("]")
        if end < 0 or end + 1 == len(spec):
            return spec, None
        host, rest = spec[: end + 1], spec[end + 1 :]
        if not rest.startswith(":"):
            raise BadHost(f"junk after IPv6 address in {spec!r}")
        return host, _ports(rest[1:], spec)
    if spec.count(":") >= 2:            # a bare IPv6 address names no port
        return spec, None
    host, sep, ports = spec.partition(":")
    return host, (_ports(ports, spec) if sep else None)


def _ports(text: str, spec: str) -> frozenset[int]:
    ports = set()
    for part in text.split(","):
        if not _PORT.match(part) or not 1 <= int(part) <= 65535:
            raise BadHost(f"bad port {part!r} in {spec!r}; name ports as example.org:8443 or "
                          "example.org:8443,8080")
        ports.add(int(part))
    return frozenset(ports)


def _did_you_mean(url: str) -> str:
    """``: did you mean `HOST`?`` for the host (and explicit port) of ``url``, else nothing."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return ""
    if not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    return f": did you mean `{host}{f':{port}' if port else ''}`?"


def parse_entry(line: str, *, allow_list: bool = True) -> Entry:
    """Validate one list line (comment already removed).

    ``github.com``, ``*.github.com`` (same meaning), ``127.0.0.1 private``,
    ``intranet.example private``, ``example.org:8443``, ``example.org:8443,8080``,
    ``[2001:db8::1]:8443``.  An allow entry without ports allows 443 and 80; a
    deny entry without ports denies every port.  Refuses URLs, paths, ``*``
    other than a leading ``*.``, and public suffixes (in either list).
    """
    words = line.split()
    if not words:
        raise BadHost("empty entry")
    spec, flags = words[0], words[1:]
    for flag in flags:
        if flag != "private":
            raise BadHost(f"unknown word {flag!r} (the only option is 'private')")
    if "://" in spec:
        raise BadHost(f"{spec!r} is a URL; give the domain only{_did_you_mean(spec)}")
    if "/" in spec:
        raise BadHost(f"{spec!r} has a path; give the domain only{_did_you_mean('//' + spec)}")
    if spec.startswith("*."):
        spec = spec[2:]
        if not spec or is_ip(spec):
            raise BadHost("'*.' must be followed by a domain")
    if "*" in spec:
        raise BadHost("'*' is allowed only as a leading '*.'")
    spec, ports = _split_ports(spec)
    host = canonical_host(spec)
    ip = is_ip(host)
    if not ip and _public_suffixes().is_public(host):
        doing, do = ("allowing", "allow") if allow_list else ("denying", "deny")
        raise BadHost(
            f"{host!r} is a public suffix; {doing} it would {do} a whole registry "
            "(every domain under it, e.g. the agent's own API); name the domain itself"
        )
    return Entry(host=host, is_ip=ip, private="private" in flags, text=line.strip(), ports=ports)


def entry_matches(entry: Entry, host: str, port: int | None = None,
                  default_ports: frozenset[int] | None = DEFAULT_PORTS) -> bool:
    """Does the entry cover this canonical host (itself or a subdomain) on ``port`` (any port
    when None)?  An entry that names no port covers ``default_ports`` (None: every port)."""
    if entry.is_ip:
        if host != entry.host:
            return False
    elif host != entry.host and not host.endswith("." + entry.host):
        return False
    ports = entry.ports if entry.ports is not None else default_ports
    return port is None or ports is None or port in ports


def find_match(entries, host: str, port: int | None = None,
               default_ports: frozenset[int] | None = DEFAULT_PORTS) -> Entry | None:
    """The first entry covering host (on ``port``, see ``entry_matches``), else None."""
    for entry in entries:
        if entry_matches(entry, host, port, default_ports):
            return entry
    return None
