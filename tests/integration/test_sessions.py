"""Sessions without containers: the hooks merge, the agent's reported state read as hostile
data, the screen fallback, the bounded log, records, attach commands, notifications on a
real tmux server, and the registry's continue flag."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from conftest import eventually, require_tool

from chtop_tasks.agents.registry import load_registry, parse_entry
from chtop_tasks.core.atomic import write_atomic
from chtop_tasks.core.errors import PolicyError, Refused, UsageError
from chtop_tasks.sandbox import agent_settings as hooks
from chtop_tasks.sessions import agent_state, notify, records, screenlog, tmux

# -- hooks: the user's settings plus chtop's, rendered host-side, never dropping the user's own ----

def install(tmp_path, content: str | None = None) -> tuple[bool, Path]:
    """agent_settings.install_settings from a user's settings file holding ``content`` (none: absent)."""
    users, dest = tmp_path / "users.json", tmp_path / "rendered.json"
    if content is not None:
        users.write_text(content)
    return hooks.install_settings(users, dest), dest


def test_hooks_merge_keeps_the_users_settings_and_hooks_and_is_idempotent(tmp_path):
    user_hook = {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo mine"}]}
    users = json.dumps({"model": "opus", "hooks": {"PreToolUse": [user_hook]}})
    changed, dest = install(tmp_path, users)
    assert changed is True
    first = json.loads(dest.read_text())
    assert first["model"] == "opus" and first["skipDangerousModePermissionPrompt"] is True
    assert user_hook in first["hooks"]["PreToolUse"]
    for event in hooks.EVENTS:
        ours = [e for e in first["hooks"][event] if hooks.MARKER in json.dumps(e)]
        assert len(ours) == 1, event
    assert install(tmp_path, users)[0] is False                    # a second run changes nothing
    assert json.loads(dest.read_text()) == first
    assert (tmp_path / "users.json").read_text() == users           # the user's file is never written
    assert dest.stat().st_mode & 0o777 == 0o644                     # mounted read-only, readable inside


def test_the_users_own_answer_to_the_bypass_question_is_kept(tmp_path):
    _, dest = install(tmp_path, json.dumps({"skipDangerousModePermissionPrompt": False}))
    assert json.loads(dest.read_text())["skipDangerousModePermissionPrompt"] is False


def test_hooks_replace_an_older_chtop_entry_instead_of_adding_a_second(tmp_path):
    old = {"hooks": [{"type": "command", "command": f"echo old  # {hooks.MARKER}"}]}
    _, dest = install(tmp_path, json.dumps({"hooks": {"Stop": [old]}}))
    stop = json.loads(dest.read_text())["hooks"]["Stop"]
    assert old not in stop and len(stop) == 1


@pytest.mark.parametrize("content", [None, "", "   \n"])
def test_hooks_install_from_a_missing_or_empty_file(tmp_path, content):
    changed, dest = install(tmp_path, content)
    assert changed
    assert set(json.loads(dest.read_text())["hooks"]) == set(hooks.EVENTS)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"hooks": []}'])
def test_hooks_refuse_an_unparsable_users_file_and_write_nothing(tmp_path, content):
    with pytest.raises(Refused, match="users.json"):
        install(tmp_path, content)
    assert (tmp_path / "users.json").read_text() == content
    assert not (tmp_path / "rendered.json").exists()


