"""The shipped CHORD manifest on the real repos (git bundles made local bare remotes): the daily
loop as the unprivileged test user with real rootless podman, and one real venv build of
pipmake + ksgpu with nvcc on the uv path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import REPO_ROOT, make_container_remote
from real_repos import bare_remotes_from_bundles
from sandbox_helpers import missing, user_group_cm

SHIPPED_MANIFEST = REPO_ROOT / "git_repositories.toml"


def chord_manifest(remotes: dict[str, Path], pirate_install: str | None = None, ksgpu_smoke: bool = True) -> str:
    """The shipped manifest, its URLs pointed at ``remotes``; pirate without submodules (its
    asdf-cxx is unreachable here), and with ``install = pirate_install`` when given; without
    ksgpu's smoke import and its cupy unless ``ksgpu_smoke`` (importing ksgpu needs cupy)."""
    text = SHIPPED_MANIFEST.read_text()
    if not ksgpu_smoke:
        text, count = re.subn(r'^smoke_import = "ksgpu"\nbase_requires = \["cupy"\].*\n', "", text, flags=re.M)
        assert count == 1
    for name, bare in remotes.items():
        text, count = re.subn(rf'url = "https://github.com/kmsmith137/{name}.git"', f'url = "file://{bare}"', text)
        assert count == 1, f"the shipped manifest no longer names {name}'s URL"
    head, pirate = text.split('name = "pirate"\n')
    if pirate_install:
        pirate, count = re.subn(r'^install = .*$', f'install = "{pirate_install}"', pirate, count=1, flags=re.M)
        assert count == 1
    return head + 'name = "pirate"\nsubmodules = false\n' + pirate


def chord_group(base: Path, pirate_install: str | None = None, ksgpu_smoke: bool = True) -> tuple[Path, Path]:
    """Bare remotes of the bundles and a toplevel clone of a container repo with the CHORD
    manifest: (grouping, toplevel)."""
    remotes_dir = base / "remotes"
    remotes = bare_remotes_from_bundles(remotes_dir)
    make_container_remote(remotes_dir, chord_manifest(remotes, pirate_install, ksgpu_smoke))
    grouping = base / "grp"
    grouping.mkdir()
    toplevel = grouping / "top"
    subprocess.run(["git", "clone", "-q", f"file://{remotes_dir}/chtop.git", str(toplevel)], check=True,
                   capture_output=True)
    return grouping, toplevel


@pytest.fixture
def chord_user_group():
    """A CHORD toplevel owned by the test user (nothing cloned yet)."""
    def build(base):
        grouping, toplevel = chord_group(base)
        return types.SimpleNamespace(grouping=grouping, toplevel=toplevel)

    with user_group_cm(None, builder=build) as group:
        yield group


def ok(proc) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


@pytest.mark.podman
@pytest.mark.slow
def test_chord_workspace_from_clone_to_merge_up_and_delete(chord_user_group):
    """init, create (pirate's unreachable submodule skipped by `submodules = false`), a commit
    inside the sandbox, git.status, rebase-down after kms moves, merge-up, delete."""
    g = chord_user_group
    top, dev = g.toplevel, g.dev
    init = ok(g.inv("toplevel.init", "--no-venv", cwd=top, timeout=600))
    for name, branch in (("pipmake", "main"), ("ksgpu", "kms"), ("pirate", "kms")):
        assert f"{name}: cloned ({branch})" in init.stdout
    assert not (top / "pirate" / "asdf-cxx" / ".git").exists()
    ok(g.inv("worktree.create", "--name", "dev", "--no-venv", cwd=top, timeout=600))
    for name in ("", "pipmake", "ksgpu", "pirate"):
        assert g.git(dev / name, "branch", "--show-current") == "dev"
    inside = ok(g.sbox("cd ksgpu && echo 'from the sandbox' > chtop-note.txt && git add chtop-note.txt && "
                       "git commit -qm 'note, committed inside the sandbox' && echo COMMITTED", timeout=300))
    assert "COMMITTED" in inside.stdout
    # said once per group: the next launch leaves it out, CHTOP_VERBOSE=1 brings it back
    limits_warned = "limits NOT enforced" in inside.stderr
    # README's walkthrough hooks direnv in ~/.bashrc; the sandbox's shell runs chtop's rc, never that one: quiet
    bashrc = g.home / ".bashrc"
    bashrc.write_text('eval "$(direnv hook bash)"\n')
    subprocess.run(["chown", f"{g.user.pw_uid}:{g.user.pw_gid}", str(bashrc)], check=True)
    quiet = ok(g.sbox("printf 'echo PROMPTED\\n' | bash --rcfile /.chtop/shellrc -i"))
    assert "PROMPTED" in quiet.stdout and "blocked" not in quiet.stderr, quiet.stderr
    assert "limits NOT enforced" not in quiet.stderr
    if limits_warned:        # this host cannot enforce them (rootless on cgroup v1)
        verbose = ok(g.sbox("true", extra_env={"CHTOP_VERBOSE": "1"}))
        assert "limits NOT enforced" in verbose.stderr
    status = ok(g.inv("git.status"))
    assert "ksgpu" in status.stdout and "pirate" in status.stdout
    assert g.git(dev / "ksgpu", "log", "-1", "--format=%s") == "note, committed inside the sandbox"
    # kms moves in the toplevel (where the integration branch lives): rebase-down takes it
    (top / "ksgpu" / "upstream.txt").write_text("moved on\n")
    g.git(top / "ksgpu", "add", "upstream.txt")
    g.git(top / "ksgpu", "commit", "-qm", "kms moves")
    ok(g.inv("git.rebase-down", timeout=300))
    assert g.git(dev / "ksgpu", "rev-list", "--count", "dev..kms") == "0"
    assert g.git(dev / "ksgpu", "rev-list", "--count", "kms..dev") == "1"
    assert (dev / "ksgpu" / "upstream.txt").is_file()
    ok(g.inv("git.merge-up", timeout=300))
    assert g.git(top / "ksgpu", "rev-parse", "kms") == g.git(dev / "ksgpu", "rev-parse", "HEAD")
    assert g.git(top / "ksgpu", "log", "-1", "--format=%s", "kms") == "note, committed inside the sandbox"
    ok(g.inv("worktree.delete", "--name", "dev", cwd=top, timeout=300))
    assert not dev.exists()


