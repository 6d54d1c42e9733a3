"""chtop's Claude Code hooks in the group's agent config (``<group>/claude/settings.json``).

That directory is ``CLAUDE_CONFIG_DIR`` in every sandbox of the group, so
the hooks reach every worktree's agent.  Each hook runs inside the sandbox
and writes one word (the state) to ``$CLAUDE_CONFIG_DIR/chtop-state/$CHTOP_SESSION``;
``CHTOP_SESSION`` is set only for agents started by ``inv session.start``, so
a foreground ``inv sbox.claude`` writes nothing.  Every hook exits 0: a
failing state hook never blocks the agent.

Installing merges: the user's own settings and hooks are kept, chtop's
entries (recognised by their marker) are replaced, a missing or empty file
is fine, and a file that is not a JSON object is refused (never
overwritten).  The file lies in a directory the agent can write, so it is
read as plain JSON data, written by a rename (a symlink planted there is
replaced, never followed), and keeps its owner.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ..atomic import write_atomic
from ..errors import Refused
from .agent_state import STATE_DIR_NAME

MARKER = "chtop-session-state"
HOOKED_AGENTS = ("claude",)        # the agents whose config takes these hooks (Claude Code's settings.json)
EVENTS = {                       # Claude Code hook event -> the state it means
    "UserPromptSubmit": "working",
    "PreToolUse": "working",
    "PostToolUse": "working",
    "Notification": "waiting",
    "Stop": "idle",
    "SessionEnd": "exited",
}
MAX_SETTINGS_BYTES = 1 << 20


def hook_command(state: str) -> str:
    """The shell command of one hook: write ``state`` atomically, never fail."""
    return (f'[ -n "$CHTOP_SESSION" ] && d="$CLAUDE_CONFIG_DIR/{STATE_DIR_NAME}" && mkdir -p "$d" && '
            f'printf \'%s\\n\' {state} > "$d/.$CHTOP_SESSION.$$" && mv -f "$d/.$CHTOP_SESSION.$$" "$d/$CHTOP_SESSION"; '
            f'exit 0  # {MARKER}')


def _is_ours(entry) -> bool:
    return isinstance(entry, dict) and any(
        isinstance(h, dict) and MARKER in str(h.get("command", "")) for h in entry.get("hooks") or [])


def merged_settings(settings: dict) -> dict:
    """``settings`` with chtop's hooks in place (one entry per event), everything else kept."""
    out = dict(settings)
    hooks = dict(out.get("hooks") or {})
    for event, state in EVENTS.items():
        entries = [e for e in (hooks.get(event) or []) if not _is_ours(e)]
        entries.append({"hooks": [{"type": "command", "command": hook_command(state), "timeout": 10}]})
        hooks[event] = entries
    out["hooks"] = hooks
    return out


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def read_settings(path: Path) -> dict:
    """The current settings (``{}`` when missing or empty); Refused when it is not a JSON object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise Refused(f"{path}: cannot read it ({exc.strerror}); chtop's session hooks are not installed. "
                      f"Replace it with a regular JSON file and retry") from exc
    with os.fdopen(fd, "rb") as fh:
        if not _regular(fh.fileno()):
            raise Refused(f"{path} is not a regular file; chtop's session hooks are not installed")
        raw = fh.read(MAX_SETTINGS_BYTES + 1)
    if len(raw) > MAX_SETTINGS_BYTES:
        raise Refused(f"{path} is larger than {MAX_SETTINGS_BYTES} bytes; chtop does not rewrite it")
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise Refused(f"{path} is not valid JSON ({exc}); chtop does not overwrite it. "
                      "Fix or remove it, then retry") from exc
    if not isinstance(data, dict):
        raise Refused(f"{path} is not a JSON object; chtop does not overwrite it. Fix or remove it, then retry")
    if not isinstance(data.get("hooks", {}), dict):
        raise Refused(f"{path}: \"hooks\" is not an object; chtop does not overwrite it")
    return data


def install_hooks(config_dir: Path) -> bool:
    """Merge chtop's hooks into ``config_dir/settings.json``; True when the file changed."""
    config_dir = Path(config_dir)
    config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = config_dir / "settings.json"
    current = read_settings(path)
    wanted = merged_settings(current)
    if wanted == current:
        return False
    owner = os.stat(config_dir)
    write_atomic(path, json.dumps(wanted, indent=2) + "\n", mode=0o600,
                 owner=(owner.st_uid, owner.st_gid) if os.geteuid() == 0 else None)
    return True


def prepare_state_dir(config_dir: Path) -> Path:
    """``<config>/chtop-state``, owned like the config dir (the agent writes into it)."""
    path = Path(config_dir) / STATE_DIR_NAME
    path.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        owner = os.stat(config_dir)
        st = os.lstat(path)
        if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid):
            os.lchown(path, owner.st_uid, owner.st_gid)
    return path
