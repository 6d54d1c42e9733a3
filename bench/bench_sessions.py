"""How fast `inv session.start` returns, and what `session.list` and `session.stop` cost,
against a foreground `inv sbox.run -- true` measured in the same interleaved runs.

Run as root (it builds a throwaway workspace owned by the unprivileged test user, as the
tests do):

    python bench/bench_sessions.py [--runs N]

The agent is a stand-in registered as data (`sh -c 'sleep 600'`), so the numbers are chtop's
and tmux's, not an agent CLI's start-up.  `session.start` returns once the agent has run for
its first seconds in its sandbox (``lifecycle.FIRST_SECONDS``: an agent that ends by then, for a
missing login or an unreachable API, fails start itself, with its reason), so the bench prints
start's time with and without that watch.  Each `inv` runs as a user's does: pip's `chtop-inv`
console script, which takes the light task path (no invoke imported).
Not run by the tests.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_sandbox import INV_SCRIPT, build, require_root, scratch_base, stop_proxies, timed  # noqa: E402

from chtop_tasks.sessions.lifecycle import FIRST_SECONDS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    require_root()
    base = scratch_base("csb-bench-")
    try:
        g = build(base)
        config = g.home / ".config" / "chtop"
        config.mkdir(parents=True, exist_ok=True)
        (config / "agents.toml").write_text("[standin]\ncommand = ['sh', '-c', 'sleep 600']\n")
        subprocess.run(["chown", "-R", f"{g.user.pw_uid}:{g.user.pw_gid}", str(g.home / ".config")], check=True)
        as_user = ["runuser", "-u", g.user.pw_name, "--", "env", "-i", *[f"{k}={v}" for k, v in g.env.items()]]
        inv = as_user + [str(g.venv / "bin" / "python"), "-c", INV_SCRIPT, str(g.dev)]
        foreground = inv + ["sbox.run", "--", "true"]
        timed(foreground, g.dev)               # warm: proxy started, skeleton made
        t_fg, t_start, t_list, t_stop = [], [], [], []
        for _ in range(args.runs):             # interleaved, so load drifts hit all alike
            t_fg.append(timed(foreground, g.dev))
            t_start.append(timed(inv + ["session.start", "--agent", "standin"], g.dev))
            t_list.append(timed(inv + ["session.list"], g.dev))
            t_stop.append(timed(inv + ["session.stop"], g.dev))
        m = {k: statistics.median(v) for k, v in
             (("fg", t_fg), ("start", t_start), ("list", t_list), ("stop", t_stop))}
        print(f"runs: {args.runs} each (interleaved), as {g.user.pw_name}, rootless")
        print(f"inv sbox.run -- true (baseline) median {m['fg'] * 1000:7.1f} ms")
        print(f"inv session.start               median {m['start'] * 1000:7.1f} ms  ({m['start'] / m['fg']:.2f}x)")
        before = m["start"] - FIRST_SECONDS
        print(f"  less its watch of the agent's first {FIRST_SECONDS:g} s: {before * 1000:7.1f} ms  "
              f"({before / m['fg']:.2f}x), the session's sandbox started")
        print(f"inv session.list (1 session)    median {m['list'] * 1000:7.1f} ms  ({m['list'] / m['fg']:.2f}x)")
        print(f"inv session.stop (SIGTERM)      median {m['stop'] * 1000:7.1f} ms  ({m['stop'] / m['fg']:.2f}x)")
    finally:
        for sock in base.glob("**/tmux.sock"):
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
        stop_proxies(base)
        from sandbox_helpers import end_pause_process

        end_pause_process(base / "w" / "run")
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
