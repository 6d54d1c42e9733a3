"""Each sandbox target's own agent config dir, made and filled host-side before every launch.

    <group>/.chtop/agents/<key>/     (in the group's state dir, which is never mounted whole)
        config/          CLAUDE_CONFIG_DIR, and the other CLIs' config_subdir, of this target's
                         sandboxes: the one agent config dir they see, read-write
        settings.json    claude's settings (the user's + chtop's hooks, agent_settings.py),
                         mounted read-only over config/settings.json
        sessions/<id>/   one session's hook state dir, mounted read-write over
                         config/chtop-state in that session's sandbox alone

``<key>`` is the worktree's name, or a --dir directory's name and path hash (``places.py``).

The group's login dir (``<group>/claude``; ``~/.config/chtop/claude`` for --dir) is never
mounted.  Before per-target dirs it was every sandbox's CLAUDE_CONFIG_DIR, so an existing one
keeps working: its login files (the registry's ``login_files``: claude's ``.credentials.json``,
codex's ``codex/auth.json``) are copied into a config dir that has none or an older one (not when the
proxy adds the credential; when it holds the group's login, an older copy is removed); its ``.claude.json`` (onboarding, theme, accepted API keys, and the project entries
of this target's own paths only) and this target's own transcripts (``projects/<its path>``) seed
a new config dir.  They are read as data (no link followed, bounded) and written by a rename.
Nothing is ever copied from one target's config dir to another's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core.agentfile import read_bytes, read_regular
from ..core.atomic import write_atomic, write_atomic_at
from ..core.places import HOOK_STATE_DIR_NAME, SESSION_ID, session_state_dir
from ..core.term import warn
from .agent_settings import install_settings, read_settings
from .mounts import is_within

SETTINGS = "settings.json"
ACCOUNT_FILE = ".claude.json"
TRANSCRIPTS = "projects"
MAX_LOGIN_BYTES = 1 << 20
MAX_ACCOUNT_BYTES = 16 << 20


@dataclass(frozen=True)
class AgentConfig:
    """What one launch needs of its target's agent config (computed; nothing made)."""

    home: Path                     # <group>/.chtop/agents/<key>
    login: Path                    # the group's login dir
    root: Path                     # the target's root (whose project entries seed a new config)
    session: str | None = None     # the session id of a session's launch
    subdirs: tuple[str, ...] = ()  # config_subdir of the agent launched (made before it, owned like config/)
    login_files: tuple[str, ...] = ()   # its login files (registry ``login_files``), relative to config/
    withheld: tuple[str, ...] = ()      # login files removed from config/: the proxy holds the group's login
    login_defaults: tuple[tuple[str, bytes], ...] = ()   # (file, contents) written where no login is left

    @property
    def config(self) -> Path:
        return self.home / "config"

    @property
    def settings(self) -> Path:
        return self.home / SETTINGS

    @property
    def state_dir(self) -> Path | None:
        return session_state_dir(self.home, self.session) if self.session else None

    def mounts(self) -> list[tuple[Path, Path, str, str]]:
        """(src, dst, mode, why) of what is mounted inside config/ (config/ itself: the mount plan)."""
        out = [(self.settings, self.config / SETTINGS, "ro", "claude's settings (the user's + chtop's hooks)")]
        if self.session:
            out.append((self.state_dir, self.config / HOOK_STATE_DIR_NAME, "rw", "this session's hook state dir"))
        return out


def agent_config_for(target, session: str | None = None, subdirs: tuple[str, ...] = (),
                     login_files: tuple[str, ...] = (), withheld: tuple[str, ...] = (),
                     login_defaults: tuple[tuple[str, bytes], ...] = ()) -> AgentConfig:
    if session is not None and not SESSION_ID.match(session):
        raise ValueError(f"bad session id {session!r}")
    return AgentConfig(target.agent_home, target.login_dir, target.root, session, tuple(subdirs), tuple(login_files),
                       tuple(withheld), tuple(login_defaults))


def check_user_settings(target) -> None:
    """Refused when the user's claude settings cannot be used (before anything starts)."""
    read_settings(target.login_dir / SETTINGS)


