"""The proxy's control protocol: JSON lines on ``<runtime>/control.sock`` (mode 0600, host only,
never mounted into a sandbox).  One client side, one server side, one list of answers.

Requests (one JSON object a line, one reply a line):

- ``{"cmd": "ping"}`` / ``{"cmd": "status"}``: the proxy's status (``Server.info``; "status" writes out
  the queued log records first: ``Server.status``);
- ``{"cmd": "worktree", "name": N}``: open (or reuse) worktree N's socket; ``{"socket": PATH}``;
  with ``"build": [HOST, ...]``, N's venv-build socket instead, those index hosts allowed on it;
- ``{"cmd": "watch"}``: attach as a watcher; then ``{"event": "blocked", ...}`` lines follow;
- ``{"cmd": "decide", "host": H, "answer": A[, "worktree": W]}``: release the requests held for H
  (on W's socket only, when given), A one of ``ANSWERS``; ``{"released": N}``;
- ``{"cmd": "stop"}``: stop the proxy.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import ChtopError
from ..core.places import command_for_group, runtime_dir

if TYPE_CHECKING:   # the proxy's server imports asyncio; a client of the control socket need not
    import asyncio

# What a decision tells held requests: "allow-once*" lets them through by itself; after the
# others the requests are judged again by the lists (which the decider has already written).
ANSWERS = ("allow-once", "allow-once-private", "allow-always", "allow-worktree", "allow-for", "deny", "ignore")


def control_socket(group_dir: Path) -> Path:
    return runtime_dir(group_dir) / "control.sock"


def encode(msg: dict) -> bytes:
    return (json.dumps(msg) + "\n").encode()


# -- client side ---------------------------------------------------------------------------------

def request(group_dir: Path, msg: dict, timeout: float = 5.0) -> dict:
    """One request to the running proxy; its reply.  OSError when no proxy listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(control_socket(group_dir)))
        s.sendall(encode(msg))
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionResetError("proxy closed the control connection")
            buf += chunk
    return json.loads(buf)


def attach_watcher(group_dir: Path) -> tuple[socket.socket, dict, bytes]:
    """A control connection attached as a watcher, the proxy's reply (``held``: what it holds now),
    and any bytes already read past that reply."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(control_socket(group_dir)))
    except OSError:
        sock.close()
        raise ChtopError(f"the proxy is not running; start it with `{command_for_group(group_dir)} net.start`",
                         3) from None
    sock.sendall(encode({"cmd": "watch"}))
    buf = b""
    sock.settimeout(10)
    while b"\n" not in buf:            # attached only once the proxy says so
        chunk = sock.recv(65536)
        if not chunk:
            sock.close()
            raise ChtopError("the proxy closed the control connection", 1)
        buf += chunk
    sock.settimeout(None)
    line, rest = buf.split(b"\n", 1)
    reply = json.loads(line)
    if not reply.get("ok"):
        sock.close()
        raise ChtopError(f"the proxy refused the watcher: {line.decode(errors='replace')}", 1)
    return sock, reply, rest


def decide_message(host: str, answer: str, worktree: str | None = None) -> dict:
    if answer not in ANSWERS:
        raise ValueError(f"unknown answer {answer!r}")
    msg = {"cmd": "decide", "host": host, "answer": answer}
    if worktree:
        msg["worktree"] = worktree
    return msg


def decide(sock: socket.socket, host: str, answer: str, worktree: str | None = None) -> None:
    """Send a watcher's answer on its attached connection."""
    sock.sendall(encode(decide_message(host, answer, worktree)))


# -- server side ---------------------------------------------------------------------------------

class ControlService:
    """Serves the control socket for ``proxy`` (an object with ``info()``, ``open_worktree(name)``,
    ``holds`` (a ``Holds``), ``decided(host, worktree, answer) -> released`` and ``stopping``
    (an asyncio.Event))."""

    def __init__(self, proxy):
        self.proxy = proxy

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        watching = False
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                msg: dict = {}
                try:
                    msg = json.loads(line)
                    reply = self.answer(msg, writer)
                except Exception as exc:  # a bad command must not kill the proxy
                    reply = {"ok": False, "error": str(exc)}
                if msg.get("cmd") == "watch" and reply.get("ok"):
                    watching = True
                writer.write(encode(reply))
                await writer.drain()
                if msg.get("cmd") == "stop":
                    self.proxy.stopping.set()
        except (ConnectionError, ValueError):
            pass
        finally:
            if watching:
                self.proxy.holds.drop_watcher(writer)
            writer.close()

    def answer(self, msg: dict, writer) -> dict:
        cmd = msg.get("cmd")
        if cmd == "ping":
            return self.proxy.info()
        if cmd == "status":
            return self.proxy.status()
        if cmd == "worktree" and isinstance(msg.get("build"), list):
            return {"ok": True, "socket": str(self.proxy.open_build(str(msg.get("name")), msg["build"]))}
        if cmd == "worktree":
            return {"ok": True, "socket": str(self.proxy.open_worktree(str(msg.get("name"))))}
        if cmd == "watch":
            self.proxy.holds.add_watcher(writer)
            return {"ok": True, "held": self.proxy.holds.held()}
        if cmd == "decide":
            answer = str(msg.get("answer"))
            if answer not in ANSWERS:
                return {"ok": False, "error": f"unknown answer {answer!r}"}
            worktree = msg.get("worktree")
            released = self.proxy.decided(str(msg.get("host")), None if worktree is None else str(worktree), answer)
            return {"ok": True, "released": released}
        if cmd == "stop":
            return {"ok": True, "pid": self.proxy.info()["pid"]}
        return {"ok": False, "error": f"unknown command {cmd!r}"}
