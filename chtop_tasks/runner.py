"""The one runner for every external command chtop runs for the user.

It echoes what it runs (``$ cmd  (cwd=...)``, so the user can repeat it), takes argv
lists (never shell strings built from input), gives non-interactive work
``stdin=DEVNULL`` and applies timeouts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import CommandFailed
from .term import inert

DEFAULT_TIMEOUT = 600


@dataclass
class Result:
    argv: list[str]
    cwd: Path | None
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error_tail(self, lines: int = 6) -> str:
        text = (self.stderr or self.stdout).strip().splitlines()
        return "\n".join(text[-lines:])


def format_command(argv, cwd=None) -> str:
    line = "$ " + shlex.join(str(a) for a in argv)
    if cwd is not None:
        line += f"  (cwd={cwd})"
    return line


def echo(argv, cwd=None, stream=None) -> None:
    """Print the command we are about to run, to stderr."""
    print(inert(format_command(argv, cwd)), file=stream or sys.stderr, flush=True)


def run(
    argv,
    cwd=None,
    *,
    check: bool = True,
    capture: bool = True,
    quiet: bool = False,
    env: dict | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    stdin=subprocess.DEVNULL,
    input: str | None = None,
) -> Result:
    """Run ``argv``; echo it unless ``quiet``; raise CommandFailed when ``check``.

    With ``capture=False`` the child's output goes straight to our terminal.
    """
    argv = [str(a) for a in argv]
    if not quiet:
        echo(argv, cwd)
    full_env = None
    if env is not None:             # added to ours; a None value removes that variable
        full_env = dict(os.environ)
        for key, value in env.items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=None if input is not None else stdin,
            input=input,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        if cwd is not None and not Path(cwd).is_dir():
            raise CommandFailed(f"cannot run {argv[0]}: its directory {cwd} does not exist") from exc
        raise CommandFailed(f"{argv[0]}: command not found ({exc})") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(f"timed out after {timeout}s: {format_command(argv, cwd)}") from exc
    result = Result(argv, Path(cwd) if cwd else None, proc.returncode, proc.stdout or "", proc.stderr or "")
    if check and not result.ok:
        raise CommandFailed(
            f"command failed (exit {result.returncode}): {format_command(argv, cwd)}\n{result.error_tail()}"
        )
    return result
