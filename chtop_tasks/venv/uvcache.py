"""uv's cache, seen from the venv build: bytecode for what isolated builds install.

uv unpacks each wheel once into its cache (``archive-v0/<id>/``) and links
the files from there into every environment it installs into, including the
throwaway environment of each isolated (PEP 517) build.  It unpacks them
without bytecode, so every isolated build of a setuptools repo compiles
setuptools again, in each of the two hook processes (about a third of an
editable build).  Byte-compiling those unpacked wheels once, in the
cache, lets every later build link the compiled files too.

Only the distributions named by the isolated repos' ``build-system.requires``
are compiled, and only those with no bytecode yet: a user's cache can hold
gigabytes of other wheels.  The cache belongs to the host user; the sandbox
sees it read-only, so nothing here reads a file the agent could have written
except the repos' ``pyproject.toml``, read as data (uv reads it too).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core import agentfile

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

# What a PEP 517 frontend assumes when a repo has no [build-system] table.
DEFAULT_BUILD_REQUIRES = ("setuptools",)
ARCHIVE_BUCKET = "archive-v0"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalized(name: str) -> str:
    """A distribution name as dist-info directories spell it, lower-cased (PEP 503, with ``_``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def build_requirement_names(repo_dir: Path) -> set[str]:
    """The distribution names ``repo_dir``'s ``build-system.requires`` asks for (normalized).

    A missing or unreadable ``pyproject.toml`` gives the PEP 517 default
    (setuptools); a requirement that does not start with a name is left out.
    """
    text = agentfile.read_text(Path(repo_dir) / "pyproject.toml")     # the agent's: may be a FIFO or a link
    try:
        data = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError:
        return set(DEFAULT_BUILD_REQUIRES)
    requires = data.get("build-system", {}).get("requires", DEFAULT_BUILD_REQUIRES)
    if not isinstance(requires, list | tuple):
        return set(DEFAULT_BUILD_REQUIRES)
    names = set()
    for text in requires:
        match = _NAME.match(text) if isinstance(text, str) else None
        if match:
            names.add(normalized(match.group(1)))
    return names


def unpacked_wheels(cache_dir: Path, names: set[str]) -> list[Path]:
    """The unpacked wheels in uv's cache whose distribution is one of ``names``."""
    bucket = Path(cache_dir) / ARCHIVE_BUCKET
    try:
        entries = sorted(bucket.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            infos = [p.name for p in entry.iterdir() if p.name.endswith(".dist-info")]
        except OSError:
            continue
        if any(normalized(info.removesuffix(".dist-info").rsplit("-", 1)[0]) in names for info in infos):
            found.append(entry)
    return found


def needs_bytecode(unpacked: Path) -> bool:
    """Whether the unpacked wheel has Python files at its top (modules, or packages' ``__init__``
    level) and no ``__pycache__`` beside any of them."""
    try:
        entries = list(unpacked.iterdir())
        code_dirs = [unpacked] if any(p.suffix == ".py" for p in entries) else []
        for entry in entries:
            if entry.is_dir() and not entry.name.endswith((".dist-info", ".data", "__pycache__")):
                if any(p.suffix == ".py" for p in entry.iterdir()):
                    code_dirs.append(entry)
    except OSError:
        return False  # unreadable: leave it alone
    if not code_dirs or not all(os.access(d, os.W_OK | os.X_OK) for d in code_dirs):
        return False  # nothing to compile, or a cache this user cannot write (another user's, read-only)
    return not any((d / "__pycache__").is_dir() for d in code_dirs)


def wheels_to_compile(cache_dir: Path, repo_dirs: list[Path]) -> list[Path]:
    """The unpacked build requirements of ``repo_dirs`` that have no bytecode yet."""
    names = set().union(*(build_requirement_names(d) for d in repo_dirs)) if repo_dirs else set()
    return [w for w in unpacked_wheels(cache_dir, names) if needs_bytecode(w)]
