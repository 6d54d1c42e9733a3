"""venv.build: real venvs, real pip and uv, two tiny local packages.

``a`` is the ksgpu stand-in: repo dir ``a/``, package ``a`` mapped from
``a/lib`` (so setuptools' editable install uses an import hook, which a
``<root>/a/`` dir on sys.path shadows the installed package ``a``).
``b`` is the pirate stand-in: repo dir ``b/``, package ``b_frb``, which needs
``a`` by import only (no install_requires, so no index lookup).

Nothing here reaches a package index during a build: a session fixture
downloads a setuptools wheel once (for ``a``'s isolated build) and every
build runs with pip and uv pointed at it alone (``venv_samples.offline_env``);
``b`` builds with --no-build-isolation against the base interpreter's
setuptools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import IN_CI, git, hermetic_env, require_tool
from venv_samples import PYPROJECT, offline_env, write_sample_packages

from chtop_tasks.core.errors import CommandFailed, Refused, UsageError
from chtop_tasks.venv import build as V
from chtop_tasks.workspace.manifest import parse_manifest

HAVE_UV = shutil.which("uv") is not None
INSTALLERS = ["pip", pytest.param("uv", marks=pytest.mark.skipif(not HAVE_UV and not IN_CI, reason="uv not on PATH"))]

# Setuptools' editable builds need bdist_wheel: built in from 70.1, from the
# `wheel` package (< 0.46) before that.  --no-build-isolation uses the base's.
BASE_CAN_BUILD = """
import setuptools, sys
major = int(setuptools.__version__.split(".")[0])
try:
    import setuptools.command.bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel
sys.exit(0 if major >= 64 else 1)
"""


def _need(ok: bool, why: str) -> None:
    if not ok:
        if IN_CI:
            pytest.fail(why + " (CI must provide it: see .ci/run)")
        pytest.skip(why)


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    """A dir holding a setuptools wheel, downloaded once per worker."""
    base = tmp_path_factory.mktemp("wheelhouse")
    home = base / "home"
    home.mkdir()
    house = base / "wheels"
    env = dict(os.environ, **hermetic_env(home))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(house), "setuptools>=64"],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )
    _need(proc.returncode == 0 and any(house.glob("setuptools-*.whl")),
          f"cannot download a setuptools wheel for isolated builds:\n{proc.stderr[-800:]}")
    return house


@pytest.fixture(scope="session")
def base_can_build() -> None:
    proc = subprocess.run([str(V.base_python()), "-c", BASE_CAN_BUILD], capture_output=True, text=True)
    _need(proc.returncode == 0,
          f"{V.base_python()} cannot build editables without isolation "
          "(needs setuptools>=70.1, or setuptools>=64 plus wheel<0.46)")


@pytest.fixture
def offline(wheelhouse, base_can_build, monkeypatch, tmp_path):
    """pip and uv see only the wheelhouse: no index, no user config."""
    for key, value in offline_env(wheelhouse, tmp_path / "offline").items():
        monkeypatch.setenv(key, value)
    for key in (V.INSTALLER_ENV, "UV_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)


def make_root(root: Path, repos: list[dict]) -> tuple[Path, object]:
    """A workspace root holding repo dirs ``a`` and ``b``, and its manifest."""
    root.mkdir(parents=True, exist_ok=True)
    write_sample_packages(root)
    lines = []
    for spec in repos:
        lines.append("[[repo]]")
        spec = {"url": f"file:///nowhere/{spec['name']}.git", "branch": "main", **spec}
        for key, value in spec.items():
            lines.append(f"{key} = {_toml(value)}")
    text = "\n".join(lines) + "\n"
    (root / "git_repositories.toml").write_text(text)
    return root, parse_manifest(root / "git_repositories.toml", text)


def _toml(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


A = {"name": "a", "install": "editable", "smoke_import": "a"}
B = {"name": "b", "install": "editable-no-build-isolation", "smoke_import": ["b_frb"]}


def venv_py(root: Path) -> str:
    return str(root / ".venv" / "bin" / "python")


def run_py(root: Path, code: str, cwd: Path, safe: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONSAFEPATH", None)
    if safe:
        env["PYTHONSAFEPATH"] = "1"
    return subprocess.run([venv_py(root), "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


# -- the plan (no processes) -----------------------------------------------------------


def test_plan_is_data_in_manifest_order(tmp_path):
    root, manifest = make_root(tmp_path / "ws", [A, B, {"name": "papers", "install": "none", "test": "true"}])
    steps = V.plan_build(root, manifest, installer="pip", python=Path("/base/python3"))
    assert [(s.kind, s.repo) for s in steps] == [
        ("create", None), ("check", None), ("trim", None), ("install", "a"), ("install", "b"), ("skip", "papers"),
        ("smoke", "a"), ("smoke", "b"),
    ]
    create, _, trim, inst_a, inst_b, skip = steps[:6]
    assert create.argv == ("/base/python3", "-m", "venv", "--system-site-packages", str(root / ".venv"))
    assert trim.argv == (venv_py(root), "-m", "pip", "uninstall", "-y", "-q", "setuptools")
    assert inst_a.argv == (venv_py(root), "-m", "pip", "install", "-e", str(root / "a"))
    assert not inst_a.unset            # pip's isolated builds get a fresh setuptools each time anyway
    assert inst_b.argv == (venv_py(root), "-m", "pip", "install", "--no-build-isolation", "-e", str(root / "b"))
    assert 'install = "none"' in skip.note and skip.argv == ()
    for smoke in steps[6:]:
        assert smoke.throwaway and dict(smoke.env) == {"PYTHONSAFEPATH": "1"}
    assert "PYTHONSAFEPATH=1" in V.format_plan(steps) and V.THROWAWAY in V.format_plan(steps)


def test_plan_uv_recreate_and_test(tmp_path):
    root, manifest = make_root(tmp_path / "ws", [A, {**B, "test": "python -m b_frb.selftest --fast"}])
    (root / ".venv").mkdir()
    V.stamp.write_stamp(root / ".venv")   # a finished build's
    reuse = V.plan_build(root, manifest, installer="uv", python=Path("/base/python3"))
    # An existing venv is reused, not recreated; uv installs without deps,
    # then a "deps" step installs (with pip) only what the base lacks: before b, which builds
    # against the venv (so a's requirements are there for b's build), and at the end.
    # "bytecode" compiles, in uv's cache, what the isolated build of a installs.
    assert [s.kind for s in reuse] == ["check", "install", "deps", "install", "bytecode", "deps", "smoke", "smoke"]
    assert reuse[1].argv[1:6] == ("pip", "install", "--python", venv_py(root), "--no-deps")
    assert "before b" in reuse[2].note
    assert reuse[4].paths == (root / "a",) and reuse[4].argv[1:] == ("-S", "-m", "compileall", "-q", "-j0")
    assert "the builds of a need" in reuse[4].describe()
    # uv links its cache's bytecode into each isolated build: those steps run without a pycache prefix
    assert reuse[1].unset == reuse[4].unset == ("PYTHONPYCACHEPREFIX",) and not reuse[6].unset
    assert reuse[1].describe().startswith("$ env -u PYTHONPYCACHEPREFIX ")
    assert V._runtime_env(reuse[4])["PYTHONPYCACHEPREFIX"] is None
    assert reuse[2].then == reuse[5].then == (venv_py(root), "-m", "pip", "install")
    # A fresh one is made by uv too; nothing to trim, pip launchers written.
    steps = V.plan_build(root, manifest, recreate=True, test=True, installer="uv", python=Path("/base/python3"))
    assert [s.kind for s in steps][:5] == ["remove", "create", "check", "launchers", "install"]
    assert steps[0].argv == ("rm", "-rf", str(root / ".venv"))
    assert steps[1].argv[1:] == ("venv", "--no-project", "--python", "/base/python3", "--system-site-packages",
                                 str(root / ".venv"))
    assert steps[3].argv == () and "bin/pip" in steps[3].describe()
    test = steps[-1]
    assert (test.kind, test.repo, test.argv) == ("test", "b", ("python", "-m", "b_frb.selftest", "--fast"))
    env = V._runtime_env(test)
    assert env["PATH"] == str(root / ".venv" / "bin") + os.pathsep + os.environ["PATH"]
    assert env["PYTHONSAFEPATH"] == "1" and env["VIRTUAL_ENV"] == str(root / ".venv")


def test_uv_plan_meets_each_repos_requirements_before_the_next_no_isolation_build(tmp_path):
    """The CHORD chain: pipmake (isolated) needs editables, ksgpu builds with pipmake against the
    venv, so pipmake's requirements are installed between the two; an isolated repo after an
    isolated one needs no step between (its build brings its own)."""
    repos = [{"name": "pipmake"}, {"name": "ksgpu", "install": "editable-no-build-isolation"},
             {"name": "iso"}, {"name": "pirate", "install": "editable-no-build-isolation"}]
    root, manifest = make_root(tmp_path / "ws", repos)
    steps = V.plan_build(root, manifest, installer="uv", python=Path("/base/python3"))
    assert [(s.kind, s.repo) for s in steps if s.kind in ("install", "deps")] == [
        ("install", "pipmake"), ("deps", None), ("install", "ksgpu"), ("install", "iso"), ("deps", None),
        ("install", "pirate"), ("deps", None)]
    # pip resolves each repo's requirements itself: no step of its own
    assert "deps" not in [s.kind for s in V.plan_build(root, manifest, installer="pip", python=Path("/b/p"))]


def test_install_none_skips_the_repos_smoke_import_and_test(tmp_path):
    """"Not installed, on purpose": nothing would be there to import or test."""
    root, manifest = make_root(tmp_path / "ws", [A, {"name": "papers", "install": "none", "smoke_import": "papers",
                                                     "test": "python -m papers.check"}])
    for installer in ("pip", "uv"):
        steps = V.plan_build(root, manifest, installer=installer, test=True, python=Path("/base/python3"))
        assert [s.repo for s in steps if s.kind in ("smoke", "test")] == ["a"]
        skip = next(s for s in steps if s.kind == "skip")
        assert skip.note == 'skip papers (and its smoke_import and test): install = "none" in git_repositories.toml'


def test_stamp_is_read_without_following_links_or_blocking(tmp_path):
    from chtop_tasks.workspace import venvstamp as stamp

    vdir = tmp_path / ".venv"
    assert stamp.venv_state(vdir) == "missing"
    vdir.mkdir()
    assert stamp.venv_state(vdir) == "incomplete"
    elsewhere = tmp_path / "finished"
    elsewhere.write_text(stamp.STAMP_TEXT)
    stamp.stamp_path(vdir).symlink_to(elsewhere)     # planted: a link to a real stamp
    assert not stamp.is_complete(vdir)
    stamp.stamp_path(vdir).unlink()
    os.mkfifo(stamp.stamp_path(vdir))               # a reader that blocked would hang here
    assert not stamp.is_complete(vdir)
    stamp.clear_stamp(vdir)
    stamp.stamp_path(vdir).write_text("something else\n")
    assert not stamp.is_complete(vdir)
    stamp.write_stamp(vdir)
    assert stamp.venv_state(vdir) == "complete"
    stamp.clear_stamp(vdir)
    assert stamp.venv_state(vdir) == "incomplete"


def test_a_venv_without_the_stamp_is_made_again(tmp_path):
    """A build that failed or was interrupted left a venv that only looks built."""
    root, manifest = make_root(tmp_path / "ws", [A])
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").write_text("")
    steps = V.plan_build(root, manifest, installer="pip", python=Path("/base/python3"))
    assert [s.kind for s in steps[:2]] == ["remove", "create"] and "did not finish" in steps[0].note


def test_choose_installer(monkeypatch, tmp_path):
    monkeypatch.setenv(V.INSTALLER_ENV, "pip")
    assert V.choose_installer() == "pip"
    assert V.choose_installer("pip") == "pip"
    monkeypatch.setenv(V.INSTALLER_ENV, "conda")
    with pytest.raises(UsageError, match=r"\$CHTOP_INSTALLER.*'conda'"):
        V.choose_installer()
    monkeypatch.delenv(V.INSTALLER_ENV)
    monkeypatch.setenv("PATH", str(tmp_path))  # no uv here
    assert V.choose_installer() == "pip"
    with pytest.raises(UsageError, match="uv is not on PATH"):
        V.choose_installer("uv")


def test_missing_repo_is_refused_before_anything_runs(tmp_path, capsys):
    root, manifest = make_root(tmp_path / "ws", [A, B, {"name": "c", "install": "editable"}])
    shutil.rmtree(root / "b")
    with pytest.raises(Refused) as info:
        V.build_venv(root, manifest, installer="pip")
    message = str(info.value)
    assert "b:" in message and "c:" in message and "a:" not in message
    assert "inv toplevel.init" in message
    assert not (root / ".venv").exists()


def test_dry_run_prints_plan_and_touches_nothing(tmp_path, capsys):
    root, manifest = make_root(tmp_path / "ws", [A, B])
    V.build_venv(root, manifest, installer="pip", dry_run=True)
    out = capsys.readouterr().out
    assert "-m venv --system-site-packages" in out and "--no-build-isolation -e " + str(root / "b") in out
    assert not (root / ".venv").exists()


def test_deps_step_runs_only_when_an_installed_repo_declares_a_requirement(tmp_path):
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    assert not V.declares_requirements(tmp_path)  # nothing installed
    plain = site / "a-0.1.dist-info"
    plain.mkdir(parents=True)
    (plain / "METADATA").write_text("Metadata-Version: 2.1\nName: a\nVersion: 0.1\n\nRequires-Dist: in the body\n")
    assert not V.declares_requirements(tmp_path)  # after the blank line it is the description
    needs = site / "b-0.1.dist-info"
    needs.mkdir()
    (needs / "METADATA").write_text("Metadata-Version: 2.1\nName: b\nRequires-Dist: tinydep\n")
    assert V.declares_requirements(tmp_path)


def test_uv_cache_wheels_to_compile_are_the_isolated_builds_requirements(tmp_path):
    from chtop_tasks.venv import uvcache

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=64", "Scikit.Build-Core[pyproject]"]\n')
    assert uvcache.build_requirement_names(repo) == {"setuptools", "scikit_build_core"}
    assert uvcache.build_requirement_names(tmp_path / "none") == {"setuptools"}  # PEP 517's default
    archive = tmp_path / "cache" / uvcache.ARCHIVE_BUCKET

    def unpacked(key: str, dist: str, top: str) -> Path:
        (archive / key / f"{dist}.dist-info").mkdir(parents=True)
        (archive / key / top).mkdir()
        (archive / key / top / "__init__.py").write_text("")
        return archive / key

    tools = unpacked("k1", "setuptools-80.0", "setuptools")
    core = unpacked("k2", "scikit_build_core-0.10.0", "scikit_build_core")
    unpacked("k3", "numpy-2.0.0", "numpy")  # not a build requirement here: left alone
    done = unpacked("k4", "setuptools-70.0", "setuptools")
    (done / "setuptools" / "__pycache__").mkdir()
    assert uvcache.wheels_to_compile(tmp_path / "cache", [repo]) == [tools, core]
    if os.geteuid() != 0:                                     # root may write anything
        (core / "scikit_build_core").chmod(0o555)             # not ours to write: left alone
        assert uvcache.wheels_to_compile(tmp_path / "cache", [repo]) == [tools]
    assert uvcache.wheels_to_compile(tmp_path / "no-cache", [repo]) == []


def test_consecutive_smoke_imports_are_one_batch(tmp_path):
    root, manifest = make_root(tmp_path / "ws", [A, B])
    steps = V.plan_build(root, manifest, installer="uv", python=Path(sys.executable))
    kinds = [[step.kind for step in batch] for batch in V._batches(steps)]
    assert kinds[-1] == ["smoke", "smoke"] and all(len(batch) == 1 for batch in kinds[:-1])


def test_pip_launcher_runs_the_base_pip_in_the_venv_even_from_a_path_with_a_space(tmp_path):
    vdir = tmp_path / "with space" / ".venv"
    subprocess.run([str(V.base_python()), "-m", "venv", "--without-pip", "--system-site-packages", str(vdir)],
                   check=True, capture_output=True)
    V.write_pip_launchers(vdir)
    assert "#!/bin/sh" in (vdir / "bin" / "pip").read_text()  # a #! line cannot hold a space
    proc = subprocess.run([str(vdir / "bin" / "pip3"), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("pip "), proc.stderr
    debug = subprocess.run([str(vdir / "bin" / "pip"), "debug"], capture_output=True, text=True, cwd=tmp_path)
    assert f"sys.executable: {vdir}/bin/python" in debug.stdout, debug.stdout + debug.stderr  # the venv's pip


def test_base_python_is_not_a_venv():
    base = V.base_python()
    assert base.is_file()
    proc = subprocess.run([str(base), "-c", "import sys; print(sys.prefix == sys.base_prefix)"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "True"


# -- real builds ---------------------------------------------------------------------


# A distribution the base interpreter has, found at run time: chtop's own deps (jinja2) are in
# the base only when chtop is installed there, not when it runs from a venv on /usr/bin/python3.
BASE_DIST = """
import importlib.metadata as md
names = sorted({(d.metadata['Name'] or '').lower() for d in md.distributions()} - {'', 'pip', 'setuptools', 'wheel'})
print('jinja2' if 'jinja2' in names else (names[0] if names else ''))
"""


def base_distribution() -> str:
    """A distribution installed in the base interpreter (jinja2 when there), or skip."""
    out = subprocess.run([str(V.base_python()), "-I", "-c", BASE_DIST], capture_output=True, text=True).stdout.strip()
    _need(bool(out), f"{V.base_python()} has no distribution besides pip/setuptools/wheel to reuse")
    return out


OWN_DISTS = (
    "import sys, importlib.metadata as md; print(sorted(d.metadata['Name'].lower() for d in "
    "md.distributions(path=[p for p in sys.path if p.startswith(sys.prefix + '/') and p.endswith('site-packages')])))"
)
ENVRC_TEMPLATE = Path(__file__).resolve().parents[2] / "dotfile_templates" / ".envrc.j2"


def own_dists(root: Path) -> str:
    """The distributions in the venv's own site-packages (not the base's), as printed."""
    return subprocess.run([venv_py(root), "-c", OWN_DISTS], capture_output=True, text=True, check=True).stdout


def tinydep_wheel(wheelhouse: Path, tmp_path: Path) -> None:
    """A wheel of "tinydep" (in no base interpreter) in the wheelhouse."""
    tiny = tmp_path / "tinydep"
    if not any(wheelhouse.glob("tinydep-*.whl")):
        (tiny / "tinydep").mkdir(parents=True, exist_ok=True)
        (tiny / "pyproject.toml").write_text(PYPROJECT.format(name="tinydep", package="tinydep"))
        (tiny / "tinydep" / "__init__.py").write_text("")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(wheelhouse), str(tiny)], check=True, capture_output=True)


CHAIN_BACKEND = "import tinydep  # what the earlier repo needs, as pipmake needs editables\n" \
                "from setuptools.build_meta import *  # noqa\n"


def make_chain(root: Path) -> None:
    """pipmake -> ksgpu in small: ``a`` requires tinydep; ``b`` builds against the venv with a
    backend that imports it."""
    a, b = root / "a" / "pyproject.toml", root / "b" / "pyproject.toml"
    a.write_text(a.read_text().replace('version = "0.1"', 'version = "0.1"\ndependencies = ["tinydep"]'))
    b.write_text(b.read_text().replace('build-backend = "setuptools.build_meta"',
                                       'build-backend = "chain_backend"\nbackend-path = ["."]'))
    (root / "b" / "chain_backend.py").write_text(CHAIN_BACKEND)


def add_dependencies(root: Path, wheelhouse: Path, tmp_path: Path) -> str:
    """Make ``b`` need a distribution the base has (jinja2 when chtop is installed there) and
    wheelhouse-only "tinydep" (not in the base), which must land in the venv; the reused one."""
    reused = base_distribution()
    tinydep_wheel(wheelhouse, tmp_path)
    pyproject = root / "b" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1"', f'version = "0.1"\ndependencies = ["{reused}", "tinydep"]'))
    return reused


def direnv_exec(root: Path, script: str) -> list[str]:
    """``script``'s output lines, run by ``direnv exec`` under the checkout's rendered .envrc."""
    from chtop_tasks.workspace.dotfiles import render_text

    direnv = require_tool("direnv")
    (root / ".envrc").write_text(render_text(ENVRC_TEMPLATE, {"root": str(root)}))
    subprocess.run([direnv, "allow", str(root)], check=True, cwd=root, capture_output=True)
    proc = subprocess.run([direnv, "exec", str(root), "sh", "-c", script], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_host_python_under_the_envrc_never_runs_bytecode_left_in_the_checkout(tmp_path, monkeypatch):
    """The agent can write the repos (and their __pycache__, which no diff shows): under the
    workspace's .envrc the host's python keeps its bytecode in the user's cache instead, so what
    was planted beside a module you reviewed does not run when you import it."""
    from conftest import plant_pyc

    root = tmp_path / "ws"
    (root / "a").mkdir(parents=True)
    (root / "a" / "mod.py").write_text("X = 1\n")
    marker = tmp_path / "planted-code-ran"
    plant_pyc(root / "a" / "mod.py", marker)
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    env_home = os.environ["HOME"]
    lines = direnv_exec(root, 'echo "$PYTHONPYCACHEPREFIX"; PYTHONPATH=a python -c "import mod; print(mod.X)"')
    assert lines == [f"{env_home}/.cache/chtop/pycache", "1"]
    assert not marker.exists(), "the planted bytecode ran on the host"


@pytest.mark.slow
@pytest.mark.parametrize("installer", INSTALLERS)
def test_uv_and_pip_make_the_same_venv(installer, offline, wheelhouse, tmp_path, capsys):
    """Both installers: the venv's python and prefix under direnv, imports from
    any dir (not shadowed at the root by the checkout dirs), the base's
    packages reused (setuptools too, for no-isolation builds), and a pip that
    works on the venv."""
    if installer == "uv":
        require_tool("uv")
    root, manifest = make_root(tmp_path / "ws", [A, B])
    reused = add_dependencies(root, wheelhouse, tmp_path)
    V.build_venv(root, manifest, installer=installer)
    out = capsys.readouterr().out
    assert f"installer {installer}" in out and "installed a, b" in out and "b:b_frb" in out
    vdir = root / ".venv"
    # which python, sys.prefix and PYTHONSAFEPATH, as a user in the checkout gets them.
    assert direnv_exec(root, 'command -v python; command -v pip; python -c "import sys; print(sys.prefix)"; '
                             'echo "SAFE=$PYTHONSAFEPATH"') == [
        f"{vdir}/bin/python", f"{vdir}/bin/pip", str(vdir), "SAFE=1"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_py(root, "import b_frb; print(b_frb.X)", elsewhere, safe=False)
    assert proc.stdout.strip() == "2", proc.stderr
    # The trap is real: from the root, the checkout dir a/ shadows package a
    # (an empty namespace package), so b_frb fails to import ...
    shadowed = run_py(root, "import b_frb", root, safe=False)
    assert shadowed.returncode != 0 and "cannot import name 'X' from 'a'" in shadowed.stderr
    # ... and PYTHONSAFEPATH=1 (what the smoke check and the dotfiles set) defuses it.
    assert run_py(root, "import b_frb", root, safe=True).returncode == 0
    own = own_dists(root)
    assert f"'{reused}'" not in own, own  # the base's, not a copy
    assert "'tinydep'" in own and "'setuptools'" not in own, own  # no setuptools of its own
    origin = run_py(root, "import setuptools; print(setuptools.__file__)", tmp_path, safe=True)
    assert origin.returncode == 0 and str(root) not in origin.stdout, origin.stdout + origin.stderr
    # The venv's pip sees the venv (a is only there) and changes the venv, not the base.
    pip = str(vdir / "bin" / "pip")
    shown = subprocess.run([pip, "show", "a"], cwd=elsewhere, capture_output=True, text=True)
    assert shown.returncode == 0 and "Name: a" in shown.stdout, shown.stderr
    removed = subprocess.run([pip, "uninstall", "-y", "tinydep"], cwd=elsewhere, capture_output=True, text=True)
    assert removed.returncode == 0, removed.stderr
    assert "'tinydep'" not in own_dists(root)


@pytest.mark.slow
def test_a_no_isolation_build_finds_an_earlier_repos_requirements_and_both_installers_agree(
        offline, wheelhouse, tmp_path, capsys):
    """uv installs with --no-deps: before b (built against the venv) the "deps" step installs
    a's requirement, which b's build backend imports; pip and uv give the same venv."""
    require_tool("uv")
    tinydep_wheel(wheelhouse, tmp_path)
    own = {}
    for installer in ("pip", "uv"):
        root, manifest = make_root(tmp_path / installer, [A, B])
        make_chain(root)
        V.build_venv(root, manifest, installer=installer)
        assert "installed a, b" in capsys.readouterr().out
        own[installer] = own_dists(root).replace("'pip', ", "")   # uv's venv: pip launchers, not a pip
    assert own["pip"] == own["uv"] and "'tinydep'" in own["uv"], own


def make_ca_and_server_cert(d: Path) -> tuple[Path, Path, Path]:
    """A CA of its own and a certificate for 127.0.0.1 it signed: (ca.pem, server.pem, server.key)."""
    openssl = require_tool("openssl")
    run = lambda *a: subprocess.run([openssl, *a], cwd=d, check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=chtop test mirror CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                               "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "server.pem", d / "server.key"


@pytest.fixture
def tls_mirror(wheelhouse, tmp_path):
    """The wheelhouse served over HTTPS on 127.0.0.1 with a certificate of a CA only pip.conf names."""
    import functools
    import http.server
    import ssl
    import threading

    certs = tmp_path / "certs"
    certs.mkdir()
    ca, cert, key = make_ca_and_server_cert(certs)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(wheelhouse))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/", ca
    finally:
        server.shutdown()


@pytest.mark.slow
def test_uv_gets_the_ca_pip_conf_names(offline, tls_mirror, tmp_path, monkeypatch, capsys):
    """A TLS-intercepting mirror whose CA is in pip.conf: pip trusts it, and so does uv's install
    (SSL_CERT_FILE from pip's cert), which on its own roots fails UnknownIssuer."""
    require_tool("uv")
    url, ca = tls_mirror
    config = tmp_path / "uv-mirror.toml"
    config.write_text(f'[pip]\nno-index = true\nfind-links = ["{url}"]\n')
    pip_conf = tmp_path / "pip.conf"
    pip_conf.write_text(f"[global]\ncert = {ca}\n")
    monkeypatch.setenv("UV_CONFIG_FILE", str(config))
    monkeypatch.setenv("UV_FIND_LINKS", url)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))     # nothing cached: a real download
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_conf))
    for name in ("PIP_CERT", "SSL_CERT_FILE", "UV_NATIVE_TLS", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    root, manifest = make_root(tmp_path / "ws", [A])
    steps = V.plan_build(root, manifest, installer="uv", python=Path("/base/python3"))
    install = next(s for s in steps if s.kind == "install")
    assert dict(install.env)["SSL_CERT_FILE"] == str(ca) and f"from {pip_conf} [global] cert" in install.note
    V.build_venv(root, manifest, installer="uv")
    assert "installed a" in capsys.readouterr().out
    # the control: the same install on uv's own roots fails on the mirror's certificate
    plain = subprocess.run([shutil.which("uv"), "pip", "install", "--python", venv_py(root), "--reinstall",
                            "--no-deps", "-e", str(root / "a")], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"})
    assert plain.returncode != 0 and "UnknownIssuer" in plain.stderr, plain.stderr[-2000:]


@pytest.mark.slow
def test_a_second_worktree_takes_what_the_first_fetched_from_uvs_cache(offline, tmp_path, capsys, monkeypatch):
    """Two checkouts built one after the other share uv's cache: the setuptools
    wheel for ``a``'s isolated build is unpacked there once, not per worktree,
    and byte-compiled there once, by the first build, for every later one; also
    from a shell whose .envrc sets a pycache prefix (uv's installs run without it)."""
    uv = require_tool("uv")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "pycache"))
    echoed = {}
    for name in ("dev", "other"):
        root, manifest = make_root(tmp_path / name, [A, B])
        V.build_venv(root, manifest, installer="uv")
        echoed[name] = capsys.readouterr().err
    cache = Path(subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip())
    assert cache.is_relative_to(Path(os.environ["HOME"]))  # the user's cache: this test's HOME
    unpacked = list(cache.glob("archive-v*/*/setuptools/__init__.py"))
    assert len(unpacked) == 1, unpacked
    tag = sys.implementation.cache_tag
    assert (unpacked[0].parent / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert "-m compileall" in echoed["dev"] and "-m compileall" not in echoed["other"], echoed


@pytest.mark.slow
def test_broken_package_names_repo_tail_and_retry(offline, tmp_path):
    root, manifest = make_root(tmp_path / "ws", [A, B])
    (root / "b" / "b_frb" / "__init__.py").write_text("def broken(:\n")
    with pytest.raises(CommandFailed) as info:
        V.build_venv(root, manifest)
    message = str(info.value)
    assert "repo 'b'" in message and "smoke import 'b_frb'" in message
    assert "SyntaxError" in message
    assert f"inv venv.build --workdir {root}" in message


def test_first_error_line_is_the_cause_not_pips_boilerplate():
    from chtop_tasks.venv.buildlog import first_error_line

    pip_out = textwrap.dedent("""\
        error: subprocess-exited-with-error
        × Getting requirements to build editable did not run successfully.
        ╰─> [3 lines of output]
            Traceback (most recent call last):
            ModuleNotFoundError: No module named 'pybind11'
        note: This error originates from a subprocess, and is likely not a problem with pip.
        error: metadata-generation-failed
        """)
    assert first_error_line(pip_out) == "ModuleNotFoundError: No module named 'pybind11'"
    assert first_error_line("nvcc noise\nsrc/x.cu(12): error: identifier \"foo\" is undefined\n") == \
        'src/x.cu(12): error: identifier "foo" is undefined'
    assert first_error_line("all fine\nerror: metadata-generation-failed\n") is None
    assert first_error_line("ValueError: \x1b[2Jcleared") == "ValueError: \\x1b[2Jcleared"


NOISY_BACKEND = """\
import sys, traceback
try:
    import not_installed_build_dep
except ImportError:
    traceback.print_exc()
    for n in range(40):
        print(f"make: noise line {n}", file=sys.stderr)
    sys.exit(1)
"""


@pytest.mark.slow
def test_a_failed_build_lifts_its_cause_and_keeps_the_whole_output_in_a_log(offline, tmp_path):
    """The cause is 40 lines above the end (as pybind11's was above pip's boilerplate): the
    summary names it, and the log under the group's .chtop/logs has every line."""
    root, manifest = make_root(tmp_path / "grp" / "ws", [A, B])
    pyproject = root / "b" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('build-backend = "setuptools.build_meta"',
                                                       'build-backend = "noisy"\nbackend-path = ["."]'))
    (root / "b" / "noisy.py").write_text(NOISY_BACKEND)
    with pytest.raises(CommandFailed) as info:
        V.build_venv(root, manifest, installer="pip")
    message = str(info.value)
    assert "cause: ModuleNotFoundError: No module named 'not_installed_build_dep'" in message, message
    assert "noise line 39" in message and "noise line 5\n" not in message   # the tail is short
    logs = list((tmp_path / "grp" / ".chtop" / "logs").glob("venv-ws-*.log"))
    assert len(logs) == 1 and f"its whole output: {logs[0]}" in message
    text = logs[0].read_text()
    assert all(f"make: noise line {n}\n" in text for n in range(40))
    assert "-m pip install -e " + str(root / "a") in text and "# exit 0" in text   # every step, not only the failed
    assert "No module named 'not_installed_build_dep'" in text


