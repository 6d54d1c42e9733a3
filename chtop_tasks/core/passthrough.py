"""The one pass-through runner: a child attached to the user, and its exit status.

Every sandbox launch (``sbox.run``, ``sbox.shell``, the agents, the GPU
check) ends here, interactive or not.

With a terminal on stdin, the child gets a real pty (pexpect) sized to the
user's terminal, resized on every SIGWINCH, and every keystroke -- Ctrl-C
included -- goes to it (``interact(escape_character=None)``).  Without a
terminal the child runs with our stdio passed straight through, no pty.

Either way the child's exit status is returned: its exit code, or
128+signal when a signal killed it (pexpect's ``exitstatus`` is ``None``
then; that never becomes a silent 0).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

from .errors import CommandFailed
from .runner import echo

DEFAULT_SIZE = (24, 80)


def terminal_size(fd: int) -> tuple[int, int]:
    """(rows, cols) of the terminal on ``fd``; DEFAULT_SIZE when it is not one."""
    try:
        packed = fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
        rows, cols = struct.unpack("HHHH", packed)[:2]
    except OSError:
        return DEFAULT_SIZE
    if rows <= 0 or cols <= 0:
        return DEFAULT_SIZE
    return rows, cols


def status_from(exitstatus: int | None, signalstatus: int | None) -> int:
    """The shell's view of a child's end: its code, or 128+signal."""
    if signalstatus is not None:
        return 128 + signalstatus
    if exitstatus is None:  # neither known: never report success
        return 1
    return exitstatus


def returncode_status(returncode: int) -> int:
    """subprocess's returncode (-N when killed by signal N) as the shell's status."""
    return 128 - returncode if returncode < 0 else returncode


def run_interactive(
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    *,
    stdin_fd: int | None = None,
    pty: bool | None = None,
    quiet: bool = False,
) -> int:
    """Run ``argv`` attached to the user; return its exit status (128+sig if killed).

    ``env`` is the child's complete environment (None: ours).  The pty path
    is taken when stdin is a terminal (``pty=False``: never, e.g. a command
    that must read our stdin as data).  ``quiet``: the caller has already
    said what runs.
    """
    argv = [str(a) for a in argv]
    if not quiet:
        echo(argv, cwd)
    if pty is not False and stdin_is_terminal(stdin_fd):   # our stdin may have no fd (pytest's)
        return _run_pty(argv, env, cwd, sys.stdin.fileno() if stdin_fd is None else stdin_fd)
    return _run_plain(argv, env, cwd)


def stdin_is_terminal(fd: int | None = None) -> bool:
    try:
        return os.isatty(sys.stdin.fileno() if fd is None else fd)
    except (OSError, ValueError):
        return False


def _run_plain(argv, env, cwd) -> int:
    """No terminal: stdio passed through.  Our SIGINT is ignored while the
    child runs (the child, in the same process group, gets it and decides);
    a SIGTERM or SIGHUP sent to us is passed on to it (podman then ends the
    sandbox), so killing chtop never leaves the child running."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd)
        except FileNotFoundError as exc:
            raise CommandFailed(f"{argv[0]}: command not found ({exc})") from exc
        with _ending_signals_passed_to(proc.pid):
            returncode = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
    return returncode_status(returncode)


@contextlib.contextmanager
def _ending_signals_passed_to(pid: int):
    """For the block, a SIGTERM (a kill) or SIGHUP (a closed terminal) sent to us goes to ``pid``
    instead: the child ends, and we live to clean up after it.  os.kill, not a reaping call: the
    wait in the block reaps it."""
    def pass_on(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    saved = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _run_pty(argv, env, cwd, fd) -> int:
    import pexpect

    try:
        child = pexpect.spawn(
            argv[0],
            argv[1:],
            env=env,
            cwd=None if cwd is None else str(cwd),
            dimensions=terminal_size(fd),
            timeout=None,
            encoding=None,
            echo=True,
        )
    except pexpect.ExceptionPexpect as exc:
        raise CommandFailed(f"{argv[0]}: cannot start ({exc})") from exc

    def on_winch(signum, frame):
        # No isalive() here: reaping from a signal handler races interact()'s own waitpid.
        try:
            child.setwinsize(*terminal_size(fd))
        except OSError:
            pass

    old_winch = signal.signal(signal.SIGWINCH, on_winch)
    relayed = False
    try:
        with _ending_signals_passed_to(child.pid):
            # A resize between spawn and here would otherwise be lost.
            child.setwinsize(*terminal_size(fd))
            try:
                child.interact(escape_character=None)
            except OSError:  # our terminal went away: nothing can reach the child any more
                if child.isalive():
                    child.terminate(force=True)
            relayed = True
    finally:
        signal.signal(signal.SIGWINCH, old_winch)
        if not relayed and child.isalive():  # interrupted before the session ran: never orphan it
            child.terminate(force=True)
    _drain(child)
    if child.isalive():
        child.wait()
    child.close()
    return status_from(child.exitstatus, child.signalstatus)


def _drain(child) -> None:
    """Copy what the child wrote just before it exited (interact() stops
    reading as soon as it sees the child dead)."""
    import pexpect

    while True:
        try:
            data = child.read_nonblocking(65536, timeout=0)
        except (pexpect.EOF, pexpect.TIMEOUT, OSError):
            return
        if not data:
            return
        os.write(sys.stdout.fileno(), data)
