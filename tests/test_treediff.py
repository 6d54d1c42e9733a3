"""chtop_tasks.workspace.treediff: the paths a commit changes, read from loose or packed trees, are git's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import git

from chtop_tasks.workspace.treediff import changed_paths


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def gits_paths(repo: Path, base: str, tip: str) -> set[str]:
    return set(git(repo, "diff", "--name-only", "--no-renames", base, tip).splitlines())


def test_changed_paths_are_gits_for_every_shape_of_change(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    (repo / "d" / "e").mkdir(parents=True)
    (repo / "d" / "e" / "deep.txt").write_text("deep\n")
    (repo / "d" / "keep.txt").write_text("keep\n")
    (repo / "gone").mkdir()
    (repo / "gone" / "x.txt").write_text("x\n")
    (repo / "becomes_dir").write_text("file\n")
    (repo / "old_name.txt").write_text("moved\n" * 20)
    base = commit_all(repo, "base")
    (repo / "a.txt").write_text("a2\n")                        # modified at the root
    (repo / "d" / "e" / "deep.txt").write_text("deeper\n")      # modified two levels down
    (repo / "new" / "sub").mkdir(parents=True)                 # a new directory, files in it
    (repo / "new" / "sub" / "n.txt").write_text("n\n")
    (repo / "new" / "m.txt").write_text("m\n")
    for path in (repo / "gone" / "x.txt",):
        path.unlink()
    (repo / "gone").rmdir()                                    # a directory removed
    (repo / "becomes_dir").unlink()
    (repo / "becomes_dir").mkdir()                             # a file made a directory
    (repo / "becomes_dir" / "inside.txt").write_text("i\n")
    os.symlink("a.txt", repo / "link")                         # a symlink added
    (repo / "run.sh").write_text("#!/bin/sh\n")
    os.rename(repo / "old_name.txt", repo / "new_name.txt")    # a rename: both of its paths
    tip = commit_all(repo, "tip")
    store = repo / ".git"
    found = changed_paths(store, base, tip)
    assert found == gits_paths(repo, base, tip)
    assert {"old_name.txt", "new_name.txt", "becomes_dir", "becomes_dir/inside.txt", "gone/x.txt"} <= found
    assert changed_paths(store, tip, tip) == set()
    (repo / "run.sh").chmod(0o755)                             # a mode change alone
    mode = commit_all(repo, "mode")
    assert changed_paths(store, tip, mode) == gits_paths(repo, tip, mode) == {"run.sh"}


def test_a_name_git_quotes_is_left_to_git_and_a_packed_tree_is_read(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    base = commit_all(repo, "base")
    (repo / "caf\u00e9.txt").write_text("quoted by git\n")
    tip = commit_all(repo, "tip")
    assert changed_paths(repo / ".git", base, tip) is None
    (repo / "plain.txt").write_text("p\n")
    later = commit_all(repo, "later")
    assert changed_paths(repo / ".git", tip, later) == {"plain.txt"}
    subprocess.run(["git", "repack", "-adq"], cwd=repo, check=True)
    subprocess.run(["git", "prune-packed"], cwd=repo, check=True)
    assert not any((repo / ".git" / "objects").glob("[0-9a-f][0-9a-f]/*"))
    assert changed_paths(repo / ".git", tip, later) == {"plain.txt"}          # read from the pack
    assert changed_paths(repo / ".git", base, tip) is None
