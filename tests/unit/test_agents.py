"""The agent registry, the secrets file and the launch guards (no podman)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from chtop_tasks.agents import registry as agents
from chtop_tasks.agents import secrets
from chtop_tasks.core import places
from chtop_tasks.core.apiroute import PLACEHOLDER
from chtop_tasks.core.errors import PolicyError, Refused, UsageError
from chtop_tasks.core.passthrough import run_interactive
from chtop_tasks.workspace import targets


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


def write_secrets(home: Path, text: str, mode: int = 0o600) -> Path:
    path = secrets.secrets_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# -- registry ---------------------------------------------------------------

def test_shipped_registry_has_the_agents_and_their_flags(home):
    registry = agents.load_registry(home=home)
    assert registry["claude"].argv(["-p", "a b"]) == ["claude", "--dangerously-skip-permissions", "-p", "a b"]
    assert registry["kimi"].argv([]) == ["kimi", "--yolo"]
    assert registry["codex"].skip_permissions == ("--dangerously-bypass-approvals-and-sandbox",)
    assert registry["gemini"].argv(["--resume"]) == ["gemini", "--yolo", "--resume"]
    assert "CLAUDE_CODE_OAUTH_TOKEN" in registry["claude"].credentials
    assert "KIMI_API_KEY" in registry["kimi"].credentials
    assert registry["claude"].login_files == (".credentials.json",) and registry["codex"].login_files == ("auth.json",)


STAND_IN = """\
#!/usr/bin/env python3
import os, sys
print("STAND-IN ARGS", sys.argv[1:])
print("STAND-IN KEY", os.environ.get("STANDIN_KEY"), os.environ.get("OTHER_SECRET"))
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
"""


def register_stand_in(home: Path, tmp_path: Path) -> Path:
    script = tmp_path / "stand-in-agent"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    user = places.user_config_dir(home) / "agents.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(
        f'[standin]\ncommand = ["{script}"]\nskip_permissions = ["--yolo-standin"]\n'
        'credentials = ["STANDIN_KEY"]\ntokens = ["STANDIN_KEY"]\nenv = { STANDIN_EXIT = "3" }\n'
    )
    return script


def test_stand_in_agent_registered_as_data_runs_with_its_flag(home, tmp_path, capfd):
    register_stand_in(home, tmp_path)
    agent = agents.get_agent("standin", agents.load_registry(home=home))
    write_secrets(home, "STANDIN_KEY=k-123\nOTHER_SECRET=nope\n")
    env, notes = agents.agent_env(agent, secrets.load_secrets(), tmp_path, secrets.secrets_path())
    assert env == {"STANDIN_KEY": "k-123", "STANDIN_EXIT": "3"}  # OTHER_SECRET is not its credential
    assert "authenticating with STANDIN_KEY" in notes[0]
    with open(os.devnull) as devnull:
        status = run_interactive(agent.argv(["two words", "--x"]), env={**os.environ, **env},
                                 stdin_fd=devnull.fileno())
    out = capfd.readouterr().out
    assert "STAND-IN ARGS ['--yolo-standin', 'two words', '--x']" in out
    assert "STAND-IN KEY k-123 None" in out
    assert status == 3


def test_user_registry_overrides_and_unknown_agent_is_usage_error(home, tmp_path):
    register_stand_in(home, tmp_path)
    registry = agents.load_registry(home=home)
    assert {"claude", "kimi", "codex", "gemini", "standin"} <= set(registry)
    with pytest.raises(UsageError, match="unknown agent 'nope'"):
        agents.get_agent("nope", registry)


@pytest.mark.parametrize(
    "table, message",
    [
        ('[x]\nskip_permissions = ["-y"]\n', "needs command"),
        ('[x]\ncommand = "x --yolo"\n', "list of non-empty strings"),
        ('[x]\ncommand = ["x"]\ncredentials = ["BAD-NAME"]\n', "not a variable name"),
        ('[x]\ncommand = ["x"]\ntokens = ["T"]\n', "tokens not listed"),
        ('[x]\ncommand = ["x"]\nflavour = 1\n', "unknown key"),
        ('[x]\ncommand = ["x"]\nconfig_subdir = "../up"\n', "plain directory"),
        ('[x]\ncommand = ["x"]\nlogin_files = ["../../.ssh/id_rsa"]\n', "file name in its config dir"),
        ("[x\n", "agents.toml"),
        ('[x]\ncommand = ["x"]\ncredentials = ["HTTPS_PROXY"]\n', "set by the sandbox"),
        ('[x]\ncommand = ["x"]\nenv = { IS_SANDBOX = "0" }\n', "set by the sandbox"),
        ('[Bad_Name]\ncommand = ["x"]\n', "lowercase"),
        ('[x]\ncommand = ["x"]\napi_auth = { K = "x-api-key" }\n', "credentials does not list"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_auth = { K = "x-api-key" }\n', "needs api_base_env"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_auth = { K = "a b" }\n', "not a scheme the proxy speaks"),
        # a header the proxy would not drop when a sandbox sends it: refused, its schemes named
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_auth = { K = "x-custom-key" }\n',
         "use one of bearer, x-api-key, x-goog-api-key"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_base_env = "B"\napi_upstream = "https://a"\n'
         'api_auth = { K = "bearer" }\napi_base_args = ["--base-url"]\n', "put {url}"),
        ('[x]\ncommand = ["x"]\napi_base_args = ["--url={url}"]\n', "they need api_auth"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_base_env = "B"\napi_upstream = "https://a"\n'
         'api_auth = { K = "bearer" }\napi_key_file = { name = "auth.json", text = "{placeholder}" }\n',
         "one of its login_files"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_base_env = "B"\napi_upstream = "https://a"\n'
         'api_auth = { K = "bearer" }\nlogin_files = ["a"]\napi_key_file = { name = "a", text = "key" }\n',
         "with {placeholder} where the key goes"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\ntokens = ["K"]\ntoken_aliases = { K = ["HTTP_PROXY"] }\n',
         "not a variable the agent can be given"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\ntoken_aliases = { K = ["A"] }\n', "which tokens does not list"),
        ('[x]\ncommand = ["x"]\nno_route_note = "gone"\n', "unknown key"),
        ('[x]\ncommand = ["x"]\ncredentials = ["K"]\napi_base_env = "B"\napi_upstream = "https://a"\n'
         'api_auth = { K = "bearer" }\nroute_files = { "../up/settings.json" = "{}" }\n', "no . or .. parts"),
        ('[x]\ncommand = ["x"]\nroute_files = { "s.json" = "{}" }\n', "they need api_auth"),
        ('[x]\ncommand = ["x"]\ncredentials_inside = "yes"\n', "true or false"),
        ('[x]\ncommand = ["x"]\noauth_token_url = "https://t.example/token"\n', "oauth_token_url needs"),
    ],
)
def test_bad_registry_entries_are_refused(home, table, message):
    path = places.user_config_dir(home) / "agents.toml"
    path.parent.mkdir(parents=True)
    path.write_text(table)
    with pytest.raises(PolicyError, match=message):
        agents.load_registry(home=home)


def test_claude_prefers_a_long_lived_token_and_says_so(home, tmp_path):
    claude = agents.load_registry(home=home)["claude"]
    src = Path("secrets.env")
    env, notes = agents.agent_env(claude, {"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat", "ANTHROPIC_API_KEY": "k"},
                                  tmp_path / "claude", src)
    # the token stays on the host: a placeholder and the proxy's route inside, the other key held too
    assert env == {"CLAUDE_CODE_OAUTH_TOKEN": PLACEHOLDER, "DISABLE_AUTOUPDATER": "1",
                   "ANTHROPIC_BASE_URL": "http://127.0.0.1:3128/chtop-api/claude"}
    assert "authenticating with CLAUDE_CODE_OAUTH_TOKEN" in notes[0]
    assert "stays on the host, the proxy adds it for https://api.anthropic.com" in notes[0]
    env, notes = agents.agent_env(claude, {}, tmp_path / "claude", src)
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in env
    assert "inv agent.login" in notes[0] and "claude setup-token" in notes[0]
    codex = agents.load_registry(home=home)["codex"]
    env, _ = agents.agent_env(codex, {}, tmp_path / "claude", src)
    assert env["CODEX_HOME"] == str(tmp_path / "claude" / "codex")


def test_a_held_login_gives_claude_a_placeholder_token_and_a_key_comes_first(home, tmp_path):
    claude = agents.load_registry(home=home)["claude"]
    src, login = Path("secrets.env"), tmp_path / "logins" / "claude.json"
    env, notes = agents.agent_env(claude, {}, tmp_path / "claude", src, login=login)
    assert env == {"CLAUDE_CODE_OAUTH_TOKEN": PLACEHOLDER, "DISABLE_AUTOUPDATER": "1",
                   "ANTHROPIC_BASE_URL": "http://127.0.0.1:3128/chtop-api/claude"}
    assert f"the group's subscription login ({login})" in notes[0] and "refreshes it" in notes[0]
    env, notes = agents.agent_env(claude, {"ANTHROPIC_API_KEY": "k"}, tmp_path / "claude", src, login=login)
    assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER and "CLAUDE_CODE_OAUTH_TOKEN" not in env
    env, notes = agents.agent_env(claude, {}, tmp_path / "claude", src, proxied=False, login=login)
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in env and "inv agent.login" in notes[0]


def test_credentials_inside_is_an_opt_in_said_at_launch(home, tmp_path):
    secrets = {"ANTHROPIC_API_KEY": "sk-real", "ANTHROPIC_BASE_URL": "https://gw.example"}
    # without the proxy (--network open or host) there is no route: inside, and said
    shipped_claude = agents.load_registry(home=home)["claude"]
    env, notes = agents.agent_env(shipped_claude, secrets, tmp_path / "claude", Path("secrets.env"), proxied=False)
    assert env["ANTHROPIC_API_KEY"] == "sk-real" and "no credential route" in notes[0]
    path = places.user_config_dir(home) / "agents.toml"
    path.parent.mkdir(parents=True)
    shipped = agents.REGISTRY_FILE.read_text().split("[kimi]")[0]
    path.write_text(shipped + "credentials_inside = true\n")
    claude = agents.load_registry(home=home)["claude"]
    env, notes = agents.agent_env(claude, secrets, tmp_path / "claude", Path("secrets.env"))
    assert env["ANTHROPIC_API_KEY"] == "sk-real" and env["ANTHROPIC_BASE_URL"] == "https://gw.example"
    assert "ANTHROPIC_API_KEY is passed INTO the sandbox (credentials_inside = true)" in notes[0]


ROUTED = {  # agent -> (its secrets, the token the proxy adds, its base URL variable, the upstream said)
    "claude": ({"ANTHROPIC_API_KEY": "sk-ant-real"}, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
               "https://api.anthropic.com"),
    "kimi": ({"KIMI_API_KEY": "sk-kimi-real", "KIMI_MODEL_NAME": "kimi-k2"}, "KIMI_API_KEY", "KIMI_BASE_URL",
             "https://api.moonshot.ai/v1"),
    "gemini": ({"GEMINI_API_KEY": "AIza-real", "GOOGLE_GEMINI_BASE_URL": "https://gw.example/gemini"},
               "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "https://gw.example/gemini"),
    "codex": ({"OPENAI_API_KEY": "sk-proj-real"}, "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"),
}


@pytest.mark.parametrize("name", sorted(ROUTED))
def test_each_routed_agent_gets_the_route_and_the_placeholder_never_its_key(home, tmp_path, name):
    secrets, token, base_env, upstream = ROUTED[name]
    agent = agents.load_registry(home=home)[name]
    env, notes = agents.agent_env(agent, secrets, tmp_path / "config", Path("secrets.env"))
    assert env[token] == PLACEHOLDER and env[base_env] == f"http://127.0.0.1:3128/chtop-api/{name}"
    assert secrets[token] not in env.values() and upstream not in env.values()   # nor a gateway from the file
    assert f"{token} from secrets.env; it stays on the host, the proxy adds it for {upstream}" in notes[0]
    # without the proxy there is no route: inside, and said
    env, notes = agents.agent_env(agent, secrets, tmp_path / "config", Path("secrets.env"), proxied=False)
    assert env[token] == secrets[token] and "no credential route" in notes[0]


def test_gemini_and_codex_with_credentials_inside_say_their_key_goes_in(home, tmp_path):
    path = places.user_config_dir(home) / "agents.toml"
    path.parent.mkdir(parents=True)
    shipped = agents.REGISTRY_FILE.read_text()
    path.write_text(shipped[shipped.index("[codex]"):].replace("\n[gemini]", "credentials_inside = true\n[gemini]")
                    + "credentials_inside = true\n")
    registry = agents.load_registry(home=home)
    env, notes = agents.agent_env(registry["gemini"], {"GEMINI_API_KEY": "AIza-real"}, tmp_path, Path("s.env"))
    assert env["GEMINI_API_KEY"] == "AIza-real" and "GOOGLE_GEMINI_BASE_URL" not in env
    assert "GEMINI_API_KEY is passed INTO the sandbox (credentials_inside = true)" in notes[0]
    # codex exec reads CODEX_API_KEY, not OPENAI_API_KEY: the key goes in under both names
    env, notes = agents.agent_env(registry["codex"], {"OPENAI_API_KEY": "sk-real"}, tmp_path, Path("s.env"))
    assert env["OPENAI_API_KEY"] == env["CODEX_API_KEY"] == "sk-real" and "OPENAI_BASE_URL" not in env
    assert "OPENAI_API_KEY is passed INTO the sandbox (credentials_inside = true)" in notes[0]
    assert registry["codex"].argv(["exec", "hi"]) == ["codex", "--dangerously-bypass-approvals-and-sandbox",
                                                      "exec", "hi"]


def codex_request(home, tmp_path, monkeypatch, secrets_text: str, args=("exec", "hi"), **kwargs):
    """``sbox.agent --agent codex -- ARGS`` as planned for a --dir target (a stand-in codex on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "codex").write_text("#!/bin/sh\n")
    (bin_dir / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    write_secrets(home, secrets_text)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return agents.agent_request("codex", list(args), work, interactive=False, dir=work, **kwargs)


def test_codex_gets_the_route_on_its_command_line_and_a_placeholder_login(home, tmp_path, monkeypatch):
    request = codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n")
    route = "http://127.0.0.1:3128/chtop-api/codex"
    # -c is codex's global option: before the subcommand, so exec, resume and the TUI all take it
    assert request.command == ["codex", "-c", f"openai_base_url={route}",
                               "--dangerously-bypass-approvals-and-sandbox", "exec", "hi"]
    env = request.extra_env
    assert env["CODEX_API_KEY"] == env["OPENAI_API_KEY"] == PLACEHOLDER and env["OPENAI_BASE_URL"] == route
    assert "sk-proj-real-key" not in repr(request)
    assert request.login_defaults == (("codex/auth.json",
                                       f'{{"auth_mode": "apikey", "OPENAI_API_KEY": "{PLACEHOLDER}"}}'.encode()),)
    assert any("stays on the host, the proxy adds it for https://api.openai.com/v1" in n for n in request.notes)
    request = codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n", args=(),
                            continue_=True)
    assert request.command[1:3] == ["-c", f"openai_base_url={route}"] and request.command[-2:] == ["resume", "--last"]
    # --network open: no route, no -c, no placeholder file; the key goes in, under both names
    request = codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n", network="open")
    assert request.command == ["codex", "--dangerously-bypass-approvals-and-sandbox", "exec", "hi"]
    assert request.extra_env["CODEX_API_KEY"] == "sk-proj-real-key" and request.login_defaults == ()


