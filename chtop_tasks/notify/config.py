"""The phone notifications' settings: ``<chtop config dir>/notify.toml``, mode 0600.

It holds the ntfy server, the topic chtop publishes to (the one to subscribe
to in the app), the reply topic the action buttons publish to, an access
token where the server needs one, and the HMAC secret of the one-time codes
(it never leaves the host).  The file is the user's, outside every sandbox;
one that others may read, or that is a link, is refused.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ..core.atomic import write_atomic
from ..core.errors import PolicyError, UsageError
from ..core.places import notify_config_path

DEFAULT_SERVER = "https://ntfy.sh"
BUTTONS = ("once", "1h", "always", "deny")     # what an action button may decide
DEFAULT_BUTTONS = ("once", "deny", "1h", "always")
MAX_ACTIONS = 3         # ntfy takes at most three action buttons a message


def button_layout(buttons: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The buttons of a held request's notification, and those a tap on "More…" pushes next.

    Up to three fit on one message; with four, the message carries the first two and "More…"."""
    if len(buttons) <= MAX_ACTIONS:
        return tuple(buttons), ()
    return tuple(buttons[:MAX_ACTIONS - 1]), tuple(buttons[MAX_ACTIONS - 1:])


_TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
_SECRET = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class NotifyConfig:
    server: str
    topic: str
    reply_topic: str
    secret: str
    token: str = ""
    held_after: float = 30.0        # seconds a held request waits for a terminal before it is pushed
    waiting_after: float = 60.0     # seconds an agent waits before its session is pushed
    buttons: tuple[str, ...] = DEFAULT_BUTTONS

    @property
    def topic_url(self) -> str:
        return f"{self.server}/{self.topic}"

    @property
    def reply_url(self) -> str:
        return f"{self.server}/{self.reply_topic}"


def random_topic() -> str:
    """``chtop-`` and 96 random bits: on a public server the topic name is the password."""
    return "chtop-" + secrets.token_hex(12)


def check_server(url: str) -> str:
    """The server URL without a trailing slash; UsageError unless it is http(s)://host[/path]."""
    text = str(url).strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username or parts.password or any(c.isspace() for c in text):
        raise UsageError(f"bad ntfy server {url!r}: give e.g. https://ntfy.sh or https://ntfy.example.org")
    return text


def _seconds(data: dict, key: str, default: float, path: Path) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise PolicyError(f"{path}: {key} must be a number of seconds >= 0 (0: at once)")
    return float(value)


def parse(data: dict, path: Path) -> NotifyConfig:
    """A NotifyConfig from the file's table; PolicyError naming what is wrong."""
    for key in ("topic", "reply_topic"):
        if not isinstance(data.get(key), str) or not _TOPIC.match(data[key]):
            raise PolicyError(f"{path}: {key} must be 1-64 letters, digits, '-' or '_' "
                              "(inv notify.setup --new makes random ones)")
    if data["topic"] == data["reply_topic"]:
        raise PolicyError(f"{path}: topic and reply_topic must differ")
    if not isinstance(data.get("secret"), str) or not _SECRET.match(data["secret"]):
        raise PolicyError(f"{path}: secret must be 64 hex digits (inv notify.setup --new makes one)")
    token = data.get("token", "")
    if not isinstance(token, str) or any(c.isspace() or ord(c) < 32 for c in token):
        raise PolicyError(f"{path}: token must be a string without spaces")
    buttons = data.get("buttons", list(DEFAULT_BUTTONS))
    if not isinstance(buttons, list) or not buttons or any(b not in BUTTONS for b in buttons) \
            or len(set(buttons)) != len(buttons):
        raise PolicyError(f"{path}: buttons must list some of {', '.join(BUTTONS)}, each once "
                          "(with all four, the first two show and \"More…\" brings the others)")
    try:
        server = check_server(data.get("server", DEFAULT_SERVER))
    except UsageError as exc:
        raise PolicyError(f"{path}: {exc}") from None
    return NotifyConfig(server, data["topic"], data["reply_topic"], data["secret"], token,
                        _seconds(data, "held_after", 30.0, path), _seconds(data, "waiting_after", 60.0, path),
                        tuple(buttons))


def _read_private(path: Path) -> str | None:
    """The file's text, or None when missing; PolicyError when it is a link, not ours, or readable by others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read it ({exc.strerror}); it must be a plain file of yours") from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise PolicyError(f"{path}: not a plain file of yours; refusing to use it")
        if st.st_mode & 0o077:
            raise PolicyError(f"{path} holds a secret but others may read it: run `chmod 600 {path}`")
        return fh.read()


def load(path: Path | None = None) -> NotifyConfig | None:
    """The user's notify config, or None when there is none (phone notifications off)."""
    path = path or notify_config_path()
    text = _read_private(path)
    if text is None:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: {exc}") from exc
    return parse(data, path)


def render(cfg: NotifyConfig) -> str:
    """The file's text (TOML; json.dumps spells a valid TOML basic string)."""
    q = json.dumps
    return ("# chtop phone notifications (inv notify.setup); keep this file private (mode 0600)\n"
            f"server = {q(cfg.server)}\n"
            f"# subscribe to this topic in the ntfy app\ntopic = {q(cfg.topic)}\n"
            f"# the action buttons publish here; the notifier listens\nreply_topic = {q(cfg.reply_topic)}\n"
            f"# an access token, where the server needs one\ntoken = {q(cfg.token)}\n"
            f"# signs the buttons' one-time codes; never leaves this host\nsecret = {q(cfg.secret)}\n"
            f"# seconds a held request waits for an answer at a terminal before it is pushed (0: at once)\n"
            f"held_after = {cfg.held_after:g}\n"
            f"# seconds an agent waits for you before its session is pushed\nwaiting_after = {cfg.waiting_after:g}\n"
            f"# some of {', '.join(BUTTONS)}; with all four the first two show, \"More...\" the others\n"
            f"buttons = {q(list(cfg.buttons))}\n")


def save(cfg: NotifyConfig, path: Path | None = None) -> Path:
    path = path or notify_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render(cfg), mode=0o600)
    return path


def seconds_flag(key: str, value) -> float:
    """A --held-after / --waiting-after value: seconds >= 0, else UsageError."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"--{key.replace('_', '-')} {value!r}: give a number of seconds >= 0 (0: at once)")
    return seconds


def setup(server: str | None = None, token: str | None = None, held_after: float | str | None = None,
          waiting_after: float | str | None = None, new: bool = False, path: Path | None = None) -> NotifyConfig:
    """Write the config: keep the topics and secret already there (unless ``new``), change what is given."""
    old = None if new else load(path)
    cfg = old or NotifyConfig(DEFAULT_SERVER, random_topic(), random_topic(), secrets.token_hex(32))
    changes = {}
    if server is not None:
        changes["server"] = check_server(server)
    if token is not None:
        changes["token"] = token.strip()
    for key, value in (("held_after", held_after), ("waiting_after", waiting_after)):
        if value is not None:
            changes[key] = seconds_flag(key, value)
    cfg = replace(cfg, **changes)
    parse(dict(vars(cfg), buttons=list(cfg.buttons)), path or notify_config_path())    # checks the token
    save(cfg, path)
    return cfg
