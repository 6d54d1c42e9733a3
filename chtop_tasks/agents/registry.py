"""The agent registry and launching an agent in a sandbox.

The registry is data: chtop_tasks/agents.toml (claude, kimi, codex, gemini)
plus the user's ~/.config/chtop/agents.toml.  An entry says how to start the
CLI, its "skip permissions" flag, the credentials it reads and where its
state lives; launch() turns it into a sandboxed, interactive run.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ..core.errors import PolicyError, UsageError
from ..core.places import login_store_path, secrets_path, user_config_dir
from ..workspace.targets import target_for
from .login_store import holds_login
from .secrets import ENV_NAME, load_secrets

AGENT_NAME = re.compile(r"[a-z][a-z0-9-]{0,19}\Z")
REGISTRY_FILE = Path(__file__).with_name("agents.toml")
USER_REGISTRY = "agents.toml"  # in ~/.config/chtop/
KEYS = {"description", "command", "skip_permissions", "credentials", "tokens", "login_note",
        "config_env", "config_subdir", "login_files", "env", "install", "continue_args",
        "api_base_env", "api_upstream", "api_auth", "credentials_inside", "api_base_args", "token_aliases",
        "api_key_file", "route_files", "oauth_token_url", "oauth_client_id"}
OAUTH_TOKEN_URL_VAR = "CHTOP_OAUTH_TOKEN_URL"    # in the secrets file: another token endpoint (a gateway, a test)


@dataclass(frozen=True)
class Agent:
    name: str
    command: tuple[str, ...]
    skip_permissions: tuple[str, ...] = ()
    credentials: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()
    login_note: str = ""
    config_env: str = ""
    config_subdir: str = ""
    login_files: tuple[str, ...] = ()   # in its config dir: copied from the group's login dir (see agent_config.py)
    env: dict[str, str] = field(default_factory=dict)
    install: str = ""
    description: str = ""
    continue_args: tuple[str, ...] = ()
    api_base_env: str = ""              # the variable its CLI reads for the API's base URL
    api_upstream: str = ""              # the API's URL when the secrets file does not name one there
    api_auth: dict[str, str] = field(default_factory=dict)    # token -> an AUTH_SCHEMES name
    credentials_inside: bool = False    # the opt-in: its secrets go into the sandbox, as they are
    api_base_args: tuple[str, ...] = ()     # on the route: put after the command, "{url}" the route's URL
    token_aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # token -> more variables it goes in
    api_key_file: str = ""              # on the route: this login file (of login_files) when it has none...
    api_key_text: str = ""              # ...is written with this text, "{placeholder}" the placeholder
    route_files: dict[str, str] = field(default_factory=dict)  # on the route: path in its config dir -> text,
                                        # written when missing (its settings choosing the key), never a login
    oauth_token_url: str = ""           # where the proxy refreshes the group's held login (agents/login_store.py)
    oauth_client_id: str = ""           # the CLI's public OAuth client id, sent with a refresh

    def argv(self, args: list[str], continue_: bool = False, route: str | None = None) -> list[str]:
        """The command line: the CLI, its base URL arguments (``route``, the route's URL, when it has
        one), its skip-permissions flag, its continue flag (``continue_``), then ARGS as typed."""
        if continue_ and not self.continue_args:
            raise UsageError(f"agent {self.name!r} declares no continue flag (continue_args in its "
                             f"agents.toml entry)")
        base = [arg.replace("{url}", route) for arg in self.api_base_args] if route else []
        return [*self.command, *base, *self.skip_permissions, *(self.continue_args if continue_ else ()), *args]

    @property
    def key_file_path(self) -> str:
        """``api_key_file`` relative to the agent config dir ("" when it has none)."""
        if not self.api_key_file:
            return ""
        return f"{self.config_subdir}/{self.api_key_file}" if self.config_subdir else self.api_key_file

    def route_defaults(self) -> tuple[tuple[str, bytes], ...]:
        """On the route, (path relative to the agent config dir, contents) of the files written where
        missing: ``api_key_file`` with the placeholder, and ``route_files``."""
        from ..core.apiroute import PLACEHOLDER

        sub = f"{self.config_subdir}/" if self.config_subdir else ""
        key_file = (((self.key_file_path, self.api_key_text.replace("{placeholder}", PLACEHOLDER).encode()),)
                    if self.api_key_file else ())
        return key_file + tuple((sub + rel, text.encode()) for rel, text in self.route_files.items())


def _strings(name: str, key: str, value, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{source}: [{name}] {key} must be a list of non-empty strings")
    return tuple(value)


def parse_entry(name: str, table: dict, source: str) -> Agent:
    if not isinstance(table, dict):
        raise PolicyError(f"{source}: {name} must be a table ([{name}])")
    if not AGENT_NAME.match(name):
        raise PolicyError(f"{source}: agent name {name!r}: lowercase letters, digits and '-' (max 20)")
    unknown = set(table) - KEYS
    if unknown:
        raise PolicyError(f"{source}: [{name}] unknown key(s): {', '.join(sorted(unknown))}")
    if "command" not in table:
        raise PolicyError(f"{source}: [{name}] needs command = [\"...\"]")
    command = _strings(name, "command", table["command"], source)
    if not command:
        raise PolicyError(f"{source}: [{name}] command is empty")
    credentials = _strings(name, "credentials", table.get("credentials", []), source)
    tokens = _strings(name, "tokens", table.get("tokens", []), source)
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise PolicyError(f"{source}: [{name}] env must be a table of strings")
    config_env = table.get("config_env", "")
    from ..sandbox.policy import STRUCTURAL_ENV

    for var in (*credentials, *tokens, *env, *([config_env] if config_env else [])):
        if not ENV_NAME.match(var):
            raise PolicyError(f"{source}: [{name}] {var!r} is not a variable name")
        if var in STRUCTURAL_ENV:
            raise PolicyError(f"{source}: [{name}] {var} is set by the sandbox itself; it cannot come "
                              f"from the registry")
    missing = set(tokens) - set(credentials)
    if missing:
        raise PolicyError(f"{source}: [{name}] tokens not listed in credentials: {', '.join(sorted(missing))}")
    api = _api_keys(name, table, credentials, source)
    api["token_aliases"] = _token_aliases(name, table.get("token_aliases", {}), tokens, source)
    subdir = table.get("config_subdir", "")
    if not isinstance(subdir, str) or subdir.startswith(("/", ".")) or "/" in subdir:
        raise PolicyError(f"{source}: [{name}] config_subdir must be a plain directory name")
    login_files = _strings(name, "login_files", table.get("login_files", []), source)
    for file in login_files:
        if "/" in file or file in (".", ".."):
            raise PolicyError(f"{source}: [{name}] login_files: {file!r} must be a file name in its config dir")
    return Agent(
        name=name,
        command=command,
        skip_permissions=_strings(name, "skip_permissions", table.get("skip_permissions", []), source),
        credentials=credentials,
        tokens=tokens,
        login_note=str(table.get("login_note", "")),
        config_env=config_env,
        config_subdir=subdir,
        login_files=login_files,
        env=dict(env),
        install=str(table.get("install", "")),
        description=str(table.get("description", "")),
        continue_args=_strings(name, "continue_args", table.get("continue_args", []), source),
        **api,
    )


def _token_aliases(name: str, aliases, tokens: tuple[str, ...], source: str) -> dict[str, tuple[str, ...]]:
    """``token_aliases``, checked: each of ``tokens`` -> the further variables its CLI reads it from."""
    from ..sandbox.policy import STRUCTURAL_ENV

    if not isinstance(aliases, dict):
        raise PolicyError(f"{source}: [{name}] token_aliases must be a table of TOKEN = [\"VARIABLE\", ...]")
    out = {}
    for token, names in aliases.items():
        if token not in tokens:
            raise PolicyError(f"{source}: [{name}] token_aliases names {token}, which tokens does not list")
        out[token] = _strings(name, f"token_aliases.{token}", names, source)
        for var in out[token]:
            if not ENV_NAME.match(var) or var in STRUCTURAL_ENV:
                raise PolicyError(f"{source}: [{name}] token_aliases: {var!r} is not a variable the agent "
                                  f"can be given (a name, not one the sandbox sets)")
    return out


def _api_keys(name: str, table: dict, credentials: tuple[str, ...], source: str) -> dict:
    """The credential route's keys of an entry, checked (see docs/credentials.md)."""
    base_env, upstream = table.get("api_base_env", ""), table.get("api_upstream", "")
    auth, inside = table.get("api_auth", {}), table.get("credentials_inside", False)
    from ..core.apiroute import AUTH_SCHEMES

    if not isinstance(inside, bool):
        raise PolicyError(f"{source}: [{name}] credentials_inside must be true or false")
    if not isinstance(auth, dict) or not all(isinstance(v, str) and v for v in auth.values()):
        raise PolicyError(f"{source}: [{name}] api_auth must be a table of TOKEN = \"scheme\" "
                          f"({', '.join(AUTH_SCHEMES)})")
    for token, scheme in auth.items():
        if token not in credentials:
            raise PolicyError(f"{source}: [{name}] api_auth names {token}, which credentials does not list")
        if scheme not in AUTH_SCHEMES:
            raise PolicyError(f"{source}: [{name}] api_auth: {token} = {scheme!r} is not a scheme the proxy "
                              f"speaks; use one of {', '.join(AUTH_SCHEMES)} (or drop api_auth: the token "
                              f"then goes inside)")
    if auth and not (isinstance(base_env, str) and ENV_NAME.match(base_env) and isinstance(upstream, str)
                     and upstream.startswith(("https://", "http://"))):
        raise PolicyError(f"{source}: [{name}] api_auth needs api_base_env (a variable name) and "
                          f"api_upstream (an https:// URL)")
    base_args = _strings(name, "api_base_args", table.get("api_base_args", []), source)
    if base_args and not any("{url}" in arg for arg in base_args):
        raise PolicyError(f"{source}: [{name}] api_base_args must put {{url}} (the route's URL) in one of its "
                          f"arguments, e.g. [\"--base-url\", \"{{url}}\"]")
    key_file = table.get("api_key_file", {})
    if not isinstance(key_file, dict) or (key_file and (
            set(key_file) != {"name", "text"} or not all(isinstance(v, str) for v in key_file.values())
            or key_file["name"] not in table.get("login_files", []) or "{placeholder}" not in key_file["text"])):
        raise PolicyError(f"{source}: [{name}] api_key_file must be {{ name = \"FILE\", text = \"...\" }}: "
                          f"one of its login_files, and a text with {{placeholder}} where the key goes")
    route_files = table.get("route_files", {})
    if not isinstance(route_files, dict) or not all(
            isinstance(v, str) and isinstance(k, str) and k and not k.startswith("/")
            and all(part not in ("", ".", "..") for part in k.split("/")) for k, v in route_files.items()):
        raise PolicyError(f"{source}: [{name}] route_files must be a table of \"PATH\" = \"TEXT\", each PATH a "
                          f"relative path in its config dir (no . or .. parts)")
    if (base_args or key_file or route_files) and not auth:
        raise PolicyError(f"{source}: [{name}] api_base_args, api_key_file and route_files are for a route: "
                          f"they need api_auth")
    token_url, client_id = table.get("oauth_token_url", ""), table.get("oauth_client_id", "")
    if token_url and not (isinstance(token_url, str) and token_url.startswith(("https://", "http://"))
                          and isinstance(client_id, str) and client_id and "bearer" in auth.values()):
        raise PolicyError(f"{source}: [{name}] oauth_token_url needs an https:// URL, oauth_client_id and a "
                          f"\"bearer\" token in api_auth")
    return {"api_base_env": base_env, "api_upstream": upstream, "api_auth": dict(auth),
            "credentials_inside": inside, "api_base_args": base_args,
            "api_key_file": key_file.get("name", ""), "api_key_text": key_file.get("text", ""),
            "route_files": dict(route_files),
            "oauth_token_url": token_url, "oauth_client_id": client_id}


