"""Time to claude's first screen through `inv sbox.claude`, against the same claude under a bare
`podman run` with the same mounts (the argv chtop plans, run directly).

Run as root (it builds a throwaway workspace owned by the unprivileged test user, as the tests do):

    python bench/bench_claude_start.py [--runs N]

"First screen" is claude's folder-trust question drawn in a pty.  Prints the median of each and
the ratio (the old 1.15x target, retired); then, measured in the same interleaved runs, the
floor invoke's own program pays before chtop's code runs (starting Python, importing invoke), and
chtop's own share: the total minus starting Python minus the bare run, since `inv sbox.claude` is
chtop's inv, whose light task path (chtop_tasks/cli/faststart.py) imports no invoke.  `inv` runs as
pip's console script runs it (a plain Python start, site included).
Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sandbox import INV_SCRIPT, build, floor_commands, inv_floor, require_root, scratch_base, stop_proxies, timed  # noqa: E402

FIRST_SCREEN = "trust"
LAUNCH_LINE = r"\$ podman run"
PLAN_CLAUDE = """
import json
from pathlib import Path
from chtop_tasks.agents.registry import agent_request
from chtop_tasks.sandbox.launcher import plan_request, prepare_launch
plan = plan_request(agent_request("claude", [], Path.cwd(), interactive=True))
prepare_launch(plan)
print(json.dumps([plan.argv, plan.env, str(plan.setup.root.run_dir)]))
"""


def seed_claude_config(g) -> None:
    """Past claude's onboarding, so its first screen is the folder-trust question."""
    claude_dir = g.grouping / "claude"
    claude_dir.mkdir(exist_ok=True)
    (claude_dir / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "theme": "dark"}))
    subprocess.run(["chown", "-R", f"{g.user.pw_uid}:{g.user.pw_gid}", str(claude_dir)], check=True)


def time_to_first_screen(argv: list[str], cwd: Path, before_podman: list | None = None) -> float:
    """Seconds to claude's first screen; with ``before_podman``, also appends the seconds to chtop's
    ``$ podman run`` line (said just before podman starts): the part of the launch that is chtop's,
    steadier than the difference of two first screens."""
    import pexpect

    start = time.perf_counter()
    child = pexpect.spawn(argv[0], argv[1:], cwd=str(cwd), dimensions=(40, 120), timeout=120, encoding="utf-8",
                          codec_errors="replace")
    try:
        if before_podman is not None:
            child.expect(LAUNCH_LINE)
            before_podman.append(time.perf_counter() - start)
        child.expect(FIRST_SCREEN)
        return time.perf_counter() - start
    finally:
        child.terminate(force=True)
        child.close()


def remove_containers(g, as_user: list[str]) -> None:
    names = subprocess.run(as_user + ["podman", "ps", "-aq", "--filter", "label=chtop.worktree=dev"],
                           cwd=g.dev, capture_output=True, text=True).stdout.split()
    if names:
        subprocess.run(as_user + ["podman", "rm", "-f", "-t", "0", *names], cwd=g.dev, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    require_root()
    if shutil.which("claude") is None:
        raise SystemExit("the claude CLI is not installed (./bootstrap installs it)")

    base = scratch_base("csb-bench-")
    try:
        g = build(base)
        seed_claude_config(g)
        env = dict(g.env, TERM="xterm-256color")
        as_user = ["runuser", "-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()]]
        # chtop's inv as pip's console script starts it, with the worktree's own checkout's chtop_tasks
        py = str(g.venv / "bin" / "python")
        inv = as_user + [py, "-c", INV_SCRIPT, str(g.dev), "sbox.claude"]
        time_to_first_screen(inv, g.dev)          # warm-up: proxy started, hooks and skeleton made
        remove_containers(g, as_user)
        floors = floor_commands(g)
        t_inv, t_bare, t_floor = [], [], {k: [] for k in floors}
        before_podman = []
        for _ in range(args.runs):                # interleaved, so load drifts hit both alike
            for key, argv in floors.items():
                t_floor[key].append(timed(as_user + argv, g.dev))
            t_inv.append(time_to_first_screen(inv, g.dev, before_podman))
            remove_containers(g, as_user)
            planned = subprocess.run(as_user + [str(g.venv / "bin" / "python"), "-c", PLAN_CLAUDE], cwd=g.dev,
                                     capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if planned.returncode:
                raise SystemExit(f"planning the bare run failed:\n{planned.stderr[-1500:]}")
            argv, penv, run_dir = json.loads(planned.stdout.strip().splitlines()[-1])
            (Path(run_dir) / "launcher.pid").write_text(f"{os.getpid()}\n")
            bare = ["runuser", "-u", g.user.pw_name, "--", "env", "-i",
                    *[f"{k}={v}" for k, v in dict(penv, TERM="xterm-256color").items()], *argv]
            t_bare.append(time_to_first_screen(bare, g.dev))
            remove_containers(g, as_user)
        m_inv, m_bare = statistics.median(t_inv), statistics.median(t_bare)
        print(f"runs: {args.runs} each (interleaved), as {g.user.pw_name}, rootless; first screen = claude's "
              f"folder-trust question")
        print(f"bare podman run, same mounts   median {m_bare * 1000:7.0f} ms  (min {min(t_bare) * 1000:.0f})")
        print(f"inv sbox.claude                median {m_inv * 1000:7.0f} ms  (min {min(t_inv) * 1000:.0f})")
        print(f"ratio                          {m_inv / m_bare:.2f}x  (target <= 1.15x: "
              f"{'ok' if m_inv / m_bare <= 1.15 else 'MISSED'})")
        floor, parts = inv_floor(t_floor)
        print(f"floor of any inv task: {parts}, where 1.15x leaves {0.15 * m_bare * 1000:.1f} ms;\n"
              f"  so through inv claude's first screen is at best {(m_bare + floor) / m_bare:.2f}x "
              "before any chtop code runs")
        python = statistics.median(t_floor["python"]) - statistics.median(t_floor["true"])
        print(f"chtop's own share: {(m_inv - python - m_bare) * 1000:.1f} ms (inv sbox.claude - starting python - "
              "bare podman run: its light task path imports no invoke)")
        to_podman = statistics.median(before_podman)
        print(f"to chtop's '$ podman run' line: {to_podman * 1000:.1f} ms (median); minus starting python "
              f"({statistics.median(t_floor['python']) * 1000:.1f} ms as the same user): "
              f"{(to_podman - statistics.median(t_floor['python'])) * 1000:.1f} ms")
    finally:
        stop_proxies(base)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
