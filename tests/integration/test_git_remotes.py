"""git.pull and git.push: the loop with the remotes the repos live on (local bare remotes; the
whole loop on the real repos' bundles)."""

from conftest import Group, git, make_container_remote
from real_repos import bare_remotes_from_bundles

REAL_MANIFEST = """\
[[repo]]
name = "pipmake"
url = "file://{remotes}/pipmake.git"
branch = "main"
install = "none"

[[repo]]
name = "ksgpu"
url = "file://{remotes}/ksgpu.git"
branch = "kms"
install = "none"

[[repo]]
name = "pirate"
url = "file://{remotes}/pirate.git"
branch = "kms"
install = "none"
submodules = false
"""


def colleague_pushes(base, bare, branch, filename) -> str:
    """A colleague's commit on ``branch`` of the bare remote (from their own clone)."""
    work = base / f"colleague-{bare.stem}"
    git(base, "clone", "-q", "--branch", branch, f"file://{bare}", str(work))
    (work / filename).write_text("the colleague's change\n")
    git(work, "add", filename)
    git(work, "commit", "-q", "-m", f"colleague: {filename}")
    git(work, "push", "-q", "origin", branch)
    return git(work, "rev-parse", "HEAD")


def test_the_daily_loop_with_real_remotes(tmp_path):
    remotes = tmp_path / "remotes"
    bare = bare_remotes_from_bundles(remotes)
    make_container_remote(remotes, REAL_MANIFEST.format(remotes=remotes))
    grouping = tmp_path / "grp"
    grouping.mkdir()
    top = grouping / "top"
    git(grouping, "clone", "-q", f"file://{remotes}/chtop.git", str(top))
    inv = Group(tmp_path, remotes, grouping, top, ["pipmake", "ksgpu", "pirate"]).inv
    inv(top, "toplevel.init", "--no-venv")
    inv(top, "worktree.create", "--name", "dev", "--no-venv")
    dev = grouping / "dev"
    (dev / "ksgpu" / "feature.txt").write_text("the feature\n")
    git(dev / "ksgpu", "add", "feature.txt")
    git(dev / "ksgpu", "commit", "-q", "-m", "feature: feature.txt")
    theirs = colleague_pushes(tmp_path, bare["ksgpu"], "kms", "colleague.txt")

    pulled = inv(dev, "git.pull")                       # from the worktree: acts on the toplevel
    assert "top/ksgpu: kms fast-forwarded 1 commit from origin/kms" in pulled.stdout
    assert "top/pipmake: main up to date with origin/main" in pulled.stdout
    assert "pull: 1 moved, 3 up to date, 0 not moved, 0 unreachable" in pulled.stdout
    assert git(top / "ksgpu", "rev-parse", "kms") == theirs
    assert "dev/ksgpu is 1 commit ahead of, 1 behind top/ksgpu (kms branch)" in inv(dev, "git.status").stdout
    inv(dev, "git.rebase-down")
    inv(dev, "git.merge-up")
    dry = inv(top, "git.push", "--dry-run")
    assert "top/ksgpu: would push kms (1 commit) to origin/kms" in dry.stdout
    assert git(bare["ksgpu"], "rev-parse", "kms") == theirs         # the dry run pushed nothing
    pushed = inv(top, "git.push")
    assert "top/ksgpu: pushed kms (1 commit) to origin/kms" in pushed.stdout
    assert "top/pirate: kms nothing to push (origin/kms has it)" in pushed.stdout
    assert git(bare["ksgpu"], "rev-parse", "kms^") == theirs
    assert git(bare["ksgpu"], "log", "-1", "--format=%s", "kms") == "feature: feature.txt"
    assert git(bare["ksgpu"], "show", "kms:feature.txt") == "the feature"
    assert "dev" not in git(bare["ksgpu"], "branch", "--format=%(refname:short)").split()
    # the toplevel's own branch (chtop and the user's manifest commit) is left alone unless asked for
    container = remotes / "chtop.git"
    upstream_main = git(container, "rev-parse", "main")
    (top / "git_repositories.toml").write_text((top / "git_repositories.toml").read_text() + "# my repos\n")
    git(top, "commit", "-q", "-am", "my repos")
    mine = inv(top, "git.push")
    assert ("top: main left alone (the toplevel's own checkout: chtop and your manifest; its remote is where "
            "chtop came from); to push it to origin/main: inv git.push --toplevel") in mine.stdout, mine.stdout
    assert git(container, "rev-parse", "main") == upstream_main
    asked = inv(top, "git.push", "--toplevel")
    assert "top: pushed main (1 commit) to origin/main" in asked.stdout, asked.stdout
    assert git(container, "rev-parse", "main") == git(top, "rev-parse", "main")
    feature = inv(top, "git.push", "--feature", "dev")
    assert "top/ksgpu: pushed dev (a new branch) to origin/dev" in feature.stdout
    assert git(bare["ksgpu"], "rev-parse", "dev") == git(bare["ksgpu"], "rev-parse", "kms")


