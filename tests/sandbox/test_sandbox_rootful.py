"""Run as root: rootful podman, with the VM fixes ./bootstrap applies (cgroup layout, explicit ulimits), and
a user namespace so the agent never has host root over its mounts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sandbox_helpers as helpers
from conftest import git
from sandbox_helpers import (
    assert_loop_healed,
    disrupted_request_loop,
    rootful_podman_env,
    serving_http,
    user_group_cm,
)

pytestmark = [pytest.mark.podman, pytest.mark.rootful, pytest.mark.slow]


@pytest.fixture(scope="module")
def owned(remote_template):
    """A workspace owned by the unprivileged test user; root launches its sandbox."""
    with user_group_cm(remote_template) as group:
        yield group




@pytest.fixture
def root_env(tmp_path):
    return rootful_podman_env(tmp_path)


def inv_as_root(env, cwd, *args):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120)


def _subid_ranges(path="/etc/subuid"):
    out = []
    for line in Path(path).read_text().splitlines():
        name, start, count = line.split(":")
        out.append((name, int(start), int(start) + int(count)))
    return out


def _uid_map(stdout: str) -> tuple[int, int, int]:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("UIDMAP "))
    inside, host, count = (int(x) for x in line.split()[1:4])
    return inside, host, count


def test_rootful_maps_the_agent_to_the_tree_owner(owned, root_env):
    g = owned
    uid = g.user.pw_uid
    root_file = g.dev / "alpha" / "root-owned.txt"
    root_file.write_text("root's\n")
    os.chown(root_file, 0, 0)
    os.chmod(root_file, 0o666 & ~0o022)
    script = ("echo UIDMAP $(head -1 /proc/self/uid_map); echo INSIDE-UID $(id -u); "
              "touch alpha/made-inside && echo MADE; "
              f"if echo x >> {root_file} 2>/dev/null; then echo ESCAPED-root-file; fi; "
              "curl -sS -o /dev/null -w 'proxy=%{http_code}\\n' --max-time 10 http://blocked.example/; "
              "echo PROBES-DONE")
    proc = inv_as_root(root_env, g.dev, "sbox.run", "--", "sh", "-c", script)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert "rootful podman with a user namespace" in proc.stderr          # says what it does
    inside, host, count = _uid_map(proc.stdout)
    assert inside == 0 and host != 0 and count == 65536
    for name, start, stop in _subid_ranges():                              # never another user's ids
        assert name in ("root", "0") or stop <= host or host + count <= start, (name, start, stop, host)
    assert f"INSIDE-UID {uid}" in proc.stdout                              # the owner's uid inside
    assert "MADE" in proc.stdout and "ESCAPED" not in proc.stdout
    assert (g.dev / "alpha" / "made-inside").stat().st_uid == uid          # the owner's file on the host
    assert root_file.read_text() == "root's\n"
    assert "proxy=403" in proc.stdout                                       # the relay reaches the proxy


@pytest.fixture
def root_dev(with_dev, tmp_path):
    """A workspace built and owned by root (as on a cloud GPU box), with a venv in dev from this
    python (pyenv's under /root here), and a root-only file standing in for /root's secrets."""
    from chtop_tasks.proxy import stop_proxy

    dev = with_dev.path("dev")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dev / ".venv")], check=True)
    yield with_dev
    stop_proxy(with_dev.grouping)             # the group's proxy, started by the test's launches


def test_as_root_the_agent_works_in_a_root_owned_worktree(root_dev, root_env):
    g = root_dev
    dev, top = g.path("dev"), g.toplevel
    config = g.grouping / ".chtop" / "agents" / "dev" / "config"
    policy = top / "sandbox" / "net-allow.txt"
    policy_before = policy.read_text()
    base_python = Path(os.path.realpath(sys.base_prefix))
    script = (
        "echo UIDMAP $(head -1 /proc/self/uid_map); "
        "cd alpha && echo inside > from-sandbox.txt && git add from-sandbox.txt && "
        "git commit -qm 'written as root-mapped agent' && echo COMMITTED; cd ..; "
        "python -c 'import sys; print(\"PY\", sys.prefix, sys.base_prefix)'; "
        'mkdir -p "$CLAUDE_CONFIG_DIR/session-env/s1" && echo ok > "$CLAUDE_CONFIG_DIR/session-env/s1/f" '
        "&& echo CONFIG-WRITABLE; "
        f"touch {top}/made-by-agent 2>/dev/null && echo ESCAPED-toplevel; "
        "echo x >> alpha/.git 2>/dev/null && echo ESCAPED-gitpointer; "
        f"echo evil.example >> {policy} 2>/dev/null && echo ESCAPED-policy; "
        "cat /etc/shadow >/dev/null 2>&1 && echo ESCAPED-shadow; "
        f"ls -A /root 2>/dev/null | sed 's/^/ROOTLS /'; "
        f"cat {base_python}/../../../.bash_history 2>/dev/null && echo ESCAPED-roothome; "
        "echo PROBES-DONE")
    proc = g.inv(dev, "sbox.run", "--", "sh", "-c", script, env=root_env, check=False, timeout=180)
    out = proc.stdout
    assert "PROBES-DONE" in out, out + proc.stderr
    assert "ESCAPED" not in out, out
    inside, host, _ = _uid_map(out)
    assert inside == 0 and host != 0                                       # container root is not host root
    assert "COMMITTED" in out, out + proc.stderr                           # no "dubious ownership"
    log = git(dev / "alpha", "log", "-1", "--format=%s|%an")
    assert log.split("|")[0] == "written as root-mapped agent"
    host_name = os.environ.get("GIT_AUTHOR_NAME") or git(dev / "alpha", "config", "user.name")
    assert log.split("|")[1] == host_name                                  # the host's identity
    made = dev / "alpha" / "from-sandbox.txt"
    assert made.stat().st_uid == 0 and made.stat().st_gid == 0             # owned by the tree's owner
    assert f"PY {dev}/.venv {base_python}" in out                          # the venv's python runs
    assert "CONFIG-WRITABLE" in out and (config / "session-env" / "s1" / "f").stat().st_uid == 0
    assert not (top / "made-by-agent").exists() and policy.read_text() == policy_before
    host_root_entries = set(os.listdir("/root")) - {".pyenv"}
    seen = {ln.split(None, 1)[1] for ln in out.splitlines() if ln.startswith("ROOTLS ")}
    assert not (seen & host_root_entries), seen                            # /root's files stay out


def test_as_root_nothing_planted_inside_gains_privilege_on_the_host(root_dev, root_env):
    """The agent is root inside and its files are root's on the host (idmapped): setuid/setgid
    bits (chmod, chown + chmod, a new file's mode, mknod, fchmod) and a file capability on what
    it leaves in its work dir must not survive, or run as anything but the caller on the host."""
    g = root_dev
    dev = g.path("dev")
    script = f"{helpers.plant_setuid_script(str(dev / 'alpha'))} && echo PROBES-DONE"
    proc = g.inv(dev, "sbox.run", "--", "sh", "-c", script, env=root_env, check=False, timeout=180)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert "PLAIN-CHMOD-OK" in proc.stdout                                 # plain chmod still works
    assert "REFUSED chmod-suid 1" in proc.stdout and "REFUSED chown 1" in proc.stdout     # EPERM, said
    assert (dev / "alpha" / "x-plain").stat().st_uid == 0                  # root-owned on the host
    helpers.assert_no_gain_as_nobody(dev / "alpha")


def test_as_root_every_volume_is_nosuid_nodev_seen_from_inside(root_dev, root_env):
    """crun drops the flags of a read-write volume under a user namespace; the launch's hook puts
    them back before the agent's first process starts."""
    g = root_dev
    proc = g.inv(g.path("dev"), "sbox.run", "--", "cat", "/proc/self/mountinfo", env=root_env, check=False,
                 timeout=180)
    helpers.assert_volumes_nosuid_nodev(proc, g.path("dev", "alpha"))


def test_as_root_the_shipped_policy_hands_over_no_credentials(root_dev, root_env):
    g = root_dev
    helpers.plant_credentials(Path(os.environ["HOME"]))
    proc = g.inv(g.path("dev"), "sbox.run", "--", "sh", "-c", helpers.LOOK_FOR_SECRETS, env=root_env, check=False,
                 timeout=180)
    helpers.assert_no_secret_inside(proc)
    log = git(g.path("dev", "alpha"), "log", "-1", "--format=%s|%an")
    assert log == f"made inside|{os.environ['GIT_AUTHOR_NAME']}"             # the host's identity


def test_as_root_a_segment_made_inside_dies_with_the_sandbox(root_dev, root_env):
    g = root_dev
    with helpers.host_shm_keys() as (inside, host):
        proc = g.inv(g.path("dev"), "sbox.run", "--", "sh", "-c", helpers.shm_probe(inside, host), env=root_env,
                     check=False, timeout=180)
        left = helpers.shm_exists(inside)
    assert "PROBES-DONE" in proc.stdout, proc.stdout + proc.stderr
    assert "SHMID -1" not in proc.stdout and "SHMID" in proc.stdout
    assert "SAW-HOST-SEGMENT" not in proc.stdout
    assert left == -1


def test_rootful_cleans_up_its_skeleton_and_stale_ones(root_dev, root_env):
    from chtop_tasks.core import places
    from chtop_tasks.sandbox import launcher

    g = root_dev
    runs = launcher.ROOTFUL_SKELETONS / places.group_id(g.grouping)
    stale = runs / "chtop-dev-run-dead00"
    (stale / "root").mkdir(parents=True)
    (stale / "launcher.pid").write_text("999999999\n")              # a launcher that is gone
    proc = g.inv(g.path("dev"), "sbox.run", "--network", "open", "--", "sh", "-c", "ls / >/dev/null; echo RAN",
                 env=root_env, check=False)
    assert "RAN" in proc.stdout, proc.stdout + proc.stderr
    assert not stale.exists()
    assert not runs.exists()                               # nor its now empty group dir


def test_the_agents_id_range_is_roots_or_one_nobody_has(tmp_path):
    """Pure: root's own /etc/subuid entry when it has one, else a free 65536 block from 2**31 up
    that overlaps no user's subordinate range and no passwd uid."""
    from chtop_tasks.sandbox.podman import AGENT_RANGE, FREE_RANGE_START, agent_id_base

    sub = tmp_path / "subuid"
    sub.write_text("chtop-sbt:100000:65536\nroot:300000:65536\n")
    assert agent_id_base("uid", sub, []) == 300000
    sub.write_text(f"chtop-sbt:100000:65536\nbig:{FREE_RANGE_START + 10}:70000\nroot:1:10\n")
    base = agent_id_base("uid", sub, [FREE_RANGE_START + 2 * AGENT_RANGE + 5])
    assert base == FREE_RANGE_START + 3 * AGENT_RANGE        # past the big range and the passwd uid
    sub.write_text("")
    assert agent_id_base("uid", sub, []) == FREE_RANGE_START
    assert agent_id_base("uid", tmp_path / "none", []) == FREE_RANGE_START


def test_a_kill9_of_the_proxy_under_a_running_rootful_sandbox_heals_within_5s(root_dev, root_env, tmp_path):
    """As root: the proxy dies (kill -9) under the agent's loop of requests; within 5 s the loop
    works again in the same sandbox, and keeps working."""
    g = root_dev
    dev = g.path("dev")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 allowed.example\n")
    env = dict(root_env, CHTOP_PROXY_HOSTS_FILE=str(hosts))
    with serving_http() as port:
        with open(g.toplevel / "sandbox" / "net-allow.txt", "a") as fh:
            fh.write(f"allowed.example:{port} private\n")
        proc, results, back = disrupted_request_loop(
            lambda script: g.inv(dev, "sbox.run", "--", "sh", "-c", script, env=env, check=False, timeout=180),
            dev, f"http://allowed.example:{port}/")
    assert_loop_healed(proc, results, back)