def test_a_chatgpt_login_of_the_worktrees_own_is_kept_and_no_key_goes_in(home, tmp_path, monkeypatch):
    request = codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n")
    auth = Path(request.extra_env["CODEX_HOME"]) / "auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_text(f'{{"auth_mode": "apikey", "OPENAI_API_KEY": "{PLACEHOLDER}"}}')   # chtop's own: routed
    assert "-c" in codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n").command
    auth.write_text('{"OPENAI_API_KEY": null, "tokens": {"access_token": "chatgpt"}}')
    request = codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n")
    assert "-c" not in request.command and request.login_defaults == ()
    assert not {"OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL"} & set(request.extra_env)
    assert any(f"{auth} holds a login of its own, used as it is; OPENAI_API_KEY" in n for n in request.notes)
    # a link planted there is no login: never followed, and the route is used
    auth.unlink()
    auth.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text('{"tokens": {}}')
    assert "-c" in codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n").command


def test_a_placeholder_login_left_by_a_routed_launch_goes_when_the_route_is_not_used(home, tmp_path, monkeypatch):
    """Once the key is gone from the secrets file (or the key goes inside), codex must not find chtop's
    placeholder auth.json: it would send the placeholder instead of asking for a login."""
    from chtop_tasks.sandbox import agent_config as ac

    request = codex_request(home, tmp_path, monkeypatch, "OPENAI_API_KEY=sk-proj-real-key\n")
    auth = Path(request.extra_env["CODEX_HOME"]) / "auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_bytes(request.login_defaults[0][1])                   # what that launch wrote
    assert request.withheld_login_files == ()
    for secrets_text, kwargs in (("", {}), ("OPENAI_API_KEY=sk-proj-real-key\n", {"network": "open"})):
        request = codex_request(home, tmp_path, monkeypatch, secrets_text, **kwargs)
        assert request.withheld_login_files == ("codex/auth.json",) and request.login_defaults == ()
    cfg = ac.AgentConfig(auth.parent.parent.parent, tmp_path / "no-group-login", tmp_path, None, ("codex",),
                         ("codex/auth.json",), withheld=request.withheld_login_files)
    ac.prepare(cfg)
    assert not auth.exists()
    auth.write_text('{"tokens": {"access_token": "chatgpt"}}')      # a login of its own stays
    assert codex_request(home, tmp_path, monkeypatch, "").withheld_login_files == ()


