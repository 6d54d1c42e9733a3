"""`agent.login`: a login file moved into the group's host-only store (0600, renamed into place), claude's own
login run on the host with a config dir of its own, `--status` that never shows a token, and bad input
refused with the fix, changing nothing.  Run as `chtop` outside a workspace: the --dir group's store."""

from __future__ import annotations

import json
import os
import stat
import time

from test_cli import chtop

from chtop_tasks.core.places import login_store_path, user_config_dir

LOGIN = {"claudeAiOauth": {"accessToken": "sk-ant-oat01-access-0123", "refreshToken": "sk-ant-ort01-refresh-4567",
                           "expiresAt": int((time.time() + 7200) * 1000), "scopes": ["user:inference"],
                           "subscriptionType": "max"}}


def store():
    return login_store_path(user_config_dir(), "claude")


def no_token_in(text: str) -> bool:
    return all(LOGIN["claudeAiOauth"][k] not in text for k in ("accessToken", "refreshToken"))


def test_a_login_file_is_moved_into_the_store_and_status_never_shows_a_token(tmp_path):
    source = tmp_path / ".credentials.json"
    source.write_text(json.dumps(LOGIN))
    result = chtop(tmp_path, "agent.login", "--from", str(source))
    assert result.returncode == 0, result.stderr
    assert not source.exists()
    assert json.loads(store().read_text()) == LOGIN
    assert stat.S_IMODE(store().stat().st_mode) == 0o600 and stat.S_IMODE(store().parent.stat().st_mode) == 0o700
    assert "a subscription login (max) is held" in result.stdout and "expires at" in result.stdout
    status = chtop(tmp_path, "agent.login", "--status")
    assert status.returncode == 0 and ("(in 1h 59m)" in status.stdout or "(in 2h 00m)" in status.stdout)
    assert no_token_in(result.stdout + result.stderr + status.stdout + status.stderr)


def test_bad_login_files_are_refused_with_the_fix_and_change_nothing(tmp_path):
    result = chtop(tmp_path, "agent.login", "--from", str(tmp_path / "missing.json"))
    assert result.returncode == 2
    assert "no such login file" in result.stderr and "chtop agent.login --from ~/.claude/.credentials.json" in result.stderr
    for bad, why in (("{}", "no claudeAiOauth object"), ('{"claudeAiOauth": {"accessToken": "a"}}', "refreshToken"),
                     ("not json", "not JSON")):
        source = tmp_path / "bad.json"
        source.write_text(bad)
        result = chtop(tmp_path, "agent.login", "--from", str(source))
        assert result.returncode == 2 and why in result.stderr, result.stderr
        assert source.read_text() == bad
    assert not store().exists()
    status = chtop(tmp_path, "agent.login", "--status")
    assert "no subscription login held" in status.stdout and "chtop agent.login" in status.stdout


def test_claudes_own_login_runs_on_the_host_in_a_config_dir_of_its_own(tmp_path, monkeypatch):
    # a stand-in for `claude auth login` (the real one needs a browser and Anthropic's servers): it writes
    # its login where claude does, in CLAUDE_CONFIG_DIR
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'auth login' ] || exit 9\n"
                                    f"echo \"$CLAUDE_CONFIG_DIR\" > {tmp_path}/config-dir\n"
                                    f"printf '%s' '{json.dumps(LOGIN)}' > \"$CLAUDE_CONFIG_DIR/.credentials.json\"\n")
    (bin_dir / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    result = chtop(tmp_path, "agent.login")
    assert result.returncode == 0, result.stderr
    assert "claude auth login" in result.stderr                  # echoed, as every command run
    config_dir = (tmp_path / "config-dir").read_text().strip()
    assert config_dir.startswith(str(store().parent)) and not os.path.exists(config_dir)
    assert json.loads(store().read_text()) == LOGIN
    assert sorted(p.name for p in store().parent.iterdir()) == ["claude.json"]
