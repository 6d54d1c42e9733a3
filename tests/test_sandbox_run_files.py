"""A launch's per-run files: where the run dir goes (tmpfs, unless someone else holds the user's
dir there), and ``sbox.run``'s waiting shell (``launcher.WAITER``), run by real bash with a
stand-in command for podman and a stand-in python that records being started: it passes the exit
status on, removes the run dir, and starts Python for the import only when a branch ref pair
differs or cannot be read as a plain file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from chtop_tasks.sandbox import launcher
from chtop_tasks.sandbox.launcher import WAITER

SHA_A, SHA_B = "a" * 40, "b" * 40


@pytest.fixture
def waiter(tmp_path):
    record = tmp_path / "python-ran"
    fake_py = tmp_path / "python"
    fake_py.write_text(f"#!/bin/sh\necho \"$PWD $*\" >> {record}\n")
    fake_py.chmod(0o755)

    def run(pairs: list[tuple[Path, Path]], command=("sh", "-c", "exit 3"), worktree="/w/dev"):
        run_dir = tmp_path / "runs" / "chtop-dev-run-x"
        (run_dir / "root").mkdir(parents=True)
        refs = [str(p) for pair in pairs for p in pair]
        proc = subprocess.run(["bash", "-c", WAITER, "chtop-sbox", str(run_dir), "", worktree, str(fake_py),
                               "/checkout", str(len(pairs)), *refs, *command],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert not run_dir.exists() and not run_dir.parent.exists()
        ran = record.read_text().splitlines() if record.exists() else []
        record.unlink(missing_ok=True)
        return proc.returncode, ran

    return run


def ref(path: Path, sha: str | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if sha is not None:
        path.write_text(sha + "\n")
    return path


def test_no_python_when_every_ref_is_imported_and_the_status_passes_through(waiter, tmp_path):
    pairs = [(ref(tmp_path / "p1" / "dev", SHA_A), ref(tmp_path / "s1" / "dev", SHA_A)),
             (ref(tmp_path / "p2" / "dev", SHA_B), ref(tmp_path / "s2" / "dev", SHA_B))]
    assert waiter(pairs) == (3, [])


def test_python_imports_from_the_root_dir_when_a_ref_differs(waiter, tmp_path):
    pairs = [(ref(tmp_path / "p1" / "dev", SHA_A), ref(tmp_path / "s1" / "dev", SHA_A)),
             (ref(tmp_path / "p2" / "dev", SHA_B), ref(tmp_path / "s2" / "dev", SHA_A))]
    rc, ran = waiter(pairs, command=("true",))
    assert rc == 0 and ran == ["/ -m chtop_tasks.workspace.exit_import /w/dev"]


@pytest.mark.parametrize("planted", ["missing", "symlink", "fifo", "dir"])
def test_a_ref_that_is_not_a_plain_file_means_python_and_never_a_hang(waiter, tmp_path, planted):
    private, shared = tmp_path / "p" / "dev", ref(tmp_path / "s" / "dev", SHA_A)
    private.parent.mkdir(parents=True)
    if planted == "symlink":
        private.symlink_to(shared)            # same content through a link: still not trusted
    elif planted == "fifo":
        os.mkfifo(private)                    # reading it would block forever
    elif planted == "dir":
        private.mkdir()
    _, ran = waiter([(private, shared)])
    assert len(ran) == 1


def test_no_worktree_no_import(waiter, tmp_path):
    pairs = [(ref(tmp_path / "p" / "dev", SHA_A), ref(tmp_path / "s" / "dev", SHA_B))]
    assert waiter(pairs, worktree="") == (3, [])


def test_run_dirs_go_to_tmpfs_unless_another_user_holds_the_users_dir_there(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "RUN_SCRATCH", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    target = SimpleNamespace(group_dir=tmp_path / "grp", state_dir=tmp_path / "grp" / ".chtop")
    rootless = SimpleNamespace(rootful=False)
    mine = tmp_path / "shm" / f"chtop-{os.getuid()}"
    setup = launcher._root_setup(target, rootless, [], [], "chtop-dev-run-1")
    assert setup.run_dir.parent.parent == mine and setup.private_base == mine
    mine.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to make another user's dir")
    os.chown(mine, 54321, 54321)
    setup = launcher._root_setup(target, rootless, [], [], "chtop-dev-run-1")
    assert setup.run_dir == target.state_dir / "sbox" / "runs" / "chtop-dev-run-1" and setup.private_base is None
