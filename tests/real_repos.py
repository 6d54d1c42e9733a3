"""The real CHORD repos (git bundles in ``../shared/real-repos/``) as local bare remotes for tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
NAMES = ("pipmake", "ksgpu", "pirate")


def bundles_dir() -> Path:
    """``$CHTOP_REAL_REPOS``, else ``../shared/real-repos`` beside this checkout."""
    return Path(os.environ.get("CHTOP_REAL_REPOS") or REPO_ROOT.parent / "shared" / "real-repos")


def bare_remotes_from_bundles(dest: Path) -> dict[str, Path]:
    """``dest/<name>.git``: a bare clone of each bundle (all branches); skip when they are absent."""
    found = bundles_dir()
    missing = [name for name in NAMES if not (found / f"{name}.bundle").is_file()]
    if missing:
        pytest.skip(f"no real-repo bundles ({', '.join(missing)}) in {found} (set $CHTOP_REAL_REPOS)")
    dest.mkdir(parents=True, exist_ok=True)
    remotes = {}
    for name in NAMES:
        bare = dest / f"{name}.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(found / f"{name}.bundle"), str(bare)],
                       check=True, capture_output=True, stdin=subprocess.DEVNULL)
        remotes[name] = bare
    return remotes
