"""The remote half of the loop for real: a sandbox and an agent session on the second host.

The host is the test's real sshd (tests/ssh_helpers.py), logging in as the second local account,
which runs rootless podman there in a plain ssh login (no logind, no XDG_RUNTIME_DIR: podman and
chtop fall back to their dirs under /tmp, as on a box without a systemd user session).  From this
toplevel: host.add, worktree.create --host, a commit made inside the sandbox there (the host's own
``sbox.run``), git.status here showing it ahead; a session there with a stand-in agent (registered
as data in the account's agents.toml, as tests/test_sessions_standin.py does locally) started,
listed here with its host, attached under a real pty (``ssh -t`` into the host's tmux) and
detached back here, its log read, and stopped.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pexpect
import pytest
from ssh_helpers import remote_podman_works, remote_python, write_login_file
from test_hosts import close_masters, fleet_config, remote_base, sshd  # noqa: F401 - fixtures

pytestmark = [pytest.mark.podman, pytest.mark.slow]

# Prints its argv one [..] each, then keeps its screen changing until it is stopped.
STAND_IN = r"""
printf 'STANDIN-ARGS:'; printf '[%s]' "$@"; echo
i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 1; done
"""
AGENTS_TOML = f"[standin]\ncommand = ['sh', '-c', '''{STAND_IN}''', 'standin']\n"

# inside: the account's own files there (its agents.toml) are not to be seen, CHTOP_SANDBOX is set
INSIDE = ("[ -e /home/chtop-ssh/.config/chtop/agents.toml ] || echo HOST-HOME-HIDDEN; "
          "echo \"SANDBOX=$CHTOP_SANDBOX\"; "
          "cd alpha && echo inside > inside.txt && git add inside.txt && "
          "git commit -q -m 'made in the sandbox on gpu1' && echo COMMITTED")


def wait_listed(g, line: str, timeout: float = 60) -> str:
    """``session.list`` here until it has ``line``; its last output."""
    deadline = time.monotonic() + timeout
    while True:
        out = g.inv(g.toplevel, "session.list").stdout
        if line in out:
            return out
        assert time.monotonic() < deadline, f"session.list never showed {line!r}:\n{out}"
        time.sleep(1)


def attach_and_detach(top: Path) -> tuple[str, int | None]:
    """``inv session.attach --host gpu1 --name dev`` in a real terminal: the agent's screen comes,
    C-b d detaches, and the command returns here.  (What the terminal showed, its exit status.)"""
    child = pexpect.spawn(sys.executable, ["-m", "invoke", "session.attach", "--host", "gpu1", "--name", "dev"],
                          cwd=str(top), env=dict(os.environ, TERM="xterm"), dimensions=(30, 120),
                          encoding="utf-8", codec_errors="replace", timeout=90)
    try:
        child.expect(r"STANDIN-ARGS:\[two words\]\[it's\]")
        child.expect(r"tick \d+")                              # the pane, live
        child.send("\x02d")                                    # tmux's prefix, then detach
        child.expect(pexpect.EOF)
        shown = child.before
    finally:
        child.close(force=True)
    return shown, child.exitstatus


def remote_cleanup(sshd, remote_top: Path, python: Path) -> None:  # noqa: F811 - the fixture's name
    """What the test started there: the session (and its tmux server), the group's containers, its proxy."""
    grouping = remote_top.parent
    sshd.ssh(f"cd {remote_top} && {python} -m invoke session.stop --all --grace 1; "
             f"podman ps -aq --filter label=chtop.group={grouping} | xargs -r podman rm -f -t 0; "
             f"{python} -m invoke net.stop --force", check=False, timeout=120)


def test_a_commit_in_the_hosts_sandbox_and_a_session_there_started_listed_attached_and_stopped_from_here(
        initialized, fleet_config, remote_base):  # noqa: F811 - the fixtures of test_hosts
    g, server = initialized, fleet_config
    top = g.toplevel
    remote_top = remote_base / "grp" / "top"
    python = remote_python()
    remote_podman_works(server)
    agents = write_login_file(server.user, ".config/chtop/agents.toml", AGENTS_TOML)
    try:
        added = g.inv(top, "host.add", "gpu1", server.alias, "--group", str(remote_base / "grp"),
                      "--python", str(python))
        assert "added host gpu1" in added.stdout
        assert "has no podman" not in added.stdout + added.stderr
        g.inv(top, "worktree.create", "--name", "dev", "--host", "gpu1", "--no-venv")

        ran = g.inv(top, "sbox.run", "--host", "gpu1", "--name", "dev", "--", "sh", "-c", INSIDE)
        assert "HOST-HOME-HIDDEN" in ran.stdout and "SANDBOX=dev" in ran.stdout, ran.stdout + ran.stderr
        assert "$ podman run --network=none" in ran.stderr                    # the host's launch, shown here
        assert "COMMITTED" in ran.stdout, ran.stdout + ran.stderr
        assert "$ ssh " in ran.stderr and "sbox.run" in ran.stderr            # echoed, as every command
        made = server.ssh(f"git -C {remote_base}/grp/dev/alpha log -1 --format=%s dev").stdout.strip()
        assert made == "made in the sandbox on gpu1"
        status = g.inv(top, "git.status").stdout
        assert "gpu1:dev/alpha: 1 commit(s) ahead of, 0 behind main" in status, status
        refused = g.inv(top, "sbox.run", "--host", "gpu1", "--", "true", check=False)
        assert refused.returncode == 2 and "needs --name NAME" in refused.stderr

        started = g.inv(top, "session.start", "--host", "gpu1", "--name", "dev", "--agent", "standin",
                        "--", "two words", "it's")
        assert "started dev: standin" in started.stdout, started.stdout + started.stderr
        wait_listed(g, "gpu1             dev              standin  working")
        listed = g.inv(top, "session.list").stdout
        assert not any(line.startswith("local ") for line in listed.splitlines()), listed   # none here

        shown, status_code = attach_and_detach(top)
        assert status_code == 0, shown
        assert "detached" in shown, shown[-2000:]
        wait_listed(g, "gpu1             dev              standin  working")   # still running after detach

        log = g.inv(top, "session.log", "--host", "gpu1", "--name", "dev").stdout
        assert "STANDIN-ARGS:[two words][it's]" in log and "tick " in log, log[-2000:]

        stopped = g.inv(top, "session.stop", "--host", "gpu1", "--name", "dev", "--grace", "5")
        assert "stopped dev (standin)" in stopped.stdout, stopped.stdout + stopped.stderr
        assert "gpu1             dev" not in g.inv(top, "session.list").stdout
        ps = server.ssh(f"cd {remote_top} && {python} -m invoke sbox.ps").stdout
        assert "no sandboxes running" in ps, ps
    finally:
        remote_cleanup(server, remote_top, python)
        agents.unlink(missing_ok=True)
        server.stop()
        close_masters(g, server)
