"""A new worktree's copy of chtop gets bytecode at create time, so its first ``inv`` compiles nothing.

The host keeps bytecode only in its own cache (``sys.pycache_prefix``, set by ``tasks.py``: see
there), never beside the sources, where the agent could write it.  A fresh worktree's modules
have new paths, so without this their first task compiles every module it imports (tens of ms).
Where a module of the new worktree has the same bytes as the running checkout's, and the running
one's cached bytecode is current (its timestamp header matches the source; else that module is
compiled once, and cached for the running checkout too), that code is written to the cache under
the new path as a *checked-hash* pyc: Python hashes the worktree's source on
every import and compiles it afresh when the agent changed it, so nothing the agent wrote runs
unchecked, and no compile runs here (a read and a write per module).

``worktree.create`` seeds the modules a worktree's first git task imports (``first_task_sources``):
its own and those of the git tasks, about 35 of chtop's 140.  Writing a pyc is a file created, 0.4-0.7
ms on these VMs' disks: seeding all 140 was 200 ms of the create's CPU, for modules (the dashboard's,
a launch's) that compile at their first use as any new code does.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from pathlib import Path

from .. import agentfile

PACKAGE = "chtop_tasks"
HEADER = 16                                          # magic, flags, then mtime+size or the source hash
FLAGS_CHECKED_HASH = (0b11).to_bytes(4, "little")    # hash-based, checked against the source


def running_checkout() -> Path:
    """The checkout whose chtop_tasks runs this process."""
    return Path(__file__).resolve().parent.parent.parent


def current_code(source: Path, source_bytes: bytes) -> bytes | None:
    """The marshalled code of ``source`` from the host's bytecode cache, when that pyc is a timestamp
    pyc of this Python matching the file's mtime and size (else None)."""
    data = agentfile.read_bytes(importlib.util.cache_from_source(str(source)))
    if data is None or len(data) < HEADER or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    if int.from_bytes(data[4:8], "little") != 0:
        return None
    st = source.stat()
    mtime, size = int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")
    if mtime != (int(st.st_mtime) & 0xFFFFFFFF) or size != (len(source_bytes) & 0xFFFFFFFF):
        return None
    return data[HEADER:]


# What a worktree's first git task imports beyond the modules worktree.create has imported itself
# (the task modules import the rest lazily, when the task runs)
FIRST_TASK_MODULES = ("chtop_tasks.tasks.git", "chtop_tasks.workspace.gitops",
                      "chtop_tasks.argv", "chtop_tasks.warmstart.client")
# Seeded by their files, not imported here (the server's import of socket and select is not the
# create's to pay): the warm launcher the first git task starts, and what it imports of chtop's own
# beyond the modules above.
WARM_SERVER_SOURCES = ("chtop_tasks/warmstart/server.py", "chtop_tasks/filestamp.py")


def first_task_sources() -> set[str]:
    """The sources (relative to the running checkout) of the chtop modules this process has imported,
    with ``FIRST_TASK_MODULES`` and what they import: what a worktree's first git task loads."""
    import importlib

    for name in FIRST_TASK_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a name this list outlived, a broken module: it compiles at first use
            pass
    root = str(running_checkout())
    sources = set(WARM_SERVER_SOURCES)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.partition(".")[0] == PACKAGE else None
        real = os.path.realpath(path) if path else ""
        if real.startswith(root + os.sep):
            sources.add(os.path.relpath(real, root))
    return sources


def seed_worktree_bytecode(new_root: Path, from_root: Path | None = None, only: set[str] | None = None) -> int:
    """Checked-hash bytecode in the host's cache for each module of ``new_root``'s chtop_tasks that
    is byte for byte the one of ``from_root`` (default: the running checkout); ``only``: of these
    sources (relative to the checkout) alone.  How many were written.  Nothing without a bytecode
    cache of the host's own (``-B``, no prefix)."""
    if sys.dont_write_bytecode or not sys.pycache_prefix:
        return 0
    from_root = running_checkout() if from_root is None else from_root
    if only is None:
        sources = [Path(dirpath) / name for dirpath, _dirs, files in os.walk(from_root / PACKAGE)
                   for name in files if name.endswith(".py")]
    else:
        sources = [from_root / rel for rel in sorted(only) if rel.endswith(".py")]
    return sum(1 for source in sources if seed_one(source, new_root, from_root))


def seed_one(source: Path, new_root: Path, from_root: Path) -> bool:
    target = new_root / source.relative_to(from_root)
    source_bytes = agentfile.read_bytes(source)
    if source_bytes is None or agentfile.read_bytes(target) != source_bytes:
        return False
    pyc = Path(importlib.util.cache_from_source(str(target)))
    if pyc.exists():
        return False
    code = current_code(source, source_bytes)
    if code is None:
        try:
            code = compile_into_cache(source, source_bytes)
        except (SyntaxError, ValueError):
            return False            # its import says why, as without this
    header = importlib.util.MAGIC_NUMBER + FLAGS_CHECKED_HASH + importlib.util.source_hash(source_bytes)
    write_pyc(pyc, header + code)
    return True


def compile_into_cache(source: Path, source_bytes: bytes) -> bytes:
    """``source`` (the running checkout's, the code this process runs) compiled, and its timestamp
    pyc written to the host's cache as its own first import would; the marshalled code."""
    code = marshal.dumps(compile(source_bytes, str(source), "exec", dont_inherit=True))
    st = source.stat()
    header = (importlib.util.MAGIC_NUMBER + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
              + (len(source_bytes) & 0xFFFFFFFF).to_bytes(4, "little"))
    write_pyc(Path(importlib.util.cache_from_source(str(source))), header + code)
    return code


def write_pyc(pyc: Path, data: bytes) -> None:
    pyc.parent.mkdir(parents=True, exist_ok=True)
    partial = pyc.with_name(f"{pyc.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    os.replace(partial, pyc)
