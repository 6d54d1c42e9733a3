"""``--name W`` for a worktree on this machine: each git task and ``sbox.run`` acts on W from elsewhere.

Run from the toplevel and from another worktree (real git, the group's real stores): git.status,
git.diff, git.rebase-down, git.merge-up and ``sbox.run --dry-run`` act on worktree ``dev`` exactly as
they would run in it; a name that is no worktree is refused with the closest name and the command
that lists the worktrees, and nothing changes.  (git.push takes ``--feature BRANCH``, not ``--name``.)
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import git

# each task, its arguments after ``--name dev``, and what its output or the repos show when it acted on dev
TASKS = {
    "git.status": [],
    "git.diff": [],
    "git.rebase-down": [],
    "git.merge-up": [],
    "sbox.run": ["--dry-run", "--", "true"],
}


def prepared(g):
    """worktrees dev and other; dev: a commit and an uncommitted change in alpha; main moved after dev
    was made (something to rebase down)."""
    g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    g.inv(g.toplevel, "worktree.create", "--name", "other", "--no-venv")
    dev = g.path("dev")
    g.commit(dev / "alpha", "feature.txt", "from dev\n", "dev: a feature")
    (dev / "alpha" / "alpha.txt").write_text("line 1\nchanged in dev\nline 3\n")
    return dev


def all_refs_and_states(g) -> str:
    """Every ref of every store of the group, and each checkout's status: what a refusal must leave."""
    stores = [g.toplevel / ".git", g.toplevel / "alpha" / ".git", g.toplevel / "beta" / ".git",
              *sorted((g.grouping / ".chtop" / "git").glob("*/*.git"))]
    out = [f"{s}\n" + git(s, "--git-dir", str(s), "for-each-ref", "--format=%(refname) %(objectname)")
           for s in stores]
    for checkout in ("top/alpha", "top/beta", "dev/alpha", "dev/beta", "other/alpha", "other/beta"):
        out.append(checkout + "\n" + git(g.path(checkout), "status", "--porcelain", "--branch"))
    return "\n".join(out)


def acted_on_dev(g, task: str, proc: subprocess.CompletedProcess, dev) -> None:
    said = proc.stdout + proc.stderr
    if task == "git.status":
        assert "dev/alpha is 1 commit ahead of top/alpha (main branch)" in said, said
        assert "modified:   alpha.txt" in said, said                     # dev's checkout, not the caller's
    elif task == "git.diff":
        assert "+changed in dev" in said, said
    elif task == "git.rebase-down":
        assert (dev / "alpha" / "upstream.txt").read_text() == "moved here\n", said
        assert git(dev / "alpha", "log", "-1", "--format=%s") == "dev: a feature"
    elif task == "git.merge-up":
        assert git(g.toplevel / "alpha", "log", "-1", "--format=%s", "main") == "dev: a feature", said
        assert (g.toplevel / "alpha" / "feature.txt").read_text() == "from dev\n"
    elif task == "sbox.run":
        assert f"--workdir={dev}" in said, said                           # the sandbox of dev, in dev
        assert "chtop.worktree=dev" in said, said


@pytest.mark.parametrize("where", ["top", "other"])
@pytest.mark.parametrize("task", list(TASKS))
def test_a_task_given_the_name_of_a_worktree_here_acts_on_it_from_elsewhere(initialized, task, where):
    g = initialized
    dev = prepared(g)
    if task == "git.rebase-down":
        g.push_upstream_commit("alpha", "upstream.txt", "moved here\n")
    if task in ("git.rebase-down", "git.merge-up"):             # they move commits, and refuse a dirty tree
        git(dev / "alpha", "checkout", "--", "alpha.txt")
    caller = g.path(where)
    before_caller = git(caller / "alpha", "status", "--porcelain", "--branch")
    proc = g.inv(caller, task, "--name", "dev", *TASKS[task], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    acted_on_dev(g, task, proc, dev)
    if where == "other":
        assert git(caller / "alpha", "status", "--porcelain", "--branch") == before_caller
        assert git(caller / "alpha", "log", "-1", "--format=%s") == "alpha: initial"


@pytest.mark.parametrize("task", list(TASKS))
def test_a_name_that_is_no_worktree_is_refused_with_the_closest_and_how_to_list_them_changing_nothing(
        initialized, task):
    g = initialized
    prepared(g)
    g.push_upstream_commit("alpha", "upstream.txt", "moved here\n")
    before = all_refs_and_states(g)
    proc = g.inv(g.path("other"), task, "--name", "deb", *TASKS[task], check=False)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    said = proc.stderr
    assert f"no worktree 'deb' in {g.grouping}" in said and "did you mean 'dev'?" in said, said
    assert "inv worktree.list" in said, said
    assert "Traceback" not in said, said
    assert all_refs_and_states(g) == before
