"""A launch's per-run files: where the run dir goes (tmpfs, unless someone else holds the user's
dir there), and ``sbox.run``'s waiting shell (``launcher.WAITER``), run by real bash with a
stand-in command for podman and a stand-in python that records being started: it passes the exit
status on, removes the run dir, and starts Python for the import only when a branch ref pair
differs or cannot be read as a plain file.  After the sandbox it removes the run dirs of killed
launches it was given whose container is gone too (a stand-in podman says which still exist)."""

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

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_podman = bin_dir / "podman"          # `podman container exists NAME`: 0 for a *-alive name
    fake_podman.write_text('#!/bin/sh\ncase "$3" in *-alive) exit 0;; *-broken) exit 125;; esac; exit 1\n')
    fake_podman.chmod(0o755)

    def run(pairs: list[tuple[Path, Path]], command=("sh", "-c", "exit 3"), worktree="/w/dev",
            stale: tuple[Path, ...] = (), refused_of: str = ""):
        run_dir = tmp_path / "runs" / "chtop-dev-run-x"
        (run_dir / "root").mkdir(parents=True)
        refs = [str(p) for pair in pairs for p in pair]
        proc = subprocess.run(["bash", "-c", WAITER, "chtop-sbox", str(run_dir), "", worktree, str(fake_py),
                               "/checkout", "/group", refused_of, "12.5", str(len(pairs)), *refs, str(len(stale)),
                               *map(str, stale), *command],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                              env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))
        assert not run_dir.exists()
        assert run_dir.parent.exists() == any(d.exists() for d in stale)
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
    assert rc == 0 and ran == ["/ -m chtop_tasks.stores.exit_import /w/dev"]


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


def test_killed_runs_whose_container_is_gone_are_removed_after_the_sandbox(waiter, tmp_path):
    runs = tmp_path / "runs"
    gone, alive, broken = (runs / f"chtop-dev-run-{n}" for n in ("gone", "alive", "broken"))
    for stale in (gone, alive, broken):
        (stale / "root" / "usr").mkdir(parents=True)
    assert waiter([], worktree="", stale=(gone, alive, broken)) == (3, [])
    assert not gone.exists()
    assert alive.exists() and broken.exists()     # its container still there; podman failed: kept


def test_the_last_killed_run_removed_takes_the_runs_dir_with_it(waiter, tmp_path):
    gone = tmp_path / "runs" / "chtop-dev-run-gone"
    (gone / "root").mkdir(parents=True)
    assert waiter([], worktree="", stale=(gone,)) == (3, [])
    assert not (tmp_path / "runs").exists()


def test_a_launch_that_waits_in_python_sweeps_killed_runs_after_its_sandbox(tmp_path):
    """``cleanup_launch``: its own run dir, then the killed launches' whose container is gone; a run
    whose launcher still lives is left alone, whatever podman says."""
    runs = tmp_path / "runs"
    own, killed, running, alive = (runs / f"chtop-dev-run-{n}" for n in ("own", "killed", "running", "alive"))
    for run_dir, pid in ((own, os.getpid()), (killed, 999999999), (running, os.getpid()), (alive, 999999999)):
        (run_dir / "root").mkdir(parents=True)
        (run_dir / "launcher.pid").write_text(f"{pid}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text('#!/bin/sh\ncase "$3" in *-alive) exit 0;; esac; exit 1\n')
    (bin_dir / "podman").chmod(0o755)
    plan = SimpleNamespace(setup=SimpleNamespace(root=SimpleNamespace(run_dir=own)),
                           env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))
    launcher.cleanup_launch(plan)
    assert sorted(p.name for p in runs.iterdir()) == ["chtop-dev-run-alive", "chtop-dev-run-running"]


def test_a_failed_run_behind_the_proxy_asks_python_what_the_proxy_refused_and_a_passing_one_does_not(
        waiter, tmp_path):
    """With the worktree to report for, a sandbox that exits non-zero has Python say the proxy's
    refusals (``proxy.report``, from the root dir); one that exits 0 starts no Python."""
    shared = tmp_path / "shared"
    shared.write_text(SHA_A + "\n")
    pairs = [(shared, shared)]
    assert waiter(pairs, refused_of="dev") == (3, ["/ -m chtop_tasks.proxy.report /group dev 12.5"])
    assert waiter(pairs, command=("true",), refused_of="dev") == (0, [])
