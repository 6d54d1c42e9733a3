"""git.status / diff / rebase-down / merge-up across real repos."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, git


def test_status_headers_passthrough_and_relations(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a.txt", "x\n", "ahead 1")
    g.commit(dev / "alpha", "b.txt", "x\n", "ahead 2")
    g.push_upstream_commit("beta", "up.txt", "y\n")
    out = g.inv(dev, "git.status", "--", "-sb").stdout
    assert "==== dev  [$ git status -sb" in out
    assert "==== dev/alpha  [$ git status -sb" in out and "## dev" in out
    assert "dev/alpha is 2 commits ahead of top/alpha (main branch)" in out
    assert "dev/beta is 1 commit behind top/beta (kms branch)" in out
    assert "dev is" not in out   # the up-to-date container repo is dropped


def test_status_collapses_when_up_to_date_and_warns_off_branch(with_dev):
    g = with_dev
    dev = g.path("dev")
    out = g.inv(dev, "git.status").stdout
    assert "dev: all 3 repos up to date with their integration branches" in out
    git(dev / "beta", "checkout", "-q", "-b", "other")
    result = g.inv(dev, "git.status")
    assert "dev/beta is on branch 'other', expected 'dev'" in result.stderr


def test_status_exit_is_the_worst_of_the_repos(with_dev):
    result = with_dev.inv(with_dev.path("dev"), "git.status", "--", "--no-such-flag", check=False)
    assert result.returncode != 0
    assert result.stdout.count("unknown option") == 3 or result.stdout.count("no-such-flag") >= 3


def test_diff_passes_args_and_hides_clean_repos(with_dev):
    g = with_dev
    (g.path("dev", "beta", "beta.txt")).write_text("line 1\nchanged\n")
    out = g.inv(g.path("dev"), "git.diff", "--", "--stat").stdout
    assert "==== dev/beta  [$ git diff --stat" in out and "beta.txt" in out
    assert "==== dev/alpha" not in out
    assert "no differences in 3 repos" in g.inv(g.toplevel, "git.diff").stdout


def test_rebase_down_and_merge_up_land_linear_history(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.push_upstream_commit("alpha", "upstream.txt", "u\n")
    mine = g.commit(dev / "alpha", "mine.txt", "m\n", "feature work")
    dry = g.inv(dev, "git.rebase-down", "--dry-run").stdout
    assert "dev/alpha: 1 new commit(s) on main" in dry and "dev/beta: nothing to rebase" in dry
    assert git(dev / "alpha", "rev-parse", "HEAD") == mine
    rebased = g.inv(dev, "git.rebase-down", env={"TERM": "xterm"})   # git draws its progress for a terminal
    shown = rebased.stdout + rebased.stderr
    assert "Successfully rebased" in shown and "^M" not in shown and "^[[K" not in shown, shown   # progress as text
    assert git(dev / "alpha", "rev-list", "--count", "main..dev") == "1"
    assert git(dev / "alpha", "rev-list", "--count", "dev..main") == "0"
    out = g.inv(dev, "git.merge-up").stdout
    assert "dev/alpha: 1 commit(s) to land on main" in out and "dev/beta: nothing to land" in out
    assert git(g.toplevel / "alpha", "rev-parse", "main") == git(dev / "alpha", "rev-parse", "dev")
    assert git(g.toplevel / "alpha", "rev-list", "--merges", "--count", "main") == "0"


def test_rebase_passes_quoted_args_exactly(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.push_upstream_commit("alpha", "upstream.txt", "u\n")
    g.commit(dev / "alpha", "mine.txt", "m\n", "feature work")
    marker = g.base / "exec ran"
    g.inv(dev, "git.rebase-down", "--", "--exec", f"touch '{marker}'")
    assert marker.exists()


def test_rebase_conflict_stops_leaves_repo_mid_rebase_no_rollback(with_dev):
    g = with_dev
    dev = g.path("dev")
    # container: a clean rebase that must stay done
    g.commit(g.toplevel, "top-up.txt", "u\n", "upstream container change")
    g.commit(dev, "mine-top.txt", "m\n", "feature container change")
    # alpha: a conflict
    g.push_upstream_commit("alpha", "alpha.txt", "line 1\nupstream\nline 3\n")
    g.commit(dev / "alpha", "alpha.txt", "line 1\nmine\nline 3\n", "conflicting change")
    result = g.inv(dev, "git.rebase-down", check=False)
    assert result.returncode == 1
    assert "rebase stopped in dev/alpha" in result.stderr
    assert f"cd {dev / 'alpha'}" in result.stderr and "git rebase --continue" in result.stderr
    assert "git rebase --abort" in result.stderr
    assert git(dev, "rev-list", "--count", "dev..main") == "0"          # container rebased, kept
    assert (g.path(".chtop", "git", "dev", "alpha.git", "worktrees")).is_dir()
    state = git(dev / "alpha", "status")
    assert "rebase in progress" in state or "interactive rebase in progress" in state
    # running it again is refused before touching anything
    again = g.inv(dev, "git.rebase-down", check=False)
    assert again.returncode == 3 and "a rebase is in progress" in again.stderr


def test_merge_up_refuses_when_integration_moved(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a.txt", "x\n", "feature")
    g.commit(dev / "beta", "b.txt", "x\n", "feature")
    moved = g.push_upstream_commit("beta", "up.txt", "y\n")
    before_alpha = git(g.toplevel / "alpha", "rev-parse", "main")
    result = g.inv(dev, "git.merge-up", check=False)
    assert result.returncode == 3
    assert "dev/beta: kms moved (1 new commit(s)) since you rebased; run `inv git.rebase-down`" in result.stderr
    assert git(g.toplevel / "alpha", "rev-parse", "main") == before_alpha   # nothing landed
    assert git(g.toplevel / "beta", "rev-parse", "kms") == moved
    # --no-ff makes merge commits instead
    g.inv(dev, "git.merge-up", "--no-ff")
    assert git(g.toplevel / "beta", "rev-list", "--merges", "--count", "kms") == "1"


def test_rebase_and_merge_refuse_in_toplevel_and_on_dirty_trees(with_dev):
    g = with_dev
    for task in ("git.rebase-down", "git.merge-up"):
        result = g.inv(g.toplevel, task, check=False)
        assert result.returncode == 3 and "not the toplevel" in result.stderr
    (g.path("dev", "beta", "beta.txt")).write_text("dirty\n")
    g.push_upstream_commit("alpha", "u.txt", "u\n")
    result = g.inv(g.path("dev"), "git.rebase-down", check=False)
    assert result.returncode == 3 and "dev/beta: uncommitted changes" in result.stderr
    assert git(g.path("dev", "alpha"), "rev-list", "--count", "dev..main") == "1"   # untouched


def test_rebase_down_rerenders_dotfiles(with_dev):
    g = with_dev
    envrc = g.path("dev", ".envrc")
    envrc.write_text("stale\n")
    out = g.inv(g.path("dev"), "git.rebase-down").stdout
    assert "PYTHONSAFEPATH=1" in envrc.read_text()
    assert "re-rendered dotfiles: dev/.envrc" in out
    assert "re-rendered" not in g.inv(g.path("dev"), "git.rebase-down").stdout


def test_git_commands_refuse_a_tampered_checkout(with_dev, tmp_path):
    g = with_dev
    evil = tmp_path / "evil"
    git(tmp_path, "init", "-q", str(evil))
    (evil / ".git" / "config").write_text("[core]\n\tfsmonitor = touch " + str(tmp_path / "pwned") + "\n")
    g.path("dev", "alpha", ".git").write_text(f"gitdir: {evil / '.git'}\n")
    result = g.inv(g.path("dev"), "git.status", check=False)
    assert result.returncode == 2 and "refusing to run git" in result.stderr
    assert not (tmp_path / "pwned").exists()


def test_chtops_own_rebase_down_is_no_rewrite_inside(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "mine.txt", "m\n", "feature work")
    g.inv(dev, "git.status")                           # imported: top/alpha has dev at the old tip
    g.push_upstream_commit("alpha", "upstream.txt", "u\n")
    g.inv(dev, "git.rebase-down")
    rebased = git(dev / "alpha", "rev-parse", "dev")
    after = g.inv(dev, "git.status")
    assert "rewritten inside" not in after.stderr
    assert git(g.toplevel / "alpha", "rev-parse", "dev") == rebased
    assert git(g.toplevel / "alpha", "for-each-ref", "refs/chtop/kept") == ""


def test_delete_drops_kept_tips_whose_commits_landed_and_says_what_it_keeps(with_dev):
    g = with_dev
    dev = g.path("dev")
    first = g.commit(dev / "alpha", "mine.txt", "m\n", "feature work")
    g.inv(dev, "git.status")
    git(dev / "alpha", "commit", "-q", "--amend", "-m", "feature work, reworded")  # same patch
    amended = g.inv(dev, "git.status")
    assert f"refs/chtop/kept/dev/{first}" in amended.stderr          # an agent's rewrite is still kept
    lost = g.commit(dev / "beta", "lost.txt", "l\n", "beta work dropped later")
    g.inv(dev, "git.status")
    git(dev / "beta", "reset", "-q", "--hard", "HEAD~")
    g.commit(dev / "beta", "other.txt", "o\n", "other beta work")
    g.inv(dev, "git.status")
    g.inv(dev, "git.merge-up")
    result = g.inv(g.toplevel, "worktree.delete", "--name", "dev")
    assert git(g.toplevel / "alpha", "for-each-ref", "refs/chtop/kept") == ""
    assert f"top/alpha: dropped refs/chtop/kept/dev/{first} (its commits are all in main" in result.stdout
    assert git(g.toplevel / "beta", "rev-parse", f"refs/chtop/kept/dev/{lost}") == lost
    assert f"kept top/beta: refs/chtop/kept/dev/{lost} (an earlier tip of dev: 1 commit not in kms" in result.stderr


def test_merge_up_checks_every_toplevel_checkout_before_any_repo_moves(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a.txt", "x\n", "feature")
    g.commit(dev / "beta", "beta.txt", "feature\n", "feature")
    tips = {repo: git(g.toplevel / repo, "rev-parse", "HEAD") for repo in ("alpha", "beta")}
    top_beta = g.toplevel / "beta"            # the last repo of the manifest
    (top_beta / "beta.txt").write_text("uncommitted in the toplevel\n")
    result = g.inv(dev, "git.merge-up", check=False)
    assert result.returncode == 3, result.stderr
    assert "top/beta: uncommitted changes to beta.txt, which the merge changes" in result.stderr
    assert {repo: git(g.toplevel / repo, "rev-parse", "HEAD") for repo in ("alpha", "beta")} == tips
    (top_beta / "beta.txt").write_text("line 1\nline 2\nline 3\n")
    # a leftover index.lock, a merge in progress, another branch: each named, nothing moves
    (top_beta / ".git" / "index.lock").write_text("")
    result = g.inv(dev, "git.merge-up", check=False)
    assert result.returncode == 3 and "top/beta: a leftover" in result.stderr and "index.lock" in result.stderr
    (top_beta / ".git" / "index.lock").unlink()
    (top_beta / ".git" / "MERGE_HEAD").write_text(tips["beta"] + "\n")
    result = g.inv(dev, "git.merge-up", check=False)
    assert result.returncode == 3 and "top/beta: a merge is in progress" in result.stderr
    (top_beta / ".git" / "MERGE_HEAD").unlink()
    git(top_beta, "checkout", "-q", "-b", "side")
    result = g.inv(dev, "git.merge-up", check=False)
    assert result.returncode == 3 and "top/beta: has side checked out" in result.stderr
    assert {repo: git(g.toplevel / repo, "rev-parse", repo_branch) for repo, repo_branch
            in (("alpha", "main"), ("beta", "kms"))} == tips
    git(top_beta, "checkout", "-q", "kms")
    g.inv(dev, "git.merge-up")
    assert git(top_beta, "rev-parse", "kms") == git(dev / "beta", "rev-parse", "dev")


def test_diff_integration_shows_each_repos_work_against_its_own_branch(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "beta", "feature.txt", "feature\n", "feature on kms")
    g.push_upstream_commit("beta", "upstream.txt", "u\n")         # kms moved: not part of the feature
    g.inv(dev, "git.status")
    (dev / "alpha" / "alpha.txt").write_text("uncommitted\n")
    out = g.inv(dev, "git.diff", "--integration", "--", "--stat").stdout
    assert "==== dev/beta  [$ git diff --merge-base kms --stat" in out and "feature.txt" in out
    assert "upstream.txt" not in out
    assert "==== dev/alpha  [$ git diff --merge-base main --stat" in out and "alpha.txt" in out
    assert "==== dev  [" not in out                                 # nothing in the container repo
    clean = g.inv(g.toplevel, "git.diff", "--integration").stdout
    assert "no differences against the integration branches in 3 repos" in clean


def test_status_in_the_toplevel_shows_the_whole_group(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a.txt", "x\n", "ahead")
    git(dev / "beta", "checkout", "-q", "-b", "other")
    result = g.inv(g.toplevel, "git.status")
    assert "dev/alpha is 1 commit ahead of top/alpha (main branch)" in result.stdout
    assert "dev/beta is on branch 'other', expected 'dev'" in result.stderr
    git(g.toplevel / "beta", "checkout", "-q", "-b", "side")
    from_dev = g.inv(dev, "git.status")
    assert "top/beta is on branch 'side', expected 'kms'" in from_dev.stderr


def test_merge_up_says_what_landed(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a.txt", "x\n", "one")
    g.commit(dev / "beta", "b1.txt", "x\n", "two")
    g.commit(dev / "beta", "b2.txt", "x\n", "three")
    assert "landed dev: alpha 1, beta 2 commits" in g.inv(dev, "git.merge-up").stdout
    assert "landed nothing: every integration branch already has dev" in g.inv(dev, "git.merge-up").stdout


def test_merge_up_heads_each_repos_git_output_with_the_repo_it_came_from(with_dev):
    """The fast-forwards run at once; each repo's output (git's "Updating ..", its diffstat) comes under
    a line naming that repo, in plan order, so a line is never of an unknown repo."""
    g = with_dev
    dev = g.path("dev")
    g.commit(dev, "c.txt", "x\n", "container")
    g.commit(dev / "alpha", "a.txt", "x\n", "one")
    g.commit(dev / "beta", "b.txt", "x\n", "two")
    out = g.inv(dev, "git.merge-up").stdout
    blocks = {block.split("\n", 1)[0].strip(): block for block in out.split("==== ")[1:]}
    assert list(blocks)[:3] == ["top", "top/alpha", "top/beta"]
    assert "c.txt" in blocks["top"] and "a.txt" in blocks["top/alpha"] and "b.txt" in blocks["top/beta"]
    assert "a.txt" not in blocks["top/beta"] and "b.txt" not in blocks["top/alpha"]
    g.commit(dev / "alpha", "a2.txt", "x\n", "one more")
    g.commit(dev / "beta", "b2.txt", "x\n", "two more")
    out = g.inv(dev, "git.merge-up", "--no-ff").stdout                # one repo at a time: the same
    blocks = {block.split("\n", 1)[0].strip(): block for block in out.split("==== ")[1:]}
    assert list(blocks)[:2] == ["top/alpha", "top/beta"] and "a2.txt" in blocks["top/alpha"]


def test_merge_up_counts_a_line_of_commits_and_one_past_a_merge(with_dev, capsys):
    """A feature that is a line of commits on its integration tip, and one with a merge in it, are
    counted as ``rev-list`` counts them."""
    from chtop_tasks.gitloop import merge
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a1.txt", "x\n", "one")
    g.commit(dev / "alpha", "a2.txt", "x\n", "two")
    git(dev / "beta", "checkout", "-q", "-b", "side")
    g.commit(dev / "beta", "side.txt", "x\n", "side")
    git(dev / "beta", "checkout", "-q", "dev")
    g.commit(dev / "beta", "b.txt", "x\n", "on dev")
    git(dev / "beta", "merge", "-q", "--no-ff", "--no-edit", "side")
    assert merge.merge_up(find_workspace(dev)) == 0
    assert "landed dev: alpha 2, beta 3 commits" in capsys.readouterr().out


def test_dotfiles_render_without_jinja_as_jinja_does(tmp_path):
    """The shipped templates (only ``{{ name }}``) are rendered without importing Jinja, to the same
    text; any other markup, a name the context lacks, or a Jinja literal goes to Jinja."""
    from chtop_tasks.workspace.dotfiles import TEMPLATE_DIR, render_jinja, render_plain, render_text, template_files

    context = {"root": "/home/u/ch/dev"}
    shipped = template_files(REPO_ROOT / TEMPLATE_DIR)
    assert shipped
    for template in shipped:
        source = template.read_text()
        assert render_plain(source, context) == render_jinja(source, context) != source
    for source in ("{% if root %}x{% endif %}\n", "{{ root | upper }}\n", "{# note #}{{ root }}", "{{root}} }}",
                   "{{ missing }}", "{{ true }}", "{{- root }}"):
        assert render_plain(source, {**context, "true": "t"}) is None, source
    assert render_plain("a {{root}} b {{ root }}\n", context) == "a /home/u/ch/dev b /home/u/ch/dev\n"
    odd = tmp_path / "odd.j2"
    odd.write_text("{% for x in 'ab' %}{{ x }}{{ root }}{% endfor %}\n")
    assert render_text(odd, context) == "a/home/u/ch/devb/home/u/ch/dev\n"
    odd.write_text("{{ missing }}")
    with pytest.raises(Exception, match="missing"):
        render_text(odd, context)


def test_merge_up_asks_for_attribute_drivers_only_where_an_attributes_file_lands(with_dev, tmp_path):
    """A nested ``.gitattributes`` that routes files through a driver of the toplevel's config is
    refused (dry run too); where the landed commits touch no ``.gitattributes``, neither the config
    nor the attribute diff is asked."""
    g = with_dev
    dev = g.path("dev")
    git(g.toplevel / "alpha", "config", "filter.x.clean", "cat")
    git(g.toplevel / "beta", "config", "filter.x.clean", "cat")
    (dev / "alpha" / "sub").mkdir()
    g.commit(dev / "alpha", "sub/.gitattributes", "*.txt filter=x\n", "route files through x")
    g.commit(dev / "beta", "b.txt", "x\n", "no attributes")
    env, log = git_logged(tmp_path)
    result = g.inv(dev, "git.merge-up", "--dry-run", check=False, env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "sub/.gitattributes adds `*.txt filter=x`" in result.stderr, result.stderr
    asked = [line for line in log.read_text().splitlines() if "--get-regexp" in line]
    assert len(asked) == 1 and asked[0].startswith(f"{g.toplevel / 'alpha'} "), asked
    git(dev / "alpha", "reset", "-q", "--hard", "HEAD~1")
    g.commit(dev / "alpha", "a.txt", "x\n", "no attributes either")
    log.write_text("")
    g.inv(dev, "git.merge-up", env=env)
    assert "--get-regexp" not in log.read_text()
    assert git(g.toplevel / "beta", "log", "-1", "--format=%s", "kms") == "no attributes"


def git_logged(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An env whose ``git`` logs ``$PWD $*`` to the returned file, then runs the real one."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\necho "$PWD $*" >> {shim}/log\nexec {shutil.which("git")} "$@"\n')
    (shim / "git").chmod(0o755)
    (shim / "log").write_text("")
    return {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}, shim / "log"


def test_merge_up_finds_what_lands_in_packed_stores_a_rename_both_ways_and_a_quoted_name(with_dev, tmp_path):
    """The toplevel stores packed (as a clone leaves them): the dry run finds the paths each landing
    changes with one ``git diff-tree`` per repo that lands -- a rename as both of its paths (the
    merge changes both), a name git quotes as ``git status`` shows it -- so the checkout checks
    see an uncommitted change to a renamed file and untracked files in the way; then it lands."""
    g = with_dev
    dev = g.path("dev")
    for repo in ("alpha", "beta"):
        subprocess.run(["git", "repack", "-adq"], cwd=g.toplevel / repo, check=True)
        subprocess.run(["git", "prune-packed"], cwd=g.toplevel / repo, check=True)
    git(dev / "alpha", "mv", "alpha.txt", "moved.txt")
    (dev / "alpha" / "caf\u00e9.txt").write_text("quoted by git\n")
    git(dev / "alpha", "add", "-A")
    g.commit(dev / "alpha", "landing.txt", "x\n", "a rename and files that land")
    g.commit(dev / "beta", "b.txt", "x\n", "another")
    top_alpha = g.toplevel / "alpha"
    (top_alpha / "alpha.txt").write_text("changed where the rename lands\n")
    (top_alpha / "landing.txt").write_text("in the way\n")
    (top_alpha / "caf\u00e9.txt").write_text("in the way too\n")
    env, log = git_logged(tmp_path)
    result = g.inv(dev, "git.merge-up", "--dry-run", check=False, env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "top/alpha: uncommitted changes to alpha.txt, which the merge changes" in result.stderr, result.stderr
    assert "landing.txt" in result.stderr and '"caf\\303\\251.txt"' in result.stderr, result.stderr
    assert "would be overwritten by the merge" in result.stderr
    diffs = [line for line in log.read_text().splitlines() if " diff-tree " in line or " diff " in line]
    assert sorted(line.split()[0] for line in diffs) == [str(top_alpha), str(g.toplevel / "beta")], diffs
    git(top_alpha, "checkout", "--", "alpha.txt")
    for name in ("landing.txt", "caf\u00e9.txt"):
        (top_alpha / name).unlink()
    g.inv(dev, "git.merge-up")
    assert git(top_alpha, "log", "-1", "--format=%s") == "a rename and files that land"
    assert not (top_alpha / "alpha.txt").exists() and (top_alpha / "moved.txt").is_file()


def test_the_outcome_checks_read_refs_where_the_branch_is_at_its_integration_tip(with_dev, monkeypatch):
    """After a rebase-down that leaves a branch at its integration tip, and a merge-up that
    fast-forwards the integration branch to the landed tip, the outcome checks answer from the ref
    files; anything else (a commit of its own, a tip not landed) is git's answer, so a result other
    than the plan's is still caught."""
    from chtop_tasks.core import runner
    from chtop_tasks.gitloop.merge import relation_in_toplevel
    from chtop_tasks.gitloop.rebase import relation_after_rebase
    from chtop_tasks.stores.quarantine import sync_worktree
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    dev = g.path("dev")
    ws = find_workspace(dev)
    alpha = next(c for c in ws.checkouts() if c.name == "alpha")
    calls = []
    real = runner.run
    monkeypatch.setattr(runner, "run", lambda argv, *a, **k: calls.append(list(argv)) or real(argv, *a, **k))
    at_tip = relation_after_rebase(ws, alpha)
    assert (at_tip.ahead, at_tip.behind, at_tip.off_branch) == (0, 0, False) and calls == []
    tip = g.commit(dev / "alpha", "a.txt", "x\n", "own work")
    ahead = relation_after_rebase(ws, alpha)
    assert (ahead.ahead, ahead.behind) == (1, 0) and any("rev-list" in argv for argv in calls)
    g.push_upstream_commit("alpha", "up.txt", "up\n")
    calls.clear()
    behind = relation_after_rebase(ws, alpha)       # the private copy of main is not refreshed: git says
    assert (behind.ahead, behind.behind) == (1, 0) and calls
    landed = git(g.toplevel / "alpha", "rev-parse", "HEAD")
    calls.clear()
    assert (relation_in_toplevel(ws, alpha, {"alpha": landed}).ahead, calls) == (0, [])
    sync_worktree(ws)                                           # dev's tip imported, not landed
    not_landed = relation_in_toplevel(ws, alpha, {"alpha": tip})
    assert not_landed.ahead == 1 and calls


