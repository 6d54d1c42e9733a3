"""The session's screen log: written from ``tmux pipe-pane``, read by ``session.log``.

The stream log holds the bytes the terminal got (a TUI's redraws: only the cells that
changed), so ``session.log`` shows tmux's own rendering of the screen instead when it can.

``python -m chtop_tasks.sessions.screenlog PATH``: appends stdin to PATH;
when PATH reaches ``MAX_BYTES`` it becomes ``PATH.1`` (the older one is
dropped), so a session's log never takes more than twice that.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ..core.errors import UsageError
from . import records, tmux

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


_CURSOR_FORWARD = re.compile(rb"\x1b\[([0-9]{0,3})C")
_CONTROL = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


def readable(data: bytes) -> bytes:
    """Terminal output as plain lines: cursor-forward moves become spaces (TUIs draw the gaps
    between words that way), other control sequences go, carriage returns end lines."""
    data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return _CONTROL.sub(b"", _CURSOR_FORWARD.sub(lambda m: b" " * int(m.group(1) or 1), data))


def session_log(group_dir: Path, name: str, raw: bool = False) -> bytes:
    """What worktree ``name``'s session showed, as text: tmux's rendering of the pane (scrollback
    included) while it runs, else the copy its pane process kept at the last state change or at
    exit, else the stream log made readable.  ``raw``: the bounded stream log's bytes, oldest first."""
    group_dir = Path(group_dir)
    path = records.log_path(group_dir, name)
    rotated = path.with_name(path.name + ".1")
    if not path.exists() and not rotated.exists() and not records.screen_path(group_dir, name).exists():
        from .listing import require_known_worktree

        require_known_worktree(group_dir, name)
    if raw:
        if not path.exists() and not rotated.exists():
            raise UsageError(f"no session log for worktree {name} ({path})")
        return b"".join(p.read_bytes() for p in (rotated, path) if p.exists())
    record = records.load(group_dir, name)
    if record is not None:
        live = tmux.capture_history(Path(record.tmux_socket), record.tmux_session)
        if live is not None:
            return live.encode()
    screen = records.screen_path(group_dir, name)
    if screen.exists():
        return screen.read_bytes()
    if path.exists() or rotated.exists():
        return readable(session_log(group_dir, name, raw=True))
    raise UsageError(f"no session log for worktree {name} ({path})")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m chtop_tasks.sessions.screenlog PATH", file=sys.stderr)
        return 2
    append_bounded(Path(argv[0]), sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
