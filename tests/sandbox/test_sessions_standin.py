"""Sessions of an agent without hooks (a stand-in registered as data) in the real sandbox and
real tmux: ARGS and the continue flag arrive exactly, the state follows the screen, the exit
status is recorded and shown, the user's notify command runs, stop ends a running one.

Runs as the unprivileged test user with rootless podman (sandbox_helpers).
"""

from __future__ import annotations

import json
import subprocess
import time

import pexpect
import pytest
from conftest import eventually
from sandbox_helpers import as_user, user_group  # noqa: F401

from chtop_tasks.proxy import control

pytestmark = [pytest.mark.podman, pytest.mark.slow]

# Prints its argv one [..] each, asks the proxy for a host it blocks (one approval pending), keeps
# the screen changing for 10 s, stands still for 12 s, exits 5.
STAND_IN = r"""
printf 'STANDIN-ARGS:'; printf '[%s]' "$@"; echo
curl -s -o /dev/null --max-time 10 -w 'proxy=%{http_code}\n' http://blocked.example/
i=0; while [ $i -lt 10 ]; do echo "tick $i"; i=$((i+1)); sleep 1; done
echo STANDIN-QUIET; sleep 12; exit 5
"""
# An agent that cannot reach its API: one error line, exit 1 at once (what claude does then).
DIES_AT_ONCE = r"""echo 'API Error: Failed to connect to api.example.com'; exit 1"""
# One that runs past session.start's first seconds, then fails the same way with status 3.
DIES_LATER = r"""echo STILL-UP; sleep 12; echo 'API Error: connection lost'; exit 3"""
# One that ignores SIGTERM (its children inherit that): only the kill after stop's grace ends it.
IGNORES_TERM = r"""trap '' TERM; echo IGNORING-TERM; while :; do sleep 1; done"""


@pytest.fixture
def g(user_group):  # noqa: F811
    g = user_group
    config = g.home / ".config" / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "agents.toml").write_text(
        f"[standin]\ncommand = ['sh', '-c', '''{STAND_IN}''', 'standin']\ncontinue_args = ['--again']\n"
        f"[dies]\ncommand = ['sh', '-c', '''{DIES_AT_ONCE}''']\n"
        f"[dieslater]\ncommand = ['sh', '-c', '''{DIES_LATER}''']\n"
        f"[stubborn]\ncommand = ['sh', '-c', '''{IGNORES_TERM}''']\n")
    out = g.base / "notified"
    (config / "config.toml").write_text(f'notify = ["sh", "-c", "echo \\"$@\\" >> {out}", "notify"]\n')
    subprocess.run(["chown", "-R", f"{g.user.pw_uid}:{g.user.pw_gid}", str(g.home / ".config")], check=True)
    yield g
    for sock in (g.base / "run").glob("chtop-*/*/tmux.sock"):
        as_user(g.user, ["tmux", "-S", str(sock), "kill-server"], g.env, g.base, check=False)
    listed = as_user(g.user, ["podman", "ps", "-aq", "--filter", f"label=chtop.group={g.grouping}"],
                     g.env, g.base, check=False)
    for ident in listed.stdout.split():
        as_user(g.user, ["podman", "rm", "-f", "-t", "0", ident], g.env, g.base, check=False)
    out.unlink(missing_ok=True)


def row(g):
    proc = g.inv("session.list", "--json")
    assert proc.returncode == 0, proc.stderr
    found = [r for r in json.loads(proc.stdout) if r["worktree"] == "dev"]
    return found[0] if found else None


def wait_notified(g, text: str, failure: str, timeout: float = 20) -> None:
    """Until the notify command (it appends to ``notified``) has written ``text``."""
    notified = g.base / "notified"
    eventually(lambda: text in (notified.read_text() if notified.exists() else ""), failure, timeout, interval=0.5)


def wait_for(g, state, timeout):
    seen = []

    def in_state():
        current = row(g)
        seen.append(current and current["state"])
        return current if current and current["state"] == state else None
    return eventually(in_state, f"dev {state}", timeout, interval=0.5, explain=lambda: f"saw {seen}")


def test_an_agent_without_hooks_goes_working_idle_exited_with_its_status(g):
    proc = g.inv("session.start", "--agent", "standin", "--continue", "--", "two words", "it's", "")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_for(g, "working", 20)
    assert control.session_runs(g.grouping)          # the pane holds the lease: the proxy never idles out
    wait_for(g, "idle", 40)
    done = wait_for(g, "exited", 40)
    assert done["exit_status"] == 5
    eventually(lambda: not control.session_runs(g.grouping),   # the pane has ended: the lease is let go
               "the session lease to end with its pane process", timeout=10)
    assert done["pending"] == 1                      # blocked.example awaits approval for dev
    listed = g.inv("session.list").stdout
    assert "exited (5)" in listed and "1 pending approval(s)" in listed, listed
    log = g.inv("session.log").stdout
    assert "STANDIN-ARGS:[--again][two words][it's][]" in log, log[-2000:]
    assert "tick 9" in log and "STANDIN-QUIET" in log and "proxy=403" in log
    wait_notified(g, "dev exited", "the notify command never ran")
    # an exited session is not running: delete would not be refused for it, attach says so
    attach = g.inv("session.attach")
    assert attach.returncode == 3 and "has exited (5)" in attach.stderr


