"""What gets sandboxed, and the podman launch for it (plan, then run).

``targets.target_for`` finds the worktree (or the ``--dir`` directory) and
its policy; ``plan_launch reads the policy, ensures the egress proxy (fail
closed), computes the mount plan and returns the full ``podman run`` argv;
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core import agentfile, gitrun
from ..core.errors import ChtopError, CommandFailed, Refused, UsageError
from ..core.fanout import answered_before_leaving
from ..core.places import ensure_private_dir, group_id, home_dir, is_mine_or_missing
from ..core.runner import format_command
from ..core.term import warn
from ..stores.quarantine import branch_ref_pairs, sync_worktree
from ..workspace.layout import admin_dir_for, private_store, verify_git_dirs
from ..workspace.targets import Target
from . import podman as podman_mod
from . import seccomp
from .agent_config import AgentConfig, agent_config_for
from .agent_config import prepare as prepare_agent_config
from .gitconfig import COPIED_KEYS_RE, sandbox_gitconfig
from .limits import Limits, ipc_args, killed_note, limit_args, load_limits, why_not_enforced
from .mounts import MountContext, plan_mounts
from .once import VERBOSE_ENV, verbose
from .policy import STRUCTURAL_ENV, load_policy
from .rootfs import claim_run_dir, ensure_skeleton, remove_run_dir, stale_run_dirs
from .running import LABEL, container_name_prefix, ps_rows, slug
from .visible import unseen_note

NETWORKS = ("proxy", "host", "open")
PURPOSE_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PASS_THROUGH_CUDA = ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")
# The podman process's own environment (it finds its storage and runtime dir with these).
# podman's own environment (never the container's), which sbox.run's waiting shell and the Python
# it may start for the exit import have too (PYTHONPYCACHEPREFIX: see tasks.py)
PODMAN_ENV = ("PATH", "HOME", "USER", "LOGNAME", "TERM", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
              "XDG_DATA_HOME", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF",
              "PYTHONPYCACHEPREFIX")
NO_PROXY = "localhost,127.0.0.1,::1"


@dataclass(frozen=True)
class ProxyNeed:
    """The group proxy a launch needs, and where it will listen (computed, not started)."""

    group_dir: Path
    policy_dir: Path
    worktree: str | None
    socket_path: Path | None      # mounted into the container (network "proxy")
    url: str
    build_hosts: tuple[str, ...] | None = None   # a venv build's socket, with these index hosts allowed


@dataclass(frozen=True)
class RootSetup:
    """The per-run skeleton root to write before podman runs (and remove after it)."""

    run_dir: Path                  # <runs>/<container name>: launcher.pid and root/
    mounts: tuple
    devices: tuple
    owner: tuple[int, int] | None  # rootful: host uid/gid of the namespace's root (owns the skeleton)
    rootful_base: Path | None      # rootful: the root-owned dir that must hold the skeleton
    agent_ids: tuple[int, int] | None = None   # rootful: the agent's uid/gid inside = on its mounts
    agent_dirs: tuple[Path, ...] = ()          # rootful: root-made dirs the agent must own (config dir)
    private_base: Path | None = None           # rootless in /dev/shm: the user's own 0700 dir above the runs
    gitconfig: str = ""                        # the sandbox's global git config (``gitconfig.py``)
    mount_flags_hook: bool = False             # rootful: crun drops nosuid,nodev from rw volumes without it
    image_root: bool = False                   # a local image is the root, not the skeleton

    @property
    def seccomp_profile(self) -> Path:
        """Host-side, beside the skeleton (never mounted)."""
        return self.run_dir / "seccomp.json"

    @property
    def hooks_dir(self) -> Path | None:
        """Rootful with a user namespace: the OCI hook that gives read-write volumes their
        nosuid,nodev (``mount_flags_hook.py``); host-side, beside the skeleton (never mounted)."""
        return self.run_dir / "hooks" if self.mount_flags_hook else None

    @property
    def skeleton(self) -> Path:
        return self.run_dir / "root"

    @property
    def runs(self) -> Path:
        return self.run_dir.parent


@dataclass(frozen=True)
class LaunchSetup:
    state_dir: Path
    proxy: ProxyNeed | None
    root: RootSetup
    agent_config: AgentConfig | None = None


@dataclass
class LaunchPlan:
    argv: list[str]
    container_name: str
    env: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    setup: LaunchSetup | None = None
    limits: Limits = field(default_factory=Limits)     # the limits podman enforces (none where it cannot)


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a caller decides about one launch (sbox.*, an agent, the GPU check)."""

    target: Target
    command: list[str]
    interactive: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    purpose: str = "run"
    network: str = "proxy"
    allow_self_edit: bool = False
    cwd: Path | None = None
    image: str | None = None
    image_trees: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()   # said before the warnings (e.g. which token an agent uses)
    session: str | None = None    # a session's id: its hook state dir is mounted (that session's alone)
    agent_subdirs: tuple[str, ...] = ()   # the agent's config_subdir, made before the launch, owned like it
    login_files: tuple[str, ...] = ()     # in the config dir: copied from the group's login dir when newer
    withheld_login_files: tuple[str, ...] = ()   # in the config dir: removed (the proxy holds the login)
    login_defaults: tuple[tuple[str, bytes], ...] = ()   # (file, contents) written there when it has none
    build_rw: tuple[Path, ...] = ()   # venv.build of this worktree only (venv/sandboxed.py)
    build_ro: tuple[Path, ...] = ()
    build_hosts: tuple[str, ...] | None = None   # venv.build: the build's own proxy socket, these index hosts
    # the caller has nothing left to do after the sandbox (sbox.run): a non-interactive launch then
    # becomes a small shell that waits for podman and removes the per-run files, so no Python
    # process stays alive per sandbox
    replace_process: bool = False


