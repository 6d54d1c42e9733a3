"""The package map holds: every import (module level and inside functions) goes where the map says,
no module imports its way back to itself, and every module says what it is for."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "chtop_tasks"

# What each package may import besides itself and core/.  cli/ and tasks/ are the entry points (the
# chtop command, inv and its light task path, the invoke namespaces): they may import anything, and
# nothing else imports them.  The workspace model and the private stores use each other's modules
# (layout walks a worktree's stores before host git runs; the stores' import finds its workspace):
# the module graph below them has no cycle.
ALLOWED = {
    "core": set(),
    "workspace": {"stores"},
    "stores": {"workspace"},
    "gitloop": {"workspace", "stores"},
    "proxy": {"workspace", "stores", "agents"},   # the daemon imports the agents' branches every few seconds;
                                                  # it adds an agent's credential (its registry, secrets.env)
    "sandbox": {"workspace", "stores", "proxy"},
    "venv": {"workspace", "sandbox"},         # a feature worktree's venv is built in its sandbox
    "agents": {"workspace", "sandbox"},
    "notify": {"proxy"},                      # host side: the phone notifier watches the proxy
    "sessions": {"workspace", "sandbox", "agents", "proxy", "notify"},
    "hosts": {"workspace", "stores", "gitloop"},   # a host's worktree is landed here by the git loop
    "dash": {"workspace", "stores", "gitloop", "proxy", "sessions", "hosts"},   # the review diff is the git loop's
    "incontainer": set(),                     # runs inside a sandbox: the standard library only
}
ENTRY_POINTS = {"cli", "tasks"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PKG.rglob("*.py")) if "__pycache__" not in path.parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every chtop module ``name`` imports, wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == PKG.name}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != PKG.name:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: {t for t in imports_of(name, path, known) if t in known and t != name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in import order, the first again at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def concern_of(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return "root"
    first = parts[1]
    return "entry" if first in ENTRY_POINTS else first


def test_no_import_cycle_counting_imports_inside_functions():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_import_follows_the_package_map():
    wrong = []
    for name, targets in import_graph().items():
        concern = concern_of(name)
        if concern in ("entry", "root"):
            continue
        assert concern in ALLOWED, f"{name}: package {concern!r} is not in the package map (ALLOWED)"
        for target in targets:
            to = concern_of(target)
            if to == "root":
                to = "entry"            # the root collection
            if to != concern and to != "core" and to not in ALLOWED[concern]:
                wrong.append(f"{name} imports {target} ({concern} may import {sorted(ALLOWED[concern]) or 'core only'})")
            if concern == "incontainer" and to != concern:
                wrong.append(f"{name} imports {target}: it runs inside a sandbox, the standard library only")
    assert not wrong, "\n".join(wrong)


def test_the_package_root_holds_only_the_packages():
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at the package root: {loose} (place each in a package of the map)"


def test_every_module_says_what_it_is_for():
    missing = [name for name, path in all_modules().items()
               if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()]
    assert not missing, f"modules without a docstring saying what they are for: {missing}"
