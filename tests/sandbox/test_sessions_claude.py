"""Persistent sessions end to end: the real ``claude`` CLI in its real sandbox inside real tmux,
talking to the scripted fake Anthropic API through chtop's egress proxy.

Rootless as the unprivileged test user; the same life cycle as root (rootful podman) in
``test_root_session_life_cycle``.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from conftest import eventually
from fake_anthropic import FakeAnthropic, bash, text
from ntfy_standin import NtfyStandin
from sandbox_helpers import IN_CI, as_user, rootful_podman_env, user_group_cm

from chtop_tasks.core.apiroute import PLACEHOLDER
from chtop_tasks.notify import config as notify_config

pytestmark = [pytest.mark.podman, pytest.mark.slow]

API_KEY = "sk-ant-api03-fake-session-key-0123456789abcdef"
API_HOST = "fakeapi.test"
FIRST_PROMPT = "please run the long command"
FIRST_ANSWER = "The long command has finished."
SLEEP = 25


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if IN_CI:
            pytest.fail(f"{tool} is not installed (CI installs it: see .ci/run)")
        pytest.skip(f"{tool} is not installed")
    return path


def prepare_claude_group(g, api: FakeAnthropic, secrets_dir: Path, owner: tuple[int, int]) -> dict:
    """The fake API reachable through the proxy, its key in the secrets file, claude's first-run
    screens answered in the group's agent config; returns the extra env for inv."""
    hosts = g.base / "hosts"
    hosts.write_text(f"127.0.0.1 {API_HOST}\n")
    with open(g.toplevel / "sandbox" / "net-allow.txt", "a") as fh:
        fh.write(f"{API_HOST}:{api.port} private\n")
    secrets_dir.mkdir(parents=True, exist_ok=True)
    secrets = secrets_dir / "secrets.env"
    secrets.write_text(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL=http://{API_HOST}:{api.port}\n")
    secrets.chmod(0o600)
    claude_dir = g.grouping / "claude"
    claude_dir.mkdir(exist_ok=True)
    (claude_dir / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        # the key stays on the host: claude inside holds the proxy's placeholder, approved once like a key
        "customApiKeyResponses": {"approved": [PLACEHOLDER[-20:]], "rejected": []},
        "projects": {str(g.dev): {"hasTrustDialogAccepted": True}}}))
    # The user's own settings: the bypass-mode warning accepted once, and a hook of their own.
    (claude_dir / "settings.json").write_text(json.dumps({
        "skipDangerousModePermissionPrompt": True,
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true  # the user's own"}]}]}}))
    for path in (claude_dir, secrets_dir, hosts):
        subprocess.run(["chown", "-R", f"{owner[0]}:{owner[1]}", str(path)], check=True)
    return {"CHTOP_PROXY_HOSTS_FILE": str(hosts), "CHTOP_PROXY_CONNECT_TIMEOUT": "5"}


def rows(g, inv) -> dict:
    proc = inv("session.list", "--json", cwd=g.toplevel)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {row["worktree"]: row for row in json.loads(proc.stdout)}


def wait_state(g, inv, wanted: set[str], timeout: float = 120) -> dict:
    def row_in_state():
        row = rows(g, inv).get("dev")
        return row if row and row["state"] in wanted else None
    return eventually(row_in_state, f"dev to become one of {sorted(wanted)}", timeout=timeout, interval=1,
                      explain=lambda: rows(g, inv).get("dev"))


def containers(g, run) -> list[str]:
    proc = run(["podman", "ps", "-a", "--format", "{{.Names}}", "--filter", f"label=chtop.group={g.grouping}"])
    return proc.stdout.split()


def tmux_sessions(socket: Path, run) -> list[str]:
    if not socket.exists():
        return []
    proc = run(["tmux", "-S", str(socket), "list-sessions", "-F", "#{session_name}"])
    return proc.stdout.split() if proc.returncode == 0 else []


def socket_of(g, inv) -> Path:
    proc = inv("session.list", "--json", cwd=g.toplevel)
    row = json.loads(proc.stdout)[0]
    record = json.loads((g.grouping / ".chtop" / "sessions" / f"{row['worktree']}.json").read_text())
    return Path(record["tmux_socket"])


# -- rootless, as the test user ---------------------------------------------------------------

@pytest.fixture(scope="module")
def api():
    # (claude refuses a bare `sleep N` in its Bash tool)
    server = FakeAnthropic([bash(f"python3 -c 'import time; time.sleep({SLEEP})'"), text(FIRST_ANSWER), text("Continued answer.")])
    yield server
    server.close()


@pytest.fixture(scope="module")
def sess(remote_template, api):
    need("claude")
    need("tmux")
    with user_group_cm(remote_template) as g:
        owner = (g.user.pw_uid, g.user.pw_gid)
        extra = prepare_claude_group(g, api, g.home / ".config" / "chtop", owner)
        g.env.update(extra)
        yield g
        socket_dir = g.base / "run"
        for sock in socket_dir.glob("chtop-*/*/tmux.sock"):
            as_user(g.user, ["tmux", "-S", str(sock), "kill-server"], g.env, g.base, check=False)
        for name in containers(g, lambda argv: as_user(g.user, argv, g.env, g.base, check=False)):
            as_user(g.user, ["podman", "rm", "-f", "-t", "0", name], g.env, g.base, check=False)


def user_inv(g):
    def inv(*args, cwd=None, timeout=180):
        return g.inv(*args, cwd=cwd or g.dev, timeout=timeout)
    return inv


def user_run(g):
    return lambda argv: as_user(g.user, argv, g.env, g.base, check=False)


def as_drawn(text: str) -> str:
    """A pattern for ``text`` as a terminal stream draws it: a space may be an erase and a cursor move."""
    return r"(?: |\x1b\[\d*[XC])+".join(re.escape(word) for word in text.split(" "))


def attach_in_pty(g, cwd: Path):
    env = dict(g.env, TERM="xterm-256color")
    argv = ["-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()],
            str(g.venv / "bin" / "python"), "-m", "invoke", "session.attach"]
    return pexpect.spawn("runuser", argv, cwd=str(cwd), dimensions=(40, 120), timeout=60,
                         encoding="utf-8", codec_errors="replace")


def test_session_life_cycle_with_the_real_claude(sess, api):
    g, inv, run = sess, user_inv(sess), user_run(sess)

    # start returns at once while claude runs on, in tmux, in its sandbox
    began = time.monotonic()
    proc = inv("session.start", "--", FIRST_PROMPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - began < 60
    assert "started dev: claude in tmux session chtop-dev" in proc.stdout
    assert "daemonises on its own" in proc.stdout          # no systemd user manager under runuser
    again = inv("session.start")
    assert again.returncode == 3 and "already runs" in again.stderr, again.stderr

    # the hooks were merged into dev's own settings (host-written, read-only inside): the user's own kept
    settings = json.loads((g.grouping / ".chtop" / "agents" / "dev" / "settings.json").read_text())
    assert settings["skipDangerousModePermissionPrompt"] is True
    stop_commands = [h["command"] for e in settings["hooks"]["Stop"] for h in e["hooks"]]
    assert "true  # the user's own" in stop_commands
    assert sum("chtop-session-state" in c for c in stop_commands) == 1

    # working during the long tool call, idle once the model's turn ends
    api.wait_for_turns(1)
    tool_began = api.served_at[0]                    # the model asked for the long command
    row = wait_state(g, inv, {"working"}, timeout=30)
    assert row["agent"] == "claude" and row["exit_status"] is None
    assert time.monotonic() - tool_began < SLEEP, "the tool call ended before the state was read"
    record = json.loads((g.grouping / ".chtop" / "sessions" / "dev.json").read_text())
    sid = record["session_id"]
    hook_file = g.grouping / ".chtop" / "agents" / "dev" / "sessions" / sid / sid
    assert hook_file.read_text().strip() == "working"           # from claude's own PreToolUse hook
    api.wait_for_turns(2, timeout=SLEEP + 90)
    assert time.monotonic() - tool_began > SLEEP - 2, json.dumps(api.conversations()[-1])[-1500:]
    row = wait_state(g, inv, {"idle", "waiting"}, timeout=60)
    assert row["since"] > time.time() - 120
    listed = inv("session.list", cwd=g.toplevel)
    assert listed.stdout.split()[:3] == ["dev", "claude", row["state"]], listed.stdout
    assert FIRST_PROMPT in json.dumps(api.conversations()[0])

    # delete refuses while it runs
    refused = inv("worktree.delete", "--name", "dev", cwd=g.toplevel)
    assert refused.returncode == 3, refused.stderr
    assert "inv session.stop --name dev" in refused.stderr and "chtop-dev" in refused.stderr

    # attach shows claude's screen; C-b d detaches and leaves it running
    child = attach_in_pty(g, g.dev)
    try:
        # claude's screen reaches the new client (tmux draws a space as a cursor move where it can)
        child.expect(as_drawn(FIRST_ANSWER), timeout=180)
        child.send("\x02d")
        child.expect(r"\[detached", timeout=30)
        child.expect(pexpect.EOF, timeout=30)
    finally:
        child.close(force=True)
    assert rows(g, inv)["dev"]["state"] in ("idle", "waiting")

    # the log holds what the screen showed while nobody was attached
    logged = inv("session.log", "--name", "dev", cwd=g.toplevel)
    assert logged.returncode == 0 and FIRST_ANSWER in logged.stdout, logged.stdout[-2000:]
    assert FIRST_PROMPT in logged.stdout and "\x1b" not in logged.stdout
    raw = inv("session.log", "--raw", cwd=g.dev)
    assert raw.returncode == 0 and "\x1b[" in raw.stdout

    # the tmux server dies (as at a reboot): lost; restore brings it back with --continue
    socket = socket_of(g, inv)
    run(["tmux", "-S", str(socket), "kill-server"])
    assert rows(g, inv)["dev"]["state"] == "lost"
    restored = inv("session.restore", cwd=g.toplevel)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "restored dev" in restored.stdout
    assert "--dangerously-skip-permissions --continue" in restored.stderr, restored.stderr
    ps = inv("sbox.ps")
    assert "--continue" in ps.stdout, ps.stdout
    assert len(containers(g, run)) == 1, containers(g, run)   # the lost run's container is gone
    # a prompt typed into the restored claude reaches the API with the earlier conversation
    row = wait_state(g, inv, {"idle", "waiting", "working"}, timeout=60)
    eventually(lambda: FIRST_ANSWER in run(["tmux", "-S", str(socket), "capture-pane", "-p", "-t", "=chtop-dev:"]).stdout,
               "the restored claude to show the earlier conversation", timeout=90, interval=1)
    run(["tmux", "-S", str(socket), "send-keys", "-t", "=chtop-dev:", "and now?", "Enter"])
    api.wait_for_turns(3)
    last = api.conversations()[-1]
    assert FIRST_ANSWER in json.dumps(last) and "and now?" in json.dumps(last)

    # stop leaves nothing: no tmux session, no container, nothing in sbox.ps
    stopped = inv("session.stop", "--name", "dev", cwd=g.toplevel)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert tmux_sessions(socket, run) == []
    assert containers(g, run) == []
    assert "no sandboxes running" in inv("sbox.ps").stdout
    assert rows(g, inv) == {}


def phone_setup(g, standin: NtfyStandin) -> tuple[notify_config.NotifyConfig, Path]:
    """The test user's notify.toml, pushing to the stand-in of ntfy: agents after 3 s waiting."""
    cfg = notify_config.NotifyConfig(standin.url, notify_config.random_topic(), notify_config.random_topic(),
                       secrets.token_hex(32), held_after=600, waiting_after=3)
    path = notify_config.save(cfg, g.home / ".config" / "chtop" / "notify.toml")
    subprocess.run(["chown", f"{g.user.pw_uid}:{g.user.pw_gid}", str(path)], check=True)
    return cfg, path


def test_a_first_run_question_is_waiting_and_notifies_the_user(sess):
    """Waiting on claude's bypass-mode question: the user's notify command runs, and the phone
    (a stand-in of ntfy) gets exactly one message with the worktree, the agent and the screen."""
    g, inv = sess, user_inv(sess)
    standin = NtfyStandin()
    phone, phone_toml = phone_setup(g, standin)
    settings = g.grouping / "claude" / "settings.json"
    saved = settings.read_text()
    data = json.loads(saved)
    data["skipDangerousModePermissionPrompt"] = False      # claude asks about bypass mode again
    settings.write_text(json.dumps(data))
    out = g.base / "notified"
    config = g.home / ".config" / "chtop" / "config.toml"
    config.write_text(f'notify = ["sh", "-c", "echo \\"$@\\" >> {out}", "notify"]\n')
    subprocess.run(["chown", f"{g.user.pw_uid}:{g.user.pw_gid}", str(config), str(settings)], check=True)
    inv("session.stop", "--all", cwd=g.toplevel)          # one an earlier test of this module left, if it failed
    try:
        proc = inv("session.start")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        wait_state(g, inv, {"waiting"}, timeout=90)
        assert "Bypass Permissions mode" in inv("session.log").stdout
        eventually(lambda: "dev waiting" in (out.read_text() if out.exists() else ""), "the notify command to run",
                   timeout=20)
        run, socket = user_run(g), socket_of(g, inv)
        [msg] = standin.wait_published(phone.topic, 1, timeout=30)
        assert msg["title"] == "dev: claude waits for you" and "actions" not in msg
        body = msg["message"]
        assert "\x1b" not in body and len(body) < 1000 and body.endswith("inv session.attach --name dev")
        screen = run(["tmux", "-S", str(socket), "capture-pane", "-p", "-t", "=chtop-dev:"]).stdout
        shown = [line for line in body.splitlines()[:-2] if line.strip()]
        assert shown and all(line in screen for line in shown), (body, screen)
        time.sleep(3 * phone.waiting_after)              # still waiting, polled every second: no second one
        assert rows(g, inv)["dev"]["state"] == "waiting" and len(standin.published(phone.topic)) == 1
        # accepting it: claude cannot record the answer in its read-only settings.json, and goes on
        run(["tmux", "-S", str(socket), "send-keys", "-t", "=chtop-dev:", "2"])
        time.sleep(2)                                    # the choice, then Enter as a keystroke of its own
        run(["tmux", "-S", str(socket), "send-keys", "-t", "=chtop-dev:", "Enter"])
        def pane_text():
            return run(["tmux", "-S", str(socket), "capture-pane", "-p", "-t", "=chtop-dev:"]).stdout

        eventually(lambda: "bypass permissions on" in pane_text().lower(), "claude to go on in bypass permissions mode",
                   timeout=60, interval=1, explain=pane_text)
        assert rows(g, inv)["dev"]["state"] != "exited"
        rendered = g.grouping / ".chtop" / "agents" / "dev" / "settings.json"
        assert json.loads(rendered.read_text())["skipDangerousModePermissionPrompt"] is False
    finally:
        assert inv("session.stop", "--name", "dev", cwd=g.toplevel).returncode == 0
        settings.write_text(saved)
        config.unlink()
        phone_toml.unlink()
        standin.stop()


def test_session_tasks_refuse_in_the_toplevel(sess):
    g, inv = sess, user_inv(sess)
    for args in (("session.start",), ("session.attach",), ("session.log",), ("session.stop",)):
        proc = inv(*args, cwd=g.toplevel)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "is the toplevel" in proc.stderr, proc.stderr
    assert inv("session.list", cwd=g.toplevel).returncode == 0
    assert inv("session.stop", "--all", cwd=g.toplevel).returncode == 0


# -- as root: rootful podman ------------------------------------------------------------------

@pytest.fixture
def root_env(tmp_path):
    """Rootful podman with its storage in tmp (never the machine's /var/lib/containers)."""
    return rootful_podman_env(tmp_path)


@pytest.mark.rootful
def test_root_session_life_cycle(remote_template, root_env):
    need("claude")
    need("tmux")
    api = FakeAnthropic([text("Root answer one."), text("Root answer two.")])
    with user_group_cm(remote_template) as g:
        secrets_dir = Path(root_env["XDG_CONFIG_HOME"]) / "chtop"
        extra = prepare_claude_group(g, api, secrets_dir, (g.user.pw_uid, g.user.pw_gid))
        subprocess.run(["chown", "-R", "0:0", str(secrets_dir)], check=True)
        env = dict(root_env, **extra)

        def inv(*args, cwd=None, timeout=180):
            return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd or g.dev, env=env,
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)

        def run(argv):
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

        try:
            proc = inv("session.start", "--", "hello as root")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "rootful podman" in proc.stderr
            api.wait_for_turns(1)
            row = wait_state(g, inv, {"idle", "waiting"}, timeout=90)
            assert row["agent"] == "claude"
            socket = socket_of(g, inv)
            run(["tmux", "-S", str(socket), "kill-server"])
            assert rows(g, inv)["dev"]["state"] == "lost"
            restored = inv("session.restore", cwd=g.toplevel)
            assert restored.returncode == 0 and "--continue" in restored.stderr, restored.stderr
            assert rows(g, inv)["dev"]["state"] in ("working", "idle", "waiting")
            assert len(containers(g, run)) == 1
            stopped = inv("session.stop", "--name", "dev", cwd=g.toplevel)
            assert stopped.returncode == 0, stopped.stderr
            assert containers(g, run) == [] and tmux_sessions(socket, run) == []
            assert rows(g, inv) == {}
        finally:
            for sock in Path(env["XDG_RUNTIME_DIR"]).glob("chtop-*/*/tmux.sock"):
                run(["tmux", "-S", str(sock), "kill-server"])
            for name in containers(g, run):
                run(["podman", "rm", "-f", "-t", "0", name])
            api.close()