IDENTITY_VARS = {f"GIT_{role}_{field_}": key for role in ("AUTHOR", "COMMITTER")
                 for field_, key in (("NAME", "user.name"), ("EMAIL", "user.email"))}


# what git opens by itself at the top of a git dir when it starts in a repo (``git config`` included)
GIT_OPENS_AT_START = ("HEAD", "config", "config.worktree", "commondir")


def check_dir_git_store(root: Path) -> None:
    """A ``--dir`` directory's own ``.git`` is the agent's (all but its pinned config, hooks, info,
    commondir): a FIFO (or a link, a socket) there that git opens at its start would block the
    launch's git; refused by name before git runs."""
    dot_git = root / ".git"
    if not dot_git.is_dir() or dot_git.is_symlink():
        return
    for name in GIT_OPENS_AT_START:
        what = agentfile.non_regular(dot_git / name)
        if what is not None:
            raise Refused(f"{dot_git / name} is {what}, not a file (the sandbox can write {dot_git}): git "
                          f"would block on it or read elsewhere; remove it (rm {dot_git / name}), then retry")


def host_git_config_read(root: Path):
    """The host's values of the keys the sandbox's git config copies: one ``git config`` process,
    started now (it runs while the rest is planned); the function returned waits for it and gives
    the values."""
    check_dir_git_store(root)
    started = gitrun.git_started(root, ["config", "--get-regexp", COPIED_KEYS_RE], check=False, timeout=10)

    def values() -> dict[str, str]:
        config: dict[str, str] = {}
        for line in started.result().stdout.splitlines():
            key, _, value = line.partition(" ")
            config[key] = value.strip()       # the last one wins, as in git
        return config
    return values


def _git_identity(config: dict[str, str], host_env: dict[str, str]) -> dict[str, str]:
    """The host's identity for commits inside: env overrides, else the host's git config."""
    out = {}
    for var, key in IDENTITY_VARS.items():
        value = host_env.get(var) or config.get(key)
        if value:
            out[var] = value
    return out


def _mount_context(target: Target, proxy_dir: Path | None, self_edit: bool,
                   image_trees: tuple[Path, ...] = (), agent: AgentConfig | None = None,
                   build: tuple[tuple[Path, ...], tuple[Path, ...]] = ((), ())) -> MountContext:
    home = home_dir()
    agent_mounts = tuple(agent.mounts()) if agent is not None else ()
    hidden = (target.state_dir, target.login_dir)       # never mounted; masked where a policy path holds them
    if target.kind == "worktree":
        ws = target.workspace
        stores = []
        for checkout in ws.checkouts():
            store = private_store(ws.grouping, ws.name, checkout.name)
            if checkout.path.exists() and store.is_dir():
                stores.append((store, admin_dir_for(store, checkout.path)))
        return MountContext(
            "worktree", target.root, target.config_dir, home, grouping=ws.grouping, toplevel=ws.toplevel,
            repo_names=tuple(ws.manifest.names), stores=tuple(stores), extern=ws.grouping / "extern",
            guarded=(ws.grouping,), state_dirs=hidden, proxy_dir=proxy_dir, self_edit=self_edit,
            image_trees=image_trees, agent_mounts=agent_mounts, build_rw=build[0], build_ro=build[1])
    return MountContext("dir", target.root, target.config_dir, home, guarded=(target.group_dir,),
                        state_dirs=hidden, proxy_dir=proxy_dir, self_edit=self_edit,
                        image_trees=image_trees, agent_mounts=agent_mounts)