def test_the_placeholder_login_is_written_only_where_none_is_never_through_a_link(tmp_path):
    from chtop_tasks.sandbox import agent_config as ac

    cfg = agent_config(tmp_path)
    cfg = ac.AgentConfig(cfg.home, cfg.login, cfg.root, None, cfg.subdirs, cfg.login_files,
                         login_defaults=(("codex/auth.json", b"placeholder login"),))
    ac.prepare(cfg)
    assert (cfg.config / "codex" / "auth.json").read_bytes() == b"placeholder login"
    assert (cfg.config / "codex" / "auth.json").stat().st_mode & 0o777 == 0o600
    (cfg.config / "codex" / "auth.json").write_text("codex login inside")
    ac.prepare(cfg)
    assert (cfg.config / "codex" / "auth.json").read_text() == "codex login inside"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (cfg.config / "codex" / "auth.json").unlink()
    (cfg.config / "codex" / "auth.json").symlink_to(victim)
    ac.prepare(cfg)
    assert victim.read_text() == "precious\n"
    assert not (cfg.config / "codex" / "auth.json").is_symlink()
    assert (cfg.config / "codex" / "auth.json").read_bytes() == b"placeholder login"
    # the group's login, copied in when newer, is the one in effect
    (cfg.login / "codex").mkdir()
    (cfg.login / "codex" / "auth.json").write_text("group login")
    os.utime(cfg.login / "codex" / "auth.json", (4e9, 4e9))
    assert ac.login_in_effect(cfg.config, cfg.login, "codex/auth.json") == b"group login"
    ac.prepare(cfg)
    assert (cfg.config / "codex" / "auth.json").read_text() == "group login"


