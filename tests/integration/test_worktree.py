"""toplevel.init and worktree.create/delete/list on real repos with local bare remotes."""

import os
import subprocess
from pathlib import Path

import pytest
from conftest import git, require_tool

from chtop_tasks.core.errors import CommandFailed, Refused, UsageError
from chtop_tasks.workspace.layout import find_workspace
from chtop_tasks.workspace.toplevel import init_toplevel
from chtop_tasks.workspace.worktrees import create_worktree, delete_worktree


def branches(path):
    return git(path, "branch", "--format=%(refname:short)").split()


def test_init_clones_on_manifest_branches_and_is_idempotent(group):
    result = group.inv(group.toplevel, "toplevel.init", "--no-venv")
    assert "alpha: cloned (main)" in result.stdout and "beta: cloned (kms)" in result.stdout
    assert git(group.toplevel / "beta", "branch", "--show-current") == "kms"
    assert (group.toplevel / ".envrc").exists()
    assert git(group.toplevel, "status", "--porcelain") == ""   # sub-repos and dotfiles ignored
    # each clone gets a commit-graph (the imports and ahead/behind counts walk commits through it)
    for repo in (group.toplevel, group.toplevel / "alpha", group.toplevel / "beta"):
        assert (repo / ".git" / "objects" / "info" / "commit-graph").is_file(), repo
        assert git(repo, "commit-graph", "verify") == ""
    again = group.inv(group.toplevel, "toplevel.init", "--no-venv")
    assert "nothing to do" in again.stdout
    assert "$ git clone" not in again.stderr and "commit-graph" not in again.stderr


def test_init_leaves_a_clone_on_another_branch_alone(initialized):
    g = initialized
    git(g.toplevel / "alpha", "checkout", "-q", "-b", "elsewhere")
    result = g.inv(g.toplevel, "toplevel.init", "--no-venv")
    assert "alpha: on elsewhere, not the manifest's 'main'; leaving it alone" in result.stderr
    assert git(g.toplevel / "alpha", "branch", "--show-current") == "elsewhere"


def test_init_refused_in_a_worktree(with_dev):
    with pytest.raises(Refused, match="runs in the toplevel"):
        init_toplevel(find_workspace(with_dev.path("dev")))


def test_create_makes_worktrees_branches_dotfiles_and_hints(initialized):
    g = initialized
    result = g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    dev = g.path("dev")
    for repo in ("", "alpha", "beta"):
        assert git(dev / repo, "branch", "--show-current") == "dev"
    assert git(dev / "beta", "rev-parse", "HEAD") == git(g.toplevel / "beta", "rev-parse", "kms")
    assert f'export VIRTUAL_ENV="{dev}/.venv"' in (dev / ".envrc").read_text()
    assert f'{dev}/.venv/bin:$PATH' in (dev / ".claude" / "env.sh").read_text()
    assert git(dev, "status", "--porcelain") == ""
    assert "direnv allow" in result.stdout and "inv session.start && inv session.attach" in result.stdout
    assert "tmux new" not in result.stdout and "/login" in result.stdout
    assert "worktree add -b dev" in result.stderr   # commands are echoed


@pytest.mark.parametrize("name, why", [
    ("..", "must not be"), ("a/b", "must not contain '/'"), ("-x", "must not start with '-'"),
    (".x", "must not start with '.'"), ("a b", "may only contain"), ("top", "reserved"),
    ("claude", "reserved"), ("extern", "reserved"), ("x.lock", "not a valid git branch name"),
    ("a..b", "not a valid git branch name"), ("fix+1", "may only contain"), ("x" * 65, "at most 64"),
])
def test_bad_names_are_refused_and_nothing_is_created(initialized, name, why):
    g = initialized
    before = sorted(os.listdir(g.grouping))
    with pytest.raises(UsageError, match=why):
        create_worktree(find_workspace(g.toplevel), name)
    assert sorted(os.listdir(g.grouping)) == before
    assert branches(g.toplevel / "alpha") == ["main"]


def test_one_name_rule_for_create_the_proxy_and_the_sandbox():
    """A name worktree.create accepts is one the proxy's sockets and policy layers accept, and back."""
    from chtop_tasks.core.places import check_worktree_name, worktree_name_problem
    from chtop_tasks.proxy.policy import list_path

    for name in ("dev", "fix-1", "a.b_c", "x" * 64, "fix+1", "x" * 65, ".x", "a..b"):
        ok = worktree_name_problem(name) is None
        try:
            check_worktree_name(name)
            list_path(Path("/p"), "allow", name)
            proxy_ok = True
        except UsageError:
            proxy_ok = False
        assert ok == proxy_ok, name


