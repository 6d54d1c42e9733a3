"""git_repositories.toml: the repos of a workspace and how to build each.

One place lists every repo, in dependency (build) order, with its clone URL,
its integration branch and its venv build recipe, so there is no second
list to keep in step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ..core.errors import ManifestError
from ..core.places import dir_name_problem
from .rootfind import MANIFEST_NAME  # noqa: F401  (where a checkout is, and so the file name, is rootfind's)

INSTALL_MODES = ("editable", "editable-no-build-isolation", "none")
REPO_KEYS = {"name", "url", "branch", "install", "smoke_import", "test", "submodules", "base_requires"}
TOP_KEYS = {"repo"}

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")
# A requirement the base interpreter must meet: a distribution name (PEP 508), optional extras, an
# optional version specifier ("cupy", "pybind11>=2.10", "grpcio-tools >= 1.60, < 2"); no marker, no URL.
_VERSION_CLAUSE = r"(?:===|==|!=|<=|>=|~=|<|>)\s*[A-Za-z0-9.*+!_-]+"
REQUIREMENT = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?P<extras>\[[A-Za-z0-9._,\s-]*\])?\s*"
    rf"(?P<spec>{_VERSION_CLAUSE}(?:\s*,\s*{_VERSION_CLAUSE})*)?\s*$"
)


@dataclass(frozen=True)
class Repo:
    """One repo of the manifest.

    ``install``: how the venv gets it ("editable", the default, or
    "editable-no-build-isolation" when it builds against packages already in
    the venv, or "none" to say on purpose that it is not installed).
    ``smoke_import``: modules imported after the build, from a throwaway dir.
    ``test``: an optional heavier command run by ``venv.build --test``.
    ``base_requires``: what the base interpreter must hold for this repo to build and import that
    the repo's own metadata does not declare (cupy, which ksgpu imports but leaves undeclared so
    pip never tries to install it); checked before every venv build.
    """

    name: str
    url: str
    branch: str
    install: str = "editable"
    smoke_import: tuple[str, ...] = ()
    test: str | None = None
    submodules: bool = True
    base_requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    path: Path
    repos: tuple[Repo, ...] = field(default_factory=tuple)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.repos]

    def get(self, name: str) -> Repo:
        for repo in self.repos:
            if repo.name == name:
                return repo
        raise KeyError(name)


def check_plain_dir_name(name: str) -> str | None:
    """Return why ``name`` is not a plain directory name, or None if it is."""
    why = dir_name_problem(name)
    if why:
        return why
    if not _PLAIN_NAME.match(name):
        return "may only contain letters, digits and . _ + -"
    return None


def _entry_error(path: Path, index: int, name, message: str) -> ManifestError:
    label = f"repo #{index + 1}" + (f" ({name!r})" if isinstance(name, str) and name else "")
    return ManifestError(f"{path}: {label}: {message}")


def _parse_smoke(path, index, name, value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _entry_error(path, index, name, "'smoke_import' must be a module name or a list of them")
    return tuple(value)


def _parse_base_requires(path, index, name, value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _entry_error(path, index, name, "'base_requires' must be a list of requirements, "
                                              'e.g. base_requires = ["cupy", "pybind11>=2.10"]')
    for text in value:
        if not REQUIREMENT.match(text):
            raise _entry_error(path, index, name, f"'base_requires' entry {text!r} is not a requirement: a "
                                                  'distribution name with an optional version, e.g. "cupy" or '
                                                  '"pybind11>=2.10" (no marker, no URL)')
    return tuple(text.strip() for text in value)


def parse_repo(path: Path, index: int, entry) -> Repo:
    if not isinstance(entry, dict):
        raise _entry_error(path, index, None, "must be a table ([[repo]])")
    name = entry.get("name")
    unknown = sorted(set(entry) - REPO_KEYS)
    if unknown:
        raise _entry_error(
            path, index, name, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(REPO_KEYS))}"
        )
    why = check_plain_dir_name(name)
    if why:
        raise _entry_error(path, index, name, f"'name' {why} (got {name!r})")
    for key in ("url", "branch"):
        value = entry.get(key)
        if not isinstance(value, str) or not value.strip():
            raise _entry_error(path, index, name, f"missing '{key}'")
    install = entry.get("install", "editable")
    if install not in INSTALL_MODES:
        raise _entry_error(path, index, name, f"'install' must be one of {', '.join(INSTALL_MODES)} (got {install!r})")
    test = entry.get("test")
    if test is not None and (not isinstance(test, str) or not test.strip()):
        raise _entry_error(path, index, name, "'test' must be a non-empty command string")
    submodules = entry.get("submodules", True)
    if not isinstance(submodules, bool):
        raise _entry_error(path, index, name, "'submodules' must be true or false")
    return Repo(
        name=name,
        url=entry["url"].strip(),
        branch=entry["branch"].strip(),
        install=install,
        smoke_import=_parse_smoke(path, index, name, entry.get("smoke_import")),
        test=test,
        submodules=submodules,
        base_requires=_parse_base_requires(path, index, name, entry.get("base_requires")),
    )


def parse_manifest(path: Path, text: str, reserved: tuple[str, ...] = ()) -> Manifest:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise ManifestError(f"{path}: unknown top-level key(s) {', '.join(unknown)}; expected [[repo]] entries")
    entries = data.get("repo", [])
    if not isinstance(entries, list):
        raise ManifestError(f"{path}: 'repo' must be an array of tables ([[repo]])")
    if not entries:
        raise ManifestError(f"{path}: no [[repo]] entries; a workspace needs at least one repo "
                            "(each entry: name, url, branch; see README, 'The manifest')")
    repos: list[Repo] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        repo = parse_repo(path, index, entry)
        if repo.name in seen:
            raise _entry_error(path, index, repo.name, "duplicate repo name")
        if repo.name in reserved:
            raise _entry_error(path, index, repo.name, f"name is reserved by chtop ({', '.join(reserved)})")
        seen.add(repo.name)
        repos.append(repo)
    return Manifest(path=path, repos=tuple(repos))


# Names inside a checkout that a repo may not take: they are chtop's own.
RESERVED_IN_CHECKOUT = (
    "chtop_tasks", "sandbox", "dotfile_templates", "containers", "tests", "bench", "docs",
    "tasks.py", "noxfile.py", "pyproject.toml", "README.md", "CLAUDE.md",
)


def load_manifest(path: Path) -> Manifest:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ManifestError(f"{path}: manifest not found; every checkout needs a {MANIFEST_NAME}") from exc
    return parse_manifest(path, text, reserved=RESERVED_IN_CHECKOUT)
