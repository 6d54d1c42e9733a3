"""An agent CLI the host finds but the sandbox cannot see (installed outside /usr and fs-allow.txt) is
named at launch with the fix, before the sandbox's own "not found"; as root, rootful podman."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sandbox_helpers import rootful_podman_env

pytestmark = [pytest.mark.podman, pytest.mark.rootful, pytest.mark.slow]


@pytest.fixture
def root_dev(with_dev, tmp_path):
    from chtop_tasks.proxy import stop_proxy

    env = rootful_podman_env(tmp_path)
    yield with_dev, env
    stop_proxy(with_dev.grouping)


def test_an_agent_cli_outside_what_the_sandbox_sees_is_named_with_the_fix(root_dev, tmp_path):
    g, env = root_dev
    tools = tmp_path / "my-tools" / "bin"
    tools.mkdir(parents=True)
    cli = tools / "hidtool"
    cli.write_text("#!/bin/sh\necho the tool ran\n")
    cli.chmod(0o755)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "chtop"
    config.mkdir(parents=True, exist_ok=True)
    (config / "agents.toml").write_text("[hid]\ncommand = ['hidtool']\n")
    proc = g.inv(g.path("dev"), "sbox.agent", "--agent", "hid", check=False, timeout=300,
                 env=dict(env, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}"))
    assert proc.returncode != 0 and "the tool ran" not in proc.stdout, proc.stdout + proc.stderr
    assert f"hidtool: {cli} is not inside the sandbox, so hidtool will not run there" in proc.stderr, proc.stderr
    assert f"add a line `ro {tools}`" in proc.stderr and "sandbox/fs-allow.txt" in proc.stderr