def test_existing_path_is_refused(initialized):
    g = initialized
    (g.path("dev")).mkdir()
    result = g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv", check=False)
    assert result.returncode == 2 and "already exists" in result.stderr


def test_missing_clone_is_refused_before_anything_is_made(group):
    g = group
    init_toplevel(find_workspace(g.toplevel))
    os.rename(g.toplevel / "beta", g.base / "beta-away")
    with pytest.raises(Refused, match="not cloned in the toplevel: beta"):
        create_worktree(find_workspace(g.toplevel), "dev")
    assert not g.path("dev").exists() and branches(g.toplevel) == ["main"]


def test_failure_halfway_undoes_this_runs_work(initialized):
    g = initialized
    # beta's branch cannot be made: a file where the ref would go
    (g.toplevel / "beta" / ".git" / "refs" / "heads" / "dev").mkdir(parents=True)
    (g.toplevel / "beta" / ".git" / "refs" / "heads" / "dev" / "x").write_text("junk\n")
    with pytest.raises(CommandFailed, match="Undid what this run made"):
        create_worktree(find_workspace(g.toplevel), "dev")
    assert not g.path("dev").exists() and not g.path(".chtop", "git", "dev").exists()
    assert "dev" not in branches(g.toplevel) and "dev" not in branches(g.toplevel / "alpha")
    assert git(g.toplevel, "worktree", "list", "--porcelain").count("worktree ") == 1
    # the same command simply works once the cause is gone
    import shutil
    shutil.rmtree(g.toplevel / "beta" / ".git" / "refs" / "heads" / "dev")
    create_worktree(find_workspace(g.toplevel), "dev")
    assert git(g.path("dev", "beta"), "branch", "--show-current") == "dev"


def test_interrupted_creation_is_undone(initialized, monkeypatch):
    g = initialized
    import chtop_tasks.workspace.worktrees as wt
    real = wt.init_submodules
    calls = []

    def interrupt(path, *names):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(path, *names)

    monkeypatch.setattr(wt, "init_submodules", interrupt)
    with pytest.raises(CommandFailed):
        create_worktree(find_workspace(g.toplevel), "dev")
    assert not g.path("dev").exists() and "dev" not in branches(g.toplevel / "alpha")
    assert not g.path(".chtop", "git", "dev").exists()


def test_failed_venv_keeps_worktrees_and_says_how_to_retry(initialized):
    g = initialized
    from chtop_tasks.tasks.common import venv_builder
    # a repo whose editable install must fail: alpha has no packaging metadata
    text = (g.toplevel / "git_repositories.toml").read_text().replace('install = "none"', 'install = "editable"', 1)
    (g.toplevel / "git_repositories.toml").write_text(text)
    git(g.toplevel, "commit", "-qam", "install alpha")
    with pytest.raises(Exception) as err:
        create_worktree(find_workspace(g.toplevel), "dev", venv_builder(True))
    assert "inv venv.build" in str(err.value) and "kept" in str(err.value)
    assert git(g.path("dev", "alpha"), "branch", "--show-current") == "dev"


def test_reuses_a_branch_kept_by_an_earlier_delete(with_dev):
    g = with_dev
    tip = g.commit(g.path("dev", "alpha"), "work.txt", "unmerged\n", "unmerged work")
    kept = delete_worktree(find_workspace(g.toplevel), "dev", force=True, cwd=g.toplevel)
    assert any("alpha: branch dev (unmerged" in k for k in kept)
    assert "dev" in branches(g.toplevel / "alpha") and "dev" not in branches(g.toplevel / "beta")
    result = g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    assert "branch 'dev' already exists" in result.stdout
    assert git(g.path("dev", "alpha"), "rev-parse", "HEAD") == tip


