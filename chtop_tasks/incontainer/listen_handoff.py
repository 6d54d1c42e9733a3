"""Run by a sandbox's entry: listen on 127.0.0.1:PORT here, hand the socket to the proxy.

    python3 -I -S listen_handoff.py HANDOFF_SOCKET PORT

The listening socket lives in the sandbox's own network namespace; the
proxy receives it over HANDOFF_SOCKET (SCM_RIGHTS) and accepts the agent's
connections on it itself (no relay process copies the bytes).  Exits 0
once the proxy has it; a forked ``sleep`` keeps the hand-off connection
open for the sandbox's lifetime (when it closes, the proxy drops the
listener).  Standard library only: it runs with the host's (or the
image's) /usr/bin/python3.  Protocol: chtop_tasks/proxy/fdpass.py.
"""

import os
import socket
import sys

MAGIC = b"CHTOP-LISTEN 1\n"


def main() -> int:
    path, port = sys.argv[1], int(sys.argv[2])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [MAGIC], [listener.fileno()])
    reply = conn.recv(16)
    if reply != b"OK\n":
        print(f"chtop: the proxy refused the hand-off ({reply!r}); see inv net.log", file=sys.stderr)
        return 1
    listener.close()                     # the proxy holds it now
    if os.fork():
        return 0
    fd = conn.detach()                   # the child: hold the hand-off for the sandbox's lifetime
    os.set_inheritable(fd, True)
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    os.execv("/bin/sleep", ["sleep", "infinity"])
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as exc:
        print(f"chtop: the proxy hand-off failed: {exc}", file=sys.stderr)
        sys.exit(1)
