"""The fast start (chtop_tasks/faststart.py) does what invoke's program does, without importing invoke.

Each command runs twice in a real worktree, typed as a user types it (chtop's ``inv`` on PATH, and
the ``chtop`` console script): once as is, once with an invoke config variable set, which sends
every command line to invoke's program.  Both must give the same stdout, stderr and exit code;
``-X importtime`` shows which runs imported invoke, so a fast start that silently handed every
command to invoke (or one that took on a command line it should not) fails too.  The task table
the fast start builds must match invoke's collection, flag for flag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from test_inv_discovery import CHTOP_INV, console_script, plant, typed

# Any INVOKE_* variable is invoke config, which the fast start leaves to invoke; this one changes nothing.
INVOKE_PATH = {"INVOKE_TASKS_DEDUPE": "1"}

CHTOP = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
         "from chtop_tasks.cli import main; main()"]

# (argv, whether the fast start takes it on)
COMMANDS = [
    (["--list"], False),
    (["--help", "git.status"], False),
    (["git.status", "--help"], False),
    (["git.status"], True),
    (["git.status", "--", "--short"], True),
    (["git.diff", "--integration"], True),
    (["git.merge-up", "--dry-run"], True),
    (["git.status", "--bogus"], False),
    (["git.status", "-d"], False),
    (["git.status", "git.diff"], False),
    (["no-such.task"], False),
    (["worktree.delete"], True),                        # a task error: usage, exit 2
    (["worktree.delete", "--name", "nosuch"], True),    # a task error: no such worktree
    (["worktree.delete", "--name"], False),             # a missing value: invoke's parse error
    (["git.merge-up", "--expect=alpha=0"], True),
]


def imported_invoke(stderr: str) -> bool:
    return any(line.rstrip().endswith("| invoke") for line in stderr.splitlines())


def task_modules(stderr: str) -> set[str]:
    """The task modules (``chtop_tasks.tasks.*``) a run's ``-X importtime`` lines name."""
    names = (line.rpartition("|")[2].strip() for line in stderr.splitlines() if line.startswith("import time:"))
    return {name for name in names if name.startswith("chtop_tasks.tasks.")}


def both_ways(run, argv: list[str]) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess, bool]:
    fast = run(argv, {})
    slow = run(argv, INVOKE_PATH)
    timed = run(argv, {"PYTHONPROFILEIMPORTTIME": "1"})
    assert imported_invoke(run(argv, {**INVOKE_PATH, "PYTHONPROFILEIMPORTTIME": "1"}).stderr)
    return fast, slow, not imported_invoke(timed.stderr)


def same(fast, slow, argv) -> None:
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr), (
        f"{argv}: fast start exited {fast.returncode}, invoke {slow.returncode}\n"
        f"--- fast stdout\n{fast.stdout}\n--- fast stderr\n{fast.stderr}\n"
        f"--- invoke stdout\n{slow.stdout}\n--- invoke stderr\n{slow.stderr}")


@pytest.mark.parametrize("state", ["clean", "dirty"])
def test_inv_fast_start_and_invokes_program_say_the_same(with_dev, tmp_path, state):
    """Through an ``inv`` on PATH as pip's console script runs it."""
    g = with_dev
    if state == "dirty":
        (g.path("dev", "alpha") / "new.txt").write_text("x\n")
    bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent

    def run(argv, env):
        return typed(bin_dir, g.path("dev", "alpha"), *argv, env=dict(os.environ, **env))

    for argv, fast_expected in COMMANDS:
        fast, slow, went_fast = both_ways(run, argv)
        same(fast, slow, argv)
        assert went_fast == fast_expected, f"{argv}: fast start {'taken' if went_fast else 'not taken'}"
    status = run(["git.status"], {})
    assert status.returncode == 0 and "alpha" in status.stdout, status
    # the fast start imports the one task module it runs from (and what that imports), no other
    assert task_modules(run(["git.status"], {"PYTHONPROFILEIMPORTTIME": "1"}).stderr) == {
        "chtop_tasks.tasks.git", "chtop_tasks.tasks.common"}
    assert task_modules(run(["worktree.delete"], {"PYTHONPROFILEIMPORTTIME": "1"}).stderr) <= {
        "chtop_tasks.tasks.worktree", "chtop_tasks.tasks.common"}
    assert ("new.txt" in status.stdout) == (state == "dirty"), status.stdout


def test_chtop_fast_start_and_invokes_program_say_the_same(with_dev):
    g = with_dev

    def run(argv, env):
        return subprocess.run([*CHTOP, str(g.toplevel), *argv], cwd=g.path("dev", "beta"), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=120, env=dict(os.environ, **env))

    for argv, fast_expected in [(["git.status"], True), (["git.status", "--bogus"], False),
                                (["worktree.delete"], True), (["--list"], False)]:
        fast, slow, went_fast = both_ways(run, argv)
        same(fast, slow, argv)
        assert went_fast == fast_expected, argv
    assert run(["git.status", "--bogus"], {}).returncode == 2      # chtop's usage exit, from invoke's path


