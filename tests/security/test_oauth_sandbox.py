"""Ten real ``claude -p`` sessions at once, in a real sandbox, through the group's one subscription login,
with the access token expired while they run: every session finishes, the proxy refreshed the login once
(the fake's token endpoint revokes a login whose refresh token is used twice), and a search from inside
finds neither token.  Rootless as the test user, and as root (rootful podman).

The sessions run in one sandbox (one worktree): the user's registry replaces ``claude``'s command with a
shell that starts the real ``claude -p`` ten times, each with a config dir of its own, so each is a
session of its own; it searches everything it can read while they run (test_credentials_sandbox's DUMP).  Each session's first turn runs a Bash command that waits for the test's go; the
test expires every access token, then says go; each second turn then meets a 401.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import eventually
from fake_anthropic import FakeAnthropic, bash, text
from proxy_helpers import make_certs
from sandbox_helpers import root_owned, rootful_podman_env, user_group_cm
from test_credentials_sandbox import API_HOST, DUMP, need_claude

from chtop_tasks.core.apiroute import PLACEHOLDER
from chtop_tasks.core.places import login_store_path

pytestmark = [pytest.mark.podman, pytest.mark.slow]

ANSWER = "Both turns are done."
SESSIONS = r"""
n=$1; w="$PWD"
for i in $(seq "$n"); do
  mkdir -p "$HOME/c$i"
  (CLAUDE_CONFIG_DIR="$HOME/c$i" claude --dangerously-skip-permissions -p "session $i" > "$HOME/out$i" 2>&1
   echo "exit:$?" >> "$HOME/out$i") &
done
until [ -e "$w/.chtop-dump" ]; do sleep 0.1; done
""" + DUMP + r"""
cp "$d" "$CLAUDE_CONFIG_DIR/search-dump.txt"; touch "$CLAUDE_CONFIG_DIR/.chtop-dumped"
wait
for i in $(seq "$n"); do echo "== session $i"; cat "$HOME/out$i"; done
"""
WAIT_FOR_GO = "until [ -e .chtop-go ]; do sleep 0.1; done; echo went"


def one_session(body: dict):
    """A session's first turn waits for the go; its second (after the Bash result) answers."""
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    return text(ANSWER) if answered else bash(WAIT_FOR_GO)


def prepare(g, owner: tuple[int, int], sessions: int) -> tuple[FakeAnthropic, dict, dict]:
    """The fake API and token endpoint over TLS, the group's login held, claude's command replaced by the
    shell that starts ``sessions`` sessions; (fake, the login, extra env for inv)."""
    certs = make_certs(g.base / "certs", [API_HOST])
    api = FakeAnthropic(one_session, tls=certs, oauth=True)
    login = api.issue_login()
    (g.base / "hosts").write_text(f"127.0.0.1 {API_HOST}\n")
    config = Path(g.env["XDG_CONFIG_HOME"]) / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "secrets.env").write_text(f"ANTHROPIC_BASE_URL=https://{API_HOST}:{api.port}\n"
                                        f"CHTOP_OAUTH_TOKEN_URL=https://{API_HOST}:{api.port}/v1/oauth/token\n"
                                        f"CHTOP_API_CA_FILE={certs['ca']}\n")
    (config / "secrets.env").chmod(0o600)
    (config / "agents.toml").write_text(f"""[claude]
command = ["sh", "-c", {json.dumps(SESSIONS)}, "sh", "{sessions}"]
credentials = ["CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
tokens = ["CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY"]
env = {{ DISABLE_AUTOUPDATER = "1" }}
api_base_env = "ANTHROPIC_BASE_URL"
api_upstream = "https://api.anthropic.com"
api_auth = {{ CLAUDE_CODE_OAUTH_TOKEN = "bearer", ANTHROPIC_API_KEY = "x-api-key" }}
oauth_token_url = "https://platform.claude.com/v1/oauth/token"
oauth_client_id = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
login_files = [".credentials.json"]
""")
    store = login_store_path(g.grouping, "claude")
    store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    store.write_text(json.dumps(login))
    store.chmod(0o600)
    for path in (config, g.base / "hosts", g.base / "certs", store.parent):
        subprocess.run(["chown", "-R", f"{owner[0]}:{owner[1]}", str(path)], check=True)
    extra = {"CHTOP_PROXY_HOSTS_FILE": str(g.base / "hosts"), "CHTOP_PROXY_CONNECT_TIMEOUT": "5"}
    return api, login, extra


