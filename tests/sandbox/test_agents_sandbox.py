"""Agents in the real sandbox, end to end: claude under pexpect and in print
mode, a stand-in agent registered as data, the secrets file, --dir mode.

Runs as the unprivileged test user with rootless podman (sandbox_helpers).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pexpect
import pytest
from sandbox_helpers import IN_CI, as_user, stop_proxy_as, user_group  # noqa: F401

pytestmark = [pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOKEN = "standin-token-4f1c9a"

# The stand-in agent: prints its argv (one [..] per argument), what it got
# from the secrets file, whether the file is visible anywhere, then exits 5.
STAND_IN = r"""
secrets_on_host='@SECRETS@'; grouping_on_host='@GROUPING@'
printf 'ARGS:'; printf '[%s]' "$@"; echo
echo "TOKEN:${STANDIN_TOKEN:-unset} OTHER:${OTHER_SECRET:-unset}"
echo "PWD:$(pwd)"
for f in "$XDG_CONFIG_HOME/chtop/secrets.env" "$HOME/.config/chtop/secrets.env" "$secrets_on_host"; do
    [ -e "$f" ] && echo "VISIBLE:$f"
done
grep -q secrets.env /proc/self/mountinfo && echo "MOUNTED:secrets.env"
[ -e "$grouping_on_host" ] && echo "VISIBLE:grouping"
touch made-inside 2>/dev/null && echo "WROTE:made-inside"
exit 5
"""


def need_claude() -> str:
    path = shutil.which("claude")
    if path is None:
        if IN_CI:
            pytest.fail("claude is not installed (CI: npm install -g @anthropic-ai/claude-code)")
        pytest.skip("claude is not installed (npm install -g @anthropic-ai/claude-code)")
    return path


def chown(g, path: Path) -> None:
    subprocess.run(["chown", "-R", f"{g.user.pw_uid}:{g.user.pw_gid}", str(path)], check=True)


def config_dir(g) -> Path:
    path = g.home / ".config" / "chtop"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_secrets(g, text: str, mode: int = 0o600) -> Path:
    path = config_dir(g) / "secrets.env"
    path.write_text(text)
    path.chmod(mode)
    chown(g, g.home / ".config")
    return path


def write_registry(g, text: str) -> None:
    (config_dir(g) / "agents.toml").write_text(text)
    chown(g, g.home / ".config")


def register_stand_in(g) -> None:
    script = STAND_IN.replace("@SECRETS@", str(config_dir(g) / "secrets.env")).replace("@GROUPING@", str(g.grouping))
    write_registry(g, "[standin]\n"
                      f"command = ['sh', '-c', '''{script}''', 'standin']\n"
                      "skip_permissions = ['--standin-yolo']\n"
                      "credentials = ['STANDIN_TOKEN']\ntokens = ['STANDIN_TOKEN']\n")


def proxy_records(g) -> list[dict]:
    path = g.grouping / ".chtop" / "net" / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spawn_inv(g, *args, dimensions=(40, 120)):
    """``inv ARGS`` as the test user in a real pty: the user's terminal."""
    env = dict(g.env, TERM="xterm-256color")
    argv = ["-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
            str(g.venv / "bin" / "python"), "-m", "invoke", *args]
    return pexpect.spawn("runuser", argv, cwd=str(g.dev), dimensions=dimensions, timeout=60,
                         encoding="utf-8", codec_errors="replace")


@pytest.fixture
def group(user_group):  # noqa: F811
    """The module's workspace; afterwards no container of ours is left and
    the user's chtop config is gone."""
    yield user_group
    g = user_group
    listed = as_user(g.user, ["podman", "ps", "-q", "--filter", f"label=chtop.group={g.grouping}"],
                     g.env, g.base, check=False)
    for ident in listed.stdout.split():
        as_user(g.user, ["podman", "rm", "-f", ident], g.env, g.base, check=False)
    stop_proxy_as(g.home / ".config" / "chtop")   # the --dir group's proxy
    shutil.rmtree(g.home / ".config" / "chtop", ignore_errors=True)


def test_claude_draws_its_first_screen_follows_resizes_and_exits_on_keys(group):
    need_claude()
    g = group
    claude_dir = g.grouping / "claude"
    claude_dir.mkdir(exist_ok=True)
    (claude_dir / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "theme": "dark"}))
    chown(g, claude_dir)
    child = spawn_inv(g, "sbox.claude")
    try:
        # The folder-trust screen, drawn across the full 120 columns of our pty.
        child.expect("─" * 120, timeout=90)
        child.expect("trust")
        child.expect("confirm", timeout=60)
        child.setwinsize(30, 90)          # SIGWINCH -> our runner -> podman -> claude
        child.expect("─" * 90 + "\x1b", timeout=30)
        child.expect("confirm", timeout=30)   # the whole redraw read: a selection seen later is new
        # Move the selection with the arrow keys until "No, exit" is chosen (its place in the list
        # differs between claude versions), then confirm it.
        esc = r"(?:\x1b\[[0-9;]*[mGABCD]|\s)*"
        selected_no, selected_yes = f"❯{esc}(?:\\d\\.{esc})?No,", f"❯{esc}(?:\\d\\.{esc})?Yes,"
        child.send("\x1b[B")
        if child.expect([selected_no, selected_yes], timeout=30) == 1:
            child.send("\x1b[A")
            child.expect(selected_no, timeout=30)
        child.send("\r")
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    # claude's own status for "No, exit" is 1; the task reports it as is.
    assert (child.exitstatus, child.signalstatus) == (1, None)


