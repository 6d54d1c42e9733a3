"""A feature worktree's venv is built inside that worktree's sandbox, never on the host.

Everything a build runs (``setup.py``, a build backend's hooks, a Makefile pipmake runs, the smoke
imports, ``--test``) is code in the worktree's repos, which the agent can write.  So for a feature
worktree the host only plans (``build.plan_build``: data), and one sandbox of that worktree runs
the plan (``build_inside``, from the toplevel's chtop, read-only inside): the agent's mounts, env
rules, limits and proxy, plus, for this launch only, its ``.venv`` writable and the group's own
build cache (``<group>/.chtop/build-cache/<NAME>/{uv,pip}``: never the user's caches, which host
builds of the toplevel use, nor another worktree's).  The host reads back only the stamp (``venvstamp``: no link followed, no
blocking).  The toplevel's venv is the user's own checkout and builds on the host (``build``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import CommandFailed, Refused, UsageError
from ..places import build_cache_dir, read_user_config, target_for
from ..workspace import venvstamp as stamp
from . import compcache
from .build import base_python_choice, check_repos, choose_installer, format_plan, plan_build, retry_hint, venv_dir
from .build_inside import plan_to_json

PURPOSE = "venv-build"
# how pip and uv are told which index to use: passed to the build (values, never files)
INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_TRUSTED_HOST",
             "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_NO_INDEX")


CONFIG_KEY = "venv_in_sandbox"   # ~/.config/chtop/config.toml: true builds feature worktrees' venvs inside


def builds_in_sandbox() -> bool:
    """Whether feature worktrees' venvs are built in their sandboxes: opt-in for now (``venv_in_sandbox =
    true`` in the user's config), because a build inside reaches the package index only through the
    worktree's proxy, whose lists do not allow the index by default (an isolated build, ``install =
    "editable"``, then cannot fetch its build requirements)."""
    path, config = read_user_config()
    value = config.get(CONFIG_KEY, False)
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
        print(f"# base interpreter: {base} ({why})\n# every step runs inside the sandbox of {ws.name} "
              f"(purpose {PURPOSE}), none on the host\n{format_plan(steps)}", flush=True)
        return
    vdir = ready_venv_dir(root)
    caches = build_cache_dirs(ws.grouping, ws.name)
    for path in caches.values():
        if not path.is_dir():
            path.mkdir(parents=True, mode=0o700)
            owned_as_tree(path, root)
    own_ccache = compcache.prepare(root)   # the compiler cache: its own rw, the toplevel's ro
    if own_ccache is not None:
        owned_as_tree(own_ccache, root)
    status = run_in_sandbox(ws, steps, root, chosen, test, base, vdir, caches)
    if status != 0:   # build_inside said what failed, above
        raise CommandFailed(f"venv build of {root} inside its sandbox failed (exit {status}); what failed is "
                            f"above.\nFix the cause, then retry the venv alone: {retry_hint(root, test=test)}")
    if not stamp.is_complete(vdir):
        raise CommandFailed(f"venv build of {root} inside its sandbox did not write its stamp; "
                            f"retry the venv alone: {retry_hint(root, test=test)}")


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


def run_in_sandbox(ws, steps, root: Path, installer: str, test: bool, base: Path, vdir: Path,
                   caches: dict[str, Path]) -> int:
    """One launch of ``ws``'s sandbox that runs the plan with the toplevel's ``build_inside``."""
    from ..sandbox.launcher import LaunchRequest, launch

    runner_code = Path(ws.toplevel) / "chtop_tasks" / "venv" / "build_inside.py"
    if not runner_code.is_file():
        raise Refused(f"the toplevel {ws.toplevel} has no {runner_code.relative_to(ws.toplevel)}: update the "
                      "toplevel's chtop (git pull there), then retry")
    env = {name: value for name, value in os.environ.items() if name in INDEX_ENV}
    env.update({name: str(path) for name, path in caches.items()})
    command = ["env", f"PYTHONPATH={ws.toplevel}", str(base), "-m", "chtop_tasks.venv.build_inside",
               plan_to_json(root, installer, test, steps)]
    prefix = Path(os.path.realpath(base)).parent.parent
    target = target_for(root)
    ccache_rw, ccache_ro = compcache.sandbox_mounts(root)
    request = LaunchRequest(target, command, extra_env=env, purpose=PURPOSE, cwd=root,
                            build_rw=(vdir, *caches.values(), *ccache_rw), build_ro=(prefix, *ccache_ro))
    return launch(request)
