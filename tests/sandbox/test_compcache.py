"""The venv builds' compiler cache (``chtop_tasks/venv/compcache.py``): ccache in front of the
compilers, each tree's own cache, the toplevel's store read-only to every other build.

Real ccache, real g++ and nvcc (skipped without them), real venv builds of a tiny C++ extension
in a toplevel and a feature worktree of the same group; and, from inside a real sandbox, a
worktree's build that tries to write what another worktree's build reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import require_tool
from test_venv import base_can_build  # noqa: F401  (fixture)

from chtop_tasks.venv import build as V
from chtop_tasks.venv import compcache
from chtop_tasks.workspace.manifest import parse_manifest

CX_SETUP = """\
from setuptools import Extension, setup
setup(name="cx", version="0.1", packages=["cx"],
      ext_modules=[Extension("cx._fast", ["src/fast.cpp"], language="c++")])
"""
CX_PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
"""
CX_SOURCE = """\
#include <Python.h>
#include "value.h"
static PyObject *value(PyObject *, PyObject *) { return PyLong_FromLong(CX_VALUE); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&module); }
"""
CX_MANIFEST = """\
[[repo]]
name = "cx"
url = "file:///nowhere/cx.git"
branch = "main"
install = "editable-no-build-isolation"
smoke_import = "cx"
"""
CU_SOURCE = '#include "k.h"\n__global__ void add(float *x) { x[threadIdx.x] += K; }\n'
NVCC_ARGS = ("nvcc", "-std=c++17", "-O3", "--compiler-options", "-Wall,-fPIC",
             "-gencode", "arch=compute_80,code=sm_80", "-MMD", "-MP", "-c", "-o", "k.o", "k.cu")


@pytest.fixture
def ccache():
    return require_tool("ccache")


def write_cx(root: Path, value: int, repo: str = "cx") -> None:
    """A C++ extension repo ``root/repo`` (``cx.value()`` returns ``value``, from a header)."""
    cx = root / repo
    (cx / "src").mkdir(parents=True, exist_ok=True)
    (cx / "cx").mkdir(exist_ok=True)
    (cx / "setup.py").write_text(CX_SETUP)
    (cx / "pyproject.toml").write_text(CX_PYPROJECT)
    (cx / "src" / "fast.cpp").write_text(CX_SOURCE)
    (cx / "src" / "value.h").write_text(f"#define CX_VALUE {value}\n")
    (cx / "cx" / "__init__.py").write_text("from ._fast import value\n")


