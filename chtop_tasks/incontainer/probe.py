"""A probe run inside a sandbox by `inv demo`: what can it see and reach?

    python3 chtop_tasks/incontainer/probe.py --host-home DIR --toplevel DIR

Standard library only (it runs with whatever python the sandbox has).
Each line says "can" or "cannot" and why; nothing is left behind.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit


def try_read(path: Path) -> str:
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            path.read_bytes()
        return "can"
    except OSError as exc:
        return f"cannot ({exc.strerror})"


def try_write(path: Path) -> str:
    probe = path if not path.is_dir() else path / ".chtop-probe"
    existed = probe.exists()
    try:
        with open(probe, "a"):
            pass
        if not existed:
            probe.unlink()
        return "can"
    except OSError as exc:
        return f"cannot ({exc.strerror})"


def try_connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=3):
            return "can"
    except OSError as exc:
        return f"cannot ({exc.strerror or exc})"


def try_resolve(name: str) -> str:
    try:
        return f"can ({socket.gethostbyname(name)})"
    except OSError as exc:
        return f"cannot ({exc.strerror or exc})"


def proxy_answer(host: str, port: int = 443) -> str:
    url = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if not url:
        return "no proxy configured"
    proxy = urlsplit(url)
    try:
        with socket.create_connection((proxy.hostname, proxy.port), timeout=15) as sock:
            sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            answer = read_answer(sock)
    except OSError as exc:
        return f"proxy unreachable ({exc})"
    return describe_answer(answer)


def read_answer(sock: socket.socket, limit: int = 4096) -> str:
    """The proxy's answer to CONNECT: its head, and the body of a refusal (the proxy closes after one)."""
    data = b""
    while len(data) < limit:
        chunk = sock.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
        if data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data:
            break                   # a tunnel: nothing more comes until we speak
    return data.decode(errors="replace")


# The proxy's own words in a refusal's body (proxy/messages.py).
PROXY_SAYS = "chtop egress proxy: "


def describe_answer(answer: str) -> str:
    """The status line; for a 502 (the domain is allowed, but the proxy could not reach it: a machine
    with no internet, a name that does not resolve), also why, in the proxy's words."""
    lines = answer.splitlines()
    if not lines:
        return "no answer"
    status = lines[0]
    reason = next((line[len(PROXY_SAYS):] for line in lines if line.startswith(PROXY_SAYS)), "")
    if " 502 " in f"{status} " and reason:
        reason = "".join(ch if ch.isprintable() else "?" for ch in reason)
        return f"{status}: allowed, but the proxy could not reach it from this machine ({reason})"
    return status


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host-home", type=Path, required=True)
    parser.add_argument("--toplevel", type=Path, required=True)
    args = parser.parse_args()
    here = Path.cwd()
    checks = [
        (f"read this worktree ({here})", try_read(here / "tasks.py")),
        ("write a file in a repo of this worktree", try_write(next(p for p in here.iterdir()
                                                                   if (p / ".git").is_file()))),
        (f"read the host's {args.host_home}/.ssh", try_read(args.host_home / ".ssh")),
        ("read /etc/shadow", try_read(Path("/etc/shadow"))),
        (f"write the toplevel's {args.toplevel}/tasks.py", try_write(args.toplevel / "tasks.py")),
        ("write this worktree's .git pointer", try_write(here / ".git")),
        ("write this worktree's .envrc", try_write(here / ".envrc")),
        ("connect to 1.1.1.1:443 directly", try_connect("1.1.1.1", 443)),
        ("resolve example.com with DNS", try_resolve("example.com")),
        ("CONNECT api.anthropic.com:443 via the proxy (allowed)", proxy_answer("api.anthropic.com")),
        ("CONNECT github.com:443 via the proxy (not allowed)", proxy_answer("github.com")),
    ]
    width = max(len(what) for what, _ in checks)
    for what, result in checks:
        print(f"  {what:<{width}}  {result}")


if __name__ == "__main__":
    main()