def test_pull_reports_what_could_not_move_and_touches_none_of_it(initialized):
    g = initialized
    colleague_pushes(g.base, g.remotes / "alpha.git", "main", "a.txt")
    colleague_pushes(g.base, g.remotes / "beta.git", "kms", "b.txt")
    top_alpha, top_beta = g.toplevel / "alpha", g.toplevel / "beta"
    (top_alpha / "alpha.txt").write_text("dirty in the toplevel\n")          # dirty
    g.commit(top_beta, "mine.txt", "m\n", "a local commit")                   # diverged
    before = {r: git(g.toplevel / r, "rev-parse", "HEAD") for r in ("alpha", "beta")}
    result = g.inv(g.toplevel, "git.pull", check=False)
    assert result.returncode == 3, result.stderr
    assert "top/alpha: main not moved (1 commit behind origin/main): uncommitted changes to alpha.txt" in result.stderr
    assert "top/beta: kms has diverged from origin/kms (1 commit ahead of, 1 behind); not moved" in result.stderr
    assert "top: main up to date with origin/main" in result.stdout
    assert {r: git(g.toplevel / r, "rev-parse", "HEAD") for r in ("alpha", "beta")} == before
    assert (top_alpha / "alpha.txt").read_text() == "dirty in the toplevel\n"
    # push never forces: the diverged kms is refused, the remote keeps the colleague's commit
    pushed = g.inv(g.toplevel, "git.push", check=False)
    assert pushed.returncode == 1
    assert "top/beta: kms is 1 commit ahead of, 1 behind origin/kms: not pushed (never forced)" in pushed.stderr
    # off-branch, then offline: one clear line per repo, nothing moved
    git(top_alpha, "checkout", "-q", "alpha.txt")
    git(top_alpha, "checkout", "-q", "-b", "side")
    off = g.inv(g.toplevel, "git.pull", check=False)
    assert "top/alpha: main not moved (1 commit behind origin/main): the checkout is on 'side', expected 'main'" in off.stderr
    (g.remotes / "alpha.git").rename(g.remotes / "alpha-away.git")
    offline = g.inv(g.toplevel, "git.pull", check=False)
    assert offline.returncode == 1
    assert f"top/alpha: could not fetch origin (file://{g.remotes}/alpha.git)" in offline.stderr
    assert "nothing changed in it" in offline.stderr and "1 unreachable" in offline.stdout
    assert git(top_alpha, "rev-parse", "main") == before["alpha"]


def test_an_approved_domain_does_not_stop_the_toplevels_fast_forward(initialized):
    """`inv net.allow example.org` in the toplevel writes sandbox/net-allow.txt (tracked: the
    toplevel is dirty); a colleague pushes to the container remote; `inv git.pull` fast-forwards the
    toplevel anyway and the allowance still holds.  When the colleague changed that file too, the
    pull refuses it alone (nothing changed) and says how to merge by hand; another dirty file still
    stops it as before."""
    g = initialized
    g.inv(g.toplevel, "net.allow", "example.org")
    allow = g.toplevel / "sandbox" / "net-allow.txt"
    assert "example.org" in allow.read_text()
    new = colleague_pushes(g.base, g.remotes / "chtop.git", "main", "COLLEAGUE.md")
    pulled = g.inv(g.toplevel, "git.pull")
    assert "top: main fast-forwarded 1 commit from origin/main" in pulled.stdout, pulled.stdout
    assert "kept your uncommitted changes to sandbox/net-allow.txt" in pulled.stdout, pulled.stdout
    assert git(g.toplevel, "rev-parse", "HEAD") == new and (g.toplevel / "COLLEAGUE.md").exists()
    assert "example.org" in allow.read_text()
    # the colleague allows a domain of their own: the same file, changed on both sides
    colleague = g.base / "colleague-chtop"      # their clone, from the first push
    g.commit(colleague, "sandbox/net-allow.txt", "colleague.example\n", "colleague: allow colleague.example")
    git(colleague, "push", "-q", "origin", "main")
    both = g.inv(g.toplevel, "git.pull", check=False)
    assert both.returncode == 3, both.stderr
    assert ("top: main not moved: origin/main changes sandbox/net-allow.txt too, which has your uncommitted "
            "policy changes") in both.stderr, both.stderr
    assert f"git -C {g.toplevel} commit -m 'sandbox policy' -- sandbox" in both.stderr
    assert git(g.toplevel, "rev-parse", "HEAD") == new and "example.org" in allow.read_text()
    # any other uncommitted file still stops the fast-forward, as it always did
    (g.toplevel / "README.md").write_text("mine\n")
    other = g.inv(g.toplevel, "git.pull", check=False)
    assert "uncommitted changes to README.md" in other.stderr, other.stderr


