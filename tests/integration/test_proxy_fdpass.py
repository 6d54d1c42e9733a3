"""The sandbox's listener handed to the proxy (SCM_RIGHTS, chtop_tasks/proxy/fdpass.py): the
proxy accepts on it itself, judges it as the worktree's, refuses anything but a listening TCP
socket, and drops it when the hand-off connection closes.  A real proxy; this process plays
the sandbox's entry (the same protocol as chtop_tasks/incontainer/listen_handoff.py)."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import eventually
from proxy_helpers import HAND_OFF_SCRIPT, echo, free_port, proxy, read_all, read_head  # noqa: F401  (fixtures)

from chtop_tasks.proxy.fdpass import HANDOFF_NAME, MAGIC

HANDOFF_SCRIPT = Path(__file__).resolve().parents[2] / "chtop_tasks" / "incontainer" / "listen_handoff.py"


def hand_off(handoff: Path, fd: int, payload: bytes = MAGIC) -> tuple[socket.socket, bytes]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(handoff))
    socket.send_fds(conn, [payload], [fd])
    conn.settimeout(5)
    try:
        return conn, conn.recv(16)
    except OSError:
        return conn, b""


def listener() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s, s.getsockname()[1]


def port_refuses(port: int) -> bool:
    """Whether connecting to ``port`` is refused now (a queued connect gets a reset).  A connect
    that times out proves nothing either way: on a loaded box (CI, 26 minutes of podman beside it) a
    loopback SYN went unanswered for a second, so it is tried again."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    except TimeoutError:
        pass
    return False


def connect_tunnel(port: int, target: str) -> tuple[int, socket.socket]:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    status, _ = read_head(s)
    return status, s