def remove_session_state(home: Path, session_id: str) -> None:
    """Drop what a session's agent left in its state dir (a link in it is removed, never followed)."""
    try:
        shutil.rmtree(session_state_dir(home, session_id))
    except (OSError, ValueError):
        pass


def prepare(cfg: AgentConfig, owner: tuple[int, int] | None = None) -> None:
    """Make ``cfg``'s dirs and mount points, write its settings, seed its login.  ``owner``: as root,
    the agent's host ids (what it makes inside is theirs; config/ and the state dir must be too)."""
    cfg.home.mkdir(mode=0o700, parents=True, exist_ok=True)     # in the group's state dir: host-side
    new = not os.path.lexists(cfg.config)
    _agent_dir(cfg.config, owner)
    install_settings(cfg.login / SETTINGS, cfg.settings)
    _mount_point(cfg.config / SETTINGS, is_dir=False, owner=owner)
    if cfg.state_dir is not None:
        cfg.state_dir.parent.mkdir(mode=0o700, exist_ok=True)
        _agent_dir(cfg.state_dir, owner)
        _mount_point(cfg.config / HOOK_STATE_DIR_NAME, is_dir=True, owner=owner)
    for sub in cfg.subdirs:
        _mount_point(cfg.config / sub, is_dir=True, owner=owner)
    drop_withheld_login(cfg)            # first: a login the group has may then be copied in its place
    seed_login(cfg, owner)
    seed_login_defaults(cfg, owner)
    if new:
        seed_account(cfg, owner)
        seed_transcripts(cfg, owner)


def _agent_dir(path: Path, owner: tuple[int, int] | None) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if owner is not None and (st.st_uid, st.st_gid) != owner:
        os.lchown(path, *owner)


