"""Run as root: rootful podman, with the VM fixes ./bootstrap applies (cgroup layout, explicit ulimits), and
a user namespace so the agent never has host root over its mounts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_helpers import cgroup_hint, free_proxy_port, missing, user_group_cm

pytestmark = [pytest.mark.podman, pytest.mark.rootful, pytest.mark.slow]


@pytest.fixture(scope="module")
def owned(remote_template):
    """A workspace owned by the unprivileged test user; root launches its sandbox."""
    with user_group_cm(remote_template) as group:
        yield group


@pytest.fixture
def root_env(tmp_path, owned):
    """Rootful podman with its storage in tmp (never the machine's /var/lib/containers)."""
    store = tmp_path / "podman"
    store.mkdir()
    (store / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n')
    (store / "containers.conf").write_text(f'[engine]\ntmp_dir = "{store}/tmp"\n')
    env = dict(os.environ, CONTAINERS_STORAGE_CONF=str(store / "storage.conf"),
               CONTAINERS_CONF=str(store / "containers.conf"), CHTOP_PROXY_PORT=str(free_proxy_port()))
    skel = store / "probe"
    for d in ("usr", "etc", "proc", "dev", "sys", "tmp", "run"):
        (skel / d).mkdir(parents=True)
    for name, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (skel / name).symlink_to(target)
    probe = subprocess.run(["podman", "run", "--rm", "--network=none", "--ulimit=nofile=1024:1024",
                            "--ulimit=nproc=1024:1024", "-v", "/usr:/usr:ro", "-v", "/etc:/etc:ro",
                            "--rootfs", str(skel), "/bin/true"], env=env, capture_output=True, text=True)
    if probe.returncode:
        missing(f"rootful podman does not run here: {probe.stderr.strip()[-300:]}{cgroup_hint(probe.stderr)}")
    return env


def inv_as_root(env, cwd, *args):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120)


def test_rootful_maps_the_agent_to_the_tree_owner(owned, root_env):
    g = owned
    uid = g.user.pw_uid
    root_file = g.dev / "alpha" / "root-owned.txt"
    root_file.write_text("root's\n")
    os.chown(root_file, 0, 0)
    os.chmod(root_file, 0o666 & ~0o022)
    script = ("head -1 /proc/self/uid_map; touch alpha/made-inside && echo MADE; "
              f"if echo x >> {root_file} 2>/dev/null; then echo ESCAPED-root-file; fi; "
              "curl -sS -o /dev/null -w 'proxy=%{http_code}\\n' --max-time 10 http://blocked.example/; "
              "echo PROBES-DONE")
    proc = inv_as_root(root_env, g.dev, "sbox.run", "--", "sh", "-c", script)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert "rootful podman with a user namespace" in proc.stderr          # says what it does
    assert proc.stdout.split()[:3] == ["0", str(uid), "1"]                 # container root = the owner
    assert "MADE" in proc.stdout and "ESCAPED" not in proc.stdout
    assert (g.dev / "alpha" / "made-inside").stat().st_uid == uid          # never root on the host
    assert root_file.read_text() == "root's\n"
    assert "proxy=403" in proc.stdout                                       # the relay reaches the proxy


def test_rootful_on_a_root_owned_tree_gets_an_unprivileged_uid(owned, root_env, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "f").write_text("x\n")
    proc = inv_as_root(root_env, project, "-r", str(Path(__file__).resolve().parent.parent), "sbox.run", "--dir", str(project), "--network", "open", "--",
                       "sh", "-c", "head -1 /proc/self/uid_map; echo y >> f || echo DENIED")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.split()[:3]
    assert first[0] == "0" and first[1] != "0"
    assert "DENIED" in proc.stdout and (project / "f").read_text() == "x\n"
    assert "cannot write it" in proc.stderr
