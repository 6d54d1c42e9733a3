"""The package map in README's "Development" section holds: nothing imports upward."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "chtop_tasks"
CORE = {"errors", "runner", "term", "argv", "passthrough", "atomic", "fanout", "agentfile", "record", "digest",
        "tomlcache"}
# what each concern may import besides the core modules and itself
ALLOWED = {
    "core": set(),
    "places": {"workspace"},            # lazily, for target_for
    "workspace": {"places"},
    "venv": {"places", "workspace", "sandbox"},   # a feature worktree's venv is built in its sandbox
    "proxy": {"places", "workspace"},   # the daemon imports the agents' branches every few seconds
    "sandbox": {"places", "workspace", "proxy"},
    "agents": {"places", "workspace", "sandbox"},
    "notify": {"places", "proxy"},      # host side: the phone notifier watches the proxy
    "sessions": {"places", "workspace", "sandbox", "agents", "proxy", "notify"},
    "incontainer": set(),
    "hosts": {"places", "workspace"},   # a host's chtop is asked for its worktrees, rendered as ours
}
ENTRY_POINTS = {"tasks", "nox_sessions", "cli", "inv", "faststart", "taskdef", "demo", "__init__", "jump", "dash"}


def concern_of(path: Path) -> str:
    first = path.relative_to(PKG).parts[0].removesuffix(".py")
    return "core" if first in CORE else first


def imported_concerns(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    here = path.relative_to(PKG).with_suffix("").parts
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[:-1])[: len(here) - node.level] if node.level > 1 else list(here[:-1])
                parts = base + (node.module.split(".") if node.module else [])
                names = [parts[0]] if parts else [a.name for a in node.names]
            elif node.module and node.module.startswith("chtop_tasks"):
                parts = node.module.split(".")[1:]
                names = [parts[0]] if parts else [a.name for a in node.names]
            else:
                continue
            for name in names:
                found.add("core" if name in CORE else name)
    return found


def test_no_concern_imports_upward():
    wrong = []
    for path in sorted(PKG.rglob("*.py")):
        concern = concern_of(path)
        if concern in ENTRY_POINTS:
            continue
        allowed = ALLOWED.get(concern)
        assert allowed is not None, f"{path}: concern {concern!r} is not in README's package map"
        for dep in imported_concerns(path) - {concern, "core"}:
            if dep not in allowed:
                wrong.append(f"{path.relative_to(PKG)} imports {dep}")
    assert not wrong, "\n".join(wrong)


def test_incontainer_scripts_use_only_the_standard_library():
    for path in (PKG / "incontainer").glob("*.py"):
        assert not imported_concerns(path), f"{path} imports chtop code; it runs inside a sandbox"


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
             or m in ("chtop_tasks.gitloop.gitops", "chtop_tasks.workspace.worktrees")]
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
