"""The proxy is a restartable part: its supervisor starts the daemon again when it dies, and each
sandbox's hand-off holder (the real chtop_tasks/incontainer/listen_handoff.py, run here as a
sandbox's entry runs it) hands the same listener to the new daemon.  A real proxy, real
kill -9, a real request loop through the handed-over listener."""
# ruff: noqa: F811  (pytest fixtures imported from proxy_helpers are redefined as arguments)

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import eventually
from proxy_helpers import echo, launch_holder, proxy, read_head  # noqa: F401  (fixtures)

from chtop_tasks.core.errors import ChtopError
from chtop_tasks.proxy import control, control_protocol, report
from chtop_tasks.proxy.logs import net_dir
from chtop_tasks.proxy.supervise import read_state


def echo_once(port: int, echo_port: int, timeout: float = 3.0) -> bool:
    """One request through the sandbox's listener: a tunnel to the echo server, echoed back."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"CONNECT echo.example.test:{echo_port} HTTP/1.1\r\n\r\n".encode())
            status, _ = read_head(s)
            if status != 200:
                return False
            s.sendall(b"ping\n")
            return s.recv(5) == b"ping\n"
    except (OSError, ValueError, AssertionError):
        return False


class RequestLoop:
    """The agent's loop of requests, in a thread: one after another, each result with its time."""

    def __init__(self, port: int, echo_port: int):
        self.results: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(port, echo_port), daemon=True)
        self._thread.start()

    def _run(self, port, echo_port):
        while not self._stop.is_set():
            self.results.append((time.monotonic(), echo_once(port, echo_port)))
            time.sleep(0.02)

    def wait_good_after(self, t: float, timeout: float) -> float:
        first_good = eventually(lambda: next((when for when, ok in self.results if ok and when > t), None),
                                "a good request", timeout, explain=lambda: f"the last: {self.results[-5:]}")
        return first_good - t

    def count_since(self, t: float) -> int:
        return sum(1 for when, _ in self.results if when >= t)

    def stop(self) -> list[tuple[float, bool]]:
        self._stop.set()
        self._thread.join(10)
        return self.results


def disrupted(port: int, echo_port: int, disrupt) -> tuple[list[tuple[float, bool]], float, float]:
    """The request loop through ``port``; once it works, ``disrupt()``.  Returns (its results, when
    the disruption began, seconds from then to the first good request after it returned)."""
    loop = RequestLoop(port, echo_port)
    try:
        loop.wait_good_after(0, 10)
        began = time.monotonic()
        disrupt()
        done = time.monotonic()
        back = done - began + loop.wait_good_after(done + 0.05, 5)
        eventually(lambda: loop.count_since(began + back) >= 20, "a score of requests since it came back")
    finally:
        results = loop.stop()
    return results, began, back


@pytest.fixture
def holder(proxy, echo):
    proxy.allow(f"echo.example.test:{echo.port} private")
    ep = proxy.start("dev")
    pid, port = launch_holder(ep)
    yield ep, port
    os.kill(pid, signal.SIGKILL)


def test_kill9_of_the_daemon_a_running_sandbox_works_again_within_5s(proxy, echo, holder):
    ep, port = holder
    results, killed_at, back = disrupted(port, echo.port, lambda: os.kill(ep.pid, signal.SIGKILL))
    assert back < 5                                                  # back within 5 s, nobody did a thing
    after = [ok for when, ok in results if when >= killed_at + back]
    assert len(after) > 5 and all(after), results[-10:]             # and every request since works
    new = control.proxy_status(proxy.group)
    assert new is not None and new.pid != ep.pid and new.url == ep.url
    state = read_state(proxy.group)
    assert state["restarts"] == 1 and state["last_reason"] == "killed by SIGKILL"
    text, running = report.format_status(proxy.group)
    assert running and "restarts: 1 (last: killed by SIGKILL" in text
    assert "sandboxes: 1 hand their listener" in text


def test_net_restart_under_a_request_loop_fails_at_most_the_request_in_flight(proxy, echo, holder):
    ep, port = holder
    replaced = {}
    results, before, _ = disrupted(port, echo.port, lambda: replaced.update(
        zip(("old", "new"), control.restart_proxy(proxy.group, proxy.policy), strict=True)))
    assert replaced["old"] == ep.pid and replaced["new"].pid != ep.pid
    during = [ok for when, ok in results if when >= before - 0.1]
    assert during.count(False) <= 1, results                         # the one in flight, if any
    assert read_state(proxy.group)["restarts"] == 0                  # a restart asked for is no crash
    assert control.sandboxes_served(proxy.group) == 1


def test_a_second_restart_during_the_first_is_refused(proxy, echo, holder):
    with open(net_dir(proxy.group) / "restart.lock", "a") as lock:   # a restart under way
        fcntl.flock(lock, fcntl.LOCK_EX)
        pid = control.proxy_status(proxy.group).pid
        with pytest.raises(ChtopError, match="another `net.restart`"):
            control.restart_proxy(proxy.group, proxy.policy)
    assert control.proxy_status(proxy.group).pid == pid              # and it changed nothing


def test_a_held_request_is_refused_not_hung_when_the_daemon_dies(proxy, echo, holder):
    """A request held for a watcher's answer gets its connection closed by the crash: the agent
    sees an error at once, it does not wait for the hold's timeout (120 s)."""
    ep, port = holder
    watcher, _, _ = control_protocol.attach_watcher(proxy.group)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"CONNECT held.example.test:443 HTTP/1.1\r\n\r\n")
        eventually(lambda: control_protocol.request(proxy.group, {"cmd": "status"}).get("held"), "the request held",
                   timeout=10)
        killed_at = time.monotonic()
        os.kill(ep.pid, signal.SIGKILL)
        try:
            ended = s.recv(4096)
        except ConnectionResetError:
            ended = b""
        assert ended == b"" and time.monotonic() - killed_at < 3      # closed, not hung
        s.close()
    finally:
        watcher.close()