def test_delete_refuses_listing_every_problem(with_dev):
    g = with_dev
    dev = g.path("dev")
    (dev / "alpha" / "alpha.txt").write_text("changed\n")
    (dev / "beta" / "stray.txt").write_text("new\n")
    g.commit(dev, "feature.txt", "x\n", "container work")
    result = g.inv(g.toplevel, "worktree.delete", "--name", "dev", check=False)
    assert result.returncode == 3
    err = result.stderr
    assert "dev/alpha: uncommitted changes to 1 tracked path(s): alpha.txt" in err
    assert "dev/beta: 1 untracked file(s): stray.txt" in err
    assert "dev: 1 commit(s) on dev not merged up" in err
    assert dev.exists() and (dev / "alpha" / "alpha.txt").read_text() == "changed\n"


def test_delete_force_removes_dir_but_keeps_unmerged_branches(with_dev):
    g = with_dev
    tip = g.commit(g.path("dev", "beta"), "f.txt", "x\n", "beta work")
    (g.path("dev", "alpha", "alpha.txt")).write_text("changed\n")
    result = g.inv(g.toplevel, "worktree.delete", "--name", "dev", "--force")
    assert not g.path("dev").exists()
    assert git(g.toplevel / "beta", "rev-parse", "dev") == tip
    assert "dev" not in branches(g.toplevel / "alpha")
    assert "kept" in result.stderr and "git branch -d" in result.stderr


def test_delete_clean_removes_everything(with_dev, monkeypatch):
    from chtop_tasks.stores import storewalk
    from chtop_tasks.workspace.layout import private_store

    g = with_dev
    monkeypatch.setattr(storewalk, "SETTLE_NS", 0)
    assert storewalk.planted_entry(private_store(g.grouping, "dev", "alpha")) is None
    assert g.path(".chtop", "walked", "dev", "alpha.git").is_file()      # what the walks recorded
    g.inv(g.toplevel, "worktree.delete", "--name", "dev")
    assert not g.path("dev").exists() and not g.path(".chtop", "walked", "dev").exists()
    for repo in ("", "alpha", "beta"):
        assert "dev" not in branches(g.toplevel / repo)


def test_delete_removes_a_branch_the_toplevel_holds_packed_or_loose(with_dev):
    """delete reads whether each toplevel clone has the branch from its store (loose ref or
    packed-refs): a packed one is found and removed too."""
    g = with_dev
    git(g.toplevel / "alpha", "pack-refs", "--all")
    assert not (g.toplevel / "alpha" / ".git" / "refs" / "heads" / "dev").exists()
    assert "refs/heads/dev" in (g.toplevel / "alpha" / ".git" / "packed-refs").read_text()
    g.inv(g.toplevel, "worktree.delete", "--name", "dev")
    for repo in ("", "alpha", "beta"):
        assert "dev" not in branches(g.toplevel / repo)


def test_delete_refuses_from_inside_and_unknown_names(with_dev):
    g = with_dev
    result = g.inv(g.path("dev", "alpha"), "worktree.delete", "--name", "dev", check=False)
    assert result.returncode == 3 and "you are inside" in result.stderr
    result = g.inv(g.toplevel, "worktree.delete", "--name", "nope", check=False)
    assert result.returncode == 2 and "no worktree 'nope'" in result.stderr


def test_list_shows_branches_ahead_behind_and_dirty(with_dev):
    g = with_dev
    g.commit(g.path("dev", "alpha"), "a.txt", "x\n", "ahead")
    g.push_upstream_commit("beta", "b.txt", "y\n")
    (g.path("dev", "beta", "beta.txt")).write_text("dirty\n")
    out = g.inv(g.toplevel, "worktree.list").stdout
    assert "dev  (" in out
    assert any(ln.split()[:5] == ["alpha", "dev", "+1/-0", "vs", "main"] and ln.endswith("clean") for ln in out.splitlines())
    assert any(ln.split()[:5] == ["beta", "dev", "+0/-1", "vs", "kms"] and ln.endswith("dirty") for ln in out.splitlines())


def test_inv_list_works_from_worktree_and_subrepo(with_dev):
    g = with_dev
    for cwd in (g.toplevel, g.path("dev"), g.path("dev", "beta")):
        out = g.inv(cwd, "--list").stdout
        for name in ("worktree.create", "git.merge-up", "toplevel.init"):
            assert name in out