def routed_token(agent: Agent, secrets: dict[str, str]) -> str | None:
    """The secret the proxy adds for ``agent`` (its best token the secrets file holds); None when its
    credentials go inside (no route in its entry, ``credentials_inside``, or no such token)."""
    if agent.credentials_inside or not agent.api_auth:
        return None
    return next((t for t in agent.tokens if t in agent.api_auth and secrets.get(t)), None)


def route_token(agent: Agent, secrets: dict[str, str], *, proxied: bool, kept: bool,
                login: Path | None) -> tuple[str | None, bool]:
    """The token this launch's route carries, and whether it is the group's held login (``login``); (None,
    False) without a route: no proxy, a login of the agent's own (``kept``), or nothing to carry."""
    if not proxied or kept:
        return None, False
    token = routed_token(agent, secrets)
    if token is not None:
        return token, False
    held = login_token(agent) if login is not None else None
    return held, held is not None


def login_token(agent: Agent) -> str | None:
    """The variable that carries the group's held login (as its placeholder, inside): the agent's bearer
    token; None when the proxy cannot hold a login of ``agent``."""
    if agent.credentials_inside or not agent.oauth_token_url:
        return None
    return next((t for t in agent.tokens if agent.api_auth.get(t) == "bearer"), None)


def load_registry(extra: list[Path] | None = None, home: Path | None = None) -> dict[str, Agent]:
    """The shipped registry, then ~/.config/chtop/agents.toml, then ``extra`` files."""
    files = [REGISTRY_FILE, user_config_dir(home) / USER_REGISTRY, *(extra or [])]
    agents: dict[str, Agent] = {}
    for path in files:
        try:
            text = path.read_text()
        except FileNotFoundError:
            if path == REGISTRY_FILE:
                raise
            continue
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"{path}: {exc}") from exc
        for name, table in data.items():
            agents[name] = parse_entry(name, table, str(path))
    return agents