def cx_value(root: Path, scratch: Path) -> str:
    proc = subprocess.run([str(V.venv_python(root)), "-c", "import cx; print(cx.value())"], cwd=scratch,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def step_env(root: Path) -> dict[str, str]:
    """``compiler_env`` as a build step's runner sees it (``$PATH`` expanded)."""
    env = dict(compcache.compiler_env(root))
    env["PATH"] = env["PATH"].replace("$PATH", os.environ["PATH"])
    return dict(os.environ, **env)


def test_install_steps_carry_the_cache_env_the_toplevel_writes_the_store_worktrees_only_read(with_dev, ccache):
    top, dev = with_dev.toplevel, with_dev.path("dev")
    store = compcache.store_dir(with_dev.grouping)
    envs = {}
    for root in (top, dev):
        (root / "cx").mkdir()
        steps = V.plan_build(root, parse_manifest(root / "m.toml", CX_MANIFEST), installer="pip")
        install = [s for s in steps if s.kind == "install"]
        assert len(install) == 1
        envs[root] = dict(install[0].env)
        assert not any(dict(s.env).get("CCACHE_DIR") for s in steps if s.kind != "install")   # installs only
    remote = "CCACHE_REMOTE_STORAGE" if compcache.ccache_version(ccache) >= (4, 8) else "CCACHE_SECONDARY_STORAGE"
    assert envs[top][remote] == f"file:{store}"
    assert envs[dev][remote] == f"file:{store}|read-only"
    for root, env in envs.items():
        assert env["CCACHE_DIR"] == str(with_dev.grouping / ".chtop" / "build-cache" / root.name / "ccache")
        assert env["CCACHE_CONFIGPATH"] == os.devnull      # never a ccache.conf a build could have written
        assert env["PATH"] == f"{compcache.masquerade_dir(with_dev.grouping)}{os.pathsep}$PATH"
        assert env["CCACHE_BASEDIR"] == str(with_dev.grouping) and env["CCACHE_NOHASHDIR"] == "1"
    assert envs[top]["CCACHE_DIR"] != envs[dev]["CCACHE_DIR"]


@pytest.mark.slow
def test_a_second_worktree_compiles_nothing_and_a_changed_source_compiles_again(
        with_dev, ccache, base_can_build, tmp_path, monkeypatch):  # noqa: F811
    """The toplevel's build compiles the C++ extension (ccache misses, the store gets it); the
    worktree's build of the same sources at another path compiles nothing (hits from the store);
    a changed header there compiles again, and the venv has the new value, not the cached one."""
    require_tool("g++")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv(V.INSTALLER_ENV, raising=False)
    top, dev = with_dev.toplevel, with_dev.path("dev")
    for root in (top, dev):
        write_cx(root, 1)
    manifest = parse_manifest(top / "m.toml", CX_MANIFEST)
    V.build_venv(top, manifest, installer="pip")
    first = compcache.stats(top)
    assert first.get("cache_miss", 0) >= 1 and first.get("remote_storage_hit", 0) == 0, first
    assert any(compcache.store_dir(with_dev.grouping).glob("*/*")), "the toplevel's build filled no store"
    V.build_venv(dev, manifest, installer="pip")
    second = compcache.stats(dev)
    assert second.get("remote_storage_hit", 0) >= 1 and second.get("cache_miss", 0) == 0, second
    assert cx_value(dev, tmp_path) == "1"
    (dev / "cx" / "src" / "value.h").write_text("#define CX_VALUE 2\n")
    V.build_venv(dev, manifest, installer="pip")
    third = compcache.stats(dev)
    assert third.get("cache_miss", 0) == 1, third
    assert cx_value(dev, tmp_path) == "2"
    assert cx_value(top, tmp_path) == "1"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_nvcc_objects_come_from_the_toplevels_store_and_a_changed_header_compiles_again(with_dev, ccache):
    """nvcc through the masquerade, as ksgpu's Makefile runs it (in-tree objects, depfiles)."""
    top, dev = with_dev.toplevel, with_dev.path("dev")
    objects = {}
    for root in (top, dev):
        cu = root / "cu"
        cu.mkdir()
        (cu / "k.cu").write_text(CU_SOURCE)
        (cu / "k.h").write_text("#define K 1.0f\n")
        compcache.prepare(root)
        proc = subprocess.run(NVCC_ARGS, cwd=cu, env=step_env(root), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        objects[root] = (cu / "k.o").read_bytes()
    assert compcache.stats(top).get("cache_miss") == 1
    second = compcache.stats(dev)
    assert second.get("remote_storage_hit") == 1 and second.get("cache_miss", 0) == 0, second
    assert objects[top] == objects[dev]
    assert "k.h" in (dev / "cu" / "k.d").read_text()      # the depfile make reads came back too
    (dev / "cu" / "k.h").write_text("#define K 2.0f\n")
    proc = subprocess.run(NVCC_ARGS, cwd=dev / "cu", env=step_env(dev), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert compcache.stats(dev).get("cache_miss") == 1
    assert (dev / "cu" / "k.o").read_bytes() != objects[top]


def test_without_ccache_the_build_runs_as_before(with_dev, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))     # no ccache on it
    root = with_dev.path("dev")
    (root / "cx").mkdir()
    steps = V.plan_build(root, parse_manifest(root / "m.toml", CX_MANIFEST), installer="pip")
    assert not any(k.startswith("CCACHE") or k == "PATH" for s in steps for k, _ in s.env)
    assert compcache.prepare(root) is None and compcache.sandbox_mounts(root) == ((), ())


# A feature worktree's build code (the agent's setup.py), run by its sandboxed venv build: it tries
# to write every part of the compiler cache that another worktree's build reads, and its own cache.
HOSTILE_SETUP = """\
import os
from pathlib import Path
from setuptools import setup

results = []

def attempt(what, write):
    try:
        write()
        results.append(what + ": written")
    except OSError as exc:
        results.append(what + ": " + type(exc).__name__)

def swap_link():
    Path({bin!r}, ".nvcc").symlink_to("/bin/sh")
    os.replace(Path({bin!r}, ".nvcc"), Path({bin!r}, "nvcc"))

attempt("store entry", lambda: Path({store!r}, "ab", "entry").write_text("planted\\n"))
attempt("store new", lambda: Path({store!r}, "planted").write_text("planted\\n"))
attempt("masquerade nvcc", swap_link)
attempt("other worktree's cache", lambda: Path({other!r}, "planted").write_text("planted\\n"))
attempt("own cache", lambda: Path({own!r}, "mine").write_text("mine\\n"))
Path({where!r}).write_text("\\n".join(results) + "\\n")
setup(name="alpha", version="0.1", packages=["alpha"])
"""


def _plant_cache_attack(group):
    """As root, before the chown: the toplevel's store holds an entry, worktree ``other`` has its own
    cache; dev's alpha has the hostile setup.py (feature worktrees build in their sandboxes)."""
    from test_venv_sandboxed import _install_alpha

    store = compcache.store_dir(group.grouping)
    (store / "ab").mkdir(parents=True)
    (store / "ab" / "entry").write_text("trusted\n")
    other = compcache.own_cache_dir(group.grouping / "other")
    other.mkdir(parents=True)
    dev = group.grouping / "dev"
    alpha = dev / "alpha"
    (alpha / "alpha").mkdir()
    (alpha / "alpha" / "__init__.py").write_text("")
    (alpha / "setup.py").write_text(HOSTILE_SETUP.format(
        bin=str(compcache.masquerade_dir(group.grouping)), store=str(store), other=str(other),
        own=str(compcache.own_cache_dir(dev)), where=str(alpha / "attempts.txt")))
    _install_alpha(dev / "git_repositories.toml")


@pytest.mark.podman
@pytest.mark.slow
def test_a_worktrees_build_cannot_write_what_another_worktrees_build_reads(remote_template, ccache):
    """Inside its sandbox, dev's build writes its own compiler cache and nothing another build
    reads: not the toplevel's store, not the masquerade links, not another worktree's cache; and
    the agent's own sandbox (not a build) does not get even dev's cache."""
    from sandbox_helpers import user_group_cm

    with user_group_cm(remote_template, prepare=_plant_cache_attack) as g:
        built = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", cwd=g.toplevel, timeout=600)
        assert built.returncode == 0, built.stdout + built.stderr
        attempts = (g.dev / "alpha" / "attempts.txt").read_text()
        store, links = compcache.store_dir(g.grouping), compcache.masquerade_dir(g.grouping)
        assert (store / "ab" / "entry").read_text() == "trusted\n", attempts
        assert not (store / "planted").exists(), attempts
        assert os.readlink(links / "nvcc") == compcache.ccache_path(), attempts
        assert not (compcache.own_cache_dir(g.grouping / "other") / "planted").exists(), attempts
        own = compcache.own_cache_dir(g.dev)
        assert (own / "mine").read_text() == "mine\n", attempts      # the build did run, its cache writable
        agent = g.sbox(f"echo agent > {own}/agent; echo planted > {store}/agent")
        assert not (own / "agent").exists() and not (store / "agent").exists(), agent.stdout + agent.stderr


def _plant_cx(group):
    """As root, before the chown: repo alpha is the C++ extension cx, in the toplevel and in dev,
    installed."""
    for root in (group.toplevel, group.grouping / "dev"):
        write_cx(root, 1, repo="alpha")
        manifest = root / "git_repositories.toml"
        manifest.write_text(manifest.read_text().replace(
            'install = "none"', 'install = "editable-no-build-isolation"\nsmoke_import = "cx"', 1))


@pytest.mark.podman
@pytest.mark.slow
def test_a_worktrees_build_inside_its_sandbox_takes_the_toplevels_objects(remote_template, ccache):
    """The toplevel's host build compiles cx; dev's build, inside its sandbox, compiles nothing
    (ccache there: the masquerade links and the store read-only, its own cache writable), and the
    venv works in the agent's sandbox."""
    require_tool("g++")
    from sandbox_helpers import user_group_cm

    offline = {"PIP_NO_INDEX": "1"}
    with user_group_cm(remote_template, prepare=_plant_cx) as g:
        top = g.inv("venv.build", "--installer", "pip", cwd=g.toplevel, extra_env=offline, timeout=600)
        assert top.returncode == 0, top.stdout + top.stderr
        logs = "".join(p.read_text() for p in (g.grouping / ".chtop" / "logs").glob("venv-top-*.log"))
        assert compcache.stats(g.toplevel).get("cache_miss", 0) >= 1, logs[-5000:]
        dev = g.inv("venv.build", "--workdir", str(g.dev), "--installer", "pip", cwd=g.toplevel,
                    extra_env=offline, timeout=600)
        assert dev.returncode == 0 and "venv-build" in dev.stderr, dev.stdout + dev.stderr
        counters = compcache.stats(g.dev)
        assert counters.get("remote_storage_hit", 0) >= 1 and counters.get("cache_miss", 0) == 0, counters
        used = g.sbox("python -c 'import cx; print(cx.value())'")
        assert used.returncode == 0 and used.stdout.strip() == "1", used.stdout + used.stderr


@pytest.mark.podman
@pytest.mark.slow
def test_as_root_a_worktrees_sandboxed_build_takes_the_toplevels_objects(initialized, ccache):
    """As root (a rootful sandbox, the agent's ids): the toplevel's host build fills the store as
    root, worktree.create's build inside dev's sandbox reads it and writes its own cache, owned as
    the rest of the worktree."""
    require_tool("g++")
    from conftest import git

    g = initialized
    write_cx(g.toplevel, 1, repo="alpha")
    git(g.toplevel / "alpha", "add", "-A")
    git(g.toplevel / "alpha", "commit", "-qm", "cx, a C++ extension")
    manifest = g.toplevel / "git_repositories.toml"
    manifest.write_text(manifest.read_text().replace(
        'install = "none"', 'install = "editable-no-build-isolation"\nsmoke_import = "cx"', 1))
    git(g.toplevel, "commit", "-qam", "install alpha")
    offline = {"PIP_NO_INDEX": "1"}
    g.inv(g.toplevel, "venv.build", "--installer", "pip", env=offline, timeout=600)
    made = g.inv(g.toplevel, "worktree.create", "--name", "dev", check=False, env=offline, timeout=600)
    assert made.returncode == 0 and "venv-build" in made.stderr, made.stdout + made.stderr
    counters = compcache.stats(g.path("dev"))
    assert counters.get("remote_storage_hit", 0) >= 1 and counters.get("cache_miss", 0) == 0, counters
    own = compcache.own_cache_dir(g.path("dev"))
    assert os.stat(own).st_uid == os.stat(g.path("dev")).st_uid


def test_a_deleted_worktrees_build_cache_goes_with_it(with_dev):
    """What dev's builds wrote (its own compiler cache, its uv and pip caches) is not read by the
    next worktree that gets the name dev (another agent's, maybe): delete removes it."""
    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree, delete_worktree

    own = compcache.own_cache_dir(with_dev.path("dev"))
    own.mkdir(parents=True)
    (own / "planted").write_text("an object the old dev's build compiled\n")
    delete_worktree(find_workspace(with_dev.toplevel), "dev")
    assert not own.parent.exists()
    create_worktree(find_workspace(with_dev.toplevel), "dev")
    assert not (own / "planted").exists()
