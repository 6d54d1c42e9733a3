"""What the sandbox must not hand over or leave behind, attacked from inside a real rootless
sandbox (the rootful counterparts are in ``test_sandbox_rootful.py``):

* privilege: a setuid/setgid file or a file capability planted in a work dir gives no one on
  the host more than their own ids;
* credentials: the shipped policy mounts no secret of the user's git config, credential store or
  shell startup files, while git inside keeps the host's identity and ignore rules;
* memory: SysV segments made inside die with the sandbox, and the host's are not visible inside
  (unless a worktree opts in to the host's IPC, which the launch says).
"""

from __future__ import annotations

import os

import pytest
from sandbox_helpers import (
    LOOK_FOR_SECRETS,
    assert_no_gain_as_nobody,
    assert_no_secret_inside,
    assert_volumes_nosuid_nodev,
    host_shm_keys,
    plant_credentials,
    plant_setuid_script,
    shm_exists,
    shm_probe,
    user_group_cm,
)

from chtop_tasks.sandbox.limits import MQUEUE

pytestmark = [pytest.mark.podman, pytest.mark.slow]

def _prepare(group):
    plant_credentials(group.base / "home")


@pytest.fixture(scope="module")
def g(remote_template):
    with user_group_cm(remote_template, prepare=_prepare) as group:
        yield group


def test_nothing_planted_inside_gains_privilege_on_the_host(g):
    proc = g.sbox(f"{plant_setuid_script(str(g.dev / 'alpha'))} && echo PROBES-DONE", timeout=180)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert "PLAIN-CHMOD-OK" in proc.stdout
    assert "REFUSED chmod-suid 1" in proc.stdout and "REFUSED open 1" in proc.stdout     # EPERM, said
    assert_no_gain_as_nobody(g.dev / "alpha")


def test_every_volume_is_nosuid_nodev_seen_from_inside(g):
    proc = g.sbox("cat /proc/self/mountinfo", timeout=180)
    assert_volumes_nosuid_nodev(proc, g.dev / "alpha")


def test_the_shipped_policy_hands_over_no_credentials(g):
    proc = g.sbox(LOOK_FOR_SECRETS, timeout=180)
    assert_no_secret_inside(proc)
    log = g.git(g.dev / "alpha", "log", "-1", "--format=%s|%an|%ae")
    assert log == "made inside|Sandbox Tester|sbt@example.invalid"           # the host's identity


# -- SysV IPC -----------------------------------------------------------------------------------

def test_a_segment_made_inside_dies_with_the_sandbox_and_the_hosts_are_unseen(g):
    with host_shm_keys() as (inside, host):
        proc = g.sbox(shm_probe(inside, host), timeout=180)
        left = shm_exists(inside)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert "SHMID -1" not in proc.stdout and "SHMID" in proc.stdout          # it was made inside
    assert "SAW-HOST-SEGMENT" not in proc.stdout
    assert left == -1                                                        # and is gone


def test_a_worktree_can_opt_in_to_the_hosts_ipc_and_is_told(g):
    layer = g.toplevel / "sandbox" / "worktrees" / "dev"
    layer.mkdir(parents=True, exist_ok=True)
    (layer / "limits.txt").write_text("ipc host   # CUDA IPC between processes of this worktree and the host\n")
    os.chmod(layer / "limits.txt", 0o644)
    try:
        with host_shm_keys() as (inside, host):
            proc = g.sbox(shm_probe(inside, host), timeout=180)
    finally:
        (layer / "limits.txt").unlink()
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    if MQUEUE.is_dir():
        assert "SAW-HOST-SEGMENT" in proc.stdout
        assert "ipc host" in proc.stderr and "outlive" in proc.stderr, proc.stderr
    else:                        # podman's --ipc host needs the host's /dev/mqueue: said, and kept private
        assert "SAW-HOST-SEGMENT" not in proc.stdout
        assert f"this host has no {MQUEUE}" in proc.stderr, proc.stderr
