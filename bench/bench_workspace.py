"""Workspace benchmarks, each a ratio against a baseline measured in the same run.

  1. worktree.create --no-venv for 3 repos (+ the container repo) against the
     bare `git worktree add` calls it makes (target: under 1.5x);
  2. git.status over 4 repos (fanned out) against running them one after another,
     and against today's fan-out without the import of the agent's branch
     (target: within 1.2x);
  3. an import with nothing new, per repo (against its target, printed with it);
  4. a venv build of two sample packages with uv against pip (bench_venv.py).

chtop's side is timed in-process (imports warm), like the baseline's
subprocess calls; the fixed cost of starting `inv` is printed separately.

    python bench/bench_workspace.py [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chtop_tasks.cli import demo  # noqa: E402
from chtop_tasks.core import runner  # noqa: E402
from chtop_tasks.gitloop import status  # noqa: E402
from chtop_tasks.stores import quarantine  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402
from chtop_tasks.workspace.worktrees import create_worktree, delete_worktree  # noqa: E402

REPOS = ("one", "two", "three")


def build_group(base: Path) -> Path:
    remotes, grouping = base / "remotes", base / "ch"
    remotes.mkdir()
    grouping.mkdir()
    spec = {"branch": "main", "files": {f"f{i}.txt": f"{i}\n" * 50 for i in range(40)}}
    manifest = ""
    with contextlib.redirect_stderr(io.StringIO()):
        for name in REPOS:
            demo.make_sample_remote(remotes, name, spec)
            manifest += f'[[repo]]\nname = "{name}"\nurl = "{remotes}/{name}.git"\nbranch = "main"\ninstall = "none"\n\n'
        top = demo.clone_project_as_toplevel(grouping, manifest)
        for name in REPOS:
            subprocess.run(["git", "clone", "-q", f"{remotes}/{name}.git", str(top / name)], check=True)
    return top


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def bare_adds(top: Path, name: str) -> None:
    wt = top.parent / name
    subprocess.run(["git", "worktree", "add", "-q", "-b", name, str(wt), "HEAD"], cwd=top, check=True,
                   capture_output=True)
    for repo in REPOS:
        subprocess.run(["git", "worktree", "add", "-q", "-b", name, str(wt / repo), "main"], cwd=top / repo,
                       check=True, capture_output=True)


def remove_all(top: Path, name: str) -> None:
    wt = top.parent / name
    for repo in ("", *REPOS):
        subprocess.run(["git", "worktree", "remove", "--force", str(wt / repo)], cwd=top / repo, capture_output=True)
        subprocess.run(["git", "branch", "-D", name], cwd=top / repo, capture_output=True)
    shutil.rmtree(wt, ignore_errors=True)


def bench_create(top: Path, rounds: int) -> tuple[float, float]:
    ws = find_workspace(top)
    bare, chtop = [], []
    for i in range(rounds):
        bare.append(timed(lambda i=i: bare_adds(top, f"b{i}")))
        remove_all(top, f"b{i}")
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            chtop.append(timed(lambda i=i: create_worktree(ws, f"c{i}")))
            delete_worktree(ws, f"c{i}", cwd=top)
    return statistics.median(bare), statistics.median(chtop)


def bench_status(top: Path, rounds: int) -> tuple[float, float]:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        create_worktree(find_workspace(top), "st")
    ws = find_workspace(top.parent / "st")
    dirs = [c.path for c in ws.checkouts()]
    sequential, fanned, before = [], [], []
    for _ in range(rounds):
        sequential.append(timed(lambda: [subprocess.run(["git", "status"], cwd=d, capture_output=True) for d in dirs]))
        fanned.append(timed(lambda: status.fan_out_git(ws, ["status"])))
        before.append(timed(lambda: status_without_import(ws)))
    return statistics.median(sequential), statistics.median(fanned), statistics.median(before)


def status_without_import(ws) -> None:
    """git.status's fan-out as it was before private git state: verify, then git status per repo."""
    status.verify_git_dirs(ws)
    status.fan_out(lambda c: runner.run(["git", "status"], cwd=c.path, check=False, quiet=True), ws.checkouts())


def bench_empty_import(top: Path, rounds: int) -> float:
    """Seconds per repo for the import with nothing new (what every host task does first)."""
    ws = find_workspace(top.parent / "st")
    quarantine.sync_worktree(ws)
    n = len(ws.checkouts())
    return statistics.median(timed(lambda: quarantine.sync_worktree(ws, convert=False)) for _ in range(rounds * 10)) / n


def inv_startup() -> float:
    return statistics.median(timed(lambda: subprocess.run([sys.executable, "-m", "invoke", "--list"], cwd=ROOT,
                                                          capture_output=True)) for _ in range(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--skip-venv", action="store_true")
    args = parser.parse_args()
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    os.environ.update(env)
    with tempfile.TemporaryDirectory(prefix="chtop-bench-") as tmp:
        top = build_group(Path(tmp))
        bare, chtop = bench_create(top, args.rounds)
        print(f"worktree.create --no-venv, 3 repos + container: chtop {chtop * 1000:.1f} ms, "
              f"bare git worktree add x4 {bare * 1000:.1f} ms, ratio {chtop / bare:.2f}x (target < 1.5x)")
        seq, fan, before = bench_status(top, args.rounds)
        print(f"git.status over 4 repos: fanned out {fan * 1000:.1f} ms, one after another {seq * 1000:.1f} ms, "
              f"ratio {fan / seq:.2f}x")
        print(f"git.status over 4 repos with the import against without it (as before private git state): "
              f"{fan * 1000:.1f} ms vs {before * 1000:.1f} ms, ratio {fan / before:.2f}x (target < 1.2x)")
        empty = bench_empty_import(top, args.rounds)
        print(f"import with nothing new: {empty * 1000:.2f} ms per repo (target < 5 ms), "
              f"{empty / (before / 4):.2f}x of one repo's git status")
    print(f"(fixed cost of starting `inv` itself, not in the ratios above: {inv_startup() * 1000:.0f} ms)")
    if not args.skip_venv:
        bench_venv = ROOT / "bench" / "bench_venv.py"
        print("venv build, uv against pip:")
        sys.stdout.flush()
        subprocess.run([sys.executable, str(bench_venv)], check=False)


if __name__ == "__main__":
    main()
