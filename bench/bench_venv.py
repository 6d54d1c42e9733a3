"""Benchmark: venv.build of the same two-package workspace with uv and with pip.

    python bench/bench_venv.py [--rounds N]

Builds the tests' two tiny packages (``a``: editable with build isolation,
``b``: editable without) with each installer and prints the median wall
time of a fresh build (new venv: venv + ensurepip + installs + smoke
imports), of a rebuild that reuses the venv (installs + smoke imports: the
installer's own share), and the ratio uv/pip for each.

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

from chtop_tasks.venv import build as V  # noqa: E402
from chtop_tasks.workspace.manifest import parse_manifest  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from venv_samples import write_sample_packages  # noqa: E402  (the tests' own samples)

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed builds per installer and kind (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chtop-bench-venv-") as tmp:
        tmp = Path(tmp)
        house = tmp / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(house),
                        "setuptools>=64"], check=True, stdin=subprocess.DEVNULL)
        os.environ.update({
            "HOME": str(tmp / "home"), "XDG_CACHE_HOME": str(tmp / "cache"),
            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house),
            "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(house), "UV_NO_CONFIG": "1",
        })
        results: dict[str, dict[str, float]] = {}
        for installer in V.INSTALLERS:
            root = tmp / installer
            manifest = make_root(root)
            timed_build(root, manifest, installer, recreate=True)  # warm-up: caches, page cache
            fresh = [timed_build(root, manifest, installer, recreate=True) for _ in range(args.rounds)]
            reuse = [timed_build(root, manifest, installer, recreate=False) for _ in range(args.rounds)]
            results[installer] = {"fresh": statistics.median(fresh), "reuse": statistics.median(reuse)}
            print(f"{installer:4} fresh build {results[installer]['fresh']:6.2f}s   "
                  f"rebuild (venv reused) {results[installer]['reuse']:6.2f}s   "
                  f"(median of {args.rounds})", flush=True)
        for kind in ("fresh", "reuse"):
            ratio = results["uv"][kind] / results["pip"][kind]
            print(f"uv/pip {kind:5}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
