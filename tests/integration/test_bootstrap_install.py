"""./bootstrap's check of which clone chtop is installed from, run as bootstrap runs it (real venvs)."""

import os
import subprocess
import sys
from pathlib import Path

from test_installed import fake_install

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_bootstraps_own_call_answers_in_a_venv_from_any_directory_and_with_pythonsafepath(tmp_path):
    """As bootstrap runs it: the script, with the Python it installs into (a venv here, whose site
    dir holds an install of another clone), from the clone it installs, PYTHONSAFEPATH set as a
    workspace's .envrc sets it.  The clone's own metadata in the current dir is not the install's."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    other = tmp_path / "other-clone"
    other.mkdir()
    fake_install(Path(site_dir), other)
    call = [str(python), "chtop_tasks/cli/installed.py", str(REPO_ROOT)]
    assert " ".join(['"$PY"', *call[1:2], '"$PWD"']) in (REPO_ROOT / "bootstrap").read_text()
    env = dict(os.environ, PYTHONSAFEPATH="1")
    out = subprocess.run(call, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert f"now runs {REPO_ROOT}; it ran {other}." in out
    fake = tmp_path / "venv2"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fake)], check=True)
    out = subprocess.run([str(fake / "bin" / "python"), *call[1:]], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""                                        # not installed there yet: nothing to say
