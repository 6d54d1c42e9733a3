"""A feature worktree's venv is built inside that worktree's sandbox, never on the host.

Everything a build runs (``setup.py``, a build backend's hooks, a Makefile pipmake runs, the smoke
imports, ``--test``) is code in the worktree's repos, which the agent can write.  So for a feature
worktree the host only plans (``build.plan_build``: data), and one sandbox of that worktree runs
the plan (``build_inside``, from the toplevel's chtop, read-only inside): the agent's mounts, env
rules and limits, plus, for this launch only, its ``.venv`` writable and the group's own build
cache (``<group>/.chtop/build-cache/<NAME>/{uv,pip,log}``: never the user's caches, which host
builds of the toplevel use, nor another worktree's).  Its network is the group's proxy through a
socket of its own (``proxy.policy.build_identity``): the agent's allowance plus the index hosts pip
and uv are configured for (``indexhosts``) and the policy's build section; the agent's sandboxes
never get those.  The host reads back only the stamp and the build's log (``agentfile``: no link
followed, no blocking), and copies the log into the group's logs.  The toplevel's venv is the user's
own checkout and builds on the host (``build``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core import agentfile
from ..core.errors import CommandFailed, Interrupted, Refused, UsageError
from ..core.places import build_cache_dir, read_user_config
from ..core.term import say
from ..workspace import venvstamp as stamp
from ..workspace.targets import target_for
from . import compcache, toolchain
from .build import (
    base_python_choice,
    check_repos,
    choose_installer,
    format_plan,
    own_base_python,
    plan_build,
    retry_hint,
    uv_command,
    venv_dir,
    venv_log_dir,
)
from .build_inside import INTERRUPTED, LOG_NAME, plan_to_json
from .buildlog import BuildLog, first_error_line
from .indexhosts import index_hosts, without_credentials
from .tls import trust_files

PURPOSE = "venv-build"
# how pip and uv are told which index to use: passed to the build (values, never files)
# (a URL's ``user:token@`` is removed first: the build runs the agent's code)
INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_TRUSTED_HOST", "PIP_FIND_LINKS",
             "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_NO_INDEX", "UV_FIND_LINKS")
LOG_LIMIT = 64 << 20     # the most of a build's log the host copies (a CUDA build's is a few MiB)


CONFIG_KEY = "venv_in_sandbox"   # ~/.config/chtop/config.toml: false builds feature worktrees' venvs on the host


def builds_in_sandbox() -> bool:
    """Whether feature worktrees' venvs are built in their sandboxes: yes unless the user's config
    says ``venv_in_sandbox = false`` (a box without podman, where no agent runs either: then the
    agent-written build code runs on the host, as README's security model says)."""
    path, config = read_user_config()
    value = config.get(CONFIG_KEY, True)
    if not isinstance(value, bool):
        raise UsageError(f"{path}: {CONFIG_KEY} must be true or false, not {value!r}")
    return value


def build_workspace_venv(ws, *, recreate: bool = False, test: bool = False, installer: str | None = None,
                         dry_run: bool = False) -> None:
    """The one entry for every venv build (``venv.build``, ``worktree.create``'s venv step and its
    resume, ``jump``, nox): the toplevel's on the host; a feature worktree's in its sandbox when the
    user opted in (``builds_in_sandbox``), else on the host as the toplevel's."""
    if ws.is_toplevel or not builds_in_sandbox():
        from .build import build_venv

        build_venv(ws.root, ws.manifest, recreate=recreate, test=test, installer=installer, dry_run=dry_run)
        return
    build_in_sandbox(ws, recreate=recreate, test=test, installer=installer, dry_run=dry_run)


def build_cache_dirs(group: Path, worktree: str) -> dict[str, Path]:
    """The cache of one worktree's sandboxed builds, one per installer: never the user's (host builds of
    the toplevel use those) nor another worktree's (one agent's build would plant what another's runs)."""
    base = build_cache_dir(group, worktree)
    return {"UV_CACHE_DIR": base / "uv", "PIP_CACHE_DIR": base / "pip"}


def build_log_dir(group: Path, worktree: str) -> Path:
    """Where the build inside writes its log, which the host then copies into the group's logs."""
    return build_cache_dir(group, worktree) / "log"


def build_in_sandbox(ws, *, recreate: bool = False, test: bool = False, installer: str | None = None,
                     dry_run: bool = False) -> None:
    """Build ``ws``'s ``.venv`` inside its sandbox (see the module docstring); CommandFailed when the
    build inside fails or does not finish (its output went to the terminal)."""
    root = Path(ws.root).resolve()
    chosen = choose_installer(installer)
    check_repos(root, ws.manifest)
    base, why = base_python_choice()
    steps = plan_build(root, ws.manifest, recreate=recreate, test=test, installer=chosen, python=base)
    if dry_run:
        hosts = ", ".join(index_hosts()) or "none (no index)"
        print(f"# base interpreter: {base} ({why})\n# every step runs inside the sandbox of {ws.name} "
              f"(purpose {PURPOSE}), none on the host\n# its network: its agent's allowlist, plus the index "
              f"hosts {hosts} and sandbox/net-allow-build.txt, on the build's own proxy socket\n"
              f"{toolchain.describe_needs(root, ws.manifest)}\n{format_plan(steps)}", flush=True)
        return
    toolchain.check_toolchain(root, ws.manifest, base, why, retry_hint(root, test=test))  # on the host: data only
    vdir = ready_venv_dir(root)
    caches = build_cache_dirs(ws.grouping, ws.name)
    log_dir = build_log_dir(ws.grouping, ws.name)
    for path in (*caches.values(), log_dir):
        if not path.is_dir():
            path.mkdir(parents=True, mode=0o700)
            owned_as_tree(path, root)
    own_ccache = compcache.prepare(root)   # the compiler cache: its own rw, the toplevel's ro
    if own_ccache is not None:
        owned_as_tree(own_ccache, root)
    inside_log = fresh_log(log_dir, root)
    status = run_in_sandbox(ws, steps, root, chosen, test, base, vdir, caches, log_dir, inside_log)
    log, text = copy_log(inside_log, root)
    if status == INTERRUPTED:
        raise Interrupted(f"interrupted while building the venv of {root} inside its sandbox; it is left "
                          f"incomplete (no stamp), its output so far: {log.path}\n"
                          f"Retry the venv alone: {retry_hint(root, test=test)}")
    if status != 0:   # build_inside said what failed, above
        cause = first_error_line(text)
        raise CommandFailed(f"venv build of {root} inside its sandbox failed (exit {status}); what failed is "
                            f"above.\n" + (f"  cause: {cause}\n" if cause else "") + f"  its whole output: {log.path}"
                            f"\nFix the cause, then retry the venv alone: {retry_hint(root, test=test)}")
    if not stamp.is_complete(vdir):
        raise CommandFailed(f"venv build of {root} inside its sandbox did not write its stamp "
                            f"(its whole output: {log.path}); retry the venv alone: {retry_hint(root, test=test)}")
    say(f"venv build log {log.path}")


def fresh_log(log_dir: Path, root: Path) -> Path:
    """The empty file the build inside writes its log to (an old one, or anything the last build
    left in its place, removed first), owned as the tree."""
    path = log_dir / LOG_NAME
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise Refused(f"{path} is a directory: remove it, then retry `{retry_hint(root)}`") from None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    owned_as_tree(path, root)
    return path


def copy_log(inside_log: Path, root: Path) -> tuple[BuildLog, str]:
    """The build's log, read as data (no link followed, no blocking, at most ``LOG_LIMIT``), copied
    into a new log of the group's (``.chtop/logs``, host-only); (that log, its text)."""
    text = agentfile.read_text(inside_log, limit=LOG_LIMIT)
    if text is None:
        what = agentfile.non_regular(inside_log) or f"missing or over {LOG_LIMIT >> 20} MiB"
        text = f"# the build's log {inside_log} could not be read as a file ({what})\n"
    log = BuildLog.create(venv_log_dir(root), root.name)
    log.write(text)
    return log, text


def ready_venv_dir(root: Path) -> Path:
    """``<root>/.venv`` as a plain directory to mount writable (made when missing, as the tree's owner)."""
    vdir = venv_dir(root)
    if vdir.is_symlink() or (vdir.exists() and not vdir.is_dir()):
        raise Refused(f"{vdir} is not a directory (a link or a file): remove it, then retry "
                      f"`{retry_hint(root)}`")
    if not vdir.exists():
        vdir.mkdir(mode=0o755)
        owned_as_tree(vdir, root)
    return vdir


def owned_as_tree(path: Path, root: Path) -> None:
    """As root, ``path`` (just made) is owned as ``root`` is: the agent's ids inside, idmapped."""
    owner = os.stat(root)
    if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, 0):
        os.lchown(path, owner.st_uid, owner.st_gid)


