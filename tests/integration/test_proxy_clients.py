"""Real clients through the proxy: curl, pip, git and the claude CLI."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import require_tool
from proxy_helpers import HTTPSServer, certs, proxy  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(tmp_path, certs):
    root = tmp_path / "www"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    (root / "files").mkdir()
    (root / "index.html").write_text("hello over tls\n")
    wheel = root / "files" / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tinypkg/__init__.py", "VALUE = 1\n")
        zf.writestr("tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        zf.writestr("tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinypkg-1.0.dist-info/RECORD", "")
    (root / "simple" / "tinypkg" / "index.html").write_text(
        '<html><body><a href="../../files/tinypkg-1.0-py3-none-any.whl">tinypkg-1.0-py3-none-any.whl</a></body></html>\n')
    server = HTTPSServer(root, certs)
    yield server
    server.close()


def _env(proxy, **extra):
    env = dict(os.environ)
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        env[var] = proxy.url
    for var in list(env):   # this machine's CA/pip settings must not mask the test's own
        if var in ("NO_PROXY", "no_proxy") or var.startswith("PIP_") or var in (
                "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE"):
            del env[var]
    env.update(extra)
    return env


def test_curl_https_allowed_and_blocked(proxy, site, certs):
    curl = require_tool("curl")
    proxy.allow(f"tls.example.test:{site.port} private")
    proxy.start()
    url = f"https://tls.example.test:{site.port}/index.html"
    ok = subprocess.run([curl, "-sS", "--cacert", str(certs["ca"]), url], env=_env(proxy),
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "hello over tls\n"
    bad = subprocess.run([curl, "-sS", "--cacert", str(certs["ca"]),
                          f"https://other.example.test:{site.port}/index.html"],
                         env=_env(proxy), capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "403" in bad.stderr
    decisions = {(r["host"], r["decision"]) for r in proxy.wait_records(2)}
    assert decisions == {("tls.example.test", "allowed"), ("other.example.test", "blocked")}
    # the allowed tunnel carried TLS both ways
    rec = proxy.wait_record(lambda r: r["decision"] == "allowed")
    assert rec["bytes_up"] > 200 and rec["bytes_down"] > 500


def test_curl_resolve_trick_is_caught_by_sni(proxy, site, certs):
    """curl --connect-to: CONNECT an allowed name, TLS to another (domain fronting)."""
    curl = require_tool("curl")
    proxy.allow(f"tls.example.test:{site.port} private")
    proxy.start()
    run = subprocess.run(
        [curl, "-sS", "--cacert", str(certs["ca"]), "--connect-to",
         f"other.example.test:{site.port}:tls.example.test:{site.port}",
         f"https://other.example.test:{site.port}/index.html"],
        env=_env(proxy), capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert proxy.wait_record(lambda r: "SNI mismatch" in r.get("reason", ""))


def _pip_download(proxy, site, certs, out, host):
    return subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-d", str(out),
         "--index-url", f"https://{host}:{site.port}/simple/", "--cert", str(certs["ca"]),
         "--retries", "0", "--timeout", "10", "tinypkg"],
        env=_env(proxy, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1"),
        capture_output=True, text=True, timeout=120)


def test_pip_download_through_proxy(proxy, site, certs, tmp_path):
    proxy.allow(f"pypi.example.test:{site.port} private")
    proxy.start()
    out = tmp_path / "dl"
    run = _pip_download(proxy, site, certs, out, "pypi.example.test")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (out / "tinypkg-1.0-py3-none-any.whl").exists()
    assert all(r["decision"] == "allowed" and r["host"] == "pypi.example.test" for r in proxy.wait_records(1))
    blocked = _pip_download(proxy, site, certs, out, "other.example.test")
    assert blocked.returncode != 0
    assert proxy.wait_record(lambda r: r["host"] == "other.example.test" and r["decision"] == "blocked")


def test_git_clone_over_https_through_proxy(proxy, site, certs, tmp_path):
    """git over https (dumb HTTP: a bare repo served as files) honours HTTPS_PROXY and the lists."""
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    (seed / "hello.txt").write_text("through the proxy\n")
    subprocess.run(["git", "-C", str(seed), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(seed), "commit", "-q", "-m", "hello"], check=True)
    bare = site.root / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    proxy.allow(f"git.example.test:{site.port} private")
    proxy.start()
    env = _env(proxy, GIT_SSL_CAINFO=str(certs["ca"]), GIT_TERMINAL_PROMPT="0")
    clone = subprocess.run(["git", "clone", "-q", f"https://git.example.test:{site.port}/repo.git",
                            str(tmp_path / "got")], env=env, capture_output=True, text=True, timeout=60)
    assert clone.returncode == 0, clone.stderr
    assert (tmp_path / "got" / "hello.txt").read_text() == "through the proxy\n"
    blocked = subprocess.run(["git", "clone", "-q", f"https://other.example.test:{site.port}/repo.git",
                              str(tmp_path / "nope")], env=env, capture_output=True, text=True, timeout=60)
    assert blocked.returncode != 0 and "403" in blocked.stderr
    assert not (tmp_path / "nope").exists()
    assert proxy.wait_record(lambda r: r["host"] == "git.example.test" and r["decision"] == "allowed")


@pytest.mark.slow
def test_claude_cli_reaches_api_through_shipped_list(proxy, tmp_path):
    claude = require_tool("claude")
    shutil.copy(REPO / "sandbox" / "net-allow.txt", proxy.policy / "net-allow.txt")
    proxy.start()
    home = tmp_path / "claude-home"
    home.mkdir()
    env = _env(proxy, HOME=str(home), CLAUDE_CONFIG_DIR=str(home / ".claude"),
               ANTHROPIC_API_KEY="sk-ant-test-dummy", DISABLE_AUTOUPDATER="1")
    proc = subprocess.Popen([claude, "-p", "hello"], env=env, cwd=home, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        rec = proxy.wait_record(lambda r: r.get("host") == "api.anthropic.com", timeout=60)
    finally:
        proc.kill()
        proc.wait(10)
    assert rec["method"] == "CONNECT" and rec["port"] == 443
    assert rec["decision"] == "allowed"
    assert "'anthropic.com" in rec["rule"]      # the shipped entry
    assert "not in the test hosts file" in rec["reason"]
    # no internet in tests: the proxy cannot resolve it (test hosts file) -> 502
    assert rec["status"] == 502
