"""``sbox.shell`` and ``sbox.claude`` for a worktree on another host: ``ssh -t`` into its sandbox there.

The host is the test's real sshd (tests/ssh_helpers.py) logging in as the second local account, which
runs rootless podman and the real ``claude`` CLI there; claude's API is the local fake
(tests/fake_anthropic.py) behind the host's own proxy, its key in the account's secrets file.  From
this toplevel, in a real terminal (pexpect): ``inv sbox.shell --name dev`` is a shell in dev's sandbox
on the host (its name, cwd and /proc/1 say so), and exiting it leaves the terminal as it was;
``inv sbox.claude --name dev -- -p PROMPT`` prints the fake's answer.  Then the host's sshd stops, and
the same commands say which host did not answer and what to check, at once and with no terminal taken.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pexpect
import pytest
from fake_anthropic import FakeAnthropic, text
from ssh_helpers import remote_group_dir, remote_podman_works, remote_python, start_sshd
from test_hosts import close_masters
from test_hosts_sandbox import remote_cleanup

pytestmark = [pytest.mark.podman, pytest.mark.slow]

API_KEY = "sk-ant-api03-fake-remote-key-0123456789abcdef"
API_HOST = "fakeapi.test"
ANSWER = "Hello from the fake API, over ssh."
PROMPT = r"\$ $"                                   # the local shell's prompt (PS1 below)


def need_claude() -> None:
    if shutil.which("claude") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("claude is not installed (CI: npm install -g @anthropic-ai/claude-code)")
        pytest.skip("claude is not installed (npm install -g @anthropic-ai/claude-code)")


@pytest.fixture
def api():
    server = FakeAnthropic([text(ANSWER)])
    yield server
    server.close()


@pytest.fixture
def host_with_api(api):
    """sshd whose logins have the proxy's hosts file (the fake API's name -> 127.0.0.1) and a config
    dir of their own (``XDG_CONFIG_HOME``: the secrets file naming the fake, and no agents file of
    another test), both in a dir under /tmp the account can read; this side's chtop config pointing
    at the sshd."""
    files = Path(tempfile.mkdtemp(prefix="csh-api-", dir="/tmp"))
    files.chmod(0o755)
    hosts = files / "hosts"
    hosts.write_text(f"127.0.0.1 {API_HOST}\n")
    hosts.chmod(0o644)
    server = start_sshd(f"SetEnv CHTOP_PROXY_HOSTS_FILE={hosts} CHTOP_PROXY_CONNECT_TIMEOUT=5 "
                        f"XDG_CONFIG_HOME={files}/config\n")
    secrets = files / "config" / "chtop" / "secrets.env"
    secrets.parent.mkdir(parents=True)
    secrets.write_text(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL=http://{API_HOST}:{api.port}\n")
    secrets.chmod(0o600)
    for path in (files / "config", secrets.parent, secrets):
        os.chown(path, server.user.pw_uid, server.user.pw_gid)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f'ssh_config = "{server.config}"\nhost_timeout = 20\n')
    base = remote_group_dir(server.user)
    yield server, base
    server.stop()
    for path in (server.base, base, files):
        shutil.rmtree(path, ignore_errors=True)


def local_terminal(top: Path) -> pexpect.spawn:
    """A plain bash in a real terminal, in the toplevel: the user's own shell here."""
    env = dict(os.environ, TERM="xterm", PYTHONPATH=str(top), PS1="$ ", PATH=f"{Path(sys.executable).parent}:"
               + os.environ["PATH"])
    child = pexpect.spawn("bash", ["--norc", "--noprofile"], cwd=str(top), env=env, dimensions=(30, 160),
                          timeout=120, encoding="utf-8", codec_errors="replace")
    child.expect(PROMPT)
    return child


def terminal_modes(child: pexpect.spawn) -> str:
    child.sendline("stty -g; echo MODES-DONE")
    child.expect(r"([0-9a-f]+(?::[0-9a-f]+){10,})\r\nMODES-DONE")
    modes = child.match.group(1)
    child.expect(PROMPT)
    return modes


def inv_line(*args: str) -> str:
    return f"{sys.executable} -m invoke " + " ".join(args) + "; echo EXIT=$?"


def test_a_shell_and_claude_in_the_sandbox_of_a_worktree_on_a_host_over_ssh_t_and_a_host_that_is_down(
        initialized, host_with_api, api):
    need_claude()
    g, (server, base) = initialized, host_with_api
    top, remote_top, remote_dev = g.toplevel, base / "grp" / "top", base / "grp" / "dev"
    python = remote_python()
    remote_podman_works(server)
    times = {}
    child = None
    try:
        g.inv(top, "host.add", "gpu1", server.alias, "--group", str(base / "grp"), "--python", str(python))
        g.inv(top, "worktree.create", "--name", "dev", "--host", "gpu1", "--no-venv")
        child = local_terminal(top)
        before = terminal_modes(child)

        started = time.monotonic()
        child.sendline(inv_line("sbox.shell", "--name", "dev"))
        child.expect([r"\(sbox\) ", r"EXIT=\d"], timeout=180)        # the sandbox shell's prompt, there
        assert "EXIT" not in child.after, child.before
        child.sendline('echo "IN=$CHTOP_SANDBOX:$(pwd):$(id -un 2>/dev/null || id -u)"; '
                       "tr '\\0' ' ' < /proc/1/cmdline; echo; test -t 0 && echo TTY-INSIDE")
        child.expect(f"IN=dev:{remote_dev}:")                        # dev's sandbox, in dev's worktree there
        child.expect("/.chtop/entry.sh")                             # /proc/1: the sandbox's init and entry
        child.expect("TTY-INSIDE")                                   # a terminal all the way in
        child.sendline("exit")
        child.expect(r"EXIT=(\d+)")
        assert child.match.group(1) == "0", child.before
        child.expect(PROMPT)
        times["shell"] = time.monotonic() - started
        assert terminal_modes(child) == before                      # the terminal is as it was

        started = time.monotonic()
        child.sendline(inv_line("sbox.claude", "--name", "dev", "--", "-p", "'say hello'"))
        child.expect("ssh .*-t -- gpu1 .*sbox.claude")              # the launch: ssh -t into the host's task
        child.expect(ANSWER, timeout=120)
        child.expect(r"EXIT=(\d+)", timeout=60)
        assert child.match.group(1) == "0", child.before
        child.expect(PROMPT)
        times["claude"] = time.monotonic() - started
        assert api.turns_served == 1                                 # answered by the fake, through the proxy there
        assert all(r["headers"].get("x-api-key") == API_KEY for r in api.requests if "/v1/messages" in r["path"])
        assert terminal_modes(child) == before

        remote_cleanup(server, remote_top, python)
        server.stop()
        close_masters(g, server)
        for task in ("sbox.shell", "sbox.claude"):
            started = time.monotonic()
            child.sendline(inv_line(task, "--name", "dev"))
            child.expect(r"EXIT=(\d+)", timeout=90)
            said, code = child.before, child.match.group(1)
            child.expect(PROMPT)
            assert code != "0", said
            assert "gpu1: did not answer within 20 s (ssh gpu1: " in said, said
            assert "`ssh gpu1 true` works" in said and "inv host.list" in said, said
            assert "-t -- gpu1" not in said, said                     # no terminal handed to ssh
            times[f"{task} down"] = time.monotonic() - started
            assert terminal_modes(child) == before
    finally:
        print("times:", {k: f"{v:.1f}s" for k, v in times.items()})
        if child is not None:
            child.close(force=True)
        if server.proc.poll() is None:
            remote_cleanup(server, remote_top, python)
        close_masters(g, server)
