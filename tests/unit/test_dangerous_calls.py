"""One way to do each dangerous thing, and a test that it is the only way: the source is walked.

- Git is started only by ``core/gitrun.py``: no other module passes an argv literal
  beginning with ``"git"`` to a call, and a git argv built elsewhere (a plan's step) carries the
  guards (``*HOST_GIT_OPTS`` right after ``"git"``), unless it is listed below with why.
- In the modules that read what an agent can write (its worktree, private stores, admin dirs,
  session state), no plain ``open()`` / ``.read_text()`` / ``.read_bytes()``: those go through
  ``chtop_tasks/core/agentfile.py``; each plain read left reads a host-owned file, listed below with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "chtop_tasks"
GIT_RUNNER = "core/gitrun.py"

# (module, function): why its git argv may lack the guards
UNGUARDED_GIT_ARGV = {
    ("gitloop/merge.py", "plan_merge_up"): "the toplevel's own checkout (host-owned), as the user types it",
    ("gitloop/status.py", "run_in_checkout"): "the header names the command as asked (it runs through gitrun)",
    ("hosts/install.py", "remote_version"): "run on another host (over ssh), in its toplevel's own checkout",
}
# modules whose git is not on any workspace (the demo's own sample repos, made and run by it)
GIT_ELSEWHERE = {"cli/demo.py"}

# the modules that read files an agent can write
AGENT_STATE_READERS = {
    "stores/quarantine.py", "workspace/layout.py", "core/gitprobe.py", "gitloop/status.py",
    "gitloop/steps.py", "gitloop/rebase.py", "gitloop/merge.py",
    "workspace/worktrees.py", "stores/exit_import.py", "dash/model.py", "sessions/agent_state.py",
    "sandbox/launcher.py", "sandbox/mounts.py", "sandbox/agent_config.py", "workspace/venvstamp.py",
    "venv/sandboxed.py", "cli/jump.py",
}
# (module, function): the host-owned file its plain read reads
HOST_OWNED_READS = {
    ("stores/quarantine.py", "store_config"): "the toplevel store's config",
    ("stores/quarantine.py", "copy_info"): "the toplevel store's info/",
    ("stores/quarantine.py", "import_branch"): "the toplevel store's HEAD",
    ("stores/quarantine.py", "_locked"): "the lock file in .chtop/git/<name>/ (never mounted)",
    ("workspace/layout.py", "toplevel_branch"): "the toplevel's HEAD",
    ("dash/model.py", "_add_file"): "the proxy's request log in .chtop/net/",
    ("cli/jump.py", "configured_group"): "the user's ~/.config/chtop/config.toml",
}
READ_METHODS = {"read_text", "read_bytes"}


def modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if not rel.startswith("incontainer/"):          # runs inside the sandbox
            yield rel, ast.parse(path.read_text())


def functions_of(tree: ast.AST):
    """(enclosing function name or "<module>", node) for every node."""
    def walk(node, name):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            yield inner, child
            yield from walk(child, inner)
    yield from walk(tree, "<module>")


def starts_with_git(node: ast.AST) -> bool:
    return (isinstance(node, ast.List) and bool(node.elts) and isinstance(node.elts[0], ast.Constant)
            and node.elts[0].value == "git")


def guarded(node: ast.List) -> bool:
    return (len(node.elts) > 1 and isinstance(node.elts[1], ast.Starred)
            and isinstance(node.elts[1].value, ast.Name) and node.elts[1].value.id == "HOST_GIT_OPTS")


def shows_only(call: ast.Call) -> bool:
    """``format_command([...])``: the argv is printed, not run."""
    func = call.func
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "format_command"


def git_problems(rel: str, tree: ast.AST) -> list[str]:
    if rel == GIT_RUNNER or rel in GIT_ELSEWHERE:
        return []
    found = []
    for func, node in functions_of(tree):
        if isinstance(node, ast.Call) and node.args and starts_with_git(node.args[0]) and not shows_only(node):
            found.append(f"{rel}:{node.lineno} ({func}) starts git itself: use core/gitrun.py's git()")
        elif starts_with_git(node) and not guarded(node) and (rel, func) not in UNGUARDED_GIT_ARGV:
            found.append(f"{rel}:{node.lineno} ({func}) builds a git argv without *HOST_GIT_OPTS")
    return found


def plain_read(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name) and node.func.id == "open":
        return True
    return (isinstance(node.func, ast.Attribute) and node.func.attr in READ_METHODS
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "agentfile"))


def read_problems(rel: str, tree: ast.AST) -> list[str]:
    if rel not in AGENT_STATE_READERS:
        return []
    return [f"{rel}:{node.lineno} ({func}) reads a file plainly: use agentfile.read_text/read_bytes "
            "(or, for a host-owned file, list it in HOST_OWNED_READS with why)"
            for func, node in functions_of(tree) if plain_read(node) and (rel, func) not in HOST_OWNED_READS]


def test_git_is_started_only_through_the_guarded_runner():
    wrong = [p for rel, tree in modules() for p in git_problems(rel, tree)]
    assert not wrong, "\n".join(wrong)


def test_agent_written_files_are_read_only_through_agentfile():
    wrong = [p for rel, tree in modules() for p in read_problems(rel, tree)]
    assert not wrong, "\n".join(wrong)


def test_the_walk_catches_the_dashboards_old_plain_git_and_a_plain_read():
    """The rule can fail: the dashboard's former ``_git`` and ``head_of`` are caught."""
    old = ast.parse('def _git(d, args):\n    return runner.run(["git", *args], cwd=d)\n'
                    'def head_of(g):\n    return (g / "HEAD").read_text()\n')
    assert git_problems("dash/model.py", old) and read_problems("dash/model.py", old)
    assert not git_problems(GIT_RUNNER, old)


def test_every_allowance_still_names_a_function_that_exists():
    defined = {(rel, node.name) for rel, tree in modules() for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    stale = [key for key in (*UNGUARDED_GIT_ARGV, *HOST_OWNED_READS) if key not in defined]
    assert not stale, stale
