"""Telling the user that a session waits for them or has exited.

- a message on every client attached to the group's terminal server, and a
  bell in the session's own pane (tmux rings the attached terminal);
- the user's own command, if ``notify`` is set in ``<chtop config dir>/config.toml``
  (e.g. ``notify = ["notify-send", "chtop"]``), run on the host with the
  worktree and the state appended.  That file is the user's, outside every
  sandbox; nothing an agent writes decides what runs.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ..core import runner
from ..core.errors import PolicyError
from ..core.places import user_config_dir
from . import tmux

CONFIG_NAME = "config.toml"
NOTIFY_STATES = ("waiting", "exited")
NOTIFY_TIMEOUT = 30


def config_path() -> Path:
    return user_config_dir() / CONFIG_NAME


def notify_command(path: Path | None = None) -> list[str]:
    """The ``notify`` argv from the user's config ([] when unset); PolicyError when malformed."""
    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: {exc}") from exc
    value = data.get("notify", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f'{path}: notify must be a list of non-empty strings, e.g. notify = ["notify-send"]')
    return list(value)


def message(worktree: str, state: str, exit_status: int | None = None) -> str:
    if state == "exited":
        return f"chtop: {worktree}'s agent exited ({exit_status})"
    return f"chtop: {worktree}'s agent is {state} for you  (inv session.attach --name {worktree})"


def notify(socket: Path, worktree: str, state: str, exit_status: int | None = None,
           pane_fd: int | None = None) -> threading.Thread | None:
    """Every way of telling the user about ``state``; never raises (a notification is best effort).
    Returns the thread running the user's command, if any (join it before exiting)."""
    text = message(worktree, state, exit_status)
    for client in tmux.clients(socket):
        tmux.display_message(socket, client, text)
    if pane_fd is not None:
        try:
            os.write(pane_fd, b"\a")
        except OSError:
            pass
    try:
        argv = notify_command()
    except PolicyError as exc:
        print(f"chtop: notify: {exc}", file=sys.stderr, flush=True)
        return None
    if not argv:
        return None
    thread = threading.Thread(target=_run_user_command, args=([*argv, worktree, state],), daemon=True)
    thread.start()
    return thread


def _run_user_command(argv: list[str]) -> None:
    try:
        runner.run(argv, check=False, quiet=True, timeout=NOTIFY_TIMEOUT)
    except Exception:   # noqa: BLE001 - the user's command failing must not end the session
        pass
