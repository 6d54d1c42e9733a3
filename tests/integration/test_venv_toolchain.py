"""Before a venv build, the base interpreter is checked for what the repos need (``venv/toolchain.py``):
their ``[build-system] requires`` (built against the venv) and the manifest's ``base_requires``,
one message naming what is missing and the command that installs it, exit 3, nothing built.

The bases are real interpreters: a venv made here (without pybind11), and the python running the tests.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import git
from test_venv import base_can_build, offline, wheelhouse  # noqa: F401  (fixtures)
from venv_samples import PYPROJECT

from chtop_tasks.core.errors import ManifestError
from chtop_tasks.venv import toolchain as T
from chtop_tasks.venv.build import own_base_python
from chtop_tasks.workspace.manifest import parse_manifest

REQUIRES_PYBIND11 = PYPROJECT.replace('requires = ["setuptools>=64"]', 'requires = ["setuptools>=64", "pybind11"]')


@pytest.fixture
def bare_base(tmp_path) -> Path:
    """A real interpreter without pybind11 or cupy: a venv of its own (no system site-packages)."""
    where = tmp_path / "bare-base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    python = where / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import pybind11"], capture_output=True)
    assert probe.returncode != 0, "the bare venv sees a pybind11"
    return python


def configure_base(python: Path) -> None:
    """``python = ...`` in the (hermetic) user config: the base every venv build uses."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'python = "{python}"\n')


def install_fake(python: Path, dist: str | None = None, module: str | None = None) -> None:
    """Make ``dist`` (a distribution's metadata) or ``module`` (a bare package) present in ``python``'s
    site-packages: what importlib.metadata and find_spec see, with nothing to run."""
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    if dist:
        info = site / f"{dist}-2.13.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 2.13.0\n")
    if module:
        (site / module).mkdir(parents=True, exist_ok=True)
        (site / module / "__init__.py").write_text("")


def commit_manifest(top: Path, alpha_entry: str) -> None:
    """The toplevel's manifest with ``alpha_entry`` as alpha's extra keys (install "none" replaced)."""
    manifest = top / "git_repositories.toml"
    manifest.write_text(manifest.read_text().replace('install = "none"', alpha_entry, 1))
    git(top, "commit", "-qam", "alpha: built against the venv")


ALPHA_NEEDS = 'install = "editable-no-build-isolation"\nbase_requires = ["cupy"]'


# -- the manifest key ----------------------------------------------------------------------

def test_base_requires_is_a_list_of_requirements_and_anything_else_says_how_to_write_it(tmp_path):
    head = '[[repo]]\nname = "ksgpu"\nurl = "u"\nbranch = "kms"\n'
    repo = parse_manifest(tmp_path / "m.toml", head + 'base_requires = ["cupy", "grpcio-tools >= 1.60"]\n').repos[0]
    assert repo.base_requires == ("cupy", "grpcio-tools >= 1.60")
    assert parse_manifest(tmp_path / "m.toml", head + 'base_requires = "cupy"\n').repos[0].base_requires == ("cupy",)
    for bad in ('"cupy cuda"', '["x; sys_platform == \'linux\'"]', '[1]', '["https://x/y.whl"]'):
        with pytest.raises(ManifestError) as info:
            parse_manifest(tmp_path / "m.toml", head + f"base_requires = {bad}\n")
        message = str(info.value)
        assert "'base_requires'" in message and "(name = " not in message and 'e.g.' in message, message
        assert "repo #1 ('ksgpu')" in message


# -- what the repos need (data; no process) -------------------------------------------------

