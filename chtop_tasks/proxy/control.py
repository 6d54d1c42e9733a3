"""Start, find, query and stop the per-group proxy (host side).

The proxy of a grouping dir is found through its pid file
(<group_dir>/.chtop/net/proxy.pid) and its control socket
(<runtime>/control.sock); a stale pid file or socket left by a kill -9 is
noticed (the pid is gone or is not our proxy, the socket does not answer)
and replaced.  The daemon runs under its supervisor (supervise.py, pid file
supervisor.pid), which starts it again when it dies; ``restart_proxy``
replaces both (new code, new settings) while sandboxes keep running.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from ..core.errors import ChtopError
from ..core.places import check_worktree_name, group_key, notify_config_path, runtime_dir
from . import control_protocol
from .logs import net_dir
from .policy import NetPolicy

START_TIMEOUT = 15.0
SUPERVISOR_PID = "supervisor.pid"     # supervise.py's pid file, next to proxy.pid
# Below the kernel's ephemeral range (32768+), so an outgoing connection never holds our port.
PORT_BASE, PORT_SPAN = 20000, 12000
NOTIFIER_LOCK = "notify.lock"     # held by the group's running phone notifier (chtop_tasks.notify.held)
SESSION_LEASE = "sessions.lease"  # held (shared) by each running session's pane process


@dataclass(frozen=True)
class ProxyEndpoint:
    url: str              # "http://127.0.0.1:PORT" (TCP, group policy)
    socket_path: Path     # unix socket to mount into a container (mount its parent dir)
    pid: int


def worktree_socket(runtime: Path, worktree: str) -> Path:
    """<runtime>/wt/<worktree>/proxy.sock (a long name shortened with a hash)."""
    name = worktree
    if len(name) > 24:
        name = name[:15] + "-" + sha256(name.encode()).hexdigest()[:8]
    return Path(runtime) / "wt" / name / "proxy.sock"


def build_socket(runtime: Path, worktree: str) -> Path:
    """<runtime>/build/<worktree>/proxy.sock: the venv build's socket, in a dir that no agent's
    sandbox mounts (``worktree_socket``'s name, shortened the same way)."""
    return Path(runtime) / "build" / worktree_socket(runtime, worktree).parent.name / "proxy.sock"


def proxy_port(group_dir: Path) -> int:
    """CHTOP_PROXY_PORT, else a port derived from the grouping dir (stable across restarts)."""
    override = os.environ.get("CHTOP_PROXY_PORT")
    if override:
        try:
            port = int(override)
        except ValueError:
            port = 0
        if not 1 <= port <= 65535:
            raise ChtopError(f"CHTOP_PROXY_PORT={override!r} is not a port number", 2)
        return port
    return PORT_BASE + int(group_key(group_dir)[:8], 16) % PORT_SPAN


def _read_pid(group_dir: Path, name: str = "proxy.pid") -> int | None:
    try:
        return int((net_dir(group_dir) / name).read_text().strip())
    except (OSError, ValueError):
        return None


def _is_ours(pid: int, group_dir: Path, module: bytes) -> bool:
    """Whether ``pid`` is a live ``python -m MODULE`` of this group (a pid file naming someone
    else's process is never signalled)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and module in cmdline and str(Path(group_dir).resolve()).encode() in cmdline


def _is_our_proxy(pid: int, group_dir: Path) -> bool:
    return _is_ours(pid, group_dir, b"chtop_tasks.proxy.server")


def _our_supervisor(group_dir: Path) -> int | None:
    """The pid of this group's live proxy supervisor, or None."""
    pid = _read_pid(group_dir, SUPERVISOR_PID)
    return pid if pid is not None and _is_ours(pid, group_dir, b"chtop_tasks.proxy.supervise") else None


def _wait_gone(pid: int, group_dir: Path, module: bytes, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _is_ours(pid, group_dir, module):
        time.sleep(0.02)
    return not _is_ours(pid, group_dir, module)


def status(group_dir: Path) -> dict | None:
    """The running proxy's status dict, or None."""
    pid = _read_pid(group_dir)
    if pid is None or not _is_our_proxy(pid, group_dir):
        return None
    try:
        info = control_protocol.request(group_dir, {"cmd": "status"})
    except (OSError, ValueError):
        return None
    return info if info.get("pid") == pid else None


def _endpoint(info: dict) -> ProxyEndpoint:
    return ProxyEndpoint(url=info["url"], socket_path=Path(info["socket"]), pid=info["pid"])


def planned_endpoint(group_dir: Path, worktree: str | None = None, build: bool = False) -> ProxyEndpoint:
    """Where the group's proxy listens (or will): its URL and the socket for ``worktree``
    (the group socket for None; its venv build's with ``build``).  Computed, nothing started:
    ``ensure_proxy`` gives the same."""
    group_dir = Path(group_dir).resolve()
    runtime = runtime_dir(group_dir)
    socket_path = runtime / "group" / "proxy.sock" if worktree is None else \
        (build_socket if build else worktree_socket)(runtime, worktree)
    return ProxyEndpoint(f"http://127.0.0.1:{proxy_port(group_dir)}", socket_path, 0)


def proxy_status(group_dir: Path) -> ProxyEndpoint | None:
    """The running proxy of this group, or None when it is not running."""
    info = status(group_dir)
    return _endpoint(info) if info else None


def _clean_stale(group_dir: Path) -> None:
    for path in (net_dir(group_dir) / "proxy.pid", net_dir(group_dir) / SUPERVISOR_PID,
                 runtime_dir(group_dir) / "control.sock"):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _child_env() -> dict:
    """Our environment, with this checkout first on PYTHONPATH (for the daemons started here)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _package_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start_detached(out_path: Path, module: str, *args: str) -> int:
    """Run ``python -m MODULE ARGS --detach`` (this checkout first on PYTHONPATH, from /, stdin
    closed, in a session of its own), its output appended to ``out_path``; returns once the
    module's detaching parent has, with the offset in ``out_path`` where this start's output begins.
    The group's daemons (the proxy's supervisor, the phone notifier) are started this one way."""
    argv = [sys.executable, "-m", module, *args, "--detach"]
    with open(out_path, "ab") as out:
        start_mark = out.tell()
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/",
                       env=_child_env(), start_new_session=True, timeout=30, check=False)
    return start_mark


def _start(group_dir: Path, policy_dir: Path) -> dict:
    rt = runtime_dir(group_dir, create=True)
    nd = net_dir(group_dir)
    port = proxy_port(group_dir)
    supervisor = _our_supervisor(group_dir)
    if supervisor is not None:           # restarting its daemon right now: wait for that one,
        info = _wait_for_status(group_dir, START_TIMEOUT,      # unless it is on its way out (a clean stop)
                                lambda: not _is_ours(supervisor, group_dir, b"chtop_tasks.proxy.supervise"))
        if info:
            return info
        if _is_ours(supervisor, group_dir, b"chtop_tasks.proxy.supervise"):
            os.kill(supervisor, signal.SIGKILL)
    old = _read_pid(group_dir)
    if old is not None and _is_our_proxy(old, group_dir):   # alive but not answering: hung
        os.kill(old, signal.SIGKILL)
        time.sleep(0.1)
    _clean_stale(group_dir)
    out_path = nd / "server.out"
    start_mark = start_detached(out_path, "chtop_tasks.proxy.supervise",
                                "--group-dir", str(Path(group_dir).resolve()),
                                "--policy-dir", str(Path(policy_dir).resolve()),
                                "--port", str(port), "--runtime-dir", str(rt))

    def wrote_an_error() -> bool:     # the server wrote to its output and has no pid file: it exited
        if out_path.stat().st_size > start_mark and _read_pid(group_dir) is None:
            time.sleep(0.2)
            return _read_pid(group_dir) is None
        return False

    info = _wait_for_status(group_dir, START_TIMEOUT, wrote_an_error)
    if info:
        return info
    supervisor = _our_supervisor(group_dir)
    if supervisor is not None:            # no daemon to keep: it would only start failing ones
        os.kill(supervisor, signal.SIGTERM)
        _wait_gone(supervisor, group_dir, b"chtop_tasks.proxy.supervise", 5.0)   # gone when we say so
    with open(out_path, "rb") as fh:
        fh.seek(start_mark)
        tail = fh.read().decode(errors="replace").strip().splitlines()[-5:]
    raise ChtopError("the egress proxy did not start"
                     + (":\n  " + "\n  ".join(tail) if tail else f" (see {out_path})")
                     + "\nsandboxes will not launch without it (fail closed)")


def _locked_by_another(path: Path, how: int) -> bool:
    """Does another process hold a lock on ``path`` that conflicts with ``how`` (LOCK_SH: an
    exclusive one; LOCK_EX: any)?  Taken and let go at once when none does."""
    try:
        with open(path, "rb") as fh:
            try:
                fcntl.flock(fh, how | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    except FileNotFoundError:
        pass
    return False


def notifier_running(group_dir: Path) -> bool:
    """Does a process hold the group's notifier lock?"""
    return _locked_by_another(net_dir(group_dir) / NOTIFIER_LOCK, fcntl.LOCK_SH)


def hold_session_lease(group_dir: Path):
    """The group's session lease, held (a shared lock) by the open file returned: a session's pane
    process holds it for its whole life, its agent in a sandbox or between sandboxes, and the
    kernel lets go when that process ends, however it ends (no record to go stale)."""
    nd = net_dir(group_dir)
    nd.mkdir(parents=True, exist_ok=True)
    fh = open(nd / SESSION_LEASE, "ab")
    fcntl.flock(fh, fcntl.LOCK_SH)
    return fh


def session_runs(group_dir: Path) -> bool:
    """Does a session of the group run (does any process hold its session lease)?"""
    return _locked_by_another(net_dir(group_dir) / SESSION_LEASE, fcntl.LOCK_EX)


def ensure_notifier(group_dir: Path, policy_dir: Path) -> None:
    """Start the group's phone notifier (chtop_tasks.notify.held, a host-side watcher of the control
    socket) when the user has a notify.toml; it takes a lock, so one that runs makes this a no-op."""
    if not notify_config_path().exists() or notifier_running(group_dir):
        return
    start_detached(net_dir(group_dir) / "notify.out", "chtop_tasks.notify.held",
                   "--group-dir", str(group_dir), "--policy-dir", str(policy_dir))


def _wait_for_status(group_dir: Path, timeout: float, failed=lambda: False) -> dict | None:
    """The proxy's status once it answers; None after ``timeout`` or once ``failed()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = status(group_dir)
        if info:
            return info
        time.sleep(0.02)
        if failed():
            return None
    return None


def ensure_proxy(group_dir: Path, policy_dir: Path, worktree: str | None = None,
                 build_hosts: list[str] | None = None) -> ProxyEndpoint:
    """Start the group's proxy unless it runs; return once it accepts connections.

    With ``worktree``, the endpoint's socket is that worktree's own socket,
    judged by the group lists plus <policy_dir>/worktrees/<worktree>/; with ``build_hosts`` too,
    its venv build's socket, which also allows those hosts and the build section (``policy``).
    Raises ChtopError when it cannot start (callers then refuse to launch).
    """
    group_dir, policy_dir = Path(group_dir).resolve(), Path(policy_dir).resolve()
    NetPolicy(policy_dir).require()
    if worktree is not None:
        check_worktree_name(worktree)
    nd = net_dir(group_dir)
    nd.mkdir(parents=True, exist_ok=True)
    with open(nd / "start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = status(group_dir)
        if info and Path(info["policy_dir"]) != policy_dir:
            raise ChtopError(
                f"the proxy of {group_dir} (pid {info['pid']}) reads {info['policy_dir']}, "
                f"not {policy_dir}; run `inv net.stop` first")
        if not info:
            info = _start(group_dir, policy_dir)
        ensure_notifier(group_dir, Path(info["policy_dir"]))
    endpoint = _endpoint(info)
    if worktree is not None:
        ask = {"cmd": "worktree", "name": worktree}
        if build_hosts is not None:
            ask["build"] = list(build_hosts)
        reply = control_protocol.request(group_dir, ask)
        if not reply.get("ok"):
            raise ChtopError(f"proxy refused a socket for worktree {worktree}: {reply.get('error')}")
        endpoint = ProxyEndpoint(endpoint.url, Path(reply["socket"]), endpoint.pid)
    return endpoint


def stop_proxy(group_dir: Path, timeout: float = 10.0) -> int | None:
    """SIGTERM the group's proxy (its supervisor first, so that it does not start it again) and
    wait for both; returns the daemon's pid, or None if none ran."""
    group_dir = Path(group_dir).resolve()
    supervisor = _our_supervisor(group_dir)
    if supervisor is not None:
        _signal_if_there(supervisor, signal.SIGTERM)       # it passes the SIGTERM on to the daemon
    pid = _read_pid(group_dir)
    if pid is None or not _is_our_proxy(pid, group_dir):
        pid = None
    else:
        _signal_if_there(pid, signal.SIGTERM)     # (the supervisor's SIGTERM may have ended it already)
        if not _wait_gone(pid, group_dir, b"chtop_tasks.proxy.server", timeout):
            _signal_if_there(pid, signal.SIGKILL)
    if supervisor is not None and not _wait_gone(supervisor, group_dir, b"chtop_tasks.proxy.supervise", 2.0):
        _signal_if_there(supervisor, signal.SIGKILL)
    _clean_stale(group_dir)
    return pid


def _signal_if_there(pid: int, signum: int) -> None:
    """``kill(pid, signum)``; a process that has just ended is what was wanted."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def sandboxes_served(group_dir: Path) -> int:
    """How many running sandboxes have handed their listener to the group's proxy (0: none, or
    it does not run)."""
    info = status(group_dir)
    return int(info.get("sandboxes", 0)) if info else 0


def restart_proxy(group_dir: Path, policy_dir: Path) -> tuple[int | None, ProxyEndpoint]:
    """Replace the group's proxy (new code, new settings): stop it, start a fresh one; each running
    sandbox's hand-off holder hands its listener to the new one.  One restart at a time: a second
    while one runs is refused.  Returns (the old daemon's pid or None, the new endpoint)."""
    group_dir, policy_dir = Path(group_dir).resolve(), Path(policy_dir).resolve()
    NetPolicy(policy_dir).require()
    nd = net_dir(group_dir)
    nd.mkdir(parents=True, exist_ok=True)
    with open(nd / "restart.lock", "a") as restarting:
        try:
            fcntl.flock(restarting, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ChtopError("another `net.restart` of this group's proxy is under way; "
                             "wait for it to finish (`net.status` shows the new one)", 2) from None
        with open(nd / "start.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = stop_proxy(group_dir)
            return old, _endpoint(_start(group_dir, policy_dir))
