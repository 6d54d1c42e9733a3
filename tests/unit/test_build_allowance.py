"""The venv build's own network allowance: the index hosts pip and uv are configured for, and the
policy's build section, for the build's socket only.  The real build through it, and the
agent's sandbox of the same worktree refused, are in ``test_venv_sandboxed.py``."""

from __future__ import annotations

from pathlib import Path

from chtop_tasks.proxy.policy import BUILD_ALLOW, NetPolicy, build_identity, built_worktree
from chtop_tasks.venv.indexhosts import index_hosts, without_credentials
from chtop_tasks.venv.sandboxed import index_env


def _env(tmp_path: Path, **values) -> dict[str, str]:
    """An environment that reads no pip config of this machine's."""
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "xdg"),
            "PIP_CONFIG_FILE": str(tmp_path / "no-pip.conf"), **values}


def test_the_default_is_pypi_and_its_files_host_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr("chtop_tasks.venv.tls.pip_config_files", lambda env: [])   # no pip.conf
    assert index_hosts(_env(tmp_path)) == ["pypi.org", "files.pythonhosted.org"]


def test_the_configured_indexes_replace_pypi(tmp_path, monkeypatch):
    monkeypatch.setattr("chtop_tasks.venv.tls.pip_config_files", lambda env: [])   # no pip.conf
    env = _env(tmp_path, PIP_INDEX_URL="https://mirror.example.org/simple",
               UV_DEFAULT_INDEX="http://127.0.0.2:8123/simple/", PIP_FIND_LINKS="/opt/wheels")
    assert index_hosts(env) == ["mirror.example.org", "127.0.0.2:8123 private"]
    assert index_hosts(_env(tmp_path, PIP_NO_INDEX="1", UV_NO_INDEX="1")) == []


def test_pip_conf_names_the_index(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://pip.example.net/simple\n"
                    "extra-index-url = file:///opt/pypi/simple https://extra.example.net:8443/simple\n")
    env = _env(tmp_path, PIP_CONFIG_FILE=str(conf), UV_NO_INDEX="1")
    assert index_hosts(env) == ["pip.example.net", "extra.example.net:8443"]


def test_the_build_gets_index_urls_without_credentials():
    env = {"PIP_INDEX_URL": "https://me:s3cret@pip.example.net/simple", "HOME": "/h",
           "UV_EXTRA_INDEX_URL": "https://a.example/simple https://tok@b.example/simple",
           "PIP_FIND_LINKS": "/opt/wheels", "UV_FIND_LINKS": "/opt/wheels http://127.0.0.2:9/wheels/"}
    assert index_env(env) == {"PIP_INDEX_URL": "https://pip.example.net/simple",
                              "UV_EXTRA_INDEX_URL": "https://a.example/simple https://b.example/simple",
                              "UV_FIND_LINKS": "http://127.0.0.2:9/wheels/"}   # a local dir is not inside
    assert without_credentials("/opt/wheels") == "/opt/wheels"


def _policy(tmp_path: Path, build_section: str | None = None) -> NetPolicy:
    policy_dir = tmp_path / "sandbox"
    policy_dir.mkdir()
    (policy_dir / "net-allow.txt").write_text("anthropic.com\n")
    (policy_dir / "net-deny.txt").write_text("evil.example.org\n")
    if build_section is not None:
        (policy_dir / BUILD_ALLOW).write_text(build_section)
    return NetPolicy(policy_dir)


def test_the_index_hosts_are_allowed_on_the_builds_identity_only(tmp_path):
    policy = _policy(tmp_path, "# extras\ngit.example.net\n")
    assert policy.set_build_hosts("dev", ["pypi.org", "files.pythonhosted.org"]) == []
    build = build_identity("dev")
    assert built_worktree(build) == "dev" and built_worktree("dev") is None and built_worktree(None) is None
    for host in ("pypi.org", "files.pythonhosted.org", "git.example.net"):
        assert policy.judge(host, build, 443).decision == "allowed", host
        assert policy.judge(host, "dev", 443).decision == "blocked", host      # the agent's socket
        assert policy.judge(host, None, 443).decision == "blocked", host       # the group's
        assert policy.judge(host, build_identity("other"), 443).decision == "denied" or host == "git.example.net"
    assert policy.judge("anthropic.com", build, 443).decision == "allowed"      # what the agent may, too
    refused = policy.judge("github.com", build, 443)
    assert refused.decision == "denied" and BUILD_ALLOW in refused.reason       # no hold: refused at once
    policy.allow.path.write_text("anthropic.com\npypi.org\n")
    assert policy.judge("evil.example.org", build, 443).decision == "denied"    # deny wins, as everywhere


def test_a_worktree_name_cannot_pose_as_a_build():
    import pytest

    from chtop_tasks.core.errors import UsageError
    from chtop_tasks.core.places import worktree_name_problem

    assert worktree_name_problem(build_identity("dev")) is not None
    with pytest.raises(UsageError):
        build_identity("dev/build")


def test_the_dry_run_of_a_feature_worktrees_build_says_where_it_runs_and_what_it_reaches(with_dev, monkeypatch, capsys):
    from chtop_tasks.workspace.layout import find_workspace

    monkeypatch.setenv("PIP_INDEX_URL", "https://pip.example.net/simple")
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://pip.example.net/simple")
    monkeypatch.setattr("chtop_tasks.venv.tls.pip_config_files", lambda env: [])
    from chtop_tasks.venv.sandboxed import build_workspace_venv

    build_workspace_venv(find_workspace(with_dev.path("dev")), dry_run=True, installer="pip")
    out = capsys.readouterr().out
    assert "every step runs inside the sandbox of dev" in out and "none on the host" in out
    assert "the index hosts pip.example.net and sandbox/net-allow-build.txt" in out, out
    assert not (with_dev.path("dev") / ".venv").exists()   # ran nothing
