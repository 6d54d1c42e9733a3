"""`inv` typed anywhere inside a worktree loads chtop's tasks.py, never one the agent planted.

invoke looks for ``tasks.py`` from the current directory upwards; every repo dir of a worktree and
each of its subdirectories is writable from inside the sandbox.  The ``inv`` bootstrap installs is
chtop's (``chtop_tasks/cli/inv.py``): it pins invoke's search root to the checkout root chtop's own
resolver finds.  These tests plant what an agent would (a ``tasks.py`` that writes a marker, then
runs the real one, so the output looks normal) and run ``inv git.status`` as a user would: the
``inv`` on PATH, a console script like the one pip writes, from a repo dir and from a new
subdirectory, in a plain environment and in the one the worktree's ``.envrc`` exports.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, require_tool

PLANTS = ("alpha", "alpha/docs", "alpha/fake")


def planted_tasks_py(real: Path, marker: Path) -> str:
    """An agent's tasks.py: leave ``marker``, then run the real one (its output looks normal)."""
    return (f"open({str(marker)!r}, 'a').close()\n"
            f"__file__ = {str(real)!r}\n"
            f"exec(compile(open(__file__).read(), __file__, 'exec'))\n")


def plant(dev: Path, marker_dir: Path) -> dict[str, Path]:
    """tasks.py in a repo dir, in a new subdirectory, and in a subdirectory dressed as a chtop checkout
    (its own .git, manifest and tasks.py: a root chtop's resolver must not stop at)."""
    markers = {}
    for rel in PLANTS:
        where = dev / rel
        where.mkdir(parents=True, exist_ok=True)
        markers[rel] = marker_dir / f"ran-{rel.replace('/', '-')}"
        (where / "tasks.py").write_text(planted_tasks_py(dev / "tasks.py", markers[rel]))
    fake = dev / "alpha" / "fake"
    (fake / ".git").mkdir(exist_ok=True)
    (fake / "git_repositories.toml").write_text("")
    return markers


