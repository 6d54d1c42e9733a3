"""The warm launcher's server: a launch's modules imported once, a child forked ahead per launch.

``serve(root)`` runs detached (``client.start_server``): it imports what ``inv sbox.claude`` imports
(``PRELOAD``; started by a git task, what the git tasks import, ``PRELOAD_GIT``), notes every loaded
module's file, then listens on its socket in your runtime dir.
It keeps one *spare*: a child forked ahead that waits on the socket, so that a launch does not
wait for the fork (about 2 ms of a process this size).  The spare that takes a request tells the
server, which forks the next one.  Per request the spare checks that the peer is you, that the
request is for its own checkout and Python (``wire.start_key``), and that none of the checkout's
own files loaded has changed since (``changed_module``; the server checks the libraries): anything else is refused and the client runs the launch
itself.  Otherwise it takes the client's terminal fds as 0, 1 and 2, its cwd, environment and
argv, tells the client its pid, waits for ``go``, and runs ``chtop_tasks.inv.main`` as ``inv``
would have; then it sends ``exit STATUS`` (Python's own rules for a SystemExit or an uncaught
exception) and ends.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time

from ..filestamp import file_stamp
from ..places import ensure_private_dir, runtime_base
from . import wire

IDLE_SECONDS = 15 * 60       # no launch for this long: the server leaves
TICK_SECONDS = 30            # how often an idle server looks whether its worktree is still there
# The next spare is forked this long after one took a request (the launch has passed its own part, a
# few tens of ms, and podman is starting), not at once: forking this process
# (2 ms, its pages made copy-on-write) competed with the launch just handed over, and made the
# spare's answer 2 ms slower.  A run arriving meanwhile wakes the server, which forks it one at once.
SPARE_DELAY_SECONDS = 0.25
PRELOAD_TASK = "sbox.claude"
# What a server started by a git task imports: the git tasks' modules alone (a launch it serves later
# imports the rest itself); it rehearses no launch.  Less to import, and a smaller process to fork.
PRELOAD_GIT = ("chtop_tasks.inv", "chtop_tasks.faststart", "chtop_tasks.workspace.gitops",
               "chtop_tasks.warmstart.client")
PRELOAD = (
    "chtop_tasks.inv", "chtop_tasks.faststart", "chtop_tasks.agents.registry", "chtop_tasks.sandbox",
    "chtop_tasks.sandbox.launcher", "chtop_tasks.passthrough", "chtop_tasks.workspace.gitops",
    "chtop_tasks.sandbox.once", "chtop_tasks.proxy.control", "chtop_tasks.proxy.policy", "chtop_tasks.proxy.logs",
    "chtop_tasks.warmstart.client", "pexpect", "pty", "tty",
)


def serve(root: str, *, start_prefix=None, start_environ=None, task: str = PRELOAD_TASK) -> None:
    """Preload (for ``task``, the run that started it), listen and serve runs for the checkout ``root``
    until idle or gone."""
    wire.IN_SERVER = True
    if wire.is_git_task([task]):
        preload(PRELOAD_GIT, task)
    else:
        preload(PRELOAD, PRELOAD_TASK)
        rehearse(root)
    files = module_files(root)
    key = wire.start_key(os.environ if start_environ is None else start_environ)
    base = runtime_base()
    ensure_private_dir(base)
    path = wire.socket_path(str(base), root)
    listener, inode = listening_at(path)
    signal.signal(signal.SIGTERM, left_on_request)          # the spare is ended on the way out (finally)
    try:
        serve_requests(listener, root, key, files, start_prefix, lambda: socket_inode(path) == inode)
    finally:
        listener.close()
        if socket_inode(path) == inode:
            os.unlink(path)


def left_on_request(signum, frame):
    raise SystemExit(0)


def preload(modules: tuple[str, ...], task: str) -> None:
    import importlib

    from .. import faststart

    for name in modules:
        importlib.import_module(name)
    faststart.light_tasks(task)                  # the task's module, light, as the fast start imports it


REHEARSALS = 3


def rehearse(root: str) -> None:
    """Render the seccomp profile (kept, for as long as podman's default is unchanged), and plan
    ``inv sbox.claude`` in ``root`` a few times, its read-only part only (nothing is prepared,
    started or written; the plans are dropped), so that Python's specializing interpreter has
    adapted that code here before the children are forked: about 2 ms of each warm launch, which
    otherwise runs it unspecialized.  What it reads, it reads as every launch does; what goes wrong
    is the launch's to say, not the server's (it stops rehearsing)."""
    from pathlib import Path

    from ..agents.registry import agent_request
    from ..sandbox import seccomp
    from ..sandbox.launcher import plan_request
    from ..workspace.layout import verify_git_dirs

    try:
        seccomp.profile_text()
    except Exception:  # noqa: BLE001 - the launch itself reports it
        return
    for _ in range(REHEARSALS):
        try:
            request = agent_request("claude", [], Path(root), interactive=True)
            if request.target.kind == "worktree":
                verify_git_dirs(request.target.workspace)
            plan_request(request, stores_walked=True)
        except Exception:  # noqa: BLE001 - the launch itself reports it
            return


def module_files(root: str) -> dict[str, tuple]:
    """Each loaded module's file (and the checkout's tasks.py) with what would show a change to it."""
    paths = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    paths.add(os.path.join(root, "tasks.py"))
    return {p: file_stamp(p) for p in paths if isinstance(p, str) and os.path.isabs(p)}


def own_files(files: dict[str, tuple], root: str) -> dict[str, tuple]:
    """The checkout's own files among ``files`` (its modules and ``tasks.py``): what a spare checks
    at each request.  The server checks all of them (the libraries too) before it forks a spare and
    every tick: a library changed since (a pip or apt upgrade) is seen within a tick, and meanwhile a
    launch runs with the version loaded, as any running Python does; the checkout's code, which a
    checkout, a rebase or your editor changes, is never run stale.  (All 150 files took 0.7 ms of
    each launch; the checkout's 60, 0.3.)"""
    prefix = os.path.realpath(root).rstrip(os.sep) + os.sep
    return {path: stamp for path, stamp in files.items() if os.path.realpath(path).startswith(prefix)}


def changed_module(files: dict[str, tuple]) -> str | None:
    """A loaded module's file that changed (or went) since the server loaded it; None if none did."""
    for path, stamp in files.items():
        if file_stamp(path) != stamp:
            return path
    return None


def listening_at(path: str) -> tuple[socket.socket, int]:
    """A socket at ``path`` and its inode: bound under a name of its own and renamed there (never
    unlinking a running server's: the newer one wins, the older one leaves at its next tick)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own = f"{path}.{os.getpid()}"
    listener.bind(own)
    listener.listen(16)
    inode = os.lstat(own).st_ino
    os.rename(own, path)
    return listener, inode


def socket_inode(path: str) -> int | None:
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None


TAKEN, STALE = b"t", b"s"          # what a spare tells the server: it took a request; the code changed


def serve_requests(listener, root, key, files, start_prefix, still_listed) -> None:
    """Keep a spare waiting on ``listener``, fork the next a little after it takes a request; leave
    when idle, when the worktree's ``tasks.py`` is gone, when another server took the socket, or when
    a spare found the code changed."""
    news, to_server = socket.socketpair()
    own = own_files(files, root)
    last, spare, due = time.monotonic(), None, 0.0
    try:
        while True:
            if spare in reaped_children():
                spare = None                  # it failed before taking a request: a new one
            if spare is None and (time.monotonic() >= due or waiting_on(listener)):
                if changed_module(files) is not None:
                    return                    # a library it loaded changed: a fresh server, cold
                spare = fork_spare(listener, news, to_server, root, key, own, start_prefix)
            # with no spare, a run that arrives meanwhile (git tasks come one right after another)
            # wakes the server, which forks its spare at once
            watched = [news] if spare is not None else [news, listener]
            ready = select.select(watched, [], [], TICK_SECONDS if spare is not None
                                  else max(0.001, due - time.monotonic()))[0]
            if not ready:
                if spare is not None and (time.monotonic() - last > IDLE_SECONDS or not still_listed()
                                          or not os.path.isfile(os.path.join(root, "tasks.py"))
                                          or changed_module(files) is not None):
                    return
                continue
            if news not in ready:
                continue
            said = news.recv(64)
            last = time.monotonic()
            if STALE in said:
                return
            if TAKEN in said:
                spare, due = None, last + SPARE_DELAY_SECONDS
    finally:
        stop_listening(listener)
        news.close()
        to_server.close()


def waiting_on(listener) -> bool:
    """Whether a run is waiting on the socket for a spare to take it."""
    return bool(select.select([listener], [], [], 0)[0])


def fork_spare(listener, news, to_server, root, key, files, start_prefix) -> int:
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)      # a launch is ended by it, as a cold one is
        news.close()
        try:
            serve_one(listener, to_server, root, key, files, start_prefix)
        finally:
            os._exit(1)
    return pid


def stop_listening(listener) -> None:
    """The server leaves: its socket refuses from now on, and a spare waiting on it wakes with an error
    and ends.  Not a kill: a spare that has just taken a request (its word not read yet) goes on
    running that launch."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def serve_one(listener, to_server, root, key, files, start_prefix) -> None:
    """In a spare: wait for one request (leaving if the server is gone), tell the server, answer it."""
    server = os.getppid()
    while not select.select([listener], [], [], TICK_SECONDS)[0]:
        if os.getppid() != server:
            return                            # the server was killed: no launch is taken on its behalf
    try:
        conn, _ = listener.accept()
    except OSError:
        return                                # the server stopped listening (stop_listening)
    listener.close()
    try:
        to_server.sendall(TAKEN)
    except OSError:
        pass
    with conn:
        if answer(conn, root, key, files, start_prefix) == "stale":
            try:
                to_server.sendall(STALE)
            except OSError:
                pass


def reaped_children() -> set[int]:
    """The children that have ended (launches, and a spare that failed), reaped."""
    pids = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return pids
        if pid == 0:
            return pids
        pids.add(pid)


def answer(conn, root, key, files, start_prefix) -> str:
    """Refuse the request (what was done: "no", "stale") or run it here (never returns)."""
    conn.settimeout(5)
    fds: list[int] = []
    try:
        request, fds = received(conn)
        refusal = refusal_of(conn, request, root, key, files)
        if refusal:
            conn.sendall(f"no {refusal}\n".encode())
            return "stale" if refusal == "stale" else "no"
        run_child(conn, request, fds, start_prefix)      # never returns
    except (OSError, ValueError):
        return "no"
    finally:
        for fd in fds:
            os.close(fd)


def received(conn) -> tuple[dict, list[int]]:
    """The request and the three fds that came with it; ValueError for anything else."""
    data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
    fds = [int.from_bytes(cdata[i:i + 4], sys.byteorder, signed=True)
           for level, kind, cdata in ancdata if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
           for i in range(0, len(cdata) - len(cdata) % 4, 4)]
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request comes with exactly three fds")
    if len(data) < 4:
        raise ValueError("a short request")
    size = int.from_bytes(data[:4], "big")
    if size > wire.MAX_REQUEST:
        raise ValueError("a request too large")
    body = data[4:]
    while len(body) < size:
        chunk = conn.recv(min(65536, size - len(body)))
        if not chunk:
            raise ValueError("a request cut short")
        body += chunk
    return wire.decode_request(body), fds


def refusal_of(conn, request: dict, root: str, key: str, files) -> str | None:
    """Why this server must not run the request (a word), or None."""
    if wire.peer_uid(conn) != os.getuid():
        return "not-yours"
    if request["root"] != root:
        return "other-checkout"
    if request["key"] != key:
        return "other-python"
    if changed_module(files) is not None:
        return "stale"
    return None


def run_child(conn, request: dict, fds: list[int], start_prefix) -> None:
    """In the forked child: become the client's ``inv`` and run it; say its status; exit."""
    status = 1
    try:
        conn.settimeout(None)
        conn.sendall(f"run {os.getpid()}\n".encode())
        if conn.recv(16) != b"go\n":
            os._exit(1)
        become_client(request, fds, start_prefix)
        status = exit_status_of(lambda: run_inv(request["root"]))
    finally:
        try:
            conn.sendall(f"exit {status}\n".encode())
        finally:
            os._exit(status)


def become_client(request: dict, fds: list[int], start_prefix) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.pycache_prefix = start_prefix                # the prologue sets it (and its env) as for a cold start
    sys.stdout.reconfigure(line_buffering=os.isatty(1))


def run_inv(root: str) -> None:
    from .. import inv

    inv.main(found_root=root)


def exit_status_of(main) -> int:
    """``main()``'s exit status as the interpreter would make it: SystemExit's code (a message on
    stderr, 1), an uncaught exception's traceback and 1, an interrupt's 130."""
    try:
        main()
        return 0
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
