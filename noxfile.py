"""nox sessions: tests and lint by default; per-worktree venvs and the GPU check on demand."""

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "uv|virtualenv"


@nox.session
def tests(session):
    """The whole test suite (pytest -n auto); extra args pass to pytest."""
    # pip and setuptools: tests drive pip as a real client and build sample
    # packages without isolation; venvs made by uv have neither.
    session.install("-e", ".[test]", "pip", "setuptools>=70.1", "wheel")
    args = session.posargs or ["-n", "auto"]
    session.run("pytest", *args)


@nox.session
def lint(session):
    """ruff over the code."""
    session.install("ruff")
    session.run("ruff", "check", "chtop_tasks", "tests", "bench", "tasks.py", "noxfile.py")


@nox.session(python=False, default=False)
def venv(session):
    """Build a worktree's .venv: nox -s venv -- --name dev [--recreate] [--test]."""
    from chtop_tasks.cli.nox_sessions import venv_body

    venv_body(session)


@nox.session(python=False, default=False)
def gpu_smoke(session):
    """GPU compute check in a worktree's sandbox: nox -s gpu_smoke [-- --name NAME]."""
    from chtop_tasks.cli.nox_sessions import gpu_smoke_body

    gpu_smoke_body(session)