def test_a_users_settings_file_that_is_a_link_or_a_fifo_is_refused_without_blocking(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text('{"hooks": {}}')
    (tmp_path / "users.json").symlink_to(victim)
    with pytest.raises(Refused, match="not a regular file"):
        install(tmp_path)
    (tmp_path / "users.json").unlink()
    os.mkfifo(tmp_path / "users.json")
    began = time.monotonic()
    with pytest.raises(Refused, match="not a regular file"):
        install(tmp_path)
    assert time.monotonic() - began < 1


def test_hook_command_writes_the_state_only_in_a_session_and_always_exits_0(tmp_path):
    cfg = tmp_path / "claude"
    cfg.mkdir()
    cmd = hooks.hook_command("waiting")
    env = dict(os.environ, CLAUDE_CONFIG_DIR=str(cfg))
    env.pop("CHTOP_SESSION", None)
    assert subprocess.run(["bash", "-c", cmd], env=env).returncode == 0
    assert not (cfg / "chtop-state").exists()                       # a foreground run writes nothing
    env["CHTOP_SESSION"] = "abcdef0123456789"
    assert subprocess.run(["bash", "-c", cmd], env=env, input=b'{"hook_event_name": "x"}').returncode == 0
    reported = agent_state.read_reported(cfg / "chtop-state" / "abcdef0123456789")
    assert reported is not None and reported.state == "waiting"
    (cfg / "chtop-state").chmod(0o500)
    try:
        if os.geteuid() != 0:
            assert subprocess.run(["bash", "-c", cmd], env=env).returncode == 0   # never fails the agent
    finally:
        (cfg / "chtop-state").chmod(0o700)


# -- the reported state: display data from a stranger ---------------------------------------------

def test_reported_state_accepts_only_small_regular_files_with_an_allowed_word(tmp_path):
    good = tmp_path / "good"
    good.write_text("idle\n")
    assert agent_state.read_reported(good).state == "idle"
    for name, content in (("bad", "rm -rf /\n"), ("lost", "lost\n"), ("big", "working" + " " * 100)):
        (tmp_path / name).write_text(content)
        assert agent_state.read_reported(tmp_path / name) is None, name
    (tmp_path / "link").symlink_to(good)
    assert agent_state.read_reported(tmp_path / "link") is None
    os.mkfifo(tmp_path / "fifo")
    began = time.monotonic()
    assert agent_state.read_reported(tmp_path / "fifo") is None    # no writer: must not block
    assert time.monotonic() - began < 10               # a blocking open would never return
    assert agent_state.read_reported(tmp_path / "absent") is None
    with pytest.raises(ValueError):
        agent_state.hook_state_path(tmp_path, "../../etc/passwd")


def test_current_state_ignores_a_report_older_than_this_run(tmp_path):
    screen = "working"
    old = agent_state.Reported("idle", mtime=100.0)
    assert agent_state.current_state(old, started_at=200.0, screen_state=screen) == "working"
    fresh = agent_state.Reported("waiting", mtime=300.0)
    assert agent_state.current_state(fresh, started_at=200.0, screen_state=screen) == "waiting"
    # a hooked agent that has not reported yet, standing still, waits for the user (first-run questions)
    assert agent_state.current_state(None, 200.0, "idle", hooked=True) == "waiting"
    assert agent_state.current_state(None, 200.0, "idle", hooked=False) == "idle"
    assert agent_state.current_state(None, 200.0, "working", hooked=True) == "working"


def test_screen_activity_is_working_while_it_changes_and_idle_once_it_stands_still():
    watch = agent_state.ScreenActivity(idle_after=5)
    assert watch.observe("a", 0) == "working"
    assert watch.observe("b", 3) == "working"
    assert watch.observe("b", 7) == "working"
    assert watch.observe("b", 8.5) == "idle"
    assert watch.observe("c", 9) == "working"


# -- the log and the records ----------------------------------------------------------------------

def test_log_writer_rotates_so_the_log_stays_bounded(tmp_path):
    path = tmp_path / "s.log"
    data = b"".join(f"line {i}\n".encode() for i in range(3000))
    screenlog.append_bounded(path, io.BufferedReader(io.BytesIO(data), buffer_size=512), max_bytes=4096)
    rotated = path.with_name("s.log.1")
    assert path.stat().st_size <= 4096 and rotated.stat().st_size <= 4096
    assert (rotated.read_bytes() + path.read_bytes()) == data[-(rotated.stat().st_size + path.stat().st_size):]
    assert path.stat().st_mode & 0o777 == 0o600


def test_log_writer_runs_as_the_pipe_pane_command(tmp_path):
    path = tmp_path / "p.log"
    proc = subprocess.run([sys.executable, "-m", "chtop_tasks.sessions.screenlog", str(path)],
                          input=b"\x1b[1mhello\x1b[0m screen\r\n", capture_output=True)
    assert proc.returncode == 0
    assert path.read_bytes() == b"\x1b[1mhello\x1b[0m screen\r\n"


def test_the_log_is_shown_as_plain_lines():
    raw = b"\x1b[?25l\x1b[1mThe\x1b[1Clong\x1b[3Cone\x1b[0m\r\n\x1b]0;title\x07done\x1b[2K\rnext"
    assert screenlog.readable(raw) == b"The long   one\ndone\nnext"


def test_session_log_prefers_the_kept_screen_copy_to_the_stream(tmp_path):
    group = tmp_path / "grp"
    records.sessions_dir(group, create=True)
    records.log_path(group, "dev").write_bytes(b"\x1b[1mstream\x1b[0m\r\n")
    assert screenlog.session_log(group, "dev") == b"stream\n"
    assert screenlog.session_log(group, "dev", raw=True) == b"\x1b[1mstream\x1b[0m\r\n"
    write_atomic(records.screen_path(group, "dev"), "rendered screen\n", mode=0o600)
    assert screenlog.session_log(group, "dev") == b"rendered screen\n"


def test_records_round_trip_and_update_only_their_own_run(tmp_path):
    group = tmp_path / "grp"
    rec = records.Record(worktree="dev", root="/r", group=str(group), policy_dir="/p", agent="claude",
                         args=["-p", "two words"], continue_=False, session_id="a" * 16,
                         tmux_socket="/s", tmux_session="chtop-dev", started_at=1.0)
    records.save(group, rec)
    assert records.load(group, "dev") == rec
    assert records.update(group, "dev", "b" * 16, state="idle") is None   # a stale run changes nothing
    assert records.update(group, "dev", "a" * 16, state="idle").state == "idle"
    assert [r.worktree for r in records.load_all(group)] == ["dev"]
    assert (records.sessions_dir(group)).stat().st_mode & 0o777 == 0o700
    records.remove(group, "dev")
    assert records.load_all(group) == []


# -- tmux: names, attach commands, notifications on a real server ---------------------------------

def test_session_names_are_distinct_for_names_tmux_would_merge():
    assert tmux.session_name("dev") == "chtop-dev"
    assert tmux.session_name("a.b") != tmux.session_name("a_b")
    assert "." not in tmux.session_name("a.b")


def test_attach_argv_switches_inside_our_server_and_unsets_tmux_inside_another(tmp_path):
    sock = tmp_path / "tmux.sock"
    sock.write_text("")
    plain = tmux.attach_argv(sock, "chtop-dev", env={})
    assert plain[-4:] == [str(sock), "attach-session", "-t", "=chtop-dev"]
    inside_ours = tmux.attach_argv(sock, "chtop-dev", env={"TMUX": f"{sock},123,0"})
    assert inside_ours[-3:] == ["switch-client", "-t", "=chtop-dev"]
    inside_other = tmux.attach_argv(sock, "chtop-dev", env={"TMUX": "/tmp/other.sock,5,0"})
    assert inside_other[:3] == ["env", "-u", "TMUX"] and "attach-session" in inside_other


def test_notify_command_comes_from_the_users_config_and_must_be_an_argv(tmp_path):
    cfg = tmp_path / "config.toml"
    assert notify.notify_command(cfg) == []
    cfg.write_text('notify = ["notify-send", "chtop"]\n')
    assert notify.notify_command(cfg) == ["notify-send", "chtop"]
    cfg.write_text('notify = "notify-send $(id)"\n')
    with pytest.raises(PolicyError, match="list of non-empty strings"):
        notify.notify_command(cfg)


def test_notify_shows_a_message_on_attached_clients_rings_and_runs_the_users_command(tmp_path, hermetic):
    require_tool("tmux")
    sock = tmp_path / "t.sock"
    out = tmp_path / "notified"
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        f'notify = ["sh", "-c", "echo \\"$@\\" >> {out}", "notify"]\n')
    subprocess.run(["tmux", "-S", str(sock), "-f", "/dev/null", "new-session", "-d", "-s", "chtop-dev",
                    "sleep 60"], check=True)
    client = pexpect.spawn("tmux", ["-S", str(sock), "attach-session", "-t", "=chtop-dev"],
                           dimensions=(24, 100), env=dict(os.environ, TERM="xterm"), encoding="utf-8",
                           codec_errors="replace", timeout=20)
    try:
        eventually(lambda: tmux.clients(sock), "the client to attach", timeout=20, interval=0.1)
        r, w = os.pipe()
        thread = notify.notify(sock, "dev", "waiting", pane_fd=w)
        client.expect("dev's agent is waiting for you")
        assert os.read(r, 10) == b"\a"
        thread.join(10)
        assert out.read_text() == "dev waiting\n"
    finally:
        client.close(force=True)
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], check=False)


