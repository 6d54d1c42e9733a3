"""Where everything belongs: the one place that answers it.

- the user's chtop config dir (``$XDG_CONFIG_HOME/chtop``, else
  ``~/.config/chtop``), its ``secrets.env`` and ``notify.toml``, and the
  ``--dir`` group that lives there;
- a group's id, state dir (``<group>/.chtop``) and runtime dir (sockets);
- each sandbox target's own agent config (``<group>/.chtop/agents/<key>/``, see
  ``sandbox/agent_config.py``), the group's agent login dir (``<group>/claude``) and the login the
  proxy holds (``<group>/.chtop/logins/``), never mounted;
- the one rule for a worktree's name (``worktree.create``, the proxy's
  per-worktree sockets and layers, and the sandbox all use it);
- the ``--dir`` guard (never a directory that is or holds ``$HOME``, the
  config dir or the secrets file), applied by ``workspace.targets.target_for``,
  which every sandbox entry point goes through.

Only the standard library and ``errors`` are imported here; which sandbox
target a path is lives with the workspace model (``workspace/targets.py``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ChtopError, Refused, UsageError

STATE_DIR_NAME = ".chtop"
AGENTS_DIR_NAME = "agents"
LOGIN_DIR_NAME = "claude"
HOOK_STATE_DIR_NAME = "chtop-state"     # in an agent config dir: where a session's hooks report
SESSION_ID = re.compile(r"^[a-z0-9]{8,32}$")
SECRETS_NAME = "secrets.env"
MAX_RUNTIME_BASE = 46      # unix socket paths must stay under ~100 bytes
NOTIFY_NAME = "notify.toml"
WORKTREE_NAME_MAX = 64
_WORKTREE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
# runs of characters a container, host or dir name part does not take (compiled once, at import)
UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


# -- the user's config ---------------------------------------------------------------------------

def home_dir() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def user_config_dir(home: Path | None = None) -> Path:
    """``$XDG_CONFIG_HOME/chtop``, else ``~/.config/chtop``: secrets, extra agents, the --dir group.

    An explicit ``home`` (tests) ignores ``XDG_CONFIG_HOME``.
    """
    if home is None and os.environ.get("XDG_CONFIG_HOME"):
        return Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
    return (home or home_dir()) / ".config" / "chtop"


def read_user_config() -> tuple[Path, dict]:
    """(``<config>/config.toml``, its table; empty when there is none): the user's chtop settings
    (``group``, ``python``)."""
    path = user_config_dir() / "config.toml"
    return path, read_toml(path)


def read_toml(path: Path) -> dict:
    """A TOML file of the user's config dir as a table (empty when there is none); unreadable or
    invalid is a usage error naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it: {exc}") from None


def secrets_path(home: Path | None = None) -> Path:
    return user_config_dir(home) / SECRETS_NAME


def notify_config_path(home: Path | None = None) -> Path:
    """``<config>/notify.toml``: the phone notifications' settings and secret (mode 0600)."""
    return user_config_dir(home) / NOTIFY_NAME


def default_policy_dir() -> Path:
    """The policy shipped with chtop (chtop_tasks/default_policy -> ../sandbox)."""
    return (Path(__file__).resolve().parents[1] / "default_policy").resolve()


def dir_group_policy_dir() -> Path:
    """The --dir group's policy: ``<config>/sandbox`` when it has an fs-allow.txt, else the shipped one."""
    own = user_config_dir() / "sandbox"
    return own if (own / "fs-allow.txt").is_file() else default_policy_dir()


def is_dir_group(group_dir: Path) -> bool:
    """Is ``group_dir`` the --dir group (the user config dir), rather than a workspace's grouping dir?"""
    return Path(group_dir).resolve() == user_config_dir().resolve()


def command_for_group(group_dir: Path) -> str:
    """The command that runs chtop's tasks for this group: ``inv`` in a workspace, ``chtop`` for the
    --dir group (outside a workspace ``inv`` has no tasks)."""
    return "chtop" if is_dir_group(group_dir) else "inv"


# -- a group's places ----------------------------------------------------------------------------

def group_id(group_dir: Path) -> str:
    """12 hex digits naming a group (its resolved path), for labels and runtime dirs."""
    return group_key(group_dir)[:12]


def group_key(group_dir: Path) -> str:
    from hashlib import sha256

    return sha256(str(Path(group_dir).resolve()).encode()).hexdigest()


def state_dir(group_dir: Path) -> Path:
    """``<group>/.chtop``: chtop's host-side state (proxy logs, pid, rootfs skeletons)."""
    return Path(group_dir) / STATE_DIR_NAME


def build_cache_dir(group_dir: Path, name: str) -> Path:
    """``<group>/.chtop/build-cache/<name>``: the caches of one worktree's (or the toplevel's) venv
    builds, read and written by that tree's builds alone."""
    return state_dir(group_dir) / "build-cache" / name


def compiler_cache_dir(group_dir: Path) -> Path:
    """``<group>/.chtop/compiler-cache``: ccache's masquerade links and the store of the toplevel's
    compiled objects, written by the toplevel's host builds, read-only to every other build."""
    return state_dir(group_dir) / "compiler-cache"


def group_lock_path(group_dir: Path) -> Path:
    """The flock every task that changes the group's worktrees or stores holds."""
    return state_dir(group_dir) / "group.lock"


def create_journal_path(group_dir: Path, name: str) -> Path:
    """What a running ``worktree.create --name NAME`` has made so far (gone when it ends)."""
    return state_dir(group_dir) / "creating" / f"{name}.json"