def test_rebase_down_says_when_a_remote_has_moved_that_git_pull_has_not_brought_in(with_dev):
    g = with_dev
    colleague_pushes(g.base, g.remotes / "alpha.git", "main", "a.txt")
    git(g.toplevel / "alpha", "fetch", "-q", "origin")     # fetched (by hand, or a pull that could not move)
    before = git(g.toplevel / "alpha", "rev-parse", "main")
    done = g.inv(g.path("dev"), "git.rebase-down")
    assert "dev/alpha: nothing to rebase" in done.stdout, done.stdout
    assert "top/alpha: origin/main has 1 commit that main here lacks (as last fetched)" in done.stdout, done.stdout
    assert f"cd {g.toplevel} && inv git.pull" in done.stdout
    assert "beta" not in done.stdout.split("remotes have moved")[1]
    assert git(g.toplevel / "alpha", "rev-parse", "main") == before       # nothing fetched or moved
    g.inv(g.path("dev"), "git.pull")
    again = g.inv(g.path("dev"), "git.rebase-down")
    assert "remotes have moved" not in again.stdout and "1 new commit(s) on main" in again.stdout, again.stdout


def test_rebase_down_reads_each_branchs_configured_upstream_and_every_repo_is_asked(with_dev):
    """A branch that tracks another remote than origin is compared with that remote's ref; two repos
    whose branch moved past origin are both asked, and each says what its remote has."""
    g = with_dev
    colleague_pushes(g.base, g.remotes / "alpha.git", "main", "a.txt")
    colleague_pushes(g.base, g.remotes / "beta.git", "kms", "b.txt")
    alpha, beta = g.toplevel / "alpha", g.toplevel / "beta"
    git(alpha, "remote", "add", "mirror", f"file://{g.remotes / 'alpha.git'}")
    git(alpha, "fetch", "-q", "mirror")
    git(alpha, "config", "branch.main.remote", "mirror")
    git(beta, "fetch", "-q", "origin")
    for repo in (alpha, beta):          # a commit of yours on each integration branch: it is no longer origin's
        g.commit(repo, "mine.txt", "mine\n", "mine")
    done = g.inv(g.path("dev"), "git.rebase-down")
    assert "top/alpha: mirror/main has 1 commit that main here lacks (as last fetched)" in done.stdout, done.stdout
    assert "top/beta: origin/kms has 1 commit that kms here lacks (as last fetched)" in done.stdout, done.stdout


def test_rebase_down_compares_with_origin_where_a_branch_names_no_upstream(with_dev):
    """A branch with no ``branch.B.remote``/``.merge`` (git's own answer is empty) is compared with
    ``origin/B``, as a clone's branch would be."""
    g = with_dev
    colleague_pushes(g.base, g.remotes / "alpha.git", "main", "a.txt")
    alpha = g.toplevel / "alpha"
    git(alpha, "fetch", "-q", "origin")
    git(alpha, "config", "--unset", "branch.main.remote")
    git(alpha, "config", "--unset", "branch.main.merge")
    done = g.inv(g.path("dev"), "git.rebase-down")
    assert "top/alpha: origin/main has 1 commit that main here lacks (as last fetched)" in done.stdout, done.stdout
