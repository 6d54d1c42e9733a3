"""Places where host-side code reads what the agent can write, attacked from inside real sandboxes.

The launch reads the target's ``.venv/pyvenv.cfg`` to mount the venv's base interpreter.  In a
``--dir`` directory (all of it writable inside) the agent can make that file: naming a host dir
as its ``home`` must not get that dir mounted into its next sandbox, and a FIFO there must not
hang the next launch; a FIFO for the ``HEAD`` of its own ``.git`` must not hang the launch's one
host git.  Rootless (the test user) and rootful (the same workspace owned and run by
root).
"""

from __future__ import annotations

import pytest
from sandbox_helpers import free_proxy_port, root_owned, rootful_podman_env, user_group_cm

pytestmark = [pytest.mark.podman, pytest.mark.slow]

SECRET = "host-secret-7d1c0e"


@pytest.fixture(params=["rootless", pytest.param("rootful", marks=pytest.mark.rootful)])
def g(request, remote_template, tmp_path):
    with user_group_cm(remote_template) as group:
        if request.param == "rootful":
            group = root_owned(group, rootful_podman_env(tmp_path))
        yield group


def launch_in_dir(g, directory, script, timeout=120):
    """``chtop sbox.run -- sh -c SCRIPT`` in ``directory`` (a --dir sandbox, the group's own proxy)."""
    from test_first_hour_sandbox import chtop_argv

    env = dict(g.env, CHTOP_PROXY_PORT=str(free_proxy_port()))
    return g.as_owner(chtop_argv(g, "sbox.run", "--", "sh", "-c", script), env, directory, timeout=timeout)


def test_a_pyvenv_cfg_planted_in_a_dir_mounts_no_host_dir_and_a_fifo_hangs_no_launch(g):
    secret_dir = g.home / ".ssh"
    g.run(["mkdir", "-p", str(secret_dir)])
    g.run(["sh", "-c", f"echo {SECRET} > {secret_dir}/id_test && chmod 600 {secret_dir}/id_test"])
    project = g.base / "project"
    g.run(["mkdir", "-p", str(project)])

    planted = launch_in_dir(g, project, f"mkdir -p .venv && printf 'home = {secret_dir}/bin\\n' > .venv/pyvenv.cfg"
                                        " && echo PLANTED")
    assert "PLANTED" in planted.stdout, planted.stdout + planted.stderr
    look = launch_in_dir(g, project, f"cat {secret_dir}/id_test 2>/dev/null; ls -A {secret_dir} 2>/dev/null | "
                                     "sed 's/^/SEEN /'; echo PROBES-DONE")
    assert "PROBES-DONE" in look.stdout, look.stdout + look.stderr
    assert SECRET not in look.stdout and "SEEN " not in look.stdout, look.stdout

    other = g.base / "other-project"             # .venv is pinned read-only once it exists: a fresh dir
    g.run(["mkdir", "-p", str(other)])
    fifo = launch_in_dir(g, other, "mkdir .venv && mkfifo .venv/pyvenv.cfg && echo FIFO")
    assert "FIFO" in fifo.stdout, fifo.stdout + fifo.stderr
    after = launch_in_dir(g, other, "echo LAUNCHED", timeout=90)      # a plain open() blocks here for good
    assert "LAUNCHED" in after.stdout, after.stdout + after.stderr


def test_a_fifo_for_head_in_a_dirs_git_store_is_refused_by_name_and_hangs_no_launch(g):
    """A ``--dir`` directory's ``.git`` is the agent's (but its config, hooks, info, commondir):
    its ``HEAD`` made a FIFO, the next launch's one host git (``git config``, for the identity)
    would block on it; the launch refuses at once, naming it, and launches once it is gone."""
    project = g.base / "gitproject"
    g.run(["mkdir", "-p", str(project)])
    planted = launch_in_dir(g, project, "git init -q . && rm .git/HEAD && mkfifo .git/HEAD && echo FIFO")
    assert "FIFO" in planted.stdout, planted.stdout + planted.stderr
    refused = launch_in_dir(g, project, "echo LAUNCHED", timeout=90)
    assert "timed out" not in refused.stderr, refused.stderr    # before: git blocked until its 10 s ran out
    head = project / ".git" / "HEAD"
    assert refused.returncode == 3 and "LAUNCHED" not in refused.stdout, refused.stdout + refused.stderr
    assert f"{head} is a FIFO" in refused.stderr and f"rm {head}" in refused.stderr, refused.stderr
    g.run(["sh", "-c", f"rm {head} && echo 'ref: refs/heads/main' > {head}"])
    again = launch_in_dir(g, project, "echo LAUNCHED")
    assert "LAUNCHED" in again.stdout, again.stdout + again.stderr