def test_a_clean_stop_is_not_restarted_and_a_daemon_that_cannot_start_is_not_retried(proxy, echo):
    ep = proxy.start()
    supervisor = control._our_supervisor(proxy.group)
    assert supervisor is not None
    os.kill(ep.pid, signal.SIGTERM)                                  # the daemon's own clean stop
    eventually(lambda: not control._is_ours(supervisor, proxy.group, b"chtop_tasks.proxy.supervise"),
               "the supervisor to end after a clean stop", timeout=10)
    assert control.proxy_status(proxy.group) is None
    with socket.socket() as squatter:                                # port in use: exit 2, no retry loop
        squatter.bind(("127.0.0.1", proxy.port))
        squatter.listen(1)
        with pytest.raises(ChtopError, match="in use"):
            proxy.start()
        assert control._our_supervisor(proxy.group) is None


def _alive_for(pid: int, group, seconds: float) -> bool:
    """Whether the daemon ``pid`` is still ours after ``seconds`` (watched from /proc: a control
    request would count as use).  A stretch of time that must pass: what is shown is that nothing
    happens in it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not control._is_our_proxy(pid, group):
            return False
        time.sleep(0.1)
    return True


def _exits_by_itself(pid: int, group) -> None:
    eventually(lambda: not control._is_our_proxy(pid, group), "the idle proxy to exit by itself", timeout=10)


def test_idle_exit_after_the_last_sandbox_never_while_one_or_a_watcher_is_there(proxy, echo, monkeypatch):
    monkeypatch.setenv("CHTOP_PROXY_IDLE_EXIT", "1")
    proxy.allow(f"echo.example.test:{echo.port} private")
    ep = proxy.start("dev")
    holder, port = launch_holder(ep)
    try:
        assert _alive_for(ep.pid, proxy.group, 3)                      # a sandbox runs: it stays
        assert echo_once(port, echo.port)
    finally:
        os.kill(holder, signal.SIGKILL)                                # the last sandbox ended
    supervisor = control._our_supervisor(proxy.group)
    _exits_by_itself(ep.pid, proxy.group)                          # then it exits by itself
    assert control._wait_gone(supervisor, proxy.group, b"chtop_tasks.proxy.supervise", 5)   # for good
    assert "IDLE     no sandbox" in (proxy.group / ".chtop/net/proxy.log").read_text()
    ep = proxy.start()
    watcher, _, _ = control_protocol.attach_watcher(proxy.group)       # net.watch or dash: never idle
    try:
        assert _alive_for(ep.pid, proxy.group, 3)
    finally:
        watcher.close()
    _exits_by_itself(ep.pid, proxy.group)


def _pane_between_sandboxes(group):
    """The real pane process of a session of worktree dev, stopped before its first sandbox: the
    environment session.start hands it over is a FIFO no one writes to yet, so it waits there."""
    from chtop_tasks.sessions import records

    record = records.Record(
        worktree="dev", root=str(group / "dev"), group=str(group), policy_dir=str(group / "top" / "sandbox"),
        agent="claude", args=[], continue_=False, session_id="s1", tmux_socket=str(group / "no-tmux.sock"),
        tmux_session="chtop-dev", started_at=time.time())
    records.save(group, record)
    os.mkfifo(records.env_path(group, "dev"), 0o600)
    return subprocess.Popen([sys.executable, "-m", "chtop_tasks.sessions.pane", str(group), "dev", "s1"],
                            cwd="/", env=control._child_env(), stdin=subprocess.DEVNULL)


def _lease_taken_by(pane: subprocess.Popen, group) -> bool:
    """Whether a session holds the lease yet; fails at once when the pane ended first."""
    if control.session_runs(group):
        return True
    assert pane.poll() is None, "the pane ended without taking the session lease"
    return False


def test_idle_exit_never_while_a_session_runs_even_between_its_sandboxes(proxy, monkeypatch):
    monkeypatch.setenv("CHTOP_PROXY_IDLE_EXIT", "1")
    pane = _pane_between_sandboxes(proxy.group)
    try:
        eventually(lambda: _lease_taken_by(pane, proxy.group), "the pane to take the session lease", timeout=20)
        ep = proxy.start()
        assert _alive_for(ep.pid, proxy.group, 4)                      # no sandbox, but a session runs
    finally:
        pane.kill()                                                    # the pane dies (kill -9, no clean-up)
        pane.wait()
    assert not control.session_runs(proxy.group)                       # the kernel let go of the lease
    _exits_by_itself(ep.pid, proxy.group)                          # so the proxy exits by itself
    assert "IDLE     no sandbox, connection, watcher or session" in (
        proxy.group / ".chtop/net/proxy.log").read_text()


def test_net_status_lists_no_socket_of_a_deleted_worktree(proxy):
    (proxy.group / "here").mkdir()
    here, gone = proxy.start("here"), proxy.start("gone")            # "gone" has no worktree dir (deleted)
    text, running = report.format_status(proxy.group)
    assert running and f"{here.socket_path}  (worktree here)" in text
    assert str(gone.socket_path) not in text and "(worktree gone)" not in text
    assert "1 socket(s) of deleted worktrees not shown" in text
