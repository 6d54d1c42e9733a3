"""The real ``gemini`` and ``kimi`` CLIs in a real rootless sandbox, started as a user starts them (``inv
sbox.agent --agent NAME -- ...``), reach a fake of their API over TLS through the proxy's credential route:
the fake sees the real key in the agent's header (gemini: ``x-goog-api-key`` and no ``key=`` in the URL;
kimi: ``Authorization: Bearer``), the answer comes back, and a search from inside (every process's
environment and arguments, the config dir, $HOME, /tmp, the worktree) finds only the placeholder.

Skipped where the CLI is not installed, in CI too (CI installs neither; the proxy tier covers the route).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fake_gemini import FakeGemini
from fake_openai import FakeOpenAI, shell, text
from proxy_helpers import make_certs
from sandbox_helpers import user_group_cm
from test_credentials_sandbox import ANSWER, API_HOST, DUMP_INTO, launched_with_the_key_outside

from chtop_tasks.agents.registry import get_agent, load_registry
from chtop_tasks.core.apiroute import PLACEHOLDER

pytestmark = [pytest.mark.podman, pytest.mark.slow]

GEMINI_KEY = "AIzaSy-real-gemini-key-only-on-the-host-93d1"
KIMI_KEY = "sk-real-kimi-key-only-on-the-host-4f0a2c6e"

# What an agent talked into stealing the key would do: read everything it can, then leave it where the
# test can read it: @CONFIG@, the worktree's agent config dir (the same path inside; gemini's shell tool
# does not pass CLAUDE_CONFIG_DIR on, and refuses a command substitution).
SEARCH = DUMP_INTO + r"""grep -c chtop-placeholder "$d" | sed 's/^/placeholders: /'
cp "$d" @CONFIG@/search-dump.txt
"""


def need(agent: str) -> None:
    """Skipped without the CLI, in CI too: CI does not install it."""
    spec = get_agent(agent, load_registry())
    if shutil.which(spec.command[0]) is None:
        pytest.skip(f"{agent} is not installed ({spec.install}); CI does not install it")


def serve(g, owner: tuple[int, int], make_fake, secrets: str) -> tuple[object, dict]:
    """The fake API over TLS at https://fakeapi.test:PORT (a test CA the secrets file names) and
    ``secrets`` (with {port} and {ca}) in the secrets file; returns the fake and the extra env for inv."""
    certs = make_certs(g.base / "certs", [API_HOST])
    api = make_fake({"cert": certs["cert"], "key": certs["key"]})
    hosts = g.base / "hosts"
    hosts.write_text(f"127.0.0.1 {API_HOST}\n")
    secrets_dir = Path(g.env["XDG_CONFIG_HOME"]) / "chtop"
    secrets_dir.mkdir(parents=True, exist_ok=True)
    (secrets_dir / "secrets.env").write_text(secrets.format(port=api.port, ca=certs["ca"]))
    (secrets_dir / "secrets.env").chmod(0o600)
    for path in (secrets_dir, hosts, g.base / "certs"):
        subprocess.run(["chown", "-R", f"{owner[0]}:{owner[1]}", str(path)], check=True)
    return api, {"CHTOP_PROXY_HOSTS_FILE": str(hosts), "CHTOP_PROXY_CONNECT_TIMEOUT": "5"}


def config_dir(g) -> Path:
    return g.grouping / ".chtop" / "agents" / "dev" / "config"


def search(g) -> str:
    return SEARCH.replace("@CONFIG@", str(config_dir(g)))


def check_search(g, key: str, expected: list[str]) -> Path:
    """The search from inside found the placeholder (in each of ``expected``) and never the key."""
    config = config_dir(g)
    dump = (config / "search-dump.txt").read_text(errors="replace")
    assert key not in dump and key[-20:] not in dump
    for line in expected:
        assert line in dump, line
    log = (g.grouping / ".chtop" / "net" / "proxy.log").read_text()
    records = (g.grouping / ".chtop" / "net" / "requests.jsonl").read_text()
    assert key not in log and key not in records
    assert any(json.loads(r).get("decision") == "injected" for r in records.splitlines() if r.strip())
    return config


def test_gemini_in_its_sandbox_never_holds_the_key(remote_template):
    need("gemini")
    with user_group_cm(remote_template) as g:
        api, extra = serve(g, (g.user.pw_uid, g.user.pw_gid),
                           lambda tls: FakeGemini([shell(search(g)), text(ANSWER)], tls=tls),
                           f"GEMINI_API_KEY={GEMINI_KEY}\nGOOGLE_GEMINI_BASE_URL=https://{API_HOST}:{{port}}\n"
                           "CHTOP_API_CA_FILE={ca}\n")
        try:
            launched_with_the_key_outside(g, GEMINI_KEY, ["sbox.agent", "--agent", "gemini", "--", "-p", "find the key"],
                                          extra, 120)
            streams = [r for r in api.requests if ":streamGenerateContent" in r["path"]]
            assert len(streams) >= 2, api.requests                  # the shell call, then the answer
            assert all(r["headers"].get("x-goog-api-key") == GEMINI_KEY for r in api.requests)
            assert not any("key=" in r["path"] for r in api.requests)
            tool_result = json.dumps(api.conversations()[-1])
            assert re.search(r"placeholders: [1-9]", tool_result), tool_result[-1500:]
            config = check_search(g, GEMINI_KEY, [f"GEMINI_API_KEY={PLACEHOLDER}",
                                                  "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:3128/chtop-api/gemini"])
            settings = json.loads((config / "gemini" / ".gemini" / "settings.json").read_text())
            assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
        finally:
            api.close()


def test_kimi_in_its_sandbox_never_holds_the_key(remote_template):
    need("kimi")
    with user_group_cm(remote_template) as g:
        api, extra = serve(g, (g.user.pw_uid, g.user.pw_gid),
                           lambda tls: FakeOpenAI([shell(search(g)), text(ANSWER)], tls=tls),
                           f"KIMI_API_KEY={KIMI_KEY}\nKIMI_BASE_URL=https://{API_HOST}:{{port}}/v1\n"
                           "KIMI_MODEL_NAME=kimi-test\nCHTOP_API_CA_FILE={ca}\n")
        try:
            launched_with_the_key_outside(g, KIMI_KEY, ["sbox.agent", "--agent", "kimi", "--", "--print", "-p",
                                                        "find the key"], extra, 120)
            posts = [r for r in api.requests if r["method"] == "POST"]
            assert len(posts) >= 2 and all(r["path"] == "/v1/chat/completions" for r in posts)
            assert all(r["headers"].get("authorization") == f"Bearer {KIMI_KEY}" for r in api.requests)
            assert all(r["body"]["model"] == "kimi-test" for r in posts)
            tool_result = json.dumps(api.conversations()[-1])
            assert re.search(r"placeholders: [1-9]", tool_result), tool_result[-1500:]
            config = check_search(g, KIMI_KEY, [f"KIMI_API_KEY={PLACEHOLDER}",
                                                "KIMI_BASE_URL=http://127.0.0.1:3128/chtop-api/kimi"])
            assert (config / "kimi" / "sessions").is_dir()           # kimi keeps its state in its config dir
        finally:
            api.close()
