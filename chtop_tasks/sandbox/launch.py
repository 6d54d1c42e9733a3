"""What gets sandboxed, and the podman launch for it (plan, then run).

``places.target_for`` finds the worktree (or the ``--dir`` directory) and
its policy; ``plan_launch reads the policy, ensures the egress proxy (fail
closed), computes the mount plan and returns the full ``podman run`` argv;
``run_plan`` runs a non-interactive plan with stdio passed through.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ChtopError, CommandFailed, UsageError
from ..places import Target, group_id, home_dir
from ..runner import echo
from ..term import warn
from ..workspace.layout import admin_dir_for, private_store, verify_git_dirs
from ..workspace.quarantine import sync_worktree
from . import podman as podman_mod
from .mounts import MountContext, plan_mounts
from .policy import STRUCTURAL_ENV, load_policy
from .rootfs import ensure_skeleton

NETWORKS = ("proxy", "host", "open")
PURPOSE_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PASS_THROUGH_CUDA = ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")
# The podman process's own environment (it finds its storage and runtime dir with these).
PODMAN_ENV = ("PATH", "HOME", "USER", "LOGNAME", "TERM", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
              "XDG_DATA_HOME", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF")
NO_PROXY = "localhost,127.0.0.1,::1"
LABEL = "chtop"


@dataclass
class LaunchPlan:
    argv: list[str]
    container_name: str
    env: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"


IDENTITY_VARS = {f"GIT_{role}_{field_}": key for role in ("AUTHOR", "COMMITTER")
                 for field_, key in (("NAME", "user.name"), ("EMAIL", "user.email"))}


def _git_identity(root: Path, host_env: dict[str, str]) -> dict[str, str]:
    """The host's identity for commits inside: env overrides, else ``git config`` (one call)."""
    config: dict[str, str] = {}
    if not all(host_env.get(var) for var in IDENTITY_VARS):
        proc = subprocess.run(["git", "-C", str(root), "config", "--get-regexp", r"^user\.(name|email)$"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=10)
        for line in proc.stdout.splitlines():
            key, _, value = line.partition(" ")
            config[key] = value.strip()       # the last one wins, as in git
    out = {}
    for var, key in IDENTITY_VARS.items():
        value = host_env.get(var) or config.get(key)
        if value:
            out[var] = value
    return out


def _mount_context(target: Target, proxy_dir: Path | None, self_edit: bool,
                   image_trees: tuple[Path, ...] = ()) -> MountContext:
    home = home_dir()
    target.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)   # exists before it is masked
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
            guarded=(ws.grouping,), state_dirs=(ws.state_dir,), proxy_dir=proxy_dir, self_edit=self_edit,
            image_trees=image_trees)
    return MountContext("dir", target.root, target.config_dir, home, guarded=(target.group_dir,),
                        state_dirs=(target.state_dir,), proxy_dir=proxy_dir, self_edit=self_edit,
                        image_trees=image_trees)


