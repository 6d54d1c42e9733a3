"""The remote half of the loop for real: a sandbox and an agent session on the second host.

The host is the test's real sshd (tests/ssh_helpers.py), logging in as the second local account,
which runs rootless podman there in a plain ssh login (no logind, no XDG_RUNTIME_DIR: podman and
chtop fall back to their dirs under /tmp, as on a box without a systemd user session).  From this
toplevel: host.add, worktree.create --host, a commit made inside the sandbox there (the host's own
``sbox.run``), git.status here showing it ahead; a session there with a stand-in agent (registered
as data in the account's agents.toml, as tests/sandbox/test_sessions_standin.py does locally) started,
listed here with its host, attached under a real pty (``ssh -t`` into the host's tmux, by
``session.attach --host`` and by ``chtop go --host --agent``) and detached back here, its log
read, and stopped.  Then the dashboard's worktree keys on a host's row: what each acts on (no
processes), a hostile host's diff and messages shown inert, and ``inv dash`` in a real terminal
driving the host's diff, session start, attach, shell, rebase-down plan and stop.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest
from conftest import eventually
from ssh_helpers import remote_podman_works, remote_python, write_login_file
from test_hosts import close_masters, fleet_config, remote_base, sshd  # noqa: F401 - fixtures

from chtop_tasks.core.errors import UsageError
from chtop_tasks.core.places import group_id
from chtop_tasks.dash import actions, remote
from chtop_tasks.hosts import records

# Prints its argv one [..] each, then keeps its screen changing until it is stopped.
STAND_IN = r"""
printf 'STANDIN-ARGS:'; printf '[%s]' "$@"; echo
i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 1; done
"""
# The ssh account's agents: the stand-in by its own name, and as claude (the dashboard's s starts
# the default agent).  Every test here writes the same file and none removes it, so tests running
# at the same time (xdist) never take it from each other; the account is the tests' own.
AGENTS_TOML = (f"[standin]\ncommand = ['sh', '-c', '''{STAND_IN}''', 'standin']\n"
               f"[claude]\ncommand = ['sh', '-c', '''{STAND_IN}''', 'standin', 'from the dash']\n")

# inside: the account's own files there (its agents.toml) are not to be seen, CHTOP_SANDBOX is set
INSIDE = ("[ -e /home/chtop-ssh/.config/chtop/agents.toml ] || echo HOST-HOME-HIDDEN; "
          "echo \"SANDBOX=$CHTOP_SANDBOX\"; "
          "cd alpha && echo inside > inside.txt && git add inside.txt && "
          "git commit -q -m 'made in the sandbox on gpu1' && echo COMMITTED")


def wait_listed(g, line: str, timeout: float = 60) -> str:
    """``session.list`` here until it has ``line``; its last output."""
    def listed():
        return g.inv(g.toplevel, "session.list").stdout

    def showing():
        out = listed()
        return out if line in out else None
    return eventually(showing, f"session.list to show {line!r}", timeout, interval=1, explain=listed)


ATTACH = ["-m", "invoke", "session.attach", "--host", "gpu1", "--name", "dev"]
GO_AGENT = ["-m", "chtop_tasks.cli.chtop", "go", "dev", "--host", "gpu1", "--agent"]


def attach_and_detach(top: Path, args: list[str]) -> tuple[str, int | None]:
    """``python ARGS`` (an attach to gpu1's dev session) in a real terminal: the agent's screen
    comes, C-b d detaches, and the command returns here.  (What the terminal showed, its exit status.)"""
    child = pexpect.spawn(sys.executable, args, cwd=str(top), dimensions=(30, 120), timeout=90,
                          env=dict(os.environ, TERM="xterm", PYTHONPATH=str(top)),
                          encoding="utf-8", codec_errors="replace")
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
    """What the test started there: the session (and its tmux server), the group's containers, its
    proxy, and the group's runtime dir (the account's is /tmp/chtop-UID: it has no XDG_RUNTIME_DIR)."""
    grouping = remote_top.parent
    runtime = f"/tmp/chtop-{sshd.user.pw_uid}/{group_id(grouping)}"
    sshd.ssh(f"cd {remote_top} && {python} -m invoke session.stop --all --grace 1; "
             f"tmux -S {runtime}/tmux.sock kill-server 2>/dev/null; "
             f"podman ps -aq --filter label=chtop.group={grouping} | xargs -r podman rm -f -t 0; "
             f"{python} -m invoke net.stop --force; rm -rf {runtime}", check=False, timeout=120)


@pytest.mark.podman
@pytest.mark.slow
def test_a_commit_in_the_hosts_sandbox_and_a_session_there_started_listed_attached_and_stopped_from_here(
        initialized, fleet_config, remote_base):  # noqa: F811 - the fixtures of test_hosts
    g, server = initialized, fleet_config
    top = g.toplevel
    remote_top = remote_base / "grp" / "top"
    python = remote_python()
    remote_podman_works(server)
    write_login_file(server.user, ".config/chtop/agents.toml", AGENTS_TOML)
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

        for args in (ATTACH, GO_AGENT):               # session.attach --host; chtop go dev --host gpu1 --agent
            shown, status_code = attach_and_detach(top, args)
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
        server.stop()
        close_masters(g, server)


# -- the dashboard's worktree keys on a host's row: what each acts on (no processes) -----------------

HOST = records.Host("gpu1", "gpu1", "ch/top", "python3")


def remote_state(**overrides) -> remote.RemoteState:
    state = remote.RemoteState(HOST, asked=True, worktrees=[{"name": "dev", "root": "/r/dev", "venv": "missing",
                                                             "problem": None, "repos": []}],
                               sessions=[{"worktree": "dev", "agent": "claude", "state": "exited", "since": 1.0,
                                          "exit_status": 0, "pending": 0}])
    for key, value in overrides.items():
        setattr(state, key, value)
    return state


def test_a_hosts_row_names_its_worktree_and_session_and_an_unusable_one_says_why_doing_nothing():
    row = remote.row_of(remote_state(), "dev")
    assert (row.host, row.worktree, row.session["state"]) == (HOST, "dev", "exited")
    assert actions.remote_task_args(row) == ("--host", "gpu1", "--name", "dev")
    with pytest.raises(UsageError, match="no live agent session in gpu1:dev: start one with s"):
        actions.remote_attach_argv(row)                    # an exited session: nothing to attach to
    with pytest.raises(UsageError, match="no live agent session"):
        actions.remote_stop_session(row)
    live = remote.row_of(remote_state(sessions=[dict(remote_state().sessions[0], state="working")]), "dev")
    with pytest.raises(UsageError, match="already has a live session: attach with a"):
        actions.remote_start_session(live)
    for gone in (remote.row_of(remote_state(error="did not answer within 5 s (ssh gpu1: Connection refused)"), ""),
                 remote.row_of(remote_state(), "other")):
        assert gone.worktree == ""
        for act in (actions.remote_attach_argv, actions.remote_shell_argv, actions.remote_task_args,
                    actions.remote_start_session):
            with pytest.raises(UsageError, match="nothing there to act on"):
                act(gone)
        assert actions.remote_diff(gone, False).startswith("host gpu1: ")     # said, not asked


def test_the_last_line_a_hosts_task_said_is_its_message_and_a_failure_an_error():
    from chtop_tasks.core.errors import ChtopError
    from chtop_tasks.core.runner import Result

    row = remote.row_of(remote_state(), "dev")
    said = Result(["ssh"], None, 0, "started dev: claude in tmux session chtop-dev.  Attach: ...\n", "$ tmux new\n")
    assert actions.said_there(row, "session.start", said) == "gpu1: started dev: claude in tmux session " \
                                                             "chtop-dev.  Attach: ..."
    failed = Result(["ssh"], None, 3, "", "$ podman run ...\nerror: no session for worktree dev\n")
    with pytest.raises(ChtopError, match=r"gpu1: session.stop failed \(exit 3\): error: no session for worktree dev"):
        actions.said_there(row, "session.stop", failed)


# -- a hostile host's diff and session answers, shown inert (its chtop a stand-in, the real sshd) -----

HOSTILE_CHTOP = """#!/bin/sh
# the host's chtop, as one of its agents could have rewritten it
case "$*" in
  *worktree.list*) cat "{dir}/worktrees.json" ;;
  *session.list*) cat "{dir}/sessions.json" ;;
  *net.pending*) cat "{dir}/pending.json" ;;
  *git.diff*) echo "$@" >> "{dir}/asked.txt"; printf 'diff \\033]2;pwned\\007 [bold]loud[/bold]\\033[2J\\nsecond line\\n' ;;
  *session.start*) echo "$@" >> "{dir}/asked.txt"; printf 'started \\033]52;c;cm0gLXJm\\007[red]x[/red]\\n' ;;
  *net.hold*) sleep 5; exit 3 ;;
  *) exit 2 ;;
