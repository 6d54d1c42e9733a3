"""The shipped CHORD manifest on the real repos (git bundles made local bare remotes): the daily
loop as the unprivileged test user with real rootless podman, and one real venv build of
pipmake + ksgpu with nvcc on the uv path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, make_container_remote
from real_repos import bare_remotes_from_bundles
from sandbox_helpers import (
    build_user_group,
    end_pause_process,
    ensure_test_user,
    ensure_user_venv,
    make_base,
    podman_works,
    stop_proxy_as,
)

SHIPPED_MANIFEST = REPO_ROOT / "git_repositories.toml"


def chord_manifest(remotes: dict[str, Path], pirate_extra: str = "") -> str:
    """The shipped manifest, its URLs pointed at ``remotes``; pirate without submodules (its
    asdf-cxx is unreachable here), plus ``pirate_extra`` lines."""
    text = SHIPPED_MANIFEST.read_text()
    for name, bare in remotes.items():
        text, count = re.subn(rf'url = "https://github.com/kmsmith137/{name}.git"', f'url = "file://{bare}"', text)
        assert count == 1, f"the shipped manifest no longer names {name}'s URL"
    text, count = re.subn(r'(name = "pirate"\n)', r"\1submodules = false\n" + pirate_extra, text)
    assert count == 1
    return text


def chord_group(base: Path, pirate_extra: str = "") -> tuple[Path, Path]:
    """Bare remotes of the bundles and a toplevel clone of a container repo with the CHORD
    manifest: (grouping, toplevel)."""
    remotes_dir = base / "remotes"
    remotes = bare_remotes_from_bundles(remotes_dir)
    make_container_remote(remotes_dir, chord_manifest(remotes, pirate_extra))
    grouping = base / "grp"
    grouping.mkdir()
    toplevel = grouping / "top"
    subprocess.run(["git", "clone", "-q", f"file://{remotes_dir}/chtop.git", str(toplevel)], check=True,
                   capture_output=True)
    return grouping, toplevel


@pytest.fixture
def chord_user_group(tmp_path):
    """A CHORD toplevel owned by the test user (nothing cloned yet)."""
    user = ensure_test_user()
    venv = ensure_user_venv()
    base = make_base()

    def build(b):
        grouping, toplevel = chord_group(b)
        return type("G", (), {"grouping": grouping, "toplevel": toplevel})

    try:
        group = build_user_group(base, None, user, venv, build)
        podman_works(user, group.env, group.base)
        yield group
    finally:
        stop_proxy_as(base)
        end_pause_process(base / "run")
        subprocess.run(["rm", "-rf", str(base)], check=False)


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
