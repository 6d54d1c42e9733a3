"""The interactive launcher against a real local program under a real pty.

The "user's terminal" is an outer pexpect pty; inside it a small runner
script calls chtop_tasks.core.passthrough.run_interactive on a probe program
that reports its terminal size, its signals and its exit.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import pexpect
import pytest

from chtop_tasks.core.passthrough import run_interactive, status_from

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import fcntl, os, signal, struct, sys, termios

    def size():
        rows, cols = struct.unpack("HHHH", fcntl.ioctl(0, termios.TIOCGWINSZ, b"\\0" * 8))[:2]
        return rows, cols

    if len(sys.argv) > 1:  # non-interactive modes
        print("TTY" if os.isatty(0) else "NO TTY", flush=True)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGTERM)
        sys.exit(int(sys.argv[1]))

    signal.signal(signal.SIGWINCH, lambda *a: print("SIZE %d %d" % size(), flush=True))

    def on_int(*a):
        print("GOT SIGINT", flush=True)
        sys.exit(42)

    signal.signal(signal.SIGINT, on_int)

    def on_hup(*a):
        print("GOT SIGHUP", flush=True)
        sys.exit(43)

    signal.signal(signal.SIGHUP, on_hup)
    print("START %d %d" % size(), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd.startswith("exit "):
            print("BYE", flush=True)
            sys.exit(int(cmd.split()[1]))
        if cmd == "kill":
            os.kill(os.getpid(), signal.SIGTERM)
        print("ECHO " + cmd, flush=True)
    """
)

RUNNER = textwrap.dedent(
    """
    import signal, sys
    from chtop_tasks.core.passthrough import run_interactive
    old = signal.getsignal(signal.SIGWINCH)
    rc = run_interactive([sys.executable, sys.argv[1]])
    print("RESTORED %s" % (signal.getsignal(signal.SIGWINCH) is old), flush=True)
    sys.exit(rc)
    """
)


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


@pytest.fixture
def terminal(tmp_path, probe):
    """Spawn the runner in an outer pty of 30x100, as a user's terminal would."""
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=str(REPO))
    children = []

    def spawn():
        child = pexpect.spawn(
            sys.executable,
            ["-c", RUNNER, str(probe)],
            env=env,
            cwd=str(tmp_path),
            dimensions=(30, 100),
            timeout=60,
            encoding="utf-8",
        )
        children.append(child)
        child.expect("START 30 100")
        return child

    yield spawn
    for child in children:
        if child.isalive():
            child.terminate(force=True)


def finish(child) -> int:
    child.expect("RESTORED True")
    child.expect(pexpect.EOF)
    child.close()
    return status_from(child.exitstatus, child.signalstatus)


def test_window_resize_reaches_child(terminal):
    child = terminal()
    child.setwinsize(40, 120)
    child.expect("SIZE 40 120")
    child.setwinsize(12, 50)
    child.expect("SIZE 12 50")
    child.sendline("exit 0")
    assert finish(child) == 0


def test_keystrokes_and_exit_status(terminal):
    child = terminal()
    child.sendline("hello there")
    child.expect("ECHO hello there")
    child.sendline("exit 7")
    child.expect("BYE")
    assert finish(child) == 7


def test_ctrl_c_goes_to_the_child_not_the_launcher(terminal):
    child = terminal()
    child.sendcontrol("c")
    child.expect("GOT SIGINT")
    assert finish(child) == 42


def test_killed_child_is_128_plus_signal(terminal):
    child = terminal()
    child.sendline("kill")
    assert finish(child) == 128 + signal.SIGTERM


def test_a_hangup_sent_to_the_launcher_ends_the_child_and_the_launcher_goes_on(terminal):
    """A closed terminal: the child gets the SIGHUP, and the launcher lives to clean up after it."""
    child = terminal()
    os.kill(child.pid, signal.SIGHUP)
    child.expect("GOT SIGHUP")
    assert finish(child) == 43


def test_a_sigterm_sent_to_the_launcher_is_passed_on(terminal):
    child = terminal()
    os.kill(child.pid, signal.SIGTERM)
    assert finish(child) == 128 + signal.SIGTERM


def test_no_tty_runs_without_pty(probe, capfd):
    with open(os.devnull) as devnull:
        assert run_interactive([sys.executable, str(probe), "5"], stdin_fd=devnull.fileno()) == 5
        assert "NO TTY" in capfd.readouterr().out
        assert run_interactive([sys.executable, str(probe), "kill"], stdin_fd=devnull.fileno()) == 143


def test_status_from_never_reports_silent_success():
    assert status_from(None, signal.SIGKILL) == 137
    assert status_from(None, None) == 1
    assert status_from(3, None) == 3
