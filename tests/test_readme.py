"""README.md documents every task `inv --list` shows, and its quick start is the real one."""

import re
import subprocess
import sys

from conftest import REPO_ROOT


def listed_tasks() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "invoke", "--list", "--list-format", "flat"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [m.group(1) for line in out.splitlines() if (m := re.match(r"^  (\S+)", line))]


def test_every_task_is_documented_with_an_example():
    readme = (REPO_ROOT / "README.md").read_text()
    tasks = listed_tasks()
    assert len(tasks) >= 20
    missing = [t for t in tasks if not re.search(rf"inv {re.escape(t)}\b", readme)]
    assert missing == []


def test_quick_start_is_two_commands_and_ci_runs_the_test_one():
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["./bootstrap && inv demo", "./bootstrap && nox -s tests"]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "./bootstrap" in ci and "nox -s tests" in ci
