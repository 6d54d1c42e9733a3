"""A venv build's whole output, one log file per build, and the line of it that names the cause.

Every step's command, exit status and whole output go to
``<group>/.chtop/logs/venv-<checkout>-<UTC time>.log`` (a new file, never written through a
link); a failure prints that path and lifts the first error line (``ModuleNotFoundError: ...``,
a compiler's ``error: ...``) out of the step's output into its summary, which pip's closing
boilerplate (``metadata-generation-failed``) otherwise hides 30 lines below it.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from ..core.places import ensure_private_dir

# A Python exception line (the build's own traceback), then a compiler's or a tool's error line.
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit):")
_ERROR = re.compile(r"(?:^|[\s:])(?:error|fatal error|fatal|ERROR)(?:\[\w+\])?:\s")
# pip's and uv's generic lines: they say that something failed, not what.
_GENERIC = ("subprocess-exited-with-error", "metadata-generation-failed", "Failed to build",
            "failed-wheel-build-for-install", "See above for output", "Could not build wheels")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def visible(text: str) -> str:
    """``text`` with its control characters (a build's output is the repos' to choose) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def first_error_line(text: str) -> str | None:
    """The first line of ``text`` that names a cause: an exception line, else an error line that
    is not one of pip's generic ones; None when there is none."""
    lines = [ln.strip(" │╰─>") for ln in text.splitlines()]
    for pattern in (_EXCEPTION, _ERROR):
        for line in lines:
            if pattern.search(line) and not any(g in line for g in _GENERIC):
                return visible(line[:300])
    return None


def log_path(log_dir: Path, checkout: str, now: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return Path(log_dir) / f"venv-{checkout}-{stamp}.log"


class BuildLog:
    """One build's log file, appended to step by step (steps of a batch run in threads)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def create(cls, log_dir: Path, checkout: str) -> "BuildLog":
        """A new log file in ``log_dir`` (made 0700 if missing; refused when not this user's dir)."""
        log_dir = Path(log_dir)
        log_dir.parent.mkdir(parents=True, exist_ok=True)
        ensure_private_dir(log_dir)
        path = log_path(log_dir, checkout)
        for n in range(1, 100):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                break
            except FileExistsError:
                path = path.with_name(f"{path.stem.split('.')[0]}.{n}.log")
        else:  # pragma: no cover - a hundred builds of one checkout in one second
            raise FileExistsError(path)
        os.close(fd)
        return cls(path)

    def write(self, text: str) -> None:
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.write(fd, text.encode("utf-8", errors="replace"))
            finally:
                os.close(fd)

    def record(self, command: str, returncode: int | None, stdout: str = "", stderr: str = "") -> None:
        """One step: its command line, its exit status, and all it printed."""
        status = "not run to the end" if returncode is None else f"exit {returncode}"
        parts = [f"{command}\n# {status}\n"]
        if stdout:
            parts.append("# stdout:\n" + stdout.rstrip("\n") + "\n")
        if stderr:
            parts.append("# stderr:\n" + stderr.rstrip("\n") + "\n")
        self.write("".join(parts) + "\n")
