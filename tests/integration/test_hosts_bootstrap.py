"""``host.add`` as a user runs it, without ``--python``: the host's own ``./bootstrap``.

The host is the test's real sshd (tests/ssh_helpers.py) logging in as the second local account, an
ordinary user whose Debian python is externally managed (PEP 668).  ``host.add`` mirrors this
toplevel there over git's SSH transport, then runs the mirror's ``./bootstrap``, which makes chtop
a venv of its own in the account's home (``~/.local/share/chtop/venv``, its deps from the package
index, no sudo: the Debian packages are installed) and links its commands into ``~/.local/bin``;
``host.add`` records that venv's python, and the host's chtop answers at this toplevel's commit.
Then a worktree made there with that chtop, seen here.  The other fleet tests give the host a
ready venv (``--python``) instead, to keep the index out of their way.
"""

from __future__ import annotations

import pytest
from ssh_helpers import SSH_USER
from test_hosts import close_masters, fleet_config, remote_base, sshd  # noqa: F401 - fixtures

from chtop_tasks.hosts import records

CHTOP_VENV_PYTHON = f"/home/{SSH_USER}/.local/share/chtop/venv/bin/python"


@pytest.mark.slow
def test_host_add_runs_the_hosts_own_bootstrap_and_its_chtop_answers(
        initialized, fleet_config, remote_base):  # noqa: F811 - the fixtures of test_hosts
    g, host = initialized, fleet_config
    top = g.toplevel
    try:
        added = g.inv(top, "host.add", "gpu1", host.alias, "--group", str(remote_base / "grp"), timeout=900)
        assert "added host gpu1" in added.stdout, added
        assert "./bootstrap" in added.stderr, added.stderr          # echoed, run there
        python = records.load_hosts()["gpu1"].python
        assert python == CHTOP_VENV_PYTHON, python                   # bootstrap's own venv, not the system's
        there = host.ssh(f"{python} -c 'import chtop_tasks, invoke, sys; print(chtop_tasks.__file__)'").stdout
        assert there.strip() == f"{remote_base}/grp/top/chtop_tasks/__init__.py"   # the mirror, editable
        assert host.ssh("readlink ~/.local/bin/inv").stdout.strip().endswith("chtop/venv/bin/inv")

        listed = g.inv(top, "host.list").stdout
        assert "gpu1" in listed and "reachable, same chtop as here" in listed, listed

        g.inv(top, "worktree.create", "--name", "dev", "--host", "gpu1", "--no-venv")
        assert "gpu1:dev" in g.inv(top, "worktree.list").stdout
        g.inv(top, "worktree.delete", "--name", "dev", "--host", "gpu1")
        removed = g.inv(top, "host.remove", "gpu1")
        assert "gpu1" not in records.load_hosts(), removed
    finally:
        close_masters(g, host)
