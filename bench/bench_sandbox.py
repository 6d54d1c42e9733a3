"""Launch overhead of `inv sbox.run -- true` against the bare `podman run` it wraps.

Run as root (it builds a throwaway workspace owned by the unprivileged test
user, as the tests do) or as a user with rootless podman:

    python bench/bench_sandbox.py [--runs N]

`inv` runs as a user's does: pip's `chtop-inv` console script (what `./bootstrap`
links `inv` to), whose light task path (chtop_tasks/cli/faststart.py) runs the
task without importing invoke.  Prints the median wall time of each and the
ratio (target: under 1.3x), starting Python (measured in the same interleaved
runs) as the floor any `inv` pays, and chtop's own share: the total minus that
floor minus the bare `podman run`.  Also times the same task through invoke's
own program (`python -m invoke`, where a command line the light path does not
take goes), beside the floor that path pays: Python plus importing invoke.
Not run by the tests.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

# pip's chtop-inv, with the checkout (argv[1]) first on sys.path: the worktree's own chtop_tasks
INV_SCRIPT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from chtop_tasks.cli.inv import main; sys.exit(main())"


def require_root() -> None:
    if os.geteuid() != 0:
        raise SystemExit("run as root (it runs the sandbox as the unprivileged test user, like the tests)")


def scratch_base(prefix: str = "csb-bench-") -> Path:
    """A throwaway dir under /tmp the unprivileged test user can walk into."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    base.chmod(0o755)
    return base


def stop_proxies(base: Path) -> None:
    """SIGTERM every group proxy a bench started under ``base``."""
    for pid_file in base.glob("**/.chtop/net/proxy.pid"):
        try:
            os.kill(int(pid_file.read_text().split()[0]), 15)
        except (OSError, ValueError):
            pass


def build(base: Path):
    import conftest
    from sandbox_helpers import build_user_group, conftest_builder, ensure_test_user, ensure_user_venv, podman_works

    user = ensure_test_user()
    venv = ensure_user_venv()
    template = base / "template"
    template.mkdir()
    (base / "tmpl-home").mkdir()
    conftest.write_gitconfig(base / "tmpl-home" / ".gitconfig")
    saved = dict(os.environ)
    os.environ.update(conftest.hermetic_env(base / "tmpl-home"))
    try:
        conftest.make_sub_remote(template, "alpha", "main")
        conftest.make_sub_remote(template, "beta", "kms")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    work = base / "w"
    work.mkdir()
    group = build_user_group(work, template, user, venv, conftest_builder(template))
    podman_works(user, group.env, group.base)
    return group


def timed(argv, cwd) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(argv)[:200]}\n{proc.stderr[-800:]}")
    return took


def floor_commands(g) -> dict[str, list[str]]:
    """What an `inv` task pays before chtop's code runs, as commands to time beside it: nothing
    (the harness), starting the venv's Python (all chtop's `inv` pays), and that Python importing
    invoke (what invoke's program pays too)."""
    py = str(g.venv / "bin" / "python")
    return {"true": ["true"], "python": [py, "-c", "pass"], "invoke": [py, "-c", "import invoke.main"]}


def inv_floor(times: dict[str, list[float]]) -> tuple[float, str]:
    """The floor in seconds from the medians of ``floor_commands``' timings, and its parts as text."""
    m = {k: statistics.median(v) for k, v in times.items()}
    floor = m["invoke"] - m["true"]
    return floor, (f"starting python {(m['python'] - m['true']) * 1000:.1f} ms + importing invoke "
                   f"{(m['invoke'] - m['python']) * 1000:.1f} ms = {floor * 1000:.1f} ms")


PLAN_AND_PREPARE = """
import json
from pathlib import Path
from chtop_tasks.core import places
from chtop_tasks.workspace import targets
from chtop_tasks.sandbox.launcher import plan_launch, prepare_launch
plan = plan_launch(targets.target_for(Path.cwd()), ["true"], interactive=False)
prepare_launch(plan)
print(json.dumps([plan.argv, str(plan.setup.root.run_dir)]))
"""


def bare_argv(g, as_user) -> list[str]:
    """The podman argv chtop would run, with its per-run skeleton prepared and kept for the bare runs
    (its pid file names this process, so chtop's sweep of killed runs leaves it alone)."""
    import json

    proc = subprocess.run(as_user + [str(g.venv / "bin" / "python"), "-c", PLAN_AND_PREPARE], cwd=g.dev,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode:
        raise SystemExit(f"planning the bare run failed:\n{proc.stderr[-1500:]}")
    argv, run_dir = json.loads(proc.stdout.strip().splitlines()[-1])
    (Path(run_dir) / "launcher.pid").write_text(f"{os.getpid()}\n")
    return argv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    require_root()

    base = scratch_base("csb-bench-")
    try:
        g = build(base)
        as_user = ["runuser", "-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in g.env.items()]]
        py = str(g.venv / "bin" / "python")
        inv = as_user + [py, "-c", INV_SCRIPT, str(g.dev), "sbox.run", "--", "true"]
        invoke = as_user + [py, "-m", "invoke", "sbox.run", "--", "true"]
        bare = bare_argv(g, as_user)
        timed(inv, g.dev)                      # warm: proxy started, skeleton made
        timed(as_user + bare, g.dev)
        floors = floor_commands(g)
        t_inv, t_invoke, t_bare, t_floor = [], [], [], {k: [] for k in floors}
        for i in range(args.runs):             # interleaved, so load drifts hit both alike
            t_inv.append(timed(inv, g.dev))
            t_invoke.append(timed(invoke, g.dev))
            name = next(a for a in bare if a.startswith("--name="))
            t_bare.append(timed(as_user + [a if a != name else f"{name}-b{i}" for a in bare], g.dev))
            for key, argv in floors.items():
                t_floor[key].append(timed(as_user + argv, g.dev))
        m_inv, m_invoke, m_bare = statistics.median(t_inv), statistics.median(t_invoke), statistics.median(t_bare)
        m = {k: statistics.median(v) for k, v in t_floor.items()}
        python = m["python"] - m["true"]
        print(f"runs: {args.runs} each (interleaved), as {g.user.pw_name}, rootless")
        print(f"bare podman run   median {m_bare * 1000:7.1f} ms  (min {min(t_bare) * 1000:.1f})")
        print(f"inv sbox.run      median {m_inv * 1000:7.1f} ms  (min {min(t_inv) * 1000:.1f})")
        print(f"ratio             {m_inv / m_bare:.2f}x  (target < 1.30x)")
        print(f"floor of inv: starting python {python * 1000:.1f} ms; "
              f"so inv sbox.run is at best {(m_bare + python) / m_bare:.2f}x before any chtop code runs")
        own = m_inv - python - m_bare
        print(f"chtop's own share: {own * 1000:.1f} ms (inv sbox.run - starting python - bare podman run; "
              "target <= 25 ms)")
        floor, parts = inv_floor(t_floor)
        print(f"through invoke's program (python -m invoke sbox.run): median {m_invoke * 1000:.1f} ms, "
              f"{m_invoke / m_bare:.2f}x; its floor: {parts}; chtop's share there "
              f"{(m_invoke - floor - m_bare) * 1000:.1f} ms")
    finally:
        stop_proxies(base)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