def plan_launch(target: Target, command: list[str], *, interactive: bool,
                extra_env: dict[str, str] | None = None, purpose: str = "run",
                network: str = "proxy", allow_self_edit: bool = False,
                cwd: Path | None = None, image: str | None = None,
                image_trees: tuple[Path, ...] = ()) -> LaunchPlan:
    """The full ``podman run`` for ``command`` in ``target``'s sandbox.

    Reads the policy (PolicyError if broken), checks the git layout
    (WorkspaceError if tampered), ensures the proxy (ChtopError if it cannot
    start: no launch), builds the skeleton root.  Nothing is run yet.
    With ``image``, that local image is the root instead of the host
    overlay, and ``image_trees`` (its own copies of /usr, /etc) are not
    bound from the host.
    """
    extra_env = _checked_launch_args(command, purpose, network, extra_env)
    host_env = dict(os.environ)
    if target.kind == "worktree":
        sync_worktree(target.workspace)   # private git state current: converted, integration refreshed
        verify_git_dirs(target.workspace)
    policy = load_policy(target.policy_dir, home_dir(), target.workspace.grouping if target.workspace else None)
    warnings = list(policy.warnings)
    proxy_socket, proxy_url = _proxy_for(target, network, warnings)
    if allow_self_edit:
        warnings.append("--allow-self-edit: chtop's own code in this worktree (tasks.py, chtop_tasks/, "
                        "sandbox/, ...) is WRITABLE by the agent, and you run it on the host with inv/nox. "
                        "Review every change before running it.")

    ctx = _mount_context(target, proxy_socket.parent if proxy_socket else None, allow_self_edit,
                         tuple(Path(p) for p in image_trees) if image else ())
    mount_plan = plan_mounts(ctx, policy.fs)
    warnings += mount_plan.warnings
    mounts = mount_plan.mounts()
    identity = podman_mod.identity_for(target.root)
    if identity.note:
        warnings.append(identity.note)
    skeleton = _prepare_root(target, identity, mounts, policy.devices, proxy_socket)

    named = {**policy.env_from(host_env), **{k: host_env[k] for k in PASS_THROUGH_CUDA if host_env.get(k)},
             **_git_identity(target.root, host_env), **extra_env}
    podman_env = {k: host_env[k] for k in PODMAN_ENV if k in host_env}
    podman_env.update(named)       # values reach podman by env, never on its command line
    name = f"chtop-{_slug(target.name)}-{purpose}-{secrets.token_hex(3)}"
    argv = podman_mod.build_argv(
        name=name, labels=_labels(target, purpose, network), mounts=mounts, skeleton=skeleton,
        workdir=_workdir(target, cwd), env_values=_structural_env(target, host_env, proxy_url),
        env_names=sorted(named), devices=policy.devices, network=network, proxy_socket=proxy_socket,
        interactive=interactive, identity=identity, hostname=f"sbox-{_slug(target.name)}"[:63],
        command=command, image=image)
    return LaunchPlan(argv, name, podman_env, warnings)


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


def _proxy_for(target: Target, network: str, warnings: list[str]) -> tuple[Path | None, str | None]:
    """(socket to mount, proxy URL inside) for ``network``; starts the proxy (fail closed)."""
    if network == "open":
        warnings.append("no proxy: open egress (host network, nothing filtered); for debugging only")
        return None, None
    from ..proxy import ensure_proxy

    endpoint = ensure_proxy(target.group_dir, target.policy_dir,
                            worktree=target.name if target.kind == "worktree" else None)
    if network == "host":
        warnings.append("--network host: the agent shares the host's network; the proxy is only honoured "
                        "by clients that use HTTPS_PROXY, a raw socket goes around it")
        return None, endpoint.url
    if not _which_host("socat"):
        raise ChtopError("socat is not installed on the host (/usr/bin/socat); the proxy relay inside the "
                         "sandbox needs it.  Install it: apt-get install socat")
    return endpoint.socket_path, f"http://127.0.0.1:{podman_mod.RELAY_PORT}"


def _prepare_root(target: Target, identity, mounts, devices, proxy_socket: Path | None) -> Path:
    """The skeleton root with its entry files; rootful: owned by the agent's unprivileged uid."""
    if identity.rootful and proxy_socket is not None:
        # the agent is an unprivileged host uid: hand it this worktree's socket (dir 0700, socket 0600)
        for path in (proxy_socket.parent, proxy_socket):
            os.chown(path, identity.host_uid, identity.host_gid)
    key = group_id(target.root)[:8] if target.kind == "dir" else _slug(target.name)
    skeleton = ensure_skeleton(_skeleton_dir(target, key, identity.rootful), mounts, devices)
    podman_mod.write_entry_files(skeleton)
    if identity.rootful:
        for dirpath, dirnames, filenames in os.walk(skeleton):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.lchown(name, identity.host_uid, identity.host_gid)
    return skeleton


def _structural_env(target: Target, host_env: dict[str, str], proxy_url: str | None) -> dict[str, str]:
    """The variables chtop itself sets inside (never taken from the policy or an agent)."""
    venv = target.root / ".venv"
    env = {"HOME": str(home_dir()), "PATH": f"{venv}/bin:{host_env.get('PATH', '/usr/bin:/bin')}",
           "IS_SANDBOX": "1", "PYTHONSAFEPATH": "1", "CLAUDE_CONFIG_DIR": str(target.config_dir),
           "CHTOP_SANDBOX": target.name}
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