def test_claude_print_mode_connects_through_the_proxy_and_fails_honestly(group):
    need_claude()
    g = group
    write_secrets(g, "ANTHROPIC_API_KEY=sk-ant-api03-dummy-key-for-tests\n")
    # The same claude entry, plus no API retries (the test would wait minutes).
    write_registry(g, "[claude]\ncommand = ['claude']\nskip_permissions = ['--dangerously-skip-permissions']\n"
                      "credentials = ['ANTHROPIC_API_KEY']\ntokens = ['ANTHROPIC_API_KEY']\n"
                      "env = { CLAUDE_CODE_MAX_RETRIES = '0' }\n")
    # the token note is said once per group: an earlier test's launch may have said it
    proc = g.inv("sbox.claude", "--", "-p", "hello", timeout=240, extra_env={"CHTOP_VERBOSE": "1"})
    assert "authenticating with ANTHROPIC_API_KEY" in proc.stderr
    assert "--dangerously-skip-permissions -p hello" in proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr   # claude's failure: no internet here
    connects = [r for r in proxy_records(g)
                if r.get("method") == "CONNECT" and r.get("host") == "api.anthropic.com" and r.get("port") == 443]
    assert connects, proxy_records(g)
    assert all(r["decision"] == "allowed" for r in connects)
    assert "sk-ant-api03-dummy" not in proc.stderr  # the key never appears on the command line


def test_stand_in_agent_gets_its_flag_args_and_secret_but_never_the_file(group):
    g = group
    register_stand_in(g)
    write_secrets(g, f"STANDIN_TOKEN={TOKEN}\nOTHER_SECRET=not-for-this-agent\n")
    proc = g.inv("sbox.agent", "--agent", "standin", "--", "two words", "--x", "$HOME")
    out = proc.stdout
    assert "ARGS:[--standin-yolo][two words][--x][$HOME]" in out, out + proc.stderr
    assert f"TOKEN:{TOKEN} OTHER:unset" in out
    assert "VISIBLE:" not in out.replace("VISIBLE:grouping", "") and "MOUNTED:" not in out
    assert TOKEN not in proc.stderr
    assert proc.returncode == 5


def test_secrets_file_readable_by_others_is_refused_before_launch(group):
    g = group
    register_stand_in(g)
    secrets = write_secrets(g, f"STANDIN_TOKEN={TOKEN}\n", mode=0o644)
    proc = g.inv("sbox.agent", "--agent", "standin")
    assert proc.returncode == 3
    assert f"chmod 600 {secrets}" in proc.stderr
    assert "podman run" not in proc.stderr and "ARGS:" not in proc.stdout


def test_chtop_outside_any_workspace_sandboxes_the_current_directory(group):
    g = group
    register_stand_in(g)
    write_secrets(g, f"STANDIN_TOKEN={TOKEN}\n")
    # The user's own policy for --dir mode (the defaults, copied).
    shutil.copytree(REPO / "sandbox", config_dir(g) / "sandbox")
    chown(g, g.home / ".config")
    project = g.base / "someproject"
    project.mkdir()
    chown(g, project)
    chtop = ["-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); from chtop_tasks.cli.chtop import main; main()",
             str(g.toplevel)]
    with socket.socket() as probe:   # the --dir group's proxy needs its own port
        probe.bind(("127.0.0.1", 0))
        env = dict(g.env, CHTOP_PROXY_PORT=str(probe.getsockname()[1]))
    proc = as_user(g.user, [str(g.venv / "bin" / "python"), *chtop, "sbox.agent", "--agent", "standin",
                            "--", "in-dir"], env, project, check=False)
    assert "not inside a chtop workspace: sandboxing the current directory" in proc.stderr, proc.stderr
    assert f"PWD:{project}" in proc.stdout
    assert "WROTE:made-inside" in proc.stdout and (project / "made-inside").exists()
    assert "VISIBLE:grouping" not in proc.stdout   # other workspaces are not mounted
    assert f"TOKEN:{TOKEN}" in proc.stdout
    assert proc.returncode == 5
    # In the toplevel the refusal stands (it is never containerized).
    top = as_user(g.user, [str(g.venv / "bin" / "python"), *chtop, "sbox.agent", "--agent", "standin"],
                  env, g.toplevel, check=False)
    assert top.returncode == 2 and "toplevel" in top.stderr


def test_agent_killed_by_a_signal_is_128_plus_signal_with_and_without_a_tty(group):
    g = group
    write_registry(g, "[selfkill]\ncommand = ['sh', '-c', 'echo ABOUT-TO-DIE; kill -TERM $$', 'selfkill']\n")
    proc = g.inv("sbox.agent", "--agent", "selfkill")
    assert "ABOUT-TO-DIE" in proc.stdout
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    child = spawn_inv(g, "sbox.agent", "--agent", "selfkill")
    try:
        child.expect("ABOUT-TO-DIE", timeout=90)
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert (child.exitstatus, child.signalstatus) == (128 + signal.SIGTERM, None)
