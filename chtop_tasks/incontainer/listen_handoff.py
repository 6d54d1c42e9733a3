"""Run by a sandbox's entry: listen on 127.0.0.1:PORT here, hand the socket to the proxy.

    python3 -I -S listen_handoff.py HANDOFF_SOCKET PORT

The listening socket lives in the sandbox's own network namespace; the
proxy receives it over HANDOFF_SOCKET (SCM_RIGHTS) and accepts the agent's
connections on it itself (no relay process copies the bytes).  Exits 0
once the proxy has it; a forked holder (its name: ``chtop-handoff``) keeps
the hand-off connection open for the sandbox's lifetime (when it closes,
the proxy drops the listener) and keeps its own copy of the listener: when
the proxy goes away (a crash, ``inv net.restart``), the connection ends, and
the holder connects again (with backoff) and hands the same listener to the
new proxy.  Connections the agent makes meanwhile wait in the listener's
backlog until the new proxy accepts them.  Standard library only: it runs
with the host's (or the image's) /usr/bin/python3.  Protocol:
chtop_tasks/proxy/fdpass.py.
"""

import os
import socket
import sys
import time

MAGIC = b"CHTOP-LISTEN 1\n"
RETRY_FIRST, RETRY_MAX = 0.05, 1.0     # seconds between tries to reach a (re)started proxy


def hand_over(path: str, listener: socket.socket) -> socket.socket:
    """A hand-off connection the proxy accepted ``listener`` on; raises OSError, or
    PermissionError with the proxy's reply when it refused."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [MAGIC], [listener.fileno()])
        reply = conn.recv(16)
    except OSError:
        conn.close()
        raise
    if reply != b"OK\n":
        conn.close()
        raise PermissionError(f"the proxy refused the hand-off ({reply!r}); see inv net.log")
    return conn


def wait_until_closed(conn: socket.socket) -> None:
    """Block until the proxy ends the hand-off connection (it exited, or dropped it)."""
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    conn.close()


def hold(path: str, listener: socket.socket, conn: socket.socket) -> None:
    """The holder's life: hand the listener over again each time the proxy goes away."""
    while True:
        wait_until_closed(conn)
        delay = RETRY_FIRST
        while True:
            try:
                conn = hand_over(path, listener)
                break
            except OSError:
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)


def name_holder() -> None:
    """Name the process for ``ps`` (no exec: it keeps the fds); done before the fork, so that the
    holder has its name from its first instant, not once it is scheduled."""
    try:
        with open("/proc/self/comm", "w") as fh:
            fh.write("chtop-handoff")
    except OSError:
        pass


def become_holder() -> None:
    """Detach from the entry's stdio."""
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)


def main() -> int:
    path, port = sys.argv[1], int(sys.argv[2])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    try:
        conn = hand_over(path, listener)
    except PermissionError as exc:
        print(f"chtop: {exc}", file=sys.stderr)
        return 1
    name_holder()
    if os.fork():
        return 0
    become_holder()
    try:
        hold(path, listener, conn)
    finally:
        os._exit(1)
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as exc:
        print(f"chtop: the proxy hand-off failed: {exc}", file=sys.stderr)
        sys.exit(1)
