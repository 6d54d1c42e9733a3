"""The terminal server: one tmux server per group, one tmux session per worktree.

The server listens on ``<runtime dir>/tmux.sock`` (``-S``: a private socket
in the group's 0700 runtime dir, never the user's default server).  Each
worktree's session is named ``chtop-<worktree>``; it has one pane, whose
process is the pane process (``python -m chtop_tasks.sessions.pane``) that
runs the agent's sandbox on the pane's terminal.

These functions build argv lists (plans) or run tmux through the runner.
"""

from __future__ import annotations

import os
import shutil
from hashlib import sha256
from pathlib import Path

from ..core import runner
from ..core.errors import CommandFailed
from ..core.places import group_id, runtime_dir

SOCKET_NAME = "tmux.sock"
SESSION_PREFIX = "chtop-"
DEFAULT_SIZE = (200, 50)        # columns, rows of a detached session before a client attaches


def socket_path(group_dir: Path, create: bool = False) -> Path:
    return runtime_dir(group_dir, create=create) / SOCKET_NAME


def session_name(worktree: str) -> str:
    """``chtop-<worktree>``; tmux turns '.' into '_', so a name with '.' gets a hash suffix."""
    if "." not in worktree:
        return SESSION_PREFIX + worktree
    digest = sha256(worktree.encode()).hexdigest()[:6]
    return f"{SESSION_PREFIX}{worktree.replace('.', '_')}-{digest}"


def tmux_binary() -> str:
    path = shutil.which("tmux")
    if path is None:
        raise CommandFailed("tmux is not installed (apt-get install tmux)")
    return path


def base_argv(socket: Path) -> list[str]:
    return [tmux_binary(), "-S", str(socket)]


def exact(session: str) -> str:
    """A session target that matches exactly this session name (no prefix or pattern matching)."""
    return f"={session}"


def pane_of(session: str) -> str:
    """A window or pane target: the current (only) pane of exactly this session."""
    return f"={session}:"


def new_session_argv(socket: Path, session: str, cwd: Path, command: list[str], log_command: list[str],
                     size: tuple[int, int] = DEFAULT_SIZE) -> list[str]:
    """One tmux call: the detached session running ``command``, its screen piped to
    ``log_command`` from the first byte (tmux runs the chained commands before it reads the pane)."""
    return [*base_argv(socket), "new-session", "-d", "-s", session, "-c", str(cwd),
            "-x", str(size[0]), "-y", str(size[1]), shell_command(command),
            ";", "set-option", "-w", "-t", pane_of(session), "remain-on-exit", "off",
            ";", "pipe-pane", "-o", "-t", pane_of(session), shell_command(log_command)]


def shell_command(argv: list[str]) -> str:
    """tmux runs a command string with ``sh -c``: quote every word, so argv arrives exactly."""
    import shlex

    return shlex.join(str(a) for a in argv)


def run_tmux(socket: Path, *args: str, check: bool = False, quiet: bool = True, timeout: float = 20):
    return runner.run([*base_argv(socket), *args], check=check, quiet=quiet, timeout=timeout)


def server_running(socket: Path) -> bool:
    if not socket.exists():
        return False
    return run_tmux(socket, "list-sessions", "-F", "#{session_name}").ok


def has_session(socket: Path, session: str) -> bool:
    if not socket.exists():
        return False
    return run_tmux(socket, "has-session", "-t", exact(session)).ok


def capture_pane(socket: Path, session: str) -> str | None:
    result = run_tmux(socket, "capture-pane", "-p", "-t", pane_of(session))
    return result.stdout if result.ok else None


def capture_history(socket: Path, session: str) -> str | None:
    """The pane's scrollback and screen as tmux renders them: plain text, wrapped lines joined."""
    result = run_tmux(socket, "capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", pane_of(session))
    return result.stdout if result.ok else None


def clients(socket: Path) -> list[str]:
    """Every client attached to this group's server (any of its sessions)."""
    result = run_tmux(socket, "list-clients", "-F", "#{client_name}")
    return [line for line in result.stdout.splitlines() if line.strip()] if result.ok else []


def display_message(socket: Path, client: str, message: str) -> None:
    run_tmux(socket, "display-message", "-c", client, "-d", "5000", message)


def kill_session(socket: Path, session: str, quiet: bool = False) -> None:
    run_tmux(socket, "kill-session", "-t", exact(session), quiet=quiet)


def attach_argv(socket: Path, session: str, env: dict | None = None) -> list[str]:
    """The command that puts this terminal on ``session``.

    Inside a client of the same server (``$TMUX`` names our socket) the client switches to the
    session; inside another tmux the attach runs with ``TMUX`` unset, so tmux agrees to nest
    (the inner session's prefix is then ``C-b C-b``).
    """
    env = os.environ if env is None else env
    outer = env.get("TMUX", "")
    if outer:
        outer_socket = outer.split(",")[0]
        if _same_path(outer_socket, socket):
            return [*base_argv(socket), "switch-client", "-t", exact(session)]
        return ["env", "-u", "TMUX", *base_argv(socket), "attach-session", "-t", exact(session)]
    return [*base_argv(socket), "attach-session", "-t", exact(session)]


def _same_path(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def scope_prefix(group_dir: Path) -> tuple[list[str], str]:
    """How a new server is started so that it survives the login that starts it.

    With a systemd user manager, in a scope of its own (``systemd-run --user --scope``): logind's
    KillUserProcesses then does not end it with the login session.  Without one, tmux daemonises
    on its own (it leaves the login's process group; Debian's default KillUserProcesses=no keeps it).
    Returns (argv prefix, what to tell the user).
    """
    systemd_run = shutil.which("systemd-run")
    if systemd_run and user_manager_running():
        unit = f"chtop-tmux-{group_id(group_dir)}-{os.getpid()}"
        return ([systemd_run, "--user", "--scope", "--quiet", "--collect", f"--unit={unit}"],
                f"the terminal server runs in its own systemd user scope ({unit}.scope), outside this login")
    return [], ("the terminal server daemonises on its own (no systemd user manager here); "
                "it outlives this terminal, and a logout too unless logind's KillUserProcesses=yes")


def user_manager_running() -> bool:
    if not os.environ.get("XDG_RUNTIME_DIR") or not Path(os.environ["XDG_RUNTIME_DIR"], "systemd", "private").exists():
        return False
    result = runner.run(["systemctl", "--user", "is-system-running"], check=False, quiet=True, timeout=10)
    return result.stdout.strip() in ("running", "degraded", "starting")