def test_direnv_exec_in_new_worktree_gives_its_venv(initialized):
    require_tool("direnv")
    g = initialized
    import sys
    dev_ws = create_worktree(find_workspace(g.toplevel), "dev")
    dev = dev_ws.root
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dev / ".venv")], check=True)
    subprocess.run(["direnv", "allow", str(dev)], check=True, cwd=dev)
    proc = subprocess.run(
        ["direnv", "exec", str(dev), "sh", "-c", 'command -v python; echo "SAFE=$PYTHONSAFEPATH"; echo "VENV=$VIRTUAL_ENV"'],
        cwd=dev, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[0] == f"{dev}/.venv/bin/python"
    assert "SAFE=1" in lines and f"VENV={dev}/.venv" in lines


def test_submodules_are_initialised_in_toplevel_and_worktree(group):
    g = group
    lib = g.remotes / "lib-seed"
    git(g.remotes, "init", "-q", "-b", "main", str(lib))
    (lib / "lib.txt").write_text("lib\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-q", "-m", "lib")
    git(g.remotes, "clone", "-q", "--bare", str(lib), str(g.remotes / "lib.git"))
    seed = g.base / "alpha-work"
    git(g.base, "clone", "-q", f"file://{g.remotes}/alpha.git", str(seed))
    git(seed, "submodule", "add", "-q", f"file://{g.remotes}/lib.git", "vendor/lib")
    git(seed, "commit", "-q", "-m", "add submodule")
    git(seed, "push", "-q", "origin", "main")
    init_toplevel(find_workspace(g.toplevel))
    assert (g.toplevel / "alpha" / "vendor" / "lib" / "lib.txt").exists()
    create_worktree(find_workspace(g.toplevel), "dev")
    assert (g.path("dev", "alpha", "vendor", "lib", "lib.txt")).exists()
    assert git(g.path("dev", "alpha"), "status", "--porcelain") == ""
    delete_worktree(find_workspace(g.toplevel), "dev", cwd=g.toplevel)
    assert not g.path("dev").exists()


def test_init_with_an_unreachable_repo_fails_clearly_and_can_be_rerun(group):
    g = group
    os.rename(g.remotes / "beta.git", g.remotes / "beta-away.git")
    result = g.inv(g.toplevel, "toplevel.init", "--no-venv", check=False)
    assert result.returncode == 1
    assert "git clone --branch kms" in result.stderr and "beta.git" in result.stderr
    assert not (g.toplevel / "beta").exists()
    os.rename(g.remotes / "beta-away.git", g.remotes / "beta.git")
    again = g.inv(g.toplevel, "toplevel.init", "--no-venv")
    assert "beta: cloned (kms)" in again.stdout and "alpha: cloned" not in again.stdout


def test_broken_manifest_is_a_clear_error_and_changes_nothing(group):
    g = group
    (g.toplevel / "git_repositories.toml").write_text('[[repo]]\nname = "../x"\nurl = "u"\nbranch = "main"\n')
    result = g.inv(g.toplevel, "toplevel.init", "--no-venv", check=False)
    assert result.returncode == 2
    assert "git_repositories.toml: repo #1 ('../x'): 'name' must not contain '/'" in result.stderr
    assert sorted(p.name for p in g.toplevel.iterdir() if p.name.startswith(".env")) == []


def make_commits_only_the_private_stores_hold(g, monkeypatch) -> dict[str, str]:
    """In dev/beta: a side branch, a tag, a stash and a detached HEAD commit; in dev/alpha a commit
    reset away (only its reflog names it).  dev's own branch stays at its integration branch."""
    import datetime
    monkeypatch.setenv("GIT_COMMITTER_DATE", datetime.datetime.now(datetime.timezone.utc).isoformat())
    beta, alpha = g.path("dev", "beta"), g.path("dev", "alpha")
    git(beta, "checkout", "-q", "-b", "side")
    made = {"side": g.commit(beta, "side.txt", "side\n", "side work")}
    git(beta, "checkout", "-q", "--detach", "dev")
    made["tag"] = g.commit(beta, "tag.txt", "tagged\n", "tagged work")
    git(beta, "tag", "-a", "-m", "a tag", "v-dev")
    git(beta, "checkout", "-q", "dev")
    (beta / "beta.txt").write_text("stashed\n")
    git(beta, "stash", "-q")
    made["stash"] = git(beta, "rev-parse", "refs/stash")
    git(beta, "checkout", "-q", "--detach", "dev")
    made["detached"] = g.commit(beta, "detached.txt", "detached\n", "detached work")
    made["reflog"] = g.commit(alpha, "gone.txt", "gone\n", "reset away")
    git(alpha, "reset", "-q", "--hard", "HEAD~")
    return made


def test_delete_refuses_listing_commits_only_its_private_stores_hold(with_dev, monkeypatch):
    g = with_dev
    make_commits_only_the_private_stores_hold(g, monkeypatch)
    result = g.inv(g.toplevel, "worktree.delete", "--name", "dev", check=False)
    assert result.returncode == 3, result.stderr
    err = result.stderr
    assert "dev/beta: commits only its private store holds:" in err
    for part in ("branch side (1 commit)", "tag v-dev (1 commit)", "stash@{0} (", "HEAD ("):
        assert part in err
    assert "dev/alpha: commits only its private store holds: a reflog entry (" in err
    assert g.path("dev", "beta", "detached.txt").exists()      # nothing was removed
    assert git(g.toplevel / "beta", "for-each-ref", "refs/chtop/kept") == ""


def test_delete_force_keeps_every_commit_only_its_private_stores_hold(with_dev, monkeypatch):
    g = with_dev
    made = make_commits_only_the_private_stores_hold(g, monkeypatch)
    result = g.inv(g.toplevel, "worktree.delete", "--name", "dev", "--force")
    assert not g.path("dev").exists() and not g.path(".chtop", "git", "dev").exists()
    top_beta, top_alpha = g.toplevel / "beta", g.toplevel / "alpha"
    assert git(top_beta, "rev-parse", "refs/chtop/kept/dev/refs/heads/side") == made["side"]
    assert git(top_beta, "rev-parse", "refs/chtop/kept/dev/refs/tags/v-dev^{commit}") == made["tag"]
    assert git(top_beta, "cat-file", "-t", "refs/chtop/kept/dev/refs/tags/v-dev") == "tag"
    assert git(top_beta, "rev-parse", "refs/chtop/kept/dev/refs/stash") == made["stash"]
    assert git(top_beta, "rev-parse", "refs/chtop/kept/dev/HEAD") == made["detached"]
    assert git(top_alpha, "rev-parse", f"refs/chtop/kept/dev/{made['reflog']}") == made["reflog"]
    for repo, sha in ((top_beta, made["side"]), (top_beta, made["stash"]), (top_alpha, made["reflog"])):
        git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    assert "top/beta: refs/chtop/kept/dev/refs/heads/side (branch side of dev/beta, 1 commit" in result.stderr
    assert "top/alpha: refs/chtop/kept/dev/" in result.stderr
    assert git(top_beta, "fsck", "--no-dangling") == ""


def test_store_tips_read_the_agents_files_as_data(tmp_path):
    """A private store's files are the agent's: a symlinked ref (file or dir) is not followed, a FIFO
    never blocks the read, a huge file is not read, old reflog entries are dropped (not the stash's)."""
    from chtop_tasks.workspace.keep import REFLOG_DAYS, store_tips

    a, b, c, d = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
    store = tmp_path / "store.git"
    (store / "refs" / "heads").mkdir(parents=True)
    (store / "refs" / "heads" / "side").write_text(a + "\n")
    outside = tmp_path / "outside"
    (outside / "heads").mkdir(parents=True)
    (outside / "sha").write_text(b + "\n")
    (outside / "heads" / "x").write_text(b + "\n")
    (store / "refs" / "heads" / "link").symlink_to(outside / "sha")
    (store / "refs" / "linked-dir").symlink_to(outside / "heads")
    os.mkfifo(store / "refs" / "heads" / "fifo")
    (store / "packed-refs").symlink_to(outside / "sha")
    (store / "logs" / "refs").mkdir(parents=True)
    now = 2_000_000_000
    old = now - (REFLOG_DAYS + 1) * 86400
    line = "{} {} A <a@x> {} +0000\tmsg\n"
    (store / "logs" / "refs" / "stash").write_text(line.format("0" * 40, c, old) + line.format(c, d, old))
    (store / "logs" / "HEAD").write_text(line.format("0" * 40, b, old) + line.format(b, d, now))
    tips = store_tips(store, now=now)
    assert sorted((t.source, t.sha) for t in tips) == sorted([
        ("refs/heads/side", a), ("stash@{0}", d), ("stash@{1}", c), ("reflog", d)])


def test_init_checks_every_target_before_cloning_any(group):
    g = group
    (g.toplevel / "beta").mkdir()
    (g.toplevel / "beta" / "notes.txt").write_text("not a clone\n")
    result = g.inv(g.toplevel, "toplevel.init", "--no-venv", check=False)
    assert result.returncode == 3
    assert "toplevel.init cloned nothing: these exist but are not git clones:" in result.stderr
    assert str(g.toplevel / "beta") in result.stderr
    assert not (g.toplevel / "alpha").exists()          # the first repo was not cloned either
    assert "$ git clone" not in result.stderr


def test_tasks_in_the_grouping_dir_act_on_its_toplevel(with_dev):
    from test_cli import chtop

    g = with_dev
    result = chtop(g.grouping, "worktree.list")
    assert result.returncode == 0, result.stderr
    assert f"dev  ({g.path('dev')})" in result.stdout
    assert find_workspace(g.grouping).root == g.toplevel.resolve()


def test_submodules_false_is_honoured_by_create_and_a_failing_submodule_names_the_key(group):
    """pirate's case: a submodule whose URL is unreachable.  With the manifest's default the
    error names `submodules = false`; with that set, init and create skip it (and both work)."""
    g = group
    seed = g.base / "alpha-work"
    git(g.base, "clone", "-q", f"file://{g.remotes}/alpha.git", str(seed))
    git(seed, "submodule", "add", "-q", f"file://{g.remotes}/beta.git", "vendor/lib")
    git(seed, "commit", "-q", "-m", "add submodule")
    git(seed, "push", "-q", "origin", "main")
    os.rename(g.remotes / "beta.git", g.remotes / "beta-moved.git")   # the submodule's URL: gone
    manifest = (g.toplevel / "git_repositories.toml").read_text().replace("beta.git", "beta-moved.git")
    (g.toplevel / "git_repositories.toml").write_text(manifest)
    git(g.toplevel, "commit", "-qam", "beta moved")
    failed = g.inv(g.toplevel, "toplevel.init", "--no-venv", check=False)
    assert failed.returncode == 1
    assert "set `submodules = false` in its [[repo]] entry (name = 'alpha')" in failed.stderr, failed.stderr
    text = manifest.replace('name = "alpha"\n', 'name = "alpha"\nsubmodules = false\n', 1)
    assert text != manifest
    (g.toplevel / "git_repositories.toml").write_text(text)
    git(g.toplevel, "commit", "-qam", "alpha: no submodules")
    g.inv(g.toplevel, "toplevel.init", "--no-venv")
    created = g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    assert "submodule update" not in created.stderr
    assert git(g.path("dev", "alpha"), "branch", "--show-current") == "dev"
    assert not (g.path("dev", "alpha", "vendor", "lib", "beta.txt")).exists()
    # the control: the same create with the default key fails, naming it, and undoes its run
    (g.toplevel / "git_repositories.toml").write_text(manifest)
    git(g.toplevel, "commit", "-qam", "alpha: submodules again")
    again = g.inv(g.toplevel, "worktree.create", "--name", "dev2", "--no-venv", check=False)
    assert again.returncode == 1 and "`submodules = false`" in again.stderr, again.stderr
    assert not g.path("dev2").exists()


def test_ctrl_c_in_the_venv_step_keeps_the_checkouts_and_the_same_create_resumes(initialized):
    g = initialized
    built = []

    def interrupted(wt):
        raise KeyboardInterrupt

    with pytest.raises(Exception) as err:
        create_worktree(find_workspace(g.toplevel), "dev", interrupted)
    assert getattr(err.value, "exit_code", None) == 130
    assert "Resume with the same command: inv worktree.create --name dev" in str(err.value)
    assert git(g.path("dev", "beta"), "branch", "--show-current") == "dev"
    resumed = create_worktree(find_workspace(g.toplevel), "dev", built.append)
    assert [wt.root for wt in built] == [g.path("dev")] and resumed.root == g.path("dev")
    # without a venv step there is nothing to resume: an existing worktree is refused as before
    with pytest.raises(UsageError, match="already exists"):
        create_worktree(find_workspace(g.toplevel), "dev")


def test_delete_answers_the_busy_check_first_though_it_runs_alongside_the_other_checks(with_dev):
    """The busy check (the task's: podman ps) runs in a thread while the worktree is checked; its
    refusal still comes first, over any other, and nothing is removed or imported past it."""
    import threading
    import time

    g = with_dev
    (g.path("dev", "alpha") / "dirty.txt").write_text("untracked\n")        # a problem of its own
    threads = []

    def busy(wt):
        threads.append(threading.current_thread() is not threading.main_thread())
        time.sleep(0.3)                      # slower than the checks: they are not waited for first
        raise Refused(f"refusing to delete {wt.root}: 1 sandbox(es) still run in it")
    with pytest.raises(Refused, match="still run in it"):
        delete_worktree(find_workspace(g.toplevel), "dev", cwd=g.toplevel, refuse_if_busy=busy)
    assert threads == [True]
    assert g.path("dev", "alpha", "dirty.txt").exists() and "dev" in branches(g.toplevel / "alpha")
    with pytest.raises(Refused, match="still run in it"):
        delete_worktree(find_workspace(g.toplevel), "dev", force=True, cwd=g.toplevel, refuse_if_busy=busy)
    assert g.path("dev").exists()
    kept = delete_worktree(find_workspace(g.toplevel), "dev", force=True, cwd=g.toplevel,
                           refuse_if_busy=lambda wt: None)
    assert not g.path("dev").exists() and kept == []


def test_a_name_create_takes_without_asking_git_is_one_git_takes():
    """create skips `git check-ref-format --branch` only for names every rule of it allows."""
    from chtop_tasks.workspace.worktrees import plainly_a_branch_name

    names = ["dev", "a-b", "A_1", "9", "head", "FETCH_HEAD", "a_-", "x" * 64, "HEAD", "-x", "x.y", "x..y", "x.lock",
             "@", "a@{b", "_a", "a/b", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "é"]
    for name in names:
        takes = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True).returncode == 0
        assert takes or not plainly_a_branch_name(name), name
    assert plainly_a_branch_name("dev") and not plainly_a_branch_name("HEAD") and not plainly_a_branch_name("x.y")