def test_missing_cli_says_how_to_install(home):
    claude = agents.load_registry(home=home)["claude"]
    with pytest.raises(UsageError, match="npm install -g @anthropic-ai/claude-code"):
        agents.check_installed(claude, search_path=str(home))


# -- secrets file -----------------------------------------------------------

def test_parse_env_quotes_comments_export():
    text = """
# a comment
export GH_TOKEN=github_pat_1   # trailing comment
GIT_AUTHOR_NAME="Ada \\"A\\" Lovelace"
SINGLE='$(rm -rf /) kept $HOME literal'
EMPTY=
HASH=abc#def
"""
    assert secrets.parse_env(text) == {
        "GH_TOKEN": "github_pat_1",
        "GIT_AUTHOR_NAME": 'Ada "A" Lovelace',
        "SINGLE": "$(rm -rf /) kept $HOME literal",
        "EMPTY": "",
        "HASH": "abc#def",
    }


@pytest.mark.parametrize("line", ["NOEQUALS", "1BAD=x", 'Q="open', "A=two words", "B='x' junk"])
def test_parse_env_rejects_malformed_lines(line):
    with pytest.raises(PolicyError, match="secrets.env:1"):
        secrets.parse_env(line)


def test_secrets_file_is_never_executed(home, tmp_path):
    marker = tmp_path / "pwned"
    write_secrets(home, f'X="$(touch {marker})"\nY=`id`\n')
    values = secrets.load_secrets()
    assert values["X"] == f"$(touch {marker})"
    assert values["Y"] == "`id`"
    assert not marker.exists()


