"""Host-side session records: ``<group>/.chtop/sessions/<worktree>.json``.

The group's state dir is never mounted into a sandbox, so these files are
chtop's own: written atomically by ``session.start`` and by the process that
runs in the session's terminal (the pane process), read by ``session.list``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..core.atomic import write_atomic
from ..core.places import state_dir

RECORD_SUFFIX = ".json"
ENV_SUFFIX = ".env.json"
LOG_SUFFIX = ".log"
SCREEN_SUFFIX = ".screen.txt"


@dataclass
class Record:
    """One worktree's session, as chtop last knew it."""

    worktree: str
    root: str                       # the worktree's path
    group: str                      # the grouping dir
    policy_dir: str                 # the group's sandbox/ policy (for pending approvals)
    agent: str
    args: list[str]
    continue_: bool
    session_id: str                 # per start: names the agent's hook state file
    tmux_socket: str
    tmux_session: str
    started_at: float
    agent_home: str = ""            # the worktree's agent home (its session state dirs are there)
    status: str = "running"         # running | exited
    state: str = "working"          # working | waiting | idle | exited (lost is computed)
    since: float = 0.0
    exit_status: int | None = None
    container: str = ""             # the podman container, once the pane process planned it
    pane_pid: int | None = None
    error: str = ""                 # why the pane process could not launch the agent


def sessions_dir(group_dir: Path, create: bool = False) -> Path:
    path = state_dir(group_dir) / "sessions"
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def record_path(group_dir: Path, worktree: str) -> Path:
    return sessions_dir(group_dir) / f"{worktree}{RECORD_SUFFIX}"


def env_path(group_dir: Path, worktree: str) -> Path:
    return sessions_dir(group_dir) / f"{worktree}{ENV_SUFFIX}"


def log_path(group_dir: Path, worktree: str) -> Path:
    return sessions_dir(group_dir) / f"{worktree}{LOG_SUFFIX}"


def screen_path(group_dir: Path, worktree: str) -> Path:
    return sessions_dir(group_dir) / f"{worktree}{SCREEN_SUFFIX}"


def write_json_atomic(path: Path, data, mode: int = 0o600) -> None:
    """Write ``data`` as JSON to ``path`` by a rename (readers never see half a file)."""
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n", mode=mode)


def save(group_dir: Path, record: Record) -> None:
    sessions_dir(group_dir, create=True)
    write_json_atomic(record_path(group_dir, record.worktree), asdict(record))


def load(group_dir: Path, worktree: str) -> Record | None:
    try:
        data = json.loads(record_path(group_dir, worktree).read_text())
    except (FileNotFoundError, ValueError):
        return None
    known = {f.name for f in fields(Record)}
    try:
        return Record(**{k: v for k, v in data.items() if k in known})
    except TypeError:
        return None


def load_all(group_dir: Path) -> list[Record]:
    """Every record of the group, by worktree name."""
    d = sessions_dir(group_dir)
    if not d.is_dir():
        return []
    names = sorted(p.name[: -len(RECORD_SUFFIX)] for p in d.glob(f"*{RECORD_SUFFIX}")
                   if not p.name.endswith(ENV_SUFFIX) and not p.name.startswith("."))
    return [r for r in (load(group_dir, n) for n in names) if r is not None]


def update(group_dir: Path, worktree: str, session_id: str, **changes) -> Record | None:
    """Change fields of the record of this session run (not a newer one); None if it is gone."""
    record = load(group_dir, worktree)
    if record is None or record.session_id != session_id:
        return None
    for key, value in changes.items():
        setattr(record, key, value)
    save(group_dir, record)
    return record


def remove(group_dir: Path, worktree: str) -> None:
    for path in (record_path(group_dir, worktree), env_path(group_dir, worktree)):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def now() -> float:
    return time.time()
