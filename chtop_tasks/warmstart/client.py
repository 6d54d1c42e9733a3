"""The warm launcher's client: ``inv``'s first step for a launch task on a terminal, or a daily git
task of a feature worktree (``inv.py``, ``wire.wanted``).

It imports only ``_socket`` and ``_signal`` (``socket`` and ``signal`` bring ``enum``: 10 ms), finds
the server of this checkout in your private runtime dir, and hands it the terminal; or, when there
is none, starts one for the next launch and says so by returning None (``inv`` then runs the task
itself, as always).  While the server's child runs the task, the signals you send this process
(Ctrl-C before the terminal is raw, a resize, a hang-up, a kill) go to that child (a git task's:
to its process group, its gits too, as a terminal's Ctrl-C reaches a cold run's), and its status
is this process's.
"""

import _signal
import _socket
import os
import sys

from ..rundir import is_private_dir, runtime_base_path
from . import wire

ANSWER_SECONDS = 3.0        # a server that has not answered by then is passed over: the launch runs here
FORWARDED = ("SIGINT", "SIGQUIT", "SIGTERM", "SIGHUP", "SIGWINCH", "SIGUSR1", "SIGUSR2")
# python -c puts the cwd (a worktree dir the agent writes) first on sys.path: out, before any import
# that could search it (os and sys are loaded at start), and the server leaves for / at once.  Then
# tasks.py's prologue, as inv.run_prologue runs it but written out here: importing chtop_tasks.inv
# for it would read and write that module's bytecode beside its source, before the prologue has
# pointed bytecode at your own cache.
SERVER_BOOT = """import sys
if sys.path[:1] == [""]:
    del sys.path[0]
import os
os.chdir("/")
root, prefix, environ = sys.argv[1], sys.pycache_prefix, dict(os.environ)
path = os.path.join(root, "tasks.py")
with open(path, "rb") as source:
    code = compile(source.read(), path, "exec", dont_inherit=True)
exec(code, {"__name__": "chtop_prologue", "__file__": path, "__builtins__": __builtins__})
from chtop_tasks.warmstart.server import serve
serve(root, start_prefix=prefix, start_environ=environ, task=sys.argv[2])
"""


def launched(root: str, argv: list[str]) -> int | None:
    """The exit status of ``argv`` (``inv``'s whole argv, which ``wire.wanted``) run by the warm
    launcher of ``root``; None: run it here."""
    base = runtime_base_path()
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if not is_private_dir(base) or not connected(sock, wire.socket_path(base, root)):
            start_server(root, argv[1])
            return None
        pid = handed_over(sock, root, argv)
        if pid is None:
            return None
        return status_of(sock, pid)
    finally:
        sock.close()


def connected(sock, path: str) -> bool:
    try:
        sock.connect(path)
    except OSError:
        return False
    return wire.peer_uid(sock) == os.getuid()


def handed_over(sock, root: str, argv: list[str]) -> int | None:
    """Send the request with the terminal's fds; the child's pid once it may run, None when refused."""
    request = wire.encode_request(root, os.getcwd(), wire.start_key(os.environ), argv, os.environ)
    fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
    sock.settimeout(ANSWER_SECONDS)
    try:
        sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        answer = read_line(sock)
    except OSError:
        return None
    if not answer.startswith(b"run "):
        if answer == b"no stale":
            start_server(root, argv[1])  # the old one has gone: a fresh one for the next launch
        return None
    pid = int(answer[4:])
    if os.environ.get("CHTOP_VERBOSE") == "1":
        print(f"chtop: warm start: run by this checkout's warm launcher (pid {pid})", file=sys.stderr)
    forward_signals_to(pid, group=wire.is_git_task(argv[1:]))
    sock.settimeout(None)
    try:
        sock.sendall(b"go\n")
    except OSError:
        return None
    return pid


def read_line(sock) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(256)
        if not chunk:
            break
        data += chunk
    return data.strip()


LAST_SIGNAL = []


def forward_signals_to(pid: int, group: bool = False) -> None:
    """The signals this process gets, passed on to ``pid``; with ``group``, to its process group (the
    run is its group's leader once it runs: ``server.become_client``), else to it alone."""
    def forward(signum, frame):
        LAST_SIGNAL[:] = [signum]
        try:
            if group:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            try:
                os.kill(pid, signum)         # (a signal before the run took its own group)
            except ProcessLookupError:
                pass

    for name in FORWARDED:
        _signal.signal(getattr(_signal, name), forward)


def status_of(sock, pid: int) -> int:
    """The child's ``exit STATUS``; when it died before saying it: 128 + the last signal passed on."""
    answer = read_line(sock)
    if answer.startswith(b"exit ") and answer[5:].isdigit():
        return int(answer[5:])
    if LAST_SIGNAL:
        return 128 + LAST_SIGNAL[0]
    print(f"chtop: the warm launcher's run (pid {pid}) ended without its status", file=sys.stderr)
    return 1


def start_server(root: str, task: str) -> None:
    """Start the warm launcher of ``root`` for the next run of ``task`` (what it preloads), detached
    (its own session, no terminal, cwd /), with this environment; it is ready in about a second."""
    try:
        os.posix_spawn(sys.executable, [sys.executable, "-c", SERVER_BOOT, root, task], os.environ,
                       setsid=True, file_actions=[(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0)
                                                   for fd in (0, 1, 2)])
    except OSError:
        pass                                  # no warm launcher: every launch runs cold, as before