def test_the_fast_start_never_loads_a_tasks_py_the_agent_planted(with_dev, tmp_path):
    g = with_dev
    dev = g.path("dev")
    markers = plant(dev, tmp_path)
    bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
    for where in ("alpha", "alpha/docs", "alpha/fake"):
        proc = typed(bin_dir, dev / where, "git.status", env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
        assert proc.returncode == 0 and "beta" in proc.stdout, proc.stdout + proc.stderr
        assert not imported_invoke(proc.stderr), f"from {where}: the fast start was not taken"
    ran = [rel for rel, marker in markers.items() if marker.exists()]
    assert ran == [], f"the tasks.py planted in {ran} ran on the host"


TABLES = """
import json, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "light":
    from chtop_tasks import faststart
    table = {name: None if (kinds := faststart.flag_kinds(light)) is None else
             sorted([param, kind is bool] for param, kind in kinds.values())
             for name, light in faststart.light_tasks().items()}
    table["(invoke imported)"] = "invoke" in sys.modules
else:
    from chtop_tasks import namespace
    table = {}
    for name in namespace.task_names:
        task = namespace[name]
        table[name] = sorted([arg.name, arg.kind is bool] for arg in task.get_arguments())
print(json.dumps(table))
"""


def test_the_fast_starts_table_is_invokes_collection():
    """Every task of invoke's collection, by the same name, with the same long flags; a task module
    that used invoke's own @task (so the fast start imports invoke for every task) fails here."""
    def table(kind):
        out = subprocess.run([sys.executable, "-c", TABLES, str(REPO_ROOT), kind], capture_output=True, text=True,
                             check=True, timeout=120).stdout
        return json.loads(out)

    light, full = table("light"), table("invoke")
    assert light.pop("(invoke imported)") is False, "a task module imports invoke"
    assert sorted(light) == sorted(full)
    fast = {name: flags for name, flags in light.items() if flags is not None}
    assert "git.status" in fast and "worktree.create" in fast and "git.merge-up" in fast
    for name, flags in fast.items():
        assert flags == full[name], f"{name}: the fast start's flags {flags}, invoke's {full[name]}"


def test_a_task_that_uses_its_context_gets_invokes_on_the_fast_start():
    """No chtop task uses ``c`` today; one that does gets invoke's Context, made once, on first use."""
    from invoke import Context

    from chtop_tasks.faststart import LazyContext

    context = LazyContext()
    assert "_context" not in context.__dict__
    assert context.config is context.config and isinstance(context.__dict__["_context"], Context)
    assert callable(context.run)


def test_inv_finds_the_checkout_importing_no_chtop_module_it_imports_again(with_dev):
    """``inv`` finds the checkout with the installed chtop, then forgets every chtop module and runs
    the checkout's own: what the search imported is imported twice (``layout`` with ``places``,
    ``manifest`` and ``agentfile`` cost about 10 ms of every task in a feature worktree)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from chtop_tasks import inv; "
            "print(inv.pinned_search_root(sys.argv[2])); print(sorted(m for m in sys.modules if m.startswith('chtop_tasks')))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT), str(with_dev.path("dev", "alpha"))],
                         capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    assert out[0] == str(with_dev.path("dev"))
    assert json.loads(out[1].replace("'", '"')) == ["chtop_tasks", "chtop_tasks.errors", "chtop_tasks.inv",
                                                    "chtop_tasks.workspace", "chtop_tasks.workspace.rootfind"]


def test_the_modules_of_a_launch_and_of_the_git_tasks_import_no_typing():
    """``typing`` (about 2 ms to import) is for type checkers: no module a launch or a git task loads
    imports it.  Run with ``-S``: a site ``.pth`` of some machines imports it on its own."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import chtop_tasks.inv, chtop_tasks.faststart, "
            "chtop_tasks.sandbox.launcher, chtop_tasks.agents.registry, chtop_tasks.passthrough, "
            "chtop_tasks.workspace.gitops, chtop_tasks.workspace.worktrees; print('typing' in sys.modules)")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(REPO_ROOT)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["False"], out.stdout + out.stderr


def test_inv_starts_python_as_usual_site_pth_files_and_sitecustomize_included(with_dev, tmp_path):
    """``inv`` is pip's console script: Python's own start runs, so a ``.pth`` file and
    ``sitecustomize`` of the environment run before a task on the light path, as before any other."""
    g = with_dev
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_dir = next(venv.glob("lib/python3*/site-packages"))
    ran = tmp_path / "ran"
    (site_dir / "zz_marker.pth").write_text(f"import os; open({str(ran)!r}, 'a').write('pth\\n')\n")
    (site_dir / "sitecustomize.py").write_text(f"open({str(ran)!r}, 'a').write('sitecustomize\\n')\n")
    here_site = [p for p in sys.path if p.endswith("site-packages")]      # invoke and the rest, from here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(here_site), PYTHONPROFILEIMPORTTIME="1")
    bin_dir = console_script(tmp_path / "bin", str(venv / "bin" / "python"), chtop_tree=g.toplevel,
                             code=CHTOP_INV).parent
    status = typed(bin_dir, g.path("dev", "alpha"), "git.status", env=env)
    assert status.returncode == 0 and "alpha" in status.stdout, status.stdout + status.stderr
    assert not imported_invoke(status.stderr), "the light task path was not taken"
    assert set(ran.read_text().split()) == {"pth", "sitecustomize"}       # (the task's own Pythons run them too)
