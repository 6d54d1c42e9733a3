"""A feature worktree's venv built inside its sandbox is the venv the host build makes:
the same packages at the same versions, editable installs pointing at the worktree's own repos, the
same ``.pth`` finders and the same bytecode compiled; for the sample repos and for the real CHORD
manifest (pipmake -> ksgpu with nvcc), on the uv and the pip path.

Each test builds the worktree's venv the way a user does (``inv venv.build --workdir ../dev``:
inside the sandbox), reads what it made as data, then builds it again on the host (``build_venv``,
what every build was before) and compares.  The host build here runs code the test wrote, no
agent's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_tool
from real_repos import mark_pypi_private_where_it_resolves_so
from test_venv import wheelhouse  # noqa: F401  (a fixture)
from test_venv_sandboxed import local_index
from venv_samples import PYPROJECT

from chtop_tasks.venv.build import build_venv
from chtop_tasks.workspace.manifest import parse_manifest

pytestmark = [pytest.mark.podman, pytest.mark.slow]


def site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    assert len(found) == 1, f"{venv}: expected one site-packages, found {found}"
    return found[0]


def dist_name(info: Path) -> str:
    meta = (info / "METADATA").read_text(errors="replace")
    return re.search(r"^Name: *(.+)$", meta, re.M).group(1).strip().lower().replace("_", "-")


def dist_version(info: Path) -> str:
    meta = (info / "METADATA").read_text(errors="replace")
    return re.search(r"^Version: *(.+)$", meta, re.M).group(1).strip()


def dist_source(info: Path) -> tuple[str, bool] | None:
    """(where it was installed from, editable) from its direct_url.json, or None (from an index)."""
    direct = info / "direct_url.json"
    if not direct.is_file():
        return None
    data = json.loads(direct.read_text())
    return data["url"], bool(data.get("dir_info", {}).get("editable", False))


def uncompiled(site: Path) -> list[str]:
    """The .py files under site-packages with no bytecode beside them."""
    return sorted(str(py.relative_to(site)) for py in site.rglob("*.py")
                  if not any((py.parent / "__pycache__").glob(f"{py.stem}.*.pyc")))


def venv_result(venv: Path) -> dict:
    """What a build made, as data: every distribution (version, source), the .pth files, the
    modules left without bytecode."""
    site = site_packages(venv)
    infos = sorted(site.glob("*.dist-info"))
    return {
        "dists": {dist_name(i): (dist_version(i), dist_source(i)) for i in infos},
        "pth": sorted(p.name for p in site.glob("*.pth")),
        "uncompiled": uncompiled(site),
    }


def build_inside_then_on_the_host(g, dev: Path, installer: str, env: dict, monkeypatch, timeout=600):
    """(the sandboxed build's result, the host build's result) of ``dev``'s venv, each made from scratch."""
    built = g.inv(g.toplevel, "venv.build", "--workdir", str(dev), "--installer", installer, "--recreate", env=env,
                  check=False, timeout=timeout)
    assert built.returncode == 0, built.stdout + built.stderr[-6000:]
    assert f"installer {installer}" in built.stdout and "smoke imports ok" in built.stdout, built.stdout
    inside = venv_result(dev / ".venv")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # as on a user's machine (this build machine sets it; the sandbox's env allowlist drops it): else
    # the host's smoke imports leave the editable finders without the bytecode the build inside wrote
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    manifest = dev / "git_repositories.toml"
    build_venv(dev, parse_manifest(manifest, manifest.read_text()), installer=installer, recreate=True)
    return inside, venv_result(dev / ".venv")


def assert_same_venv(inside: dict, host: dict, dev: Path, repos: dict[str, str]) -> None:
    """The two results are equal, and each repo in ``repos`` (dist name -> repo dir) is installed
    editable from the worktree's own checkout."""
    for key in ("dists", "pth", "uncompiled"):
        assert inside[key] == host[key], f"{key}: inside the sandbox\n{inside[key]}\non the host\n{host[key]}"
    for dist, repo in repos.items():
        version, source = inside["dists"][dist]
        assert source == ((dev / repo).as_uri(), True), (dist, source)
    assert inside["pth"], "no .pth finder: the editable installs are missing"