def test_merge_up_lands_only_the_commits_it_checked_when_the_import_moves_the_branch_meanwhile(
        with_dev, monkeypatch):
    """The proxy's import (under the worktree's lock alone) can move branch NAME in the toplevel's
    store while merge-up runs.  Here it imports, just as merge-up reads the tips to land, a commit
    whose ``.gitattributes`` routes files through a driver of your config: merge-up must check that
    very commit and refuse, landing nothing (it used to check NAME first and read the tips after,
    so the unchecked commit landed)."""
    from chtop_tasks.core.errors import Refused
    from chtop_tasks.gitloop import merge
    from chtop_tasks.stores.quarantine import sync_worktree
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    dev = g.path("dev")
    git(g.toplevel / "alpha", "config", "filter.x.clean", "cat")
    g.commit(dev / "alpha", "a.txt", "checked\n", "a commit merge-up checks")
    before = git(g.toplevel / "alpha", "rev-parse", "main")
    ws = find_workspace(dev)
    read_tip = merge.read_ref

    def import_meanwhile(store, name):
        if store == g.toplevel / "alpha" / ".git" and name == "refs/heads/dev":
            g.commit(dev / "alpha", ".gitattributes", "*.txt filter=x\n", "route files through x")
            sync_worktree(ws)                    # what the proxy's import timer does
        return read_tip(store, name)

    monkeypatch.setattr(merge, "read_ref", import_meanwhile)
    with pytest.raises(Refused, match=r"\.gitattributes adds `\*\.txt filter=x`"):
        merge.merge_up(ws)
    assert git(g.toplevel / "alpha", "rev-parse", "main") == before      # nothing landed