def plan_launch(target: Target, command: list[str], *, interactive: bool,
                extra_env: dict[str, str] | None = None, purpose: str = "run",
                network: str = "proxy", allow_self_edit: bool = False,
                cwd: Path | None = None, image: str | None = None,
                image_trees: tuple[Path, ...] = (), session: str | None = None,
                agent_subdirs: tuple[str, ...] = (), login_files: tuple[str, ...] = (),
                withheld_login_files: tuple[str, ...] = (),
                login_defaults: tuple[tuple[str, bytes], ...] = (),
                build_rw: tuple[Path, ...] = (), build_ro: tuple[Path, ...] = (),
                build_hosts: tuple[str, ...] | None = None, stores_walked: bool = False) -> LaunchPlan:
    """The full ``podman run`` for ``command`` in ``target``'s sandbox; reads only.

    Reads the policy (PolicyError if broken), checks the git layout
    (WorkspaceError if tampered) and computes the mounts, the argv and the
    ``LaunchSetup`` still to do.  Nothing is started or written: that is
    ``prepare_launch``.  With ``image``, that local image is the root
    instead of the host overlay, and ``image_trees`` (its own copies of
    /usr, /etc) are not bound from the host.  ``session``: a session's id (its hook state dir is
    mounted); ``agent_subdirs``: the agent's config_subdir, made before it starts; ``login_files``:
    its login files, copied from the group's login dir (``withheld_login_files``: removed, the proxy
    holds the login; ``login_defaults``: (file, contents) written where the config dir has no such
    file).  ``build_rw``/``build_ro`` (a venv build of a
    worktree only): its ``.venv`` and the build cache writable, the base interpreter readable;
    ``build_hosts``: the build's own proxy socket, with those index hosts allowed on it.
    ``stores_walked``: the caller has just walked the worktree's private stores for planted files
    (``launch``'s ``sync_worktree``); the layout check then reads only the ``.git`` pointers.
    """
    extra_env = _checked_launch_args(command, purpose, network, extra_env)
    host_env = dict(os.environ)
    git_config_read = host_git_config_read(target.root)
    with answered_before_leaving(git_config_read):
        return _planned(target, command, git_config_read, interactive=interactive, extra_env=extra_env,
                        host_env=host_env, purpose=purpose, network=network, allow_self_edit=allow_self_edit,
                        cwd=cwd, image=image, image_trees=image_trees, session=session,
                        agent_subdirs=agent_subdirs, login_files=login_files,
                        withheld_login_files=withheld_login_files, login_defaults=login_defaults,
                        build_rw=build_rw, build_ro=build_ro, build_hosts=build_hosts, stores_walked=stores_walked)


def _planned(target, command, git_config_read, *, interactive, extra_env, host_env, purpose, network,
             allow_self_edit, cwd, image, image_trees, session, agent_subdirs, login_files, withheld_login_files,
             login_defaults, build_rw, build_ro, build_hosts, stores_walked) -> LaunchPlan:
    """``plan_launch``'s work, the host's git config coming from ``git_config_read`` (``host_git_config_read``)."""
    if target.kind == "worktree":
        verify_git_dirs(target.workspace, walk=not stores_walked)
    policy = load_policy(target.policy_dir, home_dir(), target.workspace.grouping if target.workspace else None,
                         target.name if target.kind == "worktree" else None)
    warnings = list(policy.warnings)
    proxy = _proxy_need(target, network, warnings, build_hosts if target.kind == "worktree" else None)
    proxy_socket = proxy.socket_path if proxy else None
    if allow_self_edit:
        warnings.append("--allow-self-edit: chtop's own code in this worktree (tasks.py, chtop_tasks/, "
                        "sandbox/, ...) is WRITABLE by the agent, and you run it on the host with inv/nox. "
                        "Review every change before running it.")

    agent = agent_config_for(target, session, agent_subdirs, login_files, withheld_login_files, login_defaults)
    ctx = _mount_context(target, proxy_socket.parent if proxy_socket else None, allow_self_edit,
                         tuple(Path(p) for p in image_trees) if image else (), agent,
                         (tuple(build_rw), tuple(build_ro)) if target.kind == "worktree" else ((), ()))
    mount_plan = plan_mounts(ctx, policy.fs)
    warnings += mount_plan.warnings
    if not image and command:
        warnings += [note for note in [unseen_note(command[0], mount_plan, host_env.get("PATH"))] if note]
    mounts = mount_plan.mounts()
    identity = podman_mod.identity_for(target.root)
    if identity.note:
        warnings.append(identity.note)
    limits, limits_note = _limits_for(target, identity.rootful)
    if limits_note:
        warnings.append(limits_note)
    ipc, ipc_note = ipc_args(limits)
    if ipc_note:
        warnings.append(ipc_note)
    name = f"{container_name_prefix(target.name)}{purpose}-{os.urandom(3).hex()}"   # secrets.token_hex(3)
    git_config = git_config_read()
    identity_env = _git_identity(git_config, host_env)
    root = _root_setup(target, identity, mounts, policy.devices, name,
                       sandbox_gitconfig(_with_env_identity(git_config, identity_env)), image_root=bool(image))

    named = {**policy.env_from(host_env), **{k: host_env[k] for k in PASS_THROUGH_CUDA if host_env.get(k)},
             **identity_env, **extra_env}
    podman_env = {k: host_env[k] for k in PODMAN_ENV if k in host_env}
    podman_env.update(named)       # values reach podman by env, never on its command line
    argv = podman_mod.build_argv(
        name=name, labels=_labels(target, purpose, network, limits, limits_note), mounts=mounts, skeleton=root.skeleton,
        workdir=_workdir(target, cwd), env_values=_structural_env(target, host_env, proxy.url if proxy else None),
        env_names=sorted(named), devices=policy.devices, network=network, proxy_socket=proxy_socket,
        interactive=interactive, identity=identity, hostname=f"sbox-{slug(target.name)}"[:63],
        command=command, image=image, limits=[] if limits_note else limit_args(limits),
        seccomp_profile=root.seccomp_profile, ipc=ipc, hooks_dir=root.hooks_dir)
    return LaunchPlan(argv, name, podman_env, warnings, LaunchSetup(target.state_dir, proxy, root, agent),
                      Limits() if limits_note else limits)


