"""Claude Code's settings for one sandbox target: the user's own plus chtop's session hooks.

They are part of what every sandbox sees (its agent config dir, ``agent_config.py``), so they
are rendered here, at the launch, for every sandbox; the sessions read the state they report.

The user's settings are ``<group>/claude/settings.json`` (host-side, never mounted).  The merge
is written host-side into the target's agent home and bind-mounted read-only over
``settings.json`` in its config dir (``agents/config_dirs.py``), so no agent can change the hooks
or settings that it or any other agent runs with.  Each hook runs inside the sandbox and writes
one word (the state) to ``$CLAUDE_CONFIG_DIR/chtop-state/$CHTOP_SESSION``; in a session's sandbox
that directory is the session's own state dir (mounted there, no other session's is), and
``CHTOP_SESSION`` is set only for agents started by ``inv session.start``, so a foreground
``inv sbox.claude`` writes nothing.  Every hook exits 0: a failing state hook never blocks the
agent.

Merging keeps the user's own settings and hooks, replaces chtop's entries (recognised by their
marker), takes a missing or empty file as ``{}``, and refuses a file that is not a JSON object.
chtop sets ``skipDangerousModePermissionPrompt`` unless the user's settings say otherwise: the
settings file is read-only inside, so claude could not record the answer to that question.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.agentfile import read_bytes
from ..core.atomic import write_atomic
from ..core.errors import Refused
from ..core.places import HOOK_STATE_DIR_NAME

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
    return (f'[ -n "$CHTOP_SESSION" ] && d="$CLAUDE_CONFIG_DIR/{HOOK_STATE_DIR_NAME}" && mkdir -p "$d" && '
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


def read_settings(path: Path) -> dict:
    """The user's settings (``{}`` when missing or empty); Refused when it is not a JSON object."""
    raw = read_bytes(path, limit=MAX_SETTINGS_BYTES)
    if raw is None:
        if not os.path.lexists(path):
            return {}
        raise Refused(f"{path} is not a regular file of at most {MAX_SETTINGS_BYTES} bytes (a link, a FIFO, too "
                      f"large?); chtop writes no agent settings from it. Replace it with a regular JSON file and retry")
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise Refused(f"{path} is not valid JSON ({exc}); chtop starts no agent with it. "
                      "Fix or remove it, then retry") from exc
    if not isinstance(data, dict):
        raise Refused(f"{path} is not a JSON object; chtop starts no agent with it. Fix or remove it, then retry")
    if not isinstance(data.get("hooks", {}), dict):
        raise Refused(f"{path}: \"hooks\" is not an object; chtop starts no agent with it")
    return data


def agent_settings(users: Path) -> dict:
    """The settings a target's claude runs with: the user's file ``users`` (Refused when broken),
    bypass-mode's question answered unless the user's file answers it, chtop's hooks merged in."""
    return merged_settings({"skipDangerousModePermissionPrompt": True, **read_settings(users)})


def install_settings(users: Path, dest: Path) -> bool:
    """Write ``agent_settings(users)`` to ``dest`` (host-side; mode 0644: it is mounted read-only for
    the agent, whatever its uid inside); True when the file changed."""
    wanted = json.dumps(agent_settings(users), indent=2) + "\n"
    try:
        if Path(dest).read_text() == wanted:
            return False
    except (OSError, ValueError):
        pass
    write_atomic(Path(dest), wanted, mode=0o644)
    return True