def get_agent(name: str, registry: dict[str, Agent] | None = None) -> Agent:
    registry = load_registry() if registry is None else registry
    if name not in registry:
        raise UsageError(f"unknown agent {name!r}; registered: {', '.join(sorted(registry))} "
                         f"(add one in {user_config_dir() / USER_REGISTRY})")
    return registry[name]


def describe(registry: dict[str, Agent]) -> str:
    lines = []
    for agent in registry.values():
        flags = " ".join(agent.skip_permissions)
        lines.append(f"{agent.name:10} {' '.join(agent.command)} {flags}  -- {agent.description}".rstrip())
    return "\n".join(lines)


def agent_env(agent: Agent, secrets: dict[str, str], config_dir: Path,
              source: Path, proxied: bool = True, login: Path | None = None,
              own_login: bool = False) -> tuple[dict[str, str], list[str]]:
    """The container env for ``agent`` (credentials it reads, its fixed env,
    its config dir) and the notes to tell the user (which token it uses).

    An agent with a credential route (and a sandbox behind the proxy, ``proxied``) gets the route as
    its base URL and ``PLACEHOLDER`` for its token: the proxy adds the real one on the way out.  With no
    token in the secrets file, ``login`` (the group's held login, when there is one) is that token.
    ``own_login``: its ``api_key_file`` holds a login of its own (not chtop's placeholder): it is
    used as it is, and none of the agent's tokens goes in."""
    from ..core.apiroute import PLACEHOLDER, route_url

    env = dict(agent.env)
    kept = own_login and bool(agent.api_key_file)
    routed, by_login = route_token(agent, secrets, proxied=proxied, kept=kept, login=login)
    held = {routed, *agent.api_auth, agent.api_base_env} if routed else set(agent.tokens) if kept else set()
    for name in agent.credentials:
        if name in secrets and name not in held:
            env[name] = secrets[name]
    if routed:
        env[agent.api_base_env] = route_url(agent.name)
        env[routed] = PLACEHOLDER
    for token, aliases in agent.token_aliases.items():
        env.update({alias: env[token] for alias in aliases if token in env})
    if agent.config_env:
        env[agent.config_env] = str(config_dir / agent.config_subdir if agent.config_subdir else config_dir)
    notes = []
    used = next((t for t in agent.tokens if t in secrets), None)
    if by_login:
        upstream = secrets.get(agent.api_base_env) or agent.api_upstream
        notes.append(f"{agent.name}: authenticating with the group's subscription login ({login}); it stays on "
                     f"the host, the proxy adds it for {upstream} and refreshes it")
    elif used and kept:
        notes.append(f"{agent.name}: {config_dir / agent.key_file_path} holds a login of its own, used as it "
                     f"is; {used} from {source} is not passed (the credential route is for {used} alone: "
                     f"remove that file to use it)")
    elif used and routed:
        upstream = secrets.get(agent.api_base_env) or agent.api_upstream
        notes.append(f"{agent.name}: authenticating with {used} from {source}; it stays on the host, "
                     f"the proxy adds it for {upstream}")
    elif used:
        inside = (" (credentials_inside = true)" if agent.credentials_inside
                  else " (--network open or host: no credential route)" if agent.api_auth and not proxied
                  else "")
        notes.append(f"{agent.name}: authenticating with {used} from {source}"
                     + (f"; {used} is passed INTO the sandbox{inside}" if inside else ""))
    elif agent.tokens:
        notes.append(f"{agent.name}: no {' or '.join(agent.tokens)} in {source}; {agent.login_note}".rstrip("; "))
    passed = sorted(n for n in agent.credentials if n in secrets and n != used and n not in held)
    if passed:
        notes.append(f"{agent.name}: also passing {', '.join(passed)} from {source}")
    return env, notes