def _with_env_identity(config: dict[str, str], identity_env: dict[str, str]) -> dict[str, str]:
    """The host's git config with ``user.name``/``user.email`` as the commits inside will have them."""
    return {**config, **{key: identity_env[var] for var, key in IDENTITY_VARS.items()
                         if var.startswith("GIT_AUTHOR_") and var in identity_env}}


LIMITS_NOT_ENFORCED = "limits NOT enforced"
# Warnings the same at every launch: said the first time in a group (every time with CHTOP_VERBOSE=1).
SAID_ONCE = (LIMITS_NOT_ENFORCED, podman_mod.ROOTFUL_NOTE)


def _limits_for(target: Target, rootful: bool) -> tuple[Limits, str | None]:
    """This sandbox's limits, and a note when the host cannot enforce them (then none are passed)."""
    limits = load_limits(target.policy_dir, target.name if target.kind == "worktree" else None)
    if not limits.any:
        return limits, None
    why = why_not_enforced(rootful)
    if why:
        return limits, f"{LIMITS_NOT_ENFORCED} ({limits.describe()}): {why}"
    return limits, None


def _checked_launch_args(command, purpose, network, extra_env) -> dict[str, str]:
    if network not in NETWORKS:
        raise UsageError(f"network must be one of {', '.join(NETWORKS)}, not {network!r}")
    if not PURPOSE_RE.match(purpose):
        raise UsageError(f"purpose {purpose!r}: lowercase letters, digits and '-'")
    if not command:
        raise UsageError("no command to run (give it after --)")
    extra_env = dict(extra_env or {})
    for key in extra_env:
        if not ENV_NAME_RE.match(key) or key in STRUCTURAL_ENV:
            raise UsageError(f"extra env name {key!r} is invalid or structural (set by chtop itself)")
    return extra_env


def _proxy_need(target: Target, network: str, warnings: list[str],
                build_hosts: tuple[str, ...] | None = None) -> ProxyNeed | None:
    """The proxy ``network`` needs and where it listens (a worktree's venv build: its own socket,
    ``build_hosts`` allowed there); nothing is started here."""
    if network == "open":
        warnings.append("no proxy: open egress (host network, nothing filtered); for debugging only")
        return None
    from ..proxy.control import planned_endpoint
    from ..proxy.policy import NetPolicy

    NetPolicy(target.policy_dir).require()          # fail closed before anything else happens
    worktree = target.name if target.kind == "worktree" else None
    endpoint = planned_endpoint(target.group_dir, worktree, build=build_hosts is not None)
    if network == "host":
        warnings.append("--network host: the agent shares the host's network; the proxy is only honoured "
                        "by clients that use HTTPS_PROXY, a raw socket goes around it")
        return ProxyNeed(target.group_dir, target.policy_dir, worktree, None, endpoint.url, build_hosts)
    if not _which_host("python3") and not _which_host("socat"):
        raise ChtopError("neither python3 nor socat is installed on the host (/usr/bin); the sandbox needs one "
                         "to reach the proxy.  Install one: apt-get install python3")
    return ProxyNeed(target.group_dir, target.policy_dir, worktree, endpoint.socket_path,
                     f"http://127.0.0.1:{podman_mod.RELAY_PORT}", build_hosts)


def _root_setup(target: Target, identity, mounts, devices, name: str, gitconfig: str = "",
                image_root: bool = False) -> RootSetup:
    if identity.rootful:
        # the agent's unprivileged uid must reach the skeleton, and a root home (0700) is in the way
        base = ROOTFUL_SKELETONS
        return RootSetup(base / group_id(target.group_dir) / name, tuple(mounts), tuple(devices),
                         identity.ns_root, base, identity.tree_owner, (target.config_dir,), gitconfig=gitconfig,
                         mount_flags_hook=podman_mod.needs_mount_flags_hook(identity), image_root=image_root)
    base = RUN_SCRATCH / f"chtop-{os.getuid()}" if RUN_SCRATCH is not None else None
    if base is not None and is_mine_or_missing(base):   # else another user made it first
        return RootSetup(base / group_id(target.group_dir) / name, tuple(mounts), tuple(devices), None, None,
                         private_base=base, gitconfig=gitconfig)
    return RootSetup(target.state_dir / "sbox" / "runs" / name, tuple(mounts), tuple(devices), None, None,
                     gitconfig=gitconfig)


