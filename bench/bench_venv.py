"""Benchmark: venv.build with uv against pip, and what a venv adds to worktree.create.

    python bench/bench_venv.py [--rounds N]

1. Builds the tests' two tiny packages (``a``: editable with build
   isolation, ``b``: editable without) with each installer and prints the
   median wall time of a fresh build (new venv: create it, install, smoke
   imports), of a rebuild that reuses the venv (installs + smoke imports),
   and the ratio uv/pip for each (targets: 0.20x fresh, 0.25x rebuild).
2. Runs ``inv worktree.create`` end to end (a new ``inv`` process, as a user
   types it) on the demo's two repos, with its venv (the default installer)
   and with ``--no-venv``, and prints both medians and the venv's extra
   (target: at most 1.5 s).

Both installers see only a local wheelhouse (no index), a private HOME and
cache, and are warmed up once before timing.  Not run by the tests.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chtop_tasks import demo  # noqa: E402
from chtop_tasks.venv import build as V  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402
from chtop_tasks.workspace.manifest import parse_manifest  # noqa: E402
from chtop_tasks.workspace.worktrees import delete_worktree  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from venv_samples import offline_env, write_sample_packages  # noqa: E402  (the tests' own samples)

FRESH_TARGET, REUSE_TARGET, CREATE_EXTRA_TARGET = 0.20, 0.25, 1.5

MANIFEST = """\
[[repo]]
name = "a"
url = "file:///nowhere/a.git"
branch = "main"
install = "editable"
smoke_import = "a"

[[repo]]
name = "b"
url = "file:///nowhere/b.git"
branch = "main"
install = "editable-no-build-isolation"
smoke_import = "b_frb"
"""


def make_root(root: Path):
    write_sample_packages(root)
    (root / "git_repositories.toml").write_text(MANIFEST)
    return parse_manifest(root / "git_repositories.toml", MANIFEST)


def timed_build(root: Path, manifest, installer: str, recreate: bool) -> float:
    sink = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        V.build_venv(root, manifest, installer=installer, recreate=recreate)
    return time.perf_counter() - start


def bench_installers(tmp: Path, rounds: int) -> dict[str, dict[str, float]]:
    """Median fresh-build and rebuild times per installer."""
    results: dict[str, dict[str, float]] = {}
    for installer in V.INSTALLERS:
        root = tmp / installer
        manifest = make_root(root)
        timed_build(root, manifest, installer, recreate=True)  # warm-up: caches, page cache
        fresh = [timed_build(root, manifest, installer, recreate=True) for _ in range(rounds)]
        reuse = [timed_build(root, manifest, installer, recreate=False) for _ in range(rounds)]
        results[installer] = {"fresh": statistics.median(fresh), "reuse": statistics.median(reuse)}
        print(f"{installer:4} fresh build {results[installer]['fresh']:6.2f}s   "
              f"rebuild (venv reused) {results[installer]['reuse']:6.2f}s   "
              f"(median of {rounds})", flush=True)
    return results


def demo_group(base: Path) -> Path:
    """The demo's two repos as bare remotes, and a toplevel with both cloned; its path."""
    remotes, grouping = base / "remotes", base / "ch"
    remotes.mkdir(parents=True)
    grouping.mkdir()
    with contextlib.redirect_stderr(io.StringIO()):
        for name, spec in demo.SAMPLES.items():
            demo.make_sample_remote(remotes, name, spec)
        top = demo.clone_project_as_toplevel(grouping, demo.DEMO_MANIFEST.format(remotes=remotes))
        for name in demo.SAMPLES:
            subprocess.run(["git", "clone", "-q", str(remotes / f"{name}.git"), str(top / name)], check=True)
    return top


def timed_create(top: Path, name: str, venv: bool) -> float:
    """Seconds for ``inv worktree.create --name NAME [--no-venv]`` in ``top``; deletes it again."""
    argv = [sys.executable, "-m", "invoke", "worktree.create", "--name", name] + ([] if venv else ["--no-venv"])
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=top, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}")
    if venv and not (top.parent / name / ".venv" / "bin" / "python").exists():
        raise SystemExit(f"worktree.create --name {name} made no venv")
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        delete_worktree(find_workspace(top), name, force=True, cwd=top)
    return elapsed


def bench_create(tmp: Path, rounds: int) -> tuple[float, float]:
    """Median ``worktree.create`` times with its venv and with --no-venv, interleaved."""
    top = demo_group(tmp / "create")
    timed_create(top, "warm", venv=True)
    with_venv, without = [], []
    for i in range(rounds):
        with_venv.append(timed_create(top, f"v{i}", venv=True))
        without.append(timed_create(top, f"n{i}", venv=False))
    return statistics.median(with_venv), statistics.median(without)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per installer and kind (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chtop-bench-venv-") as tmp:
        tmp = Path(tmp)
        house = tmp / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(house),
                        "setuptools>=64"], check=True, stdin=subprocess.DEVNULL)
        os.environ.update({"HOME": str(tmp / "home"), "XDG_CACHE_HOME": str(tmp / "cache"), **demo.DEMO_ENV,
                           **offline_env(house, tmp / "offline")})
        os.environ.pop("UV_CACHE_DIR", None)
        os.environ.pop(V.INSTALLER_ENV, None)
        results = bench_installers(tmp, args.rounds)
        for kind, target in (("fresh", FRESH_TARGET), ("reuse", REUSE_TARGET)):
            ratio = results["uv"][kind] / results["pip"][kind]
            print(f"uv/pip {kind:5}: {ratio:.2f}x (target <= {target:.2f}x: {verdict(ratio <= target)})")
        with_venv, without = bench_create(tmp, args.rounds)
        extra = with_venv - without
        print(f"worktree.create, demo's 2 repos, end to end (median of {args.rounds}): with its venv "
              f"({V.choose_installer()}) {with_venv:.2f}s, --no-venv {without:.2f}s, the venv's extra {extra:.2f}s "
              f"(target <= {CREATE_EXTRA_TARGET:.1f}s: {verdict(extra <= CREATE_EXTRA_TARGET)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
