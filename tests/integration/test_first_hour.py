"""What a new user meets first in the git loop: an edited manifest, venv build leftovers,
missing repos, dry runs, and what the hints say (real repos, local bare remotes)."""

import pytest
from conftest import git

from chtop_tasks.core.errors import ManifestError
from chtop_tasks.workspace.layout import find_workspace
from chtop_tasks.workspace.manifest import parse_manifest


def add_repo_to_manifest(g, name, branch="main"):
    """As README's "Your own workspace" says: edit the toplevel's manifest (a new remote for it)."""
    from conftest import make_sub_remote

    make_sub_remote(g.remotes, name, branch)
    manifest = g.toplevel / "git_repositories.toml"
    manifest.write_text(manifest.read_text() + f'\n[[repo]]\nname = "{name}"\n'
                        f'url = "file://{g.remotes}/{name}.git"\nbranch = "{branch}"\ninstall = "none"\n')


def test_create_refuses_an_uncommitted_manifest_and_works_once_committed(initialized):
    g = initialized
    add_repo_to_manifest(g, "gamma")
    g.inv(g.toplevel, "toplevel.init", "--no-venv")
    refused = g.inv(g.toplevel, "worktree.create", "--name", "feat", "--no-venv", check=False)
    assert refused.returncode == 3, refused.stderr
    assert "git_repositories.toml has uncommitted changes" in refused.stderr
    assert f"git -C {g.toplevel} commit -m 'my repos' git_repositories.toml" in refused.stderr
    assert not g.path("feat").exists()
    git(g.toplevel, "commit", "-q", "-m", "my repos", "git_repositories.toml")
    g.inv(g.toplevel, "worktree.create", "--name", "feat", "--no-venv")
    assert git(g.path("feat", "gamma"), "branch", "--show-current") == "feat"
    g.inv(g.toplevel, "worktree.delete", "--name", "feat")
    assert not g.path("feat").exists()


def test_delete_copes_with_a_repo_missing_from_the_toplevel(with_dev):
    """A worktree's manifest names a repo the toplevel no longer has: delete still works."""
    import shutil

    g = with_dev
    shutil.rmtree(g.toplevel / "beta")
    refused = g.inv(g.toplevel, "worktree.delete", "--name", "dev", check=False)
    assert refused.returncode == 3
    assert "dev/beta: its repo is not cloned in the toplevel (top/beta)" in refused.stderr
    result = g.inv(g.toplevel, "worktree.delete", "--name", "dev", "--force", check=False)
    assert result.returncode == 0, result.stderr
    assert "command not found" not in result.stderr
    assert "top/beta is not cloned in the toplevel" in result.stderr
    assert not g.path("dev").exists()
    assert git(g.toplevel / "alpha", "branch", "--format=%(refname:short)") == "main"


def test_venv_build_leftovers_block_neither_delete_nor_rebase_down(with_dev):
    """An editable install leaves <src>/NAME.egg-info/ and the smoke import __pycache__/ in the repo."""
    g = with_dev
    dev = g.path("dev")
    (dev / "alpha" / "src" / "alpha.egg-info").mkdir(parents=True)
    (dev / "alpha" / "src" / "alpha.egg-info" / "PKG-INFO").write_text("Name: alpha\n")
    (dev / "beta" / "__pycache__").mkdir()
    (dev / "beta" / "__pycache__" / "beta.cpython-311.pyc").write_bytes(b"\0")
    assert git(dev / "alpha", "status", "--porcelain") == ""
    assert git(dev / "beta", "status", "--porcelain") == ""
    g.push_upstream_commit("alpha", "up.txt", "u\n")
    g.inv(dev, "git.rebase-down")
    assert git(dev / "alpha", "rev-list", "--count", "dev..main") == "0"
    g.inv(g.toplevel, "worktree.delete", "--name", "dev")
    assert not dev.exists()