def agent_home(group_dir: Path, key: str) -> Path:
    """``<group>/.chtop/agents/<key>``: one sandbox target's agent config, host-side (only its
    ``config/`` is mounted, into that target's sandboxes alone)."""
    return state_dir(group_dir) / AGENTS_DIR_NAME / key


def dir_agent_key(root: Path) -> str:
    """The agent-config key of a --dir directory: its name (made safe) and 12 hex digits of its path."""
    from hashlib import sha256

    name = UNSAFE_IN_NAME.sub("-", Path(root).name).lstrip(".-")[:40] or "dir"
    return f"{name}-{sha256(str(Path(root)).encode()).hexdigest()[:12]}"


def session_state_dir(home: Path, session_id: str) -> Path:
    """A session's hook state dir on the host, under its target's agent home (mounted at
    ``config/chtop-state`` in that session's sandbox alone)."""
    if not SESSION_ID.match(session_id):
        raise ValueError(f"bad session id {session_id!r}")
    return Path(home) / "sessions" / session_id


def login_dir(group_dir: Path) -> Path:
    """``<group>/claude``: the group's agent login and the user's claude settings, host-side only
    (before per-worktree config dirs it was every sandbox's shared CLAUDE_CONFIG_DIR)."""
    return Path(group_dir) / LOGIN_DIR_NAME


def login_store_path(group_dir: Path, agent: str) -> Path:
    """``<group>/.chtop/logins/<agent>.json``: the group's one subscription login of ``agent``, held
    for the proxy (which refreshes it), host-side only, never mounted (see docs/credentials.md)."""
    return state_dir(group_dir) / "logins" / f"{agent}.json"


def runtime_base() -> Path:
    """``${XDG_RUNTIME_DIR or /tmp}/chtop-<uid>``: the proxy's and tmux's sockets (``/tmp``'s when
    the runtime dir's path is too long for the socket paths below it)."""
    base = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/tmp", f"chtop-{os.getuid()}")
    if len(base) > MAX_RUNTIME_BASE:
        base = os.path.join("/tmp", f"chtop-{os.getuid()}")
    return Path(base)


def runtime_dir(group_dir: Path, create: bool = False) -> Path:
    """``${XDG_RUNTIME_DIR or /tmp}/chtop-<uid>/<group id>``, mode 0700 (the proxy's sockets)."""
    base = runtime_base()
    path = base / group_id(group_dir)
    if create:
        for d in (base, path):
            ensure_private_dir(d)
    return path


def is_mine_or_missing(path: Path) -> bool:
    """``path`` is missing, or a real directory (not a link) of this user's: a private dir in a
    world-writable place (/tmp, /dev/shm) that nobody else has made first."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return st.st_uid == os.getuid() and not os.path.islink(path) and os.path.isdir(path)


def ensure_private_dir(path: Path) -> None:
    """Make ``path`` (mode 0700) if missing; refuse it unless it is this user's own directory."""
    Path(path).mkdir(mode=0o700, exist_ok=True)
    if not is_mine_or_missing(path):
        raise ChtopError(f"{path} is not a directory owned by you; refusing to use it "
                         "(remove it, or have its owner remove it, and retry)")
    if os.lstat(path).st_mode & 0o077:
        os.chmod(path, 0o700)


# -- names ---------------------------------------------------------------------------------------

def dir_name_problem(name) -> str | None:
    """Why ``name`` cannot name a directory of its own (a repo, a worktree), or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if "/" in name or "\\" in name:
        return "must not contain '/'"
    if name.startswith("-"):
        return "must not start with '-'"
    if name.startswith("."):
        return "must not start with '.'"
    return None


def worktree_name_problem(name) -> str | None:
    """Why ``name`` cannot be a worktree's name, or None.  Letters, digits and ``. _ -``, not
    starting with ``.`` or ``-``, at most 64 characters (it names a dir, a branch, a socket dir
    and a policy layer)."""
    why = dir_name_problem(name)
    if why:
        return why
    if len(name) > WORKTREE_NAME_MAX:
        return f"must be at most {WORKTREE_NAME_MAX} characters"
    if not _WORKTREE_NAME.match(name):
        return "may only contain letters, digits and . _ -"
    if name.endswith(".lock") or ".." in name:
        return "is not a valid git branch name (no '..', not ending in '.lock')"
    return None


def check_worktree_name(name: str) -> str:
    why = worktree_name_problem(name)
    if why:
        raise UsageError(f"bad worktree name {name!r}: {why}")
    return name


# -- the --dir guard -----------------------------------------------------------------------------

def check_dir_allowed(root: Path, home: Path | None = None) -> None:
    """Refuse a --dir that is ``/``, is or holds ``$HOME``, or is, holds or lies in the chtop config dir
    (secrets, the --dir group's policy and agent login)."""
    root = Path(root).resolve()
    config = user_config_dir(home).resolve()
    secrets = secrets_path(home).resolve()
    home = (home or home_dir()).resolve()
    if root == Path("/") or root == home or root in home.parents:
        raise Refused(f"--dir {root}: refusing to sandbox a directory that holds your home directory ({home}); "
                      "it would mount everything in it.  Pick the project directory itself")
    for guarded, what in ((config, "chtop's config dir"), (secrets, "the secrets file")):
        if guarded == root or root in guarded.parents or guarded in root.parents:
            raise Refused(f"--dir {root}: refusing to sandbox {what} ({guarded}) or a directory that holds "
                          "or lies in it; pick the project directory itself")
