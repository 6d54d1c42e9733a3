"""Before a venv build: whether the base interpreter holds what the manifest's repos need, and if not,
the one command that installs it there.

What a repo needs from the base is what its build runs with and its smoke import imports, where no
installer fetches it: the ``[build-system] requires`` of a repo built against the venv
(``install = "editable-no-build-isolation"``; an isolated build fetches its own), less what the
build itself puts in the venv first (an earlier manifest repo, and that repo's declared
dependencies, which pip or the "deps" step installs), plus the repo's ``base_requires`` in the
manifest (what no metadata declares: ksgpu imports cupy but leaves it out, so pip never tries to
build it).  The base checks them itself, in one python run (a distribution of that name, else a
top-level module of that name, and the version where one is asked for), so the answer is the one
the build will meet.

A feature worktree's ``pyproject.toml`` is the agent's: it is read as data (``agentfile``: no link,
no FIFO, bounded), parsed with ``tomllib`` and never run; a file that is not a table of
requirements counts as declaring none (with a warning), and an entry that is not a plain
requirement is left out (with a warning), so only names and versions reach the base's argv.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core import agentfile, runner
from ..core.errors import CommandFailed, Refused
from ..core.term import inert, warn
from ..workspace.manifest import MANIFEST_NAME, REQUIREMENT, Manifest, Repo

PYPROJECT = "pyproject.toml"
PYPROJECT_LIMIT = 1 << 20
MAX_REQUIRES = 100          # the most build requirements taken from one pyproject.toml
MAX_MARKER = 200
CHECK_TIMEOUT = 120

# Run by the base interpreter, the requirements as its arguments: prints, as JSON, those it does not
# meet (with the version it has, "" for none), those its packaging cannot parse, and whether pip
# may install into it (PEP 668: a venv may; a system Python that says so may not).
# A marker is evaluated here, against the base; without packaging (neither its own nor pip's) every
# requirement counts and only its name is checked.
CHECK_CODE = r"""
import importlib.metadata as md, importlib.util, json, os, re, sys, sysconfig
try:
    from packaging.requirements import Requirement
except ImportError:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        Requirement = None

def lacking(text):
    if Requirement is None:
        name, spec = re.match(r"\s*([A-Za-z0-9._-]+)", text).group(1), None
    else:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            return None
        name, spec = req.name, req.specifier
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        module = name.replace("-", "_")
        found = module.isidentifier() and importlib.util.find_spec(module) is not None
        return None if found else ""
    return have if spec and not spec.contains(have, prereleases=True) else None

missing, invalid = {}, []
for text in sys.argv[1:]:
    try:
        have = lacking(text)
    except Exception:
        invalid.append(text)
        continue
    if have is not None:
        missing[text] = have