def own_login(agent: Agent, config_dir: Path, login_dir: Path) -> bool:
    """Whether the ``api_key_file`` the agent will find in ``config_dir`` (its own, or the group's copied
    in from ``login_dir`` when newer) is a login of its own rather than chtop's placeholder."""
    from ..core.apiroute import PLACEHOLDER
    from ..sandbox.agent_config import login_in_effect

    if not agent.api_key_file:
        return False
    data = login_in_effect(config_dir, login_dir, agent.key_file_path)
    return data is not None and PLACEHOLDER.encode() not in data


def placeholder_login_left(agent: Agent, config_dir: Path) -> bool:
    """Whether the agent's ``api_key_file`` in ``config_dir`` is chtop's placeholder (a route's, left by
    an earlier launch); read without following a link."""
    from ..core import agentfile
    from ..core.apiroute import PLACEHOLDER

    if not agent.api_key_file:
        return False
    data = agentfile.read_bytes(config_dir / agent.key_file_path, limit=64 * 1024)
    return data is not None and PLACEHOLDER.encode() in data


def check_installed(agent: Agent, search_path: str | None = None) -> None:
    """The sandbox runs the host's own binaries: the CLI must be on the host."""
    if shutil.which(agent.command[0], path=search_path) is None:
        hint = f"; install it with: {agent.install}" if agent.install else ""
        raise UsageError(f"{agent.name}: {agent.command[0]!r} is not on PATH{hint}")