def test_delete_reads_the_toplevels_refs_as_git_lists_them(with_dev):
    """The refs delete reads from a toplevel store's files (loose over packed, symbolic refs left
    out) name what `git for-each-ref` names; anything there git might read otherwise (a link, a
    FIFO, a value that is no sha) sends the question back to git."""
    from chtop_tasks.workspace.keep import host_refs

    g = with_dev
    store = g.toplevel / "alpha" / ".git"
    git(g.toplevel / "alpha", "tag", "-a", "-m", "t", "t1")
    git(g.toplevel / "alpha", "update-ref", "refs/chtop/kept/dev/abc", git(g.toplevel / "alpha", "rev-parse", "HEAD"))
    git(g.toplevel / "alpha", "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")

    def listed(prefix=""):
        out = git(g.toplevel / "alpha", "for-each-ref", "--format=%(objectname) %(refname)", *([prefix] if prefix else []))
        return {ref: sha for sha, _, ref in (line.partition(" ") for line in out.splitlines())}
    for packed in (False, True):
        if packed:
            git(g.toplevel / "alpha", "pack-refs", "--all")
        assert set(host_refs(store).values()) == set(listed().values())
        assert host_refs(store, "refs/chtop/kept/dev/") == listed("refs/chtop/kept/dev/") != {}
        assert host_refs(store, "refs/chtop/kept/other/") == {}
    (store / "refs" / "heads" / "odd").symlink_to(store / "packed-refs")
    assert host_refs(store) is None
    (store / "refs" / "heads" / "odd").unlink()
    os.mkfifo(store / "refs" / "heads" / "odd")
    assert host_refs(store) is None
    (store / "refs" / "heads" / "odd").unlink()
    (store / "refs" / "heads" / "odd").write_text("junk\n")
    assert host_refs(store) is None


