"""A command the host finds but the sandbox cannot see is named at launch, with the fix."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from chtop_tasks.sandbox.mounts import MountPlan
from chtop_tasks.sandbox.visible import files_run, unseen_note


def plan_seeing(*trees: Path) -> MountPlan:
    plan = MountPlan()
    plan.add("/usr", "/usr", "ro", "host toolchain")
    for tree in trees:
        plan.add(tree, tree, "ro", "fs-allow")
    return plan


def script(path: Path, first_line: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{first_line}\necho hi\n")
    path.chmod(0o755)
    return path


def test_a_uv_tool_whose_interpreter_is_hidden_is_named_with_the_fix(tmp_path):
    """As `uv tool install` lays it out: bin/kimi a link to the tool's script, whose #! names the tool
    venv's python, a link into uv's own interpreters (not mounted)."""
    seen, hidden = tmp_path / "local", tmp_path / "uv-python"
    real_python = script(hidden / "cpython-3.13" / "bin" / "python3.13", "#!/bin/sh")
    venv_python = seen / "tools" / "kimi" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(real_python)
    tool = script(seen / "tools" / "kimi" / "bin" / "kimi", f"#!{venv_python}")
    (seen / "bin").mkdir()
    (seen / "bin" / "kimi").symlink_to(tool)
    search = f"{seen / 'bin'}:/usr/bin"
    assert files_run("kimi", search)[:4] == [seen / "bin" / "kimi", tool, venv_python, real_python]
    note = unseen_note("kimi", plan_seeing(seen), search)
    assert note is not None and str(real_python) in note, note
    assert f"ro {real_python.parent}" in note and "sandbox/fs-allow.txt" in note and "/usr/local" in note
    assert unseen_note("kimi", plan_seeing(seen, hidden), search) is None        # once fs-allow has it


def test_a_command_under_usr_or_run_through_env_is_seen(tmp_path):
    tool = script(tmp_path / "bin" / "tool", "#!/usr/bin/env -S sh -e")
    search = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    assert unseen_note("tool", plan_seeing(tmp_path), search) is None
    assert unseen_note("sh", plan_seeing(), "/usr/bin") is None
    assert unseen_note("tool", plan_seeing(), search).startswith(f"tool: {tool} is not inside the sandbox")
    assert unseen_note("no-such-command-here", plan_seeing(), search) is None   # the sandbox says so itself


def test_a_fifo_planted_as_the_command_is_never_waited_on(tmp_path):
    (tmp_path / "bin").mkdir()
    fifo = tmp_path / "bin" / "tool"
    os.mkfifo(fifo, 0o755)
    done = []
    worker = threading.Thread(target=lambda: done.append(files_run("tool", str(tmp_path / "bin"))), daemon=True)
    worker.start()
    worker.join(10)
    assert done == [[fifo]], "reading the command's first line waited on a FIFO"
