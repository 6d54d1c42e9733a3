"""`inv demo`, the README's first command, runs end to end."""

import subprocess
import sys

import pytest

from conftest import REPO_ROOT, git


@pytest.mark.slow
def test_demo_runs_the_whole_workflow(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "invoke", "demo", "--dir", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for step in ("## 3. toplevel.init", "## 4. worktree.create", "## 7. git.rebase-down", "## 9. worktree.delete"):
        assert step in out
    assert "nothing to do" in out                                  # init is idempotent
    assert "dev/mathcore is 1 commit ahead of top/mathcore (main branch)" in out
    assert "dev/mathapp is 1 commit behind top/mathapp (main branch)" in out
    top = tmp_path / "ch" / "top"
    assert not (tmp_path / "ch" / "dev").exists()
    assert "return b + a" in (top / "mathcore" / "mathcore" / "__init__.py").read_text()   # merged up
    assert git(top / "mathcore", "log", "-1", "--format=%s") == "mathcore: commute"
    # the toplevel's venv was built and imports both samples
    venv_python = top / ".venv" / "bin" / "python"
    check = subprocess.run([str(venv_python), "-c", "import mathapp; print(mathapp.total([1, 2, 3]))"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert check.stdout.strip() == "6", check.stderr
