"""gitprobe reads HEAD and the git dir as data (no git process) and answers as git would; where the
file is not plain (a link, a junk HEAD, a short name git would spell differently) git is asked."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import git

from chtop_tasks.core import gitprobe


def git_answer(repo: Path) -> str | None:
    out = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return out or None


def repo_with_commit(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "f").write_text("f\n")
    git(path, "add", "f")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_head_branch_matches_git_plain_detached_linked_and_ambiguous(tmp_path, monkeypatch):
    repo = repo_with_commit(tmp_path / "r")
    asked = []
    real_git = gitprobe.git
    monkeypatch.setattr(gitprobe, "git", lambda *a, **k: asked.append(a[1]) or real_git(*a, **k))
    assert gitprobe.head_branch(repo) == "main" == git_answer(repo)
    assert asked == []                                           # read as data
    git(repo, "worktree", "add", "-q", "-b", "feature/x", str(tmp_path / "wt"))
    assert gitprobe.head_branch(tmp_path / "wt") == "feature/x" == git_answer(tmp_path / "wt")
    assert gitprobe.git_dir_as_data(tmp_path / "wt") == repo / ".git" / "worktrees" / "wt"
    git(repo, "checkout", "-q", "--detach")
    assert gitprobe.head_branch(repo) is None and git_answer(repo) is None
    assert asked == []
    git(repo, "checkout", "-q", "main")
    git(repo, "tag", "main")                                     # git now says heads/main
    assert gitprobe.head_branch(repo) == git_answer(repo) == "heads/main"
    git(repo, "pack-refs", "--all")
    assert gitprobe.head_branch(repo) == git_answer(repo) == "heads/main"
    assert asked                                                 # the ambiguous name went to git


def test_a_linked_head_or_git_file_is_never_followed(tmp_path):
    repo = repo_with_commit(tmp_path / "r")
    git(repo, "worktree", "add", "-q", "-b", "dev", str(tmp_path / "wt"))
    admin = repo / ".git" / "worktrees" / "wt"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("ref: refs/heads/planted\n")
    head = admin / "HEAD"
    head.unlink()
    os.symlink(elsewhere, head)
    assert gitprobe.head_branch_as_data(tmp_path / "wt") == (False, None)
    dot_git = tmp_path / "wt" / ".git"
    target = tmp_path / "gitfile"
    target.write_text(dot_git.read_text())
    dot_git.unlink()
    os.symlink(target, dot_git)
    assert gitprobe.git_dir_as_data(tmp_path / "wt") is None


def test_the_dirty_check_never_writes_the_index(tmp_path):
    """chtop's status check takes none of git's optional locks: a stale index (a file touched, not
    changed) is not refreshed and rewritten, so the check never holds ``index.lock`` while the
    agent (or you) run git in that checkout."""
    repo = repo_with_commit(tmp_path / "r")
    tracked = next(p for p in repo.iterdir() if p.is_file())
    os.utime(tracked, ns=(tracked.stat().st_mtime_ns + 5 * 10**9,) * 2)
    index = repo / ".git" / "index"
    before = (index.stat().st_ino, index.stat().st_mtime_ns)
    assert gitprobe.dirty_paths(repo) == []
    assert (index.stat().st_ino, index.stat().st_mtime_ns) == before
    git(repo, "status", "--porcelain")                 # plain git status refreshes it: the test can fail
    assert (index.stat().st_ino, index.stat().st_mtime_ns) != before


def test_a_stopped_operation_is_named_as_git_status_names_it_and_its_state_read_as_data(tmp_path):
    repo = repo_with_commit(tmp_path / "r")
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "f").write_text("side\n")
    git(repo, "commit", "-q", "-am", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "f").write_text("main\n")
    git(repo, "commit", "-q", "-am", "main")
    assert gitprobe.operation_state(repo) is None
    git(repo, "cherry-pick", "side", check=False)
    assert gitprobe.operation_state(repo) == gitprobe.Operation("cherry-pick")
    assert gitprobe.operation_in_progress(repo) == "cherry-pick"
    git(repo, "cherry-pick", "--abort")
    git(repo, "checkout", "-q", "side")
    git(repo, "rebase", "main", check=False)
    stopped = gitprobe.operation_state(repo)
    assert stopped == gitprobe.Operation("rebase", "side") and "rebase in progress" in git(repo, "status")
    assert stopped.commands(repo) == (f"git -C {repo} rebase --continue", f"git -C {repo} rebase --abort")
    head_name = repo / ".git" / "rebase-merge" / "head-name"
    secret = tmp_path / "secret"
    secret.write_text("refs/heads/host-secret\n")
    head_name.unlink()
    head_name.symlink_to(secret)                        # the agent's link to a host file is not read
    assert gitprobe.operation_state(repo) == gitprobe.Operation("rebase", None)
    head_name.unlink()
    os.mkfifo(head_name)                                # nor does a FIFO block the listing
    assert gitprobe.operation_state(repo) == gitprobe.Operation("rebase", None)
    head_name.unlink()
    head_name.write_text("refs/heads/side\n")
    git(repo, "rebase", "--abort")
    os.symlink(tmp_path / "nowhere", repo / ".git" / "BISECT_LOG")   # a marker is looked at, not followed
    assert gitprobe.operation_state(repo).commands(repo) == (f"git -C {repo} bisect reset",)
    assert gitprobe.operation_in_progress(repo) is None
