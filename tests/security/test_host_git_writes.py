"""The git that chtop runs on the host to land or move work (merge-up, rebase-down), attacked from
inside a real sandbox: it runs no driver the agent chose, writes through no link the agent planted,
and lands exactly the commits that were reviewed.

Each test gets its own workspace owned by the unprivileged test user (rootless podman).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import eventually
from sandbox_helpers import as_owner_python, as_user, rootful_podman_env, user_group_cm

from chtop_tasks.workspace.layout import private_store

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture
def ug(remote_template):
    with user_group_cm(remote_template) as group:
        yield group


def add_user_config(g, text: str) -> None:
    """Append to the test user's own ~/.gitconfig (the config every host git of theirs reads)."""
    path = g.home / ".gitconfig"
    path.write_text(path.read_text() + text)


def test_merge_up_refuses_attributes_that_route_the_agents_files_through_a_configured_driver(ug):
    g = ug
    mark = g.base / "smudge-ran"
    add_user_config(g, f'[filter "x"]\n\tsmudge = touch {mark}; cat\n\tclean = cat\n')
    proc = g.sbox("cd alpha && echo '*.txt filter=x' > .gitattributes && echo data > new.txt && "
                  "git add .gitattributes new.txt && git commit -qm 'route files through x' && echo AGENT-DONE")
    assert "AGENT-DONE" in proc.stdout, proc.stdout + proc.stderr
    main = g.git(g.toplevel / "alpha", "rev-parse", "main")
    merge = g.inv("git.merge-up")
    assert merge.returncode == 3, merge.stdout + merge.stderr
    assert ".gitattributes" in merge.stderr and "filter=x" in merge.stderr, merge.stderr
    assert g.git(g.toplevel / "alpha", "rev-parse", "main") == main and not mark.exists()
    # the control: the same fast-forward by hand runs the driver the agent named
    g.git(g.toplevel / "alpha", "merge", "-q", "--ff-only", "dev")
    assert mark.exists()


def test_merge_up_lands_attributes_that_name_no_configured_driver(ug):
    g = ug
    proc = g.sbox("cd alpha && echo '*.py diff=python' > .gitattributes && git add .gitattributes && "
                  "git commit -qm 'diff patterns' && echo AGENT-DONE")
    assert "AGENT-DONE" in proc.stdout, proc.stdout + proc.stderr
    merge = g.inv("git.merge-up")
    assert merge.returncode == 0, merge.stdout + merge.stderr
    assert g.git(g.toplevel / "alpha", "log", "-1", "--format=%s", "main") == "diff patterns"


def plant_links(grouping: Path, victim: Path, victim_dir: Path) -> tuple[Path, str]:
    """(dev/alpha's private store, the script that plants, inside, after a commit: the admin dir's
    ``logs/HEAD`` a link to ``victim``, every free ``objects/XX`` a link to ``victim_dir``)."""
    store = private_store(grouping, "dev", "alpha")
    admin = store / "worktrees" / "alpha"
    fanout = " ".join(f"{i:02x}" for i in range(256))
    return store, (f"cd alpha && echo w > w.txt && git add w.txt && git commit -qm 'agent work' && "
                   f"rm -f {admin}/logs/HEAD && ln -s {victim} {admin}/logs/HEAD && "
                   f"for d in {fanout}; do [ -e {store}/objects/$d ] || ln -s {victim_dir} {store}/objects/$d; "
                   "done && echo PLANTED")


def assert_refused_untouched(rebase, store: Path, victim: Path, victim_dir: Path) -> None:
    assert rebase.returncode != 0, rebase.stdout + rebase.stderr
    assert "is a symlink" in rebase.stderr and str(store) in rebase.stderr, rebase.stderr
    assert victim.read_text() == "precious\n"
    assert list(victim_dir.iterdir()) == []


def test_rebase_down_never_writes_through_links_planted_in_the_private_store(ug):
    """rebase-down on the host refuses, naming the link, and neither target changes; without the
    links it rebases."""
    g = ug
    victim, victim_dir = g.base / "victim-file", g.base / "victim-dir"
    g.run(["sh", "-c", f"echo precious > {victim} && mkdir {victim_dir}"])
    g.git(g.toplevel / "alpha", "commit", "-q", "--allow-empty", "-m", "upstream change")   # something to rebase onto
    store, script = plant_links(g.grouping, victim, victim_dir)
    proc = g.sbox(script)
    assert "PLANTED" in proc.stdout, proc.stdout + proc.stderr
    assert_refused_untouched(g.inv("git.rebase-down"), store, victim, victim_dir)
    g.run(["sh", "-c", f"rm {store}/worktrees/alpha/logs/HEAD && find {store}/objects -maxdepth 1 -type l -delete"])
    rebase = g.inv("git.rebase-down")
    assert rebase.returncode == 0, rebase.stdout + rebase.stderr
    assert g.git(g.dev / "alpha", "log", "-2", "--format=%s").splitlines() == ["agent work", "upstream change"]


