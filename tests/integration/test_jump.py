"""`chtop go NAME` in a real bash with `chtop shell-init bash` sourced."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from conftest import REPO_ROOT

from chtop_tasks.dash import sessions_adapter

INIT = 'eval "$(chtop shell-init bash)"'


@pytest.fixture
def chtop_bin(tmp_path) -> Path:
    """A `chtop` on PATH that runs this checkout's console script."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "chtop"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={REPO_ROOT} exec {sys.executable} -m chtop_tasks.cli.chtop "$@"\n')
    script.chmod(0o755)
    return bindir


def bash(cwd: Path, chtop_bin: Path, script: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{chtop_bin}:{os.environ['PATH']}")
    return subprocess.run(["bash", "--norc", "--noprofile", "-c", f"{INIT}\n{script}"], cwd=cwd, env=env,
                          stdin=stdin, capture_output=True, text=True, timeout=120)


def test_go_cds_into_a_worktree_of_the_current_group(with_dev, chtop_bin):
    g = with_dev
    r = bash(g.path("dev", "alpha"), chtop_bin, "chtop go dev && pwd && type chtop | head -1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str(g.path("dev"))
    assert "chtop is a function" in r.stdout
    # everything else passes through to the real command
    r = bash(g.toplevel, chtop_bin, "chtop --list")
    assert r.returncode == 0 and "worktree.create" in r.stdout


def test_go_uses_the_group_named_in_the_user_config(with_dev, chtop_bin, tmp_path, hermetic):
    g = with_dev
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = bash(elsewhere, chtop_bin, "chtop go dev")
    assert r.returncode == 2 and "no group in" in r.stderr
    config = hermetic / ".config" / "chtop" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'group = "{g.grouping}"\n')
    r = bash(elsewhere, chtop_bin, "chtop go dev && pwd")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(g.path("dev"))


def test_go_to_a_missing_worktree_without_a_terminal_creates_nothing(with_dev, chtop_bin):
    g = with_dev
    r = bash(g.toplevel, chtop_bin, "chtop go nope; echo rc=$?; pwd")
    assert "rc=2" in r.stdout
    assert r.stdout.strip().endswith(str(g.toplevel))                   # stayed where it was
    assert "no worktree 'nope'" in r.stderr and "inv worktree.create --name nope" in r.stderr
    assert "Create it" not in r.stderr                                  # never offered without a terminal
    assert not g.path("nope").exists()
    r = bash(g.toplevel, chtop_bin, "chtop go ../x; echo rc=$?")
    assert "rc=2" in r.stdout and "bad worktree name" in r.stderr
    r = bash(g.toplevel, chtop_bin, "chtop shell-init fish; echo rc=$?")
    assert "rc=2" in r.stdout and "unknown shell 'fish'" in r.stderr


@pytest.mark.slow
def test_go_offers_to_create_a_missing_worktree_at_a_terminal(with_dev, chtop_bin):
    g = with_dev
    env = dict(os.environ, PATH=f"{chtop_bin}:{os.environ['PATH']}", PS1="$ ")
    child = pexpect.spawn("bash", ["--norc", "--noprofile"], cwd=str(g.toplevel), env=env, encoding="utf-8",
                          timeout=120, dimensions=(40, 200))
    try:
        child.sendline(INIT)
        child.sendline("chtop go dve --no-venv")              # a typo: never offered for creation
        child.expect(r"did you mean 'dev'\?; go there:  chtop go dev\r")
        child.sendline("echo rc=$? at $PWD")
        child.expect(r"rc=2 at (\S+)\r")
        assert "[y/N]" not in child.before
        child.sendline("chtop go feat2 --no-venv")
        child.expect(r"no worktree 'feat2' in \S+ \(worktrees: dev\)\.\r\nCreate worktree feat2 now .*\[y/N\] ")
        child.sendline("n")
        child.sendline("echo rc=$? at $PWD")
        child.expect(r"rc=2 at (\S+)\r")
        assert child.match.group(1) == str(g.toplevel)
        child.sendline("chtop go feat2 --no-venv")
        child.expect(r"\[y/N\] ")
        child.sendline("y")
        child.expect("Worktree ready")
        child.sendline("echo rc=$? at $PWD")
        child.expect(r"rc=0 at (\S+)\r")
        assert child.match.group(1) == str(g.path("feat2"))
        child.sendline("exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert subprocess.run(["git", "branch", "--show-current"], cwd=g.path("feat2", "alpha"),
                          capture_output=True, text=True).stdout.strip() == "feat2"


def test_go_agent_without_sessions_says_so(with_dev, chtop_bin):
    if sessions_adapter.available():
        pytest.skip("chtop_tasks.sessions is installed: attaching is covered by tests/sandbox/test_dash_tmux.py")
    g = with_dev
    r = bash(g.toplevel, chtop_bin, "chtop go dev --agent; echo rc=$? at $PWD")
    assert f"rc=3 at {g.path('dev')}" in r.stdout                       # went there, then could not attach
    assert "agent sessions are not available" in r.stderr


def test_go_in_zsh(with_dev, chtop_bin):
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (./bootstrap installs it; bash is tested above)")
    g = with_dev
    env = dict(os.environ, PATH=f"{chtop_bin}:{os.environ['PATH']}")
    script = 'eval "$(chtop shell-init zsh)"\nchtop go dev && pwd\nchtop go nope; echo rc=$?'
    r = subprocess.run(["zsh", "-f", "-c", script], cwd=g.toplevel, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.splitlines() == [str(g.path("dev")), "rc=2"], (r.stdout, r.stderr)


def test_go_names_the_worktrees_with_a_close_name_and_goes_to_the_toplevel_by_its_name(with_dev, chtop_bin):
    g = with_dev
    r = bash(g.toplevel, chtop_bin, "chtop go dve; echo rc=$?")
    assert "rc=2" in r.stdout
    assert f"no worktree 'dve' in {g.path()} (worktrees: dev); did you mean 'dev'?" in r.stderr, r.stderr
    r = bash(g.path("dev", "alpha"), chtop_bin, f"chtop go {g.toplevel.name} && pwd")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(g.toplevel) and not g.path(g.toplevel.name, g.toplevel.name).exists()


def test_session_attach_to_a_worktree_that_does_not_exist_says_so(with_dev):
    g = with_dev
    r = g.inv(g.path("dev"), "session.attach", "--name", "dve", check=False)
    assert r.returncode == 2
    assert "did you mean 'dev'?" in r.stderr, r.stderr
    assert "start one there" not in r.stderr
    r = g.inv(g.path("dev"), "session.attach", "--name", "dev", check=False)    # exists, no session yet
    assert r.returncode == 3 and "start one there" in r.stderr
