"""Benchmark: the CHORD chain's CUDA build (pipmake -> ksgpu with nvcc), first tree against second.

    CHTOP_REAL_REPOS=/work/shared/real-repos python bench/bench_cuda_build.py [--installer uv]

Makes a CHORD workspace from the real repos' bundles (``tests/real_repos.py``; pirate
``install = "none"``: it needs grpc), then times, in the same run:

1. the toplevel's venv build (``venv.build`` on the host: every ksgpu object compiled by nvcc,
   through ccache into the group's empty compiler cache), then
2. a feature worktree of the same sources (``worktree.create --no-venv``, then its venv build,
   the way every feature worktree's is built: inside its sandbox; the objects come from the
   toplevel's store, read-only),

and prints both times, the ratio second/first, the second's ccache counters, and the load
(target: the second at most 60 s).  The Makefile's own three GPU architectures are built.  Not
run by the tests (minutes of nvcc).

The second build fetches pipmake's build requirement (setuptools) from the index through its
proxy, which refuses an index host that resolves to a non-public address unless its entry says
``private``: where PyPI's hosts resolve so (a registry mirror on this build machine), the bench
writes ``pypi.org private`` and ``files.pythonhosted.org private`` into the toplevel's
``sandbox/net-allow-build.txt`` and says so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "tests"))
sys.path.insert(0, str(HERE / "tests" / "sandbox"))
sys.path.insert(0, str(HERE / "tests" / "integration"))

from real_repos import mark_pypi_private_where_it_resolves_so, non_public_addresses  # noqa: E402
from test_real_workspace import chord_group  # noqa: E402  (the tests' CHORD workspace)

from chtop_tasks.venv import build as V  # noqa: E402
from chtop_tasks.venv import compcache  # noqa: E402
from chtop_tasks.venv.sandboxed import build_workspace_venv  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402

SECOND_TARGET_S = 60.0


def load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def inv(cwd: Path, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"inv {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}")


def allow_a_private_pypi(top: Path) -> None:
    """PyPI's hosts as ``private`` build entries where they resolve to non-public addresses here."""
    hosts = mark_pypi_private_where_it_resolves_so(top)
    if hosts:
        print(f"{', '.join(hosts)} resolve to non-public addresses here ({', '.join(non_public_addresses(hosts[0]))}): "
              "marked private in the toplevel's sandbox/net-allow-build.txt for the second build", flush=True)


def timed_venv_build(root: Path, installer: str) -> float:
    ws = find_workspace(root)
    sink = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            build_workspace_venv(ws, installer=installer)   # the toplevel's on the host, a worktree's inside
    except Exception:
        print(sink.getvalue()[-6000:])
        raise
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--installer", default="uv", choices=V.INSTALLERS)
    args = parser.parse_args()
    if compcache.ccache_path() is None:
        sys.exit("ccache is not on PATH (./bootstrap installs it)")
    with tempfile.TemporaryDirectory(prefix="chtop-bench-cuda-") as tmp:
        grouping, top = chord_group(Path(tmp), pirate_install="none", ksgpu_smoke=False)
        inv(top, "toplevel.init", "--no-venv")
        print(f"load before: {load()}", flush=True)
        first = timed_venv_build(top, args.installer)
        print(f"first  (toplevel, empty compiler cache): {first:7.1f} s   load {load()}", flush=True)
        inv(top, "worktree.create", "--name", "dev", "--no-venv")
        allow_a_private_pypi(top)
        second = timed_venv_build(grouping / "dev", args.installer)
        print(f"second (worktree dev, same sources):     {second:7.1f} s   load {load()}", flush=True)
        counters = compcache.stats(grouping / "dev")
        print(f"ratio second/first: {second / first:.3f}   (target: second <= {SECOND_TARGET_S:.0f} s: "
              f"{'met' if second <= SECOND_TARGET_S else 'MISSED'})")
        print("second's ccache: " + ", ".join(f"{k}={counters.get(k, 0)}" for k in
                                              ("direct_cache_hit", "preprocessed_cache_hit", "remote_storage_hit",
                                               "cache_miss", "called_for_link")))


if __name__ == "__main__":
    main()