def test_needs_are_build_requires_of_no_isolation_repos_less_what_earlier_repos_bring(tmp_path):
    """The CHORD chain: pipmake (isolated: its requires are its own build's), ksgpu needs pybind11 and
    numpy and pipmake (an earlier repo), pirate needs ksgpu and editables (pipmake's dependency) and
    pybind11 (ksgpu's dependency): only ksgpu's pybind11 and numpy, and the manifest's cupy, remain."""
    files = {
        "pipmake": '[project]\nname = "pipmake"\ndependencies = ["editables"]\n'
                   '[build-system]\nrequires = ["setuptools>=61.0"]\n',
        "ksgpu": "[project]\nname = 'ksgpu'\ndependencies = ['pybind11', 'numpy']\n"
                 "[build-system]\nrequires = ['pipmake >= 0.0.2', 'pybind11', 'numpy', "
                 "'tomli; python_version < \"3.0\"']\n",
        "pirate": "[project]\nname = 'pirate_frb'\n[build-system]\n"
                  "requires = ['pipmake >= 0.0.3', 'pybind11', 'numpy', 'editables', 'ksgpu >= 1.3.0']\n",
    }
    for name, text in files.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyproject.toml").write_text(text)
    manifest = parse_manifest(tmp_path / "m.toml", textwrap.dedent("""\
        [[repo]]
        name = "pipmake"
        url = "u"
        branch = "main"
        [[repo]]
        name = "ksgpu"
        url = "u"
        branch = "kms"
        install = "editable-no-build-isolation"
        base_requires = ["cupy"]
        [[repo]]
        name = "pirate"
        url = "u"
        branch = "kms"
        install = "editable-no-build-isolation"
        """))
    needs, warnings = T.base_needs(tmp_path, manifest)
    assert not warnings
    assert [(n.repo, n.text, n.install) for n in needs] == [
        ("ksgpu", "cupy", "cupy"), ("ksgpu", "pybind11", "pybind11"), ("ksgpu", "numpy", "numpy"),
        ("ksgpu", 'tomli; python_version < "3.0"', "tomli")]
    assert needs[1].source == "[build-system] requires of ksgpu/pyproject.toml"
    assert needs[0].source == "base_requires in git_repositories.toml"
    # the base itself decides the marker: an old-Python-only requirement is never missing
    lacking, _ = T.check_base(Path(sys.executable), needs[3:], [])
    assert lacking == []


