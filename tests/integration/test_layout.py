"""Loading the task collection stays light, and bytecode lives only in your own cache (the package map
itself is tests/unit/test_package_map.py)."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "chtop_tasks"


def test_inv_start_imports_no_concerns_logic():
    """Loading the task collection (what every `inv` start does) imports no git, proxy, sandbox or
    venv logic: each task imports its own part when it runs."""
    import subprocess
    import sys

    probe = ("import sys, tasks; from chtop_tasks import namespace; "
             "print(' '.join(m for m in sys.modules if m.startswith('chtop_tasks.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=PKG.parent, capture_output=True, text=True,
                            check=True).stdout.split()
    heavy = [m for m in loaded if m.split(".")[1] in ("proxy", "sandbox", "venv", "sessions", "dash")
             or m in ("chtop_tasks.gitloop.status", "chtop_tasks.gitloop.rebase", "chtop_tasks.gitloop.merge",
                   "chtop_tasks.workspace.worktrees")]
    assert heavy == [], heavy


def fresh_checkout(dest: Path) -> Path:
    """tasks.py and chtop_tasks/ copied to ``dest``, no bytecode."""
    import shutil

    dest.mkdir()
    shutil.copy(PKG.parent / "tasks.py", dest)
    shutil.copytree(PKG, dest / "chtop_tasks", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run_inv_list(checkout: Path, home: Path, *flags: str):
    """`python [flags] -m invoke --list` in ``checkout``, HOME=``home``, no bytecode settings of ours."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "XDG_CACHE_HOME")}
    return subprocess.run([sys.executable, *flags, "-m", "invoke", "--list"], cwd=checkout,
                          env=dict(env, HOME=str(home)), capture_output=True, text=True, check=True,
                          stdin=subprocess.DEVNULL)


def test_inv_caches_the_task_modules_bytecode_in_the_users_cache_unless_told_not_to(tmp_path):
    """invoke turns bytecode writing off for its process; tasks.py turns it back on, into
    ~/.cache/chtop/pycache, so the modules only `inv` imports are not compiled from source on every
    run; -B still means none."""
    for name, flags in (("on", []), ("off", ["-B"])):
        run_inv_list(fresh_checkout(tmp_path / name), tmp_path / f"home-{name}", *flags)
    mirror = tmp_path / "home-on/.cache/chtop/pycache" / str(tmp_path / "on").lstrip("/") / "chtop_tasks/tasks"
    cached = {p.name.split(".")[0] for p in mirror.glob("*.pyc")}
    assert {"sbox", "git", "worktree", "common"} <= cached, cached
    assert not list((tmp_path / "on").rglob("*.pyc"))          # none beside the source
    assert not list(tmp_path.glob("home-off/**/*.pyc")) and not list((tmp_path / "off").rglob("*.pyc"))


def test_a_pyc_planted_beside_chtops_code_never_runs_under_inv(tmp_path):
    """With --allow-self-edit the agent can write chtop_tasks/: bytecode it leaves beside a reviewed
    module must not run when you run `inv`."""
    from conftest import plant_pyc

    checkout = fresh_checkout(tmp_path / "checkout")
    marker = tmp_path / "planted-code-ran"
    plant_pyc(checkout / "chtop_tasks" / "tasks" / "sbox.py", marker)
    assert "sbox.claude" in run_inv_list(checkout, tmp_path / "home").stdout
    assert not marker.exists(), "the planted bytecode ran on the host"


def test_the_venv_task_names_the_installer_variable_as_the_build_does():
    from chtop_tasks.tasks import venv as venv_task
    from chtop_tasks.venv import build

    assert venv_task.INSTALLER_ENV == build.INSTALLER_ENV
