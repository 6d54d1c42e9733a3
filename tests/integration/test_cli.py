"""The command lines themselves: `chtop` and `inv` exit codes, and output into a closed pipe."""

import os
import subprocess
import sys

from conftest import REPO_ROOT

from chtop_tasks.sandbox import format_sandbox_table

CHTOP = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
         "from chtop_tasks.cli.chtop import main; main()", str(REPO_ROOT)]


def chtop(cwd, *args):
    return subprocess.run([*CHTOP, *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)


def test_a_missing_name_exits_2_for_inv_and_chtop(group):
    for argv in (["worktree.create"], ["worktree.delete"], ["worktree.create", "--no-venv"]):
        result = group.inv(group.toplevel, *argv, check=False)
        assert result.returncode == 2, result.stderr
        assert f"{argv[0]} needs --name NAME" in result.stderr
        assert chtop(group.toplevel, *argv).returncode == 2
    assert not group.path("dev").exists()


def test_chtop_parse_errors_exit_2(tmp_path):
    result = chtop(tmp_path, "--no-such-flag")
    assert result.returncode == 2 and "No idea what '--no-such-flag' is" in result.stderr
    assert chtop(tmp_path, "worktree.create", "--nme", "x").returncode == 2
    assert chtop(tmp_path, "--list").returncode == 0


def test_chtop_list_into_a_closed_pipe_ends_quietly(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)               # `| head` that already left: every write gets EPIPE
    try:
        result = subprocess.run([*CHTOP, "--list"], cwd=tmp_path, stdout=write_end, stderr=subprocess.PIPE,
                                text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode == 1


def test_sbox_ps_table_has_a_header_row():
    rows = [{"name": "chtop-dev-run-abc123", "worktree": "dev", "purpose": "run", "network": "proxy",
             "status": "Up 3 seconds", "limits": "memory 8G pids 8192", "command": "sleep 60"}]
    header, row = format_sandbox_table(rows)
    assert header.split() == ["NAME", "WORKTREE", "PURPOSE", "NETWORK", "STATUS", "LIMITS", "COMMAND"]
    assert header.index("LIMITS") == row.index("memory 8G")
    assert row.startswith("chtop-dev-run-abc123  dev ") and row.endswith("sleep 60")
    assert header.index("STATUS") == row.index("Up 3 seconds")


def test_shell_completion_for_chtop_and_inv(group, tmp_path):
    script = chtop(tmp_path, "--print-completion-script", "bash")
    assert script.returncode == 0 and "complete -F _complete_chtop" in script.stdout
    tasks = chtop(tmp_path, "--complete", "--", "chtop", "net.").stdout.split()
    assert "net.allow" in tasks and "worktree.create" in tasks
    inv = group.inv(group.toplevel, "--print-completion-script", "bash")
    assert "complete -F _complete_invoke" in inv.stdout