def test_delete_checks_a_merged_worktree_with_one_rev_list_and_still_finds_an_unmerged_commit(with_dev, monkeypatch):
    """A worktree whose commits all landed (its reflogs name ancestors of the toplevel's branches):
    delete's check for lost commits is at most one ``rev-list`` per repo in the toplevel's store and no
    ``cat-file``; a commit more is still found, and counted by git."""
    from chtop_tasks.core import runner
    from chtop_tasks.stores.quarantine import sync_worktree
    from chtop_tasks.workspace import keep, worktrees
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    dev = g.path("dev")
    g.commit(dev / "alpha", "a.txt", "1\n", "one")
    g.commit(dev / "alpha", "b.txt", "2\n", "two")
    g.inv(dev, "git.merge-up")
    wt = find_workspace(dev)
    top = wt.for_root(wt.toplevel)
    asked = []
    run = runner.run
    monkeypatch.setattr(runner, "run", lambda argv, *a, **k: asked.append(
        next((w for w in ("rev-list", "cat-file") if w in argv), None)) or run(argv, *a, **k))
    assert keep.unsaved_in_worktree(wt, wt.checkouts()) == {}
    assert asked.count("rev-list") <= len(wt.checkouts()) and "cat-file" not in asked, asked
    assert worktrees.delete_problems(wt, wt.checkouts(), top) == []
    g.commit(dev / "alpha", "c.txt", "3\n", "three")
    sync_worktree(wt)
    assert keep.unsaved_in_worktree(wt, wt.checkouts()) == {}
    assert worktrees.delete_problems(wt, wt.checkouts(), top) == [
        "dev/alpha: 1 commit(s) on dev not merged up (run `inv git.merge-up` in " + f"{dev})"]
    assert "rev-list" in asked