def run_sessions(g, api: FakeAnthropic, login: dict, extra: dict, sessions: int) -> None:
    config = g.grouping / ".chtop" / "agents" / "dev" / "config"      # the worktree's agent config dir
    t0 = time.monotonic()
    done: list = []
    runner = threading.Thread(target=lambda: done.append(g.inv("sbox.claude", timeout=400, extra_env=extra)))
    runner.start()
    try:
        api.wait_for_turns(sessions, timeout=300)                  # every session waits in its first turn
        print(f"{sessions} sessions in their first turn after {time.monotonic() - t0:.1f}s")
        (g.dev / ".chtop-dump").touch()                           # the search from inside, while they run
        eventually(lambda: (config / ".chtop-dumped").exists(), "the search from inside", 120,
                   explain=lambda: f"the sandbox said: {done[0].stdout[-2000:]} {done[0].stderr[-2000:]}"
                                   if done else "the sandbox still runs")
        api.expire_access_tokens()
        api.token_delay = 1.0           # a slow token endpoint: the sessions' 401s meet while it refreshes
        (g.dev / ".chtop-go").touch()
    finally:
        runner.join(400)
    print(f"{sessions} sessions finished after {time.monotonic() - t0:.1f}s")
    proc = done[0]
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    assert proc.stdout.count(ANSWER) == sessions and proc.stdout.count("exit:0") == sessions, proc.stdout
    assert "the group's subscription login" in proc.stderr and "refreshes it" in proc.stderr
    assert [r["outcome"] for r in api.refreshes] == ["refreshed"] and not api.revoked
    messages = [r for r in api.requests if r["path"].split("?")[0].endswith("/v1/messages")]
    assert api.unauthorized >= 1                                  # the expired token met the upstream
    fresh = json.loads(login_store_path(g.grouping, "claude").read_text())["claudeAiOauth"]
    old = login["claudeAiOauth"]
    assert fresh["refreshToken"] != old["refreshToken"]
    answered = [r for r in messages if r["headers"].get("authorization") == f"Bearer {fresh['accessToken']}"]
    assert len(answered) >= sessions                               # every second turn, with the new token
    assert all("oauth-2025-04-20" in r["headers"].get("anthropic-beta", "") for r in messages)
    dump = (config / "search-dump.txt").read_text(errors="replace")
    for token in (old["accessToken"], old["refreshToken"], fresh["accessToken"], fresh["refreshToken"]):
        assert token not in dump and token[-20:] not in dump
    assert f"CLAUDE_CODE_OAUTH_TOKEN={PLACEHOLDER}" in dump
    assert dump.count(f"CLAUDE_CODE_OAUTH_TOKEN={PLACEHOLDER}") >= sessions   # every session's environment
    assert not (config / ".credentials.json").exists()
    net = g.grouping / ".chtop" / "net"
    records = [json.loads(line) for line in (net / "requests.jsonl").read_text().splitlines() if line.strip()]
    assert [r["outcome"] for r in records if r.get("decision") == "refresh"] == ["refreshed"]
    logs = (net / "requests.jsonl").read_text() + (net / "proxy.log").read_text()
    for token in (old["accessToken"], old["refreshToken"], fresh["accessToken"], fresh["refreshToken"]):
        assert token not in logs
    print(f"the fake: {len(messages)} Messages requests, {api.unauthorized} answered 401 (expired), "
          f"{len(answered)} with the refreshed token; token requests {[r['outcome'] for r in api.refreshes]}; "
          f"the search from inside: {dump.count(PLACEHOLDER)} placeholders, 0 of the 4 tokens")


def test_ten_sessions_through_one_login_survive_an_expiry(remote_template):
    need_claude()
    with user_group_cm(remote_template) as g:
        api, login, extra = prepare(g, (g.user.pw_uid, g.user.pw_gid), 10)
        try:
            run_sessions(g, api, login, extra, 10)
        finally:
            api.close()


@pytest.mark.rootful
def test_as_root_ten_sessions_through_one_login_survive_an_expiry(remote_template, tmp_path):
    need_claude()
    with user_group_cm(remote_template) as group:
        g = root_owned(group, rootful_podman_env(tmp_path))
        api, login, extra = prepare(g, (0, 0), 10)
        try:
            run_sessions(g, api, login, extra, 10)
        finally:
            api.close()