esac
"""


def test_a_hosts_diff_and_session_start_answers_reach_the_dash_inert(initialized, fleet_config, remote_base):  # noqa: F811

    from test_dash import wait_for
    from test_dash_hosts import StandinHost, run_app

    from chtop_tasks.dash.app import DashApp

    gpu1 = StandinHost(fleet_config, remote_base)
    script = remote_base / "standin-python"
    script.write_text(HOSTILE_CHTOP.replace("{dir}", str(remote_base)))
    (remote_base / "dev").mkdir()                           # the worktree's dir there: its tasks run in it
    gpu1.answer()                                           # owned by the account again
    asked = remote_base / "asked.txt"

    async def scenario(app: DashApp, pilot):
        diff = app.query_one("#diff")
        await wait_for(pilot, lambda: "pwned" in str(diff.render()), what="gpu1's diff")
        shown = diff.render()
        assert "\x1b" not in str(shown) and "diff ^[]2;pwned^G [bold]loud[/bold]^[[2J\nsecond line" in str(shown)
        assert not shown.spans                                  # Text, never parsed as markup
        await pilot.press("f")
        await wait_for(pilot, lambda: asked.exists() and len(asked.read_text().splitlines()) == 2,
                       what="the full diff asked")
        await pilot.press("s")
        await wait_for(pilot, lambda: "started" in app.message, what="the start's message")
        shown = app.query_one("#message").render()
        assert str(shown) == "gpu1: started ^[]52;c;cm0gLXJm^G[red]x[/red]" and not shown.spans, str(shown)

    try:
        run_app(initialized, [gpu1.host], scenario)
    finally:
        close_masters(None, fleet_config)
    lines = asked.read_text().splitlines()
    dev = f"--search-root {remote_base}/dev"
    assert lines == [f"-m invoke {dev} git.diff --integration -- --stat", f"-m invoke {dev} git.diff --integration",
                     f"-m invoke {dev} session.start --agent claude"], lines


# -- the dashboard's worktree keys on a host's row, in a real terminal ------------------------------

@pytest.mark.podman
@pytest.mark.slow
def test_the_dash_keys_on_a_hosts_row_diff_start_attach_shell_rebase_and_stop_there(
        initialized, fleet_config, remote_base, tmp_path):  # noqa: F811 - the fixtures of test_hosts
    """``inv dash`` in a real terminal (tmux) with gpu1 recorded: on gpu1's row the diff pane shows
    the host's own diff, s starts a session there (its default agent: a stand-in registered there
    as claude), a attaches to it over ssh -t with the dashboard suspended and C-b d comes back, h
    is a shell in the worktree there, r shows the host's rebase-down plan, x stops the session."""
    from test_dash_tmux import Tmux

    g, server = initialized, fleet_config
    top = g.toplevel
    remote_top, remote_dev = remote_base / "grp" / "top", remote_base / "grp" / "dev"
    python = remote_python()
    remote_podman_works(server)
    write_login_file(server.user, ".config/chtop/agents.toml", AGENTS_TOML)
    tmux = None
    try:
        g.inv(top, "host.add", "gpu1", server.alias, "--group", str(remote_base / "grp"), "--python", str(python))
        g.inv(top, "worktree.create", "--name", "dev", "--host", "gpu1", "--no-venv")
        server.ssh(f"cd {remote_dev}/alpha && echo made-remotely > remote.txt && git add remote.txt && "
                   "git commit -q -m 'made on gpu1'")
        tmux = Tmux(tmp_path, top, f"env TERM=xterm-256color {sys.executable} -m invoke dash --interval 0.5; "
                                   "sleep 600")
        screen = tmux.wait(lambda s: "+1/-0" in gpu1_row(s), "gpu1's row")   # the only row: selected
        assert " dev " in gpu1_row(screen), screen
        tmux.wait(lambda s: "diff of gpu1:dev" in s and "remote.txt" in s, "the host's diff (stat)")
        tmux.keys("f")
        tmux.wait_text("+made-remotely")                                        # the full diff, from there

        tmux.keys("s")
        tmux.wait(lambda s: "working" in gpu1_row(s), "gpu1's session working", timeout=90)
        assert sessions_there(server, remote_top, python) == ["dev claude"]

        tmux.keys("a")                                 # the dashboard steps aside: the host's tmux
        tmux.wait_text("STANDIN-ARGS:[from the dash]")
        tmux.wait(lambda s: "tick " in s, "the agent's pane, live")
        tmux.keys("C-b", "d")                          # to the inner (the host's) tmux: detach
        screen = tmux.wait(lambda s: "working" in gpu1_row(s) and "attach gpu1:dev: exit 0" in s, "the dashboard, back")
        assert "STANDIN-ARGS" not in screen

        tmux.keys("h")                                 # chtop go dev --host gpu1: a shell there
        tmux.wait(lambda s: not gpu1_row(s), "the shell", timeout=60)
        tmux.keys("pwd; echo SHELL-ON-$(id -un)", "Enter")
        tmux.wait_text(f"{remote_dev}")
        tmux.wait_text("SHELL-ON-chtop-ssh")
        tmux.keys("exit", "Enter")
        tmux.wait_text("press Enter to return to the dashboard")
        tmux.keys("Enter")
        tmux.wait(lambda s: "working" in gpu1_row(s), "the dashboard, back from the shell")

        tmux.keys("r")                                 # the host's own rebase-down plan, for confirmation
        screen = tmux.wait_text("git.rebase-down --host gpu1 --name dev --dry-run")
        tmux.keys("n")
        tmux.wait_text("git.rebase-down in gpu1:dev: not run")

        tmux.keys("x")
        tmux.wait(lambda s: "gpu1: stopped dev (claude)" in s, "the stop's message", timeout=90)
        tmux.wait(lambda s: "working" not in gpu1_row(s), "gpu1's row without a session")
        assert sessions_there(server, remote_top, python) == []
    finally:
        if tmux is not None:
            tmux.close()
        remote_cleanup(server, remote_top, python)
        server.stop()
        close_masters(g, server)


def gpu1_row(screen: str) -> str:
    """The worktree table's row of gpu1's dev (``gpu1  dev  ...``), or ""."""
    return next((line for line in screen.splitlines() if line.replace("\u258a", " ").split()[:2] == ["gpu1", "dev"]),
                "")


def sessions_there(server, remote_top: Path, python: Path) -> list[str]:
    """The host's own session.list --json, as ``worktree agent`` words."""
    import json

    out = server.ssh(f"cd {remote_top} && {python} -m invoke session.list --json").stdout
    return [f"{s['worktree']} {s['agent']}" for s in json.loads(out)]