def test_create_starts_the_biggest_checkouts_first(initialized, monkeypatch):
    """The checkouts are written at once, the biggest (by the toplevel checkout's index) started
    first, so the longest one never starts last."""
    from chtop_tasks.core import runner
    from chtop_tasks.core.fanout import POOL_SIZE

    g = initialized
    for number in range(300):
        (g.toplevel / "beta" / f"f{number}.txt").write_text(f"{number}\n")
    git(g.toplevel / "beta", "add", "-A")
    git(g.toplevel / "beta", "commit", "-q", "-m", "many files")
    started = []
    run = runner.run
    monkeypatch.setattr(runner, "run", lambda argv, *a, **k: (
        "worktree" in argv and "add" in argv and started.append(Path(argv[-2]).name)) or run(argv, *a, **k))
    create_worktree(find_workspace(g.toplevel), "big")
    assert started[0] == "big" and started[1] == "beta", (started, POOL_SIZE)
    assert (g.path("big", "beta", "f299.txt")).is_file()


def test_list_shows_a_rebase_stopped_on_a_conflict_with_the_commands_that_end_it(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.push_upstream_commit("alpha", "alpha.txt", "line 1\nupstream\nline 3\n")
    g.commit(dev / "alpha", "alpha.txt", "line 1\nmine\nline 3\n", "conflicting change")
    assert g.inv(dev, "git.rebase-down", check=False).returncode == 1
    out = g.inv(g.toplevel, "worktree.list").stdout
    alpha = next(ln for ln in out.splitlines() if ln.split()[:1] == ["alpha"])
    assert "rebase in progress" in alpha and "dev" in alpha.split()[1:3]
    assert f"git -C {dev / 'alpha'} rebase --continue" in out and f"git -C {dev / 'alpha'} rebase --abort" in out
    records = __import__("json").loads(g.inv(g.toplevel, "worktree.list", "--json").stdout)
    alpha_record = next(r for r in records[0]["repos"] if r["repo"] == "alpha")
    assert alpha_record["operation"] == "rebase"
    beta = next(ln for ln in out.splitlines() if ln.split()[:1] == ["beta"])
    assert "in progress" not in beta


def test_init_that_writes_the_envrc_ends_with_the_direnv_allow_that_approves_it(group):
    """direnv blocks a new or changed .envrc until you approve it ("direnv: error ... is blocked", from
    your shell's hook right after init): init says so last, with the exact command, only when it wrote one."""
    require_tool("direnv")
    g = group
    out = g.inv(g.toplevel, "toplevel.init", "--no-venv").stdout.rstrip().splitlines()
    assert f"direnv allow {g.toplevel}" in out[-1] and "blocked" in out[-1]
    blocked = subprocess.run(["direnv", "exec", str(g.toplevel), "true"], capture_output=True, text=True)
    assert blocked.returncode != 0 and "is blocked" in blocked.stderr
    subprocess.run(out[-1].split("next: ", 1)[1].split("#")[0].split(), check=True, cwd=g.toplevel)   # as printed
    assert subprocess.run(["direnv", "exec", str(g.toplevel), "true"], capture_output=True).returncode == 0
    assert "direnv" not in g.inv(g.toplevel, "toplevel.init", "--no-venv").stdout     # nothing new to approve
