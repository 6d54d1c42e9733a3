"""Unit tests of host canonicalisation, list parsing/matching and the SNI reader."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from chtop_tasks.core.errors import PolicyError, UsageError
from chtop_tasks.proxy import tls
from chtop_tasks.proxy.hostmatch import (
    BadHost,
    address_is_public,
    canonical_host,
    entry_matches,
    parse_authority,
    parse_entry,
)
from chtop_tasks.proxy.policy import NetPolicy, append_entry, list_path, parse_list


@pytest.mark.parametrize("raw, canon", [
    ("GitHub.COM", "github.com"),
    ("github.com.", "github.com"),
    ("Bücher.DE", "xn--bcher-kva.de"),
    ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("ＧＩＴＨＵＢ。ｃｏｍ", "github.com"),
    ("127.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0x7f.0.0.1", "127.0.0.1"),
    ("0x7F000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),
    ("１２７.０.０.１", "127.0.0.1"),
    ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("[::FFFF:7f00:1]", "127.0.0.1"),
    ("[0:0:0:0:0:0:0:1]", "::1"),
    ("[fe80::1%25eth0]", "fe80::1"),
    ("[fe80::1%eth0]", "fe80::1"),
    ("169.254.169.254", "169.254.169.254"),
])
def test_canonical_host(raw, canon):
    assert canonical_host(raw) == canon


@pytest.mark.parametrize("raw", [
    "", "git\x00hub.com", "github.com\r\nx", "github.com\n", "git hub.com", "github.com\t",
    "git%68ub.com", "github%2ecom", "user@github.com", "github.com/x", "github.com:443",
    "256.0.0.1", "1.2.3.4.5", "0x1g.0.0.1", "08.0.0.1", "xn--zz.com", "a..b", ".",
    "[::1", "[fe80::1%]", "-bad-.com", "a" * 64 + ".com",
])
def test_canonical_host_refuses(raw):
    with pytest.raises(BadHost):
        canonical_host(raw)


@pytest.mark.parametrize("target, expect", [
    ("github.com:443", ("github.com", 443)),
    ("[::1]:8443", ("::1", 8443)),
    ("127.1:80", ("127.0.0.1", 80)),
    ("GITHUB.com.:443", ("github.com", 443)),
])
def test_parse_authority(target, expect):
    assert parse_authority(target) == expect


@pytest.mark.parametrize("target", [
    "github.com", "github.com:", "github.com:0", "github.com:65536", "github.com:+443",
    "github.com:44 3", "github.com:443@evil.net:443", "user:pw@github.com:443",
    "::1:443", "[::1]x:443", "github.com:0x1bb", "github.com:443\x00",
])
def test_parse_authority_refuses(target):
    with pytest.raises(BadHost):
        parse_authority(target)


def test_missing_port_defaults_only_when_given():
    assert parse_authority("example.org", default_port=80) == ("example.org", 80)


@pytest.mark.parametrize("entry, host, hit", [
    ("github.com", "github.com", True),
    ("github.com", "api.github.com", True),
    ("*.github.com", "github.com", True),
    ("*.github.com", "a.b.github.com", True),
    ("github.com", "evil-github.com", False),
    ("github.com", "github.com.evil.net", False),
    ("github.com", "githubXcom", False),
    ("api.github.com", "github.com", False),
    ("127.0.0.1 private", "127.0.0.1", True),
    ("127.0.0.1 private", "127.0.0.2", False),
])
def test_entry_matches(entry, host, hit):
    assert entry_matches(parse_entry(entry), canonical_host(host)) is hit


@pytest.mark.parametrize("line", [
    "com", "co.uk", "github.io", "*.com", "uk", "https://github.com", "github.com/path",
    "git*hub.com", "*github.com", "github.*", "github.com extra", "*.", "github.com:", "github.com:0",
    "github.com:65536", "github.com:443,", "github.com:44 3", "github.com:https", "[::1]x:443", "com:443",
])
def test_parse_entry_refuses(line):
    with pytest.raises(BadHost):
        parse_entry(line)


@pytest.mark.parametrize("line", ["com", "*.zip", "co.uk", "github.io"])
def test_deny_list_refuses_public_suffixes_too(line):
    """`net.deny com` would deny api.anthropic.com, the agent's own API."""
    with pytest.raises(BadHost, match="public suffix; denying it would deny a whole registry"):
        parse_entry(line, allow_list=False)


@pytest.mark.parametrize("line, ports, spec", [
    ("example.org", None, "example.org"),
    ("example.org:8443", {8443}, "example.org:8443"),
    ("Example.ORG:8443,8080 private", {8443, 8080}, "example.org:8080,8443"),
    ("*.example.org:22", {22}, "example.org:22"),
    ("[2001:db8::1]:8443", {8443}, "[2001:db8::1]:8443"),
    ("2001:db8::1", None, "2001:db8::1"),
])
def test_parse_entry_takes_ports(line, ports, spec):
    entry = parse_entry(line)
    assert entry.ports == (frozenset(ports) if ports else None) and entry.spec == spec


@pytest.mark.parametrize("entry, port, allow_hit, deny_hit", [
    ("api.anthropic.com", 443, True, True),
    ("api.anthropic.com", 80, True, True),
    ("api.anthropic.com", 22, False, True),          # an allow without ports: 443 and 80 only
    ("api.anthropic.com:8443", 8443, True, True),
    ("api.anthropic.com:8443", 443, False, False),   # named ports only, in both lists
    ("api.anthropic.com:8443,22", 22, True, True),
])
def test_entries_cover_their_ports(entry, port, allow_hit, deny_hit):
    e = parse_entry(entry)
    assert entry_matches(e, "api.anthropic.com", port) is allow_hit
    assert entry_matches(e, "api.anthropic.com", port, default_ports=None) is deny_hit