FIND_LINKS_ENV = ("PIP_FIND_LINKS", "UV_FIND_LINKS")


def index_env(env=None) -> dict[str, str]:
    """How pip and uv are told which index to use (``INDEX_ENV``), for the build: values without
    credentials; of find-links, only the URLs (a local dir is not mounted inside, and uv refuses a
    find-links dir it cannot read)."""
    env = os.environ if env is None else env
    out = {name: without_credentials(value) for name, value in env.items() if name in INDEX_ENV}
    for name in FIND_LINKS_ENV:
        if name in out:
            urls = [word for word in out[name].split() if word.startswith(("http://", "https://"))]
            if urls:
                out[name] = " ".join(urls)
            else:
                del out[name]
    return out


def uv_file(installer: str) -> tuple[Path, ...]:
    """uv's binary, read-only, for a build on the uv path: an ordinary user's uv lives in chtop's own
    venv under the home (through ``~/.local/bin/uv``), which no sandbox mounts."""
    uv = Path(uv_command())
    return (uv,) if installer == "uv" and uv.is_file() else ()


def runner_flags(base: Path) -> tuple[str, ...]:
    """The interpreter flags of ``build_inside``'s own python: ``-S`` (no ``site``: none of the
    base's ``.pth`` files run before the first step, tens of ms on a box with many) when ``base`` is
    the python running chtop and has ``tomllib`` (3.11+); build_inside imports only the standard
    library and the toplevel's chtop (``PYTHONPATH``).  A python of the user's config or conda env
    may be 3.10, whose TOML reader (tomli) lives in site-packages: it keeps ``site``."""
    if sys.version_info >= (3, 11) and Path(base) == own_base_python():
        return ("-S",)
    return ()


