"""Agent credentials from an opt-in host-side env file, never mounted.

``~/.config/chtop/secrets.env`` holds KEY=VALUE lines (CLAUDE_CODE_OAUTH_TOKEN,
ANTHROPIC_API_KEY, GH_TOKEN, KIMI_API_KEY, ...).  It is parsed here -- never
sourced by a shell, so nothing in it runs -- and refused unless it is a
regular file owned by the user with mode 0600 (or stricter).  Each agent
gets only the variables its registry entry names (see agents.py); the file
itself stays on the host.

Git identity is not a secret: the sandbox takes it from the host's git config.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ..core.errors import PolicyError, Refused
from ..core.places import secrets_path, user_config_dir  # noqa: F401 - secrets_path is this module's API

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

def parse_env(text: str, source: str = "secrets.env") -> dict[str, str]:
    """KEY=VALUE lines: blank lines and # comments skipped, optional ``export``,
    values bare (trailing `` # comment`` dropped), 'single-quoted' (literal) or
    "double-quoted" (\\" \\\\ \\n \\$ escapes).  Nothing is expanded or run."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export ") or line.startswith("export\t"):
            line = line[len("export"):].lstrip()
        key, sep, rest = line.partition("=")
        key = key.strip()
        if not sep or not ENV_NAME.match(key):
            raise PolicyError(f"{source}:{number}: expected KEY=VALUE, got {raw.strip()!r}")
        try:
            values[key] = _value(rest.lstrip())
        except ValueError as exc:
            raise PolicyError(f"{source}:{number}: {exc}") from None
    return values


def _value(rest: str) -> str:
    if not rest:
        return ""
    quote = rest[0]
    if quote == "'":
        end = rest.find("'", 1)
        if end < 0:
            raise ValueError("unterminated single quote")
        _trailing(rest[end + 1:])
        return rest[1:end]
    if quote == '"':
        out, i = [], 1
        escapes = {'"': '"', "\\": "\\", "n": "\n", "$": "$", "`": "`"}
        while i < len(rest):
            ch = rest[i]
            if ch == "\\" and i + 1 < len(rest) and rest[i + 1] in escapes:
                out.append(escapes[rest[i + 1]])
                i += 2
                continue
            if ch == '"':
                _trailing(rest[i + 1:])
                return "".join(out)
            out.append(ch)
            i += 1
        raise ValueError("unterminated double quote")
    value = re.split(r"\s#", rest, maxsplit=1)[0].rstrip()
    if any(c.isspace() for c in value):
        raise ValueError("unquoted value contains whitespace; quote it")
    return value


def _trailing(tail: str) -> None:
    tail = tail.strip()
    if tail and not tail.startswith("#"):
        raise ValueError(f"unexpected text after the closing quote: {tail!r}")


def load_secrets(path: Path | None = None) -> dict[str, str]:
    """The secrets file's variables; {} when there is none.

    Refused (exit 3) unless it is a regular file, owned by us, mode 0600 or
    stricter -- checked on the open file, symlinks not followed.
    """
    path = path or secrets_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise Refused(f"{path}: cannot open the secrets file safely ({exc.strerror}); "
                      f"it must be a regular file, not a symlink") from exc
    with os.fdopen(fd, encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path}: the secrets file is not a regular file")
        if info.st_uid != os.getuid():
            raise Refused(f"{path}: owned by uid {info.st_uid}, not you (uid {os.getuid()}); "
                          f"refusing to read credentials from it")
        if info.st_mode & 0o077:
            raise Refused(f"{path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read it; "
                          f"refusing. Fix: chmod 600 {path}")
        return parse_env(handle.read(), str(path))