def test_private_flag():
    assert parse_entry("intranet.example.org private").private
    assert not parse_entry("intranet.example.org").private


@pytest.mark.parametrize("addr, public", [
    ("127.0.0.1", False), ("10.1.2.3", False), ("192.168.1.1", False), ("172.16.0.1", False),
    ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("::1", False),
    ("fd00:ec2::254", False), ("fe80::1", False), ("::ffff:10.0.0.1", False),
    ("224.0.0.1", False), ("8.8.8.8", True), ("2606:4700::1111", True),
])
def test_address_is_public(addr, public):
    assert address_is_public(addr) is public


def test_parse_list_reports_bad_lines_and_keeps_good():
    entries, errors = parse_list("# c\ngithub.com # ok\ncom\nhttp://x.org/\n\n", allow_list=True)
    assert [e.host for e in entries] == ["github.com"]
    assert len(errors) == 2 and "line 3" in errors[0] and "public suffix" in errors[0]


def test_policy_reload_layers_and_deny_wins(tmp_path):
    (tmp_path / "net-allow.txt").write_text("a.example.org\n")
    (tmp_path / "net-deny.txt").write_text("")
    pol = NetPolicy(tmp_path)
    assert pol.judge("x.a.example.org").decision == "allowed"
    assert pol.judge("b.example.org").decision == "blocked"
    with open(tmp_path / "net-allow.txt", "a") as fh:
        fh.write("b.example.org\n")
    assert pol.judge("b.example.org").decision == "allowed"        # re-read, no restart
    (tmp_path / "net-deny.txt").write_text("x.a.example.org\n")
    assert pol.judge("x.a.example.org").decision == "denied"
    assert pol.judge("a.example.org").decision == "allowed"
    wt = list_path(tmp_path, "allow", "feat")
    wt.parent.mkdir(parents=True)
    wt.write_text("c.example.org\n")
    assert pol.judge("c.example.org", "feat").decision == "allowed"
    assert pol.judge("c.example.org", "other").decision == "blocked"
    assert pol.judge("c.example.org").decision == "blocked"
    list_path(tmp_path, "deny", "feat").write_text("a.example.org\n")
    assert pol.judge("a.example.org", "feat").decision == "denied"
    assert pol.judge("a.example.org").decision == "allowed"
    (tmp_path / "net-allow.txt").unlink()
    assert pol.judge("a.example.org").decision == "blocked"        # fail closed
    with pytest.raises(PolicyError):
        pol.require()


def test_append_entry_keeps_comments_and_adds_once(tmp_path):
    path = tmp_path / "net-allow.txt"
    path.write_text("# header\nfoo.example.org  # why\n")
    assert append_entry(path, "Bar.Example.org.", allow_list=True)[0]
    assert not append_entry(path, "bar.example.org", allow_list=True)[0]
    assert not append_entry(path, "*.foo.example.org", allow_list=True)[0]
    assert path.read_text() == "# header\nfoo.example.org  # why\nbar.example.org\n"
    for bad in ("https://x.org", "x.org/p", "com", "a b.org", "x.org\nevil.org", "x.org # c"):
        with pytest.raises(UsageError):
            append_entry(path, bad, allow_list=True)


@pytest.mark.slow
def test_append_entry_concurrent_twenty(tmp_path):
    path = tmp_path / "net-allow.txt"
    path.write_text("# header")
    code = ("import sys; from chtop_tasks.proxy.policy import append_entry; "
            "append_entry(sys.argv[1], sys.argv[2], allow_list=True)")
    root = str(Path(__file__).resolve().parents[2])
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"h{i}.example.org"], cwd=root)
             for i in range(20)]
    assert all(p.wait(60) == 0 for p in procs)
    lines = path.read_text().splitlines()
    assert lines[0] == "# header"
    assert sorted(lines[1:]) == sorted(f"h{i}.example.org" for i in range(20))


def _client_hello(server_hostname):
    ctx = ssl.create_default_context()
    obj = ssl.MemoryBIO(), ssl.MemoryBIO()
    sslobj = ctx.wrap_bio(obj[0], obj[1], server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        sslobj.do_handshake()
    return obj[1].read()


def test_sni_from_real_client_hello():
    hello = _client_hello("tls.example.test")
    assert tls.server_name(hello) == "tls.example.test"
    with pytest.raises(tls.NeedMore):
        tls.server_name(hello[:40])
    assert tls.server_name(_client_hello(None)) is None
    with pytest.raises(tls.BadHello):
        tls.server_name(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00")
    split = hello[:5 + 100]
    split = bytearray(split)
    split[3:5] = (100).to_bytes(2, "big")
    rest = hello[5 + 100:]
    second = b"\x16\x03\x01" + len(rest).to_bytes(2, "big") + rest
    assert tls.server_name(bytes(split) + second) == "tls.example.test"   # spread over two records


def test_compat_timeout_for_python_310():
    import asyncio

    from chtop_tasks.proxy.aio import TIMEOUTS, _compat_timeout

    async def slow():
        async with _compat_timeout(0.05):
            await asyncio.sleep(5)

    async def fast():
        async with _compat_timeout(5):
            await asyncio.sleep(0)
        return "done"

    with pytest.raises(TIMEOUTS):
        asyncio.run(slow())
    assert asyncio.run(fast()) == "done"
