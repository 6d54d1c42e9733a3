"""Shared pieces for the proxy tests: local servers, a proxy per test, raw clients.

Name resolution goes through the proxy's test-only hosts file
(CHTOP_PROXY_HOSTS_FILE), never the internet.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import eventually
from fake_http import serving

from chtop_tasks.proxy import control

# not in the hosts file
API_NAMES = ["api.anthropic.com", "api.moonshot.ai", "generativelanguage.googleapis.com", "api.openai.com"]
NAMES = ["echo.example.test", "tls.example.test", "other.example.test", "pypi.example.test",
         "plain.example.test", "loop.example.test", "wt.example.test", "dead.example.test", "git.example.test",
         *API_NAMES]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EchoServer:
    """Threaded TCP echo server on 127.0.0.1 (or ``address``); counts the connections it accepted."""

    def __init__(self, address: str = "127.0.0.1"):
        self.sock = socket.socket()
        self.sock.bind((address, 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        with conn:
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        conn.shutdown(socket.SHUT_WR)
                        return
                    conn.sendall(data)
            except OSError:
                return

    def close(self):
        self._stop = True
        self.sock.close()


def make_certs(directory: Path, names: list[str]) -> dict[str, Path]:
    """A throwaway CA and a server certificate for ``names`` (openssl CLI)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, crt = (d / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
        "-out", str(ca), "-days", "2", "-subj", "/CN=chtop test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", f"/CN={names[0]}")
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n"
                   "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return {"ca": ca, "cert": crt, "key": key}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class HTTPSServer:
    """A TLS HTTP server serving ``root`` on 127.0.0.1 (threaded)."""

    def __init__(self, root: Path, certs: dict, tls: bool = True):
        self.root = root
        handler = lambda *a, **k: _QuietHandler(*a, directory=str(root), **k)  # noqa: E731
        self.httpd = serving(handler, tls=certs if tls else None)
        self.port = self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class ProxyUnderTest:
    group: Path
    policy: Path
    port: int
    hosts_file: Path
    endpoints: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, worktree: str | None = None):
        ep = control.ensure_proxy(self.group, self.policy, worktree)
        self.endpoints.append(ep)
        return ep

    def allow(self, *lines: str, worktree: str | None = None):
        path = self.policy / ("worktrees/" + worktree if worktree else "") / "net-allow.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def deny(self, *lines: str):
        with open(self.policy / "net-deny.txt", "a") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def records(self) -> list[dict]:
        path = self.group / ".chtop" / "net" / "requests.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_record(self, pred, timeout: float = 60.0) -> dict:
        return eventually(lambda: next((rec for rec in self.records() if pred(rec)), None), "a matching log record",
                          timeout, explain=lambda: f"the log has:\n{self.records()[-10:]}")

    def wait_records(self, count: int, timeout: float = 60.0) -> list[dict]:
        """The log once it holds at least ``count`` records (it is written in batches)."""
        eventually(lambda: len(self.records()) >= count, f"{count} log records", timeout,
                   explain=lambda: f"the log has only {self.records()}")
        return self.records()

    def pid(self) -> int:
        return int((self.group / ".chtop" / "net" / "proxy.pid").read_text())


@pytest.fixture
def proxy(tmp_path, monkeypatch):
    """A proxy for one test: its own group dir, lists, hosts file and port."""
    group = tmp_path / "grp"
    policy = group / "top" / "sandbox"
    policy.mkdir(parents=True)
    (policy / "net-allow.txt").write_text("# test allowlist\n")
    (policy / "net-deny.txt").write_text("# test denylist\n")
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"127.0.0.1 {n}\n" for n in NAMES if n not in API_NAMES))
    port = free_port()
    monkeypatch.setenv("CHTOP_PROXY_PORT", str(port))
    monkeypatch.setenv("CHTOP_PROXY_HOSTS_FILE", str(hosts))
    monkeypatch.setenv("CHTOP_PROXY_CONNECT_TIMEOUT", "3")
    put = ProxyUnderTest(group, policy, port, hosts)
    yield put
    control.stop_proxy(group)


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"), NAMES)


def connect_proxy(p: ProxyUnderTest | str, timeout: float = 10.0) -> socket.socket:
    if isinstance(p, (str, Path)):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        s.connect(str(p))
        return s
    return socket.create_connection(("127.0.0.1", p.port), timeout=timeout)


def read_head(s: socket.socket) -> tuple[int, bytes]:
    """Status code of the proxy's answer and whatever followed the head (or the body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if not head:
        return 0, b""
    status = int(head.split(b" ")[1])
    return status, rest


def connect_in_thread(via, target: str, payload: bytes = b"ping\n",
                      timeout: float = 30.0) -> tuple[threading.Thread, dict]:
    """CONNECT ``target`` through ``via`` in a thread (it may be held for an answer); on a 200,
    send ``payload`` and read its echo.  The thread's ``result``: ``status`` and ``echo``."""
    result = {}

    def go():
        with connect_proxy(via, timeout=timeout) as s:
            s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            result["status"], _ = read_head(s)
            if result["status"] == 200:
                s.sendall(payload)
                result["echo"] = s.recv(len(payload))
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, result


def read_all(s: socket.socket) -> bytes:
    buf = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        buf += chunk
    return buf


def raw_request(p, data: bytes, timeout: float = 30.0, to_close: bool = False) -> tuple[int, bytes]:
    """Send raw bytes; return (status, rest of the answer until close).

    A 200 to a CONNECT leaves the tunnel open, so its rest is read only with
    ``to_close`` (a plain-HTTP answer, which the proxy closes after).
    """
    with connect_proxy(p, timeout) as s:
        s.sendall(data)
        status, rest = read_head(s)
        if status != 200 or to_close:
            rest += read_all(s)
        return status, rest


def tunnel(p, target: str, timeout: float = 10.0) -> socket.socket:
    """An established CONNECT tunnel (asserts the 200)."""
    s = connect_proxy(p, timeout)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    status, rest = read_head(s)
    assert status == 200, (status, rest)
    assert rest == b""
    return s


# Prepended to a script that plays a sandbox's entry (python3 -c): hand_off(path) gives the proxy a
# new listener on 127.0.0.1 over the hand-off socket ``path`` (chtop_tasks/proxy/fdpass.py).
HAND_OFF_SCRIPT = """
import socket
def hand_off(path):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    socket.send_fds(c, [b"CHTOP-LISTEN 1\\n"], [lsock.fileno()])
    return c, lsock
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and the children it has waited for (its git runs): fields 14 to
    17 of /proc/PID/stat, after the command's parentheses."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


LISTEN_HANDOFF = Path(__file__).resolve().parent.parent / "chtop_tasks" / "incontainer" / "listen_handoff.py"


def launch_holder(ep) -> tuple[int, int]:
    """Run listen_handoff.py as a sandbox's entry does; (its holder's pid, the listener's port)."""
    port = free_port()
    proc = subprocess.Popen(["/usr/bin/python3", "-I", "-S", str(LISTEN_HANDOFF),
                             str(ep.socket_path.with_name("handoff.sock")), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    found = subprocess.run(["pgrep", "-s", str(proc.pid), "-x", "chtop-handoff"], capture_output=True, text=True)
    return int(found.stdout.split()[0]), port