def test_secrets_file_0600_is_read_wider_is_refused(home):
    path = write_secrets(home, "ANTHROPIC_API_KEY=sk-test\n")
    assert secrets.load_secrets() == {"ANTHROPIC_API_KEY": "sk-test"}
    for mode in (0o640, 0o604, 0o644):
        path.chmod(mode)
        with pytest.raises(Refused, match=f"chmod 600 {path}"):
            secrets.load_secrets()
    path.chmod(0o400)
    assert secrets.load_secrets()["ANTHROPIC_API_KEY"] == "sk-test"


def test_secrets_symlink_and_foreign_owner_are_refused(home, tmp_path):
    real = tmp_path / "elsewhere.env"
    real.write_text("A=1\n")
    real.chmod(0o600)
    link = secrets.secrets_path(home)
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    with pytest.raises(Refused, match="symlink"):
        secrets.load_secrets()
    link.unlink()
    if os.getuid() != 0:
        pytest.skip("changing a file's owner needs root")
    write_secrets(home, "A=1\n")
    os.chown(link, 65534, 65534)
    with pytest.raises(Refused, match="owned by uid 65534"):
        secrets.load_secrets()


def test_no_secrets_file_is_empty(home):
    assert secrets.load_secrets() == {}


# -- what may be sandboxed --------------------------------------------------

