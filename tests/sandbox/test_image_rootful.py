"""As root, an agent launched from a local image (``--image``), with the mount-flags hook.

Rootful podman with a user namespace has crun 1.8 drop ``nosuid,nodev`` from read-write volumes, and
chtop's createRuntime hook (``chtop_tasks/sandbox/mount_flags_hook.py``) adds them back.  With a
local image the root is the image's, not the skeleton, so the hook reads it from the OCI bundle.
The image here is small and built the way ``sbox.build-image`` builds one, from the worktree's own
``containers/`` (a base of a few empty dirs imported from this host, a marker file on top); /usr and
/etc stay the host's.  Also as root: ``sbox.run --name dev`` from the toplevel runs in dev's sandbox.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from sandbox_helpers import assert_volumes_nosuid_nodev, rootful_podman_env

pytestmark = [pytest.mark.podman, pytest.mark.rootful, pytest.mark.slow]

TAG = "localhost/chtop-sandbox:latest"
# what the agent does: proves the image is its root, says where it is, shows its mounts
PROBE = "cat /image-marker; echo \"PWD=$PWD SANDBOX=$CHTOP_SANDBOX\"; cat /proc/self/mountinfo"
CONTAINERFILE = "ARG BASE\nFROM ${BASE}\nCOPY image-marker /image-marker\n"
HOST_PATHS = "".join(f"empty {d}\n" for d in ("/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/tmp", "/run",
                                              "/var", "/home", "/root"))


@pytest.fixture
def root_dev(with_dev, tmp_path):
    """A root-owned workspace with worktree dev, rootful podman with its storage in /tmp; the
    group's proxy stopped after."""
    from chtop_tasks.proxy import stop_proxy

    env = rootful_podman_env(tmp_path)
    yield with_dev, env
    stop_proxy(with_dev.grouping)


def small_image_context(dev) -> None:
    """dev's containers/: what ``--image`` builds (a chtop checkout's image context)."""
    context = dev / "containers"
    context.mkdir()
    (context / "Containerfile").write_text(CONTAINERFILE)
    (context / "host-paths.txt").write_text(HOST_PATHS)
    (context / "image-marker").write_text("FROM-THE-LOCAL-IMAGE\n")


def test_as_root_an_agent_from_a_local_image_has_its_volumes_nosuid_nodev(root_dev):
    g, env = root_dev
    dev = g.path("dev")
    small_image_context(dev)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"          # the test's own HOME
    config.mkdir(parents=True, exist_ok=True)
    (config / "agents.toml").write_text(f"[probe]\ncommand = ['sh', '-c', '''{PROBE}''']\n")
    started = time.monotonic()
    proc = g.inv(dev, "sbox.agent", "--agent", "probe", "--image", env=dict(env, CHTOP_VERBOSE="1"), check=False,
                 timeout=300)
    took = time.monotonic() - started
    print(f"built and launched in {took:.1f}s\n", proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "building image localhost/chtop-sandbox:latest: not built yet" in proc.stderr
    assert "rootful podman with a user namespace" in proc.stderr                # rootful, as root
    assert f" {TAG} /bin/sh /.chtop/entry.sh" in proc.stderr                     # the image is the root
    assert "FROM-THE-LOCAL-IMAGE" in proc.stdout, proc.stdout
    assert f"PWD={dev} SANDBOX=dev" in proc.stdout, proc.stdout
    assert_volumes_nosuid_nodev(proc, dev / "alpha")                            # the hook's work


def test_as_root_sbox_run_name_from_the_toplevel_runs_in_that_worktrees_sandbox(root_dev):
    g, env = root_dev
    proc = g.inv(g.toplevel, "sbox.run", "--name", "dev", "--", "sh", "-c", 'echo "PWD=$PWD SANDBOX=$CHTOP_SANDBOX"; '
                 "touch alpha/made-inside && echo MADE", env=env, check=False, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PWD={g.path('dev')} SANDBOX=dev" in proc.stdout and "MADE" in proc.stdout, proc.stdout
    assert (g.path("dev") / "alpha" / "made-inside").exists()
