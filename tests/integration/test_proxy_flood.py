"""One worktree flooding the group's shared proxy (connect and close, refused CONNECTs, hand-offs
opened and closed in a loop) costs the proxy at most about a fifth of a core, and another
worktree's requests are served promptly meanwhile (``chtop_tasks/proxy/acceptrate.py``).

A real proxy on loopback with two worktree sockets; the flood is another process, bounded in time
and count; the proxy's CPU time is read from ``/proc/PID/stat``.
"""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from proxy_helpers import HAND_OFF_SCRIPT, connect_proxy, cpu_seconds, echo, proxy, read_head  # noqa: F401  (fixtures)

FLOOD_SECONDS = 4.0
FLOOD_MAX = 200_000          # connections (or hand-offs) the flood makes at most
CORE_SHARE = 0.25            # of one core: "about a fifth", with room for the other worktree's requests
PROMPT = 3.0                 # seconds: the other worktree's request is answered within this

FLOOD = HAND_OFF_SCRIPT + """
import socket, sys, time
mode, path, seconds, most = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
end, made, waited = time.monotonic() + seconds, 0, 0
while made < most and time.monotonic() < end:
    if mode == "hand-off":
        try:
            c, lsock = hand_off(path)
            c.close(); lsock.close()
            made += 1
        except OSError:
            waited += 1
        continue
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect(path)
        if mode == "refused":
            s.send(b"CONNECT blocked.example.test:443 HTTP/1.1\\r\\n\\r\\n")
        made += 1
    except OSError:            # the backlog is full: the proxy does not take more from this worktree now
        waited += 1
    s.close()
print("MADE", made, "WAITED", waited, flush=True)
"""


def request_seconds(sock_path, target: str) -> tuple[int, float]:
    t0 = time.monotonic()
    with connect_proxy(sock_path, timeout=PROMPT * 3) as s:
        s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        status, _ = read_head(s)
    return status, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["connect-close", "refused", "hand-off"])
def test_one_worktrees_flood_costs_the_proxy_little_and_the_others_go_on(proxy, echo, mode):
    proxy.allow(f"echo.example.test:{echo.port} private", worktree="calm")
    flooded = proxy.start("noisy").socket_path
    calm = proxy.start("calm").socket_path
    path = flooded.with_name("handoff.sock") if mode == "hand-off" else flooded
    pid = proxy.pid()
    assert request_seconds(calm, f"echo.example.test:{echo.port}")[0] == 200
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    flood = subprocess.Popen([sys.executable, "-I", "-c", FLOOD, mode, str(path), str(FLOOD_SECONDS),
                              str(FLOOD_MAX)], stdout=subprocess.PIPE, text=True)
    try:
        answers = []
        while flood.poll() is None:
            answers.append(request_seconds(calm, f"echo.example.test:{echo.port}"))
            time.sleep(0.2)
        out, _ = flood.communicate(timeout=FLOOD_SECONDS * 4)
    finally:
        flood.kill()
    share = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    made = int(out.split()[1])
    assert made > 1000, out                                   # a flood it was
    assert answers and all(status == 200 for status, _ in answers), answers
    assert max(seconds for _, seconds in answers) < PROMPT, answers
    assert share < CORE_SHARE, f"the proxy used {share:.2f} of a core for {out.strip()}"
    log = (proxy.group / ".chtop" / "net" / "proxy.log").read_text()
    assert 1 <= log.count("accepts from") <= FLOOD_SECONDS / 10 + 2, log[-2000:]   # one coalesced line


def test_the_bucket_takes_a_burst_then_paces_and_notes_once_per_flood():
    from chtop_tasks.proxy.acceptrate import MIN_PAUSE, NOTE_EVERY, AcceptRate

    notes = []
    rate = AcceptRate(10, 3, "new connections", "CHTOP_PROXY_ACCEPT_RATE", notes.append)
    assert [rate.take("wt:a", now=100.0) for _ in range(3)] == [0.0, 0.0, 0.0]       # the burst
    assert abs(rate.take("wt:a", now=100.0) - 0.1) < 1e-9                           # then one per 1/rate
    assert rate.take("wt:b", now=100.0) == 0.0                                       # each source its own
    assert rate.take("wt:a", now=100.2) == 0.0
    rate.give_back("wt:a")                                                           # an accept that found none
    assert rate.take("wt:a", now=100.2) == 0.0
    assert rate.pause_for("wt:a", 0.01) == MIN_PAUSE and rate.pause_for("wt:a", 0.5) == 0.5
    assert len(notes) == 1 and "wt:a" in notes[0] and "CHTOP_PROXY_ACCEPT_RATE" in notes[0]
    assert AcceptRate(0, 1, "hand-offs", "X", notes.append).take("wt:a") == 0.0     # 0: no limit
    assert NOTE_EVERY >= 1
