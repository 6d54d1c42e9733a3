"""The two tiny packages the venv tests and bench/bench_venv.py build.

``a`` maps its package from ``a/lib`` (so the checkout dir ``a/`` at the
root would shadow it: the cwd-shadowing trap); ``b`` (package ``b_frb``)
imports ``a``.  Standard library only, so the benchmark can use it too.
"""

from __future__ import annotations

import json
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


def offline_env(wheelhouse: Path, scratch: Path) -> dict[str, str]:
    """Env vars under which pip and uv see only ``wheelhouse``: no index, no user config.

    uv gets the same as a config file too: uv 0.13 still asks the index for
    an isolated build's ``build-system.requires`` under ``UV_NO_INDEX`` alone,
    but not with ``no-index`` in its config.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    config = scratch / "uv.toml"
    config.write_text(f"[pip]\nno-index = true\nfind-links = [{json.dumps(str(wheelhouse))}]\n")
    return {
        "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse),
        "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheelhouse), "UV_CONFIG_FILE": str(config),
    }
