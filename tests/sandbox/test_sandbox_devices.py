"""GPU sharing: every sandbox of a group gets devices.txt's devices at the same time; a
worktree's own worktrees/<name>/devices.txt narrows its sandbox (never widens it).  Fake
character devices (mknod, as root) stand in for /dev/nvidia*."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from chtop_tasks.sandbox.policy import load_policy


def fake_gpus(base: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making fake device nodes (mknod) needs root")
    devs = base / "devs"
    devs.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        os.mknod(devs / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))     # /dev/null's numbers
    return devs


def write_device_lists(policy: Path, devs: Path) -> None:
    (policy / "devices.txt").write_text(f"{devs}/nvidia*\n")
    layer = policy / "worktrees" / "dev"
    layer.mkdir(parents=True, exist_ok=True)
    (layer / "devices.txt").write_text(f"# dev gets GPU 0 only\n{devs}/nvidia0\n{devs}/nvidiactl\n/dev/null\n")


def test_a_worktree_list_narrows_the_group_devices(tmp_path):
    devs = fake_gpus(tmp_path)
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "fs-allow.txt").write_text("")
    write_device_lists(policy, devs)
    home = tmp_path / "home"
    group = load_policy(policy, home, None)
    assert group.devices == [devs / "nvidia0", devs / "nvidia1", devs / "nvidiactl"]
    dev = load_policy(policy, home, None, "dev")
    assert dev.devices == [devs / "nvidia0", devs / "nvidiactl"]
    assert any("/dev/null is not in the group's devices.txt" in w for w in dev.warnings)
    assert load_policy(policy, home, None, "other").devices == group.devices


@pytest.mark.podman
@pytest.mark.rootful
@pytest.mark.slow
def test_sandboxes_share_the_devices_at_once_and_dev_sees_gpu0_only(with_dev, tmp_path):
    from sandbox_helpers import rootful_podman_env

    from chtop_tasks.workspace.layout import find_workspace
    from chtop_tasks.workspace.worktrees import create_worktree

    g = with_dev
    create_worktree(find_workspace(g.toplevel), "other")
    devs = fake_gpus(tmp_path)
    write_device_lists(g.toplevel / "sandbox", devs)
    env = dict(os.environ, **rootful_podman_env(tmp_path))
    script = (f"for d in nvidia0 nvidia1 nvidiactl; do test -c {devs}/$d && echo SEES-$d; done; "
              f"echo x > {devs}/nvidia0 && echo USES-nvidia0; sleep 3; echo DONE")
    procs = {name: subprocess.Popen([sys.executable, "-m", "invoke", "sbox.run", "--network", "open", "--", "sh",
                                     "-c", script], cwd=g.path(name), env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for name in ("dev", "other")}
    outs = {name: p.communicate(timeout=180) for name, p in procs.items()}
    for name, (out, err) in outs.items():
        assert procs[name].returncode == 0 and "DONE" in out, (name, out, err)
        assert "SEES-nvidia0" in out and "SEES-nvidiactl" in out and "USES-nvidia0" in out
    assert "SEES-nvidia1" in outs["other"][0]
    assert "SEES-nvidia1" not in outs["dev"][0]                         # narrowed to GPU 0
    assert "/dev/null is not in the group's devices.txt" in outs["dev"][1]
