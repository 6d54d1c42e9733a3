"""Dashboard benchmark: one `inv dash` refresh against one `inv worktree.list`, same workspace, same run.

The workspace: 20 feature worktrees of 4 repos each (plus the container
repo), some dirty, some ahead.  The refresh is timed in-process, as the
dashboard runs it (every repo of every worktree in one pool, sessions and
pending requests included, sandbox load left out: it has its own slower
timer); the baseline is the command a user would run, `inv worktree.list`,
and, for the fixed cost, worktree.list's function in-process.

    python bench/bench_dash.py [--rounds N] [--worktrees N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chtop_tasks.cli import demo  # noqa: E402
from chtop_tasks.dash import model  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402
from chtop_tasks.workspace.worktrees import create_worktree, list_worktrees  # noqa: E402

REPOS = ("one", "two", "three", "four")


def build_group(base: Path, worktrees: int, names: list[str] | None = None) -> Path:
    remotes, grouping = base / "remotes", base / "ch"
    remotes.mkdir()
    grouping.mkdir()
    spec = {"branch": "main", "files": {f"f{i}.txt": f"{i}\n" * 50 for i in range(40)}}
    manifest = ""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        for name in REPOS:
            demo.make_sample_remote(remotes, name, spec)
            manifest += f'[[repo]]\nname = "{name}"\nurl = "{remotes}/{name}.git"\nbranch = "main"\ninstall = "none"\n\n'
        top = demo.clone_project_as_toplevel(grouping, manifest)
        subprocess.run(["git", "branch", "-M", "main"], cwd=top, check=True)   # whatever this checkout is on
        for name in REPOS:
            subprocess.run(["git", "clone", "-q", f"{remotes}/{name}.git", str(top / name)], check=True)
        ws = find_workspace(top)
        for i, name in enumerate(names or [f"wt{i:02d}" for i in range(worktrees)]):
            wt = create_worktree(ws, name)
            repo = wt.root / REPOS[i % len(REPOS)]
            if i % 3 == 0:
                (repo / "f1.txt").write_text("changed\n")              # dirty
            if i % 4 == 0:
                (repo / "new.txt").write_text("new\n")
                subprocess.run(["git", "add", "new.txt"], cwd=repo, check=True)
                subprocess.run(["git", "commit", "-q", "-m", "ahead"], cwd=repo, check=True)
    return top


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worktrees", type=int, default=20)
    args = parser.parse_args()
    os.environ.update({"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                       "GIT_COMMITTER_EMAIL": "b@b"})
    with tempfile.TemporaryDirectory(prefix="chtop-bench-dash-") as tmp:
        top = build_group(Path(tmp), args.worktrees)
        ws = find_workspace(top)
        no_sessions = lambda group: []  # noqa: E731 - no agents run in the bench
        snap = model.take_snapshot(ws, no_sessions)
        repos = sum(len(w.repos) for w in snap.worktrees)
        inv_list, fn_list, refresh = [], [], []
        for _ in range(args.rounds):
            inv_list.append(timed(lambda: subprocess.run([sys.executable, "-m", "invoke", "worktree.list"], cwd=top,
                                                         capture_output=True, check=True)))
            fn_list.append(timed(lambda: list_worktrees(ws)))
            refresh.append(timed(lambda: model.take_snapshot(ws, no_sessions)))
        inv_t, fn_t, ref_t = (statistics.median(x) for x in (inv_list, fn_list, refresh))
        print(f"dash refresh, {len(snap.worktrees)} worktrees x {len(REPOS)} repos (+ container, {repos} checkouts): "
              f"{ref_t * 1000:.0f} ms; inv worktree.list {inv_t * 1000:.0f} ms; "
              f"ratio {ref_t / inv_t:.2f}x (target <= 1.0x)")
        print(f"  without inv's start-up: worktree.list's function {fn_t * 1000:.0f} ms, "
              f"ratio {ref_t / fn_t:.2f}x (the refresh also reads sessions and pending requests)")


if __name__ == "__main__":
    main()