BASE_HAS = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
OWN_DISTS = ("import sys, importlib.metadata as md; print(sorted(d.metadata['Name'].lower() for d in "
             "md.distributions(path=[p for p in sys.path if p.startswith(sys.prefix + '/') and "
             "p.endswith('site-packages')])))")


@pytest.mark.slow
def test_chord_toplevel_venv_builds_pipmake_then_ksgpu_with_nvcc_on_the_uv_path(tmp_path):
    """The one real CUDA build: `inv toplevel.init` with uv builds pipmake, then ksgpu against the
    venv with pipmake's backend (which needs editables: installed between the two) and nvcc;
    pirate is `install = "none"` here (it needs grpc), so its smoke_import and test are skipped."""
    from conftest import require_tool

    from chtop_tasks.venv.build import base_python
    from chtop_tasks.workspace.venvstamp import is_complete

    require_tool("nvcc")
    require_tool("uv")
    base = str(base_python())
    present = subprocess.run([base, "-c", BASE_HAS, "pybind11", "numpy", "editables", "cupy"], capture_output=True,
                             text=True, check=True).stdout.split()
    if not {"pybind11", "numpy"} <= set(present):
        missing(f"{base} lacks pybind11 or numpy, which ksgpu builds against (./bootstrap installs them)")
    cupy = "cupy" in present     # `import ksgpu` imports cupy: without it, its libraries are loaded instead
    grouping, toplevel = chord_group(tmp_path, pirate_install="none", ksgpu_smoke=cupy)
    env = {"CHTOP_INSTALLER": "uv",
           # one GPU architecture, not the Makefile's three: the same compile, a third of the time
           "NVCC_ARCH": "-gencode arch=compute_80,code=sm_80"}
    proc = subprocess.run([sys.executable, "-m", "invoke", "toplevel.init"], cwd=toplevel, capture_output=True,
                          text=True, env=dict(os.environ, **env), stdin=subprocess.DEVNULL, timeout=3000)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    out = proc.stdout
    assert "installer uv" in out and "installed pipmake, ksgpu" in out, out
    assert ("smoke imports ok: pipmake:pipmake, ksgpu:ksgpu" if cupy else "smoke imports ok: pipmake:pipmake") in out
    assert 'skip pirate (and its smoke_import and test): install = "none"' in out, out
    if "editables" not in present:     # pipmake's requirement, in the venv before ksgpu's build ran
        assert "with pip, unmet requirements editables" in out, out
    vpy = toplevel / ".venv" / "bin" / "python"
    own = subprocess.run([str(vpy), "-c", OWN_DISTS], capture_output=True, text=True, check=True).stdout
    # what the pip path gives (pip resolves the same requirements against the same base), less pip
    expected = sorted({"pipmake", "ksgpu"} | ({"editables"} - set(present)))
    assert own.strip() == str(expected), own
    # what nvcc built, loaded as ksgpu's own __init__ loads it (found through the editable install)
    loaded = subprocess.run([str(vpy), "-c", LOAD_KSGPU_LIBS], capture_output=True, text=True, cwd=tmp_path,
                            env=dict(os.environ, PYTHONSAFEPATH="1"))
    assert loaded.returncode == 0 and loaded.stdout.strip() == str(toplevel / "ksgpu" / "ksgpu"), loaded.stderr
    assert is_complete(toplevel / ".venv")
    logs = list((grouping / ".chtop" / "logs").glob("venv-top-*.log"))
    assert len(logs) == 1 and f"log {logs[0]}" in out
    assert "--no-build-isolation -e " + str(toplevel / "ksgpu") in logs[0].read_text()


LOAD_KSGPU_LIBS = """\
import ctypes, importlib.util, os, sysconfig
where = os.path.dirname(importlib.util.find_spec("ksgpu").origin)
ctypes.CDLL(os.path.join(where, "lib", "libksgpu.so"), mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(os.path.join(where, "ksgpu_pybind11" + sysconfig.get_config_var("EXT_SUFFIX")), mode=ctypes.RTLD_GLOBAL)
print(where)
"""