def _tmpfs_scratch() -> Path | None:
    """/dev/shm when it is there: a tmpfs on every Linux, where the ~50 mount points of a skeleton
    are made and removed without touching a disk (on a VM's disk they are much slower)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and not shm.is_symlink() and os.access(shm, os.W_OK | os.X_OK) else None


RUN_SCRATCH = _tmpfs_scratch()
ROOTFUL_SKELETONS = (RUN_SCRATCH or Path("/tmp")) / "chtop-rootfs-0"


def prepare_launch(plan: LaunchPlan) -> None:
    """Do what ``plan_launch`` left to do: the state dir, the proxy (fail closed: it raises when the
    proxy cannot start or listens elsewhere), the target's agent config dir (its settings written,
    its login seeded: ``agent_config.prepare``), the per-run skeleton root and its entry files (those
    of killed runs are removed after the sandbox: ``cleanup_launch``)."""
    setup = plan.setup
    setup.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)   # exists before it is masked
    if setup.proxy is not None:
        _ensure_planned_proxy(setup.proxy)
    if setup.agent_config is not None:
        prepare_agent_config(setup.agent_config, setup.root.agent_ids if setup.root.owner is not None else None)
    _write_root(setup.root, setup.proxy.socket_path if setup.proxy else None)


def cleanup_launch(plan: LaunchPlan) -> None:
    """After the sandbox exits: remove its per-run files (the skeleton root, the pid file), then
    those of killed runs whose container is gone too.  That sweep costs a podman call per killed
    run, so it runs here, after the sandbox, never on the way to its start (``WAITER`` does the same
    for ``sbox.run``)."""
    if plan.setup is not None:
        run_dir = plan.setup.root.run_dir
        remove_run_dir(run_dir)
        sweep_stale_runs(stale_run_dirs(run_dir.parent), plan.env)


def sweep_stale_runs(stale: list[Path], env: dict[str, str]) -> None:
    """Remove these run dirs of killed launches whose container is gone too (a podman call each)."""
    for run_dir in stale:
        proc = subprocess.run(["podman", "container", "exists", run_dir.name], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=60)
        if proc.returncode == 1:          # 0: still there (its launcher was SIGKILLed); 125: podman failed
            remove_run_dir(run_dir)


def _ensure_planned_proxy(need: ProxyNeed) -> None:
    from ..proxy import ensure_proxy

    endpoint = ensure_proxy(need.group_dir, need.policy_dir, worktree=need.worktree,
                            build_hosts=None if need.build_hosts is None else list(need.build_hosts))
    if need.socket_path is not None and endpoint.socket_path != need.socket_path:
        raise ChtopError(f"the group's proxy listens on {endpoint.socket_path}, not {need.socket_path}; "
                         "run `inv net.stop` and retry")


def _write_root(root: RootSetup, proxy_socket: Path | None) -> None:
    if root.owner is not None:
        _check_rootful_base(root.rootful_base)
        for path in _agent_owned(root, proxy_socket):
            os.chown(path, *root.agent_ids)
    if root.private_base is not None:
        ensure_private_dir(root.private_base)
    claim_run_dir(root.run_dir, 0o755 if root.owner is not None else 0o700)
    seccomp.write_profile(root.seccomp_profile)
    if root.hooks_dir is not None:
        podman_mod.write_mount_flags_hook(root.hooks_dir, None if root.image_root else root.skeleton, root.mounts)
    skeleton = ensure_skeleton(root.skeleton, list(root.mounts), root.devices)
    podman_mod.write_entry_files(skeleton, root.gitconfig)
    if root.owner is not None:
        for dirpath, dirnames, filenames in os.walk(skeleton):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.lchown(name, *root.owner)


def _agent_owned(root: RootSetup, proxy_socket: Path | None) -> list[Path]:
    """As root, what the agent (the tree owner's ids inside, idmapped) must own: this worktree's
    proxy socket and its dir (0700/0600), and the root-made agent config dir; never a symlink,
    never a path some other user already owns."""
    from ..proxy.fdpass import handoff_path

    out = []
    sockets = (proxy_socket.parent, proxy_socket, handoff_path(proxy_socket)) if proxy_socket else ()
    for path in [*sockets, *root.agent_dirs]:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == 0 and not Path(path).is_symlink() and (st.st_uid, st.st_gid) != root.agent_ids:
            out.append(Path(path))
    return out


def _check_rootful_base(base: Path) -> None:
    base.mkdir(mode=0o755, exist_ok=True)
    st = os.lstat(base)
    if st.st_uid != 0 or base.is_symlink() or st.st_mode & 0o022:
        raise ChtopError(f"{base} is not a root-owned directory writable only by root; remove it and retry")


def _structural_env(target: Target, host_env: dict[str, str], proxy_url: str | None) -> dict[str, str]:
    """The variables chtop itself sets inside (never taken from the policy or an agent)."""
    venv = target.root / ".venv"
    env = {"HOME": str(home_dir()), "PATH": f"{venv}/bin:{host_env.get('PATH', '/usr/bin:/bin')}",
           "IS_SANDBOX": "1", "PYTHONSAFEPATH": "1", "CLAUDE_CONFIG_DIR": str(target.config_dir),
           "CHTOP_SANDBOX": target.name, "GIT_CONFIG_GLOBAL": podman_mod.GITCONFIG}
    if venv.is_dir():
        env["VIRTUAL_ENV"] = str(venv)
    env_file = target.root / ".claude" / "env.sh"
    if env_file.is_file():
        env["CLAUDE_ENV_FILE"] = str(env_file)
    if host_env.get("CONDA_PREFIX"):
        env["CONDA_PREFIX"] = host_env["CONDA_PREFIX"]
    if proxy_url:
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[var] = proxy_url
        env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    return env


def _workdir(target: Target, cwd: Path | None) -> Path:
    """Where the command starts: ``cwd`` when it is inside the target, else its root."""
    if cwd is not None:
        cwd = Path(cwd).resolve()
        if cwd == target.root or target.root in cwd.parents:
            return cwd
    return target.root


def _labels(target: Target, purpose: str, network: str, limits: Limits | None = None,
            limits_note: str | None = None) -> dict[str, str]:
    labels = {f"{LABEL}.group": str(target.group_dir), f"{LABEL}.group_id": group_id(target.group_dir),
              f"{LABEL}.worktree": target.name, f"{LABEL}.root": str(target.root),
              f"{LABEL}.purpose": purpose, f"{LABEL}.network": network}
    if limits is not None:
        shown = limits.describe().replace(", ", " ")
        labels[f"{LABEL}.limits"] = f"{shown} (NOT enforced)" if limits_note and limits.any else shown
    return labels


def _which_host(name: str) -> bool:
    return any(Path(d, name).is_file() for d in ("/usr/bin", "/bin", "/usr/local/bin"))


def import_after_exit(target: Target) -> None:
    """A sandbox ended: bring its worktree's branch into the shared stores (never fails the exit)."""
    if target.kind != "worktree":
        return
    try:
        sync_worktree(target.workspace, convert=False, refresh=False)
    except ChtopError as exc:
        warn(f"importing {target.name}'s branch after the sandbox exited failed: {exc}\n"
             f"The next `inv git.status` in {target.root} retries it.")


def launch_line(plan: LaunchPlan) -> str:
    """What a launch prints: one short line, or the whole podman argv with ``CHTOP_VERBOSE=1``
    (``--dry-run`` prints the whole argv too)."""
    if verbose():
        return format_command(plan.argv)
    argv = plan.argv
    mounts = sum(1 for a in argv if a.startswith(("--volume=", "--mount=", "--tmpfs=")))
    try:
        command = argv[argv.index(podman_mod.ENTRY) + 3:]
    except ValueError:
        command = []
    network = next((a for a in argv if a.startswith("--network=")), "")
    shown = shlex.join(elided(word) for word in command)
    return (f"$ podman run {network} … ({mounts} mounts) {plan.container_name} -- {shown}"
            f"   [full command: {VERBOSE_ENV}=1]")


# a word of the sandboxed command longer than this (a venv build's plan, given as JSON) is shown
# by its length only on the short launch line
LONGEST_SHOWN_WORD = 120


def elided(word: str) -> str:
    """``word``, or for one too long for a one-line summary, what it is and how long."""
    if len(word) <= LONGEST_SHOWN_WORD:
        return word
    return f"<{len(word)} characters: {word[:40]}…>"


def announce(plan: LaunchPlan) -> None:
    print(launch_line(plan), file=sys.stderr, flush=True)


def run_plan(plan: LaunchPlan, interactive: bool = False) -> int:
    """Run a prepared plan through the one pass-through runner; its exit status (128+signal if killed)."""
    from ..core.passthrough import run_interactive

    announce(plan)
    if shutil.which(plan.argv[0], path=plan.env.get("PATH")) is None:
        raise CommandFailed("podman is not installed (apt-get install podman uidmap crun)")
    return run_interactive(plan.argv, env=plan.env, pty=interactive, quiet=True)


# $1 = the run dir, $2 = what to say on a SIGKILL (exit 137), $3 = the worktree whose branch to
# import afterwards ("" for --dir), $4 = the python and $5 = the chtop checkout that does it, $6 = the
# group dir, $7 = the worktree whose proxy refusals to say when the sandbox fails ("" for none) and $8
# = when it started (epoch seconds), $9 = N, then N pairs of (private, shared) ref files of that branch, then M and the M run dirs of killed
# launches (removed afterwards when their container is gone too), then podman's argv.  bash, not sh:
# podman runs as a child with our stdin and SIGINT back at its default (an asynchronous list would
# get /dev/null and SIGINT ignored), so the shell can pass a SIGTERM or SIGHUP sent to it on to
# podman (which ends the sandbox) and still clean up afterwards.  The proxy daemon imports the
# branch as soon as the sandbox's hand-off connection closes, which is before podman has exited;
# so the shell reads each pair (as data: the first line of at most 128 bytes, opened by dd with
# O_NOFOLLOW|O_NONBLOCK in one step, so a link is never followed and a FIFO never blocks) and
# starts Python for the import only when one differs or cannot be read.  That import runs from / :
# ``python -m`` puts its cwd first on sys.path, and the cwd may be a repo dir the agent can write
# (a planted module there would run on the host).
WAITER = r"""d=$1; note=$2; wt=$3; py=$4; pp=$5; grp=$6; name=$7; since=$8; n=$9; shift 9
refs=("${@:1:2*n}"); shift $((2*n))
m=$1; stale=("${@:2:m}"); shift $((m+1))
trap : INT
( trap - INT; exec "$@" ) <&0 & pid=$!
trap 'kill -TERM $pid 2>/dev/null' TERM
trap 'kill -HUP $pid 2>/dev/null' HUP
while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done
rm -rf -- "$d"
for s in "${stale[@]}"; do
  podman container exists "${s##*/}" </dev/null >/dev/null 2>&1; [ $? = 1 ] && rm -rf -- "$s"
done
rmdir -- "${d%/*}" 2>/dev/null
if [ "$rc" = 137 ] && [ -n "$note" ]; then printf 'chtop: %s\n' "$note" >&2; fi
if [ -n "$wt" ]; then
  same=1; i=0
  while [ "$i" -lt "${#refs[@]}" ]; do
    a=; b=; p=${refs[i]}; s=${refs[i+1]}; i=$((i+2))
    a=$(dd if="$p" iflag=nofollow,nonblock bs=128 count=1 status=none 2>/dev/null); a=${a%%$'\n'*}
    b=$(dd if="$s" iflag=nofollow,nonblock bs=128 count=1 status=none 2>/dev/null); b=${b%%$'\n'*}
    if [ -z "$a" ] || [ "$a" != "$b" ]; then same=; break; fi
  done
  [ -n "$same" ] || (cd / && PYTHONPATH="$pp" "$py" -m chtop_tasks.stores.exit_import "$wt")
fi
if [ "$rc" != 0 ] && [ -n "$name" ]; then
  (cd / && PYTHONPATH="$pp" "$py" -m chtop_tasks.proxy.report "$grp" "$name" "$since")
fi
exit $rc
"""


def exec_waiter(plan: LaunchPlan, target: Target, network: str = "proxy") -> None:
    """Become ``bash`` running podman, then the cleanup and (in a worktree, unless the proxy has
    done it) the import of its branch: no Python stays around an idle sandbox, and none starts
    after it in the usual case (exit status: podman's, 128+sig if killed).  A sandbox that failed
    behind the proxy has what the proxy refused it said (``proxy.report``), as ``launch`` says it."""
    announce(plan)
    if shutil.which(plan.argv[0], path=plan.env.get("PATH")) is None:
        raise CommandFailed("podman is not installed (apt-get install podman uidmap crun)")
    sys.stdout.flush()
    sys.stderr.flush()
    note = killed_note(137, plan.limits) or ""
    worktree, refs = "", []
    if target.kind == "worktree":
        worktree = str(target.root)
        refs = [str(path) for pair in branch_ref_pairs(target.workspace) for path in pair]
    run_dir = plan.setup.root.run_dir
    stale = [str(path) for path in stale_run_dirs(run_dir.parent)]
    checkout = str(Path(__file__).resolve().parent.parent.parent)
    refused_of = target.name if target.kind == "worktree" and network != "open" else ""
    os.execve("/bin/bash", ["bash", "-c", WAITER, "chtop-sbox", str(run_dir), note, worktree, sys.executable,
                            checkout, str(target.group_dir), refused_of, f"{time.time():.3f}",
                            str(len(refs) // 2), *refs, str(len(stale)), *stale, *plan.argv], plan.env)


def plan_request(request: LaunchRequest, stores_walked: bool = False) -> LaunchPlan:
    """``plan_launch`` for a request (reads only)."""
    return plan_launch(request.target, request.command, interactive=request.interactive, stores_walked=stores_walked,
                       extra_env=request.extra_env, purpose=request.purpose, network=request.network,
                       allow_self_edit=request.allow_self_edit, cwd=request.cwd, image=request.image,
                       image_trees=request.image_trees, session=request.session,
                       agent_subdirs=request.agent_subdirs, login_files=request.login_files,
                       withheld_login_files=request.withheld_login_files,
                       login_defaults=request.login_defaults,
                       build_rw=request.build_rw, build_ro=request.build_ro, build_hosts=request.build_hosts)


def say_request(request: LaunchRequest, plan: LaunchPlan) -> None:
    """The notes and warnings of a launch, on stderr.  The agent's notes (which token it uses, or
    how to log in), a limits-not-enforced warning and the running-as-root one (per worktree: it names
    it) are said once per group (``once``); every time with CHTOP_VERBOSE=1."""
    from .once import first_time

    group = request.target.group_dir
    if request.target.note:
        print(f"chtop: {request.target.note}", file=sys.stderr, flush=True)
    for line in request.notes:
        if first_time(group, line):
            print(f"chtop: {line}", file=sys.stderr, flush=True)
    for line in plan.warnings:
        if not line.startswith(SAID_ONCE) or first_time(group, line):
            print(f"warning: {line}", file=sys.stderr, flush=True)
def launch(request: LaunchRequest, before_run=None) -> int:
    """The one launch entry: plan, say the notes and warnings, prepare, run, then clean up and import
    the worktree's branch into the shared stores; the child's exit status.

    ``before_run(plan)``, when given, is called once everything is prepared, just before podman
    starts (a session records its container's name there).  ``request.replace_process`` (sbox.run)
    hands the wait to a small shell (``exec_waiter``) that does the same after podman exits.
    """
    in_worktree = request.target.kind == "worktree"
    if in_worktree:
        # the private git state the plan mounts: converted, its integration branches refreshed, and
        # its stores walked for planted files (the plan's check of the layout then reads the pointers)
        sync_worktree(request.target.workspace)
    plan = plan_request(request, stores_walked=in_worktree)
    say_request(request, plan)
    try:
        prepare_launch(plan)
        if before_run is not None:
            before_run(plan)
        if request.replace_process and not request.interactive:
            exec_waiter(plan, request.target, request.network)     # does not return
        started = time.time()
        status = run_plan(plan, interactive=request.interactive)
    finally:
        cleanup_launch(plan)
        import_after_exit(request.target)
    note = killed_note(status, plan.limits)
    if note:
        print(f"chtop: {note}", file=sys.stderr, flush=True)
    if status != 0:
        for line in proxy_refusals(request, started):
            print(f"chtop: {line}", file=sys.stderr, flush=True)
    return status


def proxy_refusals(request: LaunchRequest, since: float) -> list[str]:
    """What the group's proxy refused this launch's sandbox since ``since``, each with the line or
    command that allows it: a client inside shows only its own words for a refusal (``tunnel
    error``, ``403``), so a launch that failed says the proxy's reason in its own output."""
    from ..proxy.policy import build_identity
    from ..proxy.report import refusal_lines

    target = request.target
    if request.network == "open" or target.kind != "worktree":
        return []
    build = request.build_hosts is not None
    identity = build_identity(target.name) if build else target.name
    return refusal_lines(target.group_dir, identity, target.name, build, since)


def shell_command(interactive: bool = True) -> list[str]:
    """bash with chtop's own rcfile (never the host's ~/.bashrc), which sources .claude/env.sh (what the
    agent's Bash tool sees)."""
    if not interactive:
        return ["bash", "-c", f". {podman_mod.SHELLRC} && . /dev/stdin"]
    return ["bash", "--rcfile", podman_mod.SHELLRC, "-i"]


def list_sandboxes(group_dir: Path) -> list[dict[str, str]]:
    """The running sandboxes of a group: name, worktree, purpose, network, status, command, limits
    (``memory 256M pids 32``, with ``(NOT enforced)`` where the host could not)."""
    rows = ps_rows(group_dir)
    for row in rows:
        command = row["command"]
        row["command"] = " ".join(command[4:] if command[:2] == ["/bin/sh", podman_mod.ENTRY] else command)
    return rows


PS_COLUMNS = ("name", "worktree", "purpose", "network", "status", "limits", "command")


def format_sandbox_table(rows: list[dict[str, str]]) -> list[str]:
    """``sbox.ps``'s table: a header row, then one aligned row per sandbox (the command last)."""
    widths = {col: max(len(col), *(len(row.get(col, "")) for row in rows)) for col in PS_COLUMNS[:-1]}

    def line(cells):
        return "  ".join(cells.get(c, "").ljust(widths[c]) for c in PS_COLUMNS[:-1]) + "  " + cells["command"]
    return [line({c: c.upper() for c in PS_COLUMNS})] + [line(row) for row in rows]


def show_warnings(plan: LaunchPlan, stream=None) -> None:
    for line in plan.warnings:
        print(f"warning: {line}", file=stream or sys.stderr, flush=True)
