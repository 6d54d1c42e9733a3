"""Per-sandbox limits: sandbox/limits.txt (+ a worktree layer), podman's flags, and where the
host cannot enforce them; the podman tests (as root) kill a sandbox over its memory limit
while another keeps running, and stop a fork bomb at the pids limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chtop_tasks.core.errors import PolicyError
from chtop_tasks.sandbox.limits import Limits, killed_note, limit_args, load_limits, parse_limits, why_not_enforced


def test_group_limits_and_a_worktree_layer(tmp_path):
    (tmp_path / "limits.txt").write_text("# defaults\nmemory 8g\npids 4096  # fork bombs\ncpu-shares 1024\n")
    layer = tmp_path / "worktrees" / "dev"
    layer.mkdir(parents=True)
    (layer / "limits.txt").write_text("memory 256m\ncpus 1.5\ncpu-shares none\n")
    group = load_limits(tmp_path)
    assert (group.memory, group.pids, group.cpus, group.cpu_shares) == (8 << 30, 4096, None, 1024)
    dev = load_limits(tmp_path, "dev")
    assert (dev.memory, dev.pids, dev.cpus, dev.cpu_shares) == (256 << 20, 4096, 1.5, None)
    assert dev.describe() == "memory 256M, pids 4096, cpus 1.5"
    assert limit_args(dev) == [f"--memory={256 << 20}", f"--memory-swap={256 << 20}", "--pids-limit=4096",
                               "--cpus=1.5"]
    assert load_limits(tmp_path, "other") == group
    assert not load_limits(tmp_path / "nowhere").any                 # no file: no limits


def test_memory_as_a_share_of_the_host(tmp_path):
    (tmp_path / "limits.txt").write_text("memory 50%\n")
    total = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines()
                     if ln.startswith("MemTotal:")).split()[1]) * 1024
    assert load_limits(tmp_path).memory == total // 2


@pytest.mark.parametrize("line, why", [
    ("memory lots", "bad memory value"), ("pids 3", "bad pids value"), ("memory 1m", "below podman's minimum"),
    ("swap 1g", "expected 'KEY VALUE'"), ("cpus 0", "bad cpus value"), ("memory 1g 2g", "expected 'KEY VALUE'"),
])
def test_a_malformed_line_names_the_file_and_line(tmp_path, line, why):
    path = tmp_path / "limits.txt"
    path.write_text(f"pids 100\n{line}\n")
    with pytest.raises(PolicyError, match=rf"{path}:2: .*{why}"):
        parse_limits(path)


def test_where_limits_cannot_be_enforced(tmp_path):
    v1 = tmp_path / "v1"
    for c in ("memory", "pids", "cpu"):
        (v1 / c).mkdir(parents=True)
    assert why_not_enforced(True, v1) is None
    assert "rootless podman cannot set cgroup limits on this cgroup v1 host" in why_not_enforced(False, v1)
    (v1 / "pids").rmdir()
    assert "no cgroup v1 pids controller" in why_not_enforced(True, v1)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert why_not_enforced(False, v2) is None and why_not_enforced(True, v2) is None
    (v2 / "cgroup.controllers").write_text("cpu io\n")
    assert "no memory or pids controller" in why_not_enforced(False, v2)


def test_a_kill_over_the_memory_limit_is_explained():
    limits = Limits(memory=256 << 20, sources=("/g/top/sandbox/worktrees/dev/limits.txt",))
    assert "ran out of its memory limit (256M, from /g/top/sandbox/worktrees/dev/limits.txt)" in \
        killed_note(137, limits)
    assert killed_note(0, limits) is None and killed_note(137, Limits()) is None


def test_the_launch_passes_the_worktree_limits_or_says_why_not(with_dev):
    layer = with_dev.toplevel / "sandbox" / "worktrees" / "dev"
    layer.mkdir(parents=True)
    (layer / "limits.txt").write_text("memory 300m\npids 64\n")
    proc = with_dev.inv(with_dev.path("dev"), "sbox.run", "--dry-run", "--", "true")
    why = why_not_enforced(os.geteuid() == 0)
    if why is None:
        assert f"--memory={300 << 20}" in proc.stdout and "--pids-limit=64" in proc.stdout
        assert "--label=chtop.limits=memory 300M pids 64 cpu-shares 1024" in proc.stdout
    else:
        assert "--memory" not in proc.stdout and "limits NOT enforced (memory 300M, pids 64" in proc.stderr
        assert "(NOT enforced)" in proc.stdout


# -- enforced, as root -----------------------------------------------------------------------------

@pytest.fixture
def limited_dev(with_dev):
    if os.geteuid() != 0 or why_not_enforced(True):
        pytest.skip("the limits tests run rootful podman (as root) on a host whose cgroups can enforce them: "
                    f"{why_not_enforced(True) or 'not root'}")
    layer = with_dev.toplevel / "sandbox" / "worktrees" / "dev"
    layer.mkdir(parents=True)
    (layer / "limits.txt").write_text("memory 256m\npids 32\n")
    return with_dev


@pytest.fixture
def rootful_env(tmp_path):
    """This process's env with rootful podman's storage in tmp."""
    from sandbox_helpers import rootful_podman_env

    return dict(os.environ, **rootful_podman_env(tmp_path))


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_over_its_memory_limit_a_sandbox_is_killed_and_another_keeps_running(limited_dev, rootful_env):
    g, env = limited_dev, rootful_env
    dev = g.path("dev")
    neighbour = subprocess.Popen([sys.executable, "-m", "invoke", "sbox.run", "--network", "open", "--", "sh", "-c",
                                  "echo NEIGHBOUR-UP; sleep 40; echo NEIGHBOUR-DONE"], cwd=dev, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        hog = g.inv(dev, "sbox.run", "--network", "open", "--", "python3", "-c",
                    "b = bytearray(1 << 30); print('ALLOCATED', len(b))", env=env, check=False, timeout=180)
        assert hog.returncode == 137, hog.stdout + hog.stderr
        assert "ALLOCATED" not in hog.stdout
        assert "ran out of its memory limit (256M" in hog.stderr                 # said clearly
        if neighbour.poll() is not None:                                         # the other one runs on
            out, err = neighbour.communicate(timeout=60)
            raise AssertionError(f"the neighbour sandbox ended ({neighbour.returncode}):\n{out}\n{err}")
        ps = g.inv(dev, "sbox.ps", env=env)
        assert "memory 256M pids 32" in ps.stdout and "LIMITS" in ps.stdout.splitlines()[0]
    finally:
        neighbour.terminate()
        neighbour.communicate(timeout=60)


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_a_fork_bomb_stops_at_the_pids_limit(limited_dev, rootful_env):
    g, env = limited_dev, rootful_env
    # bounded: at most 100 sleeps (each gone after 20 s), started by a subshell that dies at the
    # first failed fork; afterwards only shell builtins (no fork left), then everything is killed
    script = ("(i=0; while [ $i -lt 100 ]; do sleep 20 & i=$((i+1)); done) 2>/tmp/err; "
              "set -- /proc/[0-9]*; echo STARTED $#; "
              "read e < /tmp/err; echo FORK-ERROR $e; kill -9 -1")
    start = time.monotonic()
    proc = g.inv(g.path("dev"), "sbox.run", "--network", "open", "--", "sh", "-c", script, env=env, check=False,
                 timeout=180)
    out = proc.stdout
    assert "STARTED" in out, out + proc.stderr
    running = int(out.split("STARTED ")[1].split()[0])
    assert 16 < running <= 32                                                # up to the limit, never more
    assert "fork" in out.split("FORK-ERROR ")[1].splitlines()[0].lower()    # the shell said why
    assert time.monotonic() - start < 120


def test_ipc_is_private_with_its_own_shm_unless_a_worktree_opts_in(tmp_path):
    from chtop_tasks.sandbox.limits import ipc_args

    (tmp_path / "limits.txt").write_text("memory 2g\n")
    layer = tmp_path / "worktrees" / "dev"
    layer.mkdir(parents=True)
    (layer / "limits.txt").write_text("ipc host\nshm 512m\n")
    mqueue = tmp_path / "mqueue"
    assert ipc_args(load_limits(tmp_path), mqueue) == (["--ipc=private", f"--shm-size={1 << 30}"], None)
    dev = load_limits(tmp_path, "dev")
    args, note = ipc_args(dev, mqueue)                  # no mqueue on this host: stays private, said
    assert args == ["--ipc=private", f"--shm-size={512 << 20}"] and "no " + str(mqueue) in note
    mqueue.mkdir()
    args, note = ipc_args(dev, mqueue)
    assert args == ["--ipc=host"] and "outlive" in note and str(layer / "limits.txt") in note
    (layer / "limits.txt").write_text("ipc shared\n")
    with pytest.raises(PolicyError, match=r"limits.txt:1: bad ipc value 'shared' \(private or host\)"):
        load_limits(tmp_path, "dev")
