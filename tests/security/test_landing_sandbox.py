"""What lands is what was reviewed, attacked from inside a real sandbox: the agent commits around
the checkout's pins with git plumbing, hides a change from status with index flags, shapes the
attribute files and the review's diff, and plants FIFOs where host git opens files by name.

Rootless (the test user) and rootful (the same workspace owned and run by root).
"""

from __future__ import annotations

import pytest
from sandbox_helpers import root_owned, rootful_podman_env, user_group_cm

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture(params=["rootless", pytest.param("rootful", marks=pytest.mark.rootful)])
def g(request, remote_template, tmp_path):
    with user_group_cm(remote_template) as group:
        if request.param == "rootful":
            group = root_owned(group, rootful_podman_env(tmp_path))
        yield group


def agent(g, script: str) -> None:
    """``script`` inside dev's sandbox; it must reach its end (``AGENT-DONE``)."""
    proc = g.sbox(script + " && echo AGENT-DONE", timeout=180)
    assert "AGENT-DONE" in proc.stdout, proc.stdout + proc.stderr


# What an agent can do to tasks.py with its store alone: the checkout's file is pinned read-only,
# the store is not.  The index then says the new blob, flagged skip-worktree: status is clean.
COMMIT_AROUND_THE_PIN = (
    "export GIT_INDEX_FILE=/tmp/scratch-index && git read-tree HEAD && "
    "b=$( (cat tasks.py; echo \"print('agent line')\") | git hash-object -w --stdin) && "
    "git update-index --cacheinfo 100644,$b,tasks.py && t=$(git write-tree) && unset GIT_INDEX_FILE && "
    "c=$(git commit-tree $t -p HEAD -m harmless) && git update-ref HEAD $c && "
    "git update-index --cacheinfo 100644,$b,tasks.py && git update-index --skip-worktree tasks.py"
)


def test_a_commit_around_the_pin_on_tasks_py_is_shown_and_not_landed(g):
    agent(g, COMMIT_AROUND_THE_PIN)
    status = g.inv("git.status")
    assert "tasks.py" in status.stderr and "skip-worktree" in status.stderr, status.stdout + status.stderr
    main = g.git(g.toplevel, "rev-parse", "main")
    merge = g.inv("git.merge-up")
    assert merge.returncode == 3 and "tasks.py" in merge.stderr, merge.stdout + merge.stderr
    assert g.git(g.toplevel, "rev-parse", "main") == main
    assert "agent line" not in (g.toplevel / "tasks.py").read_text()


def test_attributes_past_a_nul_or_shaped_as_a_diff_header_do_not_run_your_filter(g):
    """Two commits whose attribute lines a reader of ``git diff`` misses (a NUL: "Binary files
    differ"; ``++ filter=x``: a ``+++`` header) are refused, and the filter never runs."""
    mark = g.base / "smudge-ran"
    with open(g.home / ".gitconfig", "a") as fh:
        fh.write(f'[filter "x"]\n\tsmudge = touch {mark}; cat\n\tclean = cat\n')
    main = g.git(g.toplevel / "alpha", "rev-parse", "main")
    agent(g, "cd alpha && printf '*.txt filter=x\\n\\000\\n' > .gitattributes && echo data > new.txt && "
             "git add .gitattributes new.txt && git -c core.autocrlf=false commit -qm 'binary attributes'")
    merge = g.inv("git.merge-up")
    assert merge.returncode == 3 and "NUL" in merge.stderr, merge.stdout + merge.stderr
    agent(g, "cd alpha && git reset -q --hard HEAD~1 && printf '++ filter=x\\n' > .gitattributes && "
             "echo data > ++ && git add .gitattributes ++ && git commit -qm 'header-shaped attributes'")
    merge = g.inv("git.merge-up")
    assert merge.returncode == 3 and "++ (filter=x)" in merge.stderr, merge.stdout + merge.stderr
    assert g.git(g.toplevel / "alpha", "rev-parse", "main") == main and not mark.exists()


def test_a_fifo_planted_where_git_opens_a_file_by_name_is_refused_by_name(g):
    fifo = g.dev / "alpha" / ".gitignore"
    agent(g, f"mkfifo {fifo}")
    status = g.inv("git.status", timeout=90)
    assert status.returncode != 0 and f"rm {fifo}" in status.stderr, status.stdout + status.stderr
    listed = g.inv("worktree.list", cwd=g.toplevel, timeout=90)
    assert f"rm {fifo}" in listed.stdout + listed.stderr, listed.stdout + listed.stderr


def test_the_review_shows_what_attributes_inside_call_binary(g):
    agent(g, "cd alpha && printf '*.txt -diff\\n.gitattributes -diff\\n' > .gitattributes && "
             "echo 'evil line' >> alpha.txt && git add -A && git commit -qm 'quiet change'")
    review = g.inv("git.diff", "--integration")
    assert "+evil line" in review.stdout and "Binary files" not in review.stdout, review.stdout + review.stderr
    assert ".gitattributes" in review.stdout.split("+evil line")[0], review.stdout
