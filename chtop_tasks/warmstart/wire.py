"""What the warm launcher's client and server say, and where they meet: ``os`` and ``_socket`` only,
since the client imports this before anything else of chtop.

The request is one message: ``PROTOCOL``, the checkout root, the cwd, the key (``start_key``), the
argv and the environment, each NUL-terminated (none of them can hold a NUL), the counts first;
the terminal's three fds ride with it (SCM_RIGHTS).  The server answers ``run PID`` (its child's) or
``no WHY``; the client says ``go``, and the child then runs and ends with ``exit STATUS``.
"""

import _socket
import os
import sys

PROTOCOL = "chtop-warm-2"
WARM_TASKS = ("sbox.claude", "sbox.agent", "sbox.shell")          # launches: on a terminal
# The daily git tasks of a feature worktree, on a terminal or not (their output is captured and
# printed, nothing of theirs reads the terminal): see git_task_may_go_warm.
WARM_GIT_TASKS = ("git.status", "git.diff", "git.rebase-down", "git.merge-up")
OFF_ENV = "CHTOP_WARM"            # "0": never warm (no server is used or started)
SOCKET_PREFIX = "warm-"
MAX_REQUEST = 1 << 20
# What decides, at Python's start, how the interpreter behaves: a server started under other values
# would run your launch in another Python than the one you started.
START_ENV = ("LANG", "LC_ALL", "LC_CTYPE")
# Set in the server (and so in each child it forks): a launch already running warm never asks a
# server again (it would ask its own, which forks another child that asks again, without end).
IN_SERVER = False


def wanted(argv: list[str], environ, root: str | None = None) -> bool:
    """Whether ``inv ARGV`` (in checkout ``root``) may go to a warm launcher: a launch task on a
    terminal, or a daily git task of a feature worktree; not turned off."""
    if IN_SERVER or not argv or environ.get(OFF_ENV, "1") == "0":
        return False
    if argv[0] in WARM_TASKS:
        return os.isatty(0) and os.isatty(1)
    return argv[0] in WARM_GIT_TASKS and root is not None and git_task_may_go_warm(argv, root)


def git_task_may_go_warm(argv: list[str], root: str) -> bool:
    """A git task runs warm in a feature worktree (its ``.git`` a file; the toplevel's status asks
    every recorded host over SSH), never with ``--host`` (SSH, whose prompts read your terminal as
    theirs, which a warm run does not have), and rebase-down never with git options passed through
    (``-- -i``: an interactive rebase's editor)."""
    if any(arg == "--host" or arg.startswith("--host=") for arg in argv[1:]):
        return False
    if argv[0] == "git.rebase-down" and "--" in argv[1:]:
        return False
    return os.path.isfile(os.path.join(root, ".git"))


def is_git_task(argv: list[str]) -> bool:
    """A warm git task: the signals its client gets go to the run's whole process group (its gits
    too), as your terminal's Ctrl-C reaches a cold run's, so that a git interrupted cleans up."""
    return bool(argv) and argv[0] in WARM_GIT_TASKS


def start_key(environ) -> str:
    """The Python a request needs: the executable, its flags and options, and the start-up environment."""
    env = sorted(f"{k}={v}" for k, v in environ.items() if k.startswith("PYTHON") or k in START_ENV)
    return "\n".join([sys.executable, flags_but_site(), repr(sorted(sys._xoptions.items())), *env])


def flags_but_site() -> str:
    """``sys.flags`` less ``no_site``: bootstrap's ``inv`` starts Python with ``-S`` and runs site's
    step itself where invoke's program needs it (``invscript.py``); the launcher it starts runs it as
    usual, and a run forked from it is a run with site done, as on invoke's path."""
    return repr(sys.flags).replace(f"no_site={sys.flags.no_site}, ", "")


def peer_uid(sock) -> int:
    """The uid of the process at the other end of a unix socket (SO_PEERCRED: pid, uid, gid)."""
    cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(cred[4:8], sys.byteorder)


def fnv64(text: str) -> str:
    """A short stable name for ``text`` (FNV-1a), without importing hashlib: the socket's name only
    (the server checks the root it was asked for is its own)."""
    value = 0xCBF29CE484222325
    for byte in text.encode("utf-8", "surrogateescape"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def socket_path(base: str, root: str) -> str:
    return os.path.join(base, f"{SOCKET_PREFIX}{fnv64(root)}.sock")


def encode_request(root: str, cwd: str, key: str, argv: list[str], environ) -> bytes:
    env = [f"{k}={v}" for k, v in environ.items()]
    fields = [PROTOCOL, root, cwd, key, str(len(argv)), *argv, str(len(env)), *env]
    body = b"".join(os.fsencode(f) + b"\0" for f in fields)
    return len(body).to_bytes(4, "big") + body


def decode_request(body: bytes) -> dict:
    """The request's fields; ValueError when it is not one."""
    fields = [os.fsdecode(f) for f in body.split(b"\0")]
    if not fields or fields.pop() != "" or fields[0] != PROTOCOL:
        raise ValueError("not a request of this protocol")
    root, cwd, key = fields[1:4]
    argc = int(fields[4])
    argv = fields[5:5 + argc]
    envc = int(fields[5 + argc])
    env = fields[6 + argc:]
    if len(argv) != argc or len(env) != envc or any("=" not in e for e in env):
        raise ValueError("a request's counts do not match its fields")
    return {"root": root, "cwd": cwd, "key": key, "argv": argv,
            "env": dict(e.split("=", 1) for e in env)}
