"""The git loop's plans, built from data: no repos, no processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chtop_tasks.core.gitrun import HOST_GIT_OPTS
from chtop_tasks.gitloop.merge import landed_on_integration, plan_merge_up
from chtop_tasks.gitloop.rebase import plan_rebase_down, rebased_onto_integration
from chtop_tasks.gitloop.status import Relation
from chtop_tasks.gitloop.steps import GitStep, run_steps
from chtop_tasks.workspace.layout import Checkout, Workspace
from chtop_tasks.workspace.manifest import Manifest, Repo

GROUP = Path("/g")


def workspace(name="dev") -> Workspace:
    manifest = Manifest(Path("/g/top/git_repositories.toml"),
                        (Repo(name="alpha", url="file:///a", branch="main"),
                         Repo(name="beta", url="file:///b", branch="kms")))
    return Workspace(GROUP, GROUP / "top", GROUP / name, manifest)


def rel(ws: Workspace, repo: str, ahead: int, behind: int, branch="dev", integration="main") -> Relation:
    path = ws.root / repo if repo else ws.root
    store = (ws.toplevel / repo if repo else ws.toplevel) / ".git"
    return Relation(Checkout(repo, path, store), branch, integration, ahead, behind, "dev")


def test_rebase_down_plans_only_repos_behind_their_integration_branch():
    ws = workspace()
    rels = [rel(ws, "", 1, 0), rel(ws, "alpha", 0, 2), rel(ws, "beta", 3, 1, integration="kms")]
    steps = plan_rebase_down(ws, rels, ["--exec", "make test"])
    assert [(s.checkout.name, s.cwd, s.argv) for s in steps] == [
        ("alpha", GROUP / "dev" / "alpha", ["git", *HOST_GIT_OPTS, "rebase", "--exec", "make test", "main"]),
        ("beta", GROUP / "dev" / "beta", ["git", *HOST_GIT_OPTS, "rebase", "--exec", "make test", "kms"]),
    ]
    assert "2 new commit(s) on main" in steps[0].note


def test_merge_up_runs_in_the_toplevel_checkout_of_each_repo_ahead():
    ws = workspace()
    rels = [rel(ws, "", 1, 0), rel(ws, "alpha", 0, 0), rel(ws, "beta", 2, 0, integration="kms")]
    steps = plan_merge_up(ws, rels, no_ff=False)
    assert [(s.cwd, s.argv) for s in steps] == [
        (GROUP / "top", ["git", "merge", "--ff-only", "dev"]),
        (GROUP / "top" / "beta", ["git", "merge", "--ff-only", "dev"]),
    ]
    no_ff = plan_merge_up(ws, rels, no_ff=True)
    assert no_ff[0].argv == ["git", "merge", "--no-ff", "--no-edit", "dev"]


def test_nothing_to_do_plans_nothing():
    ws = workspace()
    rels = [rel(ws, "", 0, 0), rel(ws, "alpha", 0, 0)]
    assert plan_rebase_down(ws, rels, []) == [] and plan_merge_up(ws, rels, no_ff=False) == []


def test_outcome_checks_name_what_is_not_as_planned():
    ws = workspace()
    assert rebased_onto_integration(ws, rel(ws, "alpha", 2, 0)) is None
    assert "still 1 commit(s) behind main" in rebased_onto_integration(ws, rel(ws, "alpha", 2, 1))
    assert "expected 'dev'" in rebased_onto_integration(ws, rel(ws, "alpha", 0, 0, branch=None))
    assert landed_on_integration(ws, rel(ws, "alpha", 0, 0)) is None
    assert "main still lacks 2 commit(s) of dev" in landed_on_integration(ws, rel(ws, "alpha", 2, 0))


def test_create_plans_one_checkout_per_repo_from_what_the_probes_found():
    import pytest

    from chtop_tasks.core.errors import Refused
    from chtop_tasks.workspace.worktrees import steps_for_create

    top = workspace("top")
    ws = top
    integration = {"": "main", "alpha": "main", "beta": "kms"}
    branches = {"": {"main": "c0"}, "alpha": {"main": "a1", "feat": "a2"}, "beta": {"kms": "b1"}}
    steps = steps_for_create(ws, top, "feat", integration, branches)
    assert [(s.checkout.name, s.checkout.path, s.main_dir, s.start, s.tip, s.reuse_branch) for s in steps] == [
        ("", GROUP / "feat", GROUP / "top", "main", "c0", False),
        ("alpha", GROUP / "feat" / "alpha", GROUP / "top" / "alpha", "main", "a2", True),   # kept by a delete
        ("beta", GROUP / "feat" / "beta", GROUP / "top" / "beta", "kms", "b1", False),
    ]
    assert steps[1].store == GROUP / ".chtop" / "git" / "feat" / "alpha.git"
    with pytest.raises(Refused, match="has no branch 'kms'"):
        steps_for_create(ws, top, "feat", integration, {**branches, "beta": {"main": "b0"}})


def test_steps_at_once_all_run_echoed_first_shown_in_plan_order_and_the_first_failure_is_raised(tmp_path, capsys):
    """Fast-forwards run at the same time: every one runs (a later one's failure does not stop an
    earlier one), the commands are echoed before any output, the output comes in plan order, made
    inert, and the failure raised is the first in plan order."""
    def step(name: str, script: str) -> GitStep:
        return GitStep(Checkout(name, tmp_path, tmp_path), tmp_path, [sys.executable, "-c", script], name)
    steps = [step("one", "import time; time.sleep(0.3); print('one ran'); open('one', 'w')"),
             step("two", "import sys; print('two \\x1b]0;title\\x07 failed'); sys.exit(1)"),
             step("three", "import sys; print('three ran'); open('three', 'w'); sys.exit(2)")]
    with pytest.raises(RuntimeError, match="^two$"):
        run_steps(steps, lambda s: RuntimeError(s.note), at_once=True)
    out, err = capsys.readouterr()
    assert (tmp_path / "one").exists() and (tmp_path / "three").exists()
    assert out.index("one ran") < out.index("two") < out.index("three ran")
    assert "\x1b]" not in out and "\x07" not in out                   # inert
    assert err.count("$ ") == 3 and err.index("time.sleep") < err.index("sys.exit(1)")
