"""A new worktree's chtop bytecode, seeded at create time (chtop_tasks/workspace/bytecode.py): the
host's own cache only, and never trusted over a source the agent changed."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

from chtop_tasks.workspace import bytecode

PKG = "probepkg"   # not chtop_tasks: the installed chtop would be found first
MODULE = "VALUE = 'host'\n"


def two_checkouts(tmp_path: Path) -> tuple[Path, Path]:
    top, new = tmp_path / "top", tmp_path / "new"
    for root in (top, new):
        (root / PKG).mkdir(parents=True)
        (root / PKG / "__init__.py").write_text("")
        (root / PKG / "probe.py").write_text(MODULE)
    return top, new


def import_value(root: Path, cache: Path) -> str:
    """``probepkg.probe.VALUE`` as a fresh Python under ``root`` with ``cache`` as its bytecode cache
    reads it."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(cache), PYTHONPATH=str(root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run([sys.executable, "-c", f"import {PKG}.probe as p; print(p.VALUE)"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()


def seeded(top: Path, new: Path, cache: Path, monkeypatch) -> int:
    monkeypatch.setattr(bytecode, "PACKAGE", PKG)
    monkeypatch.setattr(sys, "pycache_prefix", str(cache))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    for name in ("__init__.py", "probe.py"):
        source = top / PKG / name
        py_compile.compile(str(source), cfile=bytecode.importlib.util.cache_from_source(str(source)))
    return bytecode.seed_worktree_bytecode(new, top)


def test_identical_modules_get_checked_hash_bytecode_in_the_hosts_cache(tmp_path, monkeypatch):
    top, new = two_checkouts(tmp_path)
    cache = tmp_path / "cache"
    assert seeded(top, new, cache, monkeypatch) == 2
    pyc = Path(bytecode.importlib.util.cache_from_source(str(new / PKG / "probe.py")))
    assert pyc.is_relative_to(cache)
    assert pyc.read_bytes()[4:8] == bytecode.FLAGS_CHECKED_HASH
    assert not (new / PKG / "__pycache__").exists()
    assert import_value(new, cache) == "host"
    assert pyc.read_bytes()[4:8] == bytecode.FLAGS_CHECKED_HASH      # used as it is, not rewritten


def test_a_source_changed_after_seeding_is_compiled_afresh_even_with_its_size_and_mtime_kept(tmp_path, monkeypatch):
    top, new = two_checkouts(tmp_path)
    cache = tmp_path / "cache"
    seeded(top, new, cache, monkeypatch)
    probe = new / PKG / "probe.py"
    st = probe.stat()
    probe.write_text(MODULE.replace("host", "agnt"))              # same size
    os.utime(probe, ns=(st.st_atime_ns, st.st_mtime_ns))          # same mtime: a timestamp pyc would be trusted
    assert import_value(new, cache) == "agnt"


def test_a_module_that_differs_is_left_to_compile(tmp_path, monkeypatch):
    top, new = two_checkouts(tmp_path)
    (new / PKG / "probe.py").write_text("VALUE = 'other'\n")
    cache = tmp_path / "cache"
    assert seeded(top, new, cache, monkeypatch) == 1               # only __init__.py
    assert not Path(bytecode.importlib.util.cache_from_source(str(new / PKG / "probe.py"))).exists()
    assert import_value(new, cache) == "other"


def test_a_module_without_current_bytecode_is_compiled_once_for_the_running_checkout_too(tmp_path, monkeypatch):
    top, new = two_checkouts(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setattr(bytecode, "PACKAGE", PKG)
    monkeypatch.setattr(sys, "pycache_prefix", str(cache))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert bytecode.seed_worktree_bytecode(new, top) == 2
    top_pyc = Path(bytecode.importlib.util.cache_from_source(str(top / PKG / "probe.py")))
    assert bytecode.current_code(top / PKG / "probe.py", MODULE.encode()) is not None
    before = top_pyc.stat().st_mtime_ns
    assert import_value(top, cache) == "host"
    assert top_pyc.stat().st_mtime_ns == before                    # Python took it as current
    assert import_value(new, cache) == "host"


def test_nothing_is_seeded_without_a_cache_of_the_hosts_own(tmp_path, monkeypatch):
    top, new = two_checkouts(tmp_path)
    monkeypatch.setattr(bytecode, "PACKAGE", PKG)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert bytecode.seed_worktree_bytecode(new, top) == 0


def test_a_new_worktrees_first_git_tasks_compile_nothing_and_the_create_seeds_no_more(initialized, tmp_path):
    """``inv worktree.create`` as typed, then ``git.status``, ``git.diff`` and ``git.merge-up --dry-run``
    in the new worktree as typed: none writes a pyc (each module they import was seeded), and the
    create seeded only what those tasks and the create itself import (a pyc is a file written)."""
    from test_inv_discovery import CHTOP_INV, console_script, typed

    g = initialized
    cache = tmp_path / "xdg-cache"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["XDG_CACHE_HOME"] = str(cache)
    bin_dir = console_script(tmp_path / "bin", sys.executable, chtop_tree=g.toplevel, code=CHTOP_INV).parent
    created = typed(bin_dir, g.toplevel, "worktree.create", "--name", "fresh", "--no-venv", env=env)
    assert created.returncode == 0, created.stderr
    fresh = g.toplevel.parent / "fresh"

    def pycs() -> set[Path]:
        return set((cache / "chtop" / "pycache").glob(f"{str(fresh).lstrip('/')}/**/*.pyc"))

    seeded = pycs()
    assert 20 < len(seeded) < 60, len(seeded)           # chtop_tasks has about 140 modules
    for argv in (["git.status"], ["git.diff"], ["git.merge-up", "--dry-run"]):
        ran = typed(bin_dir, fresh, *argv, env=env)
        assert ran.returncode == 0, ran.stderr
        assert pycs() == seeded, f"{argv} compiled {sorted(p.name for p in pycs() - seeded)}"
