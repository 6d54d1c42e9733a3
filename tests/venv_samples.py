"""The two tiny packages the venv tests and bench/bench_venv.py build.

``a`` maps its package from ``a/lib`` (so the checkout dir ``a/`` at the
root would shadow it: the cwd-shadowing trap); ``b`` (package ``b_frb``)
imports ``a``.  Standard library only, so the benchmark can use it too.
"""

from __future__ import annotations

from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1"

[tool.setuptools]
packages = ["{package}"]
"""


def write_sample_packages(root: Path) -> None:
    """Repo dirs ``a`` and ``b`` under ``root``."""
    a, b = root / "a", root / "b"
    (a / "lib").mkdir(parents=True)
    (a / "pyproject.toml").write_text(PYPROJECT.format(name="a", package="a") + 'package-dir = {"a" = "lib"}\n')
    (a / "lib" / "__init__.py").write_text("X = 1\n")
    (b / "b_frb").mkdir(parents=True)
    (b / "pyproject.toml").write_text(PYPROJECT.format(name="b-frb", package="b_frb"))
    (b / "b_frb" / "__init__.py").write_text("from a import X as _X\n\nX = _X + 1\n")
