"""Benchmark: venv.build with uv against pip, and what a venv adds to worktree.create.

    python bench/bench_venv.py [--rounds N]

1. Builds the tests' two tiny packages (``a``: editable with build
   isolation, ``b``: editable without) with each installer and prints the
   median wall time of a fresh build (new venv: create it, install, smoke
   imports), of a rebuild that reuses the venv (installs + smoke imports),
   and the ratio uv/pip for each (targets: 0.20x fresh, 0.25x rebuild).
2. The same two packages as the repos of a feature worktree, whose venv builds the way every
   feature worktree's does: inside its sandbox (``build_workspace_venv``), fresh and reused, with
   each installer; the isolated build's setuptools comes from a local index on 127.0.0.2 through
   the build's proxy socket (the index a build's allowance names), and the ratio uv/pip for each
   (the same targets: the sandbox costs both installers the same launch).
3. Runs ``inv worktree.create`` end to end (a new ``inv`` process, as a user
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

from chtop_tasks.cli import demo  # noqa: E402
from chtop_tasks.venv import build as V  # noqa: E402
from chtop_tasks.venv.sandboxed import build_workspace_venv  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402
from chtop_tasks.workspace.manifest import parse_manifest  # noqa: E402
from chtop_tasks.workspace.worktrees import delete_worktree  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "sandbox"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from bench_sandbox import stop_proxies  # noqa: E402
from test_venv_sandboxed import local_index  # noqa: E402  (the tests' index on 127.0.0.2)
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


SANDBOXED_MANIFEST = MANIFEST.replace("file:///nowhere/a.git", "{remotes}/a.git").replace(
    "file:///nowhere/b.git", "{remotes}/b.git")
NO_INDEX_ENV = ("PIP_NO_INDEX", "PIP_FIND_LINKS", "UV_NO_INDEX", "UV_FIND_LINKS", "UV_CONFIG_FILE")


def sample_remotes(remotes: Path) -> None:
    """The samples ``a`` and ``b`` as bare remotes in ``remotes``."""
    seeds = remotes / "seeds"
    write_sample_packages(seeds)
    for name in ("a", "b"):
        spec = {"branch": "main", "files": {str(f.relative_to(seeds / name)): f.read_text()
                                           for f in (seeds / name).rglob("*") if f.is_file()}}
        demo.make_sample_remote(remotes, name, spec)


def sample_worktree(base: Path) -> Path:
    """A toplevel whose repos are the samples, initialised, and its feature worktree ``dev`` with no
    venv yet: dev's path."""
    remotes, grouping = base / "remotes", base / "ch"
    remotes.mkdir(parents=True)
    grouping.mkdir()
    with contextlib.redirect_stderr(io.StringIO()):
        sample_remotes(remotes)
        top = demo.clone_project_as_toplevel(grouping, SANDBOXED_MANIFEST.format(remotes=remotes))
    for args in (("toplevel.init", "--no-venv"), ("worktree.create", "--name", "dev", "--no-venv")):
        proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=top, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        if proc.returncode:
            raise SystemExit(f"inv {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return grouping / "dev"


@contextlib.contextmanager
def output_to(path: Path):
    """This process's stdout and stderr, its children's too (the sandbox's), into ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def timed_sandboxed_build(dev: Path, installer: str, recreate: bool) -> float:
    out = dev.parent / "build-output.txt"
    start = time.perf_counter()
    try:
        with output_to(out):
            build_workspace_venv(find_workspace(dev), installer=installer, recreate=recreate)
    except Exception:
        print(out.read_text()[-4000:])
        raise
    return time.perf_counter() - start


def bench_sandboxed(tmp: Path, house: Path, rounds: int) -> dict[str, dict[str, float]]:
    """Median fresh-build and rebuild times per installer of a feature worktree's venv, in its sandbox."""
    saved = {name: os.environ.pop(name) for name in NO_INDEX_ENV if name in os.environ}
    results: dict[str, dict[str, float]] = {}
    try:
        with local_index(house, tmp / "sandboxed") as (url, _asked):
            os.environ.update({"PIP_INDEX_URL": url, "UV_DEFAULT_INDEX": url})
            dev = sample_worktree(tmp / "sandboxed")
            for installer in V.INSTALLERS:
                timed_sandboxed_build(dev, installer, recreate=True)   # warm-up: the build's own cache
                fresh = [timed_sandboxed_build(dev, installer, recreate=True) for _ in range(rounds)]
                reuse = [timed_sandboxed_build(dev, installer, recreate=False) for _ in range(rounds)]
                results[installer] = {"fresh": statistics.median(fresh), "reuse": statistics.median(reuse)}
                print(f"{installer:4} in the sandbox: fresh build {results[installer]['fresh']:6.2f}s   "
                      f"rebuild (venv reused) {results[installer]['reuse']:6.2f}s   (median of {rounds})", flush=True)
    finally:
        for name in ("PIP_INDEX_URL", "UV_DEFAULT_INDEX"):
            os.environ.pop(name, None)
        os.environ.update(saved)
    return results


def report_ratios(results: dict[str, dict[str, float]], where: str) -> None:
    for kind, target in (("fresh", FRESH_TARGET), ("reuse", REUSE_TARGET)):
        ratio = results["uv"][kind] / results["pip"][kind]
        print(f"uv/pip {kind:5}{where}: {ratio:.2f}x (target <= {target:.2f}x: {verdict(ratio <= target)})")


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
        try:
            report_ratios(bench_installers(tmp, args.rounds), " (host, the toplevel's build)")
            report_ratios(bench_sandboxed(tmp, house, args.rounds), " (a feature worktree's, in its sandbox)")
            with_venv, without = bench_create(tmp, args.rounds)
        finally:
            stop_proxies(tmp)          # the sandboxed builds' proxies, before their group dirs go
        extra = with_venv - without
        print(f"worktree.create, demo's 2 repos, end to end (median of {args.rounds}): with its venv "
              f"({V.choose_installer()}) {with_venv:.2f}s, --no-venv {without:.2f}s, the venv's extra {extra:.2f}s "
              f"(target <= {CREATE_EXTRA_TARGET:.1f}s: {verdict(extra <= CREATE_EXTRA_TARGET)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