def _mount_point(path: Path, is_dir: bool, owner: tuple[int, int] | None) -> None:
    """``path`` in an agent-written dir made a plain file or dir: whatever the agent left there
    instead (a link, a FIFO, a dir for a file) is removed, never followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and (stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)):
        return
    with contextlib.suppress(FileNotFoundError):         # another launch of this target removed it first
        if st is not None and stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        elif st is not None:
            os.unlink(path)
    try:
        if is_dir:
            os.mkdir(path, 0o700)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        # two launches of one target at once (a first sandbox and its neighbour): the other made it
        st = os.lstat(path)
        if not (stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)):
            raise
    if owner is not None:
        os.lchown(path, *owner)


def seed_login(cfg: AgentConfig, owner: tuple[int, int] | None) -> None:
    """The group's login files copied into ``cfg.config`` where it has none, or an older one.  A
    file in an agent's config_subdir is written through a descriptor of that dir opened without
    following links: another sandbox of this target may be running and planting them."""
    for rel in cfg.login_files:
        src = cfg.login / rel
        data = read_bytes(src, limit=MAX_LOGIN_BYTES)
        if data is not None:
            _seed_file(cfg, rel, data, os.lstat(src).st_mtime, owner, make_dirs=False)


def drop_withheld_login(cfg: AgentConfig) -> None:
    """An older copy of a login the proxy now holds is removed from ``cfg.config`` (through a descriptor of
    its dir opened without following links; whatever the agent made in its place goes too, unfollowed)."""
    for rel in cfg.withheld:
        parent, _, name = rel.rpartition("/")
        try:
            fd = _open_dir_nofollow(cfg.config, parent, None, make=False)
        except OSError:
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:          # e.g. a dir the agent made there
            warn(f"could not remove {cfg.config / rel} ({exc.strerror}): it holds an old copy of the login")
        finally:
            os.close(fd)


def login_in_effect(config: Path, login: Path, rel: str) -> bytes | None:
    """The login file ``rel`` an agent will find in its config dir ``config`` after ``seed_login``: the
    group's (in ``login``) when it is newer or the config dir has none, else the config dir's own; read
    without following a link (None when neither is a regular file)."""
    own, group = read_regular(config / rel, limit=MAX_LOGIN_BYTES), read_regular(login / rel, limit=MAX_LOGIN_BYTES)
    if group is not None and (own is None or own[1].st_mtime < group[1].st_mtime):
        return group[0]
    return None if own is None else own[0]


def seed_login_defaults(cfg: AgentConfig, owner: tuple[int, int] | None) -> None:
    """``cfg.login_defaults`` written where the config dir holds no such file (a credential route's
    placeholder login, an agent's settings choosing the key); a missing dir on the way is made, owned
    like the config dir."""
    for rel, data in cfg.login_defaults:
        _seed_file(cfg, rel, data, 0.0, owner, make_dirs=True)


def _seed_file(cfg: AgentConfig, rel: str, data: bytes, than: float, owner: tuple[int, int] | None, *,
               make_dirs: bool) -> None:
    """``data`` written as ``cfg.config/rel`` where no regular file is, or one older than ``than``,
    through a descriptor of its dir opened without following links."""
    parent, _, name = rel.rpartition("/")
    try:
        fd = _open_dir_nofollow(cfg.config, parent, owner, make=make_dirs)
    except OSError as exc:
        warn(f"could not open {cfg.config / parent} ({exc.strerror}); the agent there starts without {rel}")
        return
    try:
        if _missing_or_older(fd, name, than):
            write_atomic_at(fd, name, data, mode=0o600, owner=owner)
    except OSError as exc:          # e.g. a dir the agent made there
        warn(f"could not write {cfg.config / rel} ({exc.strerror}); the agent there starts without it")
    finally:
        os.close(fd)


def _open_dir_nofollow(top: Path, rel: str, owner: tuple[int, int] | None, *, make: bool = True) -> int:
    """A descriptor of ``top/rel``, each part opened without following a link (``make``: made 0700 when
    missing)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(top, flags)
    try:
        for part in [p for p in rel.split("/") if p]:
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                    if owner is not None:
                        os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            next_fd = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _missing_or_older(dir_fd: int, name: str, than: float) -> bool:
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    return not stat.S_ISREG(st.st_mode) or st.st_mtime < than


def _write_for_agent(path: Path, text: str, owner: tuple[int, int] | None) -> None:
    try:
        write_atomic(path, text, mode=0o600, owner=owner)
    except OSError as exc:          # e.g. a dir the agent made there
        warn(f"could not write {path} ({exc.strerror}); the agent there starts without it")


def seed_account(cfg: AgentConfig, owner: tuple[int, int] | None) -> None:
    """A new config dir's ``.claude.json`` from the group's: everything but other targets' projects."""
    data = read_bytes(cfg.login / ACCOUNT_FILE, limit=MAX_ACCOUNT_BYTES)
    try:
        account = json.loads(data) if data else None
    except ValueError:
        account = None
    if not isinstance(account, dict):
        return
    projects = account.get("projects")
    if isinstance(projects, dict):
        account["projects"] = {path: entry for path, entry in projects.items()
                               if os.path.isabs(path) and is_within(Path(path), cfg.root)}
    _write_for_agent(cfg.config / ACCOUNT_FILE, json.dumps(account, indent=2) + "\n", owner)


def transcript_dir_name(path: Path) -> str:
    """The name claude gives a project's transcript dir: its path, every other character a '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def seed_transcripts(cfg: AgentConfig, owner: tuple[int, int] | None) -> None:
    """This target's own conversations from the group's old shared dir (``--continue`` keeps working)."""
    name = transcript_dir_name(cfg.root)
    src = cfg.login / TRANSCRIPTS / name
    dst = cfg.config / TRANSCRIPTS / name
    if src.is_dir() and not src.is_symlink() and not os.path.lexists(cfg.config / TRANSCRIPTS):
        try:
            shutil.copytree(src, dst, symlinks=True)
        except (OSError, shutil.Error) as exc:
            warn(f"could not copy {src}: {exc}")
            return
        if owner is not None:
            for path in [cfg.config / TRANSCRIPTS, *dst.rglob("*"), dst]:
                os.lchown(path, *owner)