def test_an_agent_written_pyproject_is_data_a_bad_one_declares_nothing_and_warns(tmp_path):
    """A FIFO (an open would block), a link to a host file, garbage TOML, a requires that is not a
    list, entries that are no requirement (a control character, a URL): each warns, none is read
    through, none reaches the base's argv; the good entry next to them is still checked."""
    repos = ["fifo", "link", "garbage", "notalist", "entries"]
    for name in repos:
        (tmp_path / name).mkdir()
    os.mkfifo(tmp_path / "fifo" / "pyproject.toml")
    secret = tmp_path / "host-file.toml"
    secret.write_text('[build-system]\nrequires = ["from-the-host"]\n')
    (tmp_path / "link" / "pyproject.toml").symlink_to(secret)
    (tmp_path / "garbage" / "pyproject.toml").write_text("[build-system\nrequires = \x00")
    (tmp_path / "notalist" / "pyproject.toml").write_text('[build-system]\nrequires = "pybind11"\n')
    (tmp_path / "entries" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["ok-one", "evil\\u001b[2Jname", "x @ https://evil.example/x.whl", 7]\n')
    text = "".join(f'[[repo]]\nname = "{n}"\nurl = "u"\nbranch = "main"\ninstall = "editable-no-build-isolation"\n'
                   for n in repos)
    needs, warnings = T.base_needs(tmp_path, parse_manifest(tmp_path / "m.toml", text))
    assert [n.text for n in needs] == ["ok-one"]
    joined = "\n".join(warnings)
    assert "fifo/pyproject.toml is not a file chtop reads (a FIFO)" in joined, joined
    assert "link/pyproject.toml is not a file chtop reads (a symlink)" in joined, joined
    assert "garbage/pyproject.toml is not valid TOML" in joined
    assert "notalist/pyproject.toml: [build-system] requires is not a list" in joined
    assert "\x1b" not in joined and "'evil\\x1b[2Jname'" in joined and "evil.example" in joined
    assert "from-the-host" not in joined


# -- the tasks, as the user types them -------------------------------------------------------

def test_venv_build_refuses_naming_what_the_base_lacks_and_the_pip_command(initialized, bare_base):
    """`inv venv.build` in the toplevel, the base a venv without pybind11, cupy or setuptools:
    alpha's pyproject requires pybind11 and setuptools, the manifest says cupy: exit 3, one
    message naming each and the one pip command, no .venv made.  With them there, the check
    passes (and --dry-run says what it checks)."""
    g = initialized
    configure_base(bare_base)
    commit_manifest(g.toplevel, ALPHA_NEEDS)
    (g.toplevel / "alpha" / "pyproject.toml").write_text(REQUIRES_PYBIND11.format(name="alpha", package="alpha"))
    refused = g.inv(g.toplevel, "venv.build", check=False)
    assert refused.returncode == 3, refused.stderr
    err = refused.stderr
    assert f"the base interpreter lacks what the repos need to build and import: {bare_base}" in err, err
    assert "  cupy            alpha: base_requires in git_repositories.toml\n" in err, err
    assert "  setuptools>=64  alpha: [build-system] requires of alpha/pyproject.toml\n" in err, err
    assert "  pybind11        alpha: [build-system] requires of alpha/pyproject.toml\n" in err, err
    assert f"  {shlex.quote(str(bare_base))} -m pip install cupy 'setuptools>=64' pybind11\n" in err, err
    assert f"then retry (inv venv.build --workdir {g.toplevel})" in err
    assert "Nothing was built." in err and not (g.toplevel / ".venv").exists()
    assert "-m venv" not in err and "pip install -e" not in err        # nothing ran but the check
    install_fake(bare_base, dist="pybind11", module="cupy")
    install_fake(bare_base, dist="setuptools")
    lacking, _ = T.check_base(bare_base, T.base_needs(g.toplevel, _manifest(g.toplevel))[0], [])
    assert lacking == []
    passed = g.inv(g.toplevel, "venv.build", "--dry-run")
    assert "# before building, the base is checked for: cupy (alpha), setuptools>=64 (alpha), pybind11 (alpha)" \
        in passed.stdout, passed.stdout


def _manifest(top: Path):
    return parse_manifest(top / "git_repositories.toml", (top / "git_repositories.toml").read_text())


def test_a_requirement_the_base_has_passes_and_the_build_runs(initialized, offline):  # noqa: F811
    """The python running chtop as the base, alpha requiring setuptools (which it has): no refusal."""
    g = initialized
    commit_manifest(g.toplevel, 'install = "editable-no-build-isolation"\nsmoke_import = "alpha"')
    alpha = g.toplevel / "alpha"
    (alpha / "pyproject.toml").write_text(PYPROJECT.format(name="alpha", package="alpha"))
    (alpha / "alpha").mkdir()
    (alpha / "alpha" / "__init__.py").write_text("")
    built = g.inv(g.toplevel, "venv.build", "--installer", "pip")
    assert "smoke imports ok: alpha:alpha" in built.stdout
    assert f"$ {own_base_python()} - 'setuptools>=64'" in built.stderr      # the one check, echoed


def test_toplevel_init_and_worktree_create_refuse_before_building(group, bare_base):
    """`inv toplevel.init` clones, then refuses its venv (exit 3, the conda command for a conda
    base); `inv worktree.create` makes the checkouts, then refuses the venv its sandbox would build,
    on the host, before any sandbox starts."""
    g = group
    conda = bare_base.parent.parent
    (conda / "conda-meta").mkdir(exist_ok=True)
    configure_base(bare_base)
    commit_manifest(g.toplevel, ALPHA_NEEDS)
    env = {"CONDA_PREFIX": str(conda), "CONDA_DEFAULT_ENV": "chord"}
    init = g.inv(g.toplevel, "toplevel.init", check=False, env=env)
    assert init.returncode == 3, init.stderr
    assert "  conda install -n chord cupy\n" in init.stderr and "Nothing was built." in init.stderr
    assert (g.toplevel / "alpha" / ".git").exists() and not (g.toplevel / ".venv").exists()
    created = g.inv(g.toplevel, "worktree.create", "--name", "dev", check=False)
    assert created.returncode == 3, created.stderr
    assert f"  conda install -p {conda} cupy\n" in created.stderr, created.stderr   # not the active env: by path
    assert "The checkouts are kept" in created.stderr and "podman" not in created.stderr
    assert not (g.path("dev") / ".venv" / "bin").exists()