def test_relations_count_a_line_either_way_and_branches_that_diverged(with_dev):
    """A worktree branch behind its integration branch by a line of commits, ahead of it, or
    diverged from it, is counted as ``rev-list --left-right --count`` says."""
    from chtop_tasks.gitloop import status
    from chtop_tasks.stores.quarantine import sync_worktree
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    dev = g.path("dev")
    ws = find_workspace(dev)
    g.commit(g.toplevel / "alpha", "up1.txt", "1\n", "upstream one")
    g.commit(g.toplevel / "alpha", "up2.txt", "2\n", "upstream two")
    g.commit(dev / "beta", "b.txt", "b\n", "feature")
    sync_worktree(ws)
    by_name = {rel.checkout.name: (rel.ahead, rel.behind) for rel in status.relations(ws)}
    assert by_name["alpha"] == (0, 2) and by_name["beta"] == (1, 0) and by_name[""] == (0, 0)
    g.commit(dev / "alpha", "a.txt", "a\n", "diverged")
    sync_worktree(ws)
    assert {r.checkout.name: (r.ahead, r.behind) for r in status.relations(ws)}["alpha"] == (1, 2)


def test_a_rebase_conflict_finished_by_hand_as_told_is_imported_without_a_warning_or_kept_ref(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "mine.txt", "m\n", "mine first")
    g.commit(dev / "alpha", "alpha.txt", "line 1\nmine\nline 3\n", "conflicting change")
    g.inv(dev, "git.status")                                            # imported: the old tip is shared
    g.push_upstream_commit("alpha", "alpha.txt", "line 1\nupstream\nline 3\n")
    assert g.inv(dev, "git.rebase-down", check=False).returncode == 1
    (dev / "alpha" / "alpha.txt").write_text("line 1\nresolved\nline 3\n")
    git(dev / "alpha", "add", "alpha.txt")
    subprocess.run(["git", "-c", "core.editor=true", "rebase", "--continue"], cwd=dev / "alpha", check=True,
                   capture_output=True)
    after = g.inv(dev, "git.status")                                     # the next chtop task, as the docs say
    assert "rewritten inside" not in after.stderr and "kept" not in after.stderr, after.stderr
    assert git(g.toplevel / "alpha", "for-each-ref", "refs/chtop/kept") == ""
    assert git(g.toplevel / "alpha", "rev-parse", "dev") == git(dev / "alpha", "rev-parse", "HEAD")
    # a rewrite that drops a commit of the series is no finished rebase: its old tip is kept
    old = git(dev / "alpha", "rev-parse", "HEAD")
    git(dev / "alpha", "reset", "-q", "--hard", "HEAD~1")
    dropped = g.inv(dev, "git.status")
    assert "rewritten inside" in dropped.stderr
    assert old in git(g.toplevel / "alpha", "for-each-ref", "--format=%(objectname)", "refs/chtop/kept")


