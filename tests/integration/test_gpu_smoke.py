"""The GPU check: skips without devices; its compute comparison can fail."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chtop_tasks.cli import nox_sessions as gpu_smoke
from chtop_tasks.core.errors import UsageError
from chtop_tasks.incontainer import gpu_check

REPO = Path(__file__).resolve().parents[2]
no_gpu = pytest.mark.skipif(bool(gpu_check.device_nodes()), reason="this machine has NVIDIA device nodes")


@no_gpu
def test_check_script_standalone_skips_without_devices():
    out = subprocess.run([sys.executable, str(REPO / "chtop_tasks" / "incontainer" / "gpu_check.py")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == gpu_check.SKIP
    assert "SKIP: no NVIDIA device nodes (/dev/nvidia*)" in out.stdout


@no_gpu
def test_nox_gpu_smoke_skips_saying_why(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-s", "gpu_smoke",
                          "--", "--name", "dev"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "Session gpu_smoke skipped: no NVIDIA device nodes (/dev/nvidia*)" in out.stderr


def fake_nvcc(tmp_path: Path, printed: str) -> Path:
    """An 'nvcc' whose 'compiled kernel' prints ``printed``: exercises the comparison."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        # usage: nvcc -o EXE SRC
        printf '#!/bin/sh\\necho "{printed}"\\n' > "$2"
        chmod +x "$2"
        """))
    nvcc.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("value, passed", [(gpu_check.EXPECTED, True), (gpu_check.EXPECTED - 1, False)])
def test_kernel_result_is_compared(tmp_path, monkeypatch, capsys, value, passed):
    monkeypatch.setenv("PATH", f"{fake_nvcc(tmp_path, f'RESULT {value}')}:{os.environ['PATH']}")
    monkeypatch.setattr(gpu_check, "device_nodes", lambda: ["/dev/nvidia0"])
    monkeypatch.setitem(sys.modules, "cupy", None)  # cupy "not installed": the nvcc path
    assert gpu_check.main() == (0 if passed else 1)
    out = capsys.readouterr().out
    assert "cupy         unavailable" in out
    assert ("kernel       PASS" if passed else "kernel       FAIL") in out


def test_no_cupy_no_nvcc_is_a_failure_not_a_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gpu_check, "device_nodes", lambda: ["/dev/nvidia0"])
    monkeypatch.setattr(gpu_check.os, "access", lambda *a: False)
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert gpu_check.main() == 1
    assert "no compute check was possible" in capsys.readouterr().out


def test_posargs():
    assert gpu_smoke.parse_args(["--name", "dev"]).name == "dev"
    assert gpu_smoke.parse_args([]).name is None
    with pytest.raises(UsageError, match="usage: nox -s gpu_smoke"):
        gpu_smoke.parse_args(["--bogus"])


def test_check_command_carries_the_script_inline():
    argv = gpu_smoke.check_command()
    assert argv[:2] == ["python3", "-c"] and "def check_cupy" in argv[2]