def console_script(bin_dir: Path, python: str, *, chtop_tree: Path, code: str) -> Path:
    """An ``inv`` on PATH the way pip writes console scripts (its dir, not the cwd, on sys.path)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "inv"
    script.write_text(f"#!{python}\nimport sys\nsys.path.insert(0, {str(chtop_tree)!r})\n{code}\n")
    script.chmod(0o755)
    return script


CHTOP_INV = "from chtop_tasks.cli.inv import main\nsys.exit(main())"
INVOKES_OWN_INV = "from invoke.main import program\nsys.exit(program.run())"


def typed(bin_dir: Path, cwd: Path, *args: str, env=None, via_direnv=False) -> subprocess.CompletedProcess:
    """``inv ARGS`` typed in ``cwd``: the first inv on PATH (bin_dir first), optionally under direnv."""
    env = dict(env or os.environ)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    argv = ["inv", *args]
    if via_direnv:
        argv = [require_tool("direnv"), "exec", str(cwd), *argv]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=300)


def direnv_allowed(g, dev: Path) -> dict:
    require_tool("direnv")
    env = dict(os.environ, XDG_DATA_HOME=str(g.base / "xdg-data"))
    subprocess.run(["direnv", "allow", str(dev)], cwd=dev, env=env, check=True, capture_output=True)
    loaded = subprocess.run(["direnv", "exec", str(dev / "alpha"), "env"], env=env, check=True,
                            capture_output=True, text=True).stdout
    assert f"VIRTUAL_ENV={dev}/.venv" in loaded and "PYTHONSAFEPATH=1" in loaded, loaded   # the .envrc's env
    return env


@pytest.mark.parametrize("where", ["alpha", "alpha/docs", "alpha/fake", "alpha/docs/new"])
@pytest.mark.parametrize("how", ["plain", "direnv"])
def test_inv_in_a_repo_dir_never_loads_a_tasks_py_the_agent_planted(with_dev, tmp_path, where, how):
    g = with_dev
    dev = g.path("dev")
    markers = plant(dev, tmp_path)
    (dev / where).mkdir(parents=True, exist_ok=True)
    bin_dir = console_script(tmp_path / "bin", os.sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
    env = direnv_allowed(g, dev) if how == "direnv" else None
    proc = typed(bin_dir, dev / where, "git.status", env=env, via_direnv=how == "direnv")
    ran = [rel for rel, marker in markers.items() if marker.exists()]
    assert ran == [], f"the tasks.py planted in {ran} ran on the host\n{proc.stdout}{proc.stderr}"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alpha" in proc.stdout and "beta" in proc.stdout, proc.stdout


def test_a_checkout_the_agent_dressed_up_below_the_root_is_no_workspace(with_dev, tmp_path):
    """Every task finds its workspace as chtop's inv pins its root: the outermost checkout, not a
    repo subdirectory with its own .git, tasks.py and manifest (or chtop_tasks/ and no manifest)."""
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    dev = g.path("dev")
    plant(dev, tmp_path)
    no_manifest = dev / "beta" / "x"
    (no_manifest / ".git").mkdir(parents=True)
    (no_manifest / "chtop_tasks").mkdir()
    (no_manifest / "tasks.py").write_text("")
    assert find_workspace(dev / "alpha" / "fake").root == dev
    assert find_workspace(no_manifest).root == dev


def test_inv_list_help_and_completion_are_invokes_under_chtops_inv(with_dev, tmp_path):
    g = with_dev
    bin_dir = console_script(tmp_path / "bin", os.sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
    subdir = g.path("dev", "alpha")
    listed = typed(bin_dir, subdir, "--list")
    assert listed.returncode == 0 and "git.status" in listed.stdout and "sbox.claude" in listed.stdout, listed
    helped = typed(bin_dir, subdir, "--help")
    assert helped.returncode == 0 and "Usage: inv[oke] [--core-opts]" in helped.stdout, helped
    completion = typed(bin_dir, subdir, "--print-completion-script", "bash")
    assert completion.returncode == 0 and "complete -F" in completion.stdout and " inv" in completion.stdout
    version = typed(bin_dir, subdir, "--version")
    assert version.returncode == 0 and version.stdout.startswith("Invoke "), version


def test_chtops_inv_runs_the_worktrees_own_chtop_tasks_not_the_installed_one(with_dev, tmp_path):
    """chtop's inv imports the installed chtop_tasks (the toplevel's, here) to find the root; the
    worktree's tasks.py still gets its own checkout's copy."""
    g = with_dev
    dev = g.path("dev")
    with open(dev / "tasks.py", "a") as fh:
        fh.write("import chtop_tasks\nprint('chtop_tasks from', chtop_tasks.__file__, file=sys.stderr)\n")
    bin_dir = console_script(tmp_path / "bin", os.sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
    proc = typed(bin_dir, dev / "alpha", "--list")
    assert proc.returncode == 0, proc.stderr
    assert f"chtop_tasks from {dev}/chtop_tasks/__init__.py" in proc.stderr, proc.stderr


def test_chtops_inv_outside_a_workspace_is_invoke_as_usual(tmp_path):
    """Another project's tasks.py still runs: chtop's inv pins only inside a chtop workspace."""
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "tasks.py").write_text("from invoke import task\n\n@task\ndef hello(c):\n    print('hello from project')\n")
    bin_dir = console_script(tmp_path / "bin", os.sys.executable, chtop_tree=REPO_ROOT, code=CHTOP_INV).parent
    assert typed(bin_dir, project / "sub", "hello").stdout == "hello from project\n"
    missing = typed(bin_dir, tmp_path, "hello")            # no project and no workspace: what to do
    assert missing.returncode == 2 and "is not inside a chtop workspace" in missing.stderr, missing.stderr
    assert "Can't find any collection" not in missing.stderr


def test_invokes_own_inv_typed_in_a_worktree_refuses_loudly(with_dev, tmp_path):
    """When the inv on PATH is invoke's own (pip reinstalled invoke over chtop's), tasks.py says so
    and runs nothing: that inv searches from the cwd, and a planted tasks.py would run first."""
    g = with_dev
    bin_dir = console_script(tmp_path / "bin", os.sys.executable, chtop_tree=g.toplevel,
                             code=INVOKES_OWN_INV).parent
    proc = typed(bin_dir, g.path("dev"), "git.status")
    assert proc.returncode != 0
    assert "invoke's own" in proc.stderr and "./bootstrap" in proc.stderr, proc.stderr
    assert "alpha" not in proc.stdout


def planting_script(dev: Path, markers: dict[str, Path]) -> str:
    """What the agent runs inside: a tasks.py in each dir of ``markers`` (made if new)."""
    import shlex

    return "set -e; " + "; ".join(
        f"mkdir -p {shlex.quote(str(dev / rel))} && printf %s "
        f"{shlex.quote(planted_tasks_py(dev / 'tasks.py', marker))} > {shlex.quote(str(dev / rel / 'tasks.py'))}"
        for rel, marker in markers.items()) + "; echo PLANTED"


@pytest.mark.podman
@pytest.mark.slow
def test_a_tasks_py_planted_from_inside_a_sandbox_never_runs_under_inv(remote_template):
    """The agent (rootless sandbox, dev's repos rw) plants tasks.py in a repo dir and in a new
    subdirectory; you then type `inv git.status` in each: chtop's tasks run, the planted ones never."""
    from sandbox_helpers import as_user, user_group_cm

    with user_group_cm(remote_template) as g:
        markers = {rel: g.base / f"ran-{rel.replace('/', '-')}" for rel in ("alpha", "alpha/docs")}
        planted = g.sbox(planting_script(g.dev, markers))
        assert "PLANTED" in planted.stdout, planted.stdout + planted.stderr
        assert (g.dev / "alpha" / "docs" / "tasks.py").is_file()
        bin_dir = console_script(g.base / "bin", str(g.venv / "bin" / "python"), chtop_tree=g.toplevel,
                                 code=CHTOP_INV).parent
        env = dict(g.env, PATH=f"{bin_dir}:{g.env['PATH']}")
        for rel in markers:
            proc = as_user(g.user, ["inv", "git.status"], env, g.dev / rel, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "alpha" in proc.stdout and "beta" in proc.stdout, proc.stdout
        ran = [rel for rel, marker in markers.items() if marker.exists()]
        assert ran == [], f"the tasks.py the agent planted in {ran} ran on the host"


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_as_root_a_tasks_py_planted_from_inside_a_sandbox_never_runs_under_inv(with_dev, tmp_path):
    """The same as root (a cloud GPU box): the planted code would run as uid 0."""
    import sys

    from sandbox_helpers import rootful_podman_env

    from chtop_tasks.proxy import stop_proxy

    g = with_dev
    dev = g.path("dev")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dev / ".venv")], check=True)
    env = dict(os.environ, **rootful_podman_env(tmp_path))
    markers = {rel: tmp_path / f"ran-{rel.replace('/', '-')}" for rel in ("alpha", "alpha/docs")}
    try:
        planted = g.inv(dev, "sbox.run", "--", "sh", "-c", planting_script(dev, markers), env=env,
                        check=False, timeout=180)
        assert "PLANTED" in planted.stdout, planted.stdout + planted.stderr
        assert (dev / "alpha" / "docs" / "tasks.py").is_file()
        bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
        for rel in markers:
            proc = typed(bin_dir, dev / rel, "git.status", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "alpha" in proc.stdout and "beta" in proc.stdout, proc.stdout
    finally:
        stop_proxy(g.grouping)
    ran = [rel for rel, marker in markers.items() if marker.exists()]
    assert ran == [], f"the tasks.py the agent planted in {ran} ran on the host as root"