def agent_request(agent_name: str, args: list[str], cwd: Path, *, interactive: bool,
                  dir: Path | None = None, image: bool = False, network: str = "proxy",  # noqa: A002
                  allow_self_edit: bool = False, continue_: bool = False,
                  extra_env: dict[str, str] | None = None, session: str | None = None):
    """The sandbox LaunchRequest that starts ``agent_name`` with ``args`` in ``cwd``'s sandbox (or
    ``dir``), its notes included (which token it uses).  ``continue_`` adds the agent's continue
    flag; ``extra_env`` adds variables for the agent; ``session``, a session's id, is its
    ``CHTOP_SESSION`` and has that session's hook state dir mounted."""
    from ..core.apiroute import route_url
    from ..sandbox import LaunchRequest

    target = target_for(cwd, dir)
    agent = get_agent(agent_name, load_registry())
    check_installed(agent)
    source = secrets_path()
    secrets, proxied = load_secrets(source), network == "proxy"
    login = login_store_path(target.group_dir, agent.name) if holds_login(target.group_dir, agent.name) else None
    kept = own_login(agent, target.config_dir, target.login_dir)
    env, notes = agent_env(agent, secrets, target.config_dir, source, proxied=proxied, login=login, own_login=kept)
    token, by_login = route_token(agent, secrets, proxied=proxied, kept=kept, login=login)
    route = token is not None
    env.update(extra_env or {})
    if session is not None:
        env["CHTOP_SESSION"] = session
    # some CLIs refuse a state dir that does not exist: the launch makes it, owned like the config dir
    subdirs = (agent.config_subdir,) if agent.config_env and agent.config_subdir else ()
    login_files = tuple(f"{subdirs[0]}/{f}" if subdirs else f for f in agent.login_files)
    # the proxy adds the credential: no login file is copied in; when the proxy holds the group's login, an
    # older copy is removed too (a copy refreshing apart would log the group out)
    withheld = login_files if by_login else ()
    if not route and placeholder_login_left(agent, target.config_dir):
        withheld += (agent.key_file_path,)   # from a launch on the route: codex would send the placeholder
    if route:
        login_files = ()
    key_files = agent.route_defaults() if route else ()
    image_args = {}
    if image:
        from .image import ensure_image, image_trees, storage_warning

        image_args = {"image": ensure_image(), "image_trees": image_trees()}
        notes += [w for w in [storage_warning()] if w]
    return LaunchRequest(target, agent.argv(args, continue_, route_url(agent.name) if route else None),
                         interactive=interactive, extra_env=env,
                         purpose=agent.name, network=network, allow_self_edit=allow_self_edit, cwd=cwd,
                         notes=tuple(notes), session=session, agent_subdirs=subdirs,
                         login_files=login_files, withheld_login_files=withheld, login_defaults=key_files,
                         **image_args)


def launch(agent_name: str, args: list[str], cwd: Path, *, dir: Path | None = None,  # noqa: A002
           image: bool = False, network: str = "proxy", allow_self_edit: bool = False,
           stdin_fd: int | None = None) -> int:
    """Start ``agent_name`` with ``args`` in the sandbox of ``cwd`` (or ``dir``);
    return its exit status (128+signal if it was killed).

    Interactive (a pty, resized with the terminal) when stdin is a terminal.
    Git identity, CLAUDE_CONFIG_DIR and IS_SANDBOX are the sandbox's own.
    """
    from ..core.passthrough import stdin_is_terminal
    from ..sandbox import launch as launch_in_sandbox

    return launch_in_sandbox(agent_request(agent_name, args, cwd, interactive=stdin_is_terminal(stdin_fd), dir=dir,
                                           image=image, network=network, allow_self_edit=allow_self_edit))