# -- the registry's continue flag -----------------------------------------------------------------

def test_registry_continue_flags_go_before_the_users_args():
    registry = load_registry()
    assert registry["claude"].argv(["-p", "x"], continue_=True) == [
        "claude", "--dangerously-skip-permissions", "--continue", "-p", "x"]
    assert registry["codex"].argv([], continue_=True)[-2:] == ["resume", "--last"]
    assert registry["claude"].argv(["x"]) == ["claude", "--dangerously-skip-permissions", "x"]


def test_an_agent_without_a_continue_flag_refuses_continue():
    agent = parse_entry("plain", {"command": ["plain"]}, "test")
    with pytest.raises(UsageError, match="continue_args"):
        agent.argv([], continue_=True)
    with pytest.raises(PolicyError, match="continue_args"):
        parse_entry("bad", {"command": ["x"], "continue_args": "--continue"}, "test")


# -- the tasks' doors -----------------------------------------------------------------------------

def test_session_tasks_outside_a_workspace_say_so(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    for args in (("session.list",), ("session.start",)):
        proc = subprocess.run([sys.executable, "-m", "invoke", "-r", str(Path(__file__).resolve().parents[2]),
                               *args], cwd=project, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "workspace" in proc.stderr


def test_unknown_session_names_are_errors(tmp_path):
    from chtop_tasks.sessions import attach_argv, session_log, stop_session

    # no such worktree: the same answer from each (one without a session: Refused, test_jump)
    for call in (stop_session, attach_argv, session_log):
        with pytest.raises(UsageError, match=r"no worktree 'nope' in .* \(worktrees: none yet\)"):
            call(tmp_path, "nope")
    assert tmux.has_session(tmp_path / "absent.sock", "chtop-x") is False


def test_a_pane_process_without_its_environment_records_why_and_exits_1(tmp_path):
    require_tool("tmux")
    from chtop_tasks.sessions import pane

    group = tmp_path / "grp"
    rec = records.Record(worktree="dev", root=str(tmp_path), group=str(group), policy_dir="/p", agent="claude",
                         args=[], continue_=False, session_id="c" * 16, tmux_socket=str(tmp_path / "none.sock"),
                         tmux_session="chtop-dev", started_at=1.0)
    records.save(group, rec)
    assert pane.run(group, "dev", "c" * 16) == 1
    after = records.load(group, "dev")
    assert (after.status, after.exit_status) == ("exited", 1)
    assert "environment handed over" in after.error
    assert pane.run(group, "dev", "d" * 16) == 1          # another run's id: touches nothing


def test_the_pane_process_keeps_its_bytecode_where_inv_does(monkeypatch):
    """The tmux server may have been started with another environment: the pane's python is told
    the bytecode cache outright, so it never reads a __pycache__ beside the (agent-writable) code."""
    from chtop_tasks.sessions.lifecycle import _python_module

    monkeypatch.setattr(sys, "pycache_prefix", "/home/u/.cache/chtop/pycache")
    argv = _python_module("chtop_tasks.sessions.pane", "G", "dev", "s1")
    assert "PYTHONPYCACHEPREFIX=/home/u/.cache/chtop/pycache" in argv[:argv.index(sys.executable)]
    assert argv[argv.index(sys.executable):] == [sys.executable, "-m", "chtop_tasks.sessions.pane", "G", "dev", "s1"]
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert not any(a.startswith("PYTHONPYCACHEPREFIX=") for a in _python_module("m"))