def test_dir_holding_home_or_secrets_is_refused(home, tmp_path):
    for bad in (home, home.parent, home / ".config", places.user_config_dir(home)):
        with pytest.raises(Refused):
            places.check_dir_allowed(bad, home=home)
    places.check_dir_allowed(home / "projects" / "x", home=home)


# -- each target's own agent config dir, prepared host-side (sandbox/agent_config.py) --------------

def agent_config(tmp_path, session=None, root_name="dev"):
    from chtop_tasks.sandbox.agent_config import AgentConfig

    group = tmp_path / "grp"
    login = places.login_dir(group)
    login.mkdir(parents=True, exist_ok=True)
    return AgentConfig(places.agent_home(group, root_name), login, group / root_name, session, ("codex",),
                       (".credentials.json", "codex/auth.json"))


def test_a_new_config_dir_gets_the_groups_login_and_only_its_own_projects(tmp_path):
    import json

    from chtop_tasks.sandbox import agent_config as ac

    cfg = agent_config(tmp_path, session="abcdef0123456789")
    (cfg.login / ".credentials.json").write_text('{"claudeAiOauth": {"accessToken": "t"}}')
    (cfg.login / "settings.json").write_text('{"model": "opus"}')
    other = str(cfg.root.parent / "other")
    (cfg.login / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "projects": {str(cfg.root): {"trust": 1}, other: {"trust": 2},
                                                     str(cfg.root / "alpha"): {"trust": 3}}}))
    for name, text in ((cfg.root, "mine"), (Path(other), "theirs")):
        transcripts = cfg.login / "projects" / ac.transcript_dir_name(name)
        transcripts.mkdir(parents=True)
        (transcripts / "t.jsonl").write_text(text)
    ac.prepare(cfg)
    assert (cfg.config / ".credentials.json").read_text() == '{"claudeAiOauth": {"accessToken": "t"}}'
    assert (cfg.config / ".credentials.json").stat().st_mode & 0o777 == 0o600
    account = json.loads((cfg.config / ".claude.json").read_text())
    assert account["hasCompletedOnboarding"] is True
    assert set(account["projects"]) == {str(cfg.root), str(cfg.root / "alpha")}
    assert [p.read_text() for p in (cfg.config / "projects").rglob("*.jsonl")] == ["mine"]
    assert json.loads(cfg.settings.read_text())["model"] == "opus"
    assert (cfg.config / "settings.json").is_file() and (cfg.config / "chtop-state").is_dir()
    assert cfg.state_dir.is_dir() and (cfg.config / "codex").is_dir()
    # the agent's own refreshed login stays; a newer group login replaces it
    (cfg.config / ".credentials.json").write_text("refreshed inside")
    ac.prepare(cfg)
    assert (cfg.config / ".credentials.json").read_text() == "refreshed inside"
    os.utime(cfg.login / ".credentials.json", (4e9, 4e9))
    ac.prepare(cfg)
    assert "accessToken" in (cfg.config / ".credentials.json").read_text()


