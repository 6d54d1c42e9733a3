"""Dashboard benchmark across hosts: one refresh with 2 hosts x 20 worktrees against one host's.

One host: this machine's 20 worktrees of 4 repos (plus the container repo), as
``bench_dash.py`` builds them, refreshed as the dashboard does (``take_snapshot``).
Two hosts: the same, and at the same time a second host's poll (``dash.remote.poll_host``:
its ``worktree.list --json``, ``session.list --json`` and ``net.pending --json`` over ssh,
each answer checked against its schema), as the dashboard's poller threads run them.

The second host is the test suite's real one: an OpenSSH server on 127.0.0.1 for the second
local account ``chtop-ssh`` (``tests/ssh_helpers.py``; needs root, sshd and that account's
venv, which the ssh tests make), with a workspace of its own 20 worktrees, owned by that
account, answered by real chtop there.  Both "hosts" share this machine's CPUs, so the
ratio is an upper bound of what two real machines cost.

    sudo python bench/bench_dash_hosts.py [--rounds N] [--worktrees N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_dash import REPOS, build_group, timed  # noqa: E402
from ssh_helpers import remote_group_dir, remote_python, start_sshd  # noqa: E402

from chtop_tasks.dash import model, remote  # noqa: E402
from chtop_tasks.hosts import records  # noqa: E402
from chtop_tasks.hosts.ssh import close_connection  # noqa: E402
from chtop_tasks.workspace.layout import find_workspace  # noqa: E402


def hermetic_config(base: Path, ssh_config: Path) -> None:
    """This run's own chtop config (hosts.toml, ssh -F the sshd's client config) and runtime dir."""
    os.environ["XDG_CONFIG_HOME"] = str(base / "config")
    os.environ["XDG_RUNTIME_DIR"] = str(base / "run")
    (base / "run").mkdir(mode=0o700)
    (base / "config" / "chtop").mkdir(parents=True)
    (base / "config" / "chtop" / "config.toml").write_text(f'ssh_config = "{ssh_config}"\nhost_timeout = 60\n')


def both(local, other) -> float:
    """Seconds until both are done, run at once (the dashboard's refresh and a host's poller)."""
    failures = []

    def poll():
        state = other()
        if not state.reachable:
            failures.append(state.error)
    start = time.perf_counter()
    thread = threading.Thread(target=poll)
    thread.start()
    local()
    thread.join()
    if failures:
        raise SystemExit(f"the second host did not answer: {failures[0]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worktrees", type=int, default=20)
    args = parser.parse_args()
    os.environ.update({"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                       "GIT_COMMITTER_EMAIL": "b@b"})
    server = start_sshd()
    there = remote_group_dir(server.user)
    try:
        with tempfile.TemporaryDirectory(prefix="chtop-bench-dash-hosts-") as tmp:
            hermetic_config(Path(tmp), server.config)
            (Path(tmp) / "here").mkdir()
            top = build_group(Path(tmp) / "here", args.worktrees)
            remote_top = build_group(there, args.worktrees)
            subprocess.run(["chown", "-R", f"{server.user.pw_uid}:{server.user.pw_gid}", str(there)], check=True)
            host = records.Host("gpu1", server.alias, str(remote_top), str(remote_python()))
            records.record_host(host)
            ws = find_workspace(top)
            no_sessions = lambda group: []  # noqa: E731 - no agents run in the bench
            first = remote.poll_host(host)               # the shared connection opens; answers checked
            if not first.reachable:
                raise SystemExit(f"the second host did not answer: {first.error}")
            model.take_snapshot(ws, no_sessions)
            one, poll, two = [], [], []
            for _ in range(args.rounds):
                one.append(timed(lambda: model.take_snapshot(ws, no_sessions)))
                poll.append(timed(lambda: remote.poll_host(host)))
                two.append(both(lambda: model.take_snapshot(ws, no_sessions), lambda: remote.poll_host(host)))
            one_t, poll_t, two_t = (statistics.median(x) for x in (one, poll, two))
            close_connection(host)
        print(f"dash refresh, 2 hosts x {len(first.worktrees)} worktrees x {len(REPOS)} repos (+ container): "
              f"{two_t * 1000:.0f} ms; one host's {one_t * 1000:.0f} ms; ratio {two_t / one_t:.2f}x "
              f"(the second host over ssh, on this machine's CPUs too)")
        print(f"  the second host's poll alone (3 chtop calls at once over one ssh connection): {poll_t * 1000:.0f} ms; "
              f"load average {os.getloadavg()[0]:.2f}")
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(there), str(server.base)], check=False)


if __name__ == "__main__":
    main()