@pytest.mark.slow
def test_create_again_after_a_failed_venv_step_resumes_and_list_reports_it(initialized, offline):
    """The venv step fails (alpha is no Python project yet): the checkouts are kept, the retry
    command is printed once, worktree.list says the venv is incomplete, and once the cause is
    fixed the same worktree.create builds the venv of the kept checkouts."""
    g = initialized
    manifest = g.toplevel / "git_repositories.toml"
    manifest.write_text(manifest.read_text().replace('install = "none"', 'install = "editable-no-build-isolation"', 1))
    git(g.toplevel, "commit", "-qam", "install alpha")
    failed = g.inv(g.toplevel, "worktree.create", "--name", "dev", check=False)
    assert failed.returncode == 1
    assert failed.stderr.count("inv venv.build --workdir") == 1, failed.stderr
    assert "or run the same `inv worktree.create --name dev` again" in failed.stderr
    assert "venv incomplete" in g.inv(g.toplevel, "worktree.list").stdout
    alpha = g.path("dev", "alpha")
    (alpha / "pyproject.toml").write_text(PYPROJECT.format(name="alpha", package="alpha"))
    (alpha / "alpha").mkdir()
    (alpha / "alpha" / "__init__.py").write_text("")
    again = g.inv(g.toplevel, "worktree.create", "--name", "dev")
    assert "building its venv" in again.stdout and "venv ready" in again.stdout
    assert "$ git worktree add" not in again.stderr and "activates its venv" in again.stdout
    assert "venv" not in g.inv(g.toplevel, "worktree.list").stdout.splitlines()[0]
    # complete now: the same command is refused, as for any existing worktree
    third = g.inv(g.toplevel, "worktree.create", "--name", "dev", check=False)
    assert third.returncode == 2 and "already exists" in third.stderr