def test_a_login_the_proxy_holds_is_not_copied_in_and_an_older_copy_is_removed(tmp_path):
    from dataclasses import replace

    from chtop_tasks.sandbox import agent_config as ac

    cfg = agent_config(tmp_path)
    (cfg.login / ".credentials.json").write_text('{"claudeAiOauth": {"refreshToken": "r"}}')
    ac.prepare(cfg)
    assert (cfg.config / ".credentials.json").is_file()
    ac.prepare(replace(cfg, login_files=(), withheld=(".credentials.json",)))
    assert not (cfg.config / ".credentials.json").exists()
    assert (cfg.login / ".credentials.json").is_file()      # the group's own file is the user's to import


def test_what_the_agent_planted_in_its_config_dir_is_replaced_never_followed(tmp_path):
    from chtop_tasks.sandbox import agent_config as ac

    cfg = agent_config(tmp_path, session="abcdef0123456789")
    ac.prepare(cfg)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (cfg.config / "settings.json").unlink()
    (cfg.config / "settings.json").symlink_to(victim)
    os.rmdir(cfg.config / "chtop-state")
    (cfg.config / "chtop-state").symlink_to(tmp_path)
    (cfg.config / ".credentials.json").symlink_to(victim)
    (cfg.login / ".credentials.json").write_text("login")
    ac.prepare(cfg)
    assert victim.read_text() == "precious\n"
    assert not (cfg.config / "settings.json").is_symlink() and (cfg.config / "settings.json").is_file()
    assert not (cfg.config / "chtop-state").is_symlink() and (cfg.config / "chtop-state").is_dir()
    assert (cfg.config / ".credentials.json").read_text() == "login"    # replaced by a rename
    # a sub-directory the agent made a link: the login is not written through it
    (cfg.login / "codex").mkdir()
    (cfg.login / "codex" / "auth.json").write_text("codex login")
    os.rmdir(cfg.config / "codex")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cfg.config / "codex").symlink_to(elsewhere)
    from chtop_tasks.sandbox.agent_config import seed_login

    seed_login(cfg, None)
    assert list(elsewhere.iterdir()) == []
    ac.prepare(cfg)                               # the launch makes it a dir again, then copies
    assert (cfg.config / "codex" / "auth.json").read_text() == "codex login" and list(elsewhere.iterdir()) == []


def test_a_login_dir_file_that_is_a_link_or_a_fifo_is_not_copied(tmp_path):
    from chtop_tasks.sandbox import agent_config as ac

    cfg = agent_config(tmp_path)
    secret = tmp_path / "ssh-key"
    secret.write_text("PRIVATE KEY")
    (cfg.login / ".credentials.json").symlink_to(secret)
    os.mkfifo(cfg.login / ".claude.json")
    ac.prepare(cfg)
    assert not (cfg.config / ".credentials.json").exists() and not (cfg.config / ".claude.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand files to another uid")