def test_the_proxy_serves_a_handed_over_listener_as_the_worktrees(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private", worktree="dev")
    ep = proxy.start("dev")
    handoff = ep.socket_path.with_name(HANDOFF_NAME)
    assert handoff.is_socket()
    lsock, port = listener()
    conn, reply = hand_off(handoff, lsock.fileno())
    assert reply == b"OK\n"
    lsock.close()                                        # only the proxy holds it now
    status, s = connect_tunnel(port, f"echo.example.test:{echo.port}")
    assert status == 200                                 # the worktree's layer allows it
    s.sendall(b"ping\n")
    s.shutdown(socket.SHUT_WR)
    assert read_all(s) == b"ping\n"
    status, _ = connect_tunnel(port, "other.example.test:443")
    assert status == 403
    rec = proxy.wait_record(lambda r: r.get("host") == "other.example.test")
    assert rec["worktree"] == "dev" and rec["client"].startswith("127.0.0.1:")
    conn.close()                                         # the sandbox ended
    eventually(lambda: port_refuses(port), "the proxy to stop listening on a finished sandbox's socket", timeout=20)
    log, ended = proxy.group / ".chtop" / "net" / "proxy.log", "ENDED    the sandbox of worktree dev: importing"
    eventually(lambda: ended in log.read_text(), "the worktree's branch imported at once", timeout=5)


@pytest.mark.parametrize("what", ["pipe", "unlistened", "udp", "bad-magic"])
def test_anything_but_a_listening_tcp_socket_is_refused(proxy, what):
    ep = proxy.start("dev")
    handoff = ep.socket_path.with_name(HANDOFF_NAME)
    if what == "pipe":
        r, w = os.pipe()
        fd, keep = r, (r, w)
    elif what == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        fd, keep = s.fileno(), s
    else:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        if what == "bad-magic":
            s.listen(1)
        fd, keep = s.fileno(), s
    conn, reply = hand_off(handoff, fd, b"HELLO THERE 1\n" if what == "bad-magic" else MAGIC)
    assert reply == b""                                  # closed, no OK
    conn.close()
    del keep
    proxy.start("dev")                                   # the proxy is still fine


def test_the_in_container_script_hands_off_and_holds_the_connection(proxy, echo):
    """listen_handoff.py itself (run here with this machine's python3): exits 0 once the proxy has
    the listener, and a holder it leaves behind keeps the hand-off alive until it is killed."""
    proxy.allow(f"echo.example.test:{echo.port} private")
    ep = proxy.start("dev")
    port = free_port()
    # its own session, so its holder is found by session, not mistaken for another test's sandbox's
    proc = subprocess.Popen(["/usr/bin/python3", "-I", "-S", str(HANDOFF_SCRIPT),
                             str(ep.socket_path.with_name(HANDOFF_NAME)), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    holder = subprocess.run(["pgrep", "-s", str(proc.pid), "-x", "chtop-handoff"], capture_output=True, text=True)
    pid = int(holder.stdout.split()[0])
    try:
        status, s = connect_tunnel(port, f"echo.example.test:{echo.port}")
        assert status == 200
        s.close()
    finally:
        os.kill(pid, 9)
    eventually(lambda: port_refuses(port), "the listener to end with its holder", timeout=20)



def test_hand_offs_that_end_at_once_are_coalesced_and_empty_ones_count_for_nothing(proxy):
    """A flood of hand-offs that close at once, of connect + close with nothing and of bad
    messages: at most one ENDED line (one import round) and one refusal line a second."""
    ep = proxy.start("dev")
    handoff = ep.socket_path.with_name(HANDOFF_NAME)
    log = proxy.group / ".chtop" / "net" / "proxy.log"
    t0 = time.monotonic()
    for _ in range(300):
        empty = socket.socket(socket.AF_UNIX)
        empty.connect(str(handoff))
        empty.close()
    proxy.start("dev")                                   # answered after those: all were handled
    assert "ENDED " not in log.read_text()               # nothing was handed over: no sandbox ended
    lsock, _ = listener()
    for i in range(300):
        conn, reply = hand_off(handoff, lsock.fileno(), MAGIC if i % 2 else b"NOT A HAND-OFF\n")
        assert reply == (b"OK\n" if i % 2 else b"")
        conn.close()
    proxy.start("dev")
    eventually(lambda: "150 sandbox hand-offs" in (text := log.read_text()) or text.count("ENDED ") > 1,
               "the last coalesced round's ENDED line")
    wall = time.monotonic() - t0
    text = log.read_text()
    assert 1 <= text.count("ENDED ") <= wall + 2, text
    assert "150 sandbox hand-offs" in text or text.count("ENDED ") > 1, text
    assert 1 <= text.count("hand-off refused") <= wall + 2, text


HOG = HAND_OFF_SCRIPT + """
import socket, sys, time
path, ok = sys.argv[1], 0
held = []
for _ in range(5):
    try:                                    # a refused one may be closed before its message is sent
        c, lsock = hand_off(path)
        c.settimeout(5)
        ok += c.recv(16) == b"OK\\n"
        held.append(c)
    except OSError:
        pass
pending = []
for _ in range(8):                          # connections that never send their message
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    pending.append(s)
print("OK", ok, flush=True)                 # its connections are queued before anyone else's
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare --pid")
def test_hand_off_caps_count_per_sandbox_and_nested_namespaces_are_the_same_sandbox(proxy, echo):
    """One 'sandbox' (a pid namespace, and one the agent nests inside it) holds at most two
    listeners and four pending connections; another pid namespace still hands off."""
    proxy.allow(f"echo.example.test:{echo.port} private")
    handoff = str(proxy.start().socket_path.with_name(HANDOFF_NAME))
    hog = subprocess.Popen(["unshare", "--pid", "--fork", "sh", "-c",
                            'python3 -c "$0" "$1" 20 & unshare --pid --fork python3 -c "$0" "$1" 20; wait',
                            HOG, handoff], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        oks = [int(hog.stdout.readline().split()[1]) for _ in range(2)]
        assert 1 <= sum(oks) <= 2, oks                    # two listeners for the whole namespace tree
        port = free_port()
        # its pid 1 (sh) outlives the script, so the holder it leaves keeps the hand-off open
        other = subprocess.Popen(["unshare", "--pid", "--fork", "sh", "-c", '"$0" -I -S "$1" "$2" "$3" && '
                                  'echo LAUNCHED && exec sleep 30', "/usr/bin/python3", str(HANDOFF_SCRIPT), handoff,
                                  str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        try:
            assert other.stdout.readline().strip() == "LAUNCHED", other.stderr.read()   # another sandbox launches
            status, s = connect_tunnel(port, f"echo.example.test:{echo.port}")
            assert status == 200
            s.close()
        finally:
            os.killpg(other.pid, 9)
            other.wait()
    finally:
        os.killpg(hog.pid, 9)
        hog.wait()