def _labels(target: Target, purpose: str, network: str) -> dict[str, str]:
    return {f"{LABEL}.group": str(target.group_dir), f"{LABEL}.group_id": group_id(target.group_dir),
            f"{LABEL}.worktree": target.name, f"{LABEL}.root": str(target.root),
            f"{LABEL}.purpose": purpose, f"{LABEL}.network": network}


def _skeleton_dir(target: Target, key: str, rootful: bool) -> Path:
    """Rootless: in the group's state dir.  Rootful: the agent's unprivileged uid must reach
    it, and a root home (0700) is in the way, so under a root-owned /tmp/chtop-rootfs-0/."""
    if not rootful:
        return target.state_dir / "sbox" / "rootfs" / key
    base = Path("/tmp/chtop-rootfs-0")
    base.mkdir(mode=0o755, exist_ok=True)
    st = os.lstat(base)
    if st.st_uid != 0 or base.is_symlink() or st.st_mode & 0o022:
        raise ChtopError(f"{base} is not a root-owned directory writable only by root; remove it and retry")
    return base / group_id(target.group_dir) / key


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


def run_then_import(plan: LaunchPlan, target: Target) -> int:
    """``run_plan``, then the import of the worktree's branch; the child's exit status."""
    try:
        return run_plan(plan)
    finally:
        import_after_exit(target)


def run_plan(plan: LaunchPlan) -> int:
    """Run a non-interactive plan, stdio passed through; its exit status (128+signal if killed)."""
    echo(plan.argv)
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    forwarded = {}
    try:
        try:
            proc = subprocess.Popen(plan.argv, env=plan.env)
        except FileNotFoundError as exc:
            raise CommandFailed("podman is not installed (apt-get install podman uidmap crun)") from exc
        for sig in (signal.SIGTERM, signal.SIGHUP):    # podman passes them on to the sandbox
            forwarded[sig] = signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def exec_plan(plan: LaunchPlan):
    """Become the podman process (sbox.run: no Python left around it, exit status is podman's)."""
    echo(plan.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(plan.argv[0], plan.argv, plan.env)
    except FileNotFoundError as exc:
        raise CommandFailed("podman is not installed (apt-get install podman uidmap crun)") from exc


def shell_command(interactive: bool = True) -> list[str]:
    """bash with rcfile ~/.bashrc then .claude/env.sh (what the agent's Bash tool sees)."""
    if not interactive:
        return ["bash", "-c", f". {podman_mod.SHELLRC} && . /dev/stdin"]
    return ["bash", "--rcfile", podman_mod.SHELLRC, "-i"]


def list_sandboxes(group_dir: Path) -> list[dict[str, str]]:
    """The running sandboxes of a group: name, worktree, purpose, network, status, command."""
    argv = ["podman", "ps", "--filter", f"label={LABEL}.group_id={group_id(group_dir)}", "--format", "json"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    except FileNotFoundError as exc:
        raise CommandFailed("podman is not installed") from exc
    if proc.returncode:
        raise CommandFailed(f"podman ps failed: {proc.stderr.strip()}")
    rows = []
    for item in json.loads(proc.stdout or "[]"):
        labels = item.get("Labels") or {}
        names = item.get("Names") or ["?"]
        command = item.get("Command") or []
        rows.append({"name": names[0], "worktree": labels.get(f"{LABEL}.worktree", "?"),
                     "purpose": labels.get(f"{LABEL}.purpose", "?"),
                     "network": labels.get(f"{LABEL}.network", "?"), "status": item.get("Status", "?"),
                     "command": " ".join(command[4:] if command[:2] == ["/bin/sh", podman_mod.ENTRY] else command)})
    return rows


def show_warnings(plan: LaunchPlan, stream=None) -> None:
    for line in plan.warnings:
        print(f"warning: {line}", file=stream or sys.stderr, flush=True)
