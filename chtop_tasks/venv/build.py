"""Per-workspace venvs: ``<root>/.venv``, an overlay on the base interpreter.

The venv is made with ``--system-site-packages`` from the *base* interpreter
(the one chtop runs on, or that interpreter's base when chtop itself runs in
a venv), so the compiled toolchain installed there (a conda env's cupy,
pybind11, setuptools, ...) shows through.  Each manifest repo is installed
from ``<root>/<repo>`` per its recipe, in manifest order; then each repo's
``smoke_import`` modules are imported with the venv's python from a
throwaway directory with ``PYTHONSAFEPATH=1``, so a checkout dir named like a
package (``<root>/ksgpu/``) cannot shadow the installed package (Python puts
the current dir first on ``sys.path``).  With ``test`` each repo's ``test`` command runs the same way.

With uv on PATH the venv is made by ``uv venv --system-site-packages``
(no pip, no setuptools of its own: the base's show through) and the repos are
installed by ``uv pip install --no-deps``; ``bin/pip`` launchers run the base's pip in
the venv.  The requirements nothing meets are installed with pip before each repo
that builds against the venv and at the end ("deps" steps).  Without uv, ``python -m venv`` makes it and pip installs; the
setuptools ensurepip adds on Python < 3.12 is removed.  Either way the user
gets the same venv.  uv keeps its own cache (``uv cache dir``), which every
worktree shares: a second worktree's build downloads nothing the first did,
and builds only its own repos.  After an isolated build, the build
requirements uv unpacked there get bytecode once (``uvcache``), so later
isolated builds do not compile setuptools again.  The smoke imports run at
the same time, each in its own python.

The build is planned as data (``plan_build`` returns the steps), printed by
``--dry-run``, and run step by step through ``chtop_tasks.core.runner``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core import runner
from ..core.errors import ChtopError, CommandFailed, Refused, UsageError
from ..core.fanout import fan_out
from ..core.places import read_user_config, state_dir
from ..core.term import say
from ..workspace import venvstamp as stamp
from ..workspace.manifest import MANIFEST_NAME, Manifest, Repo
from . import compcache, toolchain, uvcache
from .buildlog import BuildLog, first_error_line
from .tls import installer_trust_env

VENV_DIR = ".venv"
INSTALLERS = ("pip", "uv")
INSTALLER_ENV = "CHTOP_INSTALLER"
THROWAWAY = "<throwaway dir>"
SAFE_ENV = {"PYTHONSAFEPATH": "1"}
# uv links the wheels of its cache, bytecode included, into each isolated build's env; with a
# pycache prefix (tasks.py, the .envrc) Python would look for that bytecode under the prefix
# instead, and every build would compile setuptools again.  So uv's installs and the "bytecode"
# step run without one: the bytecode they load is uv's cache (the user's, read-only to every
# sandbox), or a repo's own when its build code imports it (build code the agent could write runs
# there anyway: README's security model).
CACHED_BYTECODE_ENV = ("PYTHONPYCACHEPREFIX",)

INSTALL_TIMEOUT = 3600  # compiled repos (ksgpu, pirate) take minutes
CHECK_TIMEOUT = 300
TEST_TIMEOUT = 3600
TAIL_LINES = 15

# Imports the module named in argv[1]: no module name is pasted into code.
IMPORT_CODE = "import importlib, sys; importlib.import_module(sys.argv[1])"
PREFIX_CODE = "import sys; print(sys.prefix)"

UNMET_SCRIPT = f"{THROWAWAY}/chtop_unmet_requirements.py"
# Run by the venv's python: the requirements of the venv's own distributions
# (the repos just installed) that nothing on sys.path satisfies, one a line.
# The base's distributions count: that is the point of the overlay.
UNMET_CODE = """\
import sys, importlib.metadata as md
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
own = [p for p in sys.path if p.startswith(sys.prefix + '/') and p.endswith('site-packages')]
unmet = []
for dist in md.distributions(path=own):
    for text in dist.requires or ():
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({'extra': ''}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            unmet.append(str(req))
            continue
        if not req.specifier.contains(have, prereleases=True):
            unmet.append(str(req))
print('\\n'.join(dict.fromkeys(unmet)))
"""

PIP_LAUNCHERS = ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}")
# A venv made by uv has no pip of its own.  Its ``bin/pip`` runs the base's
# pip (seen through --system-site-packages) with the venv's python, so it
# installs into the venv, as the pip ``python -m venv`` puts there does.
# ``{shebang}`` names the venv's python.
PIP_LAUNCHER_CODE = """\
{shebang}
import sys
try:
    from pip._internal.cli.main import main
except ImportError:
    sys.exit("no pip in this venv's base interpreter: use `uv pip install --python " + sys.executable + " ...`")
if __name__ == "__main__":
    sys.exit(main())
"""
SHEBANG_MAX = 127  # Linux reads at most this much of a #! line

# pip's closing boilerplate says nothing about the cause; leave it out of tails.
_BOILERPLATE = (
    "note: This error originates from a subprocess",
    "note: This is an issue with the package mentioned above",
    "hint: See above for",
    "See above for output.",
    "╰─> See above for",
)


@dataclass(frozen=True)
class BuildStep:
    """One thing the build does.

    ``kind``: "remove" (delete the venv), "create", "trim" (pip only: drop
    the setuptools ensurepip put in the venv, so the base's shows through),
    "check" (the venv's python runs and is the venv's), "launchers" (uv
    only: write the ``bin/pip`` launchers), "install", "skip" (install = "none"),
    "bytecode" (uv only: byte-compile the unpacked wheels the isolated
    builds of ``paths`` install, in uv's cache; ``argv`` is the command the
    wheels' directories are appended to), "deps" (uv only: list the
    requirements nothing satisfies; ``then`` installs them with pip),
    "smoke", "test".  ``argv`` is empty for "skip"
    and "launchers" (chtop does those itself).  ``cwd`` None with ``throwaway``
    means a fresh temporary directory at run time.
    """

    kind: str
    repo: str | None
    argv: tuple[str, ...]
    cwd: Path | None = None
    throwaway: bool = False
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""
    timeout: float = INSTALL_TIMEOUT
    expect: str | None = None  # "check": the stdout it must print
    then: tuple[str, ...] = ()  # "deps": the command its output lines are appended to
    paths: tuple[Path, ...] = ()  # "bytecode": the isolated repos whose build requirements are compiled
    unset: tuple[str, ...] = ()  # environment variables removed for it

    def describe(self) -> str:
        """The step as one line of the printed plan."""
        if not self.argv:
            return f"# {self.note}"
        env = " ".join([*(f"-u {name}" for name in self.unset), *(f"{k}={shlex.quote(v)}" for k, v in self.env)])
        env = f"env {env}" if self.unset else env
        cmd = shlex.join(self.argv)
        if self.paths:
            repos = ", ".join(p.name for p in self.paths)
            cmd += f" <each unpacked wheel in `uv cache dir` that the builds of {repos} need, if it has no bytecode>"
        line = f"$ {env + ' ' if env else ''}{cmd}"
        cwd = THROWAWAY if self.throwaway else self.cwd
        if cwd is not None:
            line += f"  (cwd={cwd})"
        if self.note:
            line += f"  # {self.note}"
        if self.then:
            line += f"\n$ {shlex.join(self.then)} <each unmet requirement>  # only if there are any"
        return line


@dataclass
class BuildReport:
    """What a finished build did, for the summary line."""

    venv: Path
    installer: str
    installed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    smoked: list[str] = field(default_factory=list)
    tested: list[str] = field(default_factory=list)
    deps: list[str] = field(default_factory=list)
    log: Path | None = None

    def summary(self) -> str:
        parts = [f"venv ready: {self.venv} (installer {self.installer})"]
        parts.append("installed " + (", ".join(self.installed) or "nothing"))
        if self.deps:
            parts.append("with pip, unmet requirements " + ", ".join(self.deps))
        if self.skipped:
            parts.append("skipped " + ", ".join(self.skipped) + ' (install = "none")')
        if self.smoked:
            parts.append("smoke imports ok: " + ", ".join(self.smoked))
        if self.tested:
            parts.append("tests ok: " + ", ".join(self.tested))
        if self.log:
            parts.append(f"log {self.log}")
        return "; ".join(parts)


def base_python() -> Path:
    """The interpreter a workspace venv is seeded from (see ``base_python_choice``)."""
    return base_python_choice()[0]


def base_python_choice(env=None) -> tuple[Path, str]:
    """(the base interpreter, why that one): the user's toolchain, chosen the same way for every
    worktree: ``python = "..."`` in ``~/.config/chtop/config.toml``, else the active conda env's
    (``$CONDA_PREFIX/bin/python``), else chtop's own (``own_base_python``)."""
    env = os.environ if env is None else env
    path, config = read_user_config()
    if "python" in config:
        value = config["python"]
        python = Path(value).expanduser() if isinstance(value, str) and value.strip() else None
        if python is None or not python.is_file() or not os.access(python, os.X_OK):
            raise UsageError(f"{path}: python = {value!r} is not an interpreter that runs; "
                             f'give its full path, e.g. python = "~/miniforge3/envs/chord/bin/python"')
        return python, f"python in {path}"
    conda = env.get("CONDA_PREFIX", "")
    if conda and (Path(conda) / "bin" / "python").is_file():
        return Path(conda) / "bin" / "python", "$CONDA_PREFIX: the active conda env"
    own = own_base_python()
    return own, ("the python running chtop" if own == Path(sys.executable)
                 else f"the base of the venv chtop runs in ({sys.prefix})")


def own_base_python() -> Path:
    """The interpreter running chtop; when that is itself a venv (pipx, nox, bootstrap's, or a
    workspace's own ``.venv``), its base interpreter instead: a venv seeded from a venv would
    not see the base's site-packages, and ``--recreate`` must not depend on the venv it deletes.
    """
    if sys.prefix == sys.base_prefix:
        return Path(sys.executable)
    base = Path(getattr(sys, "_base_executable", "") or "")
    if base.is_file() and not _inside(base, Path(sys.prefix)):
        return base
    for name in (f"python{sys.version_info[0]}.{sys.version_info[1]}", "python3", "python"):
        candidate = Path(sys.base_prefix) / "bin" / name
        if candidate.is_file():
            return candidate
    raise ChtopError(f"cannot find the base interpreter of {sys.executable} under {sys.base_prefix}/bin")


def _inside(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def venv_log_dir(root: Path) -> Path:
    """Where the build logs of ``root``'s venv go: its group's ``.chtop/logs``."""
    return state_dir(Path(root).parent) / "logs"


def venv_dir(root: Path) -> Path:
    return Path(root) / VENV_DIR


def venv_python(root: Path) -> Path:
    return venv_dir(root) / "bin" / "python"


def retry_hint(root: Path, *, test: bool = False) -> str:
    """The command that (re)builds just this workspace's venv."""
    cmd = f"inv venv.build --workdir {shlex.quote(str(root))}"
    return cmd + (" --test" if test else "")


def choose_installer(installer: str | None = None) -> str:
    """``installer``, else $CHTOP_INSTALLER, else uv when on PATH, else pip."""
    source = "--installer"
    if not installer:
        installer, source = os.environ.get(INSTALLER_ENV, ""), f"${INSTALLER_ENV}"
    if installer:
        if installer not in INSTALLERS:
            raise UsageError(f"{source}: unknown installer {installer!r}; choose one of {', '.join(INSTALLERS)}")
        if installer == "uv" and shutil.which("uv") is None:
            raise UsageError(f"{source} asks for uv, but uv is not on PATH (install it, or use pip)")
        return installer
    return "uv" if shutil.which("uv") else "pip"


def uv_command() -> str:
    """uv's own file (``~/.local/bin/uv`` is bootstrap's link into chtop's venv, which a sandboxed
    build does not see: it mounts this file alone)."""
    found = shutil.which("uv")
    return os.path.realpath(found) if found else "uv"


def create_argv(installer: str, base: Path, vdir: Path) -> tuple[str, ...]:
    """The command that makes ``vdir``: an overlay on ``base`` that sees its site-packages.

    uv's venv has neither pip nor setuptools of its own (0.1 s); ``python -m
    venv`` bootstraps pip with ensurepip (seconds), and on Python < 3.12 a
    setuptools that the "trim" step removes again.  ``--no-project``: the
    checkout's own pyproject.toml says nothing about the venv.
    """
    if installer == "uv":
        return (uv_command(), "venv", "--no-project", "--python", str(base), "--system-site-packages", str(vdir))
    return (str(base), "-m", "venv", "--system-site-packages", str(vdir))


def pip_launcher_text(vpy: Path) -> str:
    """The text of a ``bin/pip`` launcher for the venv whose python is ``vpy``."""
    shebang = f"#!{vpy}"
    if len(shebang) > SHEBANG_MAX or " " in str(vpy):  # as pip's own launchers do
        shebang = "#!/bin/sh\n'''exec' " + shlex.quote(str(vpy)) + ' "$0" "$@"\n' + "' '''"
    return PIP_LAUNCHER_CODE.format(shebang=shebang)


def write_pip_launchers(vdir: Path) -> None:
    """``bin/pip``, ``bin/pip3``, ``bin/pipX.Y`` for a venv made without pip (never over one there)."""
    text = pip_launcher_text(vdir / "bin" / "python")
    for name in PIP_LAUNCHERS:
        path = vdir / "bin" / name
        if not path.exists():
            path.write_text(text)
            path.chmod(0o755)


def install_argv(installer: str, python: Path, repo: Repo, src: Path) -> tuple[str, ...]:
    """The command that installs ``repo`` from ``src`` into the venv of ``python``.

    uv gets ``--no-deps``: it does not count the base's packages
    (--system-site-packages) as installed and would put a second copy of,
    say, the conda env's numpy into the venv (astral-sh/uv#4466); pip reuses
    them.  The "deps" step then installs what is really missing, with pip.
    """
    flags = ["--no-build-isolation"] if repo.install == "editable-no-build-isolation" else []
    if installer == "uv":
        head = [uv_command(), "pip", "install", "--python", str(python), "--no-deps"]
    else:
        head = [str(python), "-m", "pip", "install"]
    return tuple(head + flags + ["-e", str(src)])


def check_repos(root: Path, manifest: Manifest) -> None:
    """Refuse, naming every one, when a repo to install is not checked out."""
    missing = [
        r.name for r in manifest.repos if r.install != "none" and not (Path(root) / r.name).is_dir()
    ]
    if missing:
        lines = "\n".join(f"  {name}: {Path(root) / name} does not exist" for name in missing)
        raise Refused(
            f"cannot build the venv of {root}: repo(s) not cloned:\n{lines}\n"
            "Clone them with `inv toplevel.init` (in the toplevel); in a feature worktree, "
            "`inv worktree.create NAME` makes them."
        )


def plan_build(
    root: Path,
    manifest: Manifest,
    *,
    recreate: bool = False,
    test: bool = False,
    installer: str = "pip",
    python: Path | None = None,
) -> list[BuildStep]:
    """The steps that build ``<root>/.venv``, in order; runs nothing."""
    root = Path(root)
    vdir, vpy = venv_dir(root), venv_python(root)
    steps: list[BuildStep] = []
    exists = vdir.exists() or vdir.is_symlink()
    incomplete = exists and not stamp.is_complete(vdir)
    fresh = recreate or not exists or incomplete
    if exists and fresh:
        note = "--recreate" if recreate else "incomplete: its last build did not finish (no stamp), so it is made again"
        steps.append(BuildStep("remove", None, ("rm", "-rf", str(vdir)), note=note))
    if fresh:
        steps.append(BuildStep("create", None, create_argv(installer, python or base_python(), vdir), cwd=root))
    steps.append(BuildStep(
        "check", None, (str(vpy), "-c", PREFIX_CODE), throwaway=True, env=tuple(SAFE_ENV.items()),
        timeout=CHECK_TIMEOUT, expect=str(vdir), note="the venv's python runs",
    ))
    if fresh and installer == "uv":
        names = ", ".join(f"bin/{n}" for n in PIP_LAUNCHERS)
        steps.append(BuildStep("launchers", None, (), note=f"write {vdir}/{{{names}}}: the base's pip, run by the venv's python"))
    if fresh and installer == "pip":
        steps.append(BuildStep(
            "trim", None, (str(vpy), "-m", "pip", "uninstall", "-y", "-q", "setuptools"), cwd=root,
            note="Python < 3.12's ensurepip adds setuptools; builds use the base's",
        ))
    steps += install_steps(root, manifest, installer, vpy)
    installed = [r for r in manifest.repos if r.install != "none"]
    for repo in installed:
        for module in repo.smoke_import:
            steps.append(BuildStep(
                "smoke", repo.name, (str(vpy), "-c", IMPORT_CODE, module), throwaway=True,
                env=tuple(SAFE_ENV.items()), timeout=CHECK_TIMEOUT, note=f"import {module}",
            ))
    if test:
        env = (("PATH", f"{vdir / 'bin'}{os.pathsep}$PATH"), ("VIRTUAL_ENV", str(vdir)))
        for repo in installed:
            if repo.test:
                steps.append(BuildStep(
                    "test", repo.name, tuple(shlex.split(repo.test)), throwaway=True,
                    env=tuple(SAFE_ENV.items()) + env, timeout=TEST_TIMEOUT,
                ))
    return steps


def install_steps(root: Path, manifest: Manifest, installer: str, vpy: Path) -> list[BuildStep]:
    """Each repo's install (or "skip"), in manifest order; with uv also the "bytecode" step and the
    "deps" steps: one before each repo that builds against the venv (``editable-no-build-isolation``)
    when a repo was installed since the last, so its build finds what the earlier repos need
    (pipmake's ``editables`` for ksgpu), and one at the end."""
    steps: list[BuildStep] = []
    pending = False  # a repo installed with --no-deps since the last "deps" step
    for repo in manifest.repos:
        if repo.install == "none":
            checks = " (and its smoke_import and test)" if repo.smoke_import or repo.test else ""
            steps.append(BuildStep("skip", repo.name, (),
                                   note=f'skip {repo.name}{checks}: install = "none" in {MANIFEST_NAME}'))
            continue
        if installer == "uv" and pending and repo.install == "editable-no-build-isolation":
            steps.append(deps_step(vpy, f"before {repo.name}, which builds against the venv"))
            pending = False
        trust, why = installer_trust_env(installer)
        env = trust + compcache.compiler_env(root)   # ccache in front of nvcc/gcc (compcache.py)
        steps.append(BuildStep("install", repo.name, install_argv(installer, vpy, repo, root / repo.name), cwd=root,
                               unset=CACHED_BYTECODE_ENV if installer == "uv" else (), env=env, note=why))
        pending = True
    isolated = tuple(root / r.name for r in manifest.repos if r.install == "editable")
    if installer == "uv" and isolated:
        steps.append(BuildStep(
            # -S: no site, so no .pth of the venv (the repos' editable finders) runs for this
            "bytecode", None, (str(vpy), "-S", "-m", "compileall", "-q", "-j0"), throwaway=True,
            env=tuple(SAFE_ENV.items()), timeout=CHECK_TIMEOUT, paths=isolated, unset=CACHED_BYTECODE_ENV,
            note="once per wheel: uv's cached build requirements get bytecode, which later isolated builds link",
        ))
    if installer == "uv" and pending:
        steps.append(deps_step(vpy, "not run when no installed repo declares one"))
    return steps


def deps_step(vpy: Path, when: str) -> BuildStep:
    """uv only: install, with pip, the requirements of the repos installed so far that neither the
    base nor the venv meets."""
    return BuildStep(
        "deps", None, (str(vpy), UNMET_SCRIPT), throwaway=True, env=tuple(SAFE_ENV.items()),
        timeout=CHECK_TIMEOUT, then=(str(vpy), "-m", "pip", "install"),
        note=f"requirements neither the base nor the venv meets ({when})",
    )


def format_plan(steps: list[BuildStep]) -> str:
    return "\n".join(step.describe() for step in steps)


def _tail(result: runner.Result, lines: int = TAIL_LINES) -> str:
    text = (result.stdout + "\n" + result.stderr).splitlines()
    kept = [ln for ln in text if ln.strip() and not any(b in ln for b in _BOILERPLATE)]
    return "\n".join("  " + ln for ln in kept[-lines:])


def _runtime_env(step: BuildStep) -> dict[str, str | None]:
    """The step's env for the runner: a symbolic ``$PATH`` in PATH expanded, ``unset`` as None."""
    env: dict[str, str | None] = dict(step.env)
    if "PATH" in env:
        env["PATH"] = env["PATH"].replace("$PATH", os.environ.get("PATH", ""))
    env.update(dict.fromkeys(step.unset))
    return env


def _failure(step: BuildStep, root: Path, result: runner.Result | None, cwd, test: bool, argv=None,
             log: BuildLog | None = None) -> CommandFailed:
    where = f"repo {step.repo!r}" if step.repo else f"venv {venv_dir(root)}"
    what = {
        "remove": "removing the old venv failed",
        "create": "creating the venv failed",
        "trim": "removing the venv's own setuptools failed",
        "deps": "installing the repos' unmet requirements failed",
        "check": "the venv's python does not run (or is not the venv's)",
        "install": "install failed",
        "smoke": f"smoke import {step.argv[-1]!r} failed (run from a throwaway dir with PYTHONSAFEPATH=1)",
        "test": "test command failed",
    }[step.kind]
    code = f" (exit {result.returncode})" if result is not None else ""
    lines = [f"venv build, {where}: {what}{code}", "  " + runner.format_command(argv or step.argv, cwd)]
    cause = first_error_line(result.stdout + "\n" + result.stderr) if result is not None else None
    if cause:
        lines.append(f"  cause: {cause}")
    if result is not None and (result.stdout or result.stderr):
        lines.append(_tail(result))
    elif step.kind == "test":
        lines.append("  (its output is above)")
    hint = retry_hint(root, test=test or step.kind == "test")
    if step.kind == "check" and (venv_dir(root)).exists():
        hint += " --recreate   # deletes " + str(venv_dir(root))
    if log is not None:
        lines.append(f"  its whole output: {log.path}")
    lines.append(f"Fix the cause, then retry the venv alone: {hint}")
    return CommandFailed("\n".join(lines))


def run_build_steps(steps: list[BuildStep], root: Path, *, test: bool = False, installer: str = "?",
                    log: BuildLog | None = None) -> BuildReport:
    """Run the steps in order; raise CommandFailed naming the first that fails.

    Consecutive smoke imports run at the same time (each in its own python,
    from the throwaway dir): nothing they do depends on another.
    """
    report = BuildReport(venv_dir(root), installer, log=log.path if log else None)
    with tempfile.TemporaryDirectory(prefix="chtop-venv-") as scratch:
        Path(UNMET_SCRIPT.replace(THROWAWAY, scratch)).write_text(UNMET_CODE)
        for batch in _batches(steps):
            fan_out(lambda step: _run_step(step, root, Path(scratch), test, report, log), batch)
            for step in batch:
                _record(step, report)
    return report


def _batches(steps: list[BuildStep]) -> list[list[BuildStep]]:
    """The steps in order, each alone except runs of consecutive "smoke" steps."""
    batches: list[list[BuildStep]] = []
    for step in steps:
        if step.kind == "smoke" and batches and batches[-1][-1].kind == "smoke":
            batches[-1].append(step)
        else:
            batches.append([step])
    return batches


def _run_step(step: BuildStep, root: Path, scratch: Path, test: bool, report: BuildReport,
              log: BuildLog | None = None) -> None:
    """Run one step; raise CommandFailed when it fails."""
    if step.kind == "skip":
        print(step.note, flush=True)
        return
    if step.kind == "launchers":
        write_pip_launchers(venv_dir(root))
        return
    if step.kind == "bytecode":
        compile_build_requirements(step, scratch)
        return
    if step.kind == "deps" and not declares_requirements(venv_dir(root)):
        print("# no installed repo declares a requirement: nothing for pip to add", file=sys.stderr, flush=True)
        return
    cwd = scratch if step.throwaway else step.cwd
    stream = step.kind == "test"  # a test suite's progress is worth seeing live
    argv = [a.replace(THROWAWAY, str(scratch)) for a in step.argv]
    try:
        result = runner.run(argv, cwd, check=False, capture=not stream, env=_runtime_env(step), timeout=step.timeout)
    except CommandFailed as exc:  # not found, or timed out
        _log_step(log, argv, cwd, None, str(exc))
        raise _failure(step, root, None, cwd, test, log=log) from exc
    _log_step(log, argv, cwd, result, "" if not stream else "(its output went to the terminal)")
    if not result.ok or (step.expect is not None and not _same_path(result.stdout.strip(), step.expect)):
        raise _failure(step, root, result, cwd, test, log=log)
    unmet = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()] if step.then else []
    if unmet:
        argv = step.then + tuple(unmet)
        result = runner.run(argv, root, check=False, timeout=INSTALL_TIMEOUT)
        _log_step(log, argv, root, result)
        if not result.ok:
            raise _failure(step, root, result, root, test, argv=argv, log=log)
        report.deps.extend(unmet)


def _log_step(log: BuildLog | None, argv, cwd, result: runner.Result | None, note: str = "") -> None:
    if log is None:
        return
    out, err = (result.stdout or "", result.stderr or "") if result is not None else ("", "")
    log.record(runner.format_command(argv, cwd), result.returncode if result is not None else None,
               out, err + (("\n" if err else "") + note if note else ""))


def _record(step: BuildStep, report: BuildReport) -> None:
    """Note a finished step in the report."""
    if step.kind == "skip":
        report.skipped.append(step.repo)
    elif step.kind == "install":
        report.installed.append(step.repo)
    elif step.kind == "smoke":
        report.smoked.append(f"{step.repo}:{step.argv[-1]}")
    elif step.kind == "test":
        report.tested.append(step.repo)


def compile_build_requirements(step: BuildStep, scratch: Path) -> None:
    """The "bytecode" step: compile what it finds uncompiled; a failure only warns (it is a speed-up)."""
    cache_dir = uv_cache_dir()
    if cache_dir is None:
        return
    wheels = uvcache.wheels_to_compile(cache_dir, list(step.paths))
    if not wheels:
        return
    result = runner.run([*step.argv, *map(str, wheels)], scratch, check=False, env=_runtime_env(step),
                        timeout=step.timeout)
    if not result.ok:
        print(f"# byte-compiling uv's cached build requirements failed (exit {result.returncode}); "
              "later isolated builds compile them themselves, as before", file=sys.stderr, flush=True)


def uv_cache_dir(env=None) -> Path | None:
    """uv's cache: ``$UV_CACHE_DIR`` when it names an absolute path (uv takes it over every other
    setting but ``--cache-dir``, which the plan never passes; a sandboxed build always sets it), else
    what ``uv cache dir`` says; None when uv cannot say."""
    env = os.environ if env is None else env
    named = env.get("UV_CACHE_DIR", "")
    if named and os.path.isabs(named):
        return Path(named)
    found = runner.run([uv_command(), "cache", "dir"], check=False, timeout=CHECK_TIMEOUT)
    return Path(found.stdout.strip()) if found.ok and found.stdout.strip() else None


def declares_requirements(vdir: Path) -> bool:
    """Whether any distribution installed in the venv itself declares a requirement (``Requires-Dist``).

    When none does there is nothing the "deps" step could find, and its
    python start is saved.  A METADATA file that cannot be read counts as
    declaring one, so the step runs.
    """
    for metadata in vdir.glob("lib/python*/site-packages/*.dist-info/METADATA"):
        try:
            with metadata.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Requires-Dist:"):
                        return True
                    if not line.strip():  # the headers end at the first blank line
                        break
        except OSError:
            return True
    return False


def _same_path(a: str, b: str) -> bool:
    try:
        return bool(a) and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def build_venv(
    root: Path,
    manifest: Manifest,
    *,
    recreate: bool = False,
    test: bool = False,
    installer: str | None = None,
    dry_run: bool = False,
    log_dir: Path | None = None,
) -> None:
    """Build (or refresh) ``<root>/.venv`` with every manifest repo installed; every step's
    output goes to a new log in ``log_dir`` (default: the group's ``.chtop/logs``).

    Raises ChtopError subclasses: Refused when a repo is not cloned or the base interpreter lacks
    what the repos need (``toolchain``: checked before anything is built),
    UsageError for a bad installer, CommandFailed when a step fails (naming
    the repo, the tail of its output and the command to retry).
    """
    root = Path(root).resolve()
    chosen = choose_installer(installer)
    check_repos(root, manifest)
    base, why = base_python_choice()
    steps = plan_build(root, manifest, recreate=recreate, test=test, installer=chosen, python=base)
    if dry_run:
        print(f"# base interpreter: {base} ({why})\n{toolchain.describe_needs(root, manifest)}\n"
              f"{format_plan(steps)}", flush=True)
        return
    toolchain.check_toolchain(root, manifest, base, why, retry_hint(root, test=test))
    log = BuildLog.create(log_dir or venv_log_dir(root), root.name)
    compcache.prepare(root)   # the compiler cache the install steps' env names
    stamp.clear_stamp(venv_dir(root))
    report = run_build_steps(steps, root, test=test, installer=chosen, log=log)
    stamp.write_stamp(venv_dir(root))   # last: only a build that got here is complete
    say(report.summary())         # names requirements from the repos' metadata, which the agent writes


# --- nox ----------------------------------------------------------------------