def test_what_lands_is_read_against_every_merge_base_or_the_branch_itself_without_one(tmp_path):
    """A criss-cross history (two merge bases): the changes seen are those since each base; an
    unrelated history (none): those against the integration branch itself."""
    from chtop_tasks.gitloop.landing import changes_since_fork

    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))

    def commit(name: str) -> None:
        (repo / name).write_text(f"{name}\n")
        git(repo, "add", name)
        git(repo, "commit", "-q", "-m", name)

    commit("base.txt")
    git(repo, "branch", "feature")
    commit("main-1.txt")
    git(repo, "checkout", "-q", "feature")
    commit("feature-1.txt")
    git(repo, "merge", "-q", "--no-edit", "main")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-edit", "feature~1")
    commit("main-2.txt")
    git(repo, "checkout", "-q", "feature")
    commit("feature-2.txt")
    assert len(git(repo, "merge-base", "--all", "main", "feature").split()) == 2
    paths = {change.path for change in changes_since_fork(repo, "main", "feature")}
    assert paths == {"main-1.txt", "feature-1.txt", "feature-2.txt"}, paths
    git(repo, "checkout", "-q", "--orphan", "unrelated")
    git(repo, "rm", "-q", "-rf", ".")
    commit("alone.txt")
    changes = {change.path: change.new_mode for change in changes_since_fork(repo, "main", "unrelated")}
    assert changes == {"alone.txt": "100644", "base.txt": "000000", "main-1.txt": "000000",
                       "feature-1.txt": "000000", "main-2.txt": "000000"}, changes


def test_status_counts_with_git_where_the_integration_branchs_name_is_also_a_tag(with_dev):
    """A worktree at its integration tip is up to date without asking git; but where a tag (or
    another ref) has the integration branch's name, git reads that name as the tag, and status says
    what git says."""
    g = with_dev
    dev = g.path("dev")
    assert "dev: all 3 repos up to date" in g.inv(dev, "git.status").stdout
    g.commit(dev / "alpha", "tagged.txt", "x\n", "a commit only the tag keeps")
    git(dev / "alpha", "tag", "main")
    git(dev / "alpha", "reset", "-q", "--hard", "HEAD~1")      # the branch back at its integration tip
    out = g.inv(dev, "git.status").stdout
    assert "dev/alpha is 1 commit behind top/alpha (main branch)" in out, out