def test_rebase_down_refuses_only_what_git_would(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.push_upstream_commit("alpha", "up.txt", "u\n")
    (dev / "alpha" / "notes.txt").write_text("mine, untracked\n")      # git leaves it alone: no refusal
    (dev / "alpha" / "up.txt").write_text("would be overwritten\n")    # main has up.txt: refused
    refused = g.inv(dev, "git.rebase-down", check=False)
    assert refused.returncode == 3
    assert "dev/alpha: untracked files that main also has would be overwritten (up.txt)" in refused.stderr
    assert "notes.txt" not in refused.stderr
    (dev / "alpha" / "up.txt").unlink()
    g.inv(dev, "git.rebase-down")
    assert git(dev / "alpha", "rev-list", "--count", "dev..main") == "0"
    assert (dev / "alpha" / "notes.txt").read_text() == "mine, untracked\n"


def test_each_git_command_is_printed_once_and_a_dry_run_says_so(with_dev):
    g = with_dev
    dev = g.path("dev")
    g.push_upstream_commit("alpha", "up.txt", "u\n")
    dry = g.inv(dev, "git.rebase-down", "--dry-run")
    assert "(dry run: nothing will be changed)" in dry.stdout
    assert "dry run: 1 command(s) not run, nothing was changed" in dry.stdout
    run = g.inv(dev, "git.rebase-down")
    assert (run.stdout + run.stderr).count(" rebase main  (cwd=") == 1
    tip = g.commit(dev / "alpha", "mine.txt", "m\n", "feature")
    dry = g.inv(dev, "git.merge-up", "--dry-run")
    assert "merge-up from" in dry.stdout and "(dry run: nothing will be changed)" in dry.stdout
    assert f"would run: $ git merge --ff-only {tip}" in dry.stdout and "nothing was changed" in dry.stdout
    assert git(g.toplevel / "alpha", "rev-list", "--count", "main..dev") == "1"    # not landed
    run = g.inv(dev, "git.merge-up")
    assert (run.stdout + run.stderr).count(f"$ git merge --ff-only {tip}") == 1


def test_no_venv_hints_say_how_to_build_it(initialized):
    g = initialized
    out = g.inv(g.toplevel, "worktree.create", "--name", "dev", "--no-venv").stdout
    assert "activates its venv" not in out
    assert f"no venv yet (--no-venv): inv venv.build --workdir {g.path('dev')}" in out
    env_sh = (g.path("dev", ".claude", "env.sh")).read_text()
    assert "command_not_found_handle" in env_sh and "inv venv.build --workdir" in env_sh


def test_python_not_found_in_a_venvless_shell_names_venv_build(with_dev, tmp_path):
    import subprocess

    env_sh = with_dev.path("dev", ".claude", "env.sh")
    result = subprocess.run(["bash", "-c", f". {env_sh}; PATH=/nonexistent; python -V"], capture_output=True,
                            text=True)
    assert result.returncode == 127
    assert "python: not found" in result.stderr and "inv venv.build --workdir" in result.stderr


def test_a_missing_manifest_is_named_not_called_no_workspace(with_dev):
    g = with_dev
    (g.toplevel / "git_repositories.toml").unlink()
    result = g.inv(g.toplevel, "worktree.list", check=False)
    assert result.returncode == 2
    assert "is a chtop checkout without its git_repositories.toml" in result.stderr
    assert "not inside a chtop workspace" not in result.stderr


def test_an_empty_manifest_is_refused(tmp_path):
    with pytest.raises(ManifestError, match="no \\[\\[repo\\]\\] entries"):
        parse_manifest(tmp_path / "git_repositories.toml", "# nothing yet\n")


def test_repo_excludes_are_written_for_each_repo(initialized):
    ws = find_workspace(initialized.toplevel)
    for repo in ws.manifest.names:
        text = (initialized.toplevel / repo / ".git" / "info" / "exclude").read_text()
        assert "*.egg-info/" in text and "__pycache__/" in text


def test_a_deleted_worktrees_policy_layer_goes_with_it(with_dev):
    g = with_dev
    g.inv(g.toplevel, "net.allow", "--worktree", "dev", "only-dev.example.org")
    layer = g.toplevel / "sandbox" / "worktrees" / "dev"
    assert (layer / "net-allow.txt").exists()
    out = g.inv(g.toplevel, "worktree.delete", "--name", "dev").stdout
    assert "removed its network policy layer top/sandbox/worktrees/dev/" in out
    assert not layer.exists()
    assert git(g.toplevel, "status", "--porcelain") == ""
    refused = g.inv(g.toplevel, "net.allow", "--worktree", "dev", "x.example.org", check=False)
    assert refused.returncode == 2 and "no worktree 'dev' in " in refused.stderr


@pytest.mark.slow
def test_a_failed_venv_build_of_a_new_worktree_prints_the_retry(with_dev, monkeypatch):
    """The worktrees stay; the error ends with the command that retries the venv alone."""
    import dataclasses

    from chtop_tasks.core.errors import ChtopError
    from chtop_tasks.tasks.common import venv_builder

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("CHTOP_INSTALLER", "pip")
    dev = find_workspace(with_dev.path("dev"))
    text = dev.manifest.path.read_text().replace('install = "none"', 'install = "editable"', 1)
    broken = dataclasses.replace(dev, manifest=parse_manifest(dev.manifest.path, text))   # alpha has no pyproject
    with pytest.raises(ChtopError) as info:
        venv_builder(True)(broken)
    message = str(info.value)
    assert "The checkouts are kept: only the venv needs that retry" in message
    assert message.count(f"inv venv.build --workdir {dev.root}") == 1          # the retry, said once
    assert message.rstrip().endswith(f"or run the same `inv worktree.create --name {dev.name}` again.")
    assert (dev.root / "alpha" / ".git").exists()


def test_delete_checks_a_repo_only_the_toplevels_manifest_names(with_dev):
    """A worktree holding a checkout of a repo its own manifest lacks (the toplevel's has it): that
    checkout's changes are checked too, and it is removed with its branch."""
    g = with_dev
    add_repo_to_manifest(g, "gamma")
    git(g.toplevel, "commit", "-q", "-m", "gamma", "git_repositories.toml")
    g.inv(g.toplevel, "toplevel.init", "--no-venv")
    git(g.toplevel / "gamma", "worktree", "add", "-q", "-b", "dev", str(g.path("dev", "gamma")), "main")
    (g.path("dev", "gamma", "gamma.txt")).write_text("changed\n")
    refused = g.inv(g.toplevel, "worktree.delete", "--name", "dev", check=False)
    assert refused.returncode == 3 and "dev/gamma: uncommitted changes to 1 tracked path(s)" in refused.stderr
    git(g.path("dev", "gamma"), "checkout", "--", "gamma.txt")
    g.inv(g.toplevel, "worktree.delete", "--name", "dev")
    assert not g.path("dev").exists()
    assert git(g.toplevel / "gamma", "branch", "--format=%(refname:short)") == "main"
    assert git(g.toplevel / "gamma", "worktree", "list", "--porcelain").count("worktree ") == 1
