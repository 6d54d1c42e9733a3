"""The workspace model found from any path inside, and its refusals."""

import os

import pytest
from conftest import build_group, git

from chtop_tasks.core.errors import WorkspaceError
from chtop_tasks.workspace.layout import admin_dir_for, find_workspace, private_store, verify_git_dirs


def test_found_from_toplevel_worktree_and_subrepo_dirs(with_dev):
    g = with_dev
    (g.path("dev", "alpha", "deep", "er")).mkdir(parents=True)
    for start, root in [
        (g.toplevel, g.toplevel),
        (g.toplevel / "alpha", g.toplevel),
        (g.path("dev"), g.path("dev")),
        (g.path("dev", "alpha", "deep", "er"), g.path("dev")),
        (g.path("dev", "chtop_tasks"), g.path("dev")),
    ]:
        ws = find_workspace(start)
        assert (ws.grouping, ws.toplevel, ws.root) == (g.grouping, g.toplevel, root)
        assert ws.is_toplevel == (root == g.toplevel)
    ws = find_workspace(g.path("dev"))
    assert ws.name == "dev"
    assert [c.name for c in ws.checkouts()] == ["", "alpha", "beta"]
    assert ws.checkouts()[1].store == g.toplevel / "alpha" / ".git"


def test_outside_any_workspace_is_refused(tmp_path):
    with pytest.raises(WorkspaceError, match="not inside a chtop workspace"):
        find_workspace(tmp_path)


def test_toplevel_directly_in_home_is_refused(tmp_path, remote_template, monkeypatch):
    g = build_group(tmp_path, remote_template)
    monkeypatch.setenv("HOME", str(g.grouping))
    with pytest.raises(WorkspaceError, match=r"sits directly in \$HOME"):
        find_workspace(g.toplevel)


def test_tampered_git_pointer_is_refused(with_dev, tmp_path):
    g = with_dev
    evil = tmp_path / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(evil))
    (g.path("dev", "alpha", ".git")).write_text(f"gitdir: {evil}\n")
    ws = find_workspace(g.path("dev"))
    with pytest.raises(WorkspaceError, match=r"alpha/\.git: points at .*evil\.git"):
        verify_git_dirs(ws)


def test_redirected_commondir_is_refused(with_dev, tmp_path):
    g = with_dev
    admin = admin_dir_for(private_store(g.grouping, "dev", "beta"), g.path("dev", "beta"))
    (admin / "commondir").write_text(str(tmp_path) + "\n")
    with pytest.raises(WorkspaceError, match="commondir: points at"):
        verify_git_dirs(find_workspace(g.path("dev")))


def test_container_pointer_must_be_listed_by_the_toplevel(with_dev, tmp_path):
    g = with_dev
    # a second, unrelated clone pretending to be a worktree of this group
    os.rename(private_store(g.grouping, "dev", "") / "worktrees" / "dev", tmp_path / "moved")
    with pytest.raises(WorkspaceError, match="not a worktree of a toplevel"):
        find_workspace(g.path("dev"))
