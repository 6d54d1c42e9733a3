"""The group lock: racing and killed worktree tasks leave nothing half-done (real processes, real git)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import git

from chtop_tasks.core.places import create_journal_path
from chtop_tasks.workspace.grouplock import group_lock
from chtop_tasks.workspace.worktrees import CreateRun


def inv_process(g, cwd, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "invoke", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout=300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def assert_complete_worktree(g, name):
    root = g.path(name)
    for repo in ("", "alpha", "beta"):
        assert git(root / repo, "branch", "--show-current") == name
        assert git(root / repo, "status", "--porcelain") == ""
    assert not create_journal_path(g.grouping, name).exists()


def assert_no_worktree(g, name):
    assert not g.path(name).exists() and not g.path(".chtop", "git", name, "alpha.git").exists()
    for repo in ("", "alpha", "beta"):
        assert name not in git(g.toplevel / repo, "branch", "--format=%(refname:short)").split()
    assert not create_journal_path(g.grouping, name).exists()


def test_two_racing_creates_one_wins_the_other_says_why(initialized):
    g = initialized
    procs = [inv_process(g, g.toplevel, "worktree.create", "--name", "race", "--no-venv") for _ in range(2)]
    results = [finish(p) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, _, err in results if code == 2)
    assert "already exists" in loser
    assert "could not remove" not in loser and "kept by an earlier delete" not in loser
    assert_complete_worktree(g, "race")


def test_a_task_waits_for_the_group_lock_saying_who_holds_it(initialized):
    g = initialized
    with group_lock(g.grouping, "test.hold"):
        proc = inv_process(g, g.toplevel, "worktree.create", "--name", "held", "--no-venv")
        killer = threading.Timer(240, proc.kill)
        killer.start()
        want = f"waiting for another chtop task on this group (pid {os.getpid()}: test.hold)"
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if want in line:
                break
        killer.cancel()
        assert any(want in line for line in seen), seen
        time.sleep(0.5)
        assert proc.poll() is None and not g.path("held").exists()      # still waiting, nothing made
    code, _, err = finish(proc)
    assert code == 0, "".join(seen) + err
    assert_complete_worktree(g, "held")


def test_a_create_racing_a_delete_ends_in_one_whole_state(with_dev):
    g = with_dev
    delete = inv_process(g, g.toplevel, "worktree.delete", "--name", "dev")
    create = inv_process(g, g.toplevel, "worktree.create", "--name", "dev", "--no-venv")
    (dcode, _, derr), (ccode, _, cerr) = finish(delete), finish(create)
    assert dcode == 0, derr
    assert "could not remove" not in cerr + derr and "Directory not empty" not in cerr + derr
    if ccode == 0:          # the delete went first: a fresh dev
        assert_complete_worktree(g, "dev")
    else:                   # the create went first and found dev there; then the delete removed it
        assert ccode == 2 and "already exists" in cerr, cerr
        assert_no_worktree(g, "dev")


KILLING_CREATE = """
import os, signal, sys
sys.path.insert(0, os.getcwd())
import chtop_tasks.workspace.worktrees as w
from chtop_tasks.workspace.layout import find_workspace
fn, n = sys.argv[1], int(sys.argv[2])
real, calls = getattr(w, fn), [0]
def killing(*args, **kwargs):
    calls[0] += 1
    if calls[0] == n:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
setattr(w, fn, killing)
w.create_worktree(find_workspace(), "race")
"""


@pytest.mark.parametrize("point, call", [("attach_private_worktree", 2), ("refresh_workspace_files", 1)])
@pytest.mark.parametrize("next_task", ["worktree.create", "worktree.delete"])
def test_a_create_killed_half_way_is_undone_by_the_next_task(initialized, point, call, next_task):
    g = initialized
    killed = subprocess.run([sys.executable, "-c", KILLING_CREATE, point, str(call)], cwd=g.toplevel,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert create_journal_path(g.grouping, "race").exists() and g.path("race").exists()   # half made
    args = ("--no-venv",) if next_task == "worktree.create" else ()
    result = g.inv(g.toplevel, next_task, "--name", "race", *args, check=False)
    assert "an earlier `worktree.create --name race` was interrupted; undoing what it made" in result.stderr
    if next_task == "worktree.create":
        assert result.returncode == 0, result.stderr
        assert_complete_worktree(g, "race")
    else:
        assert result.returncode == 2 and "no worktree 'race'" in result.stderr
        assert_no_worktree(g, "race")
        g.inv(g.toplevel, "worktree.create", "--name", "race", "--no-venv")
        assert_complete_worktree(g, "race")


def test_the_create_journal_is_appended_and_a_line_cut_short_at_its_end_is_a_step_not_taken(tmp_path):
    journal = tmp_path / "creating" / "dev.json"
    run = CreateRun("dev", journal)
    made = [tmp_path / "dev", tmp_path / "dev" / "alpha"]
    run.record_path(made[0])
    run.record_branch(tmp_path / "top" / "alpha", "a" * 40)
    run.record_path(made[1])
    assert len(journal.read_text().splitlines()) == 3                 # one line per step
    assert CreateRun.load(journal) == run
    with open(journal, "a") as fh:                                      # killed while writing a fourth
        fh.write('{"name": "dev", "pid": 1, "path": "/tmp/x')
    assert CreateRun.load(journal) == run
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join([lines[0], lines[-1], *lines[1:3]]) + "\n")   # cut short in the middle
    assert CreateRun.load(journal) is None
    journal.write_text("")                                              # killed before its first step
    assert CreateRun.load(journal) == CreateRun("dev", journal)
    journal.write_text('{"name": "dev", "path": "/a"}\n{"name": "other", "path": "/b"}\n')
    assert CreateRun.load(journal) is None                              # two runs' lines: not chtop's


def test_a_journal_of_the_whole_list_as_chtop_wrote_it_before_appends_still_reads(tmp_path):
    journal = tmp_path / "dev.json"
    journal.write_text(json.dumps({"pid": 1, "name": "dev", "paths": ["/g/dev", "/g/dev/alpha"],
                                   "branches": [["/g/top/alpha", "b" * 40]]}))
    assert CreateRun.load(journal) == CreateRun("dev", journal, ["/g/dev", "/g/dev/alpha"],
                                                [("/g/top/alpha", "b" * 40)])