def start_in_a_terminal_then_close_it(g):
    """``inv session.start`` typed into a login shell's terminal, which is then closed (SIGHUP)."""
    env = dict(g.env, TERM="xterm")
    inv = f"{g.venv}/bin/python -m invoke session.start --agent standin"
    child = pexpect.spawn("runuser", ["-u", g.user.pw_name, "--", "env", "-i",
                                      *[f"{k}={v}" for k, v in env.items()], "bash", "--norc", "-i"],
                          cwd=str(g.dev), encoding="utf-8", codec_errors="replace", timeout=120)
    child.sendline(f"{inv}; echo START-RETURNED-$?")      # the echoed line shows `$?`, not a status
    child.expect("START-RETURNED-0")
    child.close(force=True)                        # the terminal goes away: hangup for its processes


def test_a_session_outlives_its_terminal_and_stop_ends_it_with_sigterm_leaving_nothing(g):
    start_in_a_terminal_then_close_it(g)
    wait_for(g, "working", 20)
    time.sleep(2)                                  # a while in which a hangup would have ended it
    assert row(g)["state"] == "working"            # still running after the terminal closed
    began = time.monotonic()
    stopped = g.inv("session.stop", "--grace", "5")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped dev (standin)" in stopped.stdout
    assert "podman kill --signal TERM" in stopped.stderr
    assert time.monotonic() - began < 30
    assert row(g) is None
    assert "no sandboxes running" in g.inv("sbox.ps").stdout
    wait_notified(g, "dev exited", "the notify command never ran on stop")
    again = g.inv("session.stop")
    assert again.returncode == 2 and "no session for worktree 'dev'" in again.stderr


def test_stop_kills_an_agent_that_ignores_sigterm_once_its_grace_is_over_and_says_so(g):
    started = g.inv("session.start", "--agent", "stubborn")
    assert started.returncode == 0, started.stdout + started.stderr
    began = time.monotonic()
    stopped = g.inv("session.stop", "--grace", "1")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert time.monotonic() - began >= 1
    assert "dev: the agent did not end within 1s of SIGTERM; killing it" in stopped.stderr
    assert "podman rm -f -t 0" in stopped.stderr
    assert "stopped dev (stubborn)" in stopped.stdout
    assert row(g) is None
    assert "no sandboxes running" in g.inv("sbox.ps").stdout


def test_an_agent_that_dies_at_start_fails_session_start_with_its_last_lines_and_attach_says_why(g):
    first = g.inv("session.start", "--agent", "dies")
    assert first.returncode == 1, first.stdout + first.stderr
    assert "started dev" not in first.stdout
    assert "ended" in first.stderr and "exit 1" in first.stderr, first.stderr
    assert "API Error: Failed to connect to api.example.com" in first.stderr, first.stderr
    assert "inv session.log" in first.stderr
    assert row(g)["state"] == "exited"
    attach = g.inv("session.attach")
    assert attach.returncode == 3, attach.stdout + attach.stderr
    assert "has exited (1)" in attach.stderr and "Failed to connect to api.example.com" in attach.stderr
    # how the terminal server runs is said once per group (an earlier test here may have been told)
    second = g.inv("session.start", "--agent", "dies")
    assert second.returncode == 1 and "Failed to connect" in second.stderr
    assert "terminal server" not in second.stdout + second.stderr, second.stdout


def test_attach_to_an_agent_that_then_exits_says_why_and_fails(g):
    started = g.inv("session.start", "--agent", "dieslater")
    assert started.returncode == 0, started.stdout + started.stderr
    env = dict(g.env, TERM="xterm")
    inv = f"{g.venv}/bin/python -m invoke session.attach"
    child = pexpect.spawn("runuser", ["-u", g.user.pw_name, "--", "env", "-i",
                                      *[f"{k}={v}" for k, v in env.items()], "bash", "--norc", "-i"],
                          cwd=str(g.dev), encoding="utf-8", codec_errors="replace", timeout=60,
                          dimensions=(24, 100))
    child.sendline(f"{inv}; echo ATTACH-RETURNED-$?")
    child.expect("STILL-UP")
    child.expect(r"ATTACH-RETURNED-(\d+)")
    status = child.match.group(1)
    shown = child.before
    child.close(force=True)
    assert status == "1", shown
    assert "exited (3)" in shown and "API Error: connection lost" in shown, shown