@pytest.mark.slow
def test_reuse_then_recreate_and_none_is_reported(offline, tmp_path, capsys):
    root, manifest = make_root(tmp_path / "ws", [A, B, {"name": "papers", "install": "none"}])
    V.build_venv(root, manifest)
    out = capsys.readouterr().out
    assert 'skip papers: install = "none"' in out and 'skipped papers (install = "none")' in out
    marker = root / ".venv" / "extra-file"
    marker.write_text("left by hand\n")
    V.build_venv(root, manifest)  # reused: the file stays
    assert marker.exists()
    V.build_venv(root, manifest, recreate=True)
    assert not marker.exists()
    assert run_py(root, "import b_frb", tmp_path, safe=True).returncode == 0


@pytest.mark.slow
def test_test_flag_runs_each_repo_test_and_names_the_failure(offline, tmp_path, capfd):
    root, manifest = make_root(tmp_path / "ws", [
        {**A, "test": "python -c 'import a, sys; print(\"a-tests-ok\", sys.prefix)'"},
        {**B, "test": "python -c 'import sys; sys.exit(3)'"},
    ])
    with pytest.raises(CommandFailed) as info:
        V.build_venv(root, manifest, test=True)
    captured = capfd.readouterr()  # test output streams to the terminal (fd 1)
    assert f"a-tests-ok {root / '.venv'}" in captured.out  # `python` is the venv's
    message = str(info.value)
    assert "repo 'b'" in message and "test command failed (exit 3)" in message
    assert f"inv venv.build --workdir {root} --test" in message
    # Without --test the same venv builds fine.
    V.build_venv(root, manifest)