managed = sys.prefix == sys.base_prefix and os.path.isfile(
    os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
print(json.dumps({"missing": missing, "invalid": invalid, "externally_managed": managed}))
"""


@dataclass(frozen=True)
class Need:
    """One requirement a repo has of the base: ``text`` as the base checks it (marker included),
    ``install`` as an installer takes it (no marker, no spaces), and where it is declared."""

    repo: str
    text: str
    install: str
    source: str


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    out, dash = [], False
    for char in name.lower():
        if char in "-_.":
            dash = True
            continue
        if dash and out:
            out.append("-")
        dash = False
        out.append(char)
    return "".join(out)


def plain_requirement(text: str) -> tuple[str, str] | None:
    """(the name, the install form) of a requirement chtop can check: a name, extras, a version,
    an optional ``; marker`` of printable characters; None for anything else (a URL, garbage)."""
    head, _, marker = text.partition(";")
    if marker and (len(marker) > MAX_MARKER or not all(" " <= c <= "~" for c in marker)):
        return None
    found = REQUIREMENT.match(head)
    if found is None:
        return None
    install = found["name"] + (found["extras"] or "") + "".join((found["spec"] or "").split())
    return found["name"], install


def read_pyproject(path: Path) -> tuple[dict, str | None]:
    """The table of ``path`` read as the agent's data, and a warning when there is a file that is
    not one (a link, a FIFO, too big, not TOML); a missing file is an empty table, no warning."""
    if not path.exists() and not path.is_symlink():
        return {}, None
    data = agentfile.read_text(path, limit=PYPROJECT_LIMIT)
    if data is None:
        what = agentfile.non_regular(path) or f"over {PYPROJECT_LIMIT >> 10} KiB"
        return {}, f"{path} is not a file chtop reads ({what})"
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(data), None
    except tomllib.TOMLDecodeError as exc:
        return {}, f"{path} is not valid TOML ({exc})"


def string_list(table: dict, *keys: str) -> list | None:
    """``table[keys[0]][keys[1]]...`` when it is a list, else None."""
    for key in keys:
        table = table.get(key) if isinstance(table, dict) else None
    return table if isinstance(table, list) else None


@dataclass
class RepoMeta:
    """What one repo's ``pyproject.toml`` says that the check uses."""

    name: str | None
    dependencies: list[str]
    build_requires: list[str]


def repo_meta(path: Path, warnings: list[str]) -> RepoMeta:
    """The project name, dependency names and build requirements of the pyproject at ``path``."""
    table, problem = read_pyproject(path)
    if problem:
        warnings.append(f"{problem}: its build requirements are not checked")
    project = table.get("project") if isinstance(table.get("project"), dict) else {}
    project_name = project.get("name") if isinstance(project.get("name"), str) else None
    deps = [parsed[0] for text in string_list(table, "project", "dependencies") or ()
            if isinstance(text, str) and (parsed := plain_requirement(text))]
    requires = string_list(table, "build-system", "requires")
    if requires is None and "build-system" in table:
        warnings.append(f"{path}: [build-system] requires is not a list: not checked")
    requires = list(requires or ())
    if len(requires) > MAX_REQUIRES:
        warnings.append(f"{path}: [build-system] requires has {len(requires)} entries; the first "
                        f"{MAX_REQUIRES} are checked")
        requires = requires[:MAX_REQUIRES]
    return RepoMeta(project_name, deps, requires)


def base_needs(root: Path, manifest: Manifest) -> tuple[list[Need], list[str]]:
    """(what the repos of ``root`` need the base to hold, in manifest order; warnings about files
    and entries that were left out)."""
    needs: list[Need] = []
    warnings: list[str] = []
    built_first: set[str] = set()    # what the build puts in the venv before the next repo
    for repo in manifest.repos:
        if repo.install == "none":
            continue
        for text in repo.base_requires:
            name, install = plain_requirement(text)
            needs.append(Need(repo.name, text, install, f"base_requires in {MANIFEST_NAME}"))
        meta = repo_meta(Path(root) / repo.name / PYPROJECT, warnings)
        if repo.install == "editable-no-build-isolation":
            needs += build_needs(repo, meta, built_first, warnings)
        built_first |= {normalized(repo.name), *(normalized(n) for n in (meta.name, *meta.dependencies) if n)}
    return needs, warnings


def build_needs(repo: Repo, meta: RepoMeta, built_first: set[str], warnings: list[str]) -> list[Need]:
    """The build requirements of ``repo`` the build does not provide itself."""
    needs = []
    source = f"[build-system] requires of {repo.name}/{PYPROJECT}"
    for text in meta.build_requires:
        parsed = plain_requirement(text) if isinstance(text, str) else None
        if parsed is None:
            warnings.append(f"{repo.name}/{PYPROJECT}: build requirement {inert(repr(text))} is not a plain "
                            "requirement: not checked")
            continue
        name, install = parsed
        if normalized(name) not in built_first:
            needs.append(Need(repo.name, text.strip(), install, source))
    return needs


def check_base(base: Path, needs: list[Need], warnings: list[str]) -> tuple[list[tuple[Need, str]], bool]:
    """(each need the base does not meet, with the version it has or ""; whether the base is
    externally managed): one run of ``base``, from an empty dir, its own dir not on sys.path.
    A requirement the base's packaging cannot parse is left out, with a warning."""
    texts = list(dict.fromkeys(need.text for need in needs))
    with tempfile.TemporaryDirectory(prefix="chtop-basecheck-") as scratch:
        result = runner.run([str(base), "-", *texts], scratch, check=False, input=CHECK_CODE,
                            env={"PYTHONSAFEPATH": "1"}, timeout=CHECK_TIMEOUT)
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        missing, managed = dict(answer["missing"]), bool(answer["externally_managed"])
        invalid = set(answer["invalid"])
    except (IndexError, ValueError, KeyError, TypeError):
        raise CommandFailed(f"checking the base interpreter {base} for what the repos need failed "
                            f"(exit {result.returncode}):\n{inert(result.error_tail())}") from None
    for need in needs:
        if need.text in invalid:
            warnings.append(f"{need.repo}: {need.source}: {need.text!r} is not a requirement {base} can parse: "
                            "not checked")
    return [(need, str(missing[need.text])) for need in needs if need.text in missing], managed


def install_command(base: Path, installs: list[str], env=None) -> str:
    """The one command that installs ``installs`` where ``base`` finds them: its conda env (by name
    when it is the active one), else with its own pip."""
    env = os.environ if env is None else env
    prefix = Path(base).parent.parent
    words = [shlex.quote(text) for text in installs]
    if (prefix / "conda-meta").is_dir():
        name = env.get("CONDA_DEFAULT_ENV", "")
        active = env.get("CONDA_PREFIX", "") and Path(env["CONDA_PREFIX"]) == prefix
        where = f"-n {shlex.quote(name)}" if active and name and "/" not in name else f"-p {shlex.quote(str(prefix))}"
        conda_words = [shlex.quote(text.split("[")[0] + text.partition("]")[2]) for text in installs]
        return f"conda install {where} {' '.join(conda_words)}"
    return f"{shlex.quote(str(base))} -m pip install {' '.join(words)}"


def refusal(base: Path, why: str, lacking: list[tuple[Need, str]], managed: bool, retry: str) -> Refused:
    """The one message for everything the base lacks: what, for which repo and from where, and the
    command that installs it there."""
    by_install: dict[str, list[str]] = {}
    have: dict[str, str] = {}
    for need, version in lacking:
        by_install.setdefault(need.install, []).append(f"{need.repo}: {need.source}")
        if version:
            have[need.install] = version
    width = max(len(text) for text in by_install)
    lines = [f"the base interpreter lacks what the repos need to build and import: {base} ({why})"]
    for text, sources in by_install.items():
        old = f" (it has {have[text]})" if text in have else ""
        lines.append(f"  {text.ljust(width)}  {'; '.join(dict.fromkeys(sources))}{old}")
    command = install_command(base, list(by_install))
    if managed and not command.startswith("conda "):
        lines.append(f"{base} is a system Python that pip does not install into (externally managed): install "
                     "them with the system's package manager, or make a conda env that has them and name its "
                     'python in ~/.config/chtop/config.toml (python = "...")')
    else:
        lines.append(f"Install them there, then retry ({retry}):\n  {command}")
    lines.append("Nothing was built.")
    return Refused(inert("\n".join(lines)))


def check_toolchain(root: Path, manifest: Manifest, base: Path, why: str, retry: str) -> None:
    """Refuse (exit 3, nothing built) when ``base`` lacks what the repos of ``root`` need; warn about
    pyproject files and entries left out."""
    needs, warnings = base_needs(root, manifest)
    lacking, managed = check_base(base, needs, warnings) if needs else ([], False)
    for message in warnings:
        warn(inert(message))
    if lacking:
        raise refusal(base, why, lacking, managed, retry)


def describe_needs(root: Path, manifest: Manifest) -> str:
    """For ``--dry-run``: what the build checks the base for first."""
    needs, _ = base_needs(root, manifest)
    if not needs:
        return "# before building: nothing to check in the base (no repo declares a requirement of it)"
    listed = ", ".join(dict.fromkeys(f"{need.install} ({need.repo})" for need in needs))
    return inert(f"# before building, the base is checked for: {listed}")

