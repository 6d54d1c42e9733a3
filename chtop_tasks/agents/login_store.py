"""The group's one subscription login (OAuth) of claude, held host-side for the proxy to use and refresh.

``<group>/.chtop/logins/claude.json`` (mode 0600, its dir 0700, never mounted) has the shape of claude's
own ``.credentials.json``: ``{"claudeAiOauth": {"accessToken", "refreshToken", "expiresAt" (ms since the
epoch), "scopes", "subscriptionType", ...}}``.  ``inv agent.login`` puts a login there: it runs ``claude
auth login`` on the host with a config dir of its own, or takes a login file the user names, and moves
the file in (the place it was loses it: two holders of one login refreshing apart log each other out).
The proxy (``proxy/oauth.py``) presents its access token and writes the rotated one back; a sandbox never
sees either token.  See docs/credentials.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.agentfile import read_bytes
from ..core.atomic import write_private_file
from ..core.errors import ChtopError, Refused, UsageError
from ..core.places import command_for_group, login_store_path

AGENT = "claude"                    # the one agent whose login the proxy holds (its registry has oauth_token_url)
OAUTH_KEY = "claudeAiOauth"
LOGIN_FILE = ".credentials.json"    # where claude writes its login in its config dir
MAX_LOGIN_BYTES = 1 << 20


@dataclass(frozen=True)
class Login:
    """A login's fields the proxy uses; ``document`` is the whole file, kept as it came."""

    access_token: str
    refresh_token: str
    expires_at: float               # seconds since the epoch
    scopes: tuple[str, ...]
    subscription: str
    document: dict


def parse_login(data: bytes | str, source: str) -> Login:
    """The login in claude's ``.credentials.json`` shape; ValueError saying what is missing."""
    try:
        document = json.loads(data)
    except ValueError:
        raise ValueError(f"{source} is not JSON") from None
    oauth = document.get(OAUTH_KEY) if isinstance(document, dict) else None
    if not isinstance(oauth, dict):
        raise ValueError(f"{source} has no {OAUTH_KEY} object (claude's login file has one)")
    for key in ("accessToken", "refreshToken"):
        if not isinstance(oauth.get(key), str) or not oauth[key].strip():
            raise ValueError(f"{source}: {OAUTH_KEY}.{key} is missing or not a string")
    expires = oauth.get("expiresAt")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        raise ValueError(f"{source}: {OAUTH_KEY}.expiresAt is missing or not a number (ms since the epoch)")
    scopes = oauth.get("scopes") or []
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise ValueError(f"{source}: {OAUTH_KEY}.scopes is not a list of strings")
    return Login(oauth["accessToken"], oauth["refreshToken"], expires / 1000, tuple(scopes),
                 str(oauth.get("subscriptionType") or ""), document)


def read_login(path: Path) -> Login | None:
    """The login held at ``path``; None when there is none.  Read without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_LOGIN_BYTES)
    return parse_login(data, str(path))


def rotated(login: Login, access_token: str, refresh_token: str, expires_in: float, now: float) -> Login:
    """``login`` after a refresh: the new tokens and expiry, every other field kept."""
    oauth = {**login.document[OAUTH_KEY], "accessToken": access_token, "refreshToken": refresh_token,
             "expiresAt": int((now + expires_in) * 1000)}
    return parse_login(json.dumps({**login.document, OAUTH_KEY: oauth}), "the refreshed login")


def write_login(path: Path, login: Login) -> None:
    """Replace the held login with ``login``: mode 0600, renamed into place (readers never see half)."""
    write_private_file(path, json.dumps(login.document, indent=1).encode())


def holds_login(group_dir: Path, agent: str = AGENT) -> bool:
    """Does the group hold a login of ``agent`` for the proxy?"""
    return agent == AGENT and login_store_path(group_dir, agent).is_file()


def _fix(group_dir: Path) -> str:
    inv = command_for_group(group_dir)
    return (f"log in with `{inv} agent.login` (runs `claude auth login` on the host), or import claude's login "
            f"file with `{inv} agent.login --from ~/.claude/.credentials.json`")


def import_login(group_dir: Path, source: Path) -> Login:
    """Move the login file ``source`` into the group's store; nothing changes when it is not one."""
    source = Path(source).expanduser()
    data = read_bytes(source, limit=MAX_LOGIN_BYTES)
    if data is None:
        raise UsageError(f"{source}: no such login file (or not a regular file); {_fix(group_dir)}")
    try:
        login = parse_login(data, str(source))
    except ValueError as exc:
        raise UsageError(f"{exc}; {_fix(group_dir)}") from None
    write_login(login_store_path(group_dir, AGENT), login)
    try:
        source.unlink()
    except OSError as exc:
        raise Refused(f"the login is now held for the group, but {source} could not be removed ({exc.strerror}): "
                      f"remove it yourself (a second holder refreshing it logs the group out)") from None
    return login


def login_with_cli(group_dir: Path, run_login) -> Login:
    """``run_login(env)`` runs claude's own login with a fresh host-only config dir; its login file is then
    moved into the store and the dir removed."""
    store = login_store_path(group_dir, AGENT)
    store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = Path(os.path.join(store.parent, f".login-{os.urandom(6).hex()}"))
    config.mkdir(mode=0o700)
    try:
        code = run_login({"CLAUDE_CONFIG_DIR": str(config)})
        if not (config / LOGIN_FILE).is_file():
            raise ChtopError(f"claude's login ended (status {code}) without a login file; "
                             f"run `{command_for_group(group_dir)} agent.login` again", code or 1)
        return import_login(group_dir, config / LOGIN_FILE)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(config)


def describe_expiry(expires_at: float, now: float | None = None) -> str:
    """When an access token expires, in words (local time and how long from now)."""
    now = time.time() if now is None else now
    left = int(expires_at - now)
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(expires_at))
    if left <= 0:
        return f"expired at {when}; the proxy refreshes it at the next request"
    return f"expires at {when} (in {left // 3600}h {left % 3600 // 60:02d}m); the proxy refreshes it before then"


def status_text(group_dir: Path) -> str:
    """Whether the group holds a login and when its access token expires; never a token."""
    path = login_store_path(group_dir, AGENT)
    try:
        login = read_login(path)
    except (OSError, ValueError) as exc:
        return f"{AGENT}: the held login {path} cannot be read ({exc}); {_fix(group_dir)}"
    if login is None:
        return f"{AGENT}: no subscription login held for this group ({path}); {_fix(group_dir)}"
    kind = f" ({login.subscription})" if login.subscription else ""
    return (f"{AGENT}: a subscription login{kind} is held for this group in {path}\n"
            f"  its access token {describe_expiry(login.expires_at)}")