def run_in_sandbox(ws, steps, root: Path, installer: str, test: bool, base: Path, vdir: Path,
                   caches: dict[str, Path], log_dir: Path, inside_log: Path) -> int:
    """One launch of ``ws``'s sandbox that runs the plan with the toplevel's ``build_inside``, on the
    build's own proxy socket (the index hosts allowed)."""
    from ..sandbox.launcher import LaunchRequest, launch

    runner_code = Path(ws.toplevel) / "chtop_tasks" / "venv" / "build_inside.py"
    if not runner_code.is_file():
        raise Refused(f"the toplevel {ws.toplevel} has no {runner_code.relative_to(ws.toplevel)}: update the "
                      "toplevel's chtop (git pull there), then retry")
    env = index_env()
    env.update({name: str(path) for name, path in caches.items()})
    command = ["env", f"PYTHONPATH={ws.toplevel}", str(base), *runner_flags(base), "-m", "chtop_tasks.venv.build_inside",
               plan_to_json(root, installer, test, steps, log=inside_log)]
    prefix = Path(os.path.realpath(base)).parent.parent
    target = target_for(root)
    ccache_rw, ccache_ro = compcache.sandbox_mounts(root)
    request = LaunchRequest(target, command, extra_env=env, purpose=PURPOSE, cwd=root,
                            build_rw=(vdir, *caches.values(), log_dir, *ccache_rw),
                            build_ro=(prefix, *uv_file(installer), *trust_files(installer), *ccache_ro), build_hosts=tuple(index_hosts()))
    return launch(request)
