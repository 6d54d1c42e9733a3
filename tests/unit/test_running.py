"""chtop_tasks.sandbox.running: podman is asked which sandboxes run only when a container monitor
on this machine could be running one of that root."""

from __future__ import annotations

from pathlib import Path

import pytest

from chtop_tasks.sandbox import running


def fake_proc(tmp_path: Path, processes: dict[int, tuple[bytes, list[bytes]]]) -> Path:
    proc = tmp_path / "proc"
    for pid, (comm, argv) in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_bytes(comm + b"\n")
        (proc / str(pid) / "cmdline").write_bytes(b"".join(word + b"\0" for word in argv))
    (proc / "self").mkdir(parents=True, exist_ok=True)
    return proc


def conmon(name: bytes, flag: bytes = b"-n") -> tuple[bytes, list[bytes]]:
    return b"conmon", [b"/usr/bin/conmon", b"--api-version", b"1", b"-c", b"0123abcd", flag, name, b"-r", b"crun"]


def test_podman_is_asked_only_when_a_monitor_could_run_a_sandbox_of_that_root(tmp_path):
    root = Path("/g/dev")
    others = {1: (b"bash", [b"bash"]), 2: conmon(b"chtop-other-run-1a2b3c"), 3: conmon(b"postgres"),
              4: (b"conmon", [])}                        # a zombie: no command line

    assert not running.may_run_sandbox_of(root, fake_proc(tmp_path / "a", others))
    for number, extra in enumerate((conmon(b"chtop-dev-claude-0a0b0c"), conmon(b"chtop-dev-run-0a0b0c", b"--name"),
                  (b"conmon", [b"/usr/bin/conmon", b"-c", b"id"]),          # no name on its command line
                  (b"conmonrs", [b"/usr/bin/conmonrs", b"--runtime", b"crun"]))):
        assert running.may_run_sandbox_of(root, fake_proc(tmp_path / str(number), {**others, 9: extra}))
    assert running.may_run_sandbox_of(root, tmp_path / "no-proc-here")
    assert running.container_name_prefix("my dev") == "chtop-my-dev-"


def test_sandboxes_in_runs_no_podman_when_no_monitor_could_run_one(monkeypatch, tmp_path):
    def no_podman(*args, **kwargs):
        raise AssertionError("podman was asked")
    monkeypatch.setattr(running.subprocess, "run", no_podman)
    assert running.sandboxes_in(tmp_path, tmp_path / "zz-no-sandbox-is-named-so") == []
    monkeypatch.setattr(running, "may_run_sandbox_of", lambda root: True)
    with pytest.raises(AssertionError, match="podman was asked"):
        running.sandboxes_in(tmp_path, tmp_path / "zz-no-sandbox-is-named-so")
