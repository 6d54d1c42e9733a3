"""The sandbox as a new user meets it, as an unprivileged user with real rootless podman:
delete refused while a sandbox runs, one short launch line, a quiet shell despite the host's
~/.bashrc, and chtop's sbox.* outside any workspace."""

from __future__ import annotations

import subprocess

import pytest
from conftest import eventually
from sandbox_helpers import as_user, free_proxy_port, user_group_cm

from chtop_tasks.sandbox import running

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture(scope="module")
def user_group(remote_template):
    with user_group_cm(remote_template, extra_worktrees=("gone",)) as group:
        yield group


def start_in_background(g, argv, cwd, env=None):
    """``argv`` as the test user, not waited for (a sandbox that keeps running)."""
    env = env or g.env
    full = ["runuser", "-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv]
    return subprocess.Popen(full, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_listed(g, ps_argv, cwd, marker, timeout=60, env=None):
    def listed():
        return as_user(g.user, ps_argv, env or g.env, cwd, check=False).stdout

    def marked():
        text = listed()
        return text if marker in text else None
    return eventually(marked, f"{marker} listed", timeout, interval=0.3, explain=listed)


def kill_sandboxes(g, label, timeout=60):
    """Kill the sandboxes with ``label`` and wait until podman has cleaned them up: the test's
    teardown removes the podman storage, and a cleanup still running then never ends."""
    g.run(["sh", "-c", f"podman ps -q --filter label={label} | xargs -r podman kill"], check=False)

    def left():
        return g.run(["podman", "ps", "-aq", "--filter", f"label={label}"], check=False).stdout.strip()
    eventually(lambda: not left(), f"the sandboxes with {label} cleaned up", timeout, interval=0.3, explain=left)


def inv_argv(g, *args):
    return [str(g.venv / "bin" / "python"), "-m", "invoke", *args]


def chtop_argv(g, *args):
    return [str(g.venv / "bin" / "python"), "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
            "from chtop_tasks.cli.chtop import main; main()", str(g.toplevel), *args]


def test_delete_is_refused_while_a_sandbox_runs_in_the_worktree(user_group):
    g = user_group
    gone = g.grouping / "gone"
    bg = start_in_background(g, inv_argv(g, "sbox.run", "--", "sleep", "60"), gone)
    try:
        listed = wait_listed(g, inv_argv(g, "sbox.ps"), g.toplevel, "chtop-gone-run-")
        name = next(word for word in listed.split() if word.startswith("chtop-gone-run-"))
        assert name in running.monitored_names()          # its conmon, seen in /proc
        assert running.may_run_sandbox_of(gone) and not running.may_run_sandbox_of(g.grouping / "elsewhere")
        for extra in ((), ("--force",)):
            refused = g.inv("worktree.delete", "--name", "gone", *extra, cwd=g.toplevel)
            assert refused.returncode == 3, refused.stderr
            assert f"1 sandbox(es) still run in it: {name} (run," in refused.stderr
            assert f"podman stop {name}" in refused.stderr
            assert gone.is_dir()
    finally:
        bg.kill()
        bg.wait()
        kill_sandboxes(g, "chtop.worktree=gone")
    eventually(lambda: "chtop-gone-run-" not in g.inv("sbox.ps", cwd=g.toplevel).stdout, "gone's sandbox to leave sbox.ps",
               timeout=30, interval=0.3)
    done = g.inv("worktree.delete", "--name", "gone", cwd=g.toplevel)
    assert done.returncode == 0, done.stderr
    assert not gone.exists()


def test_a_launch_prints_one_short_line_and_the_whole_argv_when_verbose(user_group):
    g = user_group
    proc = g.inv("sbox.run", "--", "true")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("$ podman run")]
    assert len(lines) == 1 and len(lines[0]) < 200, proc.stderr
    assert "--network=none … (" in lines[0] and "mounts) chtop-dev-run-" in lines[0] and lines[0].split(" -- ")[1].startswith("true")
    assert "--volume=" not in proc.stderr
    verbose = g.inv("sbox.run", "--", "true", extra_env={"CHTOP_VERBOSE": "1"})
    assert "--network=none" in verbose.stderr and "--volume=" in verbose.stderr


def test_the_shell_has_its_own_rc_never_the_hosts_bashrc(user_group):
    """The host's ~/.bashrc (where API keys are exported) is neither mounted nor read; the worktree's
    env (the venv) is still set, and nothing in the host's rc can make the shell print errors."""
    g = user_group
    bashrc = g.home / ".bashrc"
    bashrc.write_text(". ~/chtop-env/bin/activate\nexport FROM_BASHRC=yes\n")
    try:
        proc = g.inv("sbox.shell", input="echo bashrc:$FROM_BASHRC venv:$VIRTUAL_ENV\n")
        assert proc.returncode == 0, proc.stderr
        assert f"bashrc: venv:{g.dev}/.venv" in proc.stdout
        assert "No such file" not in proc.stderr and "activate" not in proc.stderr, proc.stderr
    finally:
        bashrc.unlink()


def test_chtop_sbox_run_shell_and_ps_outside_any_workspace(user_group):
    g = user_group
    env = dict(g.env, CHTOP_PROXY_PORT=str(free_proxy_port()))    # the --dir group's own proxy
    project = g.base / "someproject"
    g.run(["mkdir", str(project)])
    run = as_user(g.user, chtop_argv(g, "sbox.run", "--", "pwd"), env, project, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(project)
    assert "sandboxing the current directory" in run.stderr
    shell = as_user(g.user, chtop_argv(g, "sbox.shell"), env, project, check=False, input="echo in-shell:$PWD\n")
    assert shell.returncode == 0 and f"in-shell:{project}" in shell.stdout, shell.stderr
    bg = start_in_background(g, chtop_argv(g, "sbox.run", "--", "sleep", "60"), project, env)
    try:
        listed = wait_listed(g, chtop_argv(g, "sbox.ps"), project, "chtop-someproject-run-", env=env)
        assert listed.splitlines()[0].split() == ["NAME", "WORKTREE", "PURPOSE", "NETWORK", "STATUS", "LIMITS", "COMMAND"]
    finally:
        bg.kill()
        bg.wait()
        kill_sandboxes(g, "chtop.worktree=someproject")
