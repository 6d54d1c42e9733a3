"""A worktree answers to its name alone, here or on its host; a host that does not answer is said.

The resolver (``hosts.where.locate``) is checked on the records alone; the rest runs the real
loop through the test's sshd (tests/ssh_helpers.py) with chtop installed there by ``host.add``:
from the toplevel, a user who never types ``--host`` after ``worktree.create --host`` works on,
lands, lists and deletes the worktree there; then the host's sshd is stopped, and every listing
still shows this machine's rows and names the host within the bound.  A host that accepts the
connection and never speaks SSH (a plain listening socket) is named within the bound too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git
from ssh_helpers import remote_python
from test_hosts import close_masters, fleet_config, remote_base, sshd  # noqa: F401 - fixtures

from chtop_tasks.core.errors import UsageError
from chtop_tasks.hosts import records
from chtop_tasks.hosts.where import Nowhere, locate
from chtop_tasks.workspace.layout import find_workspace


def record(name: str, *worktrees: str) -> records.Host:
    host = records.Host(name, f"{name}.invalid", "ch/top", "python3")
    records.record_host(host)
    records.record_worktrees(name, worktrees)
    return host


# -- the resolver, on the records ------------------------------------------------------------------

def test_a_name_is_found_here_or_on_the_host_recorded_for_it(initialized):
    g = initialized
    g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    gpu1 = record("gpu1", "rdev")
    ws = find_workspace(g.toplevel)
    here = locate(ws, "dev")
    assert not here.remote and here.root == g.path("dev")
    there = locate(ws, "rdev")
    assert there.remote and there.host == gpu1 and there.name == "rdev"
    assert locate(ws, "rdev", "gpu1").host == gpu1                  # --host that agrees with the record
    assert locate(ws, "dev", "local").root == g.path("dev")


def test_a_name_in_two_places_or_a_host_that_disagrees_is_refused_naming_both(initialized):
    g = initialized
    g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    record("gpu1", "dev", "rdev")
    record("gpu2", "rdev")
    ws = find_workspace(g.toplevel)
    with pytest.raises(UsageError, match=r"worktree dev is in 2 places: here \(.*/dev\); on host gpu1 "
                                         r"\(gpu1.invalid\); say which with --host local or --host gpu1"):
        locate(ws, "dev")
    with pytest.raises(UsageError, match="worktree rdev is in 2 places: on host gpu1 .*; on host gpu2"):
        locate(ws, "rdev")
    record("gpu3")
    with pytest.raises(UsageError, match="worktree rdev is recorded on host gpu1, gpu2, not on gpu3"):
        locate(ws, "rdev", "gpu3")
    assert locate(ws, "rdev", "gpu2").host.name == "gpu2"          # --host picks one of the two


def test_an_unknown_name_says_what_there_is_and_the_closest_name_here_or_there(initialized):
    g = initialized
    g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    records.record_host(records.Host("gpu1", "gpu1.invalid", "ch/top", "python3"))   # asked: no such host
    records.record_worktrees("gpu1", ["rdev"])
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop" / "config.toml"
    config.write_text("host_timeout = 3\n")
    ws = find_workspace(g.toplevel)
    with pytest.raises(Nowhere) as caught:
        locate(ws, "rdve")
    said = str(caught.value)
    assert "(worktrees: dev, gpu1:rdev); did you mean 'rdev' (gpu1:rdev)?" in said and "no worktree 'rdve' in " in said
    assert "gpu1: did not answer within 3 s (ssh gpu1.invalid: " in said          # asked, and said so
    assert "inv worktree.create --name rdve" in said
    refused = g.inv(g.toplevel, "git.merge-up", "--name", "rdve", check=False)
    assert refused.returncode == 2 and "did you mean 'rdev'" in refused.stderr, refused


def test_hosts_toml_keeps_its_worktree_records_across_host_writes(initialized):
    record("gpu1", "rdev", "b")
    record("gpu2")
    assert records.recorded_worktrees() == {"gpu1": ["b", "rdev"], "gpu2": []}
    records.record_worktree("gpu1", "b", present=False)
    records.forget_host("gpu2")
    assert records.recorded_worktrees() == {"gpu1": ["rdev"]}
    assert list(records.load_hosts()) == ["gpu1"]


def names_silent(said, host: str, words: str) -> bool:
    """One line of the output names ``host`` and says ``words`` (``gpu1: did not answer ...`` on
    stderr, or host.list's row of the host)."""
    return any(line.removeprefix("warning: ").startswith(host) and words in line for line in (said.stderr + said.stdout).splitlines())


# -- the real loop: a name alone, from the toplevel ------------------------------------------------

def add_gpu1(g, server, base: Path) -> Path:
    added = g.inv(g.toplevel, "host.add", "gpu1", server.alias, "--group", str(base / "grp"),
                  "--python", str(remote_python()))
    assert "added host gpu1" in added.stdout
    return base / "grp"


@pytest.mark.slow
def test_a_remote_worktree_by_its_name_alone_worked_on_landed_listed_and_deleted_and_a_stopped_host_is_said(
        initialized, fleet_config, remote_base):  # noqa: F811 - the fixtures of test_hosts
    g, server = initialized, fleet_config
    top = g.toplevel
    try:
        there = add_gpu1(g, server, remote_base)
        g.inv(top, "worktree.create", "--name", "rdev", "--host", "gpu1", "--no-venv")
        assert records.recorded_worktrees()["gpu1"] == ["rdev"]
        refused = g.inv(top, "worktree.create", "--name", "rdev", "--no-venv", check=False)
        assert refused.returncode == 3 and "worktree rdev is already on host gpu1" in refused.stderr, refused
        assert not (g.grouping / "rdev").exists()
        server.ssh(f"cd {there}/rdev/alpha && echo remote > remote.txt && git add remote.txt && "
                 "git commit -q -m 'made on gpu1'")

        status = g.inv(top, "git.status", "--name", "rdev")
        assert "$ ssh " in status.stderr and "rdev" in status.stdout, status       # the host's own git.status
        diff = g.inv(top, "git.diff", "--integration", "--name", "rdev").stdout
        assert "+remote" in diff and "remote.txt" in diff
        rebase = g.inv(top, "git.rebase-down", "--name", "rdev", "--dry-run")
        assert "$ ssh " in rebase.stderr and "git.rebase-down --dry-run" in rebase.stderr, rebase
        wrong = g.inv(top, "git.diff", "--name", "rdev", "--host", "nohost", check=False)
        assert wrong.returncode == 2 and "no host 'nohost'" in wrong.stderr

        no_log = g.inv(top, "session.log", "--name", "rdev", check=False)       # asked there: its own answer
        assert no_log.returncode == 2 and f"no session log for worktree rdev ({there}/.chtop/" in no_log.stderr, no_log
        no_session = g.inv(top, "session.stop", "--name", "rdev", check=False)
        assert no_session.returncode != 0 and "$ ssh " in no_session.stderr, no_session
        assert "session.stop --name rdev" in no_session.stderr and "no session" in no_session.stderr, no_session
        no_session = g.inv(top, "session.attach", "--name", "rdev", check=False)
        assert no_session.returncode == 3 and "no session for worktree rdev" in no_session.stderr, no_session
        dry = g.inv(top, "sbox.run", "--name", "rdev", "--dry-run", "--", "true")
        assert "podman" in dry.stdout and f"{there}/rdev" in dry.stdout, dry

        went = subprocess.run([sys.executable, "-m", "chtop_tasks.cli.chtop", "go", "rdev"], cwd=top, input="pwd\n",
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(top)))
        assert went.returncode == 0 and went.stdout.splitlines()[-1] == f"{there}/rdev", went
        printed = subprocess.run([sys.executable, "-m", "chtop_tasks.cli.chtop", "go", "--print-dir", "rdev"], cwd=top,
                                 capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(top)))
        assert printed.stdout == "--host=gpu1\n", printed                # the shell function goes there

        kept = g.inv(top, "worktree.delete", "--name", "rdev", check=False)
        assert kept.returncode == 3 and "not merged" in kept.stderr + kept.stdout, kept   # only there: refused
        assert server.ssh(f"test -d {there}/rdev").returncode == 0

        remote_tip = server.ssh(f"git -C {there}/rdev/alpha rev-parse HEAD").stdout.strip()
        landed = g.inv(top, "git.merge-up", "--name", "rdev")
        assert git(top / "alpha", "rev-parse", "main") == remote_tip, landed

        listing = g.inv(top, "worktree.list")
        assert "gpu1:rdev" in listing.stdout and listing.returncode == 0
        g.inv(top, "worktree.delete", "--name", "rdev", "--force")
        assert server.ssh(f"test -e {there}/rdev", check=False).returncode == 1
        assert "rdev" not in records.recorded_worktrees().get("gpu1", [])

        g.inv(top, "worktree.create", "--name", "dev", "--no-venv")   # this machine's rows, which stay
        server.stop()                                                  # sshd stopped mid-session
        for task in ("session.list", "worktree.list", "git.status", "host.list"):
            started = time.monotonic()
            said = g.inv(top, task, check=False, timeout=120)
            took = time.monotonic() - started
            assert said.returncode == 1, (task, said)
            assert names_silent(said, "gpu1", "did not answer within 20 s (ssh gpu1: "), (task, said)
            assert took < 60, f"{task} took {took:.0f}s against a stopped host"
            if task == "worktree.list":
                assert "dev" in said.stdout and "gpu1:" not in said.stdout, said
    finally:
        server.stop()
        close_masters(g, server)


# -- a host that accepts the connection and never speaks ---------------------------------------------

def test_a_host_that_accepts_and_never_speaks_is_named_within_the_bound_and_the_rest_still_listed(
        initialized, tmp_path):
    g = initialized
    g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)                        # the kernel accepts; nobody ever reads or writes
    port = silent.getsockname()[1]
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host mute\n  HostName 127.0.0.1\n  Port {port}\n  User nobody\n"
                          f"  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n")
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f'ssh_config = "{ssh_config}"\nhost_timeout = 3\n')
    records.record_host(records.Host("gpu2", "mute", "ch/top", "python3"))
    try:
        for task in ("worktree.list", "session.list", "git.status", "host.list"):
            started = time.monotonic()
            said = g.inv(g.toplevel, task, check=False, timeout=120)
            took = time.monotonic() - started
            assert said.returncode == 1, (task, said)
            assert names_silent(said, "gpu2", "did not answer within 3 s (ssh mute: "), (task, said)
            assert took < 3 + 10, f"{task} took {took:.0f}s against a host that never speaks"
        assert "dev" in g.inv(g.toplevel, "worktree.list", check=False).stdout
    finally:
        silent.close()
