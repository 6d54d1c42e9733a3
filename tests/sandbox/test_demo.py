"""`inv demo`, the README's first command, runs end to end."""

import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, git


@pytest.mark.slow
@pytest.mark.podman   # its sandbox step runs a probe in a container
def test_demo_runs_the_whole_workflow(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "invoke", "demo", "--dir", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for step in ("## 3. toplevel.init", "## 4. worktree.create", "## 7. git.rebase-down", "## 9. The egress proxy", "## 10. worktree.delete"):
        assert step in out
    assert "nothing to do" in out                                  # init is idempotent
    assert "dev/mathcore is 1 commit ahead of top/mathcore (main branch)" in out
    assert "dev/mathapp is 1 commit behind top/mathapp (main branch)" in out
    for check, answer in [
        (r"read this worktree \(\S+/ch/dev\)", "can"),
        (r"write a file in a repo of this worktree", "can"),
        (r"read /etc/shadow", "cannot"),
        (r"write the toplevel's \S+/tasks.py", "cannot"),
        (r"connect to 1.1.1.1:443 directly", "cannot"),
        (r"resolve example.com with DNS", "cannot"),
        (r"CONNECT github.com:443 via the proxy \(not allowed\)", "HTTP/1.1 403 Forbidden"),
    ]:
        assert re.search(rf"^  {check}\s+{re.escape(answer)}", out, re.M), check
    allowed = re.search(r"^  CONNECT api.anthropic.com:443 via the proxy \(allowed\)\s+(.*)$", out, re.M).group(1)
    assert allowed.startswith("HTTP/1.1 200") or (                   # a machine without internet: why
        allowed.startswith("HTTP/1.1 502 Bad Gateway: allowed, but the proxy could not reach it from this machine ("))
    assert proc.stderr.count("running as root: rootful podman") <= 1, proc.stderr  # said once, not each launch
    assert "committed inside the sandbox" in out
    assert re.search(r"on the host: [0-9a-f]+ mathapp: notes, written in the sandbox \(chtop demo\)", out)
    assert "github.com" in out.split("inv net.pending", 1)[1]
    top = tmp_path / "ch" / "top"
    assert not (tmp_path / "ch" / "dev").exists()
    assert "return b + a" in (top / "mathcore" / "mathcore" / "__init__.py").read_text()   # merged up
    assert git(top / "mathcore", "log", "-1", "--format=%s") == "mathcore: commute"
    # the toplevel's venv was built and imports both samples
    venv_python = top / ".venv" / "bin" / "python"
    check = subprocess.run([str(venv_python), "-c", "import mathapp; print(mathapp.total([1, 2, 3]))"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert check.stdout.strip() == "6", check.stderr