# -- the task and the nox session, in a real workspace ---------------------------------


@pytest.mark.slow
def test_inv_venv_build_in_a_worktree(with_dev):
    dev = with_dev.path("dev")
    proc = with_dev.inv(with_dev.toplevel, "venv.build", "--workdir", str(dev), "--installer", "pip")
    assert 'skip alpha: install = "none"' in proc.stdout and f"venv ready: {dev / '.venv'}" in proc.stdout
    assert "-m venv --system-site-packages" in proc.stderr  # the runner echoes commands
    assert (dev / ".venv" / "bin" / "python").exists() and not (with_dev.toplevel / ".venv").exists()
    bad = with_dev.inv(dev, "venv.build", "--installer", "conda", check=False)
    assert bad.returncode == 2 and "unknown installer 'conda'" in bad.stderr


def test_nox_session_builds_named_worktree(with_dev):
    nox = require_tool("nox")
    noxfile = with_dev.toplevel / "venv_noxfile.py"  # nox runs sessions from the noxfile's dir
    noxfile.write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(with_dev.toplevel)!r})
        import nox
        from chtop_tasks.cli.nox_sessions import venv_body

        @nox.session(venv_backend="none")
        def venv(session):
            venv_body(session)
        """))
    argv = [nox, "-f", str(noxfile), "-s", "venv", "--"]
    ok = subprocess.run(argv + ["--name", "dev", "--dry-run"], cwd=with_dev.toplevel,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert f"--system-site-packages {with_dev.path('dev', '.venv')}" in ok.stdout
    bad = subprocess.run(argv + ["--name", "nosuch"], cwd=with_dev.toplevel, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "inv worktree.create --name nosuch" in bad.stdout + bad.stderr


def test_uv_trust_follows_pips_cert_unless_the_user_set_uvs(tmp_path):
    from chtop_tasks.venv.tls import uv_trust_env

    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ncert = /from/global.pem\n[install]\ncert = /from/install.pem\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "none"), "PIP_CONFIG_FILE": str(conf)}
    assert uv_trust_env(env)[0] == (("SSL_CERT_FILE", "/from/install.pem"),)
    assert uv_trust_env({**env, "PIP_CERT": "/from/env.pem"})[0] == (("SSL_CERT_FILE", "/from/env.pem"),)
    # the user's own setting wins, and is passed on by name (a sandboxed build's env drops it otherwise)
    assert uv_trust_env({**env, "SSL_CERT_FILE": "/mine.pem"}) == (
        (("SSL_CERT_FILE", "/mine.pem"),), "uv trusts $SSL_CERT_FILE (/mine.pem), as set")
    assert uv_trust_env({**env, "UV_NATIVE_TLS": "1"})[0] == (("UV_NATIVE_TLS", "1"),)


def test_pips_cert_goes_to_a_build_by_name_and_its_file_is_mounted(tmp_path):
    """pip inside a sandboxed build has no pip.conf of the user's home and no PIP_CERT of the host's
    env: both come in by name, and the bundle file is mounted read-only wherever it lives."""
    from chtop_tasks.venv.tls import installer_trust_env, trust_files

    bundle = tmp_path / "home" / "corp-ca.pem"
    bundle.parent.mkdir()
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\ncert = {bundle}\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "none"), "PIP_CONFIG_FILE": str(conf)}
    assert installer_trust_env("pip", env)[0] == (("PIP_CERT", str(bundle)),)
    assert installer_trust_env("uv", env)[0] == (("SSL_CERT_FILE", str(bundle)),)
    assert trust_files("pip", env) == trust_files("uv", env) == (bundle,)
    assert trust_files("uv", {**env, "SSL_CERT_FILE": str(tmp_path / "nowhere.pem")}) == ()   # no such file


def test_the_base_is_the_users_toolchain_configured_or_conda_and_dry_run_says_which(tmp_path, monkeypatch, capsys):
    """A configured `python`, else the active conda env's, else chtop's own base; the same for
    every worktree, and printed by --dry-run."""
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    assert V.base_python_choice()[0] == V.own_base_python()
    conda = tmp_path / "miniforge" / "envs" / "chord"
    (conda / "bin").mkdir(parents=True)
    (conda / "bin" / "python").symlink_to(V.own_base_python())
    monkeypatch.setenv("CONDA_PREFIX", str(conda))
    assert V.base_python_choice() == (conda / "bin" / "python", "$CONDA_PREFIX: the active conda env")
    root, manifest = make_root(tmp_path / "ws", [A])
    V.build_venv(root, manifest, installer="pip", dry_run=True)
    out = capsys.readouterr().out
    assert f"# base interpreter: {conda / 'bin' / 'python'} ($CONDA_PREFIX" in out
    assert f"{conda / 'bin' / 'python'} -m venv --system-site-packages" in out
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'python = "{V.own_base_python()}"\n')      # configured wins over conda
    assert V.base_python_choice() == (V.own_base_python(), f"python in {config}")
    config.write_text('python = "/no/such/python"\n')
    with pytest.raises(UsageError, match="is not an interpreter that runs"):
        V.build_venv(root, manifest, installer="pip", dry_run=True)