def test_as_root_what_the_agent_uses_in_its_config_dir_is_the_agents(tmp_path):
    from chtop_tasks.sandbox import agent_config as ac

    cfg = agent_config(tmp_path, session="abcdef0123456789")
    (cfg.login / ".credentials.json").write_text("login")
    ac.prepare(cfg, owner=(12345, 12345))
    (cfg.login / "codex").mkdir()
    (cfg.login / "codex" / "auth.json").write_text("codex login")
    ac.prepare(cfg, owner=(12345, 12345))
    for path in (cfg.config, cfg.config / ".credentials.json", cfg.config / "settings.json", cfg.state_dir,
                 cfg.config / "codex", cfg.config / "codex" / "auth.json"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (12345, 12345), path
    assert os.lstat(cfg.home).st_uid == 0 and os.lstat(cfg.settings).st_uid == 0    # host-side: root's


def test_each_dir_target_has_its_own_agent_config_dir_in_the_dir_groups_state(home, tmp_path):
    a, b = tmp_path / "proj" / "x", tmp_path / "other" / "x"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    ta, tb = targets.dir_target(a), targets.dir_target(b)
    assert ta.config_dir != tb.config_dir and ta.login_dir == tb.login_dir == places.user_config_dir() / "claude"
    for t in (ta, tb):
        assert t.config_dir.parent.parent == places.user_config_dir() / ".chtop" / "agents"
        assert t.config_dir.parent.name.startswith("x-") and t.config_dir.name == "config"


def test_two_launches_of_one_target_prepare_its_config_dir_at_once(tmp_path):
    """A first sandbox of a worktree and its neighbour, launched together: both make the same mount
    points; neither fails on the one the other made a moment before."""
    import threading

    from chtop_tasks.sandbox import agent_config as ac

    errors = []

    def launch(i: int) -> None:
        try:
            ac.prepare(agent_config(tmp_path / f"round{i // 8}", session="abcdef0123456789"))
        except Exception as exc:      # noqa: BLE001 (any failure is the finding)
            errors.append(repr(exc))

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(64)]   # 8 rounds of 8 at once
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for i in range(8):
        cfg = agent_config(tmp_path / f"round{i}", session="abcdef0123456789")
        assert (cfg.config / "settings.json").is_file() and (cfg.config / "codex").is_dir()


def test_the_registry_is_read_afresh_and_a_user_file_with_bad_toml_is_refused(home, tmp_path):
    """Each read takes the files as they are now: an agent registered since shows, and a user file
    with bad TOML is refused naming the file."""
    assert "standin" not in agents.load_registry(home=home)
    register_stand_in(home, tmp_path)
    assert "standin" in agents.load_registry(home=home) and "claude" in agents.load_registry(home=home)
    (places.user_config_dir(home) / "agents.toml").write_text("[x\n")
    with pytest.raises(PolicyError, match="agents.toml"):
        agents.load_registry(home=home)


def test_gemini_on_the_route_gets_settings_choosing_the_key_written_never_through_a_link(home, tmp_path, monkeypatch):
    from chtop_tasks.sandbox import agent_config as ac

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "gemini").write_text("#!/bin/sh\n")
    (bin_dir / "gemini").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    write_secrets(home, "GEMINI_API_KEY=AIza-real-key\n")
    work = tmp_path / "work"
    work.mkdir()
    settings = ("gemini/.gemini/settings.json", b'{"security": {"auth": {"selectedType": "gemini-api-key"}}}')
    request = agents.agent_request("gemini", ["-p", "hi"], work, interactive=False, dir=work)
    assert request.login_defaults == (settings,) and request.extra_env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert agents.agent_request("gemini", [], work, interactive=False, dir=work, network="open").login_defaults == ()
    cfg = agent_config(tmp_path)
    cfg = ac.AgentConfig(cfg.home, cfg.login, cfg.root, None, ("gemini",), login_defaults=(settings,))
    ac.prepare(cfg)
    assert (cfg.config / settings[0]).read_bytes() == settings[1]      # its .gemini dir made on the way
    (cfg.config / settings[0]).write_text('{"security": {"auth": {"selectedType": "oauth-personal"}}}')
    ac.prepare(cfg)
    assert "oauth-personal" in (cfg.config / settings[0]).read_text()  # the user's own choice is kept
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(cfg.config / "gemini" / ".gemini")
    (cfg.config / "gemini" / ".gemini").symlink_to(elsewhere)
    ac.prepare(cfg)
    assert list(elsewhere.iterdir()) == []
