"""The session's screen log: written from ``tmux pipe-pane``, read by ``session.log``.

``python -m chtop_tasks.sessions.screenlog PATH``: appends stdin to PATH;
when PATH reaches ``MAX_BYTES`` it becomes ``PATH.1`` (the older one is
dropped), so a session's log never takes more than twice that.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..errors import UsageError
from . import records

MAX_BYTES = 5 * 1024 * 1024
CHUNK = 65536


def append_bounded(path: Path, stream, max_bytes: int = MAX_BYTES) -> None:
    """Copy ``stream`` (binary) to ``path``, rotating to ``path.1`` at ``max_bytes``."""
    out = open(path, "ab", buffering=0)
    os.chmod(path, 0o600)
    size = out.tell()
    try:
        while True:
            data = stream.read1(CHUNK) if hasattr(stream, "read1") else stream.read(CHUNK)
            if not data:
                return
            while data:
                if size >= max_bytes:
                    out.close()
                    os.replace(path, path.with_name(path.name + ".1"))
                    out = open(path, "ab", buffering=0)
                    os.chmod(path, 0o600)
                    size = 0
                part, data = data[: max_bytes - size], data[max_bytes - size:]
                out.write(part)
                size += len(part)
    finally:
        out.close()


_CONTROL = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


def session_log(group_dir: Path, name: str, raw: bool = False) -> bytes:
    """What worktree ``name``'s session showed (the bounded screen log), oldest first;
    terminal control sequences removed unless ``raw``."""
    path = records.log_path(Path(group_dir), name)
    rotated = path.with_name(path.name + ".1")
    if not path.exists() and not rotated.exists():
        raise UsageError(f"no session log for worktree {name} ({path})")
    data = b"".join(p.read_bytes() for p in (rotated, path) if p.exists())
    if raw:
        return data
    text = _CONTROL.sub(b"", data.replace(b"\r\n", b"\n"))
    return text.replace(b"\r", b"\n")



def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m chtop_tasks.sessions.screenlog PATH", file=sys.stderr)
        return 2
    append_bounded(Path(argv[0]), sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