@pytest.mark.rootful
def test_as_root_rebase_down_never_writes_through_links_planted_inside(with_dev, tmp_path):
    """A root-owned workspace launched by root (a cloud GPU box): the victim stands in for
    /etc/ld.so.preload."""
    from chtop_tasks.proxy import stop_proxy

    g, dev = with_dev, with_dev.path("dev")
    victim, victim_dir = tmp_path / "ld.so.preload", tmp_path / "victim-dir"
    victim.write_text("precious\n")
    victim_dir.mkdir()
    g.commit(g.toplevel / "alpha", "up.txt", "u\n", "upstream change")
    store, script = plant_links(g.grouping, victim, victim_dir)
    try:
        proc = g.inv(dev, "sbox.run", "--", "sh", "-c", script, env=rootful_podman_env(tmp_path), check=False,
                     timeout=180)
        assert "PLANTED" in proc.stdout, proc.stdout + proc.stderr
        assert_refused_untouched(g.inv(dev, "git.rebase-down", check=False), store, victim, victim_dir)
    finally:
        stop_proxy(g.grouping)


def test_rebase_down_refuses_while_a_sandbox_of_the_worktree_runs(ug):
    """Inside, the agent could plant a link between chtop's check and git's write: rebase-down waits
    for the worktree's sandboxes to end, and says which run."""
    g = ug
    g.git(g.toplevel / "alpha", "commit", "-q", "--allow-empty", "-m", "upstream change")
    env = [f"{k}={v}" for k, v in g.env.items()]
    holder = subprocess.Popen(["runuser", "-u", g.user.pw_name, "--", "env", "-i", *env, str(g.venv / "bin" / "python"),
                               "-m", "invoke", "sbox.run", "--", "sleep", "120"], cwd=g.dev,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: "sleep 120" in g.inv("sbox.ps").stdout, "the holder's sandbox in sbox.ps", timeout=90,
                   interval=0.5)
        before = g.git(g.dev / "alpha", "rev-parse", "HEAD")
        refused = g.inv("git.rebase-down")
        assert refused.returncode == 3 and "sandbox(es) run in" in refused.stderr, refused.stdout + refused.stderr
        assert g.git(g.dev / "alpha", "rev-parse", "HEAD") == before
    finally:
        holder.terminate()
        holder.wait(timeout=60)
    eventually(lambda: "sleep 120" not in g.inv("sbox.ps").stdout, "the holder's sandbox gone from sbox.ps", timeout=60,
               interval=0.5)
    assert g.inv("git.rebase-down").returncode == 0


DASH_PLAN = """
import json
from pathlib import Path
from chtop_tasks.dash import actions
plan, ok = actions.dry_run(Path({dev!r}), "git.merge-up")
print(json.dumps({{"ok": ok, "plan": plan, "argv": actions.confirmed_argv("git.merge-up", plan)}}))
"""


def test_merge_up_lands_exactly_the_reviewed_tips_or_nothing(ug):
    """The dash's m shows the dry run, y runs it: a commit the agent adds in between is refused
    (exit 3, nothing moved); the CLI's --expect the same; a plain merge-up says the tips it landed."""
    g = ug
    commit = "cd alpha && echo {n} > f{n}.txt && git add f{n}.txt && git commit -qm 'work {n}' && echo DONE"
    assert "DONE" in g.sbox(commit.format(n=1)).stdout
    reviewed = as_owner_python(g, DASH_PLAN.format(dev=str(g.dev)))
    shown = json.loads(reviewed.stdout.strip().splitlines()[-1])
    tip1 = g.git(g.dev / "alpha", "rev-parse", "HEAD")
    assert shown["ok"] and f"alpha={tip1}" in shown["plan"], shown
    assert shown["argv"][-2:] == ["--expect", f"alpha={tip1}"], shown
    main = g.git(g.toplevel / "alpha", "rev-parse", "main")
    assert "DONE" in g.sbox(commit.format(n=2)).stdout          # after the review, before y
    confirmed = as_user(g.user, shown["argv"], g.env, g.dev, check=False)
    assert confirmed.returncode == 3, confirmed.stdout + confirmed.stderr
    assert "the dry run you reviewed would land" in confirmed.stderr and tip1 in confirmed.stderr
    assert g.git(g.toplevel / "alpha", "rev-parse", "main") == main
    assert g.inv("git.merge-up", "--expect", f"alpha={tip1}").returncode == 3
    tip2 = g.git(g.dev / "alpha", "rev-parse", "HEAD")
    landed = g.inv("git.merge-up", "--expect", f"alpha={tip2}")
    assert landed.returncode == 0, landed.stdout + landed.stderr
    assert f"landed dev/alpha at {tip2}" in landed.stdout, landed.stdout
    assert g.git(g.toplevel / "alpha", "rev-parse", "main") == tip2
    bad = g.inv("git.merge-up", "--expect", "gamma=123")
    assert bad.returncode == 2 and "is not REPO=SHA" in bad.stderr, bad.stderr
