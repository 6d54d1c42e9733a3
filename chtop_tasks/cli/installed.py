"""Which clone this Python's chtop install points at, and what ``./bootstrap`` says when it moves it.

``./bootstrap`` installs chtop editable (``pip install -e``): this machine's ``inv``, ``invoke`` and
``chtop`` then run the clone it was run from.  Run from a second clone, it points them there; that
is said, with the clone it was and the command that points it back, never done silently.  It is not
refused: bootstrap also runs unattended (``host.add`` runs a host's own, and CI), and trying another
clone's chtop is a reason to run it there.

Standard library only, and runnable as a script (``python3 chtop_tasks/cli/installed.py CLONE``):
bootstrap asks it before chtop is installed, with the Python it installs into.
"""

from __future__ import annotations

import json
import os
import site
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

DIST_NAME = "chtop"


def site_dirs() -> list[str]:
    """Where this Python's installs live (never the current directory, whose own ``chtop.egg-info``
    a clone may hold)."""
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    return list(dict.fromkeys(paths))


def installed_clone(paths: list[str] | None = None) -> Path | None:
    """The directory chtop is installed from (its ``direct_url.json``, PEP 610), or None when chtop
    is not installed there, or not from a local directory."""
    for dist in metadata.distributions(name=DIST_NAME, path=paths if paths is not None else site_dirs()):
        text = dist.read_text("direct_url.json")
        try:
            url = urlparse(json.loads(text)["url"]) if text else None
        except (ValueError, KeyError, TypeError):
            url = None
        if url is not None and url.scheme == "file":
            return Path(unquote(url.path))
    return None


def same_dir(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normpath(a) == os.path.normpath(b)


def move_notice(before: Path | None, clone: Path) -> str:
    """What bootstrap says after it installed ``clone`` where ``before`` was installed: nothing when
    it was none or the same clone."""
    if before is None or same_dir(before, clone):
        return ""
    gone = "" if before.is_dir() else " (no longer there)"
    back = (f"cd {before} && ./bootstrap" if not gone else "run ./bootstrap in the clone you want")
    return (f"bootstrap: this machine's chtop install now runs {clone}; it ran {before}{gone}.\n"
            f"  inv, invoke and chtop start from this clone's code (inside a workspace, inv then runs that\n"
            f"  checkout's own tasks), and stop working if this clone is removed. To point them back: {back}")


if __name__ == "__main__":
    print(move_notice(installed_clone(), Path(sys.argv[1])))
