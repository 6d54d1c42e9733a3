"""inv sbox.run / sbox.shell / sbox.ps end to end, as an unprivileged user."""

from __future__ import annotations

import subprocess

import pytest
from conftest import eventually
from sandbox_helpers import as_user, user_group_cm

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture(scope="module")
def user_group(remote_template):
    """One test-user workspace for this module."""
    with user_group_cm(remote_template) as group:
        yield group


def test_run_passes_exit_status_args_and_stdio(user_group):
    g = user_group
    assert g.inv("sbox.run", "--", "sh", "-c", "exit 7").returncode == 7
    proc = g.inv("sbox.run", "--", "printf", "[%s]\\n", "a b", "c'd", "", "$HOME", "--", "-x")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[a b]\n[c'd]\n[]\n[$HOME]\n[--]\n[-x]\n"
    proc = g.inv("sbox.run", "--", "sh", "-c", "echo to-err >&2; cat", input="from stdin\n")
    assert proc.stdout == "from stdin\n" and "to-err" in proc.stderr
    assert "$ podman run" in proc.stderr                     # the command line is echoed
    assert g.inv("sbox.run", "--", "sh", "-c", "kill -9 $$").returncode == 128 + 9


def test_a_run_that_fails_says_what_the_proxy_refused_it_and_what_allows_it(user_group):
    """curl inside shows only `CONNECT tunnel failed, response 403`; the failed sbox.run names the
    host, the proxy's reason and the command that allows it.  A run that succeeds says nothing."""
    g = user_group
    proc = g.inv("sbox.run", "--", "curl", "-sS", "--max-time", "20", "https://refused-here.example/")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert ("chtop: the proxy refused refused-here.example: ") in proc.stderr, proc.stderr
    assert "allow it: inv net.allow --worktree dev refused-here.example" in proc.stderr, proc.stderr
    fine = g.inv("sbox.run", "--", "true")
    assert fine.returncode == 0 and "the proxy refused" not in fine.stderr, fine.stderr


def test_run_from_a_repo_dir_starts_there(user_group):
    g = user_group
    proc = g.inv("sbox.run", "--", "pwd", cwd=g.dev / "alpha")
    assert proc.stdout.strip() == str(g.dev / "alpha"), proc.stderr


def test_refuses_toplevel_and_outside(user_group):
    g = user_group
    proc = g.inv("sbox.run", "--", "true", cwd=g.toplevel)
    assert proc.returncode == 2 and "is the toplevel" in proc.stderr
    assert "inv worktree.create" in proc.stderr
    proc = g.inv("-r", str(g.dev), "sbox.run", "--", "true", cwd=g.home)   # outside: the cwd, but never $HOME
    assert proc.returncode == 3 and "refusing to sandbox a directory that holds your home directory" in proc.stderr


def test_dry_run_prints_argv_and_runs_nothing(user_group):
    g = user_group
    proc = g.inv("sbox.run", "--dry-run", "--", "touch", str(g.dev / "alpha" / "dry"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("$ podman run --rm ") and "--network=none" in proc.stdout
    assert not (g.dev / "alpha" / "dry").exists()


def test_broken_policy_refuses_with_file_and_line(user_group):
    g = user_group
    fs_allow = g.toplevel / "sandbox" / "fs-allow.txt"
    original = fs_allow.read_text()
    try:
        g.run(["sh", "-c", f"echo 'rx /oops' >> {fs_allow}"])
        proc = g.inv("sbox.run", "--", "true")
        lines = len(fs_allow.read_text().splitlines())
        assert proc.returncode == 2 and f"{fs_allow}:{lines}:" in proc.stderr
        g.run(["rm", str(fs_allow)])
        proc = g.inv("sbox.run", "--", "sh", "-c", "echo RAN")
        assert proc.returncode == 2 and "fs-allow.txt is missing" in proc.stderr
        assert "RAN" not in proc.stdout and "podman run" not in proc.stderr
    finally:
        as_user(g.user, ["tee", str(fs_allow)], g.env, g.base, input=original)


def test_no_proxy_no_launch(user_group):
    g = user_group
    net_allow = g.toplevel / "sandbox" / "net-allow.txt"
    original = net_allow.read_text() if net_allow.exists() else None
    g.run(["rm", "-f", str(net_allow)])        # ensure_proxy refuses without it, running or not
    try:
        proc = g.inv("sbox.run", "--", "sh", "-c", "echo RAN")
        assert proc.returncode != 0 and "RAN" not in proc.stdout
        assert "podman run" not in proc.stderr, proc.stderr
    finally:
        if original is not None:
            as_user(g.user, ["tee", str(net_allow)], g.env, g.base, input=original)


def test_ps_lists_running_sandboxes_of_the_group(user_group):
    g = user_group
    env = dict(g.env)
    argv = ["runuser", "-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
            str(g.venv / "bin" / "python"), "-m", "invoke", "sbox.run", "--", "sleep", "20"]
    bg = subprocess.Popen(argv, cwd=g.dev, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        def sbox_ps():
            return g.inv("sbox.ps", cwd=g.toplevel).stdout      # from the toplevel too

        def listing_dev():
            text = sbox_ps()
            return text if "chtop-dev-run-" in text else None
        listed = eventually(listing_dev, "dev's sandbox in sbox.ps", timeout=30, interval=0.3, explain=sbox_ps)
        row = [line for line in listed.splitlines() if line.startswith("chtop-dev-run-")]
        assert row, listed
        assert row[0].split()[1:4] == ["dev", "run", "proxy"] and row[0].endswith("sleep 20")
    finally:
        bg.kill()
        bg.wait()
        g.run(["sh", "-c", "podman ps -q --filter label=chtop.worktree=dev | xargs -r podman kill"], check=False)
    assert "no sandboxes running" in g.inv("sbox.ps").stdout


def test_shell_without_a_terminal_reads_stdin(user_group):
    g = user_group
    proc = g.inv("sbox.shell", input="echo shell:$CHTOP_SANDBOX:$VIRTUAL_ENV\nexit 3\n")
    assert proc.returncode == 3, proc.stderr
    assert f"shell:dev:{g.dev}/.venv" in proc.stdout


def test_shell_with_a_terminal(user_group):
    pexpect = pytest.importorskip("pexpect")
    g = user_group
    argv = ["-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in g.env.items() if k != "TERM"],
            "TERM=xterm", str(g.venv / "bin" / "python"), "-m", "invoke", "sbox.shell"]
    child = pexpect.spawn("runuser", argv, cwd=str(g.dev), dimensions=(30, 100), timeout=60, encoding="utf-8")
    try:
        child.expect_exact("(sbox)")
        child.sendline("echo cols=$(tput cols) venv=$VIRTUAL_ENV; exit 5")
        child.expect(r"cols=100 venv=(\S+)")
        assert child.match.group(1) == f"{g.dev}/.venv"
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 5


def test_network_modes_host_and_open_are_warned(user_group):
    g = user_group
    proc = g.inv("sbox.run", "--network", "host", "--", "sh", "-c", "echo proxy=$HTTPS_PROXY")
    assert proc.returncode == 0, proc.stderr
    assert "warning: --network host" in proc.stderr and "--network=host" in proc.stderr
    url = proc.stdout.strip().removeprefix("proxy=")
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":3128")     # the proxy's TCP port
    proc = g.inv("sbox.run", "--network", "open", "--", "sh", "-c", "echo proxy=${HTTPS_PROXY:-none}")
    assert proc.stdout.strip() == "proxy=none" and "open egress" in proc.stderr