# --- the sample repos: alpha isolated (setuptools from the index), beta built against the venv ------

def _sample_repos(dev: Path) -> None:
    alpha, beta = dev / "alpha", dev / "beta"
    (alpha / "alpha").mkdir()
    (alpha / "pyproject.toml").write_text(PYPROJECT.format(name="alpha", package="alpha"))
    (alpha / "alpha" / "__init__.py").write_text("X = 1\n")
    (beta / "beta").mkdir()
    (beta / "pyproject.toml").write_text(PYPROJECT.format(name="beta", package="beta"))
    (beta / "beta" / "__init__.py").write_text("from alpha import X\n\nY = X + 1\n")
    manifest = dev / "git_repositories.toml"
    text = manifest.read_text().replace('install = "none"', 'install = "editable"\nsmoke_import = "alpha"', 1)
    manifest.write_text(text.replace('install = "none"', 'install = "editable-no-build-isolation"\n'
                                                         'smoke_import = "beta"', 1))


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_the_sandboxed_build_makes_the_venv_the_host_build_makes(installer, with_dev, wheelhouse, tmp_path,  # noqa: F811
                                                                  monkeypatch):
    if installer == "uv":
        require_tool("uv")
    dev = with_dev.path("dev")
    _sample_repos(dev)
    with local_index(wheelhouse, tmp_path) as (url, asked):
        env = {"PIP_INDEX_URL": url, "UV_DEFAULT_INDEX": url}
        inside, host = build_inside_then_on_the_host(with_dev, dev, installer, env, monkeypatch)
    assert any(p.endswith(".whl") and "setuptools" in p for p in asked), asked   # alpha's isolated build
    assert_same_venv(inside, host, dev, {"alpha": "alpha", "beta": "beta"})


# --- the real CHORD manifest: pipmake (isolated) then ksgpu with nvcc against the venv ---------------

def test_the_chord_venv_built_inside_is_the_host_builds_on_the_uv_and_pip_paths(tmp_path, monkeypatch):
    """The toplevel builds on the host (filling the compiler cache), then dev's venv is built inside
    its sandbox and on the host, with uv and then with pip; one GPU architecture (NVCC_ARCH, let
    into the build by the group's env-allow.txt, as a user would)."""
    from test_real_workspace import BASE_HAS, chord_group

    from chtop_tasks.venv.build import base_python

    require_tool("nvcc")
    require_tool("uv")
    present = subprocess.run([str(base_python()), "-c", BASE_HAS, "pybind11", "numpy"], capture_output=True,
                             text=True, check=True).stdout.split()
    if not {"pybind11", "numpy"} <= set(present):
        pytest.skip(f"{base_python()} lacks pybind11 or numpy, which ksgpu builds against (./bootstrap installs them)")
    grouping, top = chord_group(tmp_path, pirate_install="none", ksgpu_smoke=False)
    env = {"NVCC_ARCH": "-gencode arch=compute_80,code=sm_80", "CHTOP_INSTALLER": "uv"}
    for args in (("toplevel.init",), ("worktree.create", "--name", "dev", "--no-venv")):
        proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=top, capture_output=True, text=True,
                              env={**os.environ, **env}, stdin=subprocess.DEVNULL, timeout=3000)
        assert proc.returncode == 0, f"inv {' '.join(args)}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    with open(top / "sandbox" / "env-allow.txt", "a") as fh:
        fh.write("NVCC_ARCH\n")
    mark_pypi_private_where_it_resolves_so(top)
    dev = grouping / "dev"

    class Runner:     # the conftest Group's inv, for this group
        toplevel = top

        @staticmethod
        def inv(cwd, *args, env=None, check=True, timeout=600):
            return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True,
                                  env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                  timeout=timeout)

    for installer in ("uv", "pip"):
        inside, host = build_inside_then_on_the_host(Runner, dev, installer, {"NVCC_ARCH": env["NVCC_ARCH"]},
                                                     monkeypatch, timeout=1800)
        assert_same_venv(inside, host, dev, {"pipmake": "pipmake", "ksgpu": "ksgpu"})
        assert any((dev / "ksgpu" / "ksgpu").glob("ksgpu_pybind11*.so")), "nvcc's module is missing"
